//! The network declaration: a component that imports `wasi:http/outgoing-handler` should say
//! which hosts it wants in a `toolcell:network` custom section (see `toolcell_net::SECTION`).
//! A declaration that is there must be well formed (a failed check); one that is missing is a
//! warning, not a failure: the policy decides every request either way, the declaration only
//! lets `toolcell tools add` show operators what to expect.

use toolcell_net::Declaration;

use crate::Report;

/// The import that reaches the network.
const OUTGOING_HANDLER: &str = "wasi:http/outgoing-handler@";

/// Check the declaration of `wasm` (the component of `tool`, importing `imports`): a check in
/// the `load` group when it imports `wasi:http` or declares hosts, a warning when it imports
/// `wasi:http` without declaring any.
pub(crate) fn check_declaration(report: &mut Report, tool: &str, wasm: &[u8], imports: &[String]) {
    let imports_http = imports.iter().any(|import| import.starts_with(OUTGOING_HANDLER));
    let name = "declares the hosts it wants (`toolcell:network`)";
    match Declaration::from_wasm(wasm) {
        Err(error) => report.record("load", name, &[error.to_string()], String::new()),
        Ok(None) if imports_http => {
            report.record("load", name, &[], "no declaration (see the warning)".to_owned());
            report.warnings.push(format!(
                "`{tool}` imports `wasi:http/outgoing-handler` but declares no hosts: add a `{}` custom section, one `SCHEME://HOST[:PORT]` per line (in Rust, `toolcell_sdk::declare_hosts!`), so that `toolcell tools add` shows operators the hosts it wants and the policy lines that grant them",
                toolcell_net::SECTION
            ));
        }
        Ok(None) => {}
        Ok(Some(declaration)) => {
            let hosts: Vec<String> = declaration.hosts.iter().map(ToString::to_string).collect();
            let listed = if hosts.is_empty() { "no host".to_owned() } else { hosts.join(", ") };
            report.record("load", name, &[], format!("declares {listed}"));
            if !imports_http {
                report.warnings.push(format!(
                    "`{tool}` declares hosts ({listed}) but does not import `wasi:http/outgoing-handler`, so it cannot reach them; remove the `{}` section, or check that the build kept the import",
                    toolcell_net::SECTION
                ));
            }
        }
    }
}

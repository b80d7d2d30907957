//! Embed toolcell in a platform: a governed host over a workspace, a session per agent, calls,
//! and what a refusal looks like. Run it with `cargo run -p toolcell-host --example embed`.

use std::io::Write as _;
use std::sync::Arc;

use toolcell_host::{Access, Approver, HostBuilder};

/// The platform's approval hook for `ask` rules: here, approve everything under `release/`.
struct ReleaseManager;

impl Approver for ReleaseManager {
    fn approve(&self, _role: &str, _access: Access, path: &str, _rule: &str) -> bool {
        path == "release" || path.starts_with("release/")
    }
}

/// Build a host, open a session, write a file and be refused a docs/ edit.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::temp_dir().join(format!("toolcell-embed-example-{}", std::process::id()));
    let workspace = base.join("repo");
    std::fs::create_dir_all(workspace.join("docs"))?;
    std::fs::write(workspace.join("docs/guide.md"), "# Guide\n")?;

    let host = HostBuilder::new(&workspace).state_dir(base.join("state")).approver(Arc::new(ReleaseManager)).build()?;
    let session = host.session("impl", "example-session")?.with_owner("CHAIN-001");
    let mut out = std::io::stdout().lock();
    let names: Vec<&str> = session.tools().iter().map(|tool| tool.name.as_str()).collect();
    writeln!(out, "role `{}` may call: {}", session.role(), names.join(", "))?;

    let written = session.call("write_file", r#"{"path": "src/lib.rs", "content": "pub fn answer() -> u32 { 42 }\n"}"#)?;
    let output = written.output.map_err(|error| format!("write_file failed: {error}"))?;
    writeln!(out, "{} (audit call id {})", output.text, written.call_id)?;

    let refused = session.call("edit_file", r##"{"path": "docs/guide.md", "old_string": "# Guide", "new_string": "# Mine"}"##)?;
    let error = refused.output.err().ok_or("editing docs/ must be refused for `impl`")?;
    writeln!(out, "refused as expected: {error}")?;
    assert_eq!(std::fs::read_to_string(workspace.join("docs/guide.md"))?, "# Guide\n");

    std::fs::remove_dir_all(&base)?;
    Ok(())
}

//! What `toolcell tools add` says about a component's network access: the rules the policy
//! has for it, and the hosts it declares (its `toolcell:network` section), each beside what
//! the policy says about it for every role that may call the tool, with the policy lines that
//! would grant the rest. A declaration grants nothing.

use std::io::Write;

use toolcell_net::{Declaration, DeclaredHost};
use toolcell_policy::{NetworkDecision, NetworkEffect, Policy};
use toolcell_runtime::Runtime;

/// For a component importing `wasi:http` or declaring hosts: what it wants, and what the
/// current policy lets it reach, by role.
pub(super) fn show_network(out: &mut impl Write, runtime: &Runtime, imports: &[String], tool: &str, wasm: &[u8]) -> anyhow::Result<()> {
    let imports_http = imports.iter().any(|import| import.starts_with("wasi:http/outgoing-handler@"));
    let declared = Declaration::from_wasm(wasm);
    if !imports_http && matches!(declared, Ok(None)) {
        return Ok(());
    }
    let policy = runtime.policy();
    if imports_http {
        writeln!(out, "\nit wants network access (it imports `wasi:http/outgoing-handler`); the policy lets it reach:")?;
        let mut granted = false;
        for role in policy.iter().flat_map(|policy| policy.roles()) {
            for rule in role.network().rules().iter().filter(|rule| rule.is_for_tool(tool)) {
                let effect = if rule.effect == NetworkEffect::Allow { "allows" } else { "denies" };
                writeln!(out, "  role `{}`: rule `{}` {effect} {}", role.name(), rule.id, rule.summary())?;
                granted |= rule.effect == NetworkEffect::Allow;
            }
        }
        if !granted {
            writeln!(out, "  no host: every request is refused until a `[[roles.ROLE.network]]` rule allows it")?;
        }
    }
    match declared {
        Err(error) => writeln!(out, "\nits declaration of the hosts it wants cannot be read: {error}")?,
        Ok(None) => writeln!(out, "\nit declares no hosts (no `{}` section): ask its author which hosts it needs", toolcell_net::SECTION)?,
        Ok(Some(declaration)) => show_declared(out, policy.as_deref(), tool, &declaration)?,
    }
    Ok(())
}

/// Each declared host, and for each role that may call `tool`, whether the policy allows it;
/// then the lines that would grant what it does not.
fn show_declared(out: &mut impl Write, policy: Option<&Policy>, tool: &str, declaration: &Declaration) -> anyhow::Result<()> {
    writeln!(out, "\nit declares the hosts it wants (declaring grants nothing: the policy decides every request):")?;
    if declaration.hosts.is_empty() {
        writeln!(out, "  none")?;
        return Ok(());
    }
    let roles: Vec<_> = policy.iter().flat_map(|policy| policy.roles()).filter(|role| role.may_call(tool)).collect();
    let mut missing: Vec<(&str, Vec<&DeclaredHost>)> = roles.iter().map(|role| (role.name(), Vec::new())).collect();
    for host in &declaration.hosts {
        writeln!(out, "  {host}")?;
        for (role, missing) in roles.iter().zip(missing.iter_mut()) {
            match host.decide(role.name(), tool, role.network()) {
                NetworkDecision::Allowed(rule) => match host.address_refusal(rule) {
                    // The host is a checked address and the rule the operator's: nothing to escape.
                    Some(reason) => writeln!(out, "    role `{}`: refused: {reason}", role.name())?,
                    None => {
                        writeln!(out, "    role `{}`: allowed by rule `{}` (policy line {})", role.name(), rule.id, rule.line)?;
                        for deny in role.network().denied_within(&host.destination(tool)) {
                            writeln!(out, "      except the names the deny rule `{}` (policy line {}) refuses", deny.id, deny.line)?;
                        }
                    }
                },
                NetworkDecision::Refused { rule: Some(rule), .. } => writeln!(
                    out,
                    "    role `{}`: refused by the deny rule `{}` (policy line {}); change that rule to grant it",
                    role.name(),
                    rule.id,
                    rule.line
                )?,
                NetworkDecision::Refused { rule: None, .. } => {
                    writeln!(out, "    role `{}`: refused (no network rule allows it)", role.name())?;
                    missing.1.push(host);
                }
            }
        }
    }
    // Ids are unique across the policy, path rules included.
    let taken = |id: &str| policy.is_some_and(|policy| policy.has_rule_id(id));
    if roles.is_empty() {
        let hosts: Vec<&DeclaredHost> = declaration.hosts.iter().collect();
        write!(
            out,
            "no role of the policy may call `{tool}` yet; give it to a role, and grant that role the hosts with:\n\n{}",
            toolcell_net::grant_lines("ROLE", tool, &hosts, taken)
        )?;
        return Ok(());
    }
    let missing: Vec<_> = missing.into_iter().filter(|(_, hosts)| !hosts.is_empty()).collect();
    if !missing.is_empty() {
        writeln!(out, "to let the roles reach the declared hosts the policy refuses, add to the policy:")?;
        for (role, hosts) in missing {
            write!(out, "\n{}", toolcell_net::grant_lines(role, tool, &hosts, taken))?;
        }
    }
    Ok(())
}

/// For `tools update`: the declared hosts the new build adds and drops (nothing when neither
/// build declares any).
pub(super) fn show_declared_changes(out: &mut impl Write, old_wasm: &[u8], new_wasm: &[u8]) -> anyhow::Result<()> {
    let hosts = |wasm: &[u8]| -> Result<Vec<String>, String> {
        match Declaration::from_wasm(wasm) {
            Ok(declaration) => Ok(declaration.into_iter().flat_map(|declaration| declaration.hosts).map(|host| host.to_string()).collect()),
            Err(error) => Err(error.to_string()),
        }
    };
    match (hosts(old_wasm), hosts(new_wasm)) {
        (Ok(old), Ok(new)) if old == new => {
            if !new.is_empty() {
                writeln!(out, "  declared hosts: unchanged")?;
            }
        }
        (Ok(old), Ok(new)) => {
            for host in new.iter().filter(|host| !old.contains(host)) {
                writeln!(out, "  declared hosts: + {host}")?;
            }
            for host in old.iter().filter(|host| !new.contains(host)) {
                writeln!(out, "  declared hosts: - {host}")?;
            }
        }
        (_, Err(reason)) => writeln!(out, "  declared hosts: cannot be read: {reason}")?,
        (Err(_), Ok(new)) => writeln!(out, "  declared hosts: {}", if new.is_empty() { "none".to_owned() } else { new.join(", ") })?,
    }
    Ok(())
}

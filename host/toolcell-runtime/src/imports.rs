//! What a tool component may import: exactly the `tool-component` world of `wit/tool.wit`.
//!
//! The host links only these interfaces, and `wasi:http`'s outgoing requests (`wasi:sockets`,
//! name lookup and everything else are never linked),
//! and refuses at load a component importing anything else, naming the import, before any
//! instance exists.

use std::collections::BTreeMap;

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::Error;

/// `(package, interface)` of every WASI interface a tool may import, in any `0.2.x` version.
pub(crate) const ALLOWED_WASI: &[(&str, &str)] = &[
    ("wasi:io", "error"),
    ("wasi:io", "poll"),
    ("wasi:io", "streams"),
    ("wasi:clocks", "monotonic-clock"),
    ("wasi:clocks", "wall-clock"),
    ("wasi:random", "random"),
    ("wasi:random", "insecure"),
    ("wasi:random", "insecure-seed"),
    ("wasi:filesystem", "types"),
    ("wasi:filesystem", "preopens"),
    ("wasi:cli", "environment"),
    ("wasi:cli", "exit"),
    ("wasi:cli", "stdin"),
    ("wasi:cli", "stdout"),
    ("wasi:cli", "stderr"),
    ("wasi:cli", "terminal-input"),
    ("wasi:cli", "terminal-output"),
    ("wasi:cli", "terminal-stdin"),
    ("wasi:cli", "terminal-stdout"),
    ("wasi:cli", "terminal-stderr"),
];

/// `wasi:http` interfaces a tool may import (0.2.x): outgoing requests only, each one through
/// the role's network rules. Not in the `tool-component` world, whose guests need no
/// `wasi:http` to build.
pub(crate) const ALLOWED_HTTP: &[(&str, &str)] = &[("wasi:http", "outgoing-handler"), ("wasi:http", "types")];

/// `toolcell:tool` interfaces a tool may import, in any `0.2.x` version.
pub(crate) const ALLOWED_TOOLCELL: &[&str] = &["types", "context", "workflow", "listing"];

/// Refuse `component` if it imports anything outside the `tool-component` world, except what
/// some tool's `stub_imports` (`stub_rules`, by tool) cover: those imports are returned, to be
/// linked as stubs (and checked against the tool's own rules once it names itself).
pub(crate) fn check(
    engine: &Engine,
    origin: &str,
    component: &Component,
    stub_rules: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, Error> {
    let mut stubbed = Vec::new();
    for (name, _) in component.component_type().imports(engine) {
        if name.starts_with("toolcell:tool/") && !name.contains("@0.2.") {
            return Err(Error::Contract { origin: origin.to_owned(), import: name.escape_default().to_string() });
        }
        if is_allowed(name) {
            continue;
        }
        if !name.starts_with("toolcell:") && toolcell_policy::any_covers(stub_rules, name) {
            stubbed.push(name.to_owned());
            continue;
        }
        return Err(Error::ForbiddenImport { origin: origin.to_owned(), import: name.escape_default().to_string() });
    }
    Ok(stubbed)
}

fn is_allowed(import: &str) -> bool {
    let Some((path, version)) = import.split_once('@') else {
        return false;
    };
    let Some((package, interface)) = path.split_once('/') else {
        return false;
    };
    if package == "toolcell:tool" {
        return version.starts_with("0.2.") && ALLOWED_TOOLCELL.contains(&interface);
    }
    version.starts_with("0.2.") && (ALLOWED_WASI.contains(&(package, interface)) || ALLOWED_HTTP.contains(&(package, interface)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_imports_table() {
        let table = [
            ("wasi:filesystem/types@0.2.0", true),
            ("wasi:filesystem/types@0.2.12", true),
            ("wasi:cli/environment@0.2.6", true),
            ("toolcell:tool/context@0.2.0", true),
            ("toolcell:tool/types@0.2.3", true),
            ("toolcell:tool/workflow@0.2.0", true),
            ("toolcell:tool/listing@0.2.2", true),
            ("toolcell:tool/listing@0.3.0", false),
            ("toolcell:tool/tool@0.2.0", false),
            ("toolcell:tool/context@0.1.0", false),
            ("toolcell:tool/context@0.3.0", false),
            ("wasi:sockets/tcp@0.2.0", false),
            ("wasi:sockets/instance-network@0.2.0", false),
            ("wasi:http/outgoing-handler@0.2.0", true),
            ("wasi:http/types@0.2.12", true),
            ("wasi:http/incoming-handler@0.2.0", false),
            ("wasi:http/outgoing-handler@0.3.0", false),
            ("wasi:sockets/ip-name-lookup@0.2.0", false),
            ("wasi:sockets/udp@0.2.0", false),
            ("wasi:filesystem/types@0.3.0", false),
            ("wasi:filesystem/types", false),
            ("filesystem", false),
            ("wasi:filesystem/typesx@0.2.0", false),
        ];
        for (import, expected) in table {
            assert_eq!(is_allowed(import), expected, "{import}");
        }
    }

    /// The list above and the `tool-component` world in wit/tool.wit must agree.
    #[test]
    fn allowed_list_matches_the_wit_world() {
        let wit = include_str!("../../../wit/tool.wit");
        let world = wit.split("world tool-component").nth(1).expect("the world is in wit/tool.wit");
        let mut declared: Vec<(String, String)> = world
            .lines()
            .filter_map(|line| line.trim().strip_prefix("import wasi:"))
            .map(|rest| {
                let (path, _) = rest.split_once('@').expect("versioned import");
                let (package, interface) = path.split_once('/').expect("package/interface");
                (format!("wasi:{package}"), interface.to_owned())
            })
            .collect();
        declared.sort();
        let mut allowed: Vec<(String, String)> =
            ALLOWED_WASI.iter().map(|(package, interface)| ((*package).to_owned(), (*interface).to_owned())).collect();
        allowed.sort();
        assert_eq!(declared, allowed);
    }
}

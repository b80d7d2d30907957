//! Which imports a tool's `[plugins.NAME] stub_imports` patterns let it link as inert stubs.

use std::collections::BTreeMap;

/// Whether `pattern` (`namespace:package/interface` or `namespace:package/*`, no version)
/// covers `import` (`wasi:sockets/tcp@0.2.9`).
pub fn covers(pattern: &str, import: &str) -> bool {
    let path = import.split_once('@').map_or(import, |(path, _)| path);
    match pattern.strip_suffix("/*") {
        Some(package) => path.split_once('/').is_some_and(|(import_package, _)| import_package == package),
        None => path == pattern,
    }
}

/// Whether any tool's `stub_imports` cover `import`: such an import may link as a stub until
/// the component names its tool, which must then be the one that asked.
pub fn any_covers(rules: &BTreeMap<String, Vec<String>>, import: &str) -> bool {
    rules.values().flatten().any(|pattern| covers(pattern, import))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_cover_interfaces_of_any_version() {
        let table = [
            ("wasi:sockets/*", "wasi:sockets/tcp@0.2.9", true),
            ("wasi:sockets/*", "wasi:sockets/instance-network@0.2.0", true),
            ("wasi:sockets/tcp", "wasi:sockets/tcp@0.2.9", true),
            ("wasi:sockets/tcp", "wasi:sockets/tcp-create-socket@0.2.9", false),
            ("wasi:sockets/*", "wasi:socketsx/tcp@0.2.9", false),
            ("wasi:sockets/*", "wasi:http/types@0.2.9", false),
            ("wasi:http/*", "wasi:http/outgoing-handler@0.2.0", true),
        ];
        for (pattern, import, expected) in table {
            assert_eq!(covers(pattern, import), expected, "{pattern} {import}");
        }
    }
}

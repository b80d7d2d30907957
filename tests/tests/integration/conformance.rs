//! The conformance suite on the built-in tools (which pass) and on broken components (which
//! fail, each with a message that says what went wrong).

use toolcell_conformance::{Options, Report, check};
use toolcell_tests::{guest_program, shared_cache_dir};

fn run(origin: &str, wasm: &[u8]) -> Report {
    check(origin, wasm, &Options { cache_dir: Some(shared_cache_dir()), ..Options::default() })
}

fn failed(report: &Report) -> Vec<(&str, &str)> {
    report.checks.iter().filter(|check| !check.passed).map(|check| (check.name.as_str(), check.detail.as_str())).collect()
}

#[test]
fn every_built_in_tool_passes() {
    for (name, wasm) in toolcell_builtins::components() {
        let report = run(&format!("builtin:{name}"), wasm);
        assert!(report.passed(), "{}", report.render());
        assert_eq!(report.tool.as_deref(), Some(name));
        let behaviour = report.checks.iter().filter(|check| check.group == "behaviour").count();
        assert!(behaviour >= 1, "no behaviour checks for {name}:\n{}", report.render());
        assert!(report.checks.len() >= 8, "{}", report.render());
    }
}

#[test]
fn a_component_that_crashes_and_spins_fails_with_specific_messages() {
    let report = run("misbehave.wasm", guest_program("misbehave"));
    assert!(!report.passed());
    let failed = failed(&report);
    let names: Vec<&str> = failed.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["never traps on schema-generated arguments", "stays within its deadline and memory"], "{}", report.render());
    assert!(failed[0].1.contains(r#"trapped with {"action":"panic"}: the tool `misbehave` crashed"#), "{}", failed[0].1);
    assert!(failed[0].1.contains("it panicked at misbehave/src/lib.rs:"), "{}", failed[0].1);
    assert!(failed[0].1.ends_with("misbehave was asked to panic"), "{}", failed[0].1);
    assert!(failed[1].1.contains(r#"with {"action":"spin"}: `misbehave` ran past its deadline of 2.0 s"#), "{}", failed[1].1);
    assert!(report.render().contains("2 of "), "{}", report.render());
}

#[test]
fn a_component_with_forbidden_imports_fails_to_load_naming_them() {
    let report = run("net_probe.wasm", guest_program("net_probe"));
    assert_eq!(report.checks.len(), 1);
    assert!(!report.checks[0].passed);
    assert!(report.checks[0].detail.contains("wasi:sockets"), "{}", report.checks[0].detail);
}

#[test]
fn a_hostile_component_cannot_pass_the_sandbox_checks_by_escaping() {
    // fs_probe does whatever it is told, but the host keeps it inside: it passes the sandbox
    // checks (the host's guarantee), and its refusals are reported as denied.
    let report = run("fs_probe.wasm", guest_program("fs_probe"));
    let sandbox: Vec<_> = report.checks.iter().filter(|check| check.group == "sandbox").collect();
    assert_eq!(sandbox.len(), 4, "{}", report.render());
    assert!(sandbox.iter().all(|check| check.passed), "{}", report.render());
}

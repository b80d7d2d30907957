//! The adversarial security suite: concrete attack inputs, table-driven, through the built-in
//! tools and through a hostile component (`fs_probe`, which calls `std::fs` directly and
//! believes nothing).
//!
//! Every case runs in a fresh workspace beside `outside/` and `workspace-sibling/` (canaries)
//! and a host-only directory `elsewhere/`, under a policy where `impl` may not read
//! `secrets/**`, may not write `docs/**` or `café/**`. Each case asserts:
//!
//! - its expectation: refused (an error, workspace unchanged), contained (whatever the tool
//!   returns, nothing changed and nothing leaked), a literal name (any file created is inside
//!   the workspace under exactly the name given), or a specific safe result;
//! - no host path, no canary and no hidden secret in any text, structured result or warning;
//! - the audit trail holds the call's record (a refusal's outcome is not `ok`) and one `deny`
//!   record per refusal by the host, and the whole chain verifies;
//! - everything outside the workspace is untouched;
//! - an allowed sibling control (reading and writing `src/`) still works afterwards.
//!
//! `at_least_150_attack_inputs` counts the tables' cases.

mod attack_fourth;
mod boundary;
mod cases;
mod fourth_pass;
mod hardening;

use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use toolcell_runtime::{CallOutcome, CallRequest, Runtime};
use toolcell_tests::{CANARY, Fixture, builtin_runtime_builder, guest_program};
use toolcell_types::ToolErrorKind;

/// The hidden file's content: it must never appear in a result.
const SECRET: &str = "PRIVATE-KEY-material";
/// A file outside the workspace reachable only through a planted hard link.
const ELSEWHERE: &str = "ELSEWHERE-host-only";

/// The suite's policy.
const POLICY: &str = r#"
version = 1

[roles.impl]
tools = ["*"]

[[roles.impl.rules]]
id = "impl-read"
access = ["read", "list"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "impl-write"
access = ["write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "docs-read-only"
access = ["write", "delete"]
paths = ["docs/**", "café/**"]
effect = "deny"

[[roles.impl.rules]]
id = "secrets-hidden"
access = ["read"]
paths = ["secrets/**"]
effect = "deny"
"#;

struct Suite {
    state: tempfile::TempDir,
    runtime: Runtime,
}

fn suite() -> &'static Suite {
    static SUITE: OnceLock<Suite> = OnceLock::new();
    SUITE.get_or_init(|| {
        let state = tempfile::tempdir().expect("state directory");
        let runtime = builtin_runtime_builder()
            .component("test:fs_probe", guest_program("fs_probe"))
            .policy("security-policy.toml", POLICY)
            .audit_dir(state.path())
            .build()
            .unwrap_or_else(|error| panic!("the security runtime does not build: {error}"));
        Suite { state, runtime }
    })
}

/// Cases run so far (for unique session names).
static CASES: AtomicUsize = AtomicUsize::new(0);

/// What a case must end in.
#[derive(Clone, Copy)]
pub enum Expect {
    /// An error of any kind; the workspace unchanged.
    Refused,
    /// Success or an error; for `fs_probe`, every operation failed; the workspace unchanged.
    Contained,
    /// Success or `not-found`; anything created is inside the workspace under exactly this
    /// (workspace-relative) name; nothing else changed.
    Literal(&'static str),
    /// A specific safe result, checked by the function (which may look at the workspace).
    Check(fn(&Fixture, &CallOutcome) -> Result<(), String>),
}

/// One attack input.
pub struct Case {
    /// What it tries.
    pub name: String,
    /// Plants the scene in the standard workspace (may be a no-op).
    pub setup: fn(&Fixture),
    /// The tool called.
    pub tool: &'static str,
    /// Its arguments; `{BASE}` in a string is replaced with the host directory holding the
    /// workspace (for absolute-path attacks).
    pub args: Value,
    /// The outcome required.
    pub expect: Expect,
}

/// The standard workspace: code, docs, a hidden secret, a write-protected accented directory.
fn scene() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "fn main() {}\n");
    fixture.write("docs/guide.md", "# Guide\n");
    fixture.write("secrets/key.pem", SECRET);
    fixture.write("café/menu.txt", "menu\n");
    let elsewhere = fixture.base().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("elsewhere");
    std::fs::write(elsewhere.join("linked.txt"), ELSEWHERE).expect("elsewhere file");
    fixture
}

fn substitute(value: &Value, base: &str) -> Value {
    match value {
        Value::String(text) => Value::String(text.replace("{BASE}", base)),
        Value::Array(items) => Value::Array(items.iter().map(|item| substitute(item, base)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(key, item)| (key.clone(), substitute(item, base))).collect()),
        other => other.clone(),
    }
}

fn call(fixture: &Fixture, session: &str, tool: &str, args: &Value) -> CallOutcome {
    let args = args.to_string();
    suite()
        .runtime
        .call(&CallRequest::new(&fixture.workspace, "impl", session, tool, &args))
        .unwrap_or_else(|error| panic!("host error calling {tool}: {error}"))
}

/// Every text the agent could see from a call.
fn visible_texts(outcome: &CallOutcome) -> Vec<String> {
    let mut texts: Vec<String> = outcome.warnings.clone();
    match &outcome.result {
        Ok(output) => {
            texts.push(output.text.clone());
            texts.extend(output.structured.as_ref().map(Value::to_string));
        }
        Err(error) => texts.push(error.message.clone()),
    }
    texts
}

/// The audit records of one call, from the shared trail.
fn audit_of(call_id: &str) -> Vec<toolcell_audit::Record> {
    let text = std::fs::read_to_string(suite().state.path().join("audit.jsonl")).expect("the audit trail");
    text.lines()
        .filter(|line| line.contains(call_id))
        .map(|line| serde_json::from_str::<toolcell_audit::Record>(line).expect("an audit record"))
        .filter(|record| record.call_id == call_id)
        .collect()
}

/// Run one case and check everything the suite requires of it.
pub fn run(case: &Case) {
    CASES.fetch_add(1, Ordering::Relaxed);
    let fixture = scene();
    (case.setup)(&fixture);
    let before = fixture.snapshot();
    let base = fixture.base().to_string_lossy().into_owned();
    let args = substitute(&case.args, &base);
    let session = format!("sec-{}", CASES.load(Ordering::Relaxed));
    let outcome = call(&fixture, &session, case.tool, &args);
    let context = format!("case `{}`: {} {}", case.name, case.tool, case.args);

    // Nothing from the host or from outside in anything the agent sees.
    for text in visible_texts(&outcome) {
        assert!(!text.contains(&base), "{context}: a host path leaked: {text}");
        assert!(!text.contains(CANARY), "{context}: outside content leaked: {text}");
        assert!(!text.contains(ELSEWHERE), "{context}: host-only content leaked: {text}");
        assert!(!text.contains(SECRET), "{context}: a hidden file leaked: {text}");
    }

    match case.expect {
        Expect::Refused => {
            assert!(
                outcome.result.is_err(),
                "{context}: should be refused, returned {:?}",
                outcome.result.as_ref().map(|output| &output.text)
            );
            assert_eq!(fixture.snapshot(), before, "{context}: the workspace changed");
        }
        Expect::Contained => {
            if case.tool == "fs_probe"
                && let Ok(output) = &outcome.result
            {
                let results = output.structured.as_ref().and_then(Value::as_array).cloned().unwrap_or_default();
                assert!(results.iter().all(|result| result["ok"] == false), "{context}: an operation succeeded: {results:?}");
            }
            assert_eq!(fixture.snapshot(), before, "{context}: the workspace changed");
        }
        Expect::Literal(name) => {
            if let Err(error) = &outcome.result {
                assert!(
                    matches!(error.kind, ToolErrorKind::NotFound | ToolErrorKind::InvalidArgs | ToolErrorKind::Denied),
                    "{context}: unexpected error {error}"
                );
            }
            let after = fixture.snapshot();
            let top = name.split('/').next().unwrap_or(name);
            let changed: Vec<&(String, String)> = after.iter().filter(|entry| !before.contains(entry)).collect();
            for (path, _) in &changed {
                assert!(path == top || path.starts_with(&format!("{top}/")), "{context}: `{path}` changed, only `{name}` may appear");
            }
            if outcome.result.is_ok() && !changed.is_empty() {
                assert!(fixture.root().join(name).exists(), "{context}: `{name}` was not created literally: {changed:?}");
            }
        }
        Expect::Check(check) => {
            if let Err(problem) = check(&fixture, &outcome) {
                panic!("{context}: {problem}");
            }
        }
    }

    // The audit trail has the call and each refusal.
    let records = audit_of(&outcome.call_id);
    let call_record = records.iter().find(|record| matches!(record.kind, toolcell_audit::Kind::Call));
    let call_record = call_record.unwrap_or_else(|| panic!("{context}: no call record in the audit trail"));
    if outcome.result.is_err() {
        assert_ne!(call_record.outcome.as_deref(), Some("ok"), "{context}: a failed call audited as ok");
    }
    let denies = records.iter().filter(|record| record.decision.as_deref() == Some("deny")).count();
    assert!(denies >= outcome.denials.len().min(1), "{context}: {} refusals but {denies} deny records", outcome.denials.len());

    // Outside untouched; the allowed sibling still works.
    fixture.assert_outside_untouched();
    let elsewhere = std::fs::read_to_string(fixture.base().join("elsewhere/linked.txt")).expect("elsewhere file");
    assert_eq!(elsewhere, ELSEWHERE, "{context}: the host-only file changed");
    let read = call(&fixture, &session, "read_file", &serde_json::json!({"path": "src/main.rs"}));
    assert!(
        read.result.as_ref().is_ok_and(|output| output.text.contains("fn main()")),
        "{context}: the control read failed: {:?}",
        read.result
    );
    let write = call(&fixture, &session, "write_file", &serde_json::json!({"path": "src/control.txt", "content": "ok"}));
    assert!(write.result.is_ok(), "{context}: the control write failed: {:?}", write.result);
    assert_eq!(fixture.read_text("src/control.txt"), "ok");
}

/// Run a table, then verify the whole audit chain.
pub fn run_all(cases: &[Case]) {
    for case in cases {
        run(case);
    }
    let text = std::fs::read_to_string(suite().state.path().join("audit.jsonl")).expect("the audit trail");
    toolcell_audit::verify(text.lines()).expect("the audit chain is intact");
}

#[test]
fn at_least_150_attack_inputs() {
    let counts: Vec<(&str, usize)> = cases::TABLES.iter().map(|(name, table)| (*name, table().len())).collect();
    let total: usize = counts.iter().map(|(_, count)| count).sum();
    assert!(total >= 150, "only {total} attack inputs: {counts:?}");
    let _ = std::fs::write(Path::new(env!("CARGO_TARGET_TMPDIR")).join("security-cases.txt"), format!("{total}\n{counts:?}\n"));
}

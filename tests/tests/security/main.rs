//! The adversarial security suite: concrete attack inputs, table-driven, through the built-in
//! tools and through a hostile component (`fs_probe`, which calls `std::fs` directly, and
//! `wasi:filesystem` raw, and believes nothing).
//!
//! The built-in tools' SDK refuses `..` that climbs out and absolute paths itself, before the
//! host sees them. So every such path is also sent through `fs_probe`'s raw calls, one per
//! operation a built-in tool makes on a path (read, write, stat, list, mkdir, remove, rmdir,
//! rename and hard link in both directions, symlink), with the path exactly as given: there
//! the host's guard alone stands in the way, and its refusal is what the case asserts.
//!
//! Every case runs in a fresh workspace beside `outside/` and `workspace-sibling/` (canaries)
//! and a host-only directory `elsewhere/`, under a policy where `impl` may not read
//! `secrets/**`, may not write `docs/**` or `café/**`. Each case asserts:
//!
//! - its expectation: refused by the host (a `denied` error, or the kind named, with at least
//!   one refusal by the guard), an error of exactly the kind named that the tool itself gave
//!   (no refusal by the host), contained (for `fs_probe`, every operation failed; any error
//!   is a refusal by the host), a literal name (any file created is inside the workspace under
//!   exactly the name given), or a specific result; in every case but the literal names and
//!   the edits checked, the workspace is byte for byte what it was;
//! - no host path, no canary and no hidden secret in any text, structured result or warning;
//! - the audit trail holds the call's record (a failed call's outcome is not `ok`) and exactly
//!   one `deny` record for each refusal by the host (its operation, path, access and rule), and
//!   no other; the whole chain verifies;
//! - everything beside the workspace (the base directory's entries, `outside/`,
//!   `workspace-sibling/` and `elsewhere/`, content included) is untouched;
//! - an allowed sibling control (reading and writing `src/`) still works afterwards.
//!
//! A table runs all its cases and names every one that failed. `at_least_700_attack_inputs`
//! counts the tables' cases.

mod attack_fourth;
mod boundary;
mod cases;
mod fourth_pass;
mod hardening;
mod in_place;
mod listing;
mod shared_descriptors;

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
    /// Refused by the host: a `denied` error, at least one refusal by the guard (each with its
    /// `deny` record), the workspace unchanged.
    Refused,
    /// Refused by the host as [`Expect::Refused`], with an error of this kind (a name with a
    /// control character is `invalid-args`).
    RefusedAs(ToolErrorKind),
    /// An error of exactly this kind, the workspace unchanged, and no refusal by the host: the
    /// tool's own answer. A built-in tool's SDK refuses `..` and absolute paths (`denied`)
    /// before the host sees them; the tables send every such path through `fs_probe`'s raw
    /// calls as well, where only the host stands in the way, expecting `Refused`.
    Fails(ToolErrorKind),
    /// Success or a refusal by the host; for `fs_probe`, every operation failed; the
    /// workspace unchanged.
    Contained,
    /// Success, and the one change to the workspace is a file created under exactly this
    /// (workspace-relative) name holding what was written (`x`), with the directories it needs.
    Literal(&'static str),
    /// A specific result, checked by the function, which is given the workspace as it was
    /// before the call (and may look at it now).
    Check(fn(&Fixture, &Snapshot, &CallOutcome) -> Result<(), String>),
}

/// A workspace as [`Fixture::snapshot`] describes it.
pub type Snapshot = Vec<(String, String)>;

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
    // `elsewhere/` is watched with the rest of what lies beside the workspace.
    fixture.mark_outside();
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
            texts.extend(output.structured.as_ref().map(|structured| structured.value().to_string()));
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
    let shown = |outcome: &CallOutcome| match &outcome.result {
        Ok(output) => format!("ok: {}", output.text),
        Err(error) => format!("{error}"),
    };

    match case.expect {
        Expect::Refused | Expect::RefusedAs(_) => {
            let kind = if let Expect::RefusedAs(kind) = case.expect { kind } else { ToolErrorKind::Denied };
            let error = outcome.result.as_ref().err();
            assert_eq!(error.map(|error| error.kind), Some(kind), "{context}: should be refused, {}", shown(&outcome));
            assert!(!outcome.denials.is_empty(), "{context}: refused, but not by the host: {}", shown(&outcome));
            assert_eq!(fixture.snapshot(), before, "{context}: the workspace changed");
        }
        Expect::Fails(kind) => {
            let error = outcome.result.as_ref().err();
            assert_eq!(error.map(|error| error.kind), Some(kind), "{context}: should fail with `{kind}`, {}", shown(&outcome));
            assert!(outcome.denials.is_empty(), "{context}: the host refused {:?}", outcome.denials);
            assert_eq!(fixture.snapshot(), before, "{context}: the workspace changed");
        }
        Expect::Contained => {
            match &outcome.result {
                Ok(output) if case.tool == "fs_probe" => {
                    let results = output.structured.as_ref().and_then(|structured| structured.as_array()).cloned().unwrap_or_default();
                    assert!(results.iter().all(|result| result["ok"] == false), "{context}: an operation succeeded: {results:?}");
                }
                Ok(_) => {}
                Err(error) => {
                    assert_eq!(error.kind, ToolErrorKind::Denied, "{context}: {error}");
                    assert!(!outcome.denials.is_empty(), "{context}: refused, but not by the host: {error}");
                }
            }
            assert_eq!(fixture.snapshot(), before, "{context}: the workspace changed");
        }
        Expect::Literal(name) => {
            assert!(outcome.result.is_ok(), "{context}: should create `{name}`, {}", shown(&outcome));
            let after = fixture.snapshot();
            let gained: Vec<&(String, String)> = after.iter().filter(|entry| !before.contains(entry)).collect();
            let lost: Vec<&(String, String)> = before.iter().filter(|entry| !after.contains(entry)).collect();
            assert!(lost.is_empty(), "{context}: changed or removed {lost:?}");
            for (path, description) in &gained {
                let created = path == name && description.starts_with("file ") && description.ends_with(" x");
                let parent = name.starts_with(&format!("{path}/")) && description.starts_with("dir ");
                assert!(created || parent, "{context}: `{path}` ({description}) appeared; only `{name}` may: {gained:?}");
            }
            assert!(gained.iter().any(|(path, _)| path == name), "{context}: `{name}` was not created literally: {gained:?}");
        }
        Expect::Check(check) => {
            if let Err(problem) = check(&fixture, &before, &outcome) {
                panic!("{context}: {problem}");
            }
        }
    }

    // The audit trail has the call, and exactly one `deny` record for each refusal (a refusal
    // repeated within the call adds one record saying how often), and no other.
    let records = audit_of(&outcome.call_id);
    let call_record = records.iter().find(|record| matches!(record.kind, toolcell_audit::Kind::Call));
    let call_record = call_record.unwrap_or_else(|| panic!("{context}: no call record in the audit trail"));
    if outcome.result.is_err() {
        assert_ne!(call_record.outcome.as_deref(), Some("ok"), "{context}: a failed call audited as ok");
    }
    let denies: Vec<&toolcell_audit::Record> =
        records.iter().filter(|record| record.decision.as_deref() == Some("deny") && record.repeated.is_none()).collect();
    for denial in &outcome.denials {
        let event = &denial.event;
        let matching = denies
            .iter()
            .filter(|record| {
                record.operation.as_deref() == Some(event.operation)
                    && record.path.as_deref() == Some(event.path.as_str())
                    && record.access.as_deref() == Some(event.access.as_str())
                    && record.rule.as_deref() == Some(event.rule.as_str())
            })
            .count();
        assert_eq!(matching, 1, "{context}: the refusal {event:?} has {matching} deny records: {denies:?}");
    }
    assert_eq!(denies.len(), outcome.denials.len(), "{context}: {} refusals but deny records {denies:?}", outcome.denials.len());

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

/// Run a table (every case, whatever the others did), then verify the whole audit chain;
/// fail naming every case that failed.
pub fn run_all(cases: &[Case]) {
    let mut failed = Vec::new();
    for case in cases {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(case))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
                .unwrap_or_default();
            failed.push(message);
        }
    }
    let text = std::fs::read_to_string(suite().state.path().join("audit.jsonl")).expect("the audit trail");
    toolcell_audit::verify(text.lines()).expect("the audit chain is intact");
    assert!(failed.is_empty(), "{} of {} cases failed:\n{}", failed.len(), cases.len(), failed.join("\n"));
}

#[test]
fn at_least_700_attack_inputs() {
    let counts: Vec<(&str, usize)> = cases::TABLES.iter().map(|(name, table)| (*name, table().len())).collect();
    let total: usize = counts.iter().map(|(_, count)| count).sum();
    assert!(total >= 700, "only {total} attack inputs: {counts:?}");
    let _ = std::fs::write(Path::new(env!("CARGO_TARGET_TMPDIR")).join("security-cases.txt"), format!("{total}\n{counts:?}\n"));
}

//! Recovery through the real host: a journal that does not verify stops writes to its
//! workspace (reads go on) until the operator removes it, and a journal copied back after its
//! call ended is never replayed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcell_runtime::{RecoveryKind, Runtime};
use toolcell_tests::{Fixture, TEST_POLICY, audit_records, call_in, runtime_with_policy};
use toolcell_types::ToolErrorKind;

fn call(runtime: &Runtime, fixture: &Fixture, tool: &str, args: &Value) -> Result<toolcell_types::ToolOutput, toolcell_types::ToolError> {
    call_in(runtime, &fixture.workspace, "s-recovery", None, &[], tool, args).result
}

/// The journal files in the state directory `state`.
fn journal_files(state: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(state.join("journal"))
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|extension| extension == "jsonl"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_journal_that_does_not_verify_stops_writes_until_the_operator_removes_it() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "original\n");
    let state = tempfile::tempdir().expect("state");
    drop(runtime_with_policy(TEST_POLICY, Some(state.path())));
    // A journal naming this workspace, with tags made under a key of its own: planted, or one
    // of this installation's that was changed since.
    let workspace = std::fs::canonicalize(fixture.root()).expect("canonical");
    let header = json!({"begin": {"version": 2, "workspace": workspace, "call_id": "c-planted", "session": "s"}});
    let step =
        json!({"step": {"call": "c-planted", "step": {"path": "a.txt", "prior": {"kind": "inline", "hex": "6576696c0a", "mode": 420}}}});
    let tag = "ab".repeat(32);
    let planted = state.path().join("journal/1-planted.jsonl");
    std::fs::write(&planted, format!("{header}\t{tag}\n{step}\t{tag}\n")).expect("plant");

    let runtime = runtime_with_policy(TEST_POLICY, Some(state.path()));
    let error = call(&runtime, &fixture, "write_file", &json!({"path": "a.txt", "content": "new\n"})).expect_err("writes stop");
    assert_eq!(error.kind, ToolErrorKind::Failed, "{error}");
    assert!(error.message.contains("writes to this workspace are stopped") && error.message.contains("operator"), "{error}");
    fixture.assert_no_host_path(&error.message);
    let error = call(&runtime, &fixture, "fs_probe", &json!({"ops": [{"op": "mkdir", "path": "new"}]})).expect_err("every write stops");
    assert!(error.message.contains("writes to this workspace are stopped"), "{error}");
    // Reads go on; nothing was replayed or written.
    let read = call(&runtime, &fixture, "read_file", &json!({"path": "a.txt"})).expect("reads go on");
    assert!(read.text.contains("original"), "{}", read.text);
    assert_eq!(fixture.read_text("a.txt"), "original\n");
    assert!(!fixture.root().join("new").exists());
    // Audited: what recovery found, and each refusal.
    let records = audit_records(&runtime);
    assert!(
        records.iter().any(|record| record.kind == toolcell_audit::Kind::Recovery
            && record.message.as_deref().is_some_and(|message| message.contains("does not verify"))),
        "no recovery record"
    );
    assert!(records.iter().any(|record| record.rule.as_deref() == Some("writes-stopped")), "no refusal record");
    let found = runtime.recover(&fixture.workspace);
    assert!(found.iter().any(|recovery| recovery.kind == RecoveryKind::Unverified), "{found:?}");
    drop(runtime);

    // Still stopped after a restart, until the operator removes the journal.
    let runtime = runtime_with_policy(TEST_POLICY, Some(state.path()));
    assert!(call(&runtime, &fixture, "write_file", &json!({"path": "a.txt", "content": "new\n"})).is_err());
    drop(runtime);
    std::fs::remove_file(&planted).expect("the operator removes it");
    let runtime = runtime_with_policy(TEST_POLICY, Some(state.path()));
    call(&runtime, &fixture, "write_file", &json!({"path": "a.txt", "content": "new\n"})).expect("writes go on");
    assert_eq!(fixture.read_text("a.txt"), "new\n");
}

#[test]
fn a_journal_copied_back_after_its_call_ended_is_not_replayed() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "original\n");
    let state = tempfile::tempdir().expect("state");
    let runtime = runtime_with_policy(TEST_POLICY, Some(state.path()));
    // A copy of the journal taken while a call is open (its changes made, its end not yet
    // written): a component that reached the state directory, a backup, another program.
    let snapshot = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            call(
                &runtime,
                &fixture,
                "fs_probe",
                &json!({"ops": [{"op": "write", "path": "a.txt", "content": "committed\n"}, {"op": "sleep", "content": "1500"}]}),
            )
        });
        let started = Instant::now();
        let snapshot = loop {
            let copied = journal_files(state.path()).into_iter().find_map(|path| std::fs::read(&path).ok().map(|bytes| (path, bytes)));
            if let Some((path, bytes)) = copied.filter(|(_, bytes)| String::from_utf8_lossy(bytes).contains("a.txt")) {
                break (path, bytes);
            }
            assert!(started.elapsed() < Duration::from_secs(60), "the call never journaled its write");
            std::thread::sleep(Duration::from_millis(5));
        };
        running.join().expect("the call").expect("it commits");
        snapshot
    });
    assert_eq!(fixture.read_text("a.txt"), "committed\n");
    drop(runtime);
    // Put back once the runtime has ended.
    let (path, bytes) = snapshot;
    std::fs::write(&path, &bytes).expect("copy back");
    let restarted = runtime_with_policy(TEST_POLICY, Some(state.path()));
    let found = restarted.recover(&fixture.workspace);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, RecoveryKind::Replayed, "{found:?}");
    assert_eq!(fixture.read_text("a.txt"), "committed\n", "the old journal was replayed");
    let records = audit_records(&restarted);
    assert!(
        records.iter().any(|record| record.kind == toolcell_audit::Kind::Recovery
            && record.message.as_deref().is_some_and(|message| message.contains("not replayed again"))),
        "the event is not reported"
    );
    // Nothing in the workspace is half done: writes go on.
    call(&restarted, &fixture, "write_file", &json!({"path": "a.txt", "content": "later\n"})).expect("writes go on");
}

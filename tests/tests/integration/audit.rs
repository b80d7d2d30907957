//! The audit trail, written by the real host: every refusal with its rule, modifications
//! before they happen, one record per call, and no modification without a record.

use serde_json::json;
use toolcell_audit::Kind;
use toolcell_tests::{Fixture, audit_records, audited_runtime};
use toolcell_types::ToolErrorKind;

fn project() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "fn main() {}\n");
    fixture.write("docs/guide.md", "# Guide\n");
    fixture.write("secrets/key.pem", "KEY\n");
    fixture
}

#[test]
fn every_refusal_is_recorded_with_its_rule() {
    let fixture = project();
    let state = tempfile::tempdir().expect("state directory");
    let runtime = audited_runtime(state.path());
    let attempts = [
        (json!({"op": "write", "path": "docs/guide.md", "content": "x"}), "docs/guide.md", "docs-read-only"),
        (json!({"op": "rename", "path": "src/main.rs", "to": "docs/main.rs"}), "docs/main.rs", "docs-read-only"),
        (json!({"op": "hard_link", "path": "docs/guide.md", "to": "src/link.md"}), "docs/guide.md", "docs-read-only"),
        (json!({"op": "truncate", "path": "docs/guide.md"}), "docs/guide.md", "docs-read-only"),
        (json!({"op": "read", "path": "secrets/key.pem"}), "secrets/key.pem", "secrets-hidden"),
        (json!({"op": "symlink", "path": "src/out", "to": "../../outside"}), "src/out", "symlink-target"),
        (json!({"op": "read", "path": "../outside/secret.txt"}), "../outside/secret.txt", "workspace-boundary"),
    ];
    for (attempt, _, _) in &attempts {
        let outcome = fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": [attempt]}), None);
        assert_eq!(outcome.result.expect_err("refused").kind, ToolErrorKind::Denied, "{attempt}");
    }
    let records = audit_records(&runtime);
    for (attempt, path, rule) in attempts {
        let found = records.iter().any(|record| {
            record.kind == Kind::Fs
                && record.decision.as_deref() == Some("deny")
                && record.path.as_deref() == Some(path)
                && record.rule.as_deref() == Some(rule)
                && record.role == "impl"
                && record.tool == "fs_probe"
        });
        assert!(found, "no deny record for {attempt} ({path}, {rule})");
    }
    let calls: Vec<_> = records.iter().filter(|record| record.kind == Kind::Call).collect();
    assert_eq!(calls.len(), 7);
    assert!(calls.iter().all(|record| record.outcome.as_deref() == Some("denied")));
    assert!(calls.iter().all(|record| record.message.as_deref().is_some_and(|message| !message.is_empty())));
    fixture.assert_outside_untouched();
}

#[test]
fn modifications_and_calls_are_recorded() {
    let fixture = project();
    let state = tempfile::tempdir().expect("state directory");
    let runtime = audited_runtime(state.path());
    let outcome = fixture.call_on(&runtime, "impl", "write_file", &json!({"path": "src/new.rs", "content": "x"}), None);
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let gated = fixture.call_on(&runtime, "impl", "read_file", &json!({"path": 7}), None);
    assert_eq!(gated.result.expect_err("invalid").kind, ToolErrorKind::InvalidArgs);
    let records = audit_records(&runtime);
    let write = records
        .iter()
        .find(|record| record.access.as_deref() == Some("write") && record.path.as_deref() == Some("src/new.rs"))
        .expect("the write is recorded");
    assert_eq!(write.decision.as_deref(), Some("allow"));
    assert_eq!(write.rule.as_deref(), Some("impl-write"));
    assert_eq!(write.call_id, outcome.call_id);
    let call = records.iter().find(|record| record.kind == Kind::Call && record.call_id == outcome.call_id).expect("call record");
    assert_eq!(call.outcome.as_deref(), Some("ok"));
    assert!(call.reads.is_some_and(|reads| reads >= 1), "{call:?}");
    assert!(write.seq < call.seq, "the modification is recorded before the call ends");
    assert!(records.iter().any(|record| record.call_id == gated.call_id && record.outcome.as_deref() == Some("invalid-args")));
}

#[test]
fn the_state_directory_inside_the_workspace_is_hidden() {
    let fixture = project();
    let runtime = audited_runtime(&fixture.root().join(".toolcell"));
    fixture.call_on(&runtime, "impl", "read_file", &json!({"path": "src/main.rs"}), None);
    for args in [
        json!({"ops": [{"op": "write", "path": ".toolcell/audit.jsonl", "content": "forged"}]}),
        json!({"ops": [{"op": "remove", "path": ".toolcell/audit.jsonl"}]}),
        json!({"ops": [{"op": "rename", "path": ".toolcell", "to": "elsewhere"}]}),
    ] {
        let outcome = fixture.call_on(&runtime, "impl", "fs_probe", &args, None);
        assert_eq!(outcome.result.expect_err("refused").kind, ToolErrorKind::Denied, "{args}");
        assert_eq!(outcome.denials[0].event.rule, "protected:.toolcell", "{args}");
    }
    // Nor may it be read, whatever the policy says (impl may read everything): the trail
    // names host paths, and undo records hold what some roles may not read.
    let read = fixture.call_on(&runtime, "impl", "read_file", &json!({"path": ".toolcell/audit.jsonl"}), None);
    assert_eq!(read.result.expect_err("hidden").kind, ToolErrorKind::Denied);
    assert_eq!(read.denials[0].event.rule, "protected:.toolcell");
    audit_records(&runtime);
}

#[test]
fn no_record_no_modification() {
    let fixture = project();
    let state = tempfile::tempdir().expect("state directory");
    let runtime = audited_runtime(state.path());
    // Make the log unwritable: a directory where the file should be.
    std::fs::create_dir(state.path().join(toolcell_runtime::AUDIT_FILE)).expect("block the log");
    let outcome = fixture.call_on(&runtime, "impl", "write_file", &json!({"path": "src/new.rs", "content": "x"}), None);
    let error = outcome.result.expect_err("the write must be refused");
    assert!(error.message.contains("audit trail cannot be written"), "{}", error.message);
    assert!(!fixture.root().join("src/new.rs").exists());
    fixture.assert_no_host_path(&error.message);
}

//! Every call is all or nothing: a call that traps, runs past its deadline, returns an error, is
//! refused part-way or fails a validator leaves the workspace byte-identical; a host killed
//! mid-call is rolled back by the next start; `undo_edit` restores a session's last change.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcell_runtime::{Limits, Runtime};
use toolcell_tests::{Fixture, TEST_POLICY, builtin_runtime_builder, guest_program, runtime_with_policy};
use toolcell_types::ToolErrorKind;

/// A workspace with files of several modes, a directory tree and a symlink.
fn project() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("src/a.rs", "fn a() {}\n");
    fixture.write("src/b.rs", "fn b() {}\n");
    fixture.write("old/x.txt", "x\n");
    fixture.write("run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(fixture.root().join("run.sh"), std::fs::Permissions::from_mode(0o750)).expect("chmod");
    fixture.symlink("src/a.rs", "link.rs");
    fixture
}

/// Operations touching every kind of change the journal knows, on [`project`].
fn many_changes() -> Vec<Value> {
    vec![
        json!({"op": "write", "path": "src/a.rs", "content": "overwritten"}),
        json!({"op": "append", "path": "src/b.rs", "content": "// appended"}),
        json!({"op": "truncate", "path": "run.sh"}),
        json!({"op": "mkdir", "path": "new/deep"}),
        json!({"op": "write", "path": "new/deep/c.rs", "content": "created"}),
        json!({"op": "rename", "path": "old", "to": "moved"}),
        json!({"op": "write", "path": "moved/y.txt", "content": "inside the moved directory"}),
        json!({"op": "remove", "path": "link.rs"}),
        json!({"op": "rename", "path": "src/b.rs", "to": "src/renamed.rs"}),
        json!({"op": "write", "path": "src/a.rs", "content": "overwritten twice"}),
    ]
}

fn with(mut ops: Vec<Value>, last: Value) -> Value {
    ops.push(last);
    json!({ "ops": ops })
}

fn assert_rolled_back(fixture: &Fixture, before: &[(String, String)], outcome: &toolcell_runtime::CallOutcome, what: &str) {
    assert_eq!(fixture.snapshot(), before, "{what}: the workspace changed");
    // New file content never put in place is not undone: it changed nothing.
    assert!(outcome.rolled_back > 0 && outcome.rolled_back_whole, "{what}: {} steps undone", outcome.rolled_back);
    let error = outcome.result.as_ref().expect_err("the call failed");
    assert!(error.message.contains("every change this call made was rolled back"), "{what}: {}", error.message);
    fixture.assert_no_host_path(&error.message);
}

#[test]
fn a_call_that_traps_fails_or_is_refused_changes_nothing() {
    let runtime = runtime_with_policy(TEST_POLICY, None);
    for (what, last) in [
        ("trap", json!({"op": "panic"})),
        ("tool error", json!({"op": "fail"})),
        ("refusal", json!({"op": "write", "path": "docs/guide.md", "content": "denied"})),
    ] {
        let fixture = project();
        let before = fixture.snapshot();
        let outcome = fixture.call_on(&runtime, "impl", "fs_probe", &with(many_changes(), last), None);
        assert_rolled_back(&fixture, &before, &outcome, what);
    }
    // The same changes without a failure are kept.
    let fixture = project();
    let outcome = fixture.call_on(&runtime, "impl", "fs_probe", &json!({ "ops": many_changes() }), None);
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert_eq!(fixture.read_text("src/a.rs"), "overwritten twice");
    assert_eq!(fixture.read_text("moved/y.txt"), "inside the moved directory");
    assert_eq!(outcome.rolled_back, 0);
}

#[test]
fn a_call_stopped_at_its_deadline_changes_nothing() {
    let runtime = builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .policy("policy.toml", TEST_POLICY)
        .limits(Limits { deadline: Duration::from_millis(300), ..Limits::default() })
        .build()
        .expect("builds");
    let fixture = project();
    let before = fixture.snapshot();
    let outcome = fixture.call_on(&runtime, "impl", "fs_probe", &with(many_changes(), json!({"op": "spin"})), None);
    assert!(outcome.trapped);
    assert_rolled_back(&fixture, &before, &outcome, "deadline");
}

#[test]
fn the_built_in_tools_roll_back_too() {
    // edit_file with a second edit that does not apply changes nothing (it fails before
    // writing), and a refused write_file leaves no partial directory behind.
    let runtime = runtime_with_policy(TEST_POLICY, None);
    let fixture = project();
    let before = fixture.snapshot();
    let outcome = fixture.call_on(&runtime, "impl", "write_file", &json!({"path": "docs/new/deep/file.md", "content": "x"}), None);
    assert_eq!(outcome.result.expect_err("refused").kind, ToolErrorKind::Denied);
    assert_eq!(fixture.snapshot(), before);
}

const VALIDATED_POLICY: &str = r#"
version = 1

[[validators]]
id = "json-syntax"
paths = ["**/*.json"]
check = "json"

[[validators]]
id = "toml-syntax"
paths = ["**/*.toml"]
check = "toml"

[[validators]]
id = "no-todo"
paths = ["src/**/*.rs"]
tool = "misbehave"

[roles.impl]
tools = ["*"]

[[roles.impl.rules]]
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"
"#;

#[test]
fn a_validator_failure_rolls_the_call_back_with_its_message() {
    let runtime = runtime_with_policy(VALIDATED_POLICY, None);
    let fixture = project();
    fixture.write("config.json", "{\"ok\": true}\n");
    let before = fixture.snapshot();
    let cases = [
        ("config.json", "{\"ok\": tru", "`config.json` failed the validator `json-syntax` (policy.toml line 4): it is not valid JSON"),
        ("new.json", "[1, 2", "`new.json` failed the validator `json-syntax`"),
        ("Cargo.toml", "[package\nname = 1", "`Cargo.toml` failed the validator `toml-syntax` (policy.toml line 9): it is not valid TOML"),
        ("src/a.rs", "fn a() {}\n// TODO: later\n", "`src/a.rs` failed the validator `no-todo` (policy.toml line 14): line 2 has a TODO"),
    ];
    for (path, content, expected) in cases {
        let outcome = fixture.call_on(
            &runtime,
            "impl",
            "fs_probe",
            &json!({"ops": [
                {"op": "write", "path": "src/b.rs", "content": "changed too"},
                {"op": "write", "path": path, "content": content},
            ]}),
            None,
        );
        let error = outcome.result.expect_err(path);
        assert_eq!(error.kind, ToolErrorKind::InvalidArgs, "{path}: {}", error.message);
        assert!(error.message.contains(expected), "{path}: {}", error.message);
        assert!(error.message.contains("rolled back"), "{path}: {}", error.message);
        assert_eq!(fixture.snapshot(), before, "{path}");
    }
    // Valid content passes every validator.
    for (path, content) in [("config.json", "{\"ok\": false}"), ("Cargo.toml", "[package]\nname = \"x\"\n"), ("src/a.rs", "fn a() { 1 }\n")]
    {
        let outcome =
            fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": [{"op": "write", "path": path, "content": content}]}), None);
        assert!(outcome.result.is_ok(), "{path}: {:?}", outcome.result);
        assert_eq!(fixture.read_text(path), content);
    }
    // A validator component may only read.
    let outcome =
        fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": [{"op": "write", "path": "src/a.rs", "content": "WRITE"}]}), None);
    let error = outcome.result.expect_err("the validator's write is refused");
    assert!(error.message.contains("this call may only read"), "{}", error.message);
    assert_eq!(fixture.read_text("src/a.rs"), "fn a() { 1 }\n");
}

#[test]
fn modifying_a_file_not_read_first_warns_and_a_changed_file_conflicts() {
    let runtime = runtime_with_policy(TEST_POLICY, None);
    let fixture = project();
    // Never read: the write goes through with a warning.
    let outcome = fixture.call_as(&runtime, "s-warn", None, &[], "write_file", &json!({"path": "src/a.rs", "content": "one\n"}));
    let output = outcome.result.expect("written");
    let warning = "Warning: overwriting existing file `src/a.rs` that was not read first. Consider reading it first.";
    assert!(output.text.ends_with(warning), "{}", output.text);
    assert_eq!(outcome.warnings, [warning]);
    // Its own write counts as seen; a new file needs no read.
    let outcome = fixture.call_as(
        &runtime,
        "s-warn",
        None,
        &[],
        "edit_file",
        &json!({"path": "src/a.rs", "edits": [{"old_string": "one", "new_string": "two"}]}),
    );
    assert!(outcome.result.is_ok() && outcome.warnings.is_empty(), "{:?} {:?}", outcome.result, outcome.warnings);
    let outcome = fixture.call_as(&runtime, "s-warn", None, &[], "write_file", &json!({"path": "src/new.rs", "content": "x"}));
    assert!(outcome.result.is_ok() && outcome.warnings.is_empty());
    // Read first: no warning.
    let outcome = fixture.call_as(&runtime, "s-read", None, &[], "read_file", &json!({"path": "src/b.rs"}));
    assert!(outcome.result.is_ok());
    let outcome = fixture.call_as(&runtime, "s-read", None, &[], "write_file", &json!({"path": "src/b.rs", "content": "b2\n"}));
    assert!(outcome.result.is_ok() && outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    // Changed by someone else since this session read it: a conflict, and the other change
    // stays.
    fixture.call_as(&runtime, "s-read", None, &[], "read_file", &json!({"path": "run.sh"})).result.expect("read");
    fixture.write("run.sh", "#!/bin/sh\necho changed outside\n");
    let outcome = fixture.call_as(
        &runtime,
        "s-read",
        None,
        &[],
        "edit_file",
        &json!({"path": "run.sh", "edits": [{"old_string": "outside", "new_string": "by the agent"}]}),
    );
    let error = outcome.result.expect_err("conflict");
    assert_eq!(error.kind, ToolErrorKind::Conflict, "{}", error.message);
    assert!(error.message.contains("`run.sh` was modified since this session read it"), "{}", error.message);
    assert_eq!(fixture.read_text("run.sh"), "#!/bin/sh\necho changed outside\n");
    // Reading it again clears the conflict; touching it without changing its bytes does not
    // make one.
    fixture.call_as(&runtime, "s-read", None, &[], "read_file", &json!({"path": "run.sh"})).result.expect("read");
    let content = fixture.read("run.sh");
    std::thread::sleep(Duration::from_millis(20));
    fixture.write("run.sh", content);
    let outcome = fixture.call_as(
        &runtime,
        "s-read",
        None,
        &[],
        "edit_file",
        &json!({"path": "run.sh", "edits": [{"old_string": "outside", "new_string": "by the agent"}]}),
    );
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
}

#[test]
fn the_policy_can_refuse_writes_to_unread_files() {
    let policy = TEST_POLICY.replace("version = 1", "version = 1\n[writes]\nread_before_write = \"refuse\"");
    let runtime = runtime_with_policy(&policy, None);
    let fixture = project();
    let before = fixture.snapshot();
    let outcome = fixture.call_as(&runtime, "s-1", None, &[], "write_file", &json!({"path": "src/a.rs", "content": "x"}));
    let error = outcome.result.expect_err("refused");
    assert_eq!(error.kind, ToolErrorKind::Conflict);
    assert!(error.message.contains("`src/a.rs` exists and this session has not read it"), "{}", error.message);
    assert_eq!(outcome.denials[0].event.rule, "read-before-write");
    assert_eq!(fixture.snapshot(), before);
    fixture.call_as(&runtime, "s-1", None, &[], "read_file", &json!({"path": "src/a.rs"})).result.expect("read");
    let outcome = fixture.call_as(&runtime, "s-1", None, &[], "write_file", &json!({"path": "src/a.rs", "content": "x"}));
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    // Another session has not read it.
    let outcome = fixture.call_as(&runtime, "s-2", None, &[], "write_file", &json!({"path": "src/a.rs", "content": "y"}));
    assert_eq!(outcome.result.expect_err("refused").kind, ToolErrorKind::Conflict);
}

/// A refused or failed write showed the agent nothing of the file it opened: trying again
/// does not pass as having read it.
#[test]
fn a_refused_or_failed_write_does_not_count_as_a_read() {
    let policy = TEST_POLICY.replace("version = 1", "version = 1\n[writes]\nread_before_write = \"refuse\"");
    let runtime = runtime_with_policy(&policy, None);
    let fixture = project();
    let edit = |old: &str| json!({"path": "src/a.rs", "edits": [{"old_string": old, "new_string": "b"}]});
    for attempt in 0..2 {
        let error = fixture.call_as(&runtime, "s-1", None, &[], "edit_file", &edit("a")).result.expect_err("refused");
        assert_eq!(error.kind, ToolErrorKind::Conflict, "attempt {attempt}: {}", error.message);
    }
    // An edit that fails on its own (nothing matches) read the file, but showed none of it.
    let error = fixture.call_as(&runtime, "s-2", None, &[], "edit_file", &edit("not there")).result.expect_err("no match");
    assert!(error.message.contains("was not found in `src/a.rs`"), "{}", error.message);
    let error = fixture.call_as(&runtime, "s-2", None, &[], "edit_file", &edit("a")).result.expect_err("still unread");
    assert_eq!(error.kind, ToolErrorKind::Conflict, "{}", error.message);
    assert_eq!(fixture.read_text("src/a.rs"), "fn a() {}\n");
    fixture.call_as(&runtime, "s-2", None, &[], "read_file", &json!({"path": "src/a.rs"})).result.expect("read");
    fixture.call_as(&runtime, "s-2", None, &[], "edit_file", &edit("a")).result.expect("read first, then edited");
}

/// A file this call put in place and something else (another host, which does not see this
/// host's calls in flight) replaced before the call ended is not what the session wrote: it
/// is neither read by the session nor its to undo.
#[test]
fn a_file_replaced_after_the_call_put_it_in_place_is_neither_read_nor_undoable() {
    let policy = TEST_POLICY.replace("version = 1", "version = 1\n[writes]\nread_before_write = \"refuse\"");
    let runtime = runtime_with_policy(&policy, None);
    let fixture = project();
    fixture.call_as(&runtime, "s-1", None, &[], "read_file", &json!({"path": "src/a.rs"})).result.expect("read");
    let outcome = fixture.while_a_call_holds(&runtime, "s-1", ("src/a.rs", "mine\n"), 1500, || {
        let theirs = fixture.root().join("src/.theirs");
        std::fs::write(&theirs, "theirs\n").expect("write");
        std::fs::rename(&theirs, fixture.root().join("src/a.rs")).expect("replace");
    });
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let edit = json!({"path": "src/a.rs", "edits": [{"old_string": "theirs", "new_string": "overwritten"}]});
    let error = fixture.call_as(&runtime, "s-1", None, &[], "edit_file", &edit).result.expect_err("never read");
    assert_eq!(error.kind, ToolErrorKind::Conflict, "{}", error.message);
    let error = fixture.call_as(&runtime, "s-1", None, &[], "undo_edit", &json!({"path": "src/a.rs"})).result.expect_err("not its own");
    assert_eq!(error.kind, ToolErrorKind::NotFound, "{}", error.message);
    assert_eq!(fixture.read_text("src/a.rs"), "theirs\n");
}

/// A file the call itself changes again after putting it in place (removes it, or renames
/// another over it) is still the session's own: read by it, and undoable.
#[test]
fn a_file_the_call_changes_again_after_putting_it_in_place_stays_its_own() {
    let policy = TEST_POLICY.replace("version = 1", "version = 1\n[writes]\nread_before_write = \"refuse\"");
    let runtime = runtime_with_policy(&policy, None);
    let fixture = project();
    let session = |ops: Value| fixture.call_as(&runtime, "s-1", None, &[], "fs_probe", &json!({ "ops": ops })).result;
    fixture.call_as(&runtime, "s-1", None, &[], "read_file", &json!({"path": "src/a.rs"})).result.expect("read");
    session(json!([
        {"op": "write", "path": "src/a.rs", "content": "first\n"},
        {"op": "stat", "path": "src/a.rs"},
        {"op": "write", "path": "src/next.rs", "content": "second\n"},
        {"op": "rename", "path": "src/next.rs", "to": "src/a.rs"},
    ]))
    .expect("written, then replaced by its own rename");
    let edit = json!({"path": "src/a.rs", "edits": [{"old_string": "second", "new_string": "third"}]});
    fixture.call_as(&runtime, "s-1", None, &[], "edit_file", &edit).result.expect("the session wrote what is there");
    session(json!([
        {"op": "write", "path": "src/a.rs", "content": "fourth\n"},
        {"op": "stat", "path": "src/a.rs"},
        {"op": "remove", "path": "src/a.rs"},
    ]))
    .expect("written, then removed");
    fixture.call_as(&runtime, "s-1", None, &[], "undo_edit", &json!({"path": "src/a.rs"})).result.expect("its removal is undone");
    assert_eq!(fixture.read_text("src/a.rs"), "third\n");
}

#[test]
fn undo_edit_restores_a_sessions_last_changes_one_by_one() {
    let runtime = runtime_with_policy(TEST_POLICY, None);
    let fixture = project();
    let session = |tool: &str, args: Value| fixture.call_as(&runtime, "s-undo", None, &[], tool, &args);
    session("read_file", json!({"path": "src/a.rs"})).result.expect("read");
    session("write_file", json!({"path": "src/a.rs", "content": "version 2\n"})).result.expect("write");
    session("edit_file", json!({"path": "src/a.rs", "edits": [{"old_string": "2", "new_string": "3"}]})).result.expect("edit");
    session("write_file", json!({"path": "src/created.rs", "content": "new\n"})).result.expect("create");
    assert_eq!(fixture.read_text("src/a.rs"), "version 3\n");

    let output = session("undo_edit", json!({"path": "src/a.rs"})).result.expect("undo");
    assert!(output.text.starts_with("Restored `src/a.rs` to its content before this session's call"), "{}", output.text);
    assert!(output.text.ends_with("(1 line)"), "{}", output.text);
    assert_eq!(fixture.read_text("src/a.rs"), "version 2\n");
    session("undo_edit", json!({"path": "src/a.rs"})).result.expect("undo again");
    assert_eq!(fixture.read_text("src/a.rs"), "fn a() {}\n");
    let error = session("undo_edit", json!({"path": "src/a.rs"})).result.expect_err("nothing left");
    assert_eq!(error.kind, ToolErrorKind::NotFound, "{}", error.message);

    // Undoing a creation removes the file.
    let output = session("undo_edit", json!({"path": "src/created.rs"})).result.expect("undo create");
    assert!(output.text.starts_with("Removed `src/created.rs`"), "{}", output.text);
    assert!(!fixture.root().join("src/created.rs").exists());

    // Another session's changes are not this session's to undo, and a file changed since is
    // not undone.
    session("write_file", json!({"path": "src/b.rs", "content": "mine\n"})).result.expect("write");
    let other = fixture.call_as(&runtime, "s-other", None, &[], "undo_edit", &json!({"path": "src/b.rs"}));
    assert_eq!(other.result.expect_err("not theirs").kind, ToolErrorKind::NotFound);
    fixture.write("src/b.rs", "changed outside\n");
    let error = session("undo_edit", json!({"path": "src/b.rs"})).result.expect_err("conflict");
    assert_eq!(error.kind, ToolErrorKind::Conflict, "{}", error.message);
    assert_eq!(fixture.read_text("src/b.rs"), "changed outside\n");

    // The policy governs undo like any write.
    fixture.write("docs/guide.md", "# Guide\n");
    let error = session("undo_edit", json!({"path": "../outside/secret.txt"})).result.expect_err("outside");
    assert_eq!(error.kind, ToolErrorKind::Denied);
    fixture.assert_outside_untouched();
}

#[test]
fn undoing_a_creation_removes_the_directories_it_created() {
    let runtime = runtime_with_policy(TEST_POLICY, None);
    let fixture = project();
    let session = |tool: &str, args: Value| fixture.call_as(&runtime, "s-dirs", None, &[], tool, &args);
    session("write_file", json!({"path": "src/deep/er/new.rs", "content": "x\n"})).result.expect("create");
    let output = session("undo_edit", json!({"path": "src/deep/er/new.rs"})).result.expect("undo");
    assert!(output.text.ends_with("and the directories that call had created for it: `src/deep/er`, `src/deep`"), "{}", output.text);
    assert_eq!(output.structured.expect("structured")["removed_directories"], json!(["src/deep/er", "src/deep"]));
    assert!(!fixture.root().join("src/deep").exists());
    assert!(fixture.root().join("src/a.rs").exists(), "directories the call did not create stay");

    // A directory that is no longer empty stays, and so do its parents.
    session("write_file", json!({"path": "shared/inner/a.rs", "content": "a\n"})).result.expect("create");
    fixture.write("shared/inner/other.rs", "someone else's\n");
    let output = session("undo_edit", json!({"path": "shared/inner/a.rs"})).result.expect("undo");
    assert_eq!(output.structured.expect("structured")["removed_directories"], json!([]));
    assert!(fixture.root().join("shared/inner/other.rs").exists());

    // A directory made on its own is undone by its path while it is empty.
    session("create_directory", json!({"path": "made/here"})).result.expect("mkdir");
    fixture.write("made/here/file.txt", "x");
    let error = session("undo_edit", json!({"path": "made/here"})).result.expect_err("not empty");
    assert_eq!(error.kind, ToolErrorKind::Conflict, "{}", error.message);
    assert!(error.message.contains("no longer empty"), "{}", error.message);
    std::fs::remove_file(fixture.root().join("made/here/file.txt")).expect("remove");
    let output = session("undo_edit", json!({"path": "made/here"})).result.expect("undo mkdir");
    assert_eq!(output.structured.expect("structured")["removed_directories"], json!(["made"]));
    assert!(!fixture.root().join("made").exists());
}

#[test]
fn undo_edit_is_gated_by_the_role() {
    let fixture = project();
    let outcome = fixture.call_on(toolcell_tests::default_policy_runtime(), "reviewer", "undo_edit", &json!({"path": "src/a.rs"}), None);
    assert!(outcome.gated);
    assert_eq!(outcome.result.expect_err("gated").kind, ToolErrorKind::Denied);
}

const CHILD_WORKSPACE: &str = "TOOLCELL_TEST_CHILD_WORKSPACE";
const CHILD_STATE: &str = "TOOLCELL_TEST_CHILD_STATE";
/// `[writes] durability` of the child's policy.
const CHILD_DURABILITY: &str = "TOOLCELL_TEST_CHILD_DURABILITY";
/// The `fs_probe` arguments the child calls with, if not [`slow_changes`].
const CHILD_OPS: &str = "TOOLCELL_TEST_CHILD_OPS";
const DURABILITIES: [&str; 2] = ["full", "atomic"];

/// [`TEST_POLICY`] with the durability the parent asked for.
fn policy_with_durability() -> String {
    let durability = std::env::var(CHILD_DURABILITY).unwrap_or_else(|_| "full".to_owned());
    format!("{TEST_POLICY}\n[writes]\ndurability = \"{durability}\"\n")
}

/// Start this test binary's ignored test `name` as a child host on `workspace` and `state`,
/// and wait until it reports that it is calling.
fn start_child(name: &str, workspace: &std::path::Path, state: &std::path::Path, durability: &str) -> std::process::Child {
    start_child_with(name, workspace, state, durability, None)
}

/// [`start_child`], the child calling `fs_probe` with `ops` if given.
fn start_child_with(
    name: &str,
    workspace: &std::path::Path,
    state: &std::path::Path,
    durability: &str,
    ops: Option<&Value>,
) -> std::process::Child {
    let executable = std::env::current_exe().expect("test executable");
    let mut command = Command::new(&executable);
    if let Some(ops) = ops {
        command.env(CHILD_OPS, ops.to_string());
    }
    let mut child = command
        .args(["--exact", name, "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_WORKSPACE, workspace)
        .env(CHILD_STATE, state)
        .env(CHILD_DURABILITY, durability)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child host");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    loop {
        let line = lines.next().expect("the child reports").expect("a line");
        if line.contains("CALLING") {
            break;
        }
    }
    child
}

/// The operations the killed child runs: many changes with pauses between them.
fn slow_changes() -> Value {
    let mut ops = Vec::new();
    for (index, op) in many_changes().into_iter().enumerate() {
        ops.push(op);
        ops.push(json!({"op": "sleep", "content": (20 + index % 3 * 10).to_string()}));
    }
    json!({ "ops": ops })
}

/// A host killed while its call writes a file in place and creates another (new content not
/// put in place yet, or put in place mid-call by a readlink of their paths), while another
/// program writes the first (in place, or by renaming a file over it) and makes the second:
/// the restart rolls back what the call did change (a directory it made) and leaves what the
/// other program wrote.
#[test]
fn a_host_killed_with_a_write_in_flight_leaves_what_another_program_wrote_meanwhile() {
    for (durability, by_rename, landed) in [("full", false, false), ("atomic", false, false), ("full", true, false), ("full", true, true)] {
        let fixture = project();
        let state = tempfile::tempdir().expect("state");
        let land = if landed {
            json!({"op": "stream_script", "content": "rl:src/a.rs;rl:src/new.rs"})
        } else {
            json!({"op": "list", "path": "src"})
        };
        let ops = json!({"ops": [
            {"op": "stream_script", "content": "open:src/a.rs,w;ws:0;w:MINE"},
            {"op": "stream_script", "content": "open:src/new.rs,cw;ws:0;w:MINE"},
            land,
            {"op": "mkdir", "path": "made"},
            {"op": "sleep", "content": "20000"},
        ]});
        let mut child = start_child_with("transactions::killed_host_child", fixture.root(), state.path(), durability, Some(&ops));
        let started = Instant::now();
        while !fixture.root().join("made").exists() {
            assert!(started.elapsed() < Duration::from_secs(20), "{durability}: the child never made its directory");
            std::thread::sleep(Duration::from_millis(5));
        }
        if by_rename {
            std::fs::write(fixture.root().join("src/theirs"), "theirs\n").expect("write");
            std::fs::rename(fixture.root().join("src/theirs"), fixture.root().join("src/a.rs")).expect("rename over");
        } else {
            std::fs::write(fixture.root().join("src/a.rs"), "theirs\n").expect("write in place");
        }
        std::fs::write(fixture.root().join("src/theirs"), "theirs too\n").expect("write");
        std::fs::rename(fixture.root().join("src/theirs"), fixture.root().join("src/new.rs")).expect("make, or rename over");
        child.kill().expect("kill the child");
        child.wait().expect("reaped");
        let restarted: Runtime = runtime_with_policy(TEST_POLICY, Some(state.path()));
        let recovered = restarted.recover(&fixture.workspace);
        let what = format!("{durability}, by_rename={by_rename}, landed={landed}");
        assert_eq!(recovered.len(), 1, "{what}: {recovered:?}");
        assert_eq!(recovered[0].error, None, "{what}");
        assert!(!fixture.root().join("made").exists(), "{what}: the call's directory was not rolled back");
        assert_eq!(fixture.read_text("src/a.rs"), "theirs\n", "{what}: the restart wrote over another program's write");
        assert_eq!(fixture.read_text("src/new.rs"), "theirs too\n", "{what}: the restart removed another program's file");
    }
}

/// Not a test on its own: the host process that `a_host_killed_mid_call_is_rolled_back_at_restart`
/// starts and kills.
#[test]
#[ignore = "run as a child process by a_host_killed_mid_call_is_rolled_back_at_restart"]
fn killed_host_child() {
    let (Ok(workspace), Ok(state)) = (std::env::var(CHILD_WORKSPACE), std::env::var(CHILD_STATE)) else {
        return;
    };
    let runtime = runtime_with_policy(&policy_with_durability(), Some(state.as_ref()));
    let workspace = toolcell_runtime::Workspace::open(workspace.as_ref()).expect("workspace");
    // Straight to the real stdout, which the parent reads (not the test harness's capture).
    let mut stdout = std::io::stdout();
    writeln!(stdout, "CALLING").and_then(|()| stdout.flush()).expect("report to the parent");
    let ops = std::env::var(CHILD_OPS).ok().and_then(|ops| serde_json::from_str(&ops).ok()).unwrap_or_else(slow_changes);
    let outcome = toolcell_tests::call_in(&runtime, &workspace, "s-child", None, &[], "fs_probe", &ops);
    writeln!(stdout, "DONE {}", outcome.result.is_ok()).expect("report to the parent");
}

#[test]
fn a_host_killed_mid_call_is_rolled_back_at_restart() {
    for durability in DURABILITIES {
        let mut interrupted = 0;
        for round in 0..12u64 {
            let fixture = project();
            let before = fixture.snapshot();
            let state = tempfile::tempdir().expect("state");
            let mut child = start_child("transactions::killed_host_child", fixture.root(), state.path(), durability);
            // Once the call has begun to change the workspace, then 0 to 165 ms later: the call
            // pauses 20 to 40 ms after each of its changes (~300 ms in all), so the kill lands
            // mid-call however slowly a loaded machine runs the child.
            let begun = || {
                fixture.root().join("new").exists()
                    || !std::fs::read_to_string(fixture.root().join("src/a.rs")).is_ok_and(|content| content == "fn a() {}\n")
            };
            let waiting = Instant::now();
            while !begun() && waiting.elapsed() < Duration::from_secs(120) {
                if child.try_wait().expect("the child's status").is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(round * 15));
            // The child may have finished by now: then there is nothing to kill.
            let _ = child.kill();
            child.wait().expect("reaped");
            let after_kill = fixture.snapshot();

            let restarted: Runtime = runtime_with_policy(TEST_POLICY, Some(state.path()));
            // Nothing is rolled back until the workspace is opened.
            assert_eq!(fixture.snapshot(), after_kill, "{durability}, round {round}: recovered before the workspace was opened");
            let recovered = restarted.recover(&fixture.workspace);
            let now = fixture.snapshot();
            if recovered.is_empty() {
                // Killed before the first change, or after the commit.
                assert!(now == before || now == after_kill, "{durability}, round {round}: not rolled back and not committed");
            } else {
                interrupted += 1;
                assert_eq!(recovered[0].error, None, "{durability}, round {round}");
                assert_eq!(now, before, "{durability}, round {round}: the restart did not restore the workspace");
                let records = toolcell_tests::audit_records(&restarted);
                assert!(records.iter().any(|record| record.kind == toolcell_audit::Kind::Recovery), "{durability}, round {round}");
            }
            // Nothing is left to recover.
            drop(restarted);
            assert!(runtime_with_policy(TEST_POLICY, Some(state.path())).recover(&fixture.workspace).is_empty());
        }
        eprintln!("{durability}: {interrupted} of 12 kills landed mid-call");
        assert!(interrupted >= 6, "{durability}: only {interrupted} of 12 kills landed mid-call");
    }
}

/// The versions of `big.txt` the write-heavy child writes: version `n` is 256 KiB of its number.
fn version_of(n: usize) -> String {
    format!("{n:08}\n").repeat(256 * 1024 / 9)
}

/// Not a test on its own: the host that `a_host_killed_between_and_during_writes_leaves_whole_files`
/// starts and kills. It rewrites one big file with `write_file`, edits a small one with
/// `edit_file`, and writes two files in one `apply_patch` call, in a loop, as fast as it can.
#[test]
#[ignore = "run as a child process by a_host_killed_between_and_during_writes_leaves_whole_files"]
fn writing_host_child() {
    let (Ok(workspace), Ok(state)) = (std::env::var(CHILD_WORKSPACE), std::env::var(CHILD_STATE)) else {
        return;
    };
    let runtime = runtime_with_policy(&policy_with_durability(), Some(state.as_ref()));
    let workspace = toolcell_runtime::Workspace::open(workspace.as_ref()).expect("workspace");
    let call = |tool: &str, args: Value| {
        let outcome = toolcell_tests::call_in(&runtime, &workspace, "s-writer", None, &[], tool, &args);
        assert!(outcome.result.is_ok(), "{tool}: {:?}", outcome.result);
    };
    for path in ["big.txt", "small.txt", "pair/one.txt", "pair/two.txt"] {
        call("read_file", json!({ "path": path }));
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "CALLING").and_then(|()| stdout.flush()).expect("report to the parent");
    for n in 1.. {
        call("write_file", json!({ "path": "big.txt", "content": version_of(n) }));
        call("edit_file", json!({ "path": "small.txt", "old_string": format!("v{}", n - 1), "new_string": format!("v{n}") }));
        let patch = format!(
            "*** Begin Patch\n*** Update File: pair/one.txt\n@@\n-{}\n+{n}\n*** Update File: pair/two.txt\n@@\n-{}\n+{n}\n*** End Patch",
            n - 1,
            n - 1
        );
        call("apply_patch", json!({ "patch": patch }));
    }
}

#[test]
fn a_host_killed_between_and_during_writes_leaves_whole_files() {
    for durability in DURABILITIES {
        let (mut progressed, mut recovered) = (0, 0);
        for round in 0..10u64 {
            let fixture = Fixture::new();
            fixture.write("big.txt", version_of(0));
            fixture.write("small.txt", "the version is v0 here\n");
            fixture.write("pair/one.txt", "0\n");
            fixture.write("pair/two.txt", "0\n");
            let state = tempfile::tempdir().expect("state");
            let mut child = start_child("transactions::writing_host_child", fixture.root(), state.path(), durability);
            // Once the second version of big.txt has landed (so the call that wrote the first has
            // returned: a call killed before it returns is rolled back), then 0 to 63 ms later:
            // the kill falls somewhere in the loop of writes however slowly a loaded machine runs
            // the child.
            let written = || std::fs::read(fixture.root().join("big.txt")).is_ok_and(|big| big.get(..8) > Some(&b"00000001"[..]));
            let waiting = Instant::now();
            while !written() && waiting.elapsed() < Duration::from_secs(120) {
                assert!(child.try_wait().expect("the child's status").is_none(), "{durability}, round {round}: the child stopped");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(round * 7));
            child.kill().expect("SIGKILL");
            child.wait().expect("reaped");

            let restarted: Runtime = runtime_with_policy(TEST_POLICY, Some(state.path()));
            let found = restarted.recover(&fixture.workspace);
            for recovery in &found {
                assert_eq!(recovery.error, None, "{durability}, round {round}");
            }
            recovered += found.len();
            // Every file is one whole version; the two files a patch writes together agree.
            let big = fixture.read_text("big.txt");
            let n: usize = big[..8].parse().expect("a version number");
            assert_eq!(big, version_of(n), "{durability}, round {round}: big.txt is torn");
            progressed += usize::from(n > 0);
            let small = fixture.read_text("small.txt");
            assert!(small.starts_with("the version is v") && small.ends_with(" here\n"), "{durability}, round {round}: {small:?}");
            let one = fixture.read_text("pair/one.txt");
            assert_eq!(one, fixture.read_text("pair/two.txt"), "{durability}, round {round}: a patch was half applied");
            // No temporary file is left, and nothing is left to recover.
            let names: Vec<String> = fixture.snapshot().into_iter().map(|(name, _)| name).collect();
            assert!(!names.iter().any(|name| name.contains(".toolcell-")), "{durability}, round {round}: {names:?}");
            drop(restarted);
            assert!(runtime_with_policy(TEST_POLICY, Some(state.path())).recover(&fixture.workspace).is_empty());
        }
        eprintln!("{durability}: {progressed} of 10 kills after the first write, {recovered} calls rolled back at restart");
        assert_eq!(progressed, 10, "{durability}: the child wrote in only {progressed} of 10 rounds");
    }
}

#[test]
fn whole_file_writes_land_at_once_with_their_mode() {
    let runtime = runtime_with_policy(TEST_POLICY, None);
    let fixture = project();
    fixture.write("a.txt", "old content\n");
    std::fs::set_permissions(fixture.root().join("a.txt"), std::fs::Permissions::from_mode(0o640)).expect("chmod");
    std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            fixture.call_on(
                &runtime,
                "impl",
                "fs_probe",
                &json!({"ops": [
                    {"op": "write", "path": "a.txt", "content": "new content, written whole\n"},
                    {"op": "write", "path": "fresh.txt", "content": "a new file\n"},
                    {"op": "sleep", "content": "400"},
                    {"op": "list", "path": "."},
                ]}),
                None,
            )
        });
        std::thread::sleep(Duration::from_millis(150));
        // Mid-call, readers see the old content whole, and no half-written new file.
        assert_eq!(fixture.read_text("a.txt"), "old content\n");
        assert!(!fixture.root().join("fresh.txt").exists());
        let outcome = call.join().expect("call thread");
        // The call's own listing shows the new file, and no temporary one.
        let listed = &outcome.result.expect("ok").structured.expect("structured")[2]["value"];
        let names: Vec<&str> = listed.as_array().expect("names").iter().filter_map(Value::as_str).collect();
        assert!(names.contains(&"fresh.txt") && names.iter().all(|name| !name.starts_with(".toolcell-")), "{listed}");
    });
    assert_eq!(fixture.read_text("a.txt"), "new content, written whole\n");
    assert_eq!(fixture.read_text("fresh.txt"), "a new file\n");
    let mode = std::fs::metadata(fixture.root().join("a.txt")).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    assert!(fixture.snapshot().iter().all(|(path, _)| !path.contains(".toolcell-")), "{:?}", fixture.snapshot());
    // Within the call, what was written is what is read back.
    let outcome = fixture.call_on(
        &runtime,
        "impl",
        "fs_probe",
        &json!({"ops": [
            {"op": "write", "path": "a.txt", "content": "third"},
            {"op": "read", "path": "a.txt"},
            {"op": "append", "path": "a.txt", "content": "+more"},
            {"op": "read", "path": "a.txt"},
        ]}),
        None,
    );
    let structured = outcome.result.expect("ok").structured.expect("structured");
    assert_eq!(structured[1]["value"], "third");
    assert_eq!(structured[3]["value"], "third+more");
    // A file written in a directory that is then renamed or removed lands first.
    let outcome = fixture.call_on(
        &runtime,
        "impl",
        "fs_probe",
        &json!({"ops": [
            {"op": "mkdir", "path": "d/inner"},
            {"op": "write", "path": "d/inner/f.txt", "content": "in d"},
            {"op": "rename", "path": "d", "to": "e"},
            {"op": "mkdir", "path": "gone"},
            {"op": "write", "path": "gone/g.txt", "content": "short-lived"},
            {"op": "remove", "path": "gone/g.txt"},
            {"op": "rmdir", "path": "gone"},
        ]}),
        None,
    );
    let structured = outcome.result.expect("ok").structured.expect("structured");
    assert!(structured.as_array().expect("results").iter().all(|result| result["ok"] == true), "{structured}");
    assert_eq!(fixture.read_text("e/inner/f.txt"), "in d");
    assert!(!fixture.root().join("gone").exists());
    assert!(fixture.snapshot().iter().all(|(path, _)| !path.contains(".toolcell-")), "{:?}", fixture.snapshot());
}

#[test]
fn a_rollback_leaves_files_it_did_not_change_exactly_as_they_were() {
    use std::os::unix::fs::MetadataExt as _;
    let fixture = project();
    let state = tempfile::tempdir().expect("state directory");
    let runtime = runtime_with_policy(TEST_POLICY, Some(state.path()));
    fixture.write("big.txt", "x".repeat(64 * 1024));
    let identity = |relative: &str| {
        let metadata = std::fs::metadata(fixture.root().join(relative)).expect("stat");
        (metadata.ino(), metadata.mode(), metadata.len())
    };
    for path in ["src/a.rs", "run.sh", "big.txt"] {
        let before = identity(path);
        let content = fixture.read(path);
        // Opened for rewriting (journaled, a temporary sibling made), never written, then the
        // call fails: the rollback must not replace the file with a copy of itself.
        let outcome = fixture.call_as(
            &runtime,
            "s-untouched",
            None,
            &[],
            "fs_probe",
            &json!({"ops": [{"op": "truncate", "path": path}, {"op": "fail"}]}),
        );
        assert!(outcome.result.is_err());
        assert_eq!(identity(path), before, "{path}: same inode, mode and size");
        assert_eq!(fixture.read(path), content, "{path}");
    }
    // A file the call did change is still restored.
    let content = fixture.read("src/b.rs");
    let outcome = fixture.call_as(
        &runtime,
        "s-untouched",
        None,
        &[],
        "fs_probe",
        &json!({"ops": [{"op": "append", "path": "src/b.rs", "content": "// more\n"}, {"op": "fail"}]}),
    );
    assert!(outcome.result.is_err());
    assert_eq!(fixture.read("src/b.rs"), content);
}

/// A call goes by the policy it started with to its end: a reload while it runs changes
/// neither its validators nor its limits; the next call goes by the new policy.
#[test]
fn a_call_keeps_the_validators_of_the_policy_it_started_with_across_a_reload() {
    let unvalidated =
        VALIDATED_POLICY.split("[roles.impl]").nth(1).map(|roles| format!("version = 1\n\n[roles.impl]{roles}")).expect("roles");
    let runtime = runtime_with_policy(&unvalidated, None);
    let fixture = project();
    let broken = json!({"ops": [
        {"op": "sleep", "path": "", "content": "1500"},
        {"op": "write", "path": "late.json", "content": "{\"ok\": tru"},
    ]});
    let outcome = std::thread::scope(|scope| {
        let call = scope.spawn(|| fixture.call_on(&runtime, "impl", "fs_probe", &broken, None));
        std::thread::sleep(Duration::from_millis(300));
        runtime.reload_policy("policy.toml", VALIDATED_POLICY).expect("the validated policy loads");
        call.join().expect("the call")
    });
    assert!(outcome.result.is_ok(), "the call started before the reload has no validator: {:?}", outcome.result);
    assert_eq!(fixture.read("late.json"), b"{\"ok\": tru");
    let after =
        fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": [{"op": "write", "path": "next.json", "content": "[1,"}]}), None);
    let error = after.result.expect_err("a call started after the reload is validated");
    assert!(error.message.contains("failed the validator `json-syntax`"), "{}", error.message);
}

//! `move_file`, `delete_file` and `create_directory` through the real host: happy paths,
//! errors, the `delete` access, rules on entries inside a moved directory, and undo.

use std::sync::OnceLock;

use serde_json::json;
use toolcell_runtime::Runtime;
use toolcell_tests::{Fixture, governed_runtime, runtime_with_policy};
use toolcell_types::ToolErrorKind;

/// A role that may write everything but delete nothing, and one whose deletes stop at a
/// directory deep inside.
const NO_DELETE_POLICY: &str = r#"
version = 1

[roles.writer]
tools = ["*"]

[[roles.writer.rules]]
id = "writer-read"
access = ["read", "list"]
paths = ["**"]
effect = "allow"

[[roles.writer.rules]]
id = "writer-write"
access = ["write"]
paths = ["**"]
effect = "allow"

[roles.mover]
tools = ["*"]

[[roles.mover.rules]]
id = "mover-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.mover.rules]]
id = "keep-vendor-pins"
access = ["delete"]
paths = ["lib/vendor/pins/**"]
effect = "deny"

[[roles.mover.rules]]
id = "hidden-keys"
access = ["read"]
paths = ["**/*.key"]
effect = "deny"
"#;

fn no_delete_runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| runtime_with_policy(NO_DELETE_POLICY, None))
}

#[test]
fn moves_files_and_directories_creating_parents() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "alpha\n");
    fixture.write("dir/inner/x.txt", "x\n");
    let output = fixture.ok("move_file", json!({"source": "a.txt", "destination": "new/place/b.txt"}));
    assert_eq!(
        output.structured.expect("structured"),
        json!({"source": "a.txt", "destination": "new/place/b.txt", "kind": "file", "overwritten": false})
    );
    assert!(output.text.contains("Moved file `a.txt` to `new/place/b.txt`."), "{}", output.text);
    assert!(!fixture.root().join("a.txt").exists());
    assert_eq!(fixture.read_text("new/place/b.txt"), "alpha\n");

    fixture.ok("move_file", json!({"source": "dir", "destination": "renamed"}));
    assert_eq!(fixture.read_text("renamed/inner/x.txt"), "x\n");
    assert!(!fixture.root().join("dir").exists());

    // A symlink moves as a link.
    fixture.symlink("renamed/inner/x.txt", "link");
    let output = fixture.ok("move_file", json!({"source": "link", "destination": "link2"}));
    assert_eq!(output.structured.expect("structured")["kind"], "symlink");
    assert_eq!(std::fs::read_link(fixture.root().join("link2")).expect("still a link").to_string_lossy(), "renamed/inner/x.txt");
}

#[test]
fn move_refuses_an_existing_destination_unless_overwrite() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "new\n");
    fixture.write("b.txt", "old\n");
    let message = fixture.error("move_file", json!({"source": "a.txt", "destination": "b.txt"}), ToolErrorKind::Conflict);
    assert!(message.contains("`b.txt` already exists: set `overwrite: true`"), "{message}");
    assert_eq!(fixture.read_text("a.txt"), "new\n");
    assert_eq!(fixture.read_text("b.txt"), "old\n");

    let output = fixture.ok("move_file", json!({"source": "a.txt", "destination": "b.txt", "overwrite": true}));
    assert_eq!(output.structured.expect("structured")["overwritten"], true);
    assert_eq!(fixture.read_text("b.txt"), "new\n");
    assert!(!fixture.root().join("a.txt").exists());

    std::fs::create_dir(fixture.root().join("dir")).expect("mkdir");
    let message = fixture.error("move_file", json!({"source": "b.txt", "destination": "dir", "overwrite": true}), ToolErrorKind::Conflict);
    assert!(message.contains("`dir` is an existing directory") && message.contains("`dir/b.txt`"), "{message}");
}

#[test]
fn move_errors_name_the_paths() {
    let fixture = Fixture::new();
    fixture.write("dir/a.txt", "a");
    let message = fixture.error("move_file", json!({"source": "missing", "destination": "x"}), ToolErrorKind::NotFound);
    assert!(message.contains("`missing` does not exist"), "{message}");
    let message = fixture.error("move_file", json!({"source": "dir", "destination": "dir/sub"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("cannot be moved into itself"), "{message}");
    fixture.error("move_file", json!({"source": "dir", "destination": "dir"}), ToolErrorKind::InvalidArgs);
    fixture.error("move_file", json!({"source": ".", "destination": "x"}), ToolErrorKind::InvalidArgs);
    let message = fixture.error("move_file", json!({"source": "dir/a.txt", "destination": "../outside/x"}), ToolErrorKind::Denied);
    assert!(message.contains("leaves the workspace"), "{message}");
    assert_eq!(fixture.read_text("dir/a.txt"), "a");
    fixture.assert_outside_untouched();
}

#[test]
fn a_role_without_delete_can_neither_move_nor_delete() {
    let fixture = Fixture::new();
    fixture.write("src/a.rs", "a\n");
    let before = fixture.snapshot();
    for (tool, args) in [
        ("move_file", json!({"source": "src/a.rs", "destination": "src/b.rs"})),
        ("delete_file", json!({"path": "src/a.rs"})),
        ("delete_file", json!({"path": "src", "recursive": true})),
    ] {
        let outcome = fixture.call_on(no_delete_runtime(), "writer", tool, &args, None);
        let error = outcome.result.expect_err("no delete access");
        assert_eq!(error.kind, ToolErrorKind::Denied, "{tool}: {error}");
        assert!(error.message.contains("delete of `src/a.rs`"), "{tool}: {}", error.message);
        assert!(outcome.denials.iter().any(|denial| denial.event.access == toolcell_runtime::Access::Delete));
        assert_eq!(fixture.snapshot(), before, "{tool} changed the workspace");
    }
    // The same role may write.
    let outcome = fixture.call_on(no_delete_runtime(), "writer", "create_directory", &json!({"path": "src/new"}), None);
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
}

#[test]
fn moving_a_directory_checks_every_entry_inside_it() {
    let fixture = Fixture::new();
    fixture.write("lib/vendor/pins/lock.txt", "pinned\n");
    fixture.write("lib/vendor/readme.md", "vendor\n");
    fixture.write("lib/signing.key", "KEY\n");
    let before = fixture.snapshot();
    // The directory itself may be deleted, but a file deep inside may not: moving the
    // directory would delete it from where it is.
    let outcome = fixture.call_on(no_delete_runtime(), "mover", "move_file", &json!({"source": "lib", "destination": "lib2"}), None);
    let error = outcome.result.expect_err("a pinned file inside");
    assert_eq!(error.kind, ToolErrorKind::Denied);
    assert!(error.message.contains("lib/vendor/pins"), "{}", error.message);
    assert!(outcome.denials.iter().any(|denial| denial.event.rule == "keep-vendor-pins"));
    assert_eq!(fixture.snapshot(), before);
    // Deleting it recursively is refused the same way, and nothing is deleted.
    let outcome = fixture.call_on(no_delete_runtime(), "mover", "delete_file", &json!({"path": "lib", "recursive": true}), None);
    assert!(outcome.result.is_err());
    assert_eq!(fixture.snapshot(), before);
    // Without the pinned directory, the move goes through and carries the hidden key along:
    // it stays hidden where it lands (`**/*.key`).
    std::fs::remove_dir_all(fixture.root().join("lib/vendor/pins")).expect("remove pins");
    let outcome = fixture.call_on(no_delete_runtime(), "mover", "move_file", &json!({"source": "lib", "destination": "lib2"}), None);
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert_eq!(fixture.read_text("lib2/signing.key"), "KEY\n");
    // Renaming the hidden key to a readable name would reveal it: refused.
    let before = fixture.snapshot();
    // (move_file itself cannot even look at it; a component renaming it blindly is refused.)
    fixture
        .call_on(no_delete_runtime(), "mover", "move_file", &json!({"source": "lib2/signing.key", "destination": "lib2/signing.txt"}), None)
        .result
        .expect_err("move_file may not stat a hidden file");
    let rename = json!({"ops": [{"op": "rename", "path": "lib2/signing.key", "to": "lib2/signing.txt", "content": ""}]});
    let outcome = fixture.call_on(no_delete_runtime(), "mover", "fs_probe", &rename, None);
    let error = outcome.result.expect_err("a hidden file may not become readable");
    assert!(error.message.contains("your role may not read it where it is"), "{}", error.message);
    assert!(outcome.denials.iter().any(|denial| denial.event.rule == "hidden-stays-hidden"));
    assert_eq!(fixture.snapshot(), before);
}

#[test]
fn deletes_files_links_and_directories_only_with_recursive() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "a");
    fixture.write("tree/one.txt", "1");
    fixture.write("tree/sub/two.txt", "2");
    fixture.symlink("../outside/secret.txt", "escape");
    let output = fixture.ok("delete_file", json!({"path": "a.txt"}));
    assert_eq!(output.structured.expect("structured"), json!({"path": "a.txt", "kind": "file", "files": 1, "directories": 0}));
    assert!(!fixture.root().join("a.txt").exists());

    // The link goes, its target outside stays.
    let output = fixture.ok("delete_file", json!({"path": "escape"}));
    assert_eq!(output.structured.expect("structured")["kind"], "symlink");
    fixture.assert_outside_untouched();

    let message = fixture.error("delete_file", json!({"path": "tree"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`tree` is a directory (2 visible entries): set `recursive: true`"), "{message}");
    assert!(fixture.root().join("tree/sub/two.txt").exists());
    let output = fixture.ok("delete_file", json!({"path": "tree", "recursive": true}));
    assert_eq!(output.text, "Deleted the directory `tree` (2 files and 2 directories in all).");
    assert_eq!(output.structured.expect("structured"), json!({"path": "tree", "kind": "directory", "files": 2, "directories": 2}));
    assert!(!fixture.root().join("tree").exists());

    let message = fixture.error("delete_file", json!({"path": "gone"}), ToolErrorKind::NotFound);
    assert!(message.contains("`gone` does not exist"), "{message}");
    fixture.error("delete_file", json!({"path": "."}), ToolErrorKind::InvalidArgs);
}

#[test]
fn a_directory_with_hidden_entries_is_not_deleted_at_all() {
    let fixture = Fixture::new();
    fixture.write("secrets/visible.txt", "v");
    fixture.write("secrets/sub/also.txt", "a");
    // `secrets/**` is unreadable for `impl` in the governed policy, so the whole directory is
    // hidden; use a directory with one hidden file instead.
    fixture.write("mixed/shown.txt", "shown");
    fixture.write("mixed/.env", "TOKEN=1");
    let policy = r#"
version = 1
[roles.impl]
tools = ["*"]
[[roles.impl.rules]]
id = "all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"
[[roles.impl.rules]]
id = "env-hidden"
access = ["read"]
paths = ["**/.env"]
effect = "deny"
"#;
    let runtime = runtime_with_policy(policy, None);
    let before = fixture.snapshot();
    let outcome = fixture.call_on(&runtime, "impl", "delete_file", &json!({"path": "mixed", "recursive": true}), None);
    let error = outcome.result.expect_err("a hidden entry remains");
    assert!(error.message.contains("`mixed`"), "{}", error.message);
    assert_eq!(fixture.snapshot(), before, "the visible file was deleted and not restored");
}

#[test]
fn deletions_and_moves_can_be_undone() {
    let fixture = Fixture::new();
    fixture.write("src/a.rs", "fn a() {}\n");
    fixture.write("src/b.rs", "fn b() {}\n");
    let runtime = governed_runtime();
    let call = |tool: &str, args: serde_json::Value| fixture.call_on(runtime, "impl", tool, &args, None).result;
    call("delete_file", json!({"path": "src/a.rs"})).expect("delete");
    assert!(!fixture.root().join("src/a.rs").exists());
    let undone = call("undo_edit", json!({"path": "src/a.rs"})).expect("undo the deletion");
    assert!(undone.text.contains("Restored `src/a.rs`"), "{}", undone.text);
    assert_eq!(fixture.read_text("src/a.rs"), "fn a() {}\n");

    call("move_file", json!({"source": "src/b.rs", "destination": "src/c.rs"})).expect("move");
    call("undo_edit", json!({"path": "src/c.rs"})).expect("undo the arrival");
    call("undo_edit", json!({"path": "src/b.rs"})).expect("undo the departure");
    assert_eq!(fixture.read_text("src/b.rs"), "fn b() {}\n");
    assert!(!fixture.root().join("src/c.rs").exists());
}

#[test]
fn create_directory_is_mkdir_p_and_quiet_when_it_exists() {
    let fixture = Fixture::new();
    let output = fixture.ok("create_directory", json!({"path": "a/b/c"}));
    assert_eq!(output.structured.expect("structured"), json!({"path": "a/b/c", "created": true}));
    assert!(fixture.root().join("a/b/c").is_dir());
    let output = fixture.ok("create_directory", json!({"path": "a/b/c/"}));
    assert_eq!(output.structured.expect("structured"), json!({"path": "a/b/c", "created": false}));
    assert!(output.text.contains("already exists"), "{}", output.text);

    fixture.write("file.txt", "x");
    let message = fixture.error("create_directory", json!({"path": "file.txt"}), ToolErrorKind::Conflict);
    assert!(message.contains("`file.txt` exists and is not a directory"), "{message}");
    let message = fixture.error("create_directory", json!({"path": "file.txt/sub/dir"}), ToolErrorKind::Conflict);
    assert!(message.contains("`file.txt` is a file"), "{message}");
    let message = fixture.error("create_directory", json!({"path": "../outside/new"}), ToolErrorKind::Denied);
    assert!(message.contains("leaves the workspace"), "{message}");
    fixture.assert_outside_untouched();

    // Through a symlink that leads outside, the host refuses.
    fixture.symlink("../outside", "out");
    fixture.error("create_directory", json!({"path": "out/new"}), ToolErrorKind::Denied);
    fixture.assert_outside_untouched();
    // `docs/**` may not be written by `impl` in the governed policy.
    let (message, rules) = fixture.denied("impl", "create_directory", json!({"path": "docs/new"}));
    assert!(rules.contains(&"docs-read-only".to_owned()), "{message}");
    assert!(!fixture.root().join("docs").exists());
}

#[test]
fn moving_a_directory_never_names_the_hidden_entries_in_it() {
    let fixture = Fixture::new();
    fixture.write("secrets/key.pem", "PRIVATE");
    fixture.write("secrets/readme.txt", "hidden too");
    let before = fixture.snapshot();
    // `secrets/**` may not be read by impl: moving the directory to `public` would reveal it.
    let outcome = fixture.call_on(governed_runtime(), "impl", "move_file", &json!({"source": "secrets", "destination": "public"}), None);
    let error = outcome.result.expect_err("the hidden entries would become readable");
    assert_eq!(error.kind, ToolErrorKind::Denied);
    assert!(
        error.message.contains("moving the directory `secrets` is refused: it holds entries your role may not see"),
        "{}",
        error.message
    );
    assert!(!error.message.contains("key.pem") && !error.message.contains("readme.txt"), "a hidden name leaked: {}", error.message);
    // The audit trail (for the operator) has the entry.
    assert!(outcome.denials.iter().any(|denial| denial.event.rule == "hidden-entry" && denial.event.path.starts_with("secrets/")));
    assert_eq!(fixture.snapshot(), before);
}

/// A directory that lists as empty for the role, holding only entries it may not see: removing
/// it is refused as that, with a record naming the entry for the operator, not failed with the
/// file system's "not empty".
#[test]
fn removing_a_directory_that_holds_hidden_entries_is_refused_as_such() {
    let fixture = Fixture::new();
    fixture.write("secrets/key.pem", "PRIVATE");
    let before = fixture.snapshot();
    let outcome = fixture.call_on(governed_runtime(), "impl", "delete_file", &json!({"path": "secrets", "recursive": true}), None);
    let error = outcome.result.expect_err("the hidden entry stays");
    assert_eq!(error.kind, ToolErrorKind::Denied, "{}", error.message);
    assert!(
        error.message.contains("removing the directory `secrets` is refused: it holds entries your role may not see"),
        "{}",
        error.message
    );
    assert!(!error.message.contains("key.pem"), "a hidden name leaked: {}", error.message);
    assert!(
        outcome.denials.iter().any(|denial| denial.event.rule == "hidden-entry" && denial.event.path == "secrets/key.pem"),
        "{:?}",
        outcome.denials
    );
    assert_eq!(fixture.snapshot(), before);
}

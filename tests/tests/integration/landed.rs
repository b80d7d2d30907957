//! A file a call put in place stays the call's (read by its session, undoable by it) when only
//! its metadata changes before the call ends: a change time that moved is no evidence of
//! another writer, the content is.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use serde_json::{Value, json};
use toolcell_tests::{Fixture, TEST_POLICY, runtime_with_policy};

fn refusing_unread() -> toolcell_runtime::Runtime {
    runtime_with_policy(&TEST_POLICY.replace("version = 1", "version = 1\n[writes]\nread_before_write = \"refuse\""), None)
}

fn fixture() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("src/a.rs", "fn a() {}\n");
    fixture
}

/// Its session wrote what is there (an edit needs no read first), and can undo it.
fn assert_the_sessions_own(fixture: &Fixture, runtime: &toolcell_runtime::Runtime, what: &str) {
    let session = |tool: &str, args: Value| fixture.call_as(runtime, "s-1", None, &[], tool, &args).result;
    let edit = json!({"path": "src/a.rs", "edits": [{"old_string": "mine", "new_string": "edited"}]});
    session("edit_file", edit).unwrap_or_else(|error| panic!("{what}: the session wrote what is there: {}", error.message));
    session("undo_edit", json!({"path": "src/a.rs"})).unwrap_or_else(|error| panic!("{what}: undo the edit: {}", error.message));
    session("undo_edit", json!({"path": "src/a.rs"})).unwrap_or_else(|error| panic!("{what}: undo the write: {}", error.message));
    assert_eq!(fixture.read_text("src/a.rs"), "fn a() {}\n", "{what}");
}

/// The call itself hard-links the file it put in place (its change time moves with its link
/// count): the file is still the call's own.
#[test]
fn a_file_the_call_links_after_putting_it_in_place_stays_its_own() {
    let runtime = refusing_unread();
    let fixture = fixture();
    fixture.call_as(&runtime, "s-1", None, &[], "read_file", &json!({"path": "src/a.rs"})).result.expect("read");
    let ops = json!({"ops": [
        {"op": "write", "path": "src/a.rs", "content": "mine\n"},
        {"op": "hard_link", "path": "src/a.rs", "to": "src/copy.rs"},
    ]});
    let outcome = fixture.call_as(&runtime, "s-1", None, &[], "fs_probe", &ops);
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    fixture.call_as(&runtime, "s-1", None, &[], "undo_edit", &json!({"path": "src/a.rs"})).result.expect("the call's write is undone");
    assert_eq!(fixture.read_text("src/a.rs"), "fn a() {}\n");
}

/// A change made by another process to the file at a path, and what it is.
type Touch = (&'static str, fn(&std::path::Path));

/// Another process changes only the metadata of the file the call put in place, while the
/// call runs (a `chmod` to the mode it has, a hard link made and removed, a move away and
/// back): the file is still the call's own.
#[test]
fn a_file_whose_metadata_alone_changed_while_the_call_ran_stays_its_own() {
    let touches: [Touch; 3] = [
        ("chmod to its own mode", |path| {
            let mode = std::fs::metadata(path).expect("stat").permissions().mode();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }),
        ("link and unlink", |path| {
            std::fs::hard_link(path, path.with_extension("link")).expect("link");
            std::fs::remove_file(path.with_extension("link")).expect("unlink");
        }),
        ("move away and back", |path| {
            std::fs::rename(path, path.with_extension("away")).expect("away");
            std::fs::rename(path.with_extension("away"), path).expect("back");
        }),
    ];
    for (what, touch) in touches {
        let runtime = refusing_unread();
        let fixture = fixture();
        fixture.call_as(&runtime, "s-1", None, &[], "read_file", &json!({"path": "src/a.rs"})).result.expect("read");
        let outcome = fixture.while_a_call_holds(&runtime, "s-1", ("src/a.rs", "mine\n"), 1000, || {
            // Later than the kernel's coarse clock tick, so the change time moves.
            std::thread::sleep(Duration::from_millis(20));
            touch(&fixture.root().join("src/a.rs"));
        });
        assert!(outcome.result.is_ok(), "{what}: {:?}", outcome.result);
        assert_the_sessions_own(&fixture, &runtime, what);
    }
}

/// The call itself sets the times of the file it put in place (`set-times-at`, which the
/// journal does not see): the file is still the call's own.
#[test]
fn a_file_whose_times_the_call_sets_after_putting_it_in_place_stays_its_own() {
    let runtime = refusing_unread();
    let fixture = fixture();
    fixture.call_as(&runtime, "s-1", None, &[], "read_file", &json!({"path": "src/a.rs"})).result.expect("read");
    let ops = json!({"ops": [
        {"op": "write", "path": "src/a.rs", "content": "mine\n"},
        {"op": "raw_touch", "path": "src/a.rs"},
    ]});
    let outcome = fixture.call_as(&runtime, "s-1", None, &[], "fs_probe", &ops);
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert!(outcome.result.as_ref().is_ok_and(|output| !output.text.contains("\"ok\":false")), "{:?}", outcome.result);
    assert_the_sessions_own(&fixture, &runtime, "times set by the call");
}

//! What a session records of the files its calls wrote (the version it saw, the undo record's
//! `after`) is what the call left there: a change another program makes to such a file in
//! place (same inode, same length), during the call or after it, is neither read by the
//! session nor undone over, and what the call left is undoable and writable again as it is.
//! A move shows nothing: a file moved carries to where it goes what the session knew of it.

use std::io::{Seek as _, SeekFrom, Write as _};
use std::time::Duration;

use serde_json::json;
use toolcell_runtime::Runtime;
use toolcell_tests::{Fixture, TEST_POLICY, runtime_with_policy};
use toolcell_types::ToolErrorKind;

fn refusing() -> Runtime {
    let policy = TEST_POLICY.replace("version = 1", "version = 1\n[writes]\nread_before_write = \"refuse\"");
    runtime_with_policy(&policy, None)
}

/// Overwrite `relative`'s bytes in place from its start (no truncation, no new inode), as an
/// editor or a tool writing through an open descriptor does.
fn overwrite_in_place(fixture: &Fixture, relative: &str, content: &str) {
    let mut file = std::fs::OpenOptions::new().write(true).open(fixture.root().join(relative)).expect("open in place");
    file.seek(SeekFrom::Start(0)).expect("seek");
    file.write_all(content.as_bytes()).expect("write in place");
}

/// A session's call of `tool` with `args`: its result.
type Session<'a> = dyn Fn(&str, serde_json::Value) -> Result<toolcell_types::ToolOutput, toolcell_types::ToolError> + 'a;

/// `src/a.rs` there, read by the session, then rewritten by it as `version 2`.
fn read_then_rewritten(fixture: &Fixture, session: &Session<'_>) {
    fixture.write("src/a.rs", "fn a() {}\n");
    session("read_file", json!({"path": "src/a.rs"})).expect("read");
    session("write_file", json!({"path": "src/a.rs", "content": "version 2\n"})).expect("write");
}

fn inode(fixture: &Fixture, relative: &str) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(fixture.root().join(relative)).expect("stat").ino()
}

/// The file a call put in place, changed in place (same inode and length) by another program
/// while the call still runs: the session did not see that content, so it may not edit it
/// without reading it, and `undo_edit` does not write over it.
#[test]
fn a_file_changed_in_place_while_its_call_still_runs_is_neither_read_nor_undone_over() {
    let runtime = refusing();
    let fixture = Fixture::new();
    fixture.write("src/a.rs", "fn a() {}\n");
    fixture.call_as(&runtime, "s-1", None, &[], "read_file", &json!({"path": "src/a.rs"})).result.expect("read");
    let outcome = fixture.while_a_call_holds(&runtime, "s-1", ("src/a.rs", "mine\n"), 1500, || {
        let landed = inode(&fixture, "src/a.rs");
        overwrite_in_place(&fixture, "src/a.rs", "MINE\n");
        assert_eq!(inode(&fixture, "src/a.rs"), landed, "changed in place");
    });
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let edit = json!({"path": "src/a.rs", "edits": [{"old_string": "MINE", "new_string": "edited"}]});
    let error = fixture.call_as(&runtime, "s-1", None, &[], "edit_file", &edit).result.expect_err("never read");
    assert_eq!(error.kind, ToolErrorKind::Conflict, "{}", error.message);
    let undone = fixture.call_as(&runtime, "s-1", None, &[], "undo_edit", &json!({"path": "src/a.rs"})).result;
    assert!(undone.is_err(), "undo_edit wrote over another program's change: {undone:?}");
    assert_eq!(fixture.read_text("src/a.rs"), "MINE\n");
}

/// The same, once the call has answered: the version the session recorded for its write (the
/// hash the file landed with) does not make the other program's content its own.
#[test]
fn a_file_changed_in_place_after_its_call_answered_is_neither_read_nor_undone_over() {
    let (runtime, fixture) = (refusing(), Fixture::new());
    let session = |tool: &str, args: serde_json::Value| fixture.call_as(&runtime, "s-1", None, &[], tool, &args).result;
    read_then_rewritten(&fixture, &session);
    let landed = inode(&fixture, "src/a.rs");
    overwrite_in_place(&fixture, "src/a.rs", "VERSION 2\n");
    assert_eq!(inode(&fixture, "src/a.rs"), landed, "changed in place");
    let error =
        session("edit_file", json!({"path": "src/a.rs", "edits": [{"old_string": "VERSION", "new_string": "v"}]})).expect_err("never read");
    assert_eq!(error.kind, ToolErrorKind::Conflict, "{}", error.message);
    let error = session("undo_edit", json!({"path": "src/a.rs"})).expect_err("changed since");
    assert_eq!(error.kind, ToolErrorKind::Conflict, "{}", error.message);
    assert_eq!(fixture.read_text("src/a.rs"), "VERSION 2\n");
}

/// What a call left, untouched since (or only touched: its times changed, its content not), is
/// the session's: it edits it without reading it again, and undoes each call in turn.
#[test]
fn a_file_as_its_call_left_it_is_edited_and_undone_without_being_read_again() {
    let (runtime, fixture) = (refusing(), Fixture::new());
    let session = |tool: &str, args: serde_json::Value| fixture.call_as(&runtime, "s-1", None, &[], tool, &args).result;
    read_then_rewritten(&fixture, &session);
    session("edit_file", json!({"path": "src/a.rs", "edits": [{"old_string": "2", "new_string": "3"}]})).expect("its own write");
    // Touched by another program: new times, the same content.
    std::thread::sleep(Duration::from_millis(20));
    let file = std::fs::OpenOptions::new().write(true).open(fixture.root().join("src/a.rs")).expect("open");
    file.set_modified(std::time::SystemTime::now()).expect("touch");
    drop(file);
    session("edit_file", json!({"path": "src/a.rs", "edits": [{"old_string": "3", "new_string": "4"}]})).expect("touched only");
    assert_eq!(fixture.read_text("src/a.rs"), "version 4\n");
    for expected in ["version 3\n", "version 2\n", "fn a() {}\n"] {
        session("undo_edit", json!({"path": "src/a.rs"})).expect("undo");
        assert_eq!(fixture.read_text("src/a.rs"), expected);
    }
}

/// Moving a file does not show the session its content: under `read_before_write = "refuse"`
/// a file moved without being read, away and back, by two calls or within one, still has to
/// be read before it is edited.
#[test]
fn a_file_moved_without_being_read_is_still_unread() {
    let runtime = refusing();
    let fixture = Fixture::new();
    fixture.write("src/unread.rs", "never shown\n");
    let session = |tool: &str, args: serde_json::Value| fixture.call_as(&runtime, "s-1", None, &[], tool, &args).result;
    let edit = |path: &str| json!({"path": path, "edits": [{"old_string": "never", "new_string": "edited"}]});
    assert_eq!(session("edit_file", edit("src/unread.rs")).expect_err("unread").kind, ToolErrorKind::Conflict);
    session("move_file", json!({"source": "src/unread.rs", "destination": "src/tmp.rs"})).expect("move away");
    assert_eq!(session("edit_file", edit("src/tmp.rs")).expect_err("moved, unread").kind, ToolErrorKind::Conflict);
    session("move_file", json!({"source": "src/tmp.rs", "destination": "src/unread.rs"})).expect("move back");
    let edited = session("edit_file", edit("src/unread.rs"));
    assert_eq!(edited.map(|output| output.text).map_err(|error| error.kind), Err(ToolErrorKind::Conflict), "edited unread");
    // Within one call: renamed away and back by a component.
    let ops = json!({"ops": [
        {"op": "rename", "path": "src/unread.rs", "to": "src/away.rs"},
        {"op": "rename", "path": "src/away.rs", "to": "src/unread.rs"},
    ]});
    let renamed = session("fs_probe", ops).expect("renamed away and back");
    assert_eq!(renamed.text.matches("\"ok\":true").count(), 2, "{}", renamed.text);
    assert_eq!(session("edit_file", edit("src/unread.rs")).expect_err("still unread").kind, ToolErrorKind::Conflict);
    // Given a second name (and the first removed outside toolcell, so that the file has one
    // name again): the same.
    let ops = json!({"ops": [{"op": "hard_link", "path": "src/unread.rs", "to": "src/other.rs"}]});
    let linked = session("fs_probe", ops).expect("linked");
    assert_eq!(linked.text.matches("\"ok\":true").count(), 1, "{}", linked.text);
    std::fs::remove_file(fixture.root().join("src/unread.rs")).expect("remove the first name");
    assert_eq!(session("edit_file", edit("src/other.rs")).expect_err("linked, unread").kind, ToolErrorKind::Conflict);
    assert_eq!(fixture.read_text("src/other.rs"), "never shown\n");
}

/// What the session knew of a file goes with it: read, then moved, it is edited where it went
/// without being read again; written by a call and renamed into place in the same call, it is
/// the session's too.
#[test]
fn a_file_read_or_written_then_moved_is_known_where_it_went() {
    let runtime = refusing();
    let fixture = Fixture::new();
    fixture.write("src/read.rs", "shown\n");
    let session = |tool: &str, args: serde_json::Value| fixture.call_as(&runtime, "s-1", None, &[], tool, &args).result;
    let edit = |path: &str, from: &str, to: &str| json!({"path": path, "edits": [{"old_string": from, "new_string": to}]});
    session("read_file", json!({"path": "src/read.rs"})).expect("read");
    session("move_file", json!({"source": "src/read.rs", "destination": "src/moved.rs"})).expect("move");
    session("edit_file", edit("src/moved.rs", "shown", "edited")).expect("known where it went");
    assert_eq!(fixture.read_text("src/moved.rs"), "edited\n");
    let ops = json!({"ops": [
        {"op": "write", "path": "src/.new.tmp", "content": "written by the call\n"},
        {"op": "rename", "path": "src/.new.tmp", "to": "src/saved.rs"},
    ]});
    let saved = session("fs_probe", ops).expect("written and renamed into place");
    assert_eq!(saved.text.matches("\"ok\":true").count(), 2, "{}", saved.text);
    session("edit_file", edit("src/saved.rs", "written", "changed")).expect("the call's own content");
    assert_eq!(fixture.read_text("src/saved.rs"), "changed by the call\n");
}

/// Within the call that moved it, a file the session never read is no more writable where it
/// went than where it was: renamed and written, appended to, truncated, or renamed over a
/// file the call had just written, it is refused, and the call leaves it as it was.
#[test]
fn a_file_moved_without_being_read_cannot_be_written_in_the_same_call() {
    let runtime = refusing();
    let attempts = [
        json!([
            {"op": "rename", "path": "src/unread.rs", "to": "src/away.rs"},
            {"op": "write", "path": "src/away.rs", "content": "replaced\n"},
            {"op": "rename", "path": "src/away.rs", "to": "src/unread.rs"},
        ]),
        json!([
            {"op": "rename", "path": "src/unread.rs", "to": "src/away.rs"},
            {"op": "append", "path": "src/away.rs", "content": "appended\n"},
        ]),
        json!([
            {"op": "rename", "path": "src/unread.rs", "to": "src/away.rs"},
            {"op": "truncate", "path": "src/away.rs"},
        ]),
        json!([
            {"op": "write", "path": "src/away.rs", "content": "the call's\n"},
            {"op": "rename", "path": "src/unread.rs", "to": "src/away.rs"},
            {"op": "write", "path": "src/away.rs", "content": "replaced\n"},
        ]),
    ];
    for (index, ops) in attempts.into_iter().enumerate() {
        let fixture = Fixture::new();
        fixture.write("src/unread.rs", "never shown\n");
        let outcome = fixture.call_as(&runtime, "s-1", None, &[], "fs_probe", &json!({ "ops": ops }));
        let text = outcome.result.map(|output| output.text).unwrap_or_default();
        assert!(text.matches("\"ok\":false").count() >= 1 || text.is_empty(), "attempt {index} wrote an unread file: {text}");
        let left = ["src/unread.rs", "src/away.rs"].map(|path| std::fs::read_to_string(fixture.root().join(path)).ok());
        assert!(left.contains(&Some("never shown\n".to_owned())), "attempt {index} left {left:?}");
    }
}

/// `undo_edit` putting back a file the session never read (moved away, or removed) does not
/// show it: it is still unread where it comes back.
#[test]
fn a_file_put_back_by_undo_without_being_read_is_still_unread() {
    let runtime = refusing();
    let edit = json!({"path": "src/unread.rs", "edits": [{"old_string": "never", "new_string": "edited"}]});
    for undone in ["move_file", "delete_file"] {
        let fixture = Fixture::new();
        fixture.write("src/unread.rs", "never shown\n");
        let session = |tool: &str, args: &serde_json::Value| fixture.call_as(&runtime, "s-1", None, &[], tool, args).result;
        match undone {
            "move_file" => {
                session(undone, &json!({"source": "src/unread.rs", "destination": "src/b.rs"})).expect("moved");
                // Undone path by path: the new name goes, the old one comes back.
                session("undo_edit", &json!({"path": "src/b.rs"})).expect("the new name undone");
                session("undo_edit", &json!({"path": "src/unread.rs"})).expect("the old name put back");
            }
            _ => {
                session(undone, &json!({"path": "src/unread.rs"})).expect("removed");
                session("undo_edit", &json!({"path": "src/unread.rs"})).expect("put back");
            }
        }
        assert_eq!(fixture.read_text("src/unread.rs"), "never shown\n", "{undone} undone");
        let edited = session("edit_file", &edit).map(|output| output.text).map_err(|error| error.kind);
        assert_eq!(edited, Err(ToolErrorKind::Conflict), "edited unread after {undone} was undone");
    }
}

//! A rollback puts back only what its call changed, and all of it. A path the call changed in
//! place (removed, moved away, made a directory, symlink or link at, renamed something onto)
//! that another process or program changed since is left as they made it, and the error says
//! so; the call's own changes, a removal it undid itself included, are rolled back whole. The
//! times a call set (`set-times-at`, `set-times` on a descriptor) are put back too.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolcell_runtime::{CallOutcome, Runtime};
use toolcell_tests::{Fixture, TEST_POLICY, audit_records, eventually, runtime_with_policy};

const OTHER_WORKSPACE: &str = "TOOLCELL_TEST_OTHER_WORKSPACE";
const OTHER_STATE: &str = "TOOLCELL_TEST_OTHER_STATE";
const OTHER_CALL: &str = "TOOLCELL_TEST_OTHER_CALL";

/// The file a held call waits for before it goes on (another program's, in the workspace).
const MARKER: &str = "go.marker";

/// What the other process writes.
const THEIRS: &str = "IMPORTANT new work by another process\n";

/// `ops`, then a wait until [`MARKER`] appears, then `after`, then a failure.
fn held(ops: &[Value], after: &[Value]) -> Value {
    let mut all = ops.to_vec();
    all.push(json!({"op": "seek", "path": ".", "content": MARKER, "to": "stat", "times": 60_000}));
    all.extend_from_slice(after);
    all.push(json!({"op": "fail"}));
    json!({ "ops": all })
}

/// Run `ops` in a call of `runtime` on `fixture`; once `started` holds, run `meanwhile`, then
/// let the call go on (write [`MARKER`]) and return its outcome.
fn while_held(fixture: &Fixture, runtime: &Runtime, ops: &Value, started: impl Fn() -> bool, meanwhile: impl FnOnce()) -> CallOutcome {
    std::thread::scope(|scope| {
        let call = scope.spawn(|| fixture.call_as(runtime, "s-call", None, &[], "fs_probe", ops));
        eventually("the call's change", Duration::from_secs(30), || started() || call.is_finished());
        assert!(!call.is_finished(), "the call ended before anything else happened");
        meanwhile();
        fixture.write(MARKER, "go");
        call.join().expect("the call")
    })
}

/// Another process (this test binary, as a host of its own on `workspace` and `state`) calls
/// `tool` with `args` as `impl`; what it answered.
fn in_another_process(workspace: &Path, state: &Path, tool: &str, args: &Value) -> String {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "rollback_scope::another_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env(OTHER_WORKSPACE, workspace)
        .env(OTHER_STATE, state)
        .env(OTHER_CALL, json!([tool, args]).to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the other process");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // After the harness's `test ... ` on the same line.
    let answer = lines
        .map_while(Result::ok)
        .find_map(|line| line.split_once("ANSWER ").map(|(_, answer)| answer.to_owned()))
        .expect("the other process answers");
    child.wait().expect("the other process ends");
    answer
}

/// Not a test on its own: the other process of [`in_another_process`].
#[test]
#[ignore = "run as another process by the tests of this module"]
fn another_process() {
    let (Ok(workspace), Ok(state), Ok(call)) = (std::env::var(OTHER_WORKSPACE), std::env::var(OTHER_STATE), std::env::var(OTHER_CALL))
    else {
        return;
    };
    let call: Value = serde_json::from_str(&call).expect("the call");
    let runtime = runtime_with_policy(TEST_POLICY, Some(state.as_ref()));
    let workspace = toolcell_runtime::Workspace::open(workspace.as_ref()).expect("workspace");
    let tool = call[0].as_str().expect("a tool");
    let outcome = toolcell_tests::call_in(&runtime, &workspace, "s-other", None, &[], tool, &call[1]);
    let answer = match outcome.result {
        Ok(output) => format!("ok {}", output.text),
        Err(error) => format!("error {}", error.message),
    };
    // Straight to the real stdout, which the parent reads (not the test harness's capture).
    let mut stdout = std::io::stdout();
    writeln!(stdout, "ANSWER {}", answer.replace('\n', " ")).and_then(|()| stdout.flush()).expect("answer the parent");
}

/// F4: a call removes `d.txt` (or moves `m.txt` away), and while it runs another toolcell
/// process (its own in-flight table: it does not see the call's paths) writes a new file
/// there with `write_file`; then the call fails. Its rollback leaves the other process's file
/// (and a moved file where the call moved it), and says so, in its error and in the audit
/// trail. Before, it put the old content back over the other's and said that no file was
/// changed.
#[test]
fn a_rollback_leaves_a_file_another_process_wrote_where_the_call_removed_or_moved_one() {
    let mut failures = Vec::new();
    for (what, op, path) in [
        ("removed", json!({"op": "remove", "path": "d.txt"}), "d.txt"),
        ("moved away", json!({"op": "rename", "path": "m.txt", "to": "n.txt"}), "m.txt"),
    ] {
        let fixture = Fixture::new();
        fixture.write(path, "old content\n");
        let state = tempfile::tempdir().expect("state");
        let runtime = runtime_with_policy(TEST_POLICY, Some(state.path()));
        let mut answer = String::new();
        let outcome = while_held(
            &fixture,
            &runtime,
            &held(&[op], &[]),
            || !fixture.root().join(path).exists(),
            || answer = in_another_process(fixture.root(), state.path(), "write_file", &json!({"path": path, "content": THEIRS})),
        );
        assert!(answer.starts_with("ok "), "{what}: the other process's write: {answer}");
        let error = outcome.result.expect_err("the call fails");
        let record = audit_records(&runtime)
            .into_iter()
            .find(|record| record.call_id == outcome.call_id && record.kind == toolcell_audit::Kind::Call)
            .expect("the call's record");
        let said = format!("Changed by another session after this call changed them, and left as that session made them: `{path}`");
        let mut checks = vec![
            (read(&fixture, path).as_deref() == Some(THEIRS), "the rollback wrote over the other process's file"),
            (!error.message.contains("No file was changed") && error.message.contains(&said), "the error does not say what was left"),
            (record.message.as_deref().is_some_and(|message| message.contains(&said)), "the audit record does not say what was left"),
        ];
        if what == "moved away" {
            checks.push((read(&fixture, "n.txt").as_deref() == Some("old content\n"), "the moved file is lost"));
            checks.push((error.message.contains("`n.txt` (from `m.txt`)"), "the error does not say where the moved file is"));
        }
        failures.extend(checks.into_iter().filter(|(ok, _)| !ok).map(|(_, failure)| format!("{what}: {failure}: {}", error.message)));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The content of `relative` in `fixture`, if it is a readable file.
fn read(fixture: &Fixture, relative: &str) -> Option<String> {
    std::fs::read_to_string(fixture.root().join(relative)).ok()
}

/// What another program puts where the call made a name (a directory, a symlink, a hard link,
/// a file renamed onto an existing one), replacing what the call made, or where it moved a
/// directory away from, is left as it is (and the directory where the call moved it).
#[test]
fn a_rollback_leaves_what_another_program_put_where_the_call_made_a_name() {
    let mut failures = Vec::new();
    for (what, op, path) in [
        ("a directory", json!({"op": "raw_mkdir", "path": "made"}), "made"),
        ("a symlink", json!({"op": "raw_symlink", "path": "made", "to": "x.txt"}), "made"),
        ("a hard link", json!({"op": "raw_link", "path": "x.txt", "to": "made"}), "made"),
        ("a rename onto", json!({"op": "raw_rename", "path": "x.txt", "to": "onto.txt"}), "onto.txt"),
        ("a directory moved away", json!({"op": "raw_rename", "path": "dir", "to": "moved"}), "dir"),
    ] {
        let fixture = Fixture::new();
        fixture.write("x.txt", "x\n");
        fixture.write("onto.txt", "onto\n");
        fixture.write("dir/inner.txt", "inner\n");
        let runtime = runtime_with_policy(TEST_POLICY, None);
        let before = std::fs::symlink_metadata(fixture.root().join(path)).ok().map(|metadata| metadata.ino());
        let target = fixture.root().join(path);
        let outcome = while_held(
            &fixture,
            &runtime,
            &held(&[op], &[]),
            || std::fs::symlink_metadata(&target).ok().map(|metadata| metadata.ino()) != before,
            || {
                // Another program takes the name over: removes what the call made, writes its own.
                match std::fs::symlink_metadata(&target) {
                    Ok(metadata) if metadata.is_dir() => std::fs::remove_dir(&target).expect("rmdir"),
                    Ok(_) => std::fs::remove_file(&target).expect("rm"),
                    Err(_) => {}
                }
                std::fs::write(&target, "theirs\n").expect("write");
            },
        );
        let error = outcome.result.expect_err("the call fails");
        let checks = [
            (read(&fixture, path).as_deref() == Some("theirs\n"), "the rollback removed or replaced another program's file"),
            (error.message.contains(&format!("left as that session made them: `{path}`")), "the error does not say what was left"),
            (read(&fixture, "x.txt").as_deref() == Some("x\n"), "the rest was not rolled back"),
            (
                what != "a directory moved away"
                    || (read(&fixture, "moved/inner.txt").as_deref() == Some("inner\n") && error.message.contains("`moved` (from `dir`)")),
                "the moved directory was not left where the call moved it",
            ),
        ];
        failures.extend(checks.into_iter().filter(|(ok, _)| !ok).map(|(_, failure)| format!("{what}: {failure}: {}", error.message)));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The call removes `d.txt` (or writes it, put in place mid-call), another program writes a
/// new one meanwhile, and the call goes on: removes that one too, or writes `d.txt` (new
/// content never put in place, before or after the other's write); then it fails. The
/// rollback puts back the other's file (undoing the call's second removal), never the old
/// content (nor nothing) over it.
#[test]
fn a_rollback_stops_at_what_another_program_made_between_two_changes_of_the_call() {
    let remove = json!({"op": "remove", "path": "d.txt"});
    let write = json!({"op": "write", "path": "d.txt", "content": "the call's"});
    let land = json!({"op": "read_link", "path": "d.txt"});
    let mut failures = Vec::new();
    for (what, before, mid, after) in [
        ("removed again", vec![remove.clone()], None, vec![remove.clone()]),
        ("written before", vec![remove.clone(), write.clone()], None, vec![]),
        ("written after", vec![remove.clone()], None, vec![write.clone()]),
        ("put in place, then removed", vec![write.clone(), land], Some("the call's"), vec![remove.clone()]),
    ] {
        let fixture = Fixture::new();
        fixture.write("d.txt", "old content\n");
        let runtime = runtime_with_policy(TEST_POLICY, None);
        let outcome = while_held(
            &fixture,
            &runtime,
            &held(&before, &after),
            || read(&fixture, "d.txt").as_deref() == mid,
            || fixture.write("d.txt", THEIRS),
        );
        let error = outcome.result.expect_err("the call fails");
        let checks = [
            (read(&fixture, "d.txt").as_deref() == Some(THEIRS), "the other program's file was not put back as it made it"),
            (error.message.contains("left as that session made them: `d.txt`"), "the error does not say what was left"),
        ];
        failures.extend(checks.into_iter().filter(|(ok, _)| !ok).map(|(_, failure)| format!("{what}: {failure}: {}", error.message)));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The call's own changes are all rolled back, however it changed a path again: a file it
/// removed and then made again (a new file, put in place mid-call; a directory; a symlink), a
/// file it moved away and back, a directory it moved with what it wrote in it.
#[test]
fn a_call_that_undoes_its_own_removal_is_still_rolled_back_whole() {
    for (what, ops) in [
        ("written again", vec![json!({"op": "write", "path": "d.txt", "content": "mine"}), json!({"op": "read_link", "path": "d.txt"})]),
        ("a directory", vec![json!({"op": "raw_mkdir", "path": "d.txt"})]),
        ("a symlink", vec![json!({"op": "raw_symlink", "path": "d.txt", "to": "x.txt"})]),
        (
            "moved back",
            vec![json!({"op": "raw_rename", "path": "x.txt", "to": "d.txt"}), json!({"op": "raw_rename", "path": "d.txt", "to": "x.txt"})],
        ),
    ] {
        let fixture = Fixture::new();
        fixture.write("d.txt", "old content\n");
        fixture.write("x.txt", "x\n");
        fixture.write("dir/inner.txt", "inner\n");
        let before = fixture.snapshot();
        let runtime = runtime_with_policy(TEST_POLICY, None);
        let mut all = vec![json!({"op": "remove", "path": "d.txt"})];
        all.extend(ops);
        all.push(json!({"op": "write", "path": "dir/inner.txt", "content": "mine"}));
        all.push(json!({"op": "rename", "path": "dir", "to": "moved"}));
        all.push(json!({"op": "fail"}));
        let outcome = fixture.call_as(&runtime, "s-call", None, &[], "fs_probe", &json!({ "ops": all }));
        let error = outcome.result.expect_err("the call fails");
        assert_eq!(fixture.snapshot(), before, "{what}: {}", error.message);
        assert!(error.message.contains("every change this call made was rolled back"), "{what}: {}", error.message);
    }
}

/// A time long before the tests run, to the nanosecond.
fn long_ago() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789)
}

/// The modification time of `relative` in `fixture`, to the nanosecond.
fn modified(fixture: &Fixture, relative: &str) -> Option<(i64, i64)> {
    let metadata = std::fs::symlink_metadata(fixture.root().join(relative)).ok()?;
    Some((metadata.mtime(), metadata.mtime_nsec()))
}

/// F5: a call sets the modification time (to the epoch) of an existing file with
/// `set-times-at`, through a read-only descriptor of it with `set-times`, of a directory
/// through its descriptor; alone, or with a rewrite of the file (before or after, put in
/// place mid-call) or its removal; then it fails. The rollback puts the times back (the file's
/// content too), and says every change was rolled back. Before, the times stayed changed.
#[test]
fn a_rollback_sets_back_the_times_a_call_set() {
    let touch = json!({"op": "raw_touch", "path": "t.txt"});
    let rewrite = [json!({"op": "write", "path": "t.txt", "content": "the call's"}), json!({"op": "read_link", "path": "t.txt"})];
    let cases: [(&str, Vec<Value>); 6] = [
        ("set-times-at", vec![touch.clone()]),
        ("set-times on a read-only descriptor", vec![json!({"op": "stream_script", "content": "open:t.txt,r;touch"})]),
        ("set-times on a directory's descriptor", vec![json!({"op": "stream_script", "content": "open:d,rd;touch"})]),
        ("set-times-at, then a rewrite", vec![touch.clone(), rewrite[0].clone(), rewrite[1].clone()]),
        ("a rewrite, then set-times-at", vec![rewrite[0].clone(), rewrite[1].clone(), touch.clone()]),
        ("set-times-at, then a removal", vec![touch.clone(), json!({"op": "remove", "path": "t.txt"})]),
    ];
    let runtime = runtime_with_policy(TEST_POLICY, None);
    let mut failures = Vec::new();
    for (what, ops) in cases {
        for fail in [false, true] {
            let fixture = Fixture::new();
            fixture.write("t.txt", "original\n");
            fixture.write("d/inside.txt", "inside\n");
            for path in ["t.txt", "d"] {
                std::fs::File::open(fixture.root().join(path)).and_then(|file| file.set_modified(long_ago())).expect("set the time");
            }
            let before = (modified(&fixture, "t.txt"), modified(&fixture, "d"));
            let mut all = ops.clone();
            if fail {
                all.push(json!({"op": "fail"}));
            }
            let outcome = fixture.call_as(&runtime, "s-call", None, &[], "fs_probe", &json!({ "ops": all }));
            if !fail {
                // The call did set the time (kept when it set it last).
                let output = outcome.result.expect("the call succeeds");
                if what.ends_with("set-times-at") || what.contains("descriptor") {
                    let after = if what.contains("directory") { modified(&fixture, "d") } else { modified(&fixture, "t.txt") };
                    assert_eq!(after.map(|(seconds, _)| seconds), Some(0), "{what}: the call did not set the time: {}", output.text);
                }
                continue;
            }
            let error = outcome.result.expect_err("the call fails");
            let checks = [
                (error.message.contains("every change this call made was rolled back"), "the error does not say it was rolled back"),
                (read(&fixture, "t.txt").as_deref() == Some("original\n"), "the content was not put back"),
                ((modified(&fixture, "t.txt"), modified(&fixture, "d")) == before, "the times were not set back"),
            ];
            failures.extend(checks.into_iter().filter(|(ok, _)| !ok).map(|(_, failure)| format!("{what}: {failure}: {}", error.message)));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A directory the call moved carries what the call left in it: the call removes `a/x.txt`
/// (or renames `t.txt` into `a/x`) and then moves `a` to `b`; another program writes `b/x.txt`
/// (or replaces `b/x`). The rollback moves `b` back to `a` first, and restored the call's old
/// `a/x.txt` over the other's file (or removed it) by the journal, telling no one (found by an
/// attack on the rollback's first version). What the call left is now followed to where it
/// was carried; the call's own change there (a file it wrote at `b/x.txt`) still rolls back.
#[test]
fn a_rollback_keeps_what_another_program_wrote_inside_a_directory_the_call_moved() {
    let mut failures = Vec::new();
    let cases = [
        ("removed, then its directory moved", json!({"op": "raw_remove", "path": "a/x.txt"}), "b/x.txt", "a/x.txt"),
        ("renamed in, then its directory moved", json!({"op": "raw_rename", "path": "t.txt", "to": "a/x.txt"}), "b/x.txt", "a/x.txt"),
    ];
    for (what, op, written, journaled) in cases {
        let fixture = Fixture::new();
        fixture.write("a/x.txt", "old x\n");
        fixture.write("t.txt", "t\n");
        let runtime = runtime_with_policy(TEST_POLICY, None);
        let moved = fixture.root().join("b");
        let target = fixture.root().join(written);
        let ops = held(&[op, json!({"op": "raw_rename", "path": "a", "to": "b"})], &[]);
        // Written whole and renamed over it, as editors and `write_file` do: another object.
        let written_whole = || {
            let temporary = moved.join("theirs.tmp");
            std::fs::write(&temporary, THEIRS).expect("write");
            std::fs::rename(&temporary, &target).expect("rename");
        };
        let outcome = while_held(&fixture, &runtime, &ops, || moved.exists(), written_whole);
        let error = outcome.result.expect_err("the call fails");
        let theirs = ["a/x.txt", "b/x.txt"].iter().any(|path| read(&fixture, path).as_deref() == Some(THEIRS));
        if !theirs {
            failures.push(format!("{what}: the other program's file was destroyed: {}", error.message));
        }
        if !error.message.contains(&format!("`{journaled}`")) {
            failures.push(format!("{what}: the error does not name `{journaled}`: {}", error.message));
        }
    }
    // The call's own write where it moved the directory is its own change: all rolled back.
    let fixture = Fixture::new();
    fixture.write("a/x.txt", "old x\n");
    let runtime = runtime_with_policy(TEST_POLICY, None);
    let ops = held(
        &[
            json!({"op": "raw_remove", "path": "a/x.txt"}),
            json!({"op": "raw_rename", "path": "a", "to": "b"}),
            json!({"op": "write", "path": "b/x.txt", "content": "the call's\n"}),
        ],
        &[],
    );
    let moved = fixture.root().join("b");
    let outcome = while_held(&fixture, &runtime, &ops, || moved.exists(), || {});
    outcome.result.expect_err("the call fails");
    if read(&fixture, "a/x.txt").as_deref() != Some("old x\n") || fixture.root().join("b").exists() {
        failures.push(format!("its own changes: not rolled back whole: a/x.txt = {:?}", read(&fixture, "a/x.txt")));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The times of a file with other names are theirs too: a call that linked `x.txt` to `y.txt`
/// and set `y.txt`'s times, then failed, left `x.txt` with the times it set (the rollback put
/// them back on `y.txt`'s name only, as a copy once `y.txt` was renamed away); one whose file
/// had a link outside the workspace changed that file's times for good. Setting the times of a
/// file with more than one link is refused now, as rewriting or removing one is.
#[test]
fn the_times_of_a_file_with_other_links_are_not_set() {
    let runtime = runtime_with_policy(TEST_POLICY, None);
    let fixture = Fixture::new();
    fixture.write("x.txt", "x\n");
    std::fs::File::open(fixture.root().join("x.txt")).and_then(|file| file.set_modified(long_ago())).expect("set the time");
    let before = modified(&fixture, "x.txt");
    let ops = json!({"ops": [
        {"op": "raw_link", "path": "x.txt", "to": "y.txt"},
        {"op": "raw_touch", "path": "y.txt"},
        {"op": "raw_rename", "path": "y.txt", "to": "z.txt"},
        {"op": "fail"},
    ]});
    let outcome = fixture.call_as(&runtime, "s-call", None, &[], "fs_probe", &ops);
    assert!(outcome.result.is_err(), "{:?}", outcome.result);
    assert_eq!(modified(&fixture, "x.txt"), before, "the linked file's times were changed for good");
    let rules: Vec<&str> = outcome.denials.iter().map(|denial| denial.event.rule.as_str()).collect();
    assert!(rules.contains(&"hard-link"), "{rules:?}: {:?}", outcome.result);
    // A file with a link outside the workspace: its times are not the workspace's to set.
    let outside = fixture.base().join("outside-link.txt");
    std::fs::hard_link(fixture.root().join("x.txt"), &outside).expect("link outside");
    let outcome = fixture.call_as(&runtime, "s-call", None, &[], "fs_probe", &json!({"ops": [{"op": "raw_touch", "path": "x.txt"}]}));
    let result = outcome.result.map(|output| output.text).unwrap_or_else(|error| error.message);
    assert_eq!(modified(&fixture, "x.txt"), before, "the outside file's times were set: {result}");
    assert!(outcome.denials.iter().any(|denial| denial.event.rule == "hard-link"), "{result}");
}

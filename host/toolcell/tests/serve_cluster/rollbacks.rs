//! A rollback (the store did not take the call's record) never destroys or overwrites what
//! another host's session made meanwhile, never stops the host's writes for it, and tells the
//! caller what it left: a directory the call made that the other session put a file in, a
//! moved file the other session edited where the call put it, a moved file whose source the
//! other session made again, a removed file whose directory the other session moved away.

use super::limits::{stall_record, stalled_record_came};
use super::*;

/// Two hosts on one store, with an `answer_timeout` well past `refused_record`'s refusal, and
/// their URLs.
fn two_hosts() -> Option<(Deployment, String, String)> {
    let deployment = Deployment::start(2, "[store]\nanswer_timeout = \"10s\"")?;
    let (a, b) = (deployment.hosts[0].url.clone(), deployment.hosts[1].url.clone());
    Some((deployment, a, b))
}

/// Run `tool` with `arguments` in `session` on `a`, its record refused after 4 s; once
/// `landed` sees its change on disk, run `meanwhile` (another session, on another host). The
/// hosts' `answer_timeout` (10 s) is well past the refusal, so the other host's own records
/// are never cut short on a loaded machine.
/// The call's answer text, and whether it is an error.
fn refused_record<'a>(
    deployment: &'a Deployment,
    session: Session<'a>,
    a: &str,
    (tool, arguments): (&str, Value),
    landed: impl Fn() -> bool,
    meanwhile: impl FnOnce(),
) -> (String, bool) {
    stall_record(deployment, 1, 4, "RAISE EXCEPTION 'stalled'");
    let answer = std::thread::scope(|scope| {
        let url = a.to_owned();
        let call = scope.spawn(move || session.call_at(&url, tool, arguments));
        let started = Instant::now();
        while !landed() {
            assert!(started.elapsed() < Duration::from_secs(60), "the call's change never landed");
            std::thread::sleep(Duration::from_millis(20));
        }
        stalled_record_came(deployment);
        meanwhile();
        call.join().expect("the call's thread")
    });
    deployment.cluster.psql("DROP TRIGGER toolcell_test_stall ON toolcell_session_undo; DROP FUNCTION toolcell_test_stall(); DROP SEQUENCE toolcell_test_records");
    result(&answer)
}

/// Writes on `url` go on: the host did not stop them.
fn writes_go_on(deployment: &Deployment, url: &str, path: &str) {
    let session = Session::open_at(deployment, url);
    ok(&session.call_at(url, "write_file", json!({"path": path, "content": "after\n"})));
}

/// F1: a directory the call made, that another host's session put a file in, stays (with that
/// file) and is named; the call's own file and directory in it are removed; writes go on.
#[test]
fn a_rollback_leaves_a_directory_it_made_that_another_host_put_a_file_in_and_writes_go_on() {
    let Some((deployment, a, b)) = two_hosts() else {
        return;
    };
    let other = Session::open_at(&deployment, &b);
    let made = deployment.workspace.join("made");
    let (refused, is_error) = refused_record(
        &deployment,
        Session::open_at(&deployment, &a),
        &a,
        ("write_file", json!({"path": "made/deep/new.txt", "content": "the call's\n"})),
        || made.join("deep/new.txt").exists(),
        || drop(ok(&other.call_at(&b, "write_file", json!({"path": "made/theirs.txt", "content": "made on B\n"})))),
    );
    assert!(is_error && refused.contains("could not be recorded for undo"), "{refused}");
    assert!(refused.contains("Directories this call made, left in place") && refused.contains(": `made`."), "{refused}");
    assert!(!refused.contains("writes to this workspace are stopped"), "{refused}");
    assert_eq!(std::fs::read_to_string(made.join("theirs.txt")).expect("read"), "made on B\n");
    assert!(!made.join("deep").exists(), "the call's own directory stayed");
    writes_go_on(&deployment, &a, "after.txt");
}

/// F1: a file the call removed, whose directory another host's session moved away meanwhile,
/// is put back in its directory made again (its content is not lost), and that is named.
#[test]
fn a_rollback_puts_back_a_removed_file_whose_directory_another_host_moved_away() {
    let Some((deployment, a, b)) = two_hosts() else {
        return;
    };
    let other = Session::open_at(&deployment, &b);
    std::fs::create_dir_all(deployment.workspace.join("d")).expect("mkdir");
    std::fs::write(deployment.workspace.join("d/f.txt"), "only copy\n").expect("write");
    let session = Session::open_at(&deployment, &a);
    ok(&session.call_at(&a, "read_file", json!({"path": "d/f.txt"})));
    let removed = deployment.workspace.join("d/f.txt");
    let (refused, is_error) = refused_record(
        &deployment,
        session,
        &a,
        ("delete_file", json!({"path": "d/f.txt"})),
        || !removed.exists(),
        || drop(ok(&other.call_at(&b, "move_file", json!({"source": "d", "destination": "e"})))),
    );
    assert!(is_error && refused.contains("moved or removed them meanwhile: `d`"), "{refused}");
    assert_eq!(std::fs::read_to_string(&removed).expect("the removed file was lost"), "only copy\n");
    assert!(deployment.workspace.join("e").is_dir());
    writes_go_on(&deployment, &a, "after.txt");
}

/// F1, after a crash: host A is killed while the record of a call that made a directory waits
/// in the database, and another host's session has put a file in that directory. A's next start
/// rolls the call back leaving that directory (and the file), and writes go on there.
#[test]
fn recovery_after_a_crash_leaves_a_directory_another_host_put_a_file_in_and_writes_go_on() {
    let Some(mut deployment) = Deployment::start(2, "[store]\nanswer_timeout = \"20s\"") else {
        return;
    };
    let (a, b) = (deployment.hosts[0].url.clone(), deployment.hosts[1].url.clone());
    let other = Session::open_at(&deployment, &b);
    let made = deployment.workspace.join("made");
    stall_record(&deployment, 1, 10, "RAISE EXCEPTION 'stalled'");
    std::thread::scope(|scope| {
        let session = Session::open_at(&deployment, &a);
        let url = a.clone();
        let call = scope.spawn(move || {
            // Cut off by the kill: no answer.
            let _ = session.call_at(&url, "write_file", json!({"path": "made/new.txt", "content": "the call's\n"}));
        });
        let started = Instant::now();
        while !made.join("new.txt").exists() {
            assert!(started.elapsed() < Duration::from_secs(60), "the call's change never landed");
            std::thread::sleep(Duration::from_millis(20));
        }
        stalled_record_came(&deployment);
        ok(&other.call_at(&b, "write_file", json!({"path": "made/theirs.txt", "content": "made on B\n"})));
        let killed = Command::new("kill").args(["-KILL", &deployment.hosts[0].child.id().to_string()]).status().expect("kill");
        assert!(killed.success());
        let _ = call.join();
    });
    let _ = deployment.hosts[0].child.wait();
    let temp = deployment._temp.path().to_owned();
    let restarted = serve(
        &temp.join("service.toml"),
        &temp.join("state-a"),
        &[std::ffi::OsStr::new("--store"), deployment.cluster.url.as_ref(), "--policy".as_ref(), temp.join("policy.toml").as_os_str()],
    );
    let lines = restarted.wait_for(|line| line.contains("rolled back call"));
    assert!(!lines.iter().any(|line| line.contains("could not roll back")), "{lines:#?}");
    assert!(
        lines.iter().any(|line| line.contains("leaving the directories it made that hold what another session made: `made`")),
        "{lines:#?}"
    );
    assert!(!made.join("new.txt").exists(), "the call's own file stayed");
    assert_eq!(std::fs::read_to_string(made.join("theirs.txt")).expect("read"), "made on B\n");
    writes_go_on(&deployment, &restarted.url, "after.txt");
    deployment.hosts[0] = restarted;
}

/// F2: a file the call moved, that another host's session then edited where the call put it,
/// stays as that session made it (moved there plainly, or over a file with `overwrite`), and is
/// named; the source is put back.
#[test]
fn a_rollback_leaves_a_moved_file_another_host_edited_at_its_destination() {
    let Some((deployment, a, b)) = two_hosts() else {
        return;
    };
    let other = Session::open_at(&deployment, &b);
    ok(&other.call_at(&b, "write_file", json!({"path": "target.txt", "content": "old target\n"})));
    for (destination, overwrite) in [("moved.txt", false), ("target.txt", true)] {
        let session = Session::open_at(&deployment, &a);
        ok(&session.call_at(&a, "read_file", json!({"path": "notes.txt"})));
        ok(&session.call_at(&a, "read_file", json!({"path": "target.txt"})));
        let notes = deployment.workspace.join("notes.txt");
        let (refused, is_error) = refused_record(
            &deployment,
            session,
            &a,
            ("move_file", json!({"source": "notes.txt", "destination": destination, "overwrite": overwrite})),
            || !notes.exists(),
            || {
                ok(&other.call_at(&b, "read_file", json!({"path": destination})));
                ok(&other.call_at(&b, "edit_file", json!({"path": destination, "old_string": "hello", "new_string": "edited on B"})));
            },
        );
        assert!(is_error && refused.contains(&format!("left as that session made them: `{destination}`")), "{refused}");
        assert!(!refused.contains("No file was changed"), "{refused}");
        assert_eq!(std::fs::read_to_string(deployment.workspace.join(destination)).expect("read"), "edited on B\n", "{destination}");
        assert_eq!(std::fs::read_to_string(&notes).expect("read"), "hello\n");
    }
    writes_go_on(&deployment, &a, "after.txt");
}

/// F3: a file the call moved, whose source another host's session made again meanwhile, stays
/// where the call moved it (the only copy of its content), and both are named.
#[test]
fn a_rollback_keeps_a_moved_file_whose_source_another_host_made_again() {
    let Some((deployment, a, b)) = two_hosts() else {
        return;
    };
    let other = Session::open_at(&deployment, &b);
    let session = Session::open_at(&deployment, &a);
    ok(&session.call_at(&a, "read_file", json!({"path": "notes.txt"})));
    let notes = deployment.workspace.join("notes.txt");
    let (refused, is_error) = refused_record(
        &deployment,
        session,
        &a,
        ("move_file", json!({"source": "notes.txt", "destination": "moved.txt"})),
        || !notes.exists(),
        || drop(ok(&other.call_at(&b, "write_file", json!({"path": "notes.txt", "content": "made on B\n"})))),
    );
    assert!(is_error && refused.contains("left as that session made them: `notes.txt`"), "{refused}");
    assert!(refused.contains("`moved.txt` (from `notes.txt`)"), "{refused}");
    assert_eq!(std::fs::read_to_string(&notes).expect("read"), "made on B\n");
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("moved.txt")).expect("the only copy was removed"), "hello\n");
    writes_go_on(&deployment, &a, "after.txt");
}

/// N1: a file the call removed, whose directory another host's session moved away and put a
/// file of its own at (a file where a directory was), is not put back: that file stays, the
/// removal stands and is named, and writes go on (the rollback does not stop them).
#[test]
fn a_rollback_leaves_a_removed_file_removed_when_another_host_put_a_file_where_its_directory_was() {
    let Some((deployment, a, b)) = two_hosts() else {
        return;
    };
    let other = Session::open_at(&deployment, &b);
    std::fs::create_dir_all(deployment.workspace.join("d")).expect("mkdir");
    std::fs::write(deployment.workspace.join("d/f.txt"), "the call removes it\n").expect("write");
    let session = Session::open_at(&deployment, &a);
    ok(&session.call_at(&a, "read_file", json!({"path": "d/f.txt"})));
    let removed = deployment.workspace.join("d/f.txt");
    let (refused, is_error) = refused_record(
        &deployment,
        session,
        &a,
        ("delete_file", json!({"path": "d/f.txt"})),
        || !removed.exists(),
        || {
            ok(&other.call_at(&b, "move_file", json!({"source": "d", "destination": "e"})));
            ok(&other.call_at(&b, "write_file", json!({"path": "d", "content": "made on B\n"})));
        },
    );
    assert!(is_error && refused.contains("removal or move of them stands: `d/f.txt`."), "{refused}");
    assert!(!refused.contains("writes to this workspace are stopped"), "{refused}");
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("d")).expect("read"), "made on B\n");
    assert!(deployment.workspace.join("e").is_dir());
    writes_go_on(&deployment, &a, "after.txt");
}

/// N2: a file the call made, that another host's session removed and made again with its own
/// content (ext4 often gives it the freed inode number), stays as that session made it and is
/// named: the change time taken when the call's file landed tells the two apart.
#[test]
fn a_rollback_leaves_a_file_another_host_removed_and_made_again_where_the_call_made_one() {
    let Some((deployment, a, b)) = two_hosts() else {
        return;
    };
    let other = Session::open_at(&deployment, &b);
    let made = deployment.workspace.join("n.txt");
    let (refused, is_error) = refused_record(
        &deployment,
        Session::open_at(&deployment, &a),
        &a,
        ("write_file", json!({"path": "n.txt", "content": "the call's\n"})),
        || made.exists(),
        || {
            ok(&other.call_at(&b, "read_file", json!({"path": "n.txt"})));
            ok(&other.call_at(&b, "delete_file", json!({"path": "n.txt"})));
            ok(&other.call_at(&b, "write_file", json!({"path": "n.txt", "content": "made again on B\n"})));
        },
    );
    assert!(is_error && refused.contains("left as that session made them: `n.txt`"), "{refused}");
    assert!(!refused.contains("No file was changed"), "{refused}");
    assert_eq!(std::fs::read_to_string(&made).expect("another host's file was removed"), "made again on B\n");
    writes_go_on(&deployment, &a, "after.txt");
}

/// N3: a directory the call made (by `create_directory`, or for a new file in it), that another
/// host's session moved away and put a file of its own at, is not removed with that file: it
/// stays as that session made it, and is named.
#[test]
fn a_rollback_leaves_a_file_another_host_put_where_the_call_made_a_directory() {
    let Some((deployment, a, b)) = two_hosts() else {
        return;
    };
    let other = Session::open_at(&deployment, &b);
    for (call, made, landed) in [
        (("create_directory", json!({"path": "d1"})), "d1", "d1"),
        (("write_file", json!({"path": "d2/x.txt", "content": "the call's\n"})), "d2", "d2/x.txt"),
    ] {
        let landed = deployment.workspace.join(landed);
        let (refused, is_error) = refused_record(
            &deployment,
            Session::open_at(&deployment, &a),
            &a,
            call,
            || landed.exists(),
            || {
                ok(&other.call_at(&b, "move_file", json!({"source": made, "destination": format!("{made}-moved")})));
                ok(&other.call_at(&b, "write_file", json!({"path": made, "content": "made on B\n"})));
            },
        );
        assert!(is_error && refused.contains("left as that session made them: ") && refused.contains(&format!("`{made}`")), "{refused}");
        assert!(!refused.contains("No file was changed"), "{refused}");
        assert_eq!(std::fs::read_to_string(deployment.workspace.join(made)).expect("another host's file was removed"), "made on B\n");
        assert!(deployment.workspace.join(format!("{made}-moved")).is_dir());
    }
    writes_go_on(&deployment, &a, "after.txt");
}

/// R1: a file the call rewrote whose metadata alone changed meanwhile (a `chmod` to the mode it
/// has, by another process; a move away and back, by another host's session) is still the
/// call's content: the rollback puts back what was there before the call, and blames no one.
#[test]
fn a_rollback_puts_back_a_file_whose_metadata_alone_changed_meanwhile() {
    let Some((deployment, a, b)) = two_hosts() else {
        return;
    };
    let other = Session::open_at(&deployment, &b);
    let chmod = |path: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path).expect("stat").permissions().mode();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    for (name, touch) in [("chmod.txt", "chmod"), ("moved.txt", "move away and back")] {
        let path = deployment.workspace.join(name);
        std::fs::write(&path, "ORIGINAL\n").expect("write");
        let session = Session::open_at(&deployment, &a);
        ok(&session.call_at(&a, "read_file", json!({"path": name})));
        let (refused, is_error) = refused_record(
            &deployment,
            session,
            &a,
            ("write_file", json!({"path": name, "content": "the call's\n"})),
            || std::fs::read_to_string(&path).is_ok_and(|content| content == "the call's\n"),
            || {
                // Past the kernel's coarse clock tick: the change time moves.
                std::thread::sleep(Duration::from_millis(20));
                if touch == "chmod" {
                    chmod(&path);
                } else {
                    ok(&other.call_at(&b, "move_file", json!({"source": name, "destination": "away.txt"})));
                    ok(&other.call_at(&b, "move_file", json!({"source": "away.txt", "destination": name})));
                }
            },
        );
        assert!(is_error && refused.contains("could not be recorded for undo"), "{touch}: {refused}");
        assert!(!refused.contains("left as that session made them"), "{touch}: {refused}");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "ORIGINAL\n", "{touch}: the failed call's write stayed");
    }
    writes_go_on(&deployment, &a, "after.txt");
}

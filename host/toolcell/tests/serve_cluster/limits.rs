//! The edges of a record the store does not take: a file the call removed and another host
//! made again, the audit of a call rolled back while the database hung, one slow statement.

use super::*;

/// Make the `nth` undo record from now on (a sequence counts them: it is not rolled back with
/// the statement) wait `seconds` in the database, then `end` (`RETURN NEW` to be taken,
/// `RAISE EXCEPTION 'stalled'` to be refused).
pub(super) fn stall_record(deployment: &Deployment, nth: u32, seconds: u32, end: &str) {
    deployment.cluster.psql(&format!(
        "CREATE SEQUENCE toolcell_test_records; \
         CREATE FUNCTION toolcell_test_stall() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF nextval('toolcell_test_records') = {nth} THEN PERFORM pg_sleep({seconds}); {end}; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER toolcell_test_stall BEFORE INSERT ON toolcell_session_undo FOR EACH ROW EXECUTE FUNCTION toolcell_test_stall();",
    ));
}

/// Wait until the stalled record has come (its statement counted it): from then on other
/// records pass. A call's change lands before its record is written, so a test that lets another
/// host write once the change is seen must wait for this too, or on a loaded machine the other
/// host's record can be the one that stalls.
pub(super) fn stalled_record_came(deployment: &Deployment) {
    toolcell_tests::eventually("the stalled record comes", Duration::from_secs(60), || {
        deployment.cluster.psql("SELECT is_called FROM toolcell_test_records").trim() == "t"
    });
}

/// The audit trail's records of `tool` calls whose message holds `text`.
fn audited(deployment: &Deployment, tool: &str, text: &str) -> Vec<Value> {
    deployment
        .cluster
        .psql("SELECT line FROM toolcell_audit ORDER BY seq")
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
        .filter(|record| record["tool"] == tool && record["message"].as_str().is_some_and(|message| message.contains(text)))
        .collect()
}

/// A call that removed a file, whose record the store does not take, is rolled back, except
/// that file when another host's session made it again meanwhile: what that session wrote
/// stays (it was acknowledged), and the caller is told which file it is. Made again by no one,
/// the file is put back as before.
#[test]
fn a_rollback_after_the_record_failed_leaves_a_removed_file_another_host_made_again() {
    let Some(deployment) = Deployment::start(2, "") else {
        return;
    };
    let (a, b) = (deployment.hosts[0].url.clone(), deployment.hosts[1].url.clone());
    let first = Session::open_at(&deployment, &a);
    let other = Session::open_at(&deployment, &b);
    ok(&first.call_at(&a, "read_file", json!({"path": "notes.txt"})));
    stall_record(&deployment, 1, 4, "RAISE EXCEPTION 'stalled'");
    let notes = deployment.workspace.join("notes.txt");
    let (refused, first) = std::thread::scope(|scope| {
        let url = a.clone();
        let removal = scope.spawn(move || (first.call_at(&url, "delete_file", json!({"path": "notes.txt"})), first));
        let started = Instant::now();
        while notes.exists() {
            assert!(started.elapsed() < Duration::from_secs(60), "the removal never happened");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Another session, on B, writes the file again while the record stalls.
        stalled_record_came(&deployment);
        ok(&other.call_at(&b, "write_file", json!({"path": "notes.txt", "content": "made on B\n"})));
        removal.join().expect("the removal's thread")
    });
    let (refused, is_error) = result(&refused);
    assert!(
        is_error && refused.contains("could not be recorded for undo") && refused.contains("left as that session made them: `notes.txt`"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&notes).expect("read"), "made on B\n", "the other session's write was undone");

    // Made again by no one, the removed file is put back.
    ok(&first.call_at(&a, "read_file", json!({"path": "notes.txt"})));
    deployment.cluster.psql("ALTER SEQUENCE toolcell_test_records RESTART");
    let (refused, is_error) = result(&first.call_at(&a, "delete_file", json!({"path": "notes.txt"})));
    assert!(is_error && refused.contains("No file was changed"), "{refused}");
    assert_eq!(std::fs::read_to_string(&notes).expect("read"), "made on B\n");
    deployment.cluster.psql("DROP TRIGGER toolcell_test_stall ON toolcell_session_undo");
}

/// The database hangs (every process of it stopped) while a call's record is written: the
/// call is rolled back and told so (not that its audit record was lost), with what to do; its
/// outcome waits in the host's spool and reaches the shared audit trail once the database
/// answers again.
#[test]
fn a_call_rolled_back_while_the_database_hung_is_told_why_and_its_outcome_reaches_the_trail_later() {
    let Some(deployment) = Deployment::start(2, "[store]\nanswer_timeout = \"2s\"") else {
        return;
    };
    let a = deployment.hosts[0].url.clone();
    let session = Session::open_at(&deployment, &a);
    ok(&session.call_at(&a, "read_file", json!({"path": "notes.txt"})));
    stall_record(&deployment, 1, 10, "RAISE EXCEPTION 'stalled'");
    let notes = deployment.workspace.join("notes.txt");
    let (refused, session) = std::thread::scope(|scope| {
        let url = a.clone();
        let edit = scope.spawn(move || {
            (session.call_at(&url, "edit_file", json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"})), session)
        });
        let started = Instant::now();
        while std::fs::read_to_string(&notes).expect("read") != "bye\n" {
            assert!(started.elapsed() < Duration::from_secs(60), "the edit never landed");
            std::thread::sleep(Duration::from_millis(20));
        }
        deployment.cluster.freeze();
        let refused = edit.join().expect("the edit's thread");
        deployment.cluster.thaw();
        refused
    });
    let (refused, is_error) = result(&refused);
    assert!(
        is_error
            && refused.contains("could not be recorded for undo and read-before-write in the shared store, so they were rolled back")
            && refused.contains("did not answer within 2s")
            && refused.contains("No file was changed")
            && refused.contains("try the call again once the shared store answers")
            && !refused.contains("audit trail"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&notes).expect("read"), "hello\n");
    assert!(
        audited(&deployment, "edit_file", "could not be recorded for undo").is_empty(),
        "the outcome was written while the database hung"
    );
    // The database answers again: the next call's record takes the waiting one with it.
    let started = Instant::now();
    let trail = loop {
        // Answered or not (the host may still take the database for hung a moment longer).
        let _ = session.call_at(&a, "read_file", json!({"path": "notes.txt"}));
        let trail = audited(&deployment, "edit_file", "could not be recorded for undo");
        if !trail.is_empty() {
            break trail;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the rolled-back call's outcome never reached the trail");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(trail.len(), 1, "{trail:?}");
    assert_eq!(trail[0]["outcome"], "failed", "{trail:?}");
    assert!(trail[0]["message"].as_str().is_some_and(|message| message.contains("No file was changed")), "{trail:?}");
    deployment.cluster.psql("DROP TRIGGER toolcell_test_stall ON toolcell_session_undo");
}

/// One record slower than `answer_timeout` (a database that answers, a statement that takes
/// long) fails its own call alone: the call is rolled back, its statement cancelled (the record
/// never lands later), its outcome audited, and a write right after it goes through (the host
/// does not take the database for hung).
#[test]
fn one_slow_record_fails_its_call_alone_and_the_next_write_goes_through() {
    let Some(deployment) = Deployment::start(2, "[store]\nanswer_timeout = \"2s\"") else {
        return;
    };
    let (a, b) = (deployment.hosts[0].url.clone(), deployment.hosts[1].url.clone());
    let session = Session::open_at(&deployment, &a);
    ok(&session.call_at(&a, "read_file", json!({"path": "notes.txt"})));
    // Slow, not refused: left alone, it would be taken after 8 s.
    stall_record(&deployment, 1, 8, "NULL");
    let started = Instant::now();
    let (refused, is_error) =
        result(&session.call_at(&a, "edit_file", json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"})));
    assert!(is_error && refused.contains("did not answer within 2s") && refused.contains("No file was changed"), "{refused}");
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("notes.txt")).expect("read"), "hello\n");
    // Right after, on the same host and session: the database answers, so the write does.
    ok(&session.call_at(&a, "read_file", json!({"path": "notes.txt"})));
    ok(&session.call_at(&a, "edit_file", json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"})));
    assert!(started.elapsed() < Duration::from_secs(8), "took {:?}", started.elapsed());
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("notes.txt")).expect("read"), "bye\n");
    let records = deployment.cluster.psql("SELECT count(*) FROM toolcell_session_undo");
    // Past the 8 s the slow statement would have taken: it was cancelled, nothing of it landed.
    std::thread::sleep(Duration::from_secs(9).saturating_sub(started.elapsed()));
    assert_eq!(deployment.cluster.psql("SELECT count(*) FROM toolcell_session_undo"), records);
    assert_eq!(audited(&deployment, "edit_file", "did not answer within 2s").len(), 1);
    // The one edit that stands is the one undone, on the other host.
    ok(&session.call_at(&b, "undo_edit", json!({"path": "notes.txt"})));
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("notes.txt")).expect("read"), "hello\n");
    deployment.cluster.psql("DROP TRIGGER toolcell_test_stall ON toolcell_session_undo");
}

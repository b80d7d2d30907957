//! The audit log's group commit: many appenders, one chain; a failed group fails for all.
use super::*;

fn record(writer: usize, append: usize, part: usize) -> Record {
    Record::call("2026-11-25T00:00:00.000Z", &format!("w{writer}"), "impl", "read_file", &format!("c-{append}-{part}"), "ok")
}

/// Threads of two logs on one state directory (two processes, as far as the chain can
/// tell) append at once: one intact chain, every record once, each append's records
/// together and in order.
#[test]
fn appends_from_many_threads_and_two_logs_make_one_chain() {
    let temp = tempfile::tempdir().expect("temp");
    let logs = [AuditLog::open(temp.path()).expect("log"), AuditLog::open(temp.path()).expect("log")];
    std::thread::scope(|scope| {
        for writer in 0..8 {
            let log = &logs[writer % 2];
            scope.spawn(move || {
                for append in 0..150 {
                    let records: Vec<Record> = (0..=append % 3).map(|part| record(writer, append, part)).collect();
                    log.append(&records).expect("append");
                }
            });
        }
    });
    let text = logs[0].read().expect("read");
    let verified = logs[0].verify(&text).expect("one intact chain, checkpoint included");
    // 150 appends of one, two and three records in turn.
    assert_eq!(verified.records, 8 * 300);
    let mut seen = std::collections::HashSet::new();
    let mut lines = text.lines().map(|line| serde_json::from_str::<Record>(line).expect("record")).peekable();
    while let Some(first) = lines.next() {
        let append: usize = first.call_id.split('-').nth(1).and_then(|n| n.parse().ok()).expect("append");
        assert!(first.call_id.ends_with("-0"), "an append's first record comes first: {}", first.call_id);
        for part in 1..=append % 3 {
            let next = lines.next().expect("the rest of the append");
            assert_eq!((&next.session, &next.call_id), (&first.session, &format!("c-{append}-{part}")));
        }
        assert!(seen.insert((first.session.clone(), append)), "recorded twice: {} {append}", first.session);
    }
    assert_eq!(seen.len(), 8 * 150);
}

/// A group that cannot be written fails for every append in it, not only the one that
/// wrote it; and the next append starts afresh.
#[test]
fn a_group_that_fails_fails_for_every_append_in_it() {
    let temp = tempfile::tempdir().expect("temp");
    let log = AuditLog::open(temp.path()).expect("log");
    log.append(&[record(0, 0, 0)]).expect("first append");
    // The log's last line is cut: no append may continue the chain from it.
    let path = temp.path().join(AUDIT_FILE);
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, &text[..text.len() - 10]).expect("cut");
    // Another thread's append waits in the queue when this one leads.
    let waiting = {
        let mut commit = log.commit.lock().expect("commit");
        let ticket = commit.next;
        commit.next += 1;
        commit.queue.push((ticket, vec![Prepared::new(&record(1, 0, 0))]));
        ticket
    };
    let error = log.append(&[record(0, 1, 0)]).expect_err("the damaged log refuses the append");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    let commit = log.commit.lock().expect("commit");
    assert!(commit.settled > waiting && !commit.writing);
    let (kind, message) = commit.failed.get(&waiting).expect("the waiting append failed too");
    assert_eq!((*kind, message.as_str()), (error.kind(), error.to_string().as_str()));
    drop(commit);
    std::fs::write(&path, &text).expect("mend");
    log.append(&[record(0, 2, 0)]).expect("appends again once the log is whole");
    assert_eq!(log.verify(&log.read().expect("read")).expect("verifies").records, 2);
}

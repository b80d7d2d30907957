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

/// A shared store for the spool's tests: it keeps what it takes, stops the host (panics) at
/// the batch `stop_at`, and takes a batch with a spooled record (session `spooled`) only after
/// `stall` and then fails, if `stall` is set.
#[derive(Debug, Default)]
struct Store {
    taken: Mutex<Vec<Record>>,
    batches: std::sync::atomic::AtomicUsize,
    stop_at: Option<usize>,
    stall: Option<std::time::Duration>,
    /// How many batches of spooled records were tried.
    spooled_tries: std::sync::atomic::AtomicUsize,
    /// Every record of every batch tried, in order.
    tried: Mutex<Vec<Record>>,
    /// The batches before this one fail (their answer lost).
    fail_before: usize,
}

impl AuditBackend for Store {
    fn append(&self, records: &[Record]) -> std::io::Result<Link> {
        use std::sync::atomic::Ordering;
        let batch = self.batches.fetch_add(1, Ordering::SeqCst);
        self.tried.lock().expect("tried").extend_from_slice(records);
        if batch < self.fail_before {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the answer was lost"));
        }
        if self.stop_at == Some(batch) {
            panic!("the host stopped while the store took a batch");
        }
        if let Some(stall) = self.stall
            && records.iter().any(|record| record.session == "spooled")
        {
            self.spooled_tries.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(stall);
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the store did not answer in time"));
        }
        let mut taken = self.taken.lock().expect("taken");
        taken.extend_from_slice(records);
        Ok(Link { seq: taken.len() as u64, hash: "0".repeat(64) })
    }

    fn read_from(&self, _: u64) -> std::io::Result<(String, u64)> {
        Ok((String::new(), 0))
    }

    fn head(&self) -> std::io::Result<Option<Link>> {
        Ok(None)
    }

    fn name(&self) -> String {
        "test store".to_owned()
    }
}

fn spooled(count: usize) -> Vec<Record> {
    (0..count).map(|n| Record::call("2026-11-25T00:00:00.000Z", "spooled", "impl", "read_file", &format!("c-{n}"), "ok")).collect()
}

/// The spool's records not yet sent, by call id.
fn waiting_in(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("spool");
    spool::waiting(&text).expect("whole records").0.into_iter().map(|record| record.call_id).collect()
}

/// R2: a host stopped while it drains its spool sends again at most the batch it was
/// sending, not every batch the store already took.
#[test]
fn a_host_stopped_mid_drain_sends_again_only_what_the_store_did_not_take() {
    let temp = tempfile::tempdir().expect("temp");
    let path = temp.path().join(AUDIT_SPOOL_FILE);
    spool::defer(&path, &spooled(1200)).expect("spooled");
    let store = Store { stop_at: Some(2), ..Store::default() };
    let file = OpenOptions::new().read(true).append(true).open(&path).expect("open");
    let stopped =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| spool::forward(&file, &store, &|_| Ok(())))).expect_err("stopped");
    drop(stopped);
    let taken: Vec<String> = store.taken.lock().expect("taken").iter().map(|record| record.call_id.clone()).collect();
    assert!(!taken.is_empty(), "two batches went in before the stop");
    let waiting = waiting_in(&path);
    assert_eq!(waiting.len(), 1200 - taken.len(), "the batches the store took wait again");
    assert!(waiting.iter().all(|call_id| !taken.contains(call_id)));
    // The next drain sends the rest, each record once.
    let store = Store::default();
    spool::forward(&file, &store, &|_| Ok(())).expect("drained");
    assert_eq!(store.taken.lock().expect("taken").len() + taken.len(), 1200);
    assert!(waiting_in(&path).is_empty());
}

/// R4: while one append drains a spool the store hangs on, the host's other appends neither
/// wait for it nor drain it themselves: each pays for its own append, not for the queue; and
/// a drain the store does not answer is tried once per append, not once per halving.
#[test]
fn appends_do_not_queue_behind_one_that_drains_the_spool() {
    let temp = tempfile::tempdir().expect("temp");
    let stall = std::time::Duration::from_millis(800);
    let store = std::sync::Arc::new(Store { stall: Some(stall), ..Store::default() });
    let log = AuditLog::shared(store.clone(), temp.path()).expect("log");
    let path = log.directory().join(AUDIT_SPOOL_FILE);
    spool::defer(&path, &spooled(8)).expect("spooled");
    log.append(&[record(0, 0, 0)]).expect("its own record goes in");
    assert_eq!(store.spooled_tries.load(std::sync::atomic::Ordering::SeqCst), 1, "one try of the spool per append");
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for writer in 1..=6 {
            let log = &log;
            scope.spawn(move || log.append(&[record(writer, 0, 0)]).expect("its own record goes in"));
        }
    });
    let elapsed = started.elapsed();
    assert!(elapsed < stall * 3, "six appends took {elapsed:?}: they queued behind the drain");
    assert_eq!(store.taken.lock().expect("taken").len(), 7);
    assert_eq!(waiting_in(&path).len(), 8, "nothing spooled was lost");
}

/// R3: a record whose append got no answer is spooled with the id it was first sent with, so
/// that a store which did take it the first time keeps it once when it comes again.
#[test]
fn a_spooled_record_is_sent_again_with_the_id_it_was_first_sent_with() {
    let temp = tempfile::tempdir().expect("temp");
    let store = std::sync::Arc::new(Store { fail_before: 1, ..Store::default() });
    let log = AuditLog::shared(store.clone(), temp.path()).expect("log");
    log.append_deferrable(&[record(0, 0, 0)]).expect("spooled");
    log.append(&[record(1, 0, 0)]).expect("appended, after the spooled record");
    let tried = store.tried.lock().expect("tried").clone();
    let taken = store.taken.lock().expect("taken").clone();
    let first = tried.first().and_then(|record| record.id.clone()).expect("an id before it was first sent");
    assert_eq!(taken.len(), 2);
    assert_eq!(taken[0].id.as_deref(), Some(first.as_str()), "sent again under the same id");
    assert!(taken[1].id.is_some() && taken[1].id != taken[0].id);
}

/// A record spooled before records had ids (an older host's spool) gets one from its line:
/// the same each time it is sent again, so the store keeps it once.
#[test]
fn a_record_spooled_without_an_id_is_sent_each_time_with_the_same_one() {
    let temp = tempfile::tempdir().expect("temp");
    let path = temp.path().join(AUDIT_SPOOL_FILE);
    spool::defer(&path, &spooled(2)).expect("spooled");
    assert!(std::fs::read_to_string(&path).expect("spool").lines().all(|line| !line.contains("\"id\"")), "spooled without ids");
    let ids = || spool::waiting(&std::fs::read_to_string(&path).expect("spool")).expect("records").0.into_iter().map(|record| record.id);
    let first: Vec<Option<String>> = ids().collect();
    assert!(first.iter().all(Option::is_some) && first[0] != first[1], "{first:?}");
    assert_eq!(ids().collect::<Vec<_>>(), first);
}

/// A record written under the workspace's namespace lock (every host waits on it) does not
/// send what waits in the spool: that goes with the next append made without the lock.
#[test]
fn an_append_in_the_namespace_lock_leaves_the_spool_for_the_next_append() {
    let temp = tempfile::tempdir().expect("temp");
    let store = std::sync::Arc::new(Store::default());
    let log = AuditLog::shared(store.clone(), temp.path()).expect("log");
    let path = log.directory().join(AUDIT_SPOOL_FILE);
    spool::defer(&path, &spooled(600)).expect("spooled");
    log.append_in_lock(&[record(0, 0, 0)]).expect("its own record goes in");
    log.append_deferrable_in_lock(&[record(0, 1, 0)]).expect("its own record goes in");
    assert_eq!(store.taken.lock().expect("taken").len(), 2, "only the two records, no spooled one");
    assert_eq!(waiting_in(&path).len(), 600);
    log.append(&[record(0, 2, 0)]).expect("appended");
    assert_eq!(store.taken.lock().expect("taken").len(), 603, "the spool went first, then the record");
    assert!(waiting_in(&path).is_empty());
}

/// Group commits wake sleepers only when `sleeping > 0`. Many threads
/// on one log, with appends bunched so that some spin past `SPIN` and sleep while a leader
/// writes; every append must return (a lost wake-up would hang one forever). A watchdog fails
/// the test instead of hanging it.
#[test]
fn no_append_is_left_asleep_under_contention() {
    let temp = tempfile::tempdir().expect("temp");
    let log = std::sync::Arc::new(AuditLog::open(temp.path()).expect("log"));
    let (done, finished) = std::sync::mpsc::channel();
    let threads = 16;
    let appends = 400;
    for writer in 0..threads {
        let log = std::sync::Arc::clone(&log);
        let done = done.clone();
        std::thread::spawn(move || {
            for append in 0..appends {
                // Bursts of several records make a leader write longer than `SPIN`.
                let records: Vec<Record> = (0..=(append % 7) * 20).map(|part| record(writer, append, part)).collect();
                log.append(&records).expect("append");
                if append % 13 == 0 {
                    std::thread::yield_now();
                }
            }
            done.send(writer).expect("send");
        });
    }
    drop(done);
    for _ in 0..threads {
        finished.recv_timeout(std::time::Duration::from_secs(120)).expect("an append was left asleep (no thread finished within 120 s)");
    }
    assert_eq!(log.commit.lock().expect("commit").sleeping, 0, "sleepers counted back to zero");
}

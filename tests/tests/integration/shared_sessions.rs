//! Session state on PostgreSQL (`toolcell-store-postgres`'s [`SessionBackend`]): two hosts
//! (two connections, on threads) racing on one session's read versions, undo log and MCP
//! session resolve in the database; expiry is the database's. The same state through real
//! `serve` processes behind HAProxy: `host/toolcell/tests/serve_cluster.rs`.

use std::sync::Arc;
use std::time::Duration;

use toolcell_state::reads::Version;
use toolcell_state::{SessionBackend, SessionStoreError};
use toolcell_store_postgres::PostgresStore;
use toolcell_tests::postgres::Cluster;

/// A migrated cluster and two hosts' connections to it.
fn two_hosts() -> Option<(Cluster, Arc<PostgresStore>, Arc<PostgresStore>)> {
    let cluster = Cluster::start()?;
    PostgresStore::open(&cluster.url).expect("parses").migrate().expect("migrates");
    let connect = || PostgresStore::connect(&cluster.url).expect("connects");
    let (first, second) = (connect(), connect());
    Some((cluster, first, second))
}

/// A version of a file as JSON gives it (its fields are the crate's own).
fn version(len: u64) -> Version {
    serde_json::from_value(serde_json::json!({"len": len, "mtime_ns": 1, "ino": 2})).expect("a version")
}

#[test]
fn two_hosts_appending_to_one_sessions_undo_log_and_reads_lose_nothing_and_keep_each_ones_order() {
    let Some((_cluster, first, second)) = two_hosts() else {
        return;
    };
    let writers: Vec<_> = [("A", first), ("B", second)]
        .into_iter()
        .map(|(name, store)| {
            std::thread::spawn(move || {
                for index in 0..40 {
                    let line = format!("{{\"forget\":{{\"path\":\"{name}\",\"call_id\":\"{index}\"}}}}");
                    let blob = (format!("{name}-{index}"), vec![u8::try_from(index).unwrap_or(0); 4]);
                    store.append_undo("session", &[line], &[blob], 1000).expect("append");
                    store.record_reads("session", &[(&format!("{name}/{index}.txt"), Some(version(index)))]).expect("record");
                }
                store
            })
        })
        .collect();
    let stores: Vec<Arc<PostgresStore>> = writers.into_iter().map(|writer| writer.join().expect("writer")).collect();
    let lines = stores[0].undo_lines("session").expect("lines");
    assert_eq!(lines.len(), 80, "no append lost");
    for name in ["A", "B"] {
        let order: Vec<String> = lines
            .iter()
            .filter(|line| line.contains(&format!("\"path\":\"{name}\"")))
            .map(|line| line.rsplit("\"call_id\":\"").next().unwrap_or_default().trim_end_matches("\"}}").to_owned())
            .collect();
        assert_eq!(order, (0..40).map(|index| index.to_string()).collect::<Vec<_>>(), "{name}'s lines in the order it appended");
    }
    assert_eq!(stores[1].undo_blob("session", "B-7").expect("blob"), Some(vec![7; 4]));
    let reads = stores[1].reads("session").expect("reads");
    assert_eq!(reads.len(), 80);
    assert_eq!(reads.get("A/3.txt"), Some(&version(3)));
    // A file seen removed is forgotten; the log keeps only its last lines.
    stores[0].record_reads("session", &[("A/3.txt", None), ("A/4.txt", Some(version(99)))]).expect("record");
    let reads = stores[1].reads("session").expect("reads");
    assert!(!reads.contains_key("A/3.txt") && reads.get("A/4.txt") == Some(&version(99)));
    stores[0].append_undo("session", &["{}".to_owned()], &[], 10).expect("append");
    let kept = stores[1].undo_lines("session").expect("lines");
    assert_eq!(kept.len(), 11, "the last 10 before the append, and the line appended");
    assert_eq!(kept.last().map(String::as_str), Some("{}"));
    assert!(stores[0].undo_lines("another session").expect("lines").is_empty());
}

#[test]
fn an_mcp_session_belongs_to_its_principal_and_expires_at_the_databases_clock_for_every_host() {
    let Some((cluster, first, second)) = two_hosts() else {
        return;
    };
    let idle = Duration::from_secs(2);
    // rmcp stores the `initialize` first, then the front door records the principal.
    first.open_mcp("m-1", None, Some("{\"initialize_params\":{}}")).expect("open");
    first.open_mcp("m-1", Some("alice"), None).expect("claim");
    let found = second.use_mcp("m-1", Some("alice"), idle).expect("use").expect("alice's session, on the other host");
    assert_eq!(found.initialization.as_deref(), Some("{\"initialize_params\":{}}"));
    assert!(second.use_mcp("m-1", Some("rita"), idle).expect("use").is_none(), "not rita's");
    // Used on the second host: the first host's sweep keeps it.
    std::thread::sleep(Duration::from_millis(1200));
    second.use_mcp("m-1", Some("alice"), idle).expect("use").expect("alive");
    std::thread::sleep(Duration::from_millis(1200));
    let swept = first.sweep_mcp(&[], &["m-1".to_owned()], idle).expect("sweep");
    assert!(swept.expired.is_empty() && swept.alive == ["m-1"], "{swept:?}");
    // Idle past it: gone for both at once, and exactly one sweep ends it.
    std::thread::sleep(Duration::from_millis(2200));
    assert!(second.use_mcp("m-1", Some("alice"), idle).expect("use").is_none());
    let (one, other) = (first.sweep_mcp(&[], &[], idle).expect("sweep"), second.sweep_mcp(&[], &[], idle).expect("sweep"));
    assert_eq!(one.expired.len() + other.expired.len(), 1, "{one:?} {other:?}");
    // A session with a request in flight on a host stays, however idle.
    first.open_mcp("m-2", Some("alice"), None).expect("open");
    std::thread::sleep(Duration::from_millis(2200));
    let swept = first.sweep_mcp(&["m-2".to_owned()], &["m-2".to_owned()], idle).expect("sweep");
    assert!(swept.expired.is_empty() && swept.alive == ["m-2"], "{swept:?}");
    // Without the database: a typed error naming the kind of store only (clients see it):
    // never its socket directory, user or database, never a password.
    cluster.stop();
    let error: SessionStoreError = second.reads("session").expect_err("down");
    let told = error.writes_refused();
    assert!(told.contains("writes are refused") && told.contains("session store (PostgreSQL)"), "{told}");
    let socket = cluster.socket_dir().display().to_string();
    assert!(!told.contains("postgres://") && !told.contains(&socket) && !told.contains("toolcell@"), "{told}");
}

/// The blobs of the undo lines compaction drops go with them; one a kept line still names
/// stays.
#[test]
fn compacting_an_undo_log_drops_the_blobs_only_its_dropped_lines_name() {
    let Some((_cluster, store, _)) = two_hosts() else {
        return;
    };
    let append = |line: &str, blob: Option<&str>| {
        let blobs: Vec<(String, Vec<u8>)> = blob.iter().map(|name| ((*name).to_owned(), vec![7; 4])).collect();
        store.append_undo("compacted", &[line.to_owned()], &blobs, 2).expect("append");
    };
    let kept = |name: &str| store.undo_blob("compacted", name).expect("blob").is_some();
    for index in 1..=4 {
        append(&format!("{{\"blob\":\"b{index}\"}}"), Some(&format!("b{index}")));
    }
    // Each append keeps the last two lines its snapshot saw, and itself.
    assert!(!kept("b1") && kept("b2") && kept("b3") && kept("b4"));
    append("{\"blob\":\"b2\",\"again\":true}", None);
    append("{\"none\":true}", None);
    assert_eq!(store.undo_lines("compacted").expect("lines").len(), 3);
    assert!(kept("b2"), "a kept line still names it");
    assert!(!kept("b3"));
}

/// A call still recording when its session is ended on another host leaves nothing in the
/// store: once the session's end is recorded, every recording statement of it is refused
/// (saying why), and what was recorded before the end is removed with it.
#[test]
fn a_session_ended_on_another_host_takes_no_more_records_and_keeps_no_rows() {
    let Some((_cluster, first, second)) = two_hosts() else {
        return;
    };
    let record = |store: &PostgresStore, key: &str, index: u64| {
        let line = format!("{{\"forget\":{{\"path\":\"a\",\"call_id\":\"{index}\"}}}}");
        store.record_call(key, &[("a.txt", Some(version(index)))], &[line], &[(format!("blob-{index}"), vec![1; 64])], 100)
    };
    record(&first, "ended", 1).expect("a live session records");
    second.forget_sessions(&["ended".to_owned()]).expect("ended");
    let refused = record(&first, "ended", 2).expect_err("an ended session records nothing");
    assert!(refused.to_string().contains("the session ended"), "{refused}");
    assert!(first.append_undo("ended", &["{}".to_owned()], &[("late".to_owned(), vec![2; 64])], 100).is_err());
    assert!(first.record_reads("ended", &[("late.txt", Some(version(3)))]).is_err());
    assert!(second.reads("ended").expect("reads").is_empty());
    assert!(second.undo_lines("ended").expect("lines").is_empty());
    assert_eq!(second.undo_blob("ended", "late").expect("blob"), None);
    assert_eq!(second.undo_blob("ended", "blob-1").expect("blob"), None);
    // Raced: a host records the session's calls while the other ends it.
    let writer = {
        let first = Arc::clone(&first);
        std::thread::spawn(move || (1..).take_while(|index| record(&first, "raced", *index).is_ok()).count())
    };
    std::thread::sleep(Duration::from_millis(300));
    second.forget_sessions(&["raced".to_owned()]).expect("ended");
    let recorded = writer.join().expect("the writer");
    assert!(recorded > 0, "no call recorded before the end");
    assert!(second.reads("raced").expect("reads").is_empty());
    assert!(second.undo_lines("raced").expect("lines").is_empty());
    assert_eq!(second.undo_blob("raced", &format!("blob-{recorded}")).expect("blob"), None);
    // Another session is not affected.
    record(&second, "live", 1).expect("records");
    assert_eq!(first.reads("live").expect("reads").len(), 1);
    // A path a call saw twice is recorded once, as last seen.
    second.record_reads("live", &[("b.txt", Some(version(1))), ("b.txt", Some(version(2)))]).expect("a path seen twice");
    assert_eq!(first.reads("live").expect("reads").get("b.txt"), Some(&version(2)));
}

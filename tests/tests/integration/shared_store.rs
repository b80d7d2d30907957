//! Locks and the audit trail on PostgreSQL (`toolcell-store-postgres`), through the real host:
//! hosts are processes (this test binary run again as a worker), each with its own state
//! directory, sharing one workspace and one private PostgreSQL cluster on a Unix socket.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::locks::{COUNTERS, ITERATIONS, increment, request};
use serde_json::json;
use toolcell_runtime::{CallOutcome, Runtime, Workspace};
use toolcell_store_postgres::{PostgresStore, SCHEMA_VERSION, StoreError};
use toolcell_tests::postgres::Cluster;
use toolcell_tests::{Fixture, TEST_POLICY, builtin_runtime_builder, call_in, guest_program};

const WORKER_ROLE: &str = "TOOLCELL_TEST_PG_WORKER";
const WORKER_STORE: &str = "TOOLCELL_TEST_PG_STORE";
const WORKER_WORKSPACE: &str = "TOOLCELL_TEST_PG_WORKSPACE";
const WORKER_NAME: &str = "TOOLCELL_TEST_PG_NAME";

/// A cluster migrated to the current schema.
fn store() -> Option<(Cluster, Arc<PostgresStore>)> {
    let cluster = Cluster::start()?;
    PostgresStore::open(&cluster.url).expect("parses").migrate().expect("migrates");
    let store = PostgresStore::connect(&cluster.url).expect("connects");
    Some((cluster, store))
}

/// A host on the shared store, with a state directory of its own.
fn host(store: &Arc<PostgresStore>, state: &std::path::Path) -> Runtime {
    builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .policy("policy.toml", TEST_POLICY)
        .audit_dir(state)
        .shared_store(
            Arc::clone(store) as Arc<dyn toolcell_runtime::LockBackend>,
            Arc::clone(store) as Arc<dyn toolcell_runtime::AuditBackend>,
        )
        .build()
        .expect("the host builds")
}

/// A call as `impl` for lock owner `owner`, in its session `s-OWNER`.
fn call(runtime: &Runtime, workspace: &Workspace, owner: &str, fences: &[u64], tool: &str, args: serde_json::Value) -> CallOutcome {
    call_in(runtime, workspace, &format!("s-{owner}"), Some(owner), fences, tool, &args)
}

/// Start this test binary as a worker host running `role`.
fn worker(role: &str, cluster: &Cluster, workspace: &std::path::Path, name: &str) -> Child {
    worker_at(role, cluster, workspace, name, 0)
}

/// [`worker`], told to act at `at` (milliseconds since the epoch).
fn worker_at(role: &str, cluster: &Cluster, workspace: &std::path::Path, name: &str, at: u128) -> Child {
    Command::new(std::env::current_exe().expect("test executable"))
        .env("TOOLCELL_TEST_PG_AT", at.to_string())
        .args(["--exact", "shared_store::worker_host", "--ignored", "--test-threads=1", "--nocapture"])
        .env(WORKER_ROLE, role)
        .env(WORKER_STORE, &cluster.url)
        .env(WORKER_WORKSPACE, workspace)
        .env(WORKER_NAME, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn a worker host")
}

/// The lines a worker printed that start with `@`, once it exits.
fn reports(child: Child) -> Vec<String> {
    let output = child.wait_with_output().expect("the worker ends");
    assert!(output.status.success(), "a worker host failed");
    // The harness prints the test's name before its output, on the same line.
    String::from_utf8_lossy(&output.stdout).lines().filter_map(|line| line.split_once('@')).map(|(_, report)| report.to_owned()).collect()
}

/// Not a test on its own: a host process of the tests below.
#[test]
#[ignore = "run as a child process by the shared-store tests"]
fn worker_host() {
    let (Ok(role), Ok(url), Ok(workspace), Ok(name)) =
        (std::env::var(WORKER_ROLE), std::env::var(WORKER_STORE), std::env::var(WORKER_WORKSPACE), std::env::var(WORKER_NAME))
    else {
        return;
    };
    let store = PostgresStore::connect(&url).expect("connects");
    let state = tempfile::tempdir().expect("state");
    let runtime = host(&store, state.path());
    let workspace = Workspace::open(workspace.as_ref()).expect("workspace");
    match role.as_str() {
        // Try once for `src/a.rs` at the moment the parent names; say whether it was won.
        "contend" => {
            let at: u128 = std::env::var("TOOLCELL_TEST_PG_AT").ok().and_then(|at| at.parse().ok()).unwrap_or(0);
            while std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |now| now.as_millis()) < at {
                std::thread::sleep(Duration::from_millis(1));
            }
            match runtime.acquire_lock(&workspace, &request("src/**", &name, Duration::from_secs(60))) {
                Ok(lock) => report(&format!("won {}", lock.fence)),
                Err(error) => report(&format!("lost {error}")),
            }
        }
        // Take a lease of two seconds, say its token, and wait to be killed.
        "hold" => {
            let lock = runtime.acquire_lock(&workspace, &request("notes.txt", &name, Duration::from_secs(2))).expect("acquired");
            report(&format!("held {}", lock.fence));
            std::thread::sleep(Duration::from_secs(600));
        }
        // Three threads, thirty increments each, of the counters.
        "increment" => {
            std::thread::scope(|scope| {
                for thread in 0..3 {
                    let (runtime, workspace, owner) = (&runtime, &workspace, format!("{name}-{thread}"));
                    scope.spawn(move || increment(runtime, workspace, &owner));
                }
            });
            report("done");
        }
        // Many calls, each leaving records in the shared chain.
        "audit" => {
            for number in 0..40 {
                let outcome = call(&runtime, &workspace, &name, &[], "read_file", json!({"path": "notes.txt"}));
                assert!(outcome.result.is_ok(), "{number}: {:?}", outcome.result);
                let refused = call(&runtime, &workspace, &name, &[], "read_file", json!({"path": "secrets/key.txt"}));
                assert!(refused.result.is_err());
            }
            report("done");
        }
        other => panic!("unknown worker role {other}"),
    }
}

/// Tell the parent something, on a line of its own (read by [`reports`]).
fn report(line: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "\n@{line}");
    let _ = stdout.flush();
}

#[test]
fn migrations_are_applied_explicitly_and_checked_at_connect() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    match PostgresStore::connect(&cluster.url) {
        Err(StoreError::Schema { found: 0, .. }) => {}
        other => panic!("a database never migrated must be refused: {other:?}"),
    }
    let message = PostgresStore::connect(&cluster.url).expect_err("not migrated").to_string();
    assert!(message.contains("toolcell store migrate"), "{message}");
    let store = PostgresStore::open(&cluster.url).expect("parses");
    assert_eq!(store.migrate().expect("migrates"), (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    assert_eq!(store.migrate().expect("nothing to do"), Vec::<i32>::new());
    assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
    PostgresStore::connect(&cluster.url).expect("a migrated database connects");
    // A database from a later toolcell is refused, not downgraded.
    cluster.psql("INSERT INTO toolcell_schema (version) VALUES (99)");
    assert!(matches!(store.migrate(), Err(StoreError::Schema { found: 99, .. })));
}

#[test]
fn two_hosts_contend_for_one_path_and_exactly_one_wins() {
    let Some((cluster, _store)) = store() else {
        return;
    };
    for round in 0..4 {
        let fixture = Fixture::new();
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time").as_millis() + 1_500;
        // Both try at the same moment, after starting up.
        let children: Vec<Child> = ["A", "B"].iter().map(|name| worker_at("contend", &cluster, fixture.root(), name, at)).collect();
        let results: Vec<String> = children.into_iter().flat_map(reports).collect();
        let won = results.iter().filter(|line| line.starts_with("won")).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        assert!(results.iter().any(|line| line.starts_with("lost") && line.contains("src/**")), "round {round}: {results:?}");
    }
}

#[test]
fn a_killed_holders_lease_expires_by_the_database_clock_and_its_stale_token_is_refused() {
    let Some((cluster, store)) = store() else {
        return;
    };
    let fixture = Fixture::new();
    fixture.write("notes.txt", "original\n");
    let mut holder = worker("hold", &cluster, fixture.root(), "A");
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    let fence: u64 = loop {
        let line = lines.next().expect("the holder reports").expect("a line");
        if let Some((_, fence)) = line.split_once("@held ") {
            break fence.parse().expect("a token");
        }
    };
    // The holder dies without releasing.
    holder.kill().expect("SIGKILL the holder");
    let _ = holder.wait();
    let state = tempfile::tempdir().expect("state");
    let other = host(&store, state.path());
    let taken = other.acquire_lock(&fixture.workspace, &request("notes.txt", "B", Duration::from_secs(30)));
    assert!(taken.is_err(), "the dead holder's lease still runs: {taken:?}");
    // The lease ends by the database's clock: the row says so.
    let ends: i64 = cluster
        .psql(&format!("SELECT expires_at_ms FROM toolcell_leases WHERE fence = {fence} AND lapse IS NULL"))
        .trim()
        .parse()
        .expect("expiry");
    let now: i64 = cluster.psql("SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint").trim().parse().expect("now");
    assert!(ends > now - 5_000 && ends <= now + 2_000, "expiry {ends} against the database's {now}");
    let started = Instant::now();
    let lock = loop {
        match other.acquire_lock(&fixture.workspace, &request("notes.txt", "B", Duration::from_secs(30))) {
            Ok(lock) => break lock,
            Err(_) if started.elapsed() < Duration::from_secs(20) => std::thread::sleep(Duration::from_millis(100)),
            Err(error) => panic!("the lease never ended: {error}"),
        }
    };
    assert!(lock.fence > fence, "tokens never go back: {} after {fence}", lock.fence);
    // The dead holder's token, presented by a new host acting for it, is refused.
    let state = tempfile::tempdir().expect("state");
    let revived = host(&store, state.path());
    call(&revived, &fixture.workspace, "A", &[fence], "read_file", json!({"path": "notes.txt"}));
    let stale = call(&revived, &fixture.workspace, "A", &[fence], "write_file", json!({"path": "notes.txt", "content": "stale\n"}));
    let error = stale.result.expect_err("a stale token writes nothing");
    assert_eq!(error.kind.as_str(), "conflict", "{}", error.message);
    assert_eq!(fixture.read_text("notes.txt"), "original\n");
    // B, the holder now, writes.
    call(&other, &fixture.workspace, "B", &[lock.fence], "read_file", json!({"path": "notes.txt"}));
    let written = call(&other, &fixture.workspace, "B", &[lock.fence], "write_file", json!({"path": "notes.txt", "content": "B's\n"}));
    assert!(written.result.is_ok(), "{:?}", written.result);
}

#[test]
fn two_hosts_incrementing_under_shared_locks_lose_no_update() {
    let Some((cluster, _store)) = store() else {
        return;
    };
    let fixture = Fixture::new();
    for counter in COUNTERS {
        fixture.write(counter, "0\n");
    }
    let children: Vec<Child> = ["host-1", "host-2"].iter().map(|name| worker("increment", &cluster, fixture.root(), name)).collect();
    for child in children {
        assert_eq!(reports(child), ["done"]);
    }
    let total: u64 = COUNTERS.iter().map(|counter| fixture.read_text(counter).trim().parse::<u64>().expect("a counter")).sum();
    assert_eq!(total, (2 * 3 * ITERATIONS) as u64, "updates were lost");
}

#[test]
fn two_hosts_append_to_one_chain_and_tampering_in_the_table_is_found() {
    let Some((cluster, store)) = store() else {
        return;
    };
    let fixture = Fixture::new();
    fixture.write("notes.txt", "hello\n");
    fixture.write("secrets/key.txt", "hunter2\n");
    let children: Vec<Child> = ["A", "B"].iter().map(|name| worker("audit", &cluster, fixture.root(), name)).collect();
    for child in children {
        assert_eq!(reports(child), ["done"]);
    }
    let chain = || toolcell_runtime::AuditBackend::read_from(store.as_ref(), 0).expect("the chain reads").0;
    let text = chain();
    let verified = toolcell_audit::verify(text.lines()).expect("one unbroken chain");
    // Per host: 80 call records and 40 refusals.
    assert!(verified.records >= 240, "{} records", verified.records);
    let head = toolcell_runtime::AuditBackend::head(store.as_ref()).expect("head").expect("a head");
    assert_eq!(head.seq, verified.records as u64);
    for name in ["A", "B"] {
        assert!(text.contains(&format!("\"session\":\"s-{name}\"")), "no record of host {name}");
    }
    // The table refuses changes...
    let update = std::panic::catch_unwind(|| cluster.psql("UPDATE toolcell_audit SET line = line WHERE seq = 1"));
    assert!(update.is_err(), "the audit table took an update");
    // ...and what a superuser changes anyway is found.
    cluster.psql(
        "ALTER TABLE toolcell_audit DISABLE TRIGGER toolcell_audit_append_only; \
         UPDATE toolcell_audit SET line = replace(line, '\"decision\":\"deny\"', '\"decision\":\"allow\"') WHERE seq = (SELECT min(seq) FROM toolcell_audit WHERE line LIKE '%\"decision\":\"deny\"%')",
    );
    let tampered = toolcell_audit::verify(chain().lines()).expect_err("the edited record is found");
    assert!(tampered.line >= 1, "{tampered}");
    // A record removed from the middle breaks the chain too.
    cluster.psql("UPDATE toolcell_audit SET line = line; DELETE FROM toolcell_audit WHERE seq = 10");
    assert!(toolcell_audit::verify(chain().lines()).is_err());
}

#[test]
fn while_the_database_is_down_writes_fail_closed_reads_go_on_and_work_resumes() {
    let Some((cluster, store)) = store() else {
        return;
    };
    let fixture = Fixture::new();
    fixture.write("notes.txt", "before\n");
    let state = tempfile::tempdir().expect("state");
    let runtime = host(&store, state.path());
    let workspace = &fixture.workspace;
    call(&runtime, workspace, "A", &[], "read_file", json!({"path": "notes.txt"}));
    let written = call(&runtime, workspace, "A", &[], "write_file", json!({"path": "notes.txt", "content": "first\n"}));
    assert!(written.result.is_ok(), "{:?}", written.result);
    cluster.stop();
    // Writes are refused, clearly, and nothing is half-written.
    for (tool, args) in [
        ("write_file", json!({"path": "notes.txt", "content": "while down\n"})),
        ("write_file", json!({"path": "new.txt", "content": "while down\n"})),
        ("edit_file", json!({"path": "notes.txt", "old_string": "first", "new_string": "edited"})),
        ("delete_file", json!({"path": "notes.txt"})),
    ] {
        let outcome = call(&runtime, workspace, "A", &[], tool, args);
        let error = outcome.result.expect_err("refused while the store is down");
        assert!(
            error.message.contains("lock table cannot be read") || error.message.contains("audit trail cannot be written"),
            "{tool}: {}",
            error.message
        );
        assert!(!error.message.contains(&cluster.socket_dir().display().to_string()), "a host path reached the agent: {}", error.message);
    }
    assert_eq!(fixture.read_text("notes.txt"), "first\n");
    assert!(!fixture.root().join("new.txt").exists());
    let locked = runtime.acquire_lock(workspace, &request("src/**", "A", Duration::from_secs(30)));
    assert!(locked.is_err(), "a lock was taken without the store");
    // Reads go on; their records wait in the state directory.
    let read = call(&runtime, workspace, "A", &[], "read_file", json!({"path": "notes.txt"}));
    assert!(read.result.as_ref().is_ok_and(|output| output.text.contains("first")), "{:?}", read.result);
    let spool = state.path().join(toolcell_runtime::AUDIT_SPOOL_FILE);
    assert!(std::fs::read_to_string(&spool).is_ok_and(|text| text.contains(&read.call_id)), "the read's record is not kept for later");
    // Back: work resumes, and the waiting records join the chain in order.
    cluster.resume();
    let written = call(&runtime, workspace, "A", &[], "write_file", json!({"path": "notes.txt", "content": "after\n"}));
    assert!(written.result.is_ok(), "{:?}", written.result);
    assert_eq!(fixture.read_text("notes.txt"), "after\n");
    let chain = toolcell_runtime::AuditBackend::read_from(store.as_ref(), 0).expect("reads").0;
    toolcell_audit::verify(chain.lines()).expect("one chain");
    assert!(chain.contains(&read.call_id), "the read made while the store was down is in the chain");
    assert_eq!(std::fs::read_to_string(&spool).unwrap_or_default(), "");
}

#[test]
fn a_shared_store_without_a_state_directory_is_a_configuration_error() {
    // Never connected: the builder refuses before anything is opened.
    let store = Arc::new(PostgresStore::open("postgresql://toolcell@127.0.0.1:1/toolcell").expect("the URL parses"));
    let built = builtin_runtime_builder()
        .policy("policy.toml", TEST_POLICY)
        .shared_store(Arc::clone(&store) as Arc<dyn toolcell_runtime::LockBackend>, store as Arc<dyn toolcell_runtime::AuditBackend>)
        .build();
    let Err(error) = built else { panic!("a shared store without a state directory must not build") };
    assert!(matches!(error, toolcell_runtime::Error::Configuration { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.starts_with("a shared store (`shared_store`) was given without a state directory (`audit_dir`)")
            && text.contains("give the state directory too (`RuntimeBuilder::audit_dir`, `--state-dir` on the command line)"),
        "{text}"
    );
}

/// A host on a store that waits 1 s for the database, whose spool holds `count` records as a
/// long outage leaves them, its last line cut short by a write that failed.
struct Spooled {
    runtime: Runtime,
    store: Arc<PostgresStore>,
    fixture: Fixture,
    spool_file: std::path::PathBuf,
    _state: tempfile::TempDir,
}

fn spooled_host(cluster: &Cluster, count: usize) -> Spooled {
    let store = PostgresStore::connect_with(&cluster.url, Duration::from_secs(1)).expect("connects");
    let fixture = Fixture::new();
    fixture.write("notes.txt", "before\n");
    let state = tempfile::tempdir().expect("state");
    let runtime = host(&store, state.path());
    call(&runtime, &fixture.workspace, "A", &[], "read_file", json!({"path": "notes.txt"}));
    let mut spool = String::new();
    for index in 0..count {
        let record =
            toolcell_audit::Record::call("2026-11-26T00:00:00.000Z", "s-outage", "impl", "read_file", &format!("c-spooled-{index}"), "ok");
        spool.push_str(&serde_json::to_string(&record).expect("record"));
        spool.push('\n');
    }
    spool.push_str(r#"{"seq":0,"ts":"2026-11-26T00:00:01.000Z","sess"#);
    let spool_file = state.path().join(toolcell_runtime::AUDIT_SPOOL_FILE);
    std::fs::write(&spool_file, spool).expect("spool");
    Spooled { runtime, store, fixture, spool_file, _state: state }
}

/// The spooled records of the shared chain (verified), in chain order.
fn spooled_in(store: &PostgresStore) -> (String, Vec<String>) {
    let chain = toolcell_runtime::AuditBackend::read_from(store, 0).expect("reads").0;
    toolcell_audit::verify(chain.lines()).expect("one chain");
    let spooled = chain.lines().filter(|line| line.contains("c-spooled-")).map(str::to_owned).collect();
    (chain, spooled)
}

/// The spool a long outage leaves (here 40,000 records, and a last line cut short) drains in
/// batches that each fit the store's deadline. A record the store refuses stops the drain
/// there, and the spool says how far it got, but the caller's own write is recorded and goes
/// on; once the store takes it, the rest follows: every whole record joins the chain exactly
/// once, in order, and the piece of a line is dropped.
#[test]
fn a_large_spool_drains_in_batches_a_refused_record_holds_back_only_the_rest_and_a_torn_line_is_dropped() {
    let Some((cluster, _)) = store() else {
        return;
    };
    let Spooled { _state, runtime, store, fixture, spool_file } = spooled_host(&cluster, 40_000);
    let workspace = &fixture.workspace;
    cluster.psql(
        "CREATE FUNCTION refuse_spooled() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.line LIKE '%\"c-spooled-1200\"%' THEN RAISE EXCEPTION 'refused for the test'; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER refuse_spooled BEFORE INSERT ON toolcell_audit FOR EACH ROW EXECUTE FUNCTION refuse_spooled();",
    );
    let first = call(&runtime, workspace, "A", &[], "write_file", json!({"path": "notes.txt", "content": "first\n"}));
    assert!(first.result.is_ok(), "a spool that cannot drain held back a write: {:?}", first.result);
    let (chain, spooled) = spooled_in(&store);
    assert_eq!(spooled.len(), 1200, "the drain stops at the refused record");
    assert!(chain.contains(&first.call_id), "the write is recorded");
    assert!(std::fs::read_to_string(&spool_file).expect("spool").contains("\"c-spooled-39999\""), "the rest is kept");
    cluster.psql("DROP TRIGGER refuse_spooled ON toolcell_audit;");
    let second = call(&runtime, workspace, "A", &[], "write_file", json!({"path": "notes.txt", "content": "second\n"}));
    assert!(second.result.is_ok(), "{:?}", second.result);
    let (chain, spooled) = spooled_in(&store);
    assert_eq!(spooled.len(), 40_000, "every whole spooled record is in the chain, once");
    assert!(spooled.iter().enumerate().all(|(index, line)| line.contains(&format!("\"c-spooled-{index}\""))), "in order");
    assert!(chain.contains(&second.call_id));
    assert_eq!(std::fs::read_to_string(&spool_file).unwrap_or_default(), "");
}

/// A database that takes a few milliseconds per record: a batch of 500 does not fit the
/// deadline, so batches shrink until they do (a first batch without an answer is tried
/// smaller by the next append), and the spool drains over a few calls, each of which succeeds.
#[test]
fn a_spool_drains_in_smaller_batches_when_the_database_is_slow_per_record() {
    let Some((cluster, _)) = store() else {
        return;
    };
    let Spooled { _state, runtime, store, fixture, spool_file } = spooled_host(&cluster, 1_000);
    let workspace = &fixture.workspace;
    cluster.psql(
        "CREATE FUNCTION slow_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.004); RETURN NEW; END $$; \
         CREATE TRIGGER slow_audit BEFORE INSERT ON toolcell_audit FOR EACH ROW EXECUTE FUNCTION slow_audit();",
    );
    let mut calls = 0;
    while spooled_in(&store).1.len() < 1_000 {
        calls += 1;
        assert!(calls <= 10, "the spool did not drain in 10 calls: {} records in", spooled_in(&store).1.len());
        let written =
            call(&runtime, workspace, "A", &[], "write_file", json!({"path": "notes.txt", "content": format!("after {calls}\n")}));
        assert!(written.result.is_ok(), "{:?}", written.result);
    }
    let (_, spooled) = spooled_in(&store);
    assert_eq!(spooled.len(), 1_000, "the spool drained, each record once");
    assert_eq!(std::fs::read_to_string(&spool_file).unwrap_or_default(), "");
    cluster.psql("DROP TRIGGER slow_audit ON toolcell_audit;");
}

/// R3: a record sent again (its append landed but its answer was lost, so the batch is halved
/// and resent, or the call's own records are spooled and sent later) is kept once: the store
/// knows it by its id. A chain from schema version 2, with a record in it twice (no ids
/// then), migrates to version 3 as it is, and its records stay.
#[test]
fn a_record_sent_again_is_kept_once_and_a_chain_with_duplicates_migrates() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let old = toolcell_audit::Record::call("2026-11-26T00:00:00.000Z", "s-old", "impl", "read_file", "c-old", "ok");
    let (first, link) = toolcell_audit::seal(&old, &toolcell_audit::Link::GENESIS);
    let (second, link) = toolcell_audit::seal(&old, &link);
    let version_two = format!(
        "CREATE TABLE toolcell_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now()); {} {} \
         INSERT INTO toolcell_schema (version) VALUES (1), (2); \
         INSERT INTO toolcell_audit (seq, hash, line) VALUES (1, '{}', $l${first}$l$), (2, '{}', $l${second}$l$);",
        toolcell_store_postgres::MIGRATIONS[0].1,
        toolcell_store_postgres::MIGRATIONS[1].1,
        first.rsplit_once("\"hash\":\"").expect("hash").1.trim_end_matches("\"}"),
        link.hash,
    );
    cluster.psql(&version_two);
    assert_eq!(PostgresStore::open(&cluster.url).expect("parses").migrate().expect("migrates"), vec![3, 4]);
    let store = PostgresStore::connect(&cluster.url).expect("connects");
    let records: Vec<toolcell_audit::Record> = (1..=3)
        .map(|n| toolcell_audit::Record {
            id: Some(format!("r-{n}")),
            ..toolcell_audit::Record::call("2026-11-26T00:00:01.000Z", "s-new", "impl", "read_file", &format!("c-new-{n}"), "ok")
        })
        .collect();
    let append = |records: &[toolcell_audit::Record]| toolcell_runtime::AuditBackend::append(&*store, records).expect("appends").seq;
    assert_eq!(append(&records[..2]), 4);
    // The halved batch sent again, then the whole, then a record without an id (kept each time).
    assert_eq!(append(&records[..1]), 4, "nothing new");
    assert_eq!(append(&records), 5, "only the third is new");
    assert_eq!(append(std::slice::from_ref(&old)), 6);
    assert_eq!(append(&[old]), 7);
    let chain = toolcell_runtime::AuditBackend::read_from(&*store, 0).expect("reads").0;
    toolcell_audit::verify(chain.lines()).expect("one chain");
    for n in 1..=3 {
        assert_eq!(chain.matches(&format!("\"c-new-{n}\"")).count(), 1, "c-new-{n}: {chain}");
    }
    assert_eq!(chain.matches("\"c-old\"").count(), 4, "records without an id are all kept: {chain}");
}

#[test]
fn a_lease_keeps_the_roles_it_was_taken_for_so_every_host_judges_it_alike() {
    let Some((cluster, store)) = store() else {
        return;
    };
    let fixture = Fixture::new();
    let (state_a, state_b) = (tempfile::tempdir().expect("state"), tempfile::tempdir().expect("state"));
    let (first, second) = (host(&store, state_a.path()), host(&store, state_b.path()));
    let task = toolcell_runtime::TaskBinding::parse("CHAIN-1-x/001-a").expect("task");
    let args = json!({"paths": ["**"], "ttl_seconds": 60}).to_string();
    let locked = first
        .call(&toolcell_runtime::CallRequest {
            task: Some(&task),
            ..toolcell_runtime::CallRequest::new(&fixture.workspace, "impl", "s-A", "lock_files", &args)
        })
        .expect("called");
    locked.result.expect("locked");
    // The other host reads the lease with its holder, as the first host wrote it.
    let live = second.live_locks(&fixture.workspace).expect("locks");
    let holder = live[0].held_for.as_deref().expect("a holder");
    assert_eq!((holder.roles.as_slice(), holder.task.as_deref()), (&["impl".to_owned()][..], Some("CHAIN-1-x/001-a")));
    // A row written by hand or by another program: a NULL role or no roles reads as no holder
    // (the lease covers its whole pattern), never as a panic nor as a lease covering nothing.
    for roles in ["ARRAY[NULL]::text[]", "'{}'::text[]", "ARRAY['impl', NULL]::text[]"] {
        cluster.psql(&format!("UPDATE toolcell_leases SET holder_roles = {roles} WHERE lapse IS NULL AND pattern = '**'"));
        let live = second.live_locks(&fixture.workspace).expect("the lease reads");
        assert!(live[0].held_for.is_none(), "{roles}: {:?}", live[0].held_for);
        let write = json!({"ops": [{"op": "write", "path": "src/a.rs", "content": "x"}]});
        let outcome = fixture.call_as(&second, "s-B", None, &[], "fs_probe", &write);
        assert_eq!(outcome.result.expect_err("covered").kind, toolcell_types::ToolErrorKind::Conflict, "{roles}");
    }
    // An operator's lease has none, and covers its whole pattern.
    let elsewhere = Fixture::new();
    let operator = second.acquire_lock(&elsewhere.workspace, &request("notes.txt", "OPS", Duration::from_secs(30))).expect("acquired");
    let live = first.live_locks(&elsewhere.workspace).expect("locks");
    assert!(live.iter().any(|lock| lock.fence == operator.fence && lock.held_for.is_none()));
}

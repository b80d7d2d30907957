//! What the shared store costs a write, in one run: PostgreSQL (a private cluster on a Unix
//! socket, `toolcell_tests::postgres`) against the state directory's files.
//!
//! `cargo bench -p toolcell-tests --bench store` prints p50 and p99 of: the lock check every
//! write makes (`LockStore::check_write`, one lock held in the workspace), one audit record
//! appended, and a whole `write_file` call through the host (its lock check, its audit records
//! and the write). Under `cargo test` it runs a few iterations as a smoke test (and, without
//! PostgreSQL installed, says so and stops, unless `TOOLCELL_REQUIRE_POSTGRES` is set).

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolcell_runtime::{AuditBackend, AuditLog, LockBackend, LockMode, LockRequest, LockStore, Runtime, Workspace};
use toolcell_store_postgres::PostgresStore;
use toolcell_tests::measure::percentile;
use toolcell_tests::postgres::Cluster;
use toolcell_tests::{TEST_POLICY, builtin_runtime_builder, call_in};

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    (percentile(&mut samples, 50), percentile(&mut samples, 99))
}

fn measure(iterations: usize, mut run: impl FnMut(usize)) -> (Duration, Duration) {
    run(0);
    percentiles(
        (1..=iterations)
            .map(|iteration| {
                let started = Instant::now();
                run(iteration);
                started.elapsed()
            })
            .collect(),
    )
}

fn row(what: &str, files: (Duration, Duration), postgres: (Duration, Duration)) {
    let us = |duration: Duration| duration.as_secs_f64() * 1e6;
    let _ = writeln!(
        std::io::stderr(),
        "| {what} | {:.0} / {:.0} µs | {:.0} / {:.0} µs | +{:.0} / +{:.0} µs |",
        us(files.0),
        us(files.1),
        us(postgres.0),
        us(postgres.1),
        us(postgres.0) - us(files.0),
        us(postgres.1) - us(files.1)
    );
}

fn runtime(state: &std::path::Path, store: Option<&Arc<PostgresStore>>) -> Runtime {
    let mut builder = builtin_runtime_builder().policy("policy.toml", TEST_POLICY).audit_dir(state);
    if let Some(store) = store {
        builder = builder.shared_store(Arc::clone(store) as Arc<dyn LockBackend>, Arc::clone(store) as Arc<dyn AuditBackend>);
    }
    builder.build().expect("the runtime builds")
}

fn main() {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let iterations = if benchmarking { 2_000 } else { 20 };
    let Some(cluster) = Cluster::start() else {
        return;
    };
    PostgresStore::open(&cluster.url).expect("parses").migrate().expect("migrates");
    let store = PostgresStore::connect(&cluster.url).expect("connects");
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace_dir = temp.path().join("workspace");
    std::fs::create_dir_all(workspace_dir.join("src")).expect("workspace");
    let workspace = Workspace::open(&workspace_dir).expect("workspace");
    let _ = writeln!(
        std::io::stderr(),
        "| per write ({iterations} times) | files: p50 / p99 | PostgreSQL: p50 / p99 | overhead |\n|---|---|---|---|"
    );

    // The lock check, with one lock held by another owner on another path.
    let locks = [LockStore::in_directory(&temp.path().join("file-state")), LockStore::shared(Arc::clone(&store) as Arc<dyn LockBackend>)];
    let checks: Vec<(Duration, Duration)> = locks
        .iter()
        .map(|locks| {
            let request = LockRequest {
                pattern: "docs/**".to_owned(),
                owner: "other".to_owned(),
                session: "s-other".to_owned(),
                mode: LockMode::Exclusive,
                ttl: Duration::from_secs(600),
            };
            locks.acquire(workspace.root(), &request).expect("a lock");
            measure(iterations, |_| {
                locks.check_write(workspace.root(), "src/a.rs", "me", &[]).expect("the table reads").expect("allowed");
            })
        })
        .collect();
    row("lock check", checks[0], checks[1]);

    // One audit record appended (the file log is synced by the OS as it pleases; the database
    // commits each append).
    let logs = [
        AuditLog::open(&temp.path().join("file-audit")).expect("log"),
        AuditLog::shared(Arc::clone(&store) as Arc<dyn AuditBackend>, &temp.path().join("pg-audit")).expect("log"),
    ];
    let appends: Vec<(Duration, Duration)> = logs
        .iter()
        .map(|log| {
            measure(iterations, |iteration| {
                let record =
                    toolcell_audit::Record::call("2026-11-24T00:00:00Z", "s-bench", "impl", "write_file", &format!("c-{iteration}"), "ok");
                log.append(&[record]).expect("appended");
            })
        })
        .collect();
    row("audit append (one record)", appends[0], appends[1]);

    // A whole write through the host: the lock check, the audit records, the write.
    let calls: Vec<(Duration, Duration)> = [None, Some(&store)]
        .into_iter()
        .enumerate()
        .map(|(index, store)| {
            let runtime = runtime(&temp.path().join(format!("host-{index}")), store);
            measure(iterations / 4, |iteration| {
                let args = json!({"path": format!("src/out-{index}-{iteration}.txt"), "content": "written\n"});
                let outcome = call_in(&runtime, &workspace, "s-bench", None, &[], "write_file", &args);
                assert!(outcome.result.is_ok(), "{:?}", outcome.result);
            })
        })
        .collect();
    row("`write_file` call, a new file", calls[0], calls[1]);
    // The chain the appends made is whole.
    let chain = AuditBackend::read_from(store.as_ref(), 0).expect("reads").0;
    toolcell_audit::verify(chain.lines()).expect("one chain");
}

//! `toolcell serve` under load: N concurrent MCP clients over HTTP (N = 1, 8, 64; 4 reads to
//! each edit), on separate workspaces (one each) and on one shared workspace (one file each,
//! and an exclusive lock on `shared/**` taken and released in turn). Reports throughput and
//! latency, and checks that nothing was lost: every acknowledged edit is on disk, no call
//! failed, the lock was never held by two clients at once, and the audit chain verifies.
//!
//! `cargo bench -p toolcell --bench serve` measures (release build); `cargo test` runs it small
//! as a smoke test, checks included.

#[path = "../tests/load/mod.rs"]
mod load;

use std::process::Command;
use std::time::Instant;

/// One run: `clients` clients, each making `operations` calls.
fn run(clients: usize, shared: bool, operations: usize) -> String {
    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path();
    let mut config = String::from("[workspaces]\n");
    let mut files = Vec::new();
    for client in 0..clients {
        let (workspace, file) =
            if shared { ("shared".to_owned(), format!("f{client}.txt")) } else { (format!("w{client}"), "notes.txt".to_owned()) };
        std::fs::create_dir_all(root.join(&workspace).join("shared")).expect("workspace");
        std::fs::write(root.join(&workspace).join(&file), "notes\nEND\n").expect("file");
        if !shared || client == 0 {
            config.push_str(&format!("{workspace} = \"{workspace}\"\n"));
        }
        files.push((workspace, file));
    }
    for (client, (workspace, _)) in files.iter().enumerate() {
        let hash = toolcell_mcp::config::hex(&toolcell_mcp::config::token_hash(&format!("token-{client}")));
        config.push_str(&format!(
            "\n[[principals]]\nname = \"c{client}\"\ntoken_sha256 = \"{hash}\"\nworkspace = \"{workspace}\"\nrole = \"impl\"\n"
        ));
    }
    let config_path = root.join("service.toml");
    std::fs::write(&config_path, config).expect("config");
    let (server, url) = load::serve(root, &config_path);
    let started = Instant::now();
    let reports: Vec<load::ClientReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(client, (_, file))| {
                let url = url.clone();
                scope.spawn(move || load::run_client(&url, &format!("token-{client}"), file, operations, shared.then_some(10)))
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().expect("client thread")).collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    drop(server);

    // Nothing lost.
    for (report, (workspace, file)) in reports.iter().zip(&files) {
        assert!(report.failures.is_empty(), "{workspace}/{file}: {:?}", report.failures);
        let on_disk = std::fs::read_to_string(root.join(workspace).join(file)).expect("read");
        for line in &report.acknowledged {
            assert!(on_disk.lines().any(|present| present == line), "acknowledged but lost: {line}");
        }
    }
    let held: Vec<_> = reports.iter().flat_map(|report| report.held.iter().copied()).collect();
    assert!(!load::overlapping(&held), "the exclusive lock was held by two clients at once");
    let verified = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .arg("--state-dir")
        .arg(root.join("state"))
        .args(["audit", "verify"])
        .output()
        .expect("audit verify");
    assert!(verified.status.success(), "the audit chain does not verify: {}", String::from_utf8_lossy(&verified.stdout));

    let mut latencies: Vec<u64> = reports.iter().flat_map(|report| report.latencies_us.iter().copied()).collect();
    latencies.sort_unstable();
    let edits: usize = reports.iter().map(|report| report.acknowledged.len()).sum();
    format!(
        "| {} | {clients} | {} | {edits} | {} | {:.0} | {:.0} | {:.0} |",
        if shared { "shared" } else { "separate" },
        latencies.len(),
        held.len(),
        latencies.len() as f64 / seconds,
        load::quantile(&latencies, 0.5) as f64,
        load::quantile(&latencies, 0.99) as f64,
    )
}

fn main() {
    let measure = std::env::args().any(|argument| argument == "--bench");
    let (counts, operations): (&[usize], usize) = if measure { (&[1, 8, 64], 250) } else { (&[1, 4], 20) };
    let mut stdout = std::io::stdout().lock();
    use std::io::Write as _;
    let _ =
        writeln!(stdout, "| workspaces | clients | calls | edits acknowledged (all on disk) | lock grants | calls/s | p50 µs | p99 µs |");
    let _ = writeln!(stdout, "|---|---|---|---|---|---|---|---|");
    for shared in [false, true] {
        for &clients in counts {
            let _ = writeln!(stdout, "{}", run(clients, shared, operations));
        }
    }
}

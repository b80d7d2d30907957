//! What keeping the session in PostgreSQL costs a `toolcell serve` call, in one run: p50 of
//! `read_file` and of `edit_file` over Streamable HTTP, with the session (read versions, undo
//! history, the MCP session; with the store, locks and the audit trail too) in a private
//! PostgreSQL cluster on a Unix socket, against the file-backed default; their ratios.
//!
//! `cargo bench -p toolcell --bench shared_sessions` measures (release build); `cargo test`
//! runs it small as a smoke test. Without PostgreSQL it says so and stops, unless
//! `TOOLCELL_REQUIRE_POSTGRES` is set.

#[path = "../tests/load/mod.rs"]
#[expect(dead_code, reason = "the load benchmark's helpers beyond the client are not used here")]
mod load;

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::json;

/// `toolcell serve` of `root/service.toml` with its own state directory `state`, on `store`
/// if given; the process and its URL.
fn serve(root: &Path, state: &str, store: Option<&str>) -> (load::Server, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command.arg("--cache-dir").arg(root.join("cache")).arg("--state-dir").arg(root.join(state));
    if let Some(url) = store {
        command.args(["--store", url]);
    }
    load::serve_with(command, &root.join("service.toml"))
}

/// p50 of `read_file` and of `edit_file` (µs) in one session of the service at `url`.
fn measure(url: &str, rounds: usize) -> (u64, u64) {
    let mut client = load::Client::connect(url, "token-0").expect("connect");
    let (mut reads, mut edits) = (Vec::new(), Vec::new());
    // An even number of edits: the file is as it was for the next mode.
    for round in 0..rounds + 6 {
        let started = Instant::now();
        let read = client.call("read_file", json!({"path": "page.txt"})).expect("read");
        let read_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        assert_ne!(read["isError"], json!(true), "{read}");
        let (old, new) = if round % 2 == 0 { ("alpha", "beta") } else { ("beta", "alpha") };
        let started = Instant::now();
        let edit = client.call("edit_file", json!({"path": "page.txt", "old_string": old, "new_string": new})).expect("edit");
        let edit_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        assert_ne!(edit["isError"], json!(true), "round {round}, {old} to {new}: {edit}");
        // The first rounds warm the host up (components, connections).
        if round >= 6 {
            reads.push(read_us);
            edits.push(edit_us);
        }
    }
    let _ = client.end();
    (p50(reads), p50(edits))
}

fn p50(mut samples: Vec<u64>) -> u64 {
    samples.sort_unstable();
    load::quantile(&samples, 0.5)
}

fn main() {
    let rounds = if std::env::args().any(|argument| argument == "--bench") { 300 } else { 10 };
    assert!(rounds % 2 == 0);
    let Some(cluster) = toolcell_tests::postgres::Cluster::start() else {
        return;
    };
    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path();
    std::fs::create_dir_all(root.join("app")).expect("workspace");
    std::fs::write(root.join("app/page.txt"), format!("alpha\n{}", "line of text\n".repeat(300))).expect("file");
    let hash = toolcell_mcp::config::hex(&toolcell_mcp::config::token_hash("token-0"));
    let config = format!(
        "[workspaces]\napp = \"app\"\n\n[[principals]]\nname = \"p0\"\ntoken_sha256 = \"{hash}\"\nworkspace = \"app\"\nrole = \"impl\"\n"
    );
    std::fs::write(root.join("service.toml"), config).expect("config");
    let migrated =
        Command::new(env!("CARGO_BIN_EXE_toolcell")).args(["--store", &cluster.url, "store", "migrate"]).output().expect("migrate");
    assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));

    let (server, url) = serve(root, "state-files", None);
    let (file_read, file_edit) = measure(&url, rounds);
    drop(server);
    let (server, url) = serve(root, "state-shared", Some(&cluster.url));
    let (shared_read, shared_edit) = measure(&url, rounds);
    drop(server);

    let ratio = |shared: u64, file: u64| shared as f64 / file.max(1) as f64;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "| call ({rounds} rounds, p50) | file-backed | PostgreSQL | PostgreSQL ÷ file |");
    let _ = writeln!(stdout, "|---|---|---|---|");
    let _ = writeln!(stdout, "| read_file over HTTP | {file_read} µs | {shared_read} µs | {:.2} |", ratio(shared_read, file_read));
    let _ = writeln!(stdout, "| edit_file over HTTP | {file_edit} µs | {shared_edit} µs | {:.2} |", ratio(shared_edit, file_edit));
}

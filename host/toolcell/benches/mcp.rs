//! The MCP round trip of `read_file` on a small file: a client in this process sends
//! `tools/call` over stdio to a `toolcell mcp` child and waits for the answer, beside the same
//! call made in-process through the embedding API, in one run.
//!
//! `cargo bench -p toolcell --bench mcp` prints p50/p99; under `cargo test` it runs a few
//! iterations as a smoke test.

use std::io::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use toolcell_mcp::client::StdioClient;

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort_unstable();
    (samples[samples.len() / 2], samples[(samples.len() * 99 / 100).min(samples.len() - 1)])
}

fn main() {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let iterations = if benchmarking { 3_000 } else { 20 };
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("workspace");
    std::fs::create_dir(&workspace).expect("create workspace");
    std::fs::write(workspace.join("notes.txt"), "one\ntwo\nthree\n").expect("write file");
    let cache = temp.path().join("cache");
    let state = temp.path().join("state");

    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--state-dir")
        .arg(&state)
        .args(["mcp", "--role", "impl", "--workspace"])
        .arg(&workspace)
        .stderr(std::process::Stdio::null());
    let (mut client, _) = StdioClient::spawn(&mut command).expect("start toolcell mcp");
    let arguments = json!({ "path": "notes.txt" });
    let mut round_trip = || {
        let started = Instant::now();
        let result = client.call_tool("read_file", &arguments).expect("tools/call");
        assert_eq!(result["isError"], false, "{result}");
        started.elapsed()
    };
    for _ in 0..iterations / 10 + 1 {
        round_trip();
    }
    let over_mcp: Vec<Duration> = (0..iterations).map(|_| round_trip()).collect();
    client.close().expect("the server exits when stdin closes");

    let host = toolcell_host::HostBuilder::new(&workspace).cache_dir(&cache).state_dir(&state).build().expect("host builds");
    let session = host.session("impl", "bench").expect("session");
    let in_process = || {
        let started = Instant::now();
        let result = session.call("read_file", r#"{"path": "notes.txt"}"#).expect("call");
        assert!(result.output.is_ok());
        started.elapsed()
    };
    for _ in 0..iterations / 10 + 1 {
        in_process();
    }
    let direct: Vec<Duration> = (0..iterations).map(|_| in_process()).collect();

    let (mcp_p50, mcp_p99) = percentiles(over_mcp);
    let (direct_p50, direct_p99) = percentiles(direct);
    let micros = |duration: Duration| duration.as_secs_f64() * 1e6;
    let mut out = std::io::stderr().lock();
    let _ = writeln!(out, "read_file on a 14-byte file, {iterations} calls each, default policy and audit trail");
    let _ = writeln!(out, "{:<40} {:>10} {:>10}", "", "p50", "p99");
    let _ = writeln!(out, "{:<40} {:>8.1}µs {:>8.1}µs", "MCP tools/call over stdio (round trip)", micros(mcp_p50), micros(mcp_p99));
    let _ = writeln!(out, "{:<40} {:>8.1}µs {:>8.1}µs", "in-process Session::call", micros(direct_p50), micros(direct_p99));
    let _ = writeln!(out, "MCP / in-process at p50: {:.2}x", micros(mcp_p50) / micros(direct_p50).max(0.001));
}

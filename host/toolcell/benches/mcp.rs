//! MCP round trips side by side with the MCP filesystem server (`@modelcontextprotocol/server-
//! filesystem` from npm, pinned by `.ci/peer-mcp-server`), interleaved in one run, and with the
//! same calls made in-process through the embedding API:
//!
//! - `read_file` of a 4 KiB file, `write_file` of 4 KiB, `edit_file` of one line of a 4 KiB
//!   file, and a listing of a directory of 100 files (`list_files` against the peer's
//!   `list_directory`), over stdio, p50 and p99, for toolcell with `[writes] durability = "full"` (the
//!   default) and `"atomic"`, and for the peer (which never syncs);
//! - first start: a fresh process answering `initialize` and then its first `read_file`, with
//!   an empty compile cache and with a warm one, against the peer's start;
//! - peak RSS (`VmHWM`) of each server after those calls (6,000 and more), toolcell's against
//!   the peer's;
//! - throughput of one server process: `read_file` calls per second with 1, 2 and 4 requests
//!   in flight on one stdio connection (a client that sends the next as each is answered),
//!   toolcell's against the peer's.
//!
//! - a floor under all of these: the same round trips to a stdio server that parses each
//!   request and answers it at once with a canned 4 KiB text (this bench's own binary, started
//!   with `--stdio-floor`), what the transport and the client cost with no work behind them.
//!
//! The peer is found through `TOOLCELL_PEER_MCP_SERVER` (its `dist/index.js`); without it the
//! peer's rows are left out, unless `TOOLCELL_REQUIRE_PEER=1` (set by `.ci/run` and
//! `.ci/bench`), which makes a missing peer an error. `cargo bench -p toolcell --bench mcp`
//! prints the table; under `cargo test` it runs a few iterations as a smoke test.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcell_mcp::client::StdioClient;

/// The files in the directory listed.
const LISTED: usize = 100;

/// A 4 KiB text file of 64 lines.
fn four_kib() -> String {
    (0..64).map(|line| format!("line {line:02} of the file, padded to sixty-four bytes: {}\n", "x".repeat(5))).collect()
}

/// The edit of round `round`: line 10 flips between two spellings, so every edit finds its text.
fn flip(round: usize) -> (&'static str, &'static str) {
    if round.is_multiple_of(2) { ("line 10 of", "LINE 10 of") } else { ("LINE 10 of", "line 10 of") }
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort_unstable();
    let micros = |duration: Duration| duration.as_secs_f64() * 1e6;
    (micros(samples[samples.len() / 2]), micros(samples[(samples.len() * 99 / 100).min(samples.len() - 1)]))
}

/// How a server under test is reached.
enum Via {
    Mcp(StdioClient),
    /// toolcell's embedding API, in this process.
    InProcess(toolcell_host::Session),
}

/// One server under test, and how its tools are called.
struct Server {
    name: &'static str,
    via: Via,
    /// The workspace as the server's paths name it.
    prefix: String,
    read_tool: &'static str,
    peer: bool,
}

impl Server {
    fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn call(&mut self, tool: &str, arguments: &Value) -> Duration {
        let started = Instant::now();
        match &mut self.via {
            Via::Mcp(client) => {
                let result = client.call_tool(tool, arguments).unwrap_or_else(|error| panic!("{}: {tool}: {error}", self.name));
                let elapsed = started.elapsed();
                assert_ne!(result["isError"], true, "{}: {tool}: {result}", self.name);
                elapsed
            }
            Via::InProcess(session) => {
                let result = session.call(tool, &arguments.to_string()).expect("call");
                let elapsed = started.elapsed();
                assert!(result.output.is_ok(), "{tool}: {:?}", result.output);
                elapsed
            }
        }
    }

    fn read(&mut self) -> Duration {
        let arguments = json!({ "path": self.path("read.txt") });
        self.call(self.read_tool, &arguments)
    }

    fn write(&mut self, round: usize) -> Duration {
        let content = format!("{round}\n{}", four_kib());
        let arguments = json!({ "path": self.path("write.txt"), "content": content });
        self.call("write_file", &arguments)
    }

    fn list(&mut self) -> Duration {
        let arguments = json!({ "path": self.path("list") });
        self.call(if self.peer { "list_directory" } else { "list_files" }, &arguments)
    }

    fn edit(&mut self, round: usize) -> Duration {
        let (old, new) = flip(round);
        let arguments = if self.peer {
            json!({ "path": self.path("edit.txt"), "edits": [{ "oldText": old, "newText": new }] })
        } else {
            json!({ "path": self.path("edit.txt"), "old_string": old, "new_string": new })
        };
        self.call("edit_file", &arguments)
    }
}

/// The peer's entry point, if installed.
fn peer_script() -> Option<PathBuf> {
    let required = std::env::var_os("TOOLCELL_REQUIRE_PEER").is_some_and(|value| value == "1");
    let found = std::env::var_os("TOOLCELL_PEER_MCP_SERVER").map(PathBuf::from).filter(|path| path.is_file());
    if found.is_none() {
        assert!(!required, "TOOLCELL_REQUIRE_PEER=1 but TOOLCELL_PEER_MCP_SERVER does not name the peer's dist/index.js");
        eprintln!("the MCP filesystem server is not installed (.ci/peer-mcp-server): its rows are left out");
    }
    found
}

fn workspace(root: &Path, name: &str) -> PathBuf {
    let workspace = root.join(name);
    std::fs::create_dir(&workspace).expect("create workspace");
    for file in ["read.txt", "write.txt", "edit.txt"] {
        std::fs::write(workspace.join(file), four_kib()).expect("write file");
    }
    std::fs::create_dir(workspace.join("list")).expect("create the listed directory");
    for number in 0..LISTED {
        std::fs::write(workspace.join(format!("list/file-{number:03}.txt")), "x\n").expect("write file");
    }
    workspace
}

fn toolcell_command(cache: &Path, state: &Path, workspace: &Path, policy: Option<&Path>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command.arg("--cache-dir").arg(cache).arg("--state-dir").arg(state);
    if let Some(policy) = policy {
        command.arg("--policy").arg(policy);
    }
    command.args(["mcp", "--role", "impl", "--workspace"]).arg(workspace).stderr(Stdio::null());
    command
}

fn peer_command(script: &Path, workspace: &Path) -> Command {
    let mut command = Command::new("node");
    command.arg(script).arg(workspace).stderr(Stdio::null());
    command
}

/// Time to the `initialize` answer and to the first `read_file` result of a fresh process.
fn first_start(command: &mut Command, read_tool: &str, path: &str) -> (Duration, Duration) {
    let started = Instant::now();
    let (mut client, _) = StdioClient::spawn(command).expect("start the server");
    let initialized = started.elapsed();
    let result = client.call_tool(read_tool, &json!({ "path": path })).expect("first read");
    let first = started.elapsed();
    assert_ne!(result["isError"], true, "{result}");
    client.close().expect("the server exits when stdin closes");
    (initialized, first)
}

/// The argument that makes this binary the floor server instead of the bench.
const FLOOR_ARG: &str = "--stdio-floor";

/// The floor server: one thread that reads each request line from stdin, parses it, and
/// answers it at once: `initialize` with a bare result, anything else with a 4 KiB text.
fn stdio_floor() {
    use std::io::BufRead as _;
    let text = four_kib();
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { return };
        let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(id) = message.get("id") else { continue };
        let result = if message["method"] == "initialize" {
            json!({ "protocolVersion": message["params"]["protocolVersion"], "capabilities": {}, "serverInfo": { "name": "floor", "version": "0" } })
        } else {
            json!({ "content": [{ "type": "text", "text": text }] })
        };
        let mut answer = json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string();
        answer.push('\n');
        if out.write_all(answer.as_bytes()).and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}

/// The name of the floor's row.
const FLOOR: &str = "stdio floor (no work)";

fn main() {
    if std::env::args().any(|arg| arg == FLOOR_ARG) {
        stdio_floor();
        return;
    }
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let iterations = if benchmarking { 2_000 } else { 10 };
    let starts = if benchmarking { 5 } else { 1 };
    let temp = tempfile::tempdir().expect("temporary directory");
    let peer = peer_script();
    let atomic_policy = temp.path().join("atomic.toml");
    let (_, default_policy) = toolcell_host::builtin_policy("default").expect("the shipped policy");
    assert!(default_policy.contains("durability = \"full\""), "the shipped policy states its durability");
    std::fs::write(&atomic_policy, default_policy.replace("durability = \"full\"", "durability = \"atomic\"")).expect("write policy");

    let cache = temp.path().join("cache");
    let mut servers = Vec::new();
    for (name, policy) in [("toolcell (full)", None), ("toolcell (atomic)", Some(atomic_policy.as_path()))] {
        let workspace = workspace(temp.path(), &name.replace([' ', '(', ')'], ""));
        let state = temp.path().join(format!("state-{}", servers.len()));
        let (client, _) = StdioClient::spawn(&mut toolcell_command(&cache, &state, &workspace, policy)).expect("start toolcell mcp");
        servers.push(Server { name, via: Via::Mcp(client), prefix: String::new(), read_tool: "read_file", peer: false });
    }
    if let Some(script) = &peer {
        let workspace = workspace(temp.path(), "peer");
        let (client, _) = StdioClient::spawn(&mut peer_command(script, &workspace)).expect("start the MCP filesystem server");
        servers.push(Server {
            name: "MCP filesystem server",
            via: Via::Mcp(client),
            prefix: format!("{}/", workspace.display()),
            read_tool: "read_text_file",
            peer: true,
        });
    }
    let current = std::env::current_exe().expect("this bench's binary");
    let (client, _) = StdioClient::spawn(Command::new(current).arg(FLOOR_ARG)).expect("start the floor server");
    servers.push(Server { name: FLOOR, via: Via::Mcp(client), prefix: String::new(), read_tool: "read_file", peer: false });
    // The same calls in-process, default durability.
    let host = toolcell_host::HostBuilder::new(workspace(temp.path(), "in-process"))
        .cache_dir(&cache)
        .state_dir(temp.path().join("state-in-process"))
        .build()
        .expect("host builds");
    let session = host.session("impl", "bench").expect("session");
    servers.push(Server {
        name: "in-process (full)",
        via: Via::InProcess(session),
        prefix: String::new(),
        read_tool: "read_file",
        peer: false,
    });

    // Interleaved: each round calls every server once per operation, so that the machine's
    // drift (and the disk traffic of the others' writes) touches all of them alike. toolcell's
    // sessions read the files they edit first.
    for server in &mut servers {
        for file in ["write.txt", "edit.txt"] {
            let arguments = json!({ "path": server.path(file) });
            server.call(server.read_tool, &arguments);
        }
    }
    let warmup = iterations / 10 + 1;
    let mut samples: Vec<[Vec<Duration>; 4]> = servers.iter().map(|_| Default::default()).collect();
    for round in 0..warmup + iterations {
        for (server, samples) in servers.iter_mut().zip(&mut samples) {
            let timings = [server.read(), server.write(round), server.edit(round), server.list()];
            if round >= warmup {
                for (kind, timing) in timings.into_iter().enumerate() {
                    samples[kind].push(timing);
                }
            }
        }
    }
    let names: Vec<&str> = servers.iter().map(|server| server.name).collect();
    // Each server's peak resident memory after all those calls.
    let peaks: Vec<(&str, u64)> = servers
        .iter()
        .filter_map(|server| match &server.via {
            Via::Mcp(client) if server.name != FLOOR => Some((server.name, peak_rss_kib(client.id())?)),
            Via::Mcp(_) => None,
            Via::InProcess(_) => None,
        })
        .collect();
    for server in servers {
        if let Via::Mcp(client) = server.via {
            client.close().expect("the server exits when stdin closes");
        }
    }
    drop(host);

    // First start: a fresh process each time, the empty cache a new directory each time.
    let mut start_rows: Vec<(&str, Vec<(Duration, Duration)>)> = Vec::new();
    let start_workspace = workspace(temp.path(), "start");
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for run in 0..starts {
        let empty = temp.path().join(format!("cold-cache-{run}"));
        let state = temp.path().join(format!("cold-state-{run}"));
        cold.push(first_start(&mut toolcell_command(&empty, &state, &start_workspace, None), "read_file", "read.txt"));
        warm.push(first_start(&mut toolcell_command(&cache, &state, &start_workspace, None), "read_file", "read.txt"));
    }
    start_rows.push(("toolcell, empty compile cache", cold));
    start_rows.push(("toolcell, warm compile cache", warm));
    if let Some(script) = &peer {
        let path = format!("{}/read.txt", start_workspace.display());
        let runs = (0..starts).map(|_| first_start(&mut peer_command(script, &start_workspace), "read_text_file", &path)).collect();
        start_rows.push(("MCP filesystem server", runs));
    }

    // Throughput: one fresh process of each, `read_file` with N requests in flight.
    let throughput_calls = if benchmarking { 3_000 } else { 20 };
    let mut throughput_rows: Vec<(usize, f64, Option<f64>)> = Vec::new();
    for in_flight in [1, 2, 4] {
        let state = temp.path().join(format!("throughput-state-{in_flight}"));
        let ours =
            throughput(&mut toolcell_command(&cache, &state, &start_workspace, None), "read_file", "read.txt", in_flight, throughput_calls);
        let theirs = peer.as_ref().map(|script| {
            let path = format!("{}/read.txt", start_workspace.display());
            throughput(&mut peer_command(script, &start_workspace), "read_text_file", &path, in_flight, throughput_calls)
        });
        throughput_rows.push((in_flight, ours, theirs));
    }

    let mut out = std::io::stderr().lock();
    let _ = writeln!(out, "MCP over stdio, 4 KiB files, {iterations} interleaved rounds; p50 / p99 in µs");
    let _ = writeln!(out, "{:<24} {:>17} {:>17} {:>17} {:>17}", "", "read_file", "write_file", "edit_file", "list 100");
    let mut p50s = Vec::new();
    for (name, samples) in names.iter().zip(samples) {
        let row: Vec<(f64, f64)> = samples.into_iter().map(percentiles).collect();
        let _ = writeln!(
            out,
            "{name:<24} {:>8.0} / {:>6.0} {:>8.0} / {:>6.0} {:>8.0} / {:>6.0} {:>8.0} / {:>6.0}",
            row[0].0, row[0].1, row[1].0, row[1].1, row[2].0, row[2].1, row[3].0, row[3].1
        );
        p50s.push(row.iter().map(|(p50, _)| *p50).collect::<Vec<f64>>());
    }
    let _ = out.flush();
    drop(out);
    report_ratios(&names, &p50s, &start_rows);
    report_peaks(&peaks, 4 * (warmup + iterations) + 2);
    let mut out = std::io::stderr().lock();
    let _ = writeln!(out, "throughput of one process, read_file calls/s ({throughput_calls} calls)");
    for (in_flight, ours, theirs) in throughput_rows {
        let peer = theirs
            .map_or_else(String::new, |theirs| format!("   MCP filesystem server {theirs:>7.0}   toolcell / peer {:.2}x", ours / theirs));
        let _ = writeln!(out, "{in_flight} in flight: toolcell {ours:>7.0}{peer}");
    }
}

/// Calls per second of a fresh server process answering `calls` calls of `tool` on `path`,
/// `in_flight` at a time on its one stdio connection (the client sends the next request as
/// each answer comes).
fn throughput(command: &mut Command, tool: &str, path: &str, in_flight: usize, calls: usize) -> f64 {
    use std::io::BufRead as _;
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start the server");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let mut send = |message: Value| {
        let mut text = message.to_string();
        text.push('\n');
        stdin.write_all(text.as_bytes()).expect("write a request");
    };
    let mut answer = |line: &mut String| {
        line.clear();
        stdout.read_line(line).expect("read an answer");
        let message: Value = serde_json::from_str(line).expect("an answer is JSON");
        assert!(message.get("result").is_some_and(|result| result["isError"] != true), "{message}");
    };
    send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}));
    answer(&mut line);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let request =
        |id: usize| json!({"jsonrpc": "2.0", "id": id + 1, "method": "tools/call", "params": {"name": tool, "arguments": {"path": path}}});
    // A warm-up call, then the measured ones.
    send(request(calls));
    answer(&mut line);
    let started = Instant::now();
    let mut sent = 0;
    while sent < in_flight.min(calls) {
        send(request(sent));
        sent += 1;
    }
    for _ in 0..calls {
        answer(&mut line);
        if sent < calls {
            send(request(sent));
            sent += 1;
        }
    }
    let rate = calls as f64 / started.elapsed().as_secs_f64();
    drop(stdin);
    let _ = child.wait();
    rate
}

/// The peak resident set of process `pid` so far, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| line.strip_prefix("VmHWM:")).and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Peak RSS of each server after `calls` calls, and toolcell's against the peer's.
fn report_peaks(peaks: &[(&str, u64)], calls: usize) {
    let mut out = std::io::stderr().lock();
    let _ = writeln!(out, "peak RSS after {calls} calls");
    let peer = peaks.iter().find(|(name, _)| *name == "MCP filesystem server").map(|(_, kib)| *kib);
    for (name, kib) in peaks {
        let ratio = match peer {
            Some(peer) if !name.starts_with("MCP") => {
                format!(" ({:.2}x the MCP filesystem server's; goal <= 0.50x)", *kib as f64 / peer as f64)
            }
            _ => String::new(),
        };
        let _ = writeln!(out, "{name:<24} {:>8.1} MiB{ratio}", *kib as f64 / 1024.0);
    }
}

/// Ratios at p50 against the peer and against the in-process call (the last row of `p50s`).
fn report_ratios(names: &[&str], p50s: &[Vec<f64>], start_rows: &[(&str, Vec<(Duration, Duration)>)]) {
    let mut out = std::io::stderr().lock();
    let in_process = &p50s[p50s.len() - 1];
    let peer = names.iter().position(|name| *name == "MCP filesystem server").map(|index| &p50s[index]);
    for (index, name) in names.iter().enumerate().filter(|(_, name)| name.starts_with("toolcell")) {
        if let Some(peer) = peer {
            let ratios: Vec<String> = (0..4).map(|kind| format!("{:.2}x", p50s[index][kind] / peer[kind])).collect();
            let _ = writeln!(
                out,
                "{name} / MCP filesystem server at p50: read {}, write {}, edit {}, list {}",
                ratios[0], ratios[1], ratios[2], ratios[3]
            );
        }
        let ratios: Vec<String> = (0..4).map(|kind| format!("{:.2}x", p50s[index][kind] / in_process[kind])).collect();
        let _ = writeln!(
            out,
            "{name} over MCP / in-process at p50: read {}, write {}, edit {}, list {}",
            ratios[0], ratios[1], ratios[2], ratios[3]
        );
    }
    let _ = writeln!(out, "first start, median of runs: initialize answered / first read_file result");
    for (name, runs) in start_rows {
        let mut initialized: Vec<Duration> = runs.iter().map(|(initialized, _)| *initialized).collect();
        let mut first: Vec<Duration> = runs.iter().map(|(_, first)| *first).collect();
        initialized.sort_unstable();
        first.sort_unstable();
        let millis = |durations: &[Duration]| durations[durations.len() / 2].as_secs_f64() * 1e3;
        let _ = writeln!(out, "{name:<32} {:>8.1} ms {:>8.1} ms", millis(&initialized), millis(&first));
    }
}

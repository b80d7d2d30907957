//! What a `toolcell serve` session costs, in one run:
//! - memory: the server's resident set (`VmRSS`) grows by this much per open MCP session that
//!   has made one `read_file` call (N sessions opened and kept; KiB per session);
//! - the read round trip: `read_file` of a 4 KiB file over Streamable HTTP against the same
//!   call over stdio (`toolcell mcp`), one of each in turn, p50 of each and their ratio.
//!
//! `cargo bench -p toolcell --bench sessions` measures (release build); `cargo test` runs it
//! small as a smoke test.

#[path = "../tests/load/mod.rs"]
#[expect(dead_code, reason = "the load benchmark's helpers beyond the client are not used here")]
mod load;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};

fn toolcell(root: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command.arg("--cache-dir").arg(root.join("cache")).arg("--state-dir").arg(root.join("state"));
    command
}

/// `toolcell serve` on a free port with `principals` principals (tokens `token-N`) on `app`.
fn serve(root: &Path, principals: usize) -> (load::Server, String) {
    let mut config = String::from("max_sessions_per_principal = 256\n\n[workspaces]\napp = \"app\"\n");
    for principal in 0..principals {
        let hash = toolcell_mcp::config::hex(&toolcell_mcp::config::token_hash(&format!("token-{principal}")));
        config.push_str(&format!(
            "\n[[principals]]\nname = \"p{principal}\"\ntoken_sha256 = \"{hash}\"\nworkspace = \"app\"\nrole = \"impl\"\n"
        ));
    }
    std::fs::write(root.join("service.toml"), config).expect("config");
    load::serve(root, &root.join("service.toml"))
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// A `toolcell mcp` client over stdio.
struct StdioClient {
    _server: load::Server,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    next_id: u64,
}

impl StdioClient {
    fn start(root: &Path) -> Self {
        let mut child = toolcell(root)
            .args(["mcp", "--workspace"])
            .arg(root.join("app"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start toolcell mcp");
        let input = child.stdin.take().expect("stdin");
        let output = BufReader::new(child.stdout.take().expect("stdout"));
        let mut client = StdioClient { _server: load::Server(child), input, output, next_id: 0 };
        client.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
        );
        writeln!(client.input, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("write");
        client
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        // One write per message, as clients send them (`writeln!` on the unbuffered pipe would
        // send each piece of the JSON text as a write of its own).
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string() + "\n";
        self.input.write_all(line.as_bytes()).expect("write");
        loop {
            let mut line = String::new();
            assert!(self.output.read_line(&mut line).expect("read") > 0, "the stdio server closed");
            let message: Value = serde_json::from_str(&line).expect("JSON-RPC");
            if message["id"] == id {
                return message;
            }
        }
    }
}

fn p50(mut samples: Vec<u64>) -> u64 {
    samples.sort_unstable();
    load::quantile(&samples, 0.5)
}

fn main() {
    let measure = std::env::args().any(|argument| argument == "--bench");
    let (sessions, reads): (usize, usize) = if measure { (200, 500) } else { (8, 20) };
    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path();
    std::fs::create_dir_all(root.join("app")).expect("workspace");
    std::fs::write(
        root.join("app/page.txt"),
        "x".repeat(63).repeat(64).lines().collect::<Vec<_>>().join("\n") + &"line of text\n".repeat(300),
    )
    .expect("file");
    let read = json!({"path": "page.txt"});

    // Memory per open session.
    // At most 256 sessions per principal (the configuration's bound).
    let principals = sessions.div_ceil(256);
    let (server, url) = serve(root, principals);
    let pid = server.0.id();
    let mut warm = load::Client::connect(&url, "token-0").expect("connect");
    for _ in 0..5 {
        warm.call("read_file", read.clone()).expect("read");
    }
    let before = rss_kib(pid);
    let mut open = Vec::new();
    for session in 0..sessions {
        let mut client = load::Client::connect(&url, &format!("token-{}", session % principals)).expect("connect");
        let result = client.call("read_file", read.clone()).expect("read");
        assert_ne!(result["isError"], json!(true), "{result}");
        open.push(client);
    }
    let after = rss_kib(pid);
    let per_session = after.saturating_sub(before) as f64 / sessions as f64;

    // The read round trip, HTTP against stdio: one of each in turn, so that both see the same
    // machine (a load that comes and goes shifts both alike, not the ratio).
    drop(open);
    let mut stdio = StdioClient::start(root);
    for _ in 0..5 {
        stdio.request("tools/call", json!({"name": "read_file", "arguments": read}));
    }
    let (mut http, mut local) = (Vec::new(), Vec::new());
    for _ in 0..reads {
        let started = Instant::now();
        warm.call("read_file", read.clone()).expect("read");
        http.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        let started = Instant::now();
        let answer = stdio.request("tools/call", json!({"name": "read_file", "arguments": read}));
        assert!(answer.get("result").is_some(), "{answer}");
        local.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    drop(server);
    let (http, local) = (p50(http), p50(local));
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "| measure | value | goal |");
    let _ = writeln!(stdout, "|---|---|---|");
    let _ =
        writeln!(stdout, "| resident memory per open session ({sessions} sessions, one read each) | {per_session:.0} KiB | ≤ 100 KiB |");
    let _ = writeln!(stdout, "| read_file 4 KiB p50, HTTP | {http} µs | |");
    let _ = writeln!(stdout, "| read_file 4 KiB p50, stdio | {local} µs | |");
    let _ = writeln!(stdout, "| HTTP ÷ stdio | {:.2} | ≤ 1.5 |", http as f64 / local.max(1) as f64);
}

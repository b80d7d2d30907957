//! A minimal MCP client over Streamable HTTP (ureq, blocking) and a load generator of many of
//! them, for the service's load benchmark and its fault tests.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A server process, killed when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `toolcell serve` on a free port of 127.0.0.1 with `config`, its cache and state
/// directories in `root`; the process and its URL (`http://127.0.0.1:PORT/`).
pub fn serve(root: &Path, config: &Path) -> (Server, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command.arg("--cache-dir").arg(root.join("cache")).arg("--state-dir").arg(root.join("state"));
    serve_with(command, config)
}

/// Start `command` (`toolcell` with its global options) as `serve` on a free port of
/// 127.0.0.1 with `config`; the process and its URL (`http://127.0.0.1:PORT/`).
pub fn serve_with(mut command: Command, config: &Path) -> (Server, String) {
    let mut child = command
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolcell serve");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("read stderr");
    let address =
        line.split("http://").nth(1).and_then(|rest| rest.split('/').next()).unwrap_or_else(|| panic!("no address in {line:?}")).to_owned();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (Server(child), format!("http://{address}/"))
}

/// One MCP session over HTTP.
pub struct Client {
    agent: ureq::Agent,
    url: String,
    token: String,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    /// Open a session: `initialize`, then `notifications/initialized`.
    pub fn connect(url: &str, token: &str) -> Result<Client, String> {
        // Each step of a request is bounded, but not the whole: a global timeout also bounds
        // the address lookup, which ureq then runs on a thread of its own for every request.
        let step = Some(Duration::from_secs(60));
        let agent = ureq::Agent::config_builder()
            .timeout_connect(step)
            .timeout_send_request(step)
            .timeout_send_body(step)
            .timeout_recv_response(step)
            .timeout_recv_body(step)
            .build()
            .new_agent();
        let mut client = Client { agent, url: url.to_owned(), token: token.to_owned(), session: None, next_id: 0 };
        let initialized = client.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "toolcell-load", "version": "1"}}),
        )?;
        if initialized.get("result").is_none() {
            return Err(format!("initialize failed: {initialized}"));
        }
        client.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(client)
    }

    /// Call `tool`: its result (`isError` and all), or why the request failed.
    pub fn call(&mut self, tool: &str, arguments: Value) -> Result<Value, String> {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments}))?;
        answer.get("result").cloned().ok_or_else(|| format!("{tool}: {answer}"))
    }

    /// End the session (`DELETE`).
    pub fn end(self) -> Result<(), String> {
        let mut request = self.agent.delete(&self.url).header("Authorization", &format!("Bearer {}", self.token));
        if let Some(session) = &self.session {
            request = request.header("Mcp-Session-Id", session);
        }
        request.call().map(drop).map_err(|error| error.to_string())
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let text = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        // A JSON body, or an event stream whose `data:` lines carry the messages.
        let messages: Vec<Value> = if text.trim_start().starts_with('{') {
            vec![serde_json::from_str(&text).map_err(|error| error.to_string())?]
        } else {
            text.lines().filter_map(|line| line.strip_prefix("data: ")).filter_map(|data| serde_json::from_str(data).ok()).collect()
        };
        messages.into_iter().find(|message| message["id"] == id).ok_or_else(|| format!("no answer to {method} in {text:?}"))
    }

    fn post(&mut self, body: &Value) -> Result<String, String> {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Authorization", &format!("Bearer {}", self.token))
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18");
        if let Some(session) = &self.session {
            request = request.header("Mcp-Session-Id", session);
        }
        let mut response = request.send_json(body).map_err(|error| error.to_string())?;
        if self.session.is_none()
            && let Some(session) = response.headers().get("mcp-session-id").and_then(|value| value.to_str().ok())
        {
            self.session = Some(session.to_owned());
        }
        response.body_mut().read_to_string().map_err(|error| error.to_string())
    }
}

/// What one client of a load run did.
#[derive(Debug, Default)]
pub struct ClientReport {
    /// Latency of every call, in microseconds.
    pub latencies_us: Vec<u64>,
    /// The lines its acknowledged edits added to its file.
    pub acknowledged: Vec<String>,
    /// The times it held the shared lock: from the grant's answer to the release's request.
    pub held: Vec<(Instant, Instant)>,
    /// Calls that failed at the protocol level, or returned an error they should not have.
    pub failures: Vec<String>,
}

/// Run one client: `operations` calls on `file` (4 reads to every edit; with `lock_every`,
/// every that many operations it also takes and releases an exclusive lock on `shared/**`).
pub fn run_client(url: &str, token: &str, file: &str, operations: usize, lock_every: Option<usize>) -> ClientReport {
    let mut report = ClientReport::default();
    let mut client = match Client::connect(url, token) {
        Ok(client) => client,
        Err(error) => {
            report.failures.push(format!("connect: {error}"));
            return report;
        }
    };
    let timed = |client: &mut Client, report: &mut ClientReport, tool: &str, arguments: Value| {
        let started = Instant::now();
        let result = client.call(tool, arguments);
        report.latencies_us.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        result
    };
    for index in 0..operations {
        if let Some(every) = lock_every
            && index % every == every - 1
        {
            match timed(&mut client, &mut report, "lock_files", json!({"paths": ["shared/**"], "ttl_seconds": 30})) {
                Ok(result) if result["isError"] == false => {
                    let granted = Instant::now();
                    // Hold it a moment, so that a second grant would overlap this one.
                    std::thread::sleep(Duration::from_millis(2));
                    let released = Instant::now();
                    report.held.push((granted, released));
                    if let Err(error) = timed(&mut client, &mut report, "unlock_files", json!({})) {
                        report.failures.push(format!("unlock: {error}"));
                    }
                }
                // Held by another client: a refusal, as it should be.
                Ok(_) => {}
                Err(error) => report.failures.push(format!("lock: {error}")),
            }
            continue;
        }
        if index % 5 == 4 {
            let line = format!("edit {index} of {file}");
            match timed(
                &mut client,
                &mut report,
                "edit_file",
                json!({"path": file, "old_string": "END\n", "new_string": format!("{line}\nEND\n")}),
            ) {
                Ok(result) if result["isError"] == false => report.acknowledged.push(line),
                Ok(result) => report.failures.push(format!("edit refused: {result}")),
                Err(error) => report.failures.push(format!("edit: {error}")),
            }
        } else {
            match timed(&mut client, &mut report, "read_file", json!({"path": file})) {
                Ok(result) if result["isError"] == false => {}
                Ok(result) => report.failures.push(format!("read refused: {result}")),
                Err(error) => report.failures.push(format!("read: {error}")),
            }
        }
    }
    if let Err(error) = client.end() {
        report.failures.push(format!("end: {error}"));
    }
    report
}

/// The `q` quantile (0..=1) of sorted `values`.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Whether any two of the intervals overlap.
pub fn overlapping(intervals: &[(Instant, Instant)]) -> bool {
    let mut sorted = intervals.to_vec();
    sorted.sort();
    sorted.windows(2).any(|pair| pair[1].0 < pair[0].1)
}

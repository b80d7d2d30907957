//! `toolcell mcp` over stdio, message by message: a plain `tools/call` of an initialized
//! client is answered without rmcp's service loop, and must be answered exactly as rmcp
//! answers it; everything else (a call with `_meta`, every call once the client asked for log
//! messages, anything before the handshake) goes through rmcp.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// `toolcell mcp` on `root`'s workspace, its stdin and stdout piped.
fn spawn(root: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .arg("--cache-dir")
        .arg(toolcell_tests::shared_cache_dir())
        .arg("--state-dir")
        .arg(root.join("state"))
        .args(extra)
        .args(["mcp", "--role", "impl", "--workspace"])
        .arg(root.join("workspace"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start toolcell mcp")
}

/// A client that writes and reads the protocol's lines itself.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
}

impl Raw {
    fn start(root: &Path, extra: &[&str]) -> Raw {
        let mut child = spawn(root, extra);
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value = serde_json::from_str(&line).unwrap_or_else(|error| panic!("a line that is not JSON ({error}): {line}"));
                if sender.send(value).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Raw { child, stdin, lines }
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{message}").expect("write to toolcell mcp");
    }

    /// Send `message` behind a UTF-8 byte-order mark (which JSON readers may skip, and rmcp does).
    fn send_with_bom(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "\u{feff}{message}").expect("write to toolcell mcp");
    }

    fn next(&self) -> Value {
        self.lines.recv_timeout(Duration::from_secs(60)).expect("a message from toolcell mcp within a minute")
    }

    /// The answer to request `id`, with the messages before it.
    fn answer(&self, id: &Value) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let message = self.next();
            if message.get("id") == Some(id) && message.get("method").is_none() {
                return (message, before);
            }
            before.push(message);
        }
    }

    fn handshake(&mut self) {
        self.send(&initialize());
        let (answer, _) = self.answer(&json!(0));
        assert_eq!(answer["result"]["protocolVersion"], "2025-06-18", "{answer}");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call(&mut self, id: u64, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
        self.answer(&json!(id)).0
    }
}

/// The client's `initialize` (id 0).
fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fixture(root: &Path) {
    let workspace = root.join("workspace");
    std::fs::create_dir_all(workspace.join("src")).expect("workspace");
    std::fs::write(workspace.join("src/main.rs"), "fn main() {}\n").expect("write");
    std::fs::write(workspace.join(".env"), "SECRET=1\n").expect("write");
}

/// `message` with its id and the call ids in it (one per call) taken out.
fn without_ids(message: &Value) -> Value {
    let mut message = message.clone();
    message["id"] = Value::Null;
    if let Some(meta) = message["result"]["_meta"].as_object_mut() {
        meta.remove("toolcell/call_id");
    }
    if let Some(text) = message["result"]["content"][0]["text"].as_str().map(str::to_owned) {
        // A tool error's text names its call id.
        let words: Vec<String> =
            text.split(' ').map(|word| if word.starts_with("`c-") { "`CALL`".to_owned() } else { word.to_owned() }).collect();
        message["result"]["content"][0]["text"] = json!(words.join(" "));
    }
    message
}

#[test]
fn a_plain_call_is_answered_as_rmcp_answers_the_same_call_with_meta() {
    let temp = tempfile::tempdir().expect("temporary directory");
    fixture(temp.path());
    let mut client = Raw::start(temp.path(), &[]);
    client.handshake();
    let calls = [
        json!({"name": "read_file", "arguments": {"path": "src/main.rs"}}),
        json!({"name": "list_files", "arguments": {"path": "."}}),
        json!({"name": "read_file", "arguments": {"path": "missing.rs"}}),
        json!({"name": "read_file", "arguments": {"path": ".env"}}),
        json!({"name": "no_such_tool", "arguments": {}}),
        json!({"name": "read_file"}),
        json!({"name": "read_file", "arguments": null}),
    ];
    let mut id = 1;
    for params in calls {
        let plain = client.call(id, params.clone());
        let mut with_meta = params.clone();
        with_meta["_meta"] = json!({});
        let through_rmcp = client.call(id + 1, with_meta);
        id += 2;
        assert_eq!(plain["jsonrpc"], "2.0", "{plain}");
        assert!(plain["result"].is_object(), "{plain}");
        assert_eq!(without_ids(&plain), without_ids(&through_rmcp), "{params}");
    }
    // A request rmcp refuses is refused the same way: params it cannot read.
    let refused = client.call(100, json!({"name": 7}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}

/// A plugin's structured result reaches the client as the plugin wrote it, in the one line of its
/// answer, and is answered as rmcp answers it: pretty-printed JSON (its line breaks made
/// spaces), JSON that is not an object (moved into the text for a client before 2026-07-28),
/// text that is not JSON or nests too deep (the call fails, naming the tool's bug).
#[test]
fn a_plugins_structured_result_is_passed_on_in_one_line_as_rmcp_answers_it() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let mut client = spinning_client(temp.path());
    let structured = |text: &str| json!({"name": "misbehave", "arguments": {"action": "structured", "text": text}});
    let pretty = "{\r\n  \"entries\": [\n    {\"path\": \"a\\nb\", \"type\": \"file\"}\n  ],\n  \"truncated\": false\n}\n";
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let cases = [pretty, "[1, 2]", "{\"a\": 1,}", "{\"a\": \"unterminated}", deep.as_str()];
    let mut id = 1;
    for text in cases {
        let plain = client.call(id, structured(text));
        let mut with_meta = structured(text);
        with_meta["_meta"] = json!({});
        let through_rmcp = client.call(id + 1, with_meta);
        id += 2;
        assert_eq!(without_ids(&plain), without_ids(&through_rmcp), "{text:?}");
    }
    let answer = client.call(id, structured(pretty));
    assert_eq!(
        answer["result"]["structuredContent"],
        json!({"entries": [{"path": "a\nb", "type": "file"}], "truncated": false}),
        "{answer}"
    );
    let answer = client.call(id + 1, structured("[1, 2]"));
    assert_eq!(answer["result"]["content"][0]["text"], "[1,2]", "{answer}");
    assert!(answer["result"].get("structuredContent").is_none(), "{answer}");
    for (number, text) in ["{\"a\": 1,}", deep.as_str()].into_iter().enumerate() {
        let answer = client.call(id + 2 + number as u64, structured(text));
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        let message = answer["result"]["content"][0]["text"].as_str().expect("text");
        assert!(message.contains("returned structured output that is not JSON"), "{message}");
    }
    // The connection still reads and answers.
    let read = client.call(id + 10, json!({"name": "read_file", "arguments": {"path": "src/main.rs"}}));
    assert_eq!(read["result"]["structuredContent"]["path"], "src/main.rs", "{read}");
}

/// A request over the longest line read (16 MiB) is dropped, as rmcp drops it, but answered
/// with an error when its id comes before the cut: its client would otherwise wait for ever.
/// A line that is not JSON gets no answer (there is no id to give one; the official SDKs ignore
/// such lines too), and the server goes on.
#[test]
fn a_request_over_the_longest_line_is_answered_with_an_error_naming_the_limit() {
    let temp = tempfile::tempdir().expect("temporary directory");
    fixture(temp.path());
    let mut client = Raw::start(temp.path(), &[]);
    client.handshake();
    let content = "x".repeat(17 << 20);
    client.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "write_file", "arguments": {"path": "big.txt", "content": content}}}));
    let (answer, _) = client.answer(&json!(5));
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(message.contains("over 16 MiB") && message.contains("send less"), "{message}");
    assert!(!temp.path().join("workspace/big.txt").exists());
    let stdin = client.stdin.as_mut().expect("stdin open");
    stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":6\n\xff\xfe\n").expect("write");
    let read = client.call(7, json!({"name": "read_file", "arguments": {"path": "src/main.rs"}}));
    assert!(read["result"]["content"][0]["text"].as_str().is_some_and(|text| text.contains("fn main")), "{read}");
}

/// A request that is not JSON though its id can be read (a lone surrogate escape, a byte that
/// is not UTF-8 in a string, nesting past 128 levels) was dropped without an answer, and its
/// client waited for ever: it is answered with a parse error naming the id. A line without a
/// readable id is still dropped, and the connection goes on.
#[test]
fn a_request_that_is_not_json_but_has_an_id_is_answered_with_a_parse_error() {
    let temp = tempfile::tempdir().expect("temporary directory");
    fixture(temp.path());
    let mut client = Raw::start(temp.path(), &[]);
    client.handshake();
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let lines: [(u64, Vec<u8>); 3] = [
        (11, br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"\ud800"}}}"#.to_vec()),
        (12, b"{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\",\"arguments\":{\"path\":\"\xff\"}}}".to_vec()),
        (13, format!(r#"{{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":{deep}}}}}}}"#).into_bytes()),
    ];
    for (id, line) in &lines {
        let stdin = client.stdin.as_mut().expect("stdin open");
        stdin.write_all(line).and_then(|()| stdin.write_all(b"\n")).expect("write");
        let (answer, _) = client.answer(&json!(id));
        assert_eq!(answer["error"]["code"], -32700, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("not valid JSON") && message.contains("send UTF-8 JSON text"), "{message}");
    }
    let stdin = client.stdin.as_mut().expect("stdin open");
    stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"\xff\"}\n").expect("write");
    client.send(
        &json!({"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "src/main.rs"}}}),
    );
    let (read, before) = client.answer(&json!(14));
    assert!(before.is_empty(), "a line without an id was answered: {before:?}");
    assert!(read["result"]["content"][0]["text"].as_str().is_some_and(|text| text.contains("fn main")), "{read}");
}

#[test]
fn calls_sent_before_the_handshake_is_answered_are_answered_after_it() {
    let temp = tempfile::tempdir().expect("temporary directory");
    fixture(temp.path());
    let mut client = Raw::start(temp.path(), &[]);
    // All at once, without waiting for the answer to `initialize`.
    client.send(&initialize());
    client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for id in 1..=5 {
        client.send(&quick_read(id));
    }
    let first = client.next();
    assert_eq!(first["id"], 0, "the answer to initialize comes first: {first}");
    let mut answered = Vec::new();
    for _ in 1..=5 {
        let message = client.next();
        assert_eq!(message["result"]["isError"], false, "{message}");
        answered.push(message["id"].as_u64().expect("id"));
    }
    answered.sort_unstable();
    assert_eq!(answered, [1, 2, 3, 4, 5]);
}

#[test]
fn once_the_client_asks_for_log_messages_a_refusal_is_logged_before_the_answer() {
    let temp = tempfile::tempdir().expect("temporary directory");
    fixture(temp.path());
    let mut client = Raw::start(temp.path(), &[]);
    client.handshake();
    let denied = json!({"name": "read_file", "arguments": {"path": ".env"}});
    client.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": denied}));
    let (answer, before) = client.answer(&json!(1));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(before.is_empty(), "no log messages before the client asks for them: {before:?}");
    // As rmcp reads it: behind a byte-order mark, with a field it does not know.
    client
        .send_with_bom(&json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "debug", "requestId": true}}));
    client.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": denied}));
    let (answer, before) = client.answer(&json!(3));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let logged: Vec<&Value> = before.iter().filter(|message| message["method"] == "notifications/message").collect();
    assert!(
        logged.iter().any(|message| message["params"]["data"]["path"] == ".env" && message["params"]["level"] == "notice"),
        "the refusal was logged: {before:?}"
    );
}

/// A policy under which the `misbehave` plugin may write, with a minute of deadline.
fn spin_fixture(root: &Path) -> Vec<String> {
    fixture(root);
    let plugins = root.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins");
    std::fs::write(plugins.join("misbehave.wasm"), toolcell_tests::guest_program("misbehave")).expect("plugin");
    let policy = root.join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[limits]\ndeadline_ms = 60000\n[roles.impl]\ntools = [\"*\"]\n[[roles.impl.rules]]\naccess = [\"read\", \"list\", \"write\"]\npaths = [\"**\"]\neffect = \"allow\"\n",
    )
    .expect("policy");
    vec!["--policy".to_owned(), policy.display().to_string(), "--plugin-dir".to_owned(), plugins.display().to_string()]
}

fn spin(path: &str) -> Value {
    json!({"name": "misbehave", "arguments": {"action": "write_then_spin", "path": path, "text": "half done"}})
}

/// Give the spinning call time to reach the component and write (its write stays the call's own
/// until it ends, so it cannot be watched for), on a loaded machine too.
fn let_it_spin() {
    std::thread::sleep(Duration::from_secs(3));
}

/// Wait until the audit trail has the `misbehave` call's record, and return it.
fn spun_record(root: &Path) -> Value {
    spun_records(root, 1).remove(0)
}

/// Wait until the audit trail has `count` records of `misbehave` calls, and return them.
fn spun_records(root: &Path, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let records = misbehave_calls(root);
        if records.len() >= count {
            return records;
        }
        assert!(Instant::now() < deadline, "the spinning call did not end within 30 s of its minute");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The audit trail's records of the `misbehave` calls that have ended.
fn misbehave_calls(root: &Path) -> Vec<Value> {
    std::fs::read_to_string(root.join("state/audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["kind"] == "call" && record["tool"] == "misbehave")
        .collect()
}

/// A client of a server under [`spin_fixture`]'s policy, past the handshake.
fn spinning_client(root: &Path) -> Raw {
    let extra = spin_fixture(root);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut client = Raw::start(root, &extra);
    client.handshake();
    client
}

/// Request `id`: a quick read.
fn quick_read(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "src/main.rs"}}})
}

#[test]
fn plain_calls_the_client_cancels_are_stopped_rolled_back_and_not_answered() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let mut client = spinning_client(temp.path());
    // Three at once: each runs on a thread of its own, and the cancellations are read meanwhile.
    for (id, path) in [(1, "spun.txt"), (4, "spun-4.txt"), (5, "spun-5.txt")] {
        client.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": spin(path)}));
    }
    let_it_spin();
    // A cancellation sent as a request is no cancellation (rmcp answers it with an error).
    client.send(&json!({"jsonrpc": "2.0", "id": 90, "method": "notifications/cancelled", "params": {"requestId": 1}}));
    let (refused, _) = client.answer(&json!(90));
    assert!(refused.get("error").is_some(), "{refused}");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(misbehave_calls(temp.path()).len(), 0, "no call was stopped by it");
    for id in [1, 4] {
        client.send(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "changed my mind"}}),
        );
    }
    // As rmcp reads it: behind a byte-order mark.
    client.send_with_bom(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}));
    // The next call is answered, and nothing for the cancelled one comes before it.
    client.send(&quick_read(2));
    let (after, before) = client.answer(&json!(2));
    assert_eq!(after["result"]["isError"], false, "{after}");
    assert!(
        before.iter().all(|message| ![1, 4, 5].contains(&message["id"].as_u64().unwrap_or(0))),
        "no answer to a cancelled request: {before:?}"
    );
    // Each was stopped by the cancellation, well before its one-minute deadline, and its write
    // rolled back.
    for record in spun_records(temp.path(), 3) {
        assert!(record.to_string().contains("cancelled by the client"), "{record}");
    }
    for path in ["spun.txt", "spun-4.txt", "spun-5.txt"] {
        assert!(!temp.path().join("workspace").join(path).exists(), "the stopped call's write was rolled back");
    }
    client.send(&quick_read(3));
    let (after, _) = client.answer(&json!(3));
    assert_eq!(after["result"]["isError"], false, "{after}");
}

#[test]
fn closing_stdin_lets_a_quick_call_answer_and_stops_a_long_one() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let mut client = spinning_client(temp.path());
    client.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": spin("spun.txt")}));
    let spun = temp.path().join("workspace/spun.txt");
    let_it_spin();
    client.send(&quick_read(2));
    drop(client.stdin.take());
    // The quick call is answered; the spinning one is stopped after the drain and rolled back,
    // and then the server exits.
    let (answer, _) = client.answer(&json!(2));
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(status) = client.child.try_wait().expect("wait") {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "toolcell mcp did not exit after stdin closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!spun.exists(), "the stopped call's write was rolled back");
    let record = spun_record(temp.path());
    assert!(record.to_string().contains("cancelled by the client"), "{record}");
    while let Ok(message) = client.lines.try_recv() {
        assert_ne!(message["id"], 1, "no answer to the stopped call: {message}");
    }
}

#[test]
fn no_call_runs_when_the_handshake_fails() {
    let temp = tempfile::tempdir().expect("temporary directory");
    fixture(temp.path());
    let mut client = Raw::start(temp.path(), &[]);
    // An `initialize` rmcp cannot read, then calls as if it had been answered.
    client.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 7}}));
    client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let write = json!({"name": "write_file", "arguments": {"path": "made.txt", "content": "should not be\n"}});
    client.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": write}));
    drop(client.stdin.take());
    let status = client.child.wait().expect("wait");
    assert!(!status.success(), "a failed handshake is a failed run: {status}");
    while let Ok(message) = client.lines.try_recv() {
        assert_ne!(message["id"], 1, "no answer to a call without a handshake: {message}");
    }
    assert!(!temp.path().join("workspace/made.txt").exists(), "no call ran");
}

#[test]
fn a_client_that_closes_stdout_stops_the_server_and_its_calls() {
    let temp = tempfile::tempdir().expect("temporary directory");
    fixture(temp.path());
    let workspace = temp.path().join("workspace");
    let mut child = spawn(temp.path(), &[]);
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    writeln!(stdin, "{}", initialize()).expect("write");
    let mut line = String::new();
    stdout.read_line(&mut line).expect("the answer to initialize");
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("write");
    // The client stops reading: its end of stdout is closed.
    drop(stdout);
    for id in 1..=20 {
        let write = json!({"name": "write_file", "arguments": {"path": format!("made-{id}.txt"), "content": "x\n"}});
        if writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": write})).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The first answer it could not write stopped it: it exits (with stdin still open), and the
    // calls after that one did not run.
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "toolcell mcp went on after its stdout was closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let made = (1..=20).filter(|id| workspace.join(format!("made-{id}.txt")).exists()).count();
    assert!(made <= 2, "{made} calls ran after stdout was gone");
}

#[test]
fn a_client_that_writes_all_its_calls_before_it_reads_an_answer_gets_them_all() {
    // More calls than the threads that run them, each answer too large for many to wait in the
    // pipe: the server must read on while its calls wait for the client to read.
    const CALLS: u64 = 3000;
    let temp = tempfile::tempdir().expect("temporary directory");
    fixture(temp.path());
    std::fs::write(temp.path().join("workspace/four.txt"), "four KiB of text, one line of many\n".repeat(120)).expect("write");
    let mut child = spawn(temp.path(), &[]);
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    writeln!(stdin, "{}", initialize()).expect("write");
    stdout.read_line(&mut line).expect("the answer to initialize");
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("write");
    let (written, done) = mpsc::channel();
    std::thread::spawn(move || {
        for id in 1..=CALLS {
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "four.txt"}}});
            if writeln!(stdin, "{call}").is_err() {
                return;
            }
        }
        let _ = written.send(stdin);
    });
    let stdin = done.recv_timeout(Duration::from_secs(120));
    assert!(stdin.is_ok(), "the server stopped reading requests while its answers waited to be read");
    let mut answered = std::collections::HashSet::new();
    while (answered.len() as u64) < CALLS {
        line.clear();
        assert!(stdout.read_line(&mut line).expect("read an answer") > 0, "the server ended with {} of {CALLS} answered", answered.len());
        let answer: Value = serde_json::from_str(&line).expect("an answer is JSON");
        // Answered: read, or refused by the host when more calls run than it has instances
        // for (hundreds at once here, on a loaded machine).
        let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(answer["result"]["isError"] == false || text.starts_with("the host could not run `read_file`"), "{answer}");
        answered.insert(answer["id"].as_u64().expect("an id"));
    }
    drop(stdin);
    assert!(child.wait().expect("wait").success());
}

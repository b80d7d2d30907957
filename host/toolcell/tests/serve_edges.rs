//! `toolcell serve` at its edges, through the real binary over HTTP on 127.0.0.1: what the
//! operator reads on stderr (the listening line, refusals rate-limited and without tokens, the
//! shared store's outages), a body over the cap answered as a JSON-RPC error, and the client
//! side of serving.md (its curl handshake run as written).
//!
//! Waits are generous (a loaded 2-core CI): a test waits for an outcome, never for a time.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::served;
use served::{agent, alice_service, serve, spawn};

/// An HTTP answer: status, content type, `Connection`, `Mcp-Session-Id` if any, body.
struct Answer {
    status: u16,
    content_type: String,
    connection: Option<String>,
    session: Option<String>,
    /// `Content-Length`, if the answer had one (else it came in chunks).
    length: Option<String>,
    text: String,
}

/// POST `body` with `headers` (name, value).
fn post(url: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut request = agent().post(url).header("Accept", "application/json, text/event-stream").header("Content-Type", "application/json");
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("MCP-Protocol-Version")) {
        request = request.header("MCP-Protocol-Version", "2025-06-18");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = request.send(body).expect("POST");
    let header = |name: &str| response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let (content_type, connection, session) = (header("content-type").unwrap_or_default(), header("connection"), header("mcp-session-id"));
    let length = header("content-length");
    let text = response.body_mut().read_to_string().unwrap_or_default();
    Answer { status: response.status().as_u16(), content_type, connection, session, length, text }
}

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
           "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "edges", "version": "1"}}})
    .to_string()
}

/// A session of `token` at `url`, initialized: the `Authorization` value and the session id.
fn open_session(url: &str, token: &str) -> (String, String) {
    let bearer = format!("Bearer {token}");
    let opened = post(url, &[("Authorization", &bearer)], &initialize_body());
    let session = opened.session.clone().expect("a session");
    let headers = [("Authorization", bearer.as_str()), ("Mcp-Session-Id", session.as_str())];
    post(url, &headers, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    (bearer, session)
}

/// The JSON-RPC message answering `id` in an answer's event stream (or JSON body).
fn message(answer: &Answer, id: u64) -> Value {
    let messages: Vec<Value> = if answer.text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&answer.text).expect("JSON")]
    } else {
        answer.text.lines().filter_map(|line| line.strip_prefix("data: ")).filter_map(|data| serde_json::from_str(data).ok()).collect()
    };
    messages.into_iter().find(|message| message["id"] == id).unwrap_or_else(|| panic!("no answer to {id} in {:?}", answer.text))
}

#[test]
fn a_body_over_the_cap_is_413_with_a_json_rpc_error_and_the_connection_serves_on() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "max_request_bytes = 65536");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let bearer = format!("Bearer {alice}");
    let opened = post(&served.url, &[("Authorization", &bearer)], &initialize_body());
    let session = opened.session.expect("a session");
    let headers = [("Authorization", bearer.as_str()), ("Mcp-Session-Id", session.as_str())];
    post(&served.url, &headers, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "write_file", "arguments": {"path": "big.txt", "content": "x".repeat(1024 * 1024)}}});
    let refused = post(&served.url, &headers, &big.to_string());
    assert_eq!(refused.status, 413, "{}", refused.text);
    assert_eq!(refused.content_type, "application/json");
    // The rest of the body was read: the connection is not closed under the client.
    assert_ne!(refused.connection.as_deref(), Some("close"));
    let error: Value = serde_json::from_str(&refused.text).expect("a JSON body");
    assert_eq!((&error["jsonrpc"], &error["id"], &error["error"]["code"]), (&json!("2.0"), &Value::Null, &json!(-32013)), "{error}");
    let text = error["error"]["message"].as_str().expect("message");
    assert!(text.contains("over 65536 bytes") && text.contains("`max_request_bytes`") && text.contains("in parts"), "{text}");
    assert_eq!(error["error"]["data"]["max_request_bytes"], 65536);
    assert!(!temp.path().join("workspace/big.txt").exists());
    // The session, and the agent's connection, serve on.
    let read = post(
        &served.url,
        &headers,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "notes.txt"}}})
        .to_string(),
    );
    assert_eq!(message(&read, 2)["result"]["isError"], false, "{}", read.text);
    // The operator is told, without the token.
    let lines = served.wait_for(|line| line.contains("413 from 127.0.0.1:"));
    assert!(lines.iter().any(|line| line.contains("principal `alice` is over 65536 bytes (`max_request_bytes`)")), "{lines:#?}");
    assert!(!lines.iter().any(|line| line.contains(&alice)), "{lines:#?}");
}

#[test]
fn refusals_are_told_on_stderr_once_each_rate_limited_and_without_tokens() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "max_request_bytes = 1024\nmax_sessions_per_principal = 1");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    // The listening line names the store and the workspaces.
    let listening = &served.lines()[0];
    let state = temp.path().join("state");
    let workspace = temp.path().join("workspace");
    assert!(listening.contains(&format!("store the state directory {}", state.display())), "{listening}");
    assert!(listening.contains(&format!("workspaces app ({})", workspace.display())), "{listening}");

    let bearer = format!("Bearer {alice}");
    let leaked = "tc_a-token-the-service-does-not-know-and-must-not-log";
    let wrong = format!("Bearer {leaked}");
    assert_eq!(post(&served.url, &[("Authorization", &wrong)], &initialize_body()).status, 401);
    assert_eq!(post(&served.url, &[("Authorization", &bearer), ("Host", "attacker.example")], &initialize_body()).status, 403);
    assert_eq!(post(&served.url, &[("Authorization", &bearer)], &format!("{{\"padding\": \"{}\"}}", "x".repeat(4096))).status, 413);
    assert_eq!(post(&served.url, &[("Authorization", &bearer)], &initialize_body()).status, 200);
    assert_eq!(post(&served.url, &[("Authorization", &bearer)], &initialize_body()).status, 429, "past max_sessions_per_principal");
    let lines = served.wait_for(|line| line.contains("429 from"));
    for (status, says) in [
        ("401", "a bearer token this service knows is required"),
        ("403", "principal `alice`): Forbidden: Host header is not allowed"),
        ("413", "principal `alice` is over 1024 bytes"),
        ("429", "`max_sessions_per_principal = 1`"),
    ] {
        let told: Vec<&String> =
            lines.iter().filter(|line| line.starts_with(&format!("toolcell serve: {status} from 127.0.0.1:"))).collect();
        assert_eq!(told.len(), 1, "{status}: {lines:#?}");
        assert!(told[0].contains(says), "{status}: {}", told[0]);
    }

    // A flood of refusals: a few lines, then how many were left out.
    const FLOOD: usize = 40;
    for _ in 0..FLOOD {
        assert_eq!(post(&served.url, &[("Authorization", &wrong)], &initialize_body()).status, 401);
    }
    let lines = served.wait_for(|line| line.contains("more 401 refusals"));
    let shown = lines.iter().filter(|line| line.contains(": 401 from")).count();
    let left_out: usize = lines
        .iter()
        .filter_map(|line| line.strip_prefix("toolcell serve: ")?.split_once(" more 401 refusals")?.0.parse::<usize>().ok())
        .sum();
    assert!(shown <= 2 * toolcell_mcp::operator::LINES_PER_INTERVAL, "{lines:#?}");
    // Every refusal is either told or counted (the flood may straddle two intervals; the last
    // count may still be to come).
    let started = Instant::now();
    let mut total = shown + left_out;
    while total < FLOOD + 1 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
        let lines = served.lines();
        total = lines.iter().filter(|line| line.contains(": 401 from")).count()
            + lines
                .iter()
                .filter_map(|line| line.strip_prefix("toolcell serve: ")?.split_once(" more 401 refusals")?.0.parse::<usize>().ok())
                .sum::<usize>();
    }
    assert_eq!(total, FLOOD + 1, "{:#?}", served.lines());
    let lines = served.lines();
    assert!(!lines.iter().any(|line| line.contains(leaked) || line.contains(&alice)), "a token reached the log: {lines:#?}");
}

#[test]
fn logging_set_level_under_2026_07_28_is_a_removed_method_whatever_its_params() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let bearer = format!("Bearer {alice}");
    let opened = post(&served.url, &[("Authorization", &bearer)], &initialize_body());
    let session = opened.session.expect("a session");
    let headers = [("Authorization", bearer.as_str()), ("Mcp-Session-Id", session.as_str())];
    post(&served.url, &headers, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
                      "io.modelcontextprotocol/clientInfo": {"name": "edges", "version": "1"}});
    for (id, level) in [(1, "info"), (2, "loud")] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "logging/setLevel", "params": {"level": level, "_meta": meta}});
        let headers = [headers[0], headers[1], ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "logging/setLevel")];
        let answer = post(&served.url, &headers, &body.to_string());
        // As serving.md says (and the conformance suite's `server-stateless` wants): 404.
        assert_eq!(answer.status, 404, "{}", answer.text);
        assert_eq!(message(&answer, id)["error"]["code"], -32601, "{level}: {}", answer.text);
    }
}

/// The text of the first code block after `marker` in serving.md.
fn serving_md_block(marker: &str) -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/serving.md")).expect("serving.md");
    let after = doc.split_once(marker).unwrap_or_else(|| panic!("serving.md has no `{marker}`")).1;
    let fence = after.find("```").expect("a code block after the marker");
    let block = &after[fence..];
    let start = block.find('\n').expect("fence line") + 1;
    let end = block[start..].find("```").expect("the block's end") + start;
    // The block is indented as part of a list item.
    block[start..end].lines().map(str::trim_start).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_client_side_of_serving_md_works_as_written() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    // The `mcpServers` entry: HTTP, the default endpoint, the token as a bearer header.
    let entry: Value = serde_json::from_str(&serving_md_block("<!-- client: mcpServers -->")).expect("the entry is JSON");
    let server = &entry["mcpServers"]["toolcell"];
    assert_eq!((&server["type"], &server["url"]), (&json!("http"), &json!("http://127.0.0.1:8750/")), "{entry}");
    assert!(server["headers"]["Authorization"].as_str().is_some_and(|value| value.starts_with("Bearer ")), "{entry}");
    // The curl handshake, run as written against this service.
    let script = serving_md_block("<!-- client: curl -->");
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(temp.path())
        .env("URL", &served.url)
        .env("TOKEN", &alice)
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{script}\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains(r#""serverInfo":{"name":"toolcell""#), "{stdout}");
    let listed = stdout.lines().filter_map(|line| line.strip_prefix("data: ")).filter_map(|data| serde_json::from_str::<Value>(data).ok());
    let tools: Vec<String> = listed
        .filter_map(|message| message["result"]["tools"].as_array().cloned())
        .flatten()
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .collect();
    assert!(tools.contains(&"read_file".to_owned()) && tools.contains(&"edit_file".to_owned()), "{stdout}");
}

#[test]
fn the_shared_stores_outage_and_recovery_are_told_once_each() {
    let Some(cluster) = toolcell_tests::postgres::Cluster::start() else {
        return;
    };
    // A password the database does not need (it trusts the socket), which no line may show.
    let url = format!("{} password=s3cret-never-logged", cluster.url);
    let temp = tempfile::tempdir().expect("temporary directory");
    let state = temp.path().join("state");
    let migrated = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .args(["--store", &url, "--state-dir"])
        .arg(&state)
        .args(["store", "migrate"])
        .output()
        .expect("toolcell store migrate");
    assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));
    let (config, alice) = alice_service(temp.path(), "");
    let served = serve(&config, &state, &["--store", &url]);
    let listening = &served.lines()[0];
    assert!(
        listening.contains(&format!("store postgres://toolcell@{}/postgres, workspaces app (", cluster.socket_dir().display())),
        "{listening}"
    );

    let bearer = format!("Bearer {alice}");
    let opened = post(&served.url, &[("Authorization", &bearer)], &initialize_body());
    let session = opened.session.expect("a session");
    let headers = [("Authorization", bearer.as_str()), ("Mcp-Session-Id", session.as_str())];
    post(&served.url, &headers, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let write = |id: u64, content: &str| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "write_file", "arguments": {"path": "notes.txt", "content": content}}});
        message(&post(&served.url, &headers, &body.to_string()), id)["result"]["isError"].clone()
    };
    assert_eq!(write(1, "one\n"), false);
    cluster.stop();
    assert_eq!(write(2, "while down\n"), true, "a write without the store is refused");
    assert_eq!(write(3, "while down\n"), true);
    served.wait_for(|line| line.contains("cannot be reached"));
    cluster.resume();
    assert_eq!(write(4, "after\n"), false, "writes work again");
    let lines = served.wait_for(|line| line.contains("is back"));
    let down: Vec<&String> = lines.iter().filter(|line| line.contains("cannot be reached")).collect();
    assert_eq!(down.len(), 1, "one line for the outage, however many calls met it: {lines:#?}");
    assert!(down[0].starts_with("toolcell serve: the store postgres://toolcell@") && down[0].contains("writes are refused"), "{}", down[0]);
    assert_eq!(lines.iter().filter(|line| line.contains("is back (unreachable for")).count(), 1, "{lines:#?}");
    assert!(!lines.iter().any(|line| line.contains("s3cret-never-logged") || line.contains(&alice)), "{lines:#?}");
}

#[test]
fn a_quick_answer_leaves_in_one_piece_with_its_head_and_priming_event() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let (bearer, session) = open_session(&served.url, &alice);
    let headers = [("Authorization", bearer.as_str()), ("Mcp-Session-Id", session.as_str())];
    // A ping is answered at once: its event stream (the priming event, the answer, the end)
    // is gathered and sent whole, with its length. On a machine loaded past the gathering
    // time, one of a few tries still is.
    let mut answers = Vec::new();
    for id in 1..=5 {
        let answer = post(&served.url, &headers, &json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string());
        assert_eq!((answer.status, answer.content_type.as_str()), (200, "text/event-stream"), "{}", answer.text);
        // Still a stream a client resumes: the priming event first, then the answer.
        assert!(answer.text.starts_with("data: \nid: ") && answer.text.contains("\nretry: "), "{:?}", answer.text);
        assert_eq!(message(&answer, id)["result"], json!({}), "{:?}", answer.text);
        let whole = answer.length.as_deref() == Some(answer.text.len().to_string().as_str());
        answers.push((answer.length, answer.text.len()));
        if whole {
            return;
        }
    }
    panic!("no answer came whole (Content-Length, body length): {answers:?}");
}

#[test]
fn a_plain_tool_call_is_answered_as_json_with_what_rmcp_answers_and_anything_else_goes_through_rmcp() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let (bearer, session) = open_session(&served.url, &alice);
    let headers = [("Authorization", bearer.as_str()), ("Mcp-Session-Id", session.as_str())];
    let call = |id: u64, params: Value, extra: &[(&str, &str)]| {
        let headers: Vec<(&str, &str)> = headers.iter().chain(extra).copied().collect();
        post(&served.url, &headers, &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string())
    };
    let read = json!({"name": "read_file", "arguments": {"path": "notes.txt"}});
    let mut with_meta = read.clone();
    with_meta["_meta"] = json!({});
    // The plain call is answered by the service as JSON; the same call with `_meta` (which may
    // carry a progress token), or from a page (`Origin`), goes through rmcp's stream.
    let plain = call(1, read.clone(), &[]);
    let through_rmcp = call(2, with_meta, &[]);
    let from_a_page = call(3, read.clone(), &[("Origin", "http://localhost:3000")]);
    assert_eq!((plain.status, plain.content_type.as_str()), (200, "application/json"), "{}", plain.text);
    for answer in [&through_rmcp, &from_a_page] {
        assert_eq!((answer.status, answer.content_type.as_str()), (200, "text/event-stream"), "{}", answer.text);
    }
    // What each says is the same, to the byte.
    let (plain, through_rmcp, from_a_page) = (message(&plain, 1), message(&through_rmcp, 2), message(&from_a_page, 3));
    assert_eq!(plain["result"]["content"][0]["text"].as_str().map(|text| text.contains("hello")), Some(true), "{plain}");
    assert_eq!(plain["result"], through_rmcp["result"]);
    assert_eq!(plain["result"], from_a_page["result"]);
    // A tool error, and a call refused before it runs (an unknown tool), alike.
    let missing = json!({"name": "read_file", "arguments": {"path": "missing.txt"}});
    let unknown = json!({"name": "no_such_tool", "arguments": {}});
    for (index, params) in [missing, unknown].into_iter().enumerate() {
        let id = 10 + 2 * index as u64;
        let mut with_meta = params.clone();
        with_meta["_meta"] = json!({});
        let (plain, through_rmcp) = (call(id, params, &[]), call(id + 1, with_meta, &[]));
        assert_eq!(plain.content_type, "application/json", "{}", plain.text);
        let (plain, through_rmcp) = (message(&plain, id), message(&through_rmcp, id + 1));
        assert_eq!(plain["result"]["isError"], true, "{plain}");
        let without_call_id = |mut message: Value| {
            if let Some(meta) = message["result"]["_meta"].as_object_mut() {
                meta.remove("toolcell/call_id");
            }
            message["result"].take()
        };
        assert_eq!(without_call_id(plain), without_call_id(through_rmcp));
    }
    // A client that asked for log messages gets its calls through rmcp, which sends them.
    let level = json!({"jsonrpc": "2.0", "id": 20, "method": "logging/setLevel", "params": {"level": "notice"}});
    assert_eq!(post(&served.url, &headers, &level.to_string()).status, 200);
    let after = call(21, read, &[]);
    assert_eq!((after.status, after.content_type.as_str()), (200, "text/event-stream"), "{}", after.text);
    assert_eq!(message(&after, 21)["result"], through_rmcp["result"]);
}

/// `serve` under the soft limit of open files many systems start processes with (1,024):
/// it raises the limit to the hard one, and says so when even that leaves too few for its
/// connections and calls.
#[test]
fn serve_raises_its_limit_of_open_files_and_warns_when_the_hard_limit_is_too_low() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, _) = alice_service(temp.path(), "");
    let start = |limits: &str| {
        let mut command = Command::new("prlimit");
        command.arg(format!("--nofile={limits}")).arg(env!("CARGO_BIN_EXE_toolcell"));
        command.arg("--cache-dir").arg(toolcell_tests::shared_cache_dir()).arg("--state-dir").arg(temp.path().join("state"));
        command.args(["serve", "--listen", "127.0.0.1:0", "--config"]).arg(&config);
        spawn(command)
    };
    let soft = |served: &served::Served| {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", served.child.id())).expect("limits");
        let line = limits.lines().find(|line| line.starts_with("Max open files")).expect("open files").to_owned();
        line.split_whitespace().nth(3).expect("soft").to_owned()
    };
    let roomy = start("1024:4096");
    assert_eq!(soft(&roomy), "4096");
    assert!(!roomy.lines().iter().any(|line| line.contains("limit of open files")), "{:?}", roomy.lines());
    drop(roomy);
    let tight = start("1024:1500");
    assert_eq!(soft(&tight), "1500");
    let lines = tight.wait_for(|line| line.contains("limit of open files"));
    let warning = lines.iter().find(|line| line.contains("limit of open files")).expect("a warning");
    assert!(warning.contains("is 1500, below `max_connections` (1024)") && warning.contains("LimitNOFILE"), "{warning}");
}

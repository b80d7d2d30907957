//! `toolcell serve`'s bounds, through the real binary over HTTP on 127.0.0.1: one principal
//! holding many event streams, slow calls, sessions or connections is refused past its bounds
//! with an error naming them, while another principal's `initialize` and `read_file` still
//! succeed; what a principal holds is given back when it ends; idle sessions expire.
//!
//! Waits are generous (a loaded 2-core CI): a test waits for an outcome, never for a time.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::load;
use crate::served;
use served::{serve, token};

/// A workspace and a service configuration beginning with `settings`, with an `impl`
/// principal (alice) and a `reviewer` (rita); their tokens.
fn fixture(root: &Path, settings: &str) -> (PathBuf, String, String) {
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "hello\n").expect("write");
    let (alice, alice_line) = token();
    let (rita, rita_line) = token();
    let config = root.join("service.toml");
    std::fs::write(
        &config,
        format!(
            "{settings}\n[workspaces]\napp = \"workspace\"\n\n[[principals]]\nname = \"alice\"\n{alice_line}\nworkspace = \"app\"\nrole = \"impl\"\n\n\
             [[principals]]\nname = \"rita\"\n{rita_line}\nworkspace = \"app\"\nrole = \"reviewer\"\n"
        ),
    )
    .expect("config");
    (config, alice, rita)
}

/// An HTTP answer: status, `Mcp-Session-Id` if any, body.
struct Answer {
    status: u16,
    session: Option<String>,
    text: String,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(120))).build().new_agent()
}

/// POST the JSON-RPC message `body` as `token`, in `session` if given.
fn post(url: &str, token: &str, session: Option<&str>, body: &Value) -> Answer {
    let mut request = agent()
        .post(url)
        .header("Authorization", &format!("Bearer {token}"))
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-06-18");
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let mut response = request.send_json(body).expect("POST");
    let session = response.headers().get("mcp-session-id").and_then(|value| value.to_str().ok()).map(str::to_owned);
    Answer { status: response.status().as_u16(), session, text: response.body_mut().read_to_string().unwrap_or_default() }
}

/// `initialize` and `notifications/initialized` as `token`: the answer (with the new session).
fn initialize(url: &str, token: &str) -> Answer {
    let params = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bounds", "version": "1"}});
    let answer = post(url, token, None, &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}));
    if let Some(session) = &answer.session {
        let initialized = post(url, token, Some(session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(initialized.status, 202, "{}", initialized.text);
    }
    answer
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

/// Call `tool` as `token` in `session`: the JSON-RPC answer (each call with an id of its own,
/// as calls in flight at once in one session must have).
fn call(url: &str, token: &str, session: &str, tool: &str, arguments: Value) -> Value {
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
    let answer = post(url, token, Some(session), &body);
    assert_eq!(answer.status, 200, "{}", answer.text);
    message(&answer, id)
}

/// Another principal is served as usual: it opens a session, reads a file, ends the session.
fn served_as_usual(url: &str, token: &str) {
    let mut client = load::Client::connect(url, token).expect("another principal connects");
    let read = client.call("read_file", json!({"path": "notes.txt"})).expect("another principal reads");
    assert_eq!(read["isError"], false, "{read}");
    client.end().expect("another principal ends its session");
}

/// Open an event stream (`GET`) of `session` as `token` on a connection of its own: the
/// connection, kept open, and the answer's status line (and body, if it was refused).
fn open_stream(address: &str, token: &str, session: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\
         MCP-Protocol-Version: 2025-06-18\r\nMcp-Session-Id: {session}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|read| read == 1) {
        head.push(byte[0]);
    }
    let mut status = String::from_utf8_lossy(&head).lines().next().unwrap_or("closed").to_owned();
    if !status.contains(" 200 ") {
        // A refusal closes the connection: its text follows.
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        status.push_str(&String::from_utf8_lossy(&rest));
    }
    (stream, status)
}

/// Wait until `done` holds or `limit` passes; whether it held.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    loop {
        if done() {
            return true;
        }
        if started.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn one_token_holding_event_streams_is_bounded_and_starves_no_other_principal() {
    let temp = tempfile::tempdir().expect("temporary directory");
    // The default bounds: 32 streams per principal.
    let (config, alice, rita) = fixture(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let sessions: Vec<String> = (0..2).map(|_| initialize(&served.url, &alice).session.expect("a session")).collect();
    // Forty event streams on two sessions, each on its own connection, all kept open.
    let mut streams: Vec<(TcpStream, String)> = (0..40).map(|index| open_stream(&served.address, &alice, &sessions[index % 2])).collect();
    let open = streams.iter().filter(|(_, status)| status.contains(" 200 ")).count();
    let refused: Vec<&String> = streams.iter().map(|(_, status)| status).filter(|status| status.contains(" 429 ")).collect();
    assert!(open <= 32 && refused.len() >= 8, "{open} open, refused: {refused:?}");
    assert!(
        refused.iter().all(|status| status.contains("`max_streams_per_principal = 32`") && status.contains("service.toml")),
        "{refused:?}"
    );
    // A call's answer is a stream too: refused while every stream is held, with the same bound.
    let answer = post(
        &served.url,
        &alice,
        Some(&sessions[0]),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "notes.txt"}}}),
    );
    assert_eq!(answer.status, 429, "{}", answer.text);
    assert!(answer.text.contains("max_streams_per_principal"), "{}", answer.text);
    // Another principal opens a session and reads meanwhile.
    served_as_usual(&served.url, &rita);
    // A notification still gets through (the requests bound is above the streams bound).
    let notified = post(&served.url, &alice, Some(&sessions[0]), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(notified.status, 202, "{}", notified.text);
    // Closing streams gives their places back.
    streams.truncate(20);
    let mut reopened = Vec::new();
    assert!(
        eventually(Duration::from_secs(60), || {
            let (stream, status) = open_stream(&served.address, &alice, &sessions[0]);
            reopened.push(stream);
            status.contains(" 200 ")
        }),
        "a closed stream's place is given back"
    );
    let read = call(&served.url, &alice, &sessions[1], "read_file", json!({"path": "notes.txt"}));
    assert_eq!(read["result"]["isError"], false, "{read}");
}

#[test]
fn one_token_opening_sessions_is_bounded_and_starves_no_other_principal() {
    let temp = tempfile::tempdir().expect("temporary directory");
    // The default bounds: 64 sessions per principal.
    let (config, alice, rita) = fixture(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let answers: Vec<Answer> = (0..80).map(|_| initialize(&served.url, &alice)).collect();
    let opened: Vec<&String> = answers.iter().filter_map(|answer| answer.session.as_ref()).collect();
    let refused: Vec<&Answer> = answers.iter().filter(|answer| answer.status == 429).collect();
    assert_eq!((opened.len(), refused.len()), (64, 16), "{:?}", answers.iter().map(|answer| answer.status).collect::<Vec<_>>());
    for answer in &refused {
        assert!(answer.session.is_none());
        assert!(
            answer.text.contains("principal `alice` has 64 MCP sessions, as many as `max_sessions_per_principal = 64` allows")
                && answer.text.contains("raise `max_sessions_per_principal` in service.toml"),
            "{}",
            answer.text
        );
    }
    // Another principal is not bound by alice's sessions.
    served_as_usual(&served.url, &rita);
    // Alice's sessions all still work, and ending one gives its place back.
    let read = call(&served.url, &alice, opened[0], "read_file", json!({"path": "notes.txt"}));
    assert_eq!(read["result"]["isError"], false, "{read}");
    let ended = agent()
        .delete(&served.url)
        .header("Authorization", &format!("Bearer {alice}"))
        .header("Mcp-Session-Id", opened[1])
        .call()
        .expect("DELETE");
    assert_eq!(ended.status().as_u16(), 204);
    assert!(initialize(&served.url, &alice).session.is_some(), "an ended session's place is given back");
    assert_eq!(initialize(&served.url, &alice).status, 429, "and only that one");
}

#[test]
fn idle_sessions_expire_and_give_their_place_back_but_busy_ones_stay() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice, _) = fixture(temp.path(), "session_idle = \"3s\"\nmax_sessions_per_principal = 2\n");
    let state = temp.path().join("state");
    let served = serve(&config, &state, &[] as &[&str]);
    let idle = initialize(&served.url, &alice).session.expect("a session");
    let busy = initialize(&served.url, &alice).session.expect("a second session");
    let third = initialize(&served.url, &alice);
    assert_eq!(third.status, 429, "{}", third.text);
    assert!(third.text.contains("`max_sessions_per_principal = 2`") && third.text.contains("`session_idle`"), "{}", third.text);
    // The busy session holds a stream open; the idle one does nothing.
    let (_stream, status) = open_stream(&served.address, &alice, &busy);
    assert!(status.contains(" 200 "), "{status}");
    let mut opened = None;
    assert!(
        eventually(Duration::from_secs(90), || {
            opened = initialize(&served.url, &alice).session;
            opened.is_some()
        }),
        "the idle session expired and gave its place back"
    );
    // The expired session is gone, here and on disk; the busy one works.
    let gone = post(&served.url, &alice, Some(&idle), &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(gone.status, 404, "{}", gone.text);
    let kept = std::fs::read_dir(state.join("mcp-sessions")).expect("sessions").count();
    assert_eq!(kept, 4, "two sessions, each an owner and a state file");
    let read = call(&served.url, &alice, &busy, "read_file", json!({"path": "notes.txt"}));
    assert_eq!(read["result"]["isError"], false, "{read}");
}

#[test]
fn one_token_running_slow_calls_leaves_instances_for_another_principal() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice, rita) = fixture(temp.path(), "max_calls = 4\nmax_calls_per_principal = 3\n");
    let plugins = temp.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins");
    std::fs::write(plugins.join("misbehave.wasm"), toolcell_tests::guest_program("misbehave")).expect("plugin");
    let policy = temp.path().join("policy.toml");
    // A spinning call runs until its deadline.
    std::fs::write(
        &policy,
        "version = 1\n[limits]\ndeadline_ms = 8000\n[roles.impl]\ntools = [\"*\"]\n[[roles.impl.rules]]\naccess = [\"read\", \"list\", \"write\"]\npaths = [\"**\"]\neffect = \"allow\"\n\
         [roles.reviewer]\ntools = [\"read_file\"]\n[[roles.reviewer.rules]]\naccess = [\"read\"]\npaths = [\"**\"]\neffect = \"allow\"\n",
    )
    .expect("policy");
    let served = serve(
        &config,
        &temp.path().join("state"),
        &["--policy".as_ref(), policy.as_os_str(), "--plugin-dir".as_ref(), plugins.as_os_str()],
    );
    let session = initialize(&served.url, &alice).session.expect("a session");
    // Five slow calls at once: three run, two are refused at once, naming the bound.
    let (sender, receiver) = std::sync::mpsc::channel();
    let callers: Vec<_> = (0..5)
        .map(|_| {
            let (url, alice, session, sender) = (served.url.clone(), alice.clone(), session.clone(), sender.clone());
            std::thread::spawn(move || {
                let _ = sender.send(call(&url, &alice, &session, "misbehave", json!({"action": "spin"})));
            })
        })
        .collect();
    let (mut refused, mut ran) = (Vec::new(), Vec::new());
    while refused.len() < 2 && refused.len() + ran.len() < 5 {
        let answer = receiver.recv_timeout(Duration::from_secs(300)).expect("an answer");
        if answer.get("error").is_some() { refused.push(answer) } else { ran.push(answer) }
    }
    // Meanwhile (the refused calls are answered at once, the others run for seconds) another
    // principal still gets an instance: its session and its read succeed.
    served_as_usual(&served.url, &rita);
    while refused.len() + ran.len() < 5 {
        let answer = receiver.recv_timeout(Duration::from_secs(300)).expect("a slow call's answer");
        if answer.get("error").is_some() { refused.push(answer) } else { ran.push(answer) }
    }
    assert_eq!((refused.len(), ran.len()), (2, 3), "{refused:?} {ran:?}");
    for answer in &refused {
        let error = &answer["error"];
        assert_eq!(error["code"], -32029, "{answer}");
        assert!(
            error["message"].as_str().is_some_and(|message| message.contains("principal `alice` has 3 tool calls running")
                && message.contains("`max_calls_per_principal = 3`")
                && message.contains("service.toml")),
            "{answer}"
        );
        assert_eq!(error["data"]["bound"], "max_calls_per_principal", "{answer}");
    }
    // The three ran until their deadline, then gave their slots back.
    for answer in &ran {
        assert_eq!(answer["result"]["isError"], true, "stopped at its deadline: {answer}");
    }
    for caller in callers {
        caller.join().expect("caller");
    }
    let quick = call(&served.url, &alice, &session, "misbehave", json!({"action": "ok"}));
    assert_eq!(quick["result"]["isError"], false, "{quick}");
}

#[test]
fn one_token_holding_connections_leaves_some_for_another_principal() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice, rita) =
        fixture(temp.path(), "max_connections = 40\nmax_connections_per_principal = 30\nrequest_body_timeout = \"120s\"\n");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    // Alice opens 36 connections, each holding a request whose body is still to come.
    let mut held: Vec<(TcpStream, Option<String>)> = Vec::new();
    for _ in 0..36 {
        let mut stream = TcpStream::connect(&served.address).expect("connect");
        let head = format!(
            "POST / HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {alice}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{{",
            served.address
        );
        stream.write_all(head.as_bytes()).expect("send the head");
        stream.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
        held.push((stream, None));
    }
    // Past her bound, answers come at once; the others wait for their bodies.
    let refused = |held: &[(TcpStream, Option<String>)]| held.iter().filter(|(_, answer)| answer.is_some()).count();
    assert!(
        eventually(Duration::from_secs(60), || {
            for (stream, answer) in &mut held {
                let mut bytes = [0u8; 4096];
                if answer.is_none()
                    && let Ok(read) = stream.read(&mut bytes)
                    && read > 0
                {
                    *answer = Some(String::from_utf8_lossy(&bytes[..read]).into_owned());
                }
            }
            refused(&held) >= 6
        }),
        "past 30 connections, alice is refused"
    );
    let answers: Vec<&String> = held.iter().filter_map(|(_, answer)| answer.as_ref()).collect();
    assert_eq!(answers.len(), 6, "{answers:?}");
    assert!(
        answers.iter().all(|answer| answer.starts_with("HTTP/1.1 429 ") && answer.contains("`max_connections_per_principal = 30`")),
        "{answers:?}"
    );
    // Rita is served on what is left.
    served_as_usual(&served.url, &rita);
}

/// Each connection that lists or subscribes to resources holds one of the process's resource
/// watchers (an inotify instance each, of which the process keeps 32). One principal's idle
/// sessions took them all, and another principal's subscription was refused until those
/// sessions ended: a principal now holds at most 8, and the others' shares stay free.
#[test]
fn one_principal_cannot_take_every_resource_watcher() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice, rita) = fixture(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let url = served.url.as_str();
    let subscribe =
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": "toolcell://workspace/notes.txt"}});
    let mut sessions = Vec::new();
    for _ in 0..9 {
        let session = initialize(url, &alice).session.expect("a session");
        let listed = post(url, &alice, Some(&session), &json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}));
        // The listing answers whether or not a watcher was left for it.
        assert!(message(&listed, 1)["result"]["resources"].is_array(), "{}", listed.text);
        sessions.push(session);
    }
    let refused = message(&post(url, &alice, Some(&sessions[8]), &subscribe), 2);
    let text = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("principal `alice` has 8 connections watched for resource changes"), "{refused}");
    assert!(!text.contains("service.toml"), "no setting raises it: {refused}");
    // Another principal's subscription is served.
    let session = initialize(url, &rita).session.expect("a session");
    let subscribed = message(&post(url, &rita, Some(&session), &subscribe), 2);
    assert!(subscribed["error"].is_null() && subscribed["result"].is_object(), "{subscribed}");
}

/// A body sent as `application/json` that rmcp cannot read as a JSON-RPC message (not JSON,
/// not UTF-8, nested past 128 levels, a batch, a repeated `id`) was answered `415 Unsupported
/// Media Type` in plain text, telling the client its media type was wrong: it is a `400` with
/// the JSON-RPC error clients show, naming the request's id where it can be read.
#[test]
fn a_json_body_that_is_no_message_gets_a_json_rpc_error_not_a_media_type_refusal() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice, _) = fixture(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let session = initialize(&served.url, &alice).session.expect("a session");
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let cases: [(Vec<u8>, i64, Value); 5] = [
        (br#"{"jsonrpc":"2.0","id":1,"method":"ping""#.to_vec(), -32700, json!(1)),
        (b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\",\"arguments\":{\"path\":\"a\xff\"}}}".to_vec(), -32700, json!(2)),
        (format!(r#"{{"jsonrpc":"2.0","id":3,"method":"ping","params":{{"x":{deep}}}}}"#).into_bytes(), -32700, json!(3)),
        (br#"[{"jsonrpc":"2.0","id":4,"method":"ping"}]"#.to_vec(), -32600, Value::Null),
        (br#"{"jsonrpc":"2.0","id":5,"id":6,"method":"ping"}"#.to_vec(), -32600, json!(5)),
    ];
    for (body, code, id) in cases {
        let mut response = agent()
            .post(&served.url)
            .header("Authorization", &format!("Bearer {alice}"))
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .header("MCP-Protocol-Version", "2025-06-18")
            .header("Mcp-Session-Id", &session)
            .send(&body[..])
            .expect("POST");
        let shown = String::from_utf8_lossy(&body).chars().take(60).collect::<String>();
        let kind = response.headers().get("content-type").and_then(|kind| kind.to_str().ok()).unwrap_or_default().to_owned();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        assert_eq!((response.status().as_u16(), kind.as_str()), (400, "application/json"), "{shown}: {text}");
        let answer: Value = serde_json::from_str(&text).unwrap_or_else(|error| panic!("{shown}: {error}: {text}"));
        assert_eq!((&answer["error"]["code"], &answer["id"]), (&json!(code), &id), "{shown}: {answer}");
    }
}

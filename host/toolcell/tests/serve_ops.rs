//! `toolcell serve` as a platform runs it, through the real binary over HTTP on 127.0.0.1:
//! health and readiness probes, and metrics.
//!
//! Waits are generous (a loaded 2-core CI): a test waits for an outcome, never for a time.

use std::path::Path;
use std::time::Duration;

use crate::served;
use served::{agent, alice_service, serve, token};

/// GET `url` without a token: status and body.
fn get(url: &str) -> (u16, String) {
    let mut response = agent().get(url).call().expect("GET");
    (response.status().as_u16(), response.body_mut().read_to_string().unwrap_or_default())
}

#[test]
fn health_and_readiness_answer_without_a_token_and_readiness_follows_the_store() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, _) = alice_service(temp.path(), "");
    let state = temp.path().join("state");
    let served = serve(&config, &state, &[] as &[&str]);
    assert_eq!(get(&format!("{}healthz", served.url)), (200, "ok\n".to_owned()));
    assert_eq!(get(&format!("{}readyz", served.url)), (200, "ready\n".to_owned()));
    // Other paths still need a token.
    assert_eq!(get(&format!("{}somewhere", served.url)).0, 401);
    // The store (here the state directory) goes away: not ready, alive all the same, and the
    // answer names no path.
    let moved = temp.path().join("state-moved");
    std::fs::rename(&state, &moved).expect("move the state directory away");
    let (status, text) = get(&format!("{}readyz", served.url));
    assert_eq!((status, text.as_str()), (503, "not ready: the state directory is gone\n"));
    assert!(!text.contains(&temp.path().display().to_string()));
    assert_eq!(get(&format!("{}healthz", served.url)).0, 200);
    std::fs::rename(&moved, &state).expect("move it back");
    assert_eq!(get(&format!("{}readyz", served.url)), (200, "ready\n".to_owned()));
}

/// POST a JSON-RPC `body` with `token` in `session`: status, `Mcp-Session-Id`, body.
fn post(url: &str, token: &str, session: Option<&str>, body: &serde_json::Value) -> (u16, Option<String>, String) {
    let mut request = agent()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2025-06-18")
        .header("Authorization", &format!("Bearer {token}"));
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let mut response = request.send(body.to_string()).expect("POST");
    let session = response.headers().get("mcp-session-id").and_then(|value| value.to_str().ok()).map(str::to_owned);
    (response.status().as_u16(), session, response.body_mut().read_to_string().unwrap_or_default())
}

/// Open a session for `token` and call `tool` with `arguments`; the answer's body.
fn call(url: &str, token: &str, tool: &str, arguments: serde_json::Value) -> String {
    use serde_json::json;
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ops", "version": "1"}}});
    let (status, session, text) = post(url, token, None, &initialize);
    assert_eq!(status, 200, "{text}");
    let session = session.expect("a session");
    post(url, token, Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let called = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
    post(url, token, Some(&session), &called).2
}

/// `promtool check metrics` (Debian's `prometheus` package, which `.ci/run` installs) on `text`.
fn promtool_check(text: &str) {
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's `prometheus` package; `.ci/run` installs it) must be on PATH");
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write to promtool");
    let output = child.wait_with_output().expect("promtool");
    assert!(
        output.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The value of the sample of `name` whose labels include each of `labels` (`key="value"`).
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
        (metric == name && labels.iter().all(|label| rest.contains(label))).then(|| value.parse().ok())?
    })
}

#[test]
fn metrics_need_their_own_token_pass_promtool_and_count_without_identifying_labels() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "");
    let (metrics_token, metrics_line) = token();
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("metrics_{metrics_line}\n{text}")).expect("config");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let url = format!("{}metrics", served.url);
    let scrape = |token: &str| {
        let mut response = agent().get(&url).header("Authorization", &format!("Bearer {token}")).call().expect("GET");
        (response.status().as_u16(), response.body_mut().read_to_string().unwrap_or_default())
    };
    // A principal's token does not open the metrics, nor does none.
    assert_eq!(get(&url).0, 401);
    assert_eq!(scrape(&alice).0, 401);

    let read = call(&served.url, &alice, "read_file", serde_json::json!({"path": "notes.txt"}));
    assert!(read.contains("hello"), "{read}");
    let missing = call(&served.url, &alice, "read_file", serde_json::json!({"path": "no-such-file.txt"}));
    assert!(missing.contains("isError"), "{missing}");
    call(&served.url, &alice, "made_up_tool_name", serde_json::json!({}));
    let (status, _, _) = post(&served.url, "tc_not-a-token-of-this-service", None, &serde_json::json!({}));
    assert_eq!(status, 401);

    let (status, text) = scrape(&metrics_token);
    assert_eq!(status, 200, "{text}");
    promtool_check(&text);
    let ok = sample(&text, "toolcell_tool_calls_total", &["tool=\"read_file\"", "role=\"impl\"", "outcome=\"ok\""]);
    assert_eq!(ok, Some(1.0), "{text}");
    let failed = sample(&text, "toolcell_tool_calls_total", &["tool=\"read_file\"", "outcome=\"not-found\""]);
    assert_eq!(failed, Some(1.0), "{text}");
    assert_eq!(sample(&text, "toolcell_tool_calls_total", &["tool=\"unknown\""]), Some(1.0), "a made-up name is no label: {text}");
    assert_eq!(sample(&text, "toolcell_tool_call_duration_seconds_count", &["tool=\"read_file\""]), Some(2.0), "{text}");
    assert_eq!(sample(&text, "toolcell_tool_calls_in_flight", &[]), Some(0.0), "{text}");
    assert!(sample(&text, "toolcell_denials_total", &["kind=\"unauthorized\""]) >= Some(3.0), "{text}");
    assert_eq!(sample(&text, "toolcell_denials_total", &["kind=\"policy\""]), Some(0.0), "{text}");
    assert_eq!(sample(&text, "toolcell_sessions_open", &[]), Some(3.0), "{text}");
    assert_eq!(sample(&text, "toolcell_audit_appends_total", &[]), Some(2.0), "{text}");
    assert_eq!(sample(&text, "toolcell_store_outages_total", &[]), Some(0.0), "{text}");
    assert_eq!(sample(&text, "toolcell_index_workspaces", &["state=\"absent\""]), Some(1.0), "{text}");
    // Nothing identifying in the exposition.
    for secret in [alice.as_str(), metrics_token.as_str(), "alice", "notes.txt", "made_up_tool_name", &temp.path().display().to_string()] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}

/// A service whose `impl` role may call the `misbehave` plugin, whose spinning calls run for
/// `deadline_ms`; with `settings`, a metrics token. Alice's token and the metrics token.
fn spinning(root: &Path, settings: &str, deadline_ms: u64) -> (served::Served, String, String) {
    let (config, alice) = alice_service(root, "");
    let (metrics_token, metrics_line) = token();
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{settings}\nmetrics_{metrics_line}\n{text}")).expect("config");
    let plugins = root.join("plugins");
    std::fs::create_dir(&plugins).expect("plugins");
    std::fs::write(plugins.join("misbehave.wasm"), toolcell_tests::guest_program("misbehave")).expect("plugin");
    let policy = root.join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[limits]\ndeadline_ms = {deadline_ms}\n[roles.impl]\ntools = [\"*\"]\n[[roles.impl.rules]]\naccess = [\"read\", \"list\", \"write\"]\npaths = [\"**\"]\neffect = \"allow\"\n"
        ),
    )
    .expect("policy");
    let served =
        serve(&config, &root.join("state"), &["--policy".as_ref(), policy.as_os_str(), "--plugin-dir".as_ref(), plugins.as_os_str()]);
    (served, alice, metrics_token)
}

/// Start a spinning call of `alice` on a thread, and wait until `/metrics` counts it in flight.
fn spin_in_flight(served: &served::Served, alice: &str, metrics_token: &str) -> std::thread::JoinHandle<String> {
    let (url, alice_token) = (served.url.clone(), alice.to_owned());
    let spinning = std::thread::spawn(move || call(&url, &alice_token, "misbehave", serde_json::json!({"action": "spin"})));
    let started = std::time::Instant::now();
    loop {
        let mut response =
            agent().get(&format!("{}metrics", served.url)).header("Authorization", &format!("Bearer {metrics_token}")).call().expect("GET");
        let text = response.body_mut().read_to_string().unwrap_or_default();
        if sample(&text, "toolcell_tool_calls_in_flight", &[]) == Some(1.0) {
            return spinning;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "the call never ran: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Send SIGTERM to `served` (with kill(1): a real signal, as a platform sends it).
fn terminate(served: &served::Served) {
    let status = std::process::Command::new("kill").args(["-TERM", &served.child.id().to_string()]).status().expect("kill");
    assert!(status.success());
}

/// Wait (up to a minute) for `served` to exit; its status.
fn exited(served: &mut served::Served) -> std::process::ExitStatus {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = served.child.try_wait().expect("wait") {
            return status;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "still running: {:#?}", served.lines());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn on_sigterm_no_new_connections_are_taken_and_a_call_in_flight_finishes_before_the_exit() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (mut served, alice, metrics_token) = spinning(temp.path(), "shutdown_grace = \"2m\"", 3000);
    let call = spin_in_flight(&served, &alice, &metrics_token);
    terminate(&served);
    served.wait_for(|line| line.contains("stopping: no new connections; 1 calls in flight get up to 2m to finish"));
    // The listener is closed at once.
    let refused = (0..200).any(|_| {
        let closed = std::net::TcpStream::connect(&served.address).is_err();
        if !closed {
            std::thread::sleep(Duration::from_millis(50));
        }
        closed
    });
    assert!(refused, "new connections are still taken");
    // The call runs to its end (its deadline) and its answer reaches the client.
    let answer = call.join().expect("the call's answer");
    assert!(answer.contains("\"id\":1") && answer.contains("deadline"), "{answer}");
    assert!(exited(&mut served).success());
    assert!(served.lines().iter().any(|line| line == "toolcell serve: stopped"), "{:#?}", served.lines());
}

#[test]
fn past_shutdown_grace_the_process_exits_and_the_call_is_cut_off() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (mut served, alice, metrics_token) = spinning(temp.path(), "shutdown_grace = \"1s\"", 60_000);
    let _call = spin_in_flight(&served, &alice, &metrics_token);
    let signalled = std::time::Instant::now();
    terminate(&served);
    assert!(exited(&mut served).success());
    assert!(signalled.elapsed() < Duration::from_secs(30), "it waited for the call: {:?}", signalled.elapsed());
    let lines = served.lines();
    assert!(lines.iter().any(|line| line.contains("stopped with 1 calls still running past `shutdown_grace`")), "{lines:#?}");
}

#[test]
fn on_sighup_the_principals_are_reloaded_sessions_stay_and_a_broken_file_changes_nothing() {
    use serde_json::json;
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let hangup = || {
        let status = std::process::Command::new("kill").args(["-HUP", &served.child.id().to_string()]).status().expect("kill");
        assert!(status.success());
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ops", "version": "1"}}});
    let (_, session, _) = post(&served.url, &alice, None, &initialize);
    let session = session.expect("a session");
    post(&served.url, &alice, Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let read =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "notes.txt"}}});

    // Bob is added.
    let original = std::fs::read_to_string(&config).expect("config");
    let (bob, bob_line) = token();
    std::fs::write(&config, format!("{original}\n[[principals]]\nname = \"bob\"\n{bob_line}\nworkspace = \"app\"\nrole = \"impl\"\n"))
        .expect("config");
    hangup();
    served.wait_for(|line| line.starts_with("toolcell serve: reloaded service.toml: 2 principals"));
    assert_eq!(post(&served.url, &bob, None, &initialize).0, 200);
    // Alice's session goes on.
    let (status, _, text) = post(&served.url, &alice, Some(&session), &read);
    assert!(status == 200 && text.contains("hello"), "{status} {text}");

    // A file that does not parse changes nothing, and the operator is told why.
    std::fs::write(&config, "[workspaces\napp = ").expect("config");
    hangup();
    let lines = served.wait_for(|line| line.contains("not reloaded, the configuration in use is kept: service.toml line 1"));
    assert!(!lines.iter().any(|line| line.contains(&bob) || line.contains(&alice)), "{lines:#?}");
    assert_eq!(post(&served.url, &bob, None, &initialize).0, 200);

    // Alice is removed: her token no longer opens anything.
    std::fs::write(
        &config,
        format!("[workspaces]\napp = \"workspace\"\n\n[[principals]]\nname = \"bob\"\n{bob_line}\nworkspace = \"app\"\nrole = \"impl\"\n"),
    )
    .expect("config");
    hangup();
    served.wait_for(|line| line.starts_with("toolcell serve: reloaded service.toml: 1 principals"));
    assert_eq!(post(&served.url, &alice, Some(&session), &read).0, 401);
    assert_eq!(post(&served.url, &bob, None, &initialize).0, 200);
}

#[test]
fn json_logs_carry_the_call_id_session_and_principal_and_never_a_token() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command.arg("--cache-dir").arg(toolcell_tests::shared_cache_dir()).arg("--state-dir").arg(temp.path().join("state"));
    command.args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--config"]).arg(&config);
    let served = served::spawn(command);
    let read = call(&served.url, &alice, "read_file", serde_json::json!({"path": "notes.txt"}));
    assert!(read.contains("hello"), "{read}");
    let wrong = "tc_a-token-that-must-never-be-logged";
    assert_eq!(post(&served.url, wrong, None, &serde_json::json!({})).0, 401);
    served.wait_for(|line| line.contains("401 from"));
    let lines = served.wait_for(|line| line.contains("\"call_id\""));
    let parsed: Vec<serde_json::Value> =
        lines.iter().map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not a JSON line: {line}"))).collect();
    let call = parsed.iter().find(|line| line["target"] == "toolcell::call").expect("the call's line");
    assert_eq!(
        (&call["principal"], &call["tool"], &call["outcome"], &call["role"]),
        (&serde_json::json!("alice"), &serde_json::json!("read_file"), &serde_json::json!("ok"), &serde_json::json!("impl")),
        "{call}"
    );
    assert!(call["session"].as_str().is_some_and(|session| session.starts_with("alice:")), "{call}");
    assert!(call["call_id"].as_str().is_some_and(|id| !id.is_empty()), "{call}");
    let refused = parsed.iter().find(|line| line["target"] == "toolcell::operator").expect("the refusal's line");
    assert_eq!(refused["level"], "WARN", "{refused}");
    for line in &lines {
        assert!(!line.contains(&alice) && !line.contains(wrong), "a token in {line}");
    }
}

/// POST `body` with `headers` and alice's token: status and body.
fn post_with(url: &str, token: &str, headers: &[(&str, &str)], body: &serde_json::Value) -> (u16, String) {
    let mut response = served::post_mcp(url, token, headers, body);
    (response.status().as_u16(), response.body_mut().read_to_string().unwrap_or_default())
}

#[test]
fn the_same_service_speaks_2026_07_28_stateless_beside_2025_06_18_and_2025_03_26_sessions() {
    use serde_json::json;
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    // 2026-07-28: no `initialize`, no session; each request says who the client is.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
                      "io.modelcontextprotocol/clientInfo": {"name": "ops", "version": "1"}});
    let stateless = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "read_file", "arguments": {"path": "notes.txt"}, "_meta": meta}});
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "read_file")];
    let (status, text) = post_with(&served.url, &alice, &headers, &stateless);
    assert!(status == 200 && text.contains("hello") && text.contains("\"isError\":false"), "{status} {text}");
    // The session protocols, each negotiated by `initialize`.
    for version in ["2025-06-18", "2025-03-26"] {
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "ops", "version": "1"}}});
        let (status, text) = post_with(&served.url, &alice, &[], &initialize);
        assert!(status == 200 && text.contains(&format!("\"protocolVersion\":\"{version}\"")), "{version}: {status} {text}");
    }
}

/// A policy whose `impl` role may read everything but the files `denied` names.
fn reading_policy(denied: &str) -> String {
    format!(
        "version = 1\n[roles.impl]\ntools = [\"read_file\"]\n[[roles.impl.rules]]\nid = \"all\"\naccess = [\"read\", \"list\"]\npaths = [\"**\"]\neffect = \"allow\"\n[[roles.impl.rules]]\nid = \"closed\"\naccess = [\"read\", \"list\"]\npaths = [{denied}]\neffect = \"deny\"\n"
    )
}

#[test]
fn on_sighup_the_policy_is_reloaded_for_new_calls_sessions_stay_and_a_broken_policy_changes_nothing() {
    use serde_json::json;
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, alice) = alice_service(temp.path(), "");
    let policy = temp.path().join("policy.toml");
    std::fs::write(&policy, reading_policy("\"nothing\"")).expect("policy");
    let served = serve(&config, &temp.path().join("state"), &[std::ffi::OsStr::new("--policy"), policy.as_os_str()]);
    let hangup = || {
        let status = std::process::Command::new("kill").args(["-HUP", &served.child.id().to_string()]).status().expect("kill");
        assert!(status.success());
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ops", "version": "1"}}});
    let (_, session, _) = post(&served.url, &alice, None, &initialize);
    let session = session.expect("a session");
    post(&served.url, &alice, Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let read = |id: u64| {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "notes.txt"}}});
        let (status, _, text) = post(&served.url, &alice, Some(&session), &call);
        assert_eq!(status, 200, "{text}");
        text
    };
    let before = read(1);
    assert!(before.contains("hello") && !before.contains("denied"), "{before}");

    // The file is closed: the same session's next call is refused by the new rule.
    std::fs::write(&policy, reading_policy("\"notes.txt\"")).expect("policy");
    hangup();
    served.wait_for(|line| line.starts_with("toolcell serve: reloaded the policy policy.toml: calls that start from now on go by it"));
    let after = read(2);
    assert!(!after.contains("hello") && after.contains("closed"), "{after}");

    // A policy that does not parse changes nothing (the file stays closed), and the operator
    // is told why.
    std::fs::write(&policy, "version = 1\n[roles.impl\n").expect("policy");
    hangup();
    served.wait_for(|line| {
        line.starts_with("toolcell serve: policy not reloaded, the one in use is kept: cannot load the policy: policy.toml line 2")
    });
    let kept = read(3);
    assert!(!kept.contains("hello") && kept.contains("closed"), "{kept}");

    // A policy naming a tool that is not loaded is refused all the same, the name escaped.
    std::fs::write(&policy, reading_policy("\"nothing\"").replace("[\"read_file\"]", "[\"read_file\", \"no_such\\u001btool\"]"))
        .expect("policy");
    hangup();
    let lines = served.wait_for(|line| line.contains("policy not reloaded") && line.contains("no_such"));
    let said = lines.iter().find(|line| line.contains("no_such")).expect("the line");
    assert!(!said.contains('\u{1b}') && said.contains("policy.toml"), "{said}");
    assert!(!read(4).contains("hello"));
}

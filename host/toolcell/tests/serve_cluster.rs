//! Several `toolcell serve` hosts on one PostgreSQL store and one workspace, behind Debian's
//! `haproxy` with plain round-robin: any host serves any request of any session (read
//! versions, undo history, the MCP session itself and its expiry live in the store).
//!
//! `.ci/run` installs `haproxy` and PostgreSQL; elsewhere a test without them says so and
//! passes, unless `TOOLCELL_REQUIRE_HAPROXY` (and `TOOLCELL_REQUIRE_POSTGRES`) are set, as CI
//! sets them, when it fails. Waits are generous (a loaded 2-core CI); the expiry test's
//! margins are whole seconds.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::served;
use served::{Served, agent, alice_service, post_mcp, serve};

/// The default policy, refusing a modification of a file the session has not read.
fn refusing_policy() -> String {
    let policy = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies/default.toml")).expect("default policy");
    assert!(policy.contains("read_before_write = \"warn\""));
    policy.replace("read_before_write = \"warn\"", "read_before_write = \"refuse\"")
}

/// Where `haproxy` is, or `None` (after saying why) when it is not installed and
/// `TOOLCELL_REQUIRE_HAPROXY` is not set.
fn haproxy() -> Option<PathBuf> {
    let found =
        ["/usr/sbin/haproxy", "/usr/bin/haproxy", "/usr/local/sbin/haproxy"].into_iter().map(PathBuf::from).find(|path| path.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("TOOLCELL_REQUIRE_HAPROXY").is_none(),
            "HAProxy is required (TOOLCELL_REQUIRE_HAPROXY) but was not found: install the `haproxy` package"
        );
        let _ = writeln!(std::io::stderr(), "skipped: HAProxy is not installed; `.ci/run` installs it");
    }
    found
}

/// A free port of 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

/// The load balancer, stopped when dropped.
struct Balancer {
    child: std::process::Child,
    url: String,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The HAProxy configuration of the deployment (the book's serving page shows the same):
/// round-robin on every request, `/readyz` as the health check, a request whose connection
/// fails or that a dying host accepted and never answered retried on another host.
fn haproxy_config(port: u16, hosts: &[(&str, &str)]) -> String {
    let mut text = format!(
        "global\n    maxconn 256\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 120s\n    timeout server 120s\n    retries 3\n    retry-on conn-failure empty-response\n    option redispatch 1\n\nfrontend mcp\n    bind 127.0.0.1:{port}\n    default_backend toolcell\n\nbackend toolcell\n    balance roundrobin\n    option httpchk GET /readyz\n    http-response set-header X-Served-By %[srv_name]\n"
    );
    for (name, address) in hosts {
        text.push_str(&format!("    server {name} {address} check inter 300ms fall 1 rise 1\n"));
    }
    text
}

/// The store, the workspace, and `count` hosts (`a`, `b`, `c`) each with its own state
/// directory, behind HAProxy.
struct Deployment {
    balancer: Balancer,
    hosts: Vec<Served>,
    alice: String,
    workspace: PathBuf,
    cluster: toolcell_tests::postgres::Cluster,
    _temp: tempfile::TempDir,
}

const NAMES: [&str; 3] = ["a", "b", "c"];

impl Drop for Deployment {
    fn drop(&mut self) {
        // A failed test shows what each host said.
        if std::thread::panicking() {
            for (name, host) in NAMES.iter().zip(&self.hosts) {
                let _ = writeln!(std::io::stderr(), "host {name}:\n{}", host.lines().join("\n"));
            }
        }
    }
}

impl Deployment {
    fn start(count: usize, settings: &str) -> Option<Deployment> {
        let haproxy = haproxy()?;
        let cluster = toolcell_tests::postgres::Cluster::start()?;
        let temp = tempfile::tempdir().expect("temporary directory");
        let migrated =
            Command::new(env!("CARGO_BIN_EXE_toolcell")).args(["--store", &cluster.url, "store", "migrate"]).output().expect("migrate");
        assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));
        let (config, alice) = alice_service(temp.path(), settings);
        let policy = temp.path().join("policy.toml");
        std::fs::write(&policy, refusing_policy()).expect("policy");
        let hosts: Vec<Served> = (0..count)
            .map(|index| {
                let state = temp.path().join(format!("state-{}", NAMES[index]));
                serve(&config, &state, &[std::ffi::OsStr::new("--store"), cluster.url.as_ref(), "--policy".as_ref(), policy.as_os_str()])
            })
            .collect();
        let port = free_port();
        let named: Vec<(&str, &str)> = hosts.iter().enumerate().map(|(index, host)| (NAMES[index], host.address.as_str())).collect();
        let file = temp.path().join("haproxy.cfg");
        std::fs::write(&file, haproxy_config(port, &named)).expect("haproxy.cfg");
        let checked = Command::new(&haproxy).arg("-c").arg("-f").arg(&file).output().expect("haproxy -c");
        assert!(
            checked.status.success(),
            "haproxy -c: {}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        let child = Command::new(&haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start haproxy");
        let balancer = Balancer { child, url: format!("http://127.0.0.1:{port}/") };
        let deployment = Deployment { balancer, hosts, alice, workspace: temp.path().join("workspace"), cluster, _temp: temp };
        deployment.wait_until_every_host_is_up();
        Some(deployment)
    }

    /// Wait until HAProxy has seen every host ready: consecutive probes come from each.
    fn wait_until_every_host_is_up(&self) {
        let started = Instant::now();
        loop {
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..self.hosts.len() * 2 {
                if let Ok(response) = agent().get(&format!("{}readyz", self.balancer.url)).call()
                    && response.status() == 200
                    && let Some(name) = response.headers().get("x-served-by").and_then(|value| value.to_str().ok())
                {
                    seen.insert(name.to_owned());
                }
            }
            if seen.len() == self.hosts.len() {
                return;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "HAProxy saw only {seen:?} up");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// One answer: status, the session it names, the host HAProxy sent it to, the JSON-RPC
/// message (from JSON or from the event stream), the raw text.
struct Answer {
    status: u16,
    session: Option<String>,
    served_by: Option<String>,
    message: Value,
    text: String,
}

fn post(url: &str, token: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    let mut response = post_mcp(url, token, headers, body);
    let header = |name: &str| response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let (session, served_by) = (header("mcp-session-id"), header("x-served-by"));
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    let message = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .chain(std::iter::once(text.as_str()))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
        .unwrap_or(Value::Null);
    Answer { status, session, served_by, message, text }
}

/// An MCP session (2025-06-18) of alice, through `url`.
struct Session<'a> {
    deployment: &'a Deployment,
    id: String,
    next: std::cell::Cell<u64>,
}

impl<'a> Session<'a> {
    fn open(deployment: &'a Deployment) -> Session<'a> {
        Session::open_at(deployment, &deployment.balancer.url)
    }

    /// Open the session through `url` (the balancer's, or one host's).
    fn open_at(deployment: &'a Deployment, url: &str) -> Session<'a> {
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {"roots": {}}, "clientInfo": {"name": "cluster", "version": "1"}}});
        let opened = post(url, &deployment.alice, &[("MCP-Protocol-Version", "2025-06-18")], &initialize);
        assert_eq!(opened.status, 200, "{}", opened.text);
        let session = Session { deployment, id: opened.session.expect("a session"), next: std::cell::Cell::new(1) };
        let initialized = session.post(url, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(initialized.status, 202, "{}", initialized.text);
        session
    }

    fn post(&self, url: &str, body: &Value) -> Answer {
        post(url, &self.deployment.alice, &[("MCP-Protocol-Version", "2025-06-18"), ("Mcp-Session-Id", &self.id)], body)
    }

    /// Call `tool` through `url` (the balancer's, or one host's).
    fn call_at(&self, url: &str, tool: &str, arguments: Value) -> Answer {
        let id = self.next.get();
        self.next.set(id + 1);
        self.post(url, &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}))
    }

    /// Call `tool` through the balancer.
    fn call(&self, tool: &str, arguments: Value) -> Answer {
        self.call_at(&self.deployment.balancer.url, tool, arguments)
    }
}

/// The text of a tool call's result, and whether it is an error; panics on a JSON-RPC error
/// or a status other than 200.
fn result(answer: &Answer) -> (String, bool) {
    assert_eq!(answer.status, 200, "{}", answer.text);
    let result = &answer.message["result"];
    assert!(result.is_object(), "not a result: {}", answer.text);
    (result["content"][0]["text"].as_str().unwrap_or_default().to_owned(), result["isError"] == true)
}

fn ok(answer: &Answer) -> String {
    let (text, is_error) = result(answer);
    assert!(!is_error, "the call failed: {text}");
    text
}

#[test]
fn round_robin_serves_every_call_read_before_write_and_undo_hold_across_hosts_and_a_killed_host_changes_nothing() {
    let Some(deployment) = Deployment::start(2, "") else {
        return;
    };
    let (a, b) = (deployment.hosts[0].url.clone(), deployment.hosts[1].url.clone());
    let session = Session::open(&deployment);

    // Round-robin: every call of the session succeeds, whichever host takes it.
    let mut hosts = std::collections::BTreeMap::new();
    for _ in 0..20 {
        let answer = session.call("read_file", json!({"path": "notes.txt"}));
        assert!(ok(&answer).contains("hello"), "{}", answer.text);
        *hosts.entry(answer.served_by.clone().expect("X-Served-By")).or_insert(0) += 1;
    }
    assert_eq!(hosts.values().copied().collect::<Vec<_>>(), [10, 10], "{hosts:?}");

    // Read-before-write: a file read on A may be edited on B; one never read is refused there.
    std::fs::write(deployment.workspace.join("plan.md"), "step one\n").expect("write");
    std::fs::write(deployment.workspace.join("unread.md"), "untouched\n").expect("write");
    ok(&session.call_at(&a, "read_file", json!({"path": "plan.md"})));
    ok(&session.call_at(&b, "edit_file", json!({"path": "plan.md", "old_string": "one", "new_string": "two"})));
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("plan.md")).expect("read"), "step two\n");
    let (refused, is_error) = result(&session.call_at(&b, "edit_file", json!({"path": "unread.md", "old_string": "un", "new_string": ""})));
    assert!(is_error && refused.contains("read"), "{refused}");
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("unread.md")).expect("read"), "untouched\n");

    // Undo: an edit on A is undone on B, a small file and one past the journal's inline size
    // (its prior content comes from the store).
    ok(&session.call_at(&a, "edit_file", json!({"path": "plan.md", "old_string": "two", "new_string": "three"})));
    ok(&session.call_at(&b, "undo_edit", json!({"path": "plan.md"})));
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("plan.md")).expect("read"), "step two\n");
    let large: String = (0..2000).map(|line| format!("line {line} of a file larger than sixteen kilobytes\n")).collect();
    std::fs::write(deployment.workspace.join("large.txt"), &large).expect("write");
    ok(&session.call_at(&a, "read_file", json!({"path": "large.txt"})));
    ok(&session.call_at(&a, "edit_file", json!({"path": "large.txt", "old_string": "line 1000 of", "new_string": "LINE 1000 OF"})));
    ok(&session.call_at(&b, "undo_edit", json!({"path": "large.txt"})));
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("large.txt")).expect("read"), large);

    // Host A dies mid-session: the session goes on through B, every call answered.
    let killed = Command::new("kill").args(["-KILL", &deployment.hosts[0].child.id().to_string()]).status().expect("kill");
    assert!(killed.success());
    // HAProxy takes A out at its next health check; until then a request it sends down one of
    // its idle connections to A may come back 502 (as clients of any balancer see when a
    // backend dies). Once A is out, every call is answered by B.
    let started = Instant::now();
    let mut by_b = 0;
    while by_b < 5 {
        let probe = agent().get(&format!("{}healthz", deployment.balancer.url)).call().expect("GET /healthz");
        let served_by = probe.headers().get("x-served-by").and_then(|value| value.to_str().ok()).map(str::to_owned);
        by_b = if probe.status().as_u16() == 200 && served_by.as_deref() == Some("b") { by_b + 1 } else { 0 };
        assert!(started.elapsed() < Duration::from_secs(60), "HAProxy never took the killed host out");
    }
    for _ in 0..10 {
        let read = session.call("read_file", json!({"path": "plan.md"}));
        assert!(ok(&read).contains("step two"), "{}", read.text);
        assert_eq!(read.served_by.as_deref(), Some("b"));
    }
    ok(&session.call("edit_file", json!({"path": "plan.md", "old_string": "two", "new_string": "four"})));
    ok(&session.call("undo_edit", json!({"path": "plan.md"})));
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("plan.md")).expect("read"), "step two\n");
}

#[test]
fn the_2026_07_28_stateless_revision_reads_on_one_host_and_writes_on_another() {
    let Some(deployment) = Deployment::start(2, "") else {
        return;
    };
    let (a, b) = (deployment.hosts[0].url.clone(), deployment.hosts[1].url.clone());
    std::fs::write(deployment.workspace.join("plan.md"), "step one\n").expect("write");
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
                      "io.modelcontextprotocol/clientInfo": {"name": "cluster", "version": "1"}});
    let call = |url: &str, id: u64, tool: &str, arguments: Value| {
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments, "_meta": meta}});
        post(url, &deployment.alice, &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", tool)], &body)
    };
    // No session at all: the principal's reads are the store's, whichever host answers.
    for host in &deployment.hosts {
        assert!(host.lines()[0].contains("store postgres://toolcell@"), "{:?}", host.lines());
    }
    let read = call(&a, 1, "read_file", json!({"path": "plan.md"}));
    assert!(read.session.is_none(), "a stateless answer names no session");
    assert!(ok(&read).contains("step one"));
    ok(&call(&b, 2, "edit_file", json!({"path": "plan.md", "old_string": "one", "new_string": "two"})));
    ok(&call(&a, 3, "undo_edit", json!({"path": "plan.md"})));
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("plan.md")).expect("read"), "step one\n");
    // Through the balancer, round-robin: every call answered.
    let mut hosts = std::collections::BTreeSet::new();
    for id in 10..16 {
        let (old, new) = if id % 2 == 0 { ("one", "two") } else { ("two", "one") };
        let answer = call(&deployment.balancer.url, id, "edit_file", json!({"path": "plan.md", "old_string": old, "new_string": new}));
        ok(&answer);
        hosts.insert(answer.served_by.expect("X-Served-By"));
    }
    assert_eq!(hosts.len(), 2, "{hosts:?}");
}

#[test]
fn a_session_expires_on_every_host_at_once_and_ends_everywhere_when_deleted() {
    let Some(deployment) = Deployment::start(2, "session_idle = \"6s\"") else {
        return;
    };
    let (a, b) = (deployment.hosts[0].url.clone(), deployment.hosts[1].url.clone());
    let session = Session::open(&deployment);
    ok(&session.call_at(&a, "read_file", json!({"path": "notes.txt"})));
    std::thread::sleep(Duration::from_millis(3500));
    // Used on B: it is in use for A too, though A has not seen it for longer than it would
    // keep a session of its own.
    ok(&session.call_at(&b, "read_file", json!({"path": "notes.txt"})));
    std::thread::sleep(Duration::from_millis(3500));
    ok(&session.call_at(&a, "read_file", json!({"path": "notes.txt"})));
    // Idle past `session_idle`: gone on both hosts.
    std::thread::sleep(Duration::from_secs(8));
    for url in [&a, &b] {
        let answer = session.call_at(url, "read_file", json!({"path": "notes.txt"}));
        assert_eq!((answer.status, answer.text.as_str()), (404, "Not Found: no such session"));
    }
    // A session ended on A (HTTP DELETE) is gone on B at once.
    let other = Session::open(&deployment);
    ok(&other.call_at(&b, "read_file", json!({"path": "notes.txt"})));
    let deleted = agent()
        .delete(&a)
        .header("Authorization", &format!("Bearer {}", deployment.alice))
        .header("MCP-Protocol-Version", "2025-06-18")
        .header("Mcp-Session-Id", &other.id)
        .call()
        .unwrap_or_else(|error| panic!("DELETE: {error}: {:#?}", deployment.hosts[0].lines()));
    assert_eq!(deleted.status().as_u16(), 204);
    assert_eq!(other.call_at(&b, "read_file", json!({"path": "notes.txt"})).status, 404);
}

#[test]
fn without_the_store_writes_are_refused_and_say_why_while_reads_go_on() {
    let Some(deployment) = Deployment::start(2, "") else {
        return;
    };
    let (a, b) = (deployment.hosts[0].url.clone(), deployment.hosts[1].url.clone());
    // Opened on A: B has never seen it.
    let session = Session::open_at(&deployment, &a);
    ok(&session.call_at(&a, "read_file", json!({"path": "notes.txt"})));
    deployment.cluster.stop();
    // A host that serves the session goes on reading; a write is refused, naming the store.
    assert!(ok(&session.call_at(&a, "read_file", json!({"path": "notes.txt"}))).contains("hello"));
    let (refused, is_error) =
        result(&session.call_at(&a, "edit_file", json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"})));
    assert!(is_error && refused.contains("cannot be used") && refused.contains("writes are refused"), "{refused}");
    // The client is told no host path (the store's socket directory), user or database.
    let socket = deployment.cluster.socket_dir().display().to_string();
    assert!(!refused.contains(&socket) && !refused.contains("toolcell@"), "{refused}");
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("notes.txt")).expect("read"), "hello\n");
    deployment.hosts[0].wait_for(|line| line.contains("cannot be reached"));
    // A host that has never seen the session cannot check it: 503, saying why.
    let unknown = session.call_at(&b, "read_file", json!({"path": "notes.txt"}));
    assert_eq!(unknown.status, 503, "{}", unknown.text);
    assert!(unknown.text.contains("session store"), "{}", unknown.text);
    assert!(!unknown.text.contains(&deployment.workspace.display().to_string()));
    assert!(!unknown.text.contains(&socket) && !unknown.text.contains("toolcell@"), "{}", unknown.text);
    // Ending the session needs the store, which ends it for every host: 503, and it goes on.
    let deleted = agent()
        .delete(&a)
        .header("Authorization", &format!("Bearer {}", deployment.alice))
        .header("MCP-Protocol-Version", "2025-06-18")
        .header("Mcp-Session-Id", &session.id)
        .call()
        .expect("DELETE");
    assert_eq!(deleted.status().as_u16(), 503);
    deployment.cluster.resume();
    let started = Instant::now();
    loop {
        let answer = session.call_at(&b, "edit_file", json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"}));
        if answer.status == 200 && !result(&answer).1 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the store came back, writes did not: {}", answer.text);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(std::fs::read_to_string(deployment.workspace.join("notes.txt")).expect("read"), "bye\n");
    // The store restarted while the hosts were idle: their connections are checked before
    // use, so a session opened on A now is recorded whole, and B serves it.
    deployment.cluster.stop();
    deployment.cluster.resume();
    std::thread::sleep(Duration::from_secs(6));
    let fresh = Session::open_at(&deployment, &a);
    assert!(ok(&fresh.call_at(&b, "read_file", json!({"path": "notes.txt"}))).contains("bye"));
}

#[path = "serve_cluster/failures.rs"]
mod failures;

#[path = "serve_cluster/limits.rs"]
mod limits;

#[path = "serve_cluster/rollbacks.rs"]
mod rollbacks;

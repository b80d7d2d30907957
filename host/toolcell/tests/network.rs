//! Outbound HTTP through the `toolcell` command and its MCP server, with the example
//! component `examples/http-fetch` and a server this test starts on 127.0.0.2: names come from
//! `--resolve`, and nothing is sent beyond 127.0.0.0/8.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};

/// A plain HTTP server on 127.0.0.2 answering `hello` to each of `requests` requests; what it
/// received is kept.
fn serve(requests: usize) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.2:0").expect("binds 127.0.0.2");
    let port = listener.local_addr().expect("an address").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buffer = [0; 1024];
            while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(read) => request.extend_from_slice(&buffer[..read]),
                }
            }
            recorder.lock().expect("not poisoned").push(String::from_utf8_lossy(&request).into_owned());
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello");
        }
    });
    (port, seen)
}

fn http_fetch() -> &'static [u8] {
    toolcell_tests::network_examples::COMPONENTS.iter().find(|(name, _)| *name == "http_fetch").expect("the example is built").1
}

/// A policy letting role `fetcher` write `out/**` and reach `api.test` on `port` over http at
/// 127.0.0.2, a plugin directory with `http_fetch`, a state directory and a workspace.
struct Setup {
    base: tempfile::TempDir,
}

impl Setup {
    fn new(port: u16) -> Setup {
        let base = tempfile::tempdir().expect("base");
        let policy = format!(
            "version = 1\n[roles.fetcher]\ntools = [\"http_fetch\"]\n[[roles.fetcher.rules]]\naccess = [\"read\", \"list\", \"write\"]\npaths = [\"out/**\"]\neffect = \"allow\"\n[[roles.fetcher.network]]\nid = \"api\"\neffect = \"allow\"\nhosts = [\"api.test\"]\nschemes = [\"http\"]\nports = [{port}]\ncidrs = [\"127.0.0.2/32\"]\n"
        );
        std::fs::write(base.path().join("policy.toml"), policy).expect("write the policy");
        std::fs::create_dir(base.path().join("plugins")).expect("plugins");
        std::fs::create_dir_all(base.path().join("workspace/out")).expect("workspace");
        Setup { base }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.base.path().join(name)
    }

    /// `toolcell --resolve api.test=127.0.0.2 --resolve other.test=127.0.0.2` with this setup's
    /// policy, plugins and state.
    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
        command
            .arg("--cache-dir")
            .arg(toolcell_tests::shared_cache_dir())
            .arg("--state-dir")
            .arg(self.path("state"))
            .arg("--plugin-dir")
            .arg(self.path("plugins"))
            .arg("--policy")
            .arg(self.path("policy.toml"))
            .args(["--resolve", "api.test=127.0.0.2", "--resolve", "other.test=127.0.0.2"])
            .env_remove("TOOLCELL_CACHE_DIR")
            .env_remove("TOOLCELL_STATE_DIR");
        command
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn verify_audit(setup: &Setup) {
    let verified = setup.command().args(["audit", "verify"]).output().expect("run toolcell audit verify");
    assert!(verified.status.success(), "{}{}", text(&verified.stdout), text(&verified.stderr));
}

#[test]
fn tools_add_says_it_wants_the_network_and_the_cli_fetches_only_what_the_policy_grants() {
    let (port, seen) = serve(1);
    let setup = Setup::new(port);
    let component = setup.path("http_fetch.wasm");
    std::fs::write(&component, http_fetch()).expect("write the component");
    let added = setup.command().args(["tools", "add"]).arg(&component).output().expect("run toolcell tools add");
    let stdout = text(&added.stdout);
    assert!(added.status.success(), "{stdout}{}", text(&added.stderr));
    assert!(stdout.contains("it wants network access"), "{stdout}");
    assert!(stdout.contains(&format!("role `fetcher`: rule `api` allows http://api.test:{port} (may reach 127.0.0.2/32)")), "{stdout}");

    let workspace = setup.path("workspace");
    let call = |url: &str| {
        let args = serde_json::json!({"url": url, "path": "out/page.txt"}).to_string();
        setup
            .command()
            .args(["call", "http_fetch", &args, "--role", "fetcher", "--workspace"])
            .arg(&workspace)
            .output()
            .expect("run toolcell call")
    };
    let fetched = call(&format!("http://api.test:{port}/"));
    assert!(fetched.status.success(), "{}{}", text(&fetched.stdout), text(&fetched.stderr));
    assert_eq!(std::fs::read(workspace.join("out/page.txt")).expect("written"), b"hello");
    assert!(seen.lock().expect("not poisoned")[0].to_lowercase().contains(&format!("host: api.test:{port}")));

    let refused = call(&format!("http://other.test:{port}/"));
    assert!(!refused.status.success());
    let message = format!("{}{}", text(&refused.stdout), text(&refused.stderr));
    assert!(message.contains("hosts = [\"other.test\"]") && message.contains("[[roles.fetcher.network]]"), "{message}");
    assert!(!message.contains(&setup.base.path().to_string_lossy().into_owned()), "{message}");
    assert_eq!(seen.lock().expect("not poisoned").len(), 1, "the refused request reached nobody");
    verify_audit(&setup);
    let audit = std::fs::read_to_string(setup.path("state/audit.jsonl")).expect("the audit trail");
    assert!(audit.contains("\"operation\":\"http-request\"") && audit.contains("other.test"), "{audit}");

    let bad = setup.command().args(["--resolve", "nonsense", "tools"]).output().expect("run toolcell");
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("`--resolve nonsense`"), "{}", text(&bad.stderr));
}

#[test]
fn over_mcp_an_allowed_fetch_is_written_and_a_refusal_tells_the_agent_how_to_grant_it() {
    let (port, seen) = serve(1);
    let setup = Setup::new(port);
    std::fs::write(setup.path("plugins/http_fetch.wasm"), http_fetch()).expect("install the component");
    let workspace = setup.path("workspace");
    let mut command = setup.command();
    command.args(["mcp", "--role", "fetcher", "--workspace"]).arg(&workspace).stderr(std::process::Stdio::null());
    let (mut client, _) = toolcell_mcp::client::StdioClient::spawn(&mut command).expect("start toolcell mcp");
    let fetched = client
        .call_tool("http_fetch", &serde_json::json!({"url": format!("http://api.test:{port}/"), "path": "out/page.txt"}))
        .expect("tools/call");
    assert_eq!(fetched["isError"], false, "{fetched}");
    assert_eq!(std::fs::read(workspace.join("out/page.txt")).expect("written"), b"hello");
    let refused = client
        .call_tool("http_fetch", &serde_json::json!({"url": format!("http://api.test:{}/", port.wrapping_add(1)), "path": "out/other.txt"}))
        .expect("tools/call");
    assert_eq!(refused["isError"], true, "{refused}");
    let shown = refused.to_string();
    assert!(shown.contains(&format!("ports = [{}]", port.wrapping_add(1))), "{shown}");
    assert!(!workspace.join("out/other.txt").exists());
    client.close().expect("the server exits when stdin closes");
    assert_eq!(seen.lock().expect("not poisoned").len(), 1);
    verify_audit(&setup);
}

#[test]
fn tools_add_shows_the_declared_hosts_beside_the_policy_and_the_lines_that_grant_them() {
    let setup = Setup::new(8080);
    let policy = "version = 1\n[roles.fetcher]\ntools = [\"http_fetch\"]\n[[roles.fetcher.network]]\nid = \"docs\"\neffect = \"allow\"\nhosts = [\"docs.rs\", \"en.wikipedia.org\"]\n[roles.reader]\ntools = [\"read_file\"]\n[roles.other]\ntools = [\"*\"]\n";
    std::fs::write(setup.path("policy.toml"), policy).expect("write the policy");
    let component = setup.path("http_fetch.wasm");
    std::fs::write(&component, http_fetch()).expect("write the component");
    let add = || {
        let added = setup.command().args(["tools", "add"]).arg(&component).output().expect("run toolcell tools add");
        assert!(added.status.success(), "{}{}", text(&added.stdout), text(&added.stderr));
        assert!(!text(&added.stderr).contains("warning"), "{}", text(&added.stderr));
        text(&added.stdout)
    };
    let stdout = add();
    assert!(
        stdout.contains(
            "\nit declares the hosts it wants (declaring grants nothing: the policy decides every request):\n  https://docs.rs\n    role `fetcher`: allowed by rule `docs` (policy line 4)\n    role `other`: refused (no network rule allows it)\n  https://*.wikipedia.org\n    role `fetcher`: refused (no network rule allows it)\n    role `other`: refused (no network rule allows it)\n  https://raw.githubusercontent.com\n    role `fetcher`: refused (no network rule allows it)\n    role `other`: refused (no network rule allows it)\n"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("role `reader`"), "only roles that may call the tool: {stdout}");
    let (_, grant) = stdout.split_once("add to the policy:\n\n").expect("the lines that grant the rest");
    assert_eq!(
        grant,
        "[[roles.fetcher.network]]\nid = \"fetcher-http_fetch-declared\"\neffect = \"allow\"\nhosts = [\"*.wikipedia.org\", \"raw.githubusercontent.com\"]\ntools = [\"http_fetch\"]\n\n\
         [[roles.other.network]]\nid = \"other-http_fetch-declared\"\neffect = \"allow\"\nhosts = [\"docs.rs\", \"*.wikipedia.org\", \"raw.githubusercontent.com\"]\ntools = [\"http_fetch\"]\n"
    );

    // The lines work: with them in the policy, every declared host is allowed.
    std::fs::write(setup.path("policy.toml"), format!("{policy}{grant}")).expect("extend the policy");
    let removed = setup.command().args(["tools", "remove", "http_fetch"]).output().expect("run toolcell tools remove");
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    let stdout = add();
    assert!(
        stdout.contains("  https://*.wikipedia.org\n    role `fetcher`: allowed by rule `fetcher-http_fetch-declared` (policy line "),
        "{stdout}"
    );
    assert!(
        stdout.contains("  https://raw.githubusercontent.com\n    role `fetcher`: allowed by rule `fetcher-http_fetch-declared`"),
        "{stdout}"
    );
    assert!(stdout.contains("  https://docs.rs\n    role `fetcher`: allowed by rule `docs` (policy line 4)\n    role `other`: allowed by rule `other-http_fetch-declared`"), "{stdout}");
    assert!(!stdout.contains("refused") && !stdout.contains("add to the policy"), "{stdout}");
}

/// The example with its `toolcell:network` section renamed: it declares nothing.
fn undeclared() -> Vec<u8> {
    let mut wasm = http_fetch().to_vec();
    let at = wasm.windows(16).position(|window| window == b"toolcell:network").expect("the example declares its hosts");
    wasm[at + 9] = b'N';
    wasm
}

#[test]
fn tools_add_warns_about_a_network_tool_that_declares_no_hosts() {
    let setup = Setup::new(8080);
    let component = setup.path("undeclared.wasm");
    std::fs::write(&component, undeclared()).expect("write the component");
    let added = setup.command().args(["tools", "add"]).arg(&component).output().expect("run toolcell tools add");
    let (stdout, stderr) = (text(&added.stdout), text(&added.stderr));
    assert!(added.status.success(), "a warning, not a refusal: {stdout}{stderr}");
    assert!(
        stderr.contains(
            "warning: `http_fetch` imports `wasi:http/outgoing-handler` but declares no hosts: add a `toolcell:network` custom section"
        ),
        "{stderr}"
    );
    assert!(stdout.contains("it declares no hosts (no `toolcell:network` section)"), "{stdout}");
    assert!(stdout.contains("it wants network access"), "{stdout}");
}

#[test]
fn tools_add_gives_a_role_placeholder_when_no_role_may_call_the_tool_yet() {
    let setup = Setup::new(8080);
    std::fs::write(setup.path("policy.toml"), "version = 1\n[roles.reader]\ntools = [\"read_file\"]\n").expect("write the policy");
    let component = setup.path("http_fetch.wasm");
    std::fs::write(&component, http_fetch()).expect("write the component");
    let added = setup.command().args(["tools", "add"]).arg(&component).output().expect("run toolcell tools add");
    let stdout = text(&added.stdout);
    assert!(added.status.success(), "{stdout}{}", text(&added.stderr));
    assert!(stdout.contains("  no host: every request is refused until a `[[roles.ROLE.network]]` rule allows it"), "{stdout}");
    assert!(
        stdout.ends_with(
            "  https://raw.githubusercontent.com\nno role of the policy may call `http_fetch` yet; give it to a role, and grant that role the hosts with:\n\n[[roles.ROLE.network]]\nid = \"ROLE-http_fetch-declared\"\neffect = \"allow\"\nhosts = [\"docs.rs\", \"*.wikipedia.org\", \"raw.githubusercontent.com\"]\ntools = [\"http_fetch\"]\n"
        ),
        "{stdout}"
    );
}

#[test]
fn tools_update_shows_the_declared_hosts_a_new_build_drops() {
    let setup = Setup::new(8080);
    std::fs::write(setup.path("plugins/http_fetch.wasm"), http_fetch()).expect("install the component");
    let build = setup.path("undeclared.wasm");
    std::fs::write(&build, undeclared()).expect("write the new build");
    let updated = setup.command().args(["tools", "update", "http_fetch"]).arg(&build).output().expect("run toolcell tools update");
    let (stdout, stderr) = (text(&updated.stdout), text(&updated.stderr));
    assert!(updated.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "  declared hosts: - https://docs.rs\n  declared hosts: - https://*.wikipedia.org\n  declared hosts: - https://raw.githubusercontent.com\n"
        ),
        "{stdout}"
    );
    assert!(stderr.contains("declares no hosts"), "{stderr}");
}

/// The example declaring `text` instead of its own hosts (a top-level `toolcell:network`
/// section appended).
fn declaring(text: &str) -> Vec<u8> {
    let mut wasm = undeclared();
    wasm.push(0);
    let body = [&[16u8][..], b"toolcell:network", text.as_bytes()].concat();
    wasm.extend(leb128(body.len()));
    wasm.extend(body);
    wasm
}

fn leb128(mut value: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            bytes.push(byte);
            return bytes;
        }
        bytes.push(byte | 0x80);
    }
}

/// `tools add` judges a declared host as a request to it would be: a literal loopback address
/// is refused by the address check though a rule names it, a pattern shows the deny rules
/// inside it, and the rule ids it suggests avoid every id of the policy, path rules included.
#[test]
fn tools_add_judges_declared_hosts_as_their_requests_would_be() {
    let setup = Setup::new(8080);
    let policy = "version = 1\n[roles.fetcher]\ntools = [\"http_fetch\"]\n[[roles.fetcher.rules]]\nid = \"fetcher-http_fetch-declared\"\naccess = [\"read\"]\npaths = [\"out/**\"]\neffect = \"allow\"\n[[roles.fetcher.network]]\nid = \"lo\"\neffect = \"allow\"\nhosts = [\"127.0.0.1\"]\nschemes = [\"http\"]\nports = [18081]\n[[roles.fetcher.network]]\nid = \"ex\"\neffect = \"allow\"\nhosts = [\"*.example.com\"]\n[[roles.fetcher.network]]\nid = \"evil\"\neffect = \"deny\"\nhosts = [\"evil.example.com\"]\n";
    std::fs::write(setup.path("policy.toml"), policy).expect("write the policy");
    let component = setup.path("declaring.wasm");
    std::fs::write(&component, declaring("http://127.0.0.1:18081\nhttps://*.example.com\nhttps://docs.rs\n")).expect("write");
    let added = setup.command().args(["tools", "add"]).arg(&component).output().expect("run toolcell tools add");
    let stdout = text(&added.stdout);
    assert!(added.status.success(), "{stdout}{}", text(&added.stderr));
    assert!(stdout.contains("  http://127.0.0.1:18081\n    role `fetcher`: refused: `127.0.0.1` resolves to 127.0.0.1"), "{stdout}");
    assert!(stdout.contains("add `cidrs = [\"127.0.0.1/32\"]` to that rule"), "{stdout}");
    assert!(
        stdout.contains(
            "  https://*.example.com\n    role `fetcher`: allowed by rule `ex` (policy line 15)\n      except the names the deny rule `evil` (policy line 19) refuses\n"
        ),
        "{stdout}"
    );
    let (_, grant) = stdout.split_once("add to the policy:\n\n").expect("the lines that grant docs.rs");
    assert!(grant.starts_with("[[roles.fetcher.network]]\nid = \"fetcher-http_fetch-declared-2\"\n"), "{grant}");
    assert!(grant.contains("hosts = [\"docs.rs\"]") && !grant.contains("127.0.0.1"), "{grant}");
    // The lines load.
    std::fs::write(setup.path("policy.toml"), format!("{policy}{grant}")).expect("extend the policy");
    let listed = setup.command().arg("tools").output().expect("run toolcell tools");
    assert!(listed.status.success(), "{}", text(&listed.stderr));
}

/// A declaration may not name a pattern that covers addresses or a whole top-level domain.
#[test]
fn a_declared_pattern_over_addresses_or_a_top_level_domain_is_refused() {
    for (declared, expected) in [("http://*.1:18081\n", "would cover addresses"), ("https://*.com\n", "covers a whole top-level domain")] {
        let setup = Setup::new(8080);
        let component = setup.path("declaring.wasm");
        std::fs::write(&component, declaring(declared)).expect("write");
        let added = setup.command().args(["tools", "add"]).arg(&component).output().expect("run toolcell tools add");
        let output = format!("{}{}", text(&added.stdout), text(&added.stderr));
        assert!(output.contains(expected), "{declared}: {output}");
    }
}

/// A component nested deeper than any toolchain builds is refused before it is compiled
/// (compiling 20,000 levels took wasmtime 8 GiB), naming the bound.
#[test]
fn a_component_nested_too_deep_is_refused_before_it_is_compiled() {
    let mut nested = b"\0asm\x0d\0\x01\0".to_vec();
    for _ in 0..40 {
        let mut outer = b"\0asm\x0d\0\x01\0".to_vec();
        outer.push(4);
        outer.extend(leb128(nested.len()));
        outer.extend(&nested);
        nested = outer;
    }
    let mut wasm = http_fetch().to_vec();
    wasm.push(4);
    wasm.extend(leb128(nested.len()));
    wasm.extend(&nested);
    let setup = Setup::new(8080);
    let component = setup.path("deep.wasm");
    std::fs::write(&component, wasm).expect("write");
    let added = setup.command().args(["tools", "add"]).arg(&component).output().expect("run toolcell tools add");
    assert!(!added.status.success());
    assert!(text(&added.stderr).contains("it nests components more than 16 deep"), "{}", text(&added.stderr));
}

//! The workspace as MCP resources, driven by the official clients: the Python SDK (in the
//! virtual environment `mcp.rs` creates under the target directory) and the TypeScript SDK
//! (installed by `.ci/mcp-conformance`; in CI, where `TOOLCELL_REQUIRE_CONFORMANCE=1`, a
//! missing one fails these tests), each over stdio (`toolcell mcp`) and Streamable HTTP
//! (`toolcell serve`). Both run the same scenario (`tests/mcp-clients/resources.{py,mjs}`) and
//! print the same report, checked here.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::served;

use crate::python_mcp;
use python_mcp::python_with_mcp;

/// A path `.ci/mcp-conformance` printed, from the environment variable `name`; `None` when it
/// is not set, which fails the test where `TOOLCELL_REQUIRE_CONFORMANCE=1` (CI).
fn node_tool(name: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(name) {
        return Some(PathBuf::from(path));
    }
    let required = std::env::var_os("TOOLCELL_REQUIRE_CONFORMANCE").is_some_and(|value| value == "1");
    assert!(!required, "TOOLCELL_REQUIRE_CONFORMANCE=1 but {name} is not set (.ci/mcp-conformance prints it)");
    let _ = writeln!(std::io::stderr(), "SKIPPED: set {name} (from .ci/mcp-conformance) to run this test");
    None
}

fn client_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp-clients").join(name)
}

/// The fixture: text, an image, 70 files to page through, a file the `impl` role may not
/// read (`.env`, by the default policy), and the state directory inside the workspace (a
/// hidden host-owned path). Returns the workspace.
fn workspace(root: &Path) -> PathBuf {
    let workspace = root.join("workspace");
    std::fs::create_dir_all(workspace.join("src")).expect("src");
    std::fs::create_dir_all(workspace.join("many")).expect("many");
    // Line ends as written, and no final newline: a resource is the file's exact bytes.
    std::fs::write(workspace.join("notes.txt"), "hello\r\nworld").expect("write");
    // Not text and not an image: 600 KiB, more than one raw window of `read_file`.
    std::fs::write(workspace.join("data.bin"), binary_fixture()).expect("write");
    std::fs::write(workspace.join("img.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").expect("write");
    std::fs::write(workspace.join("src/main.rs"), "fn main() {}\n").expect("write");
    std::fs::write(workspace.join(".env"), "TOKEN=secret\n").expect("write");
    for index in 0..70 {
        std::fs::write(workspace.join(format!("many/f{index:02}.txt")), format!("{index}\n")).expect("write");
    }
    workspace
}

/// Bytes that are not UTF-8, 600 KiB of them.
fn binary_fixture() -> Vec<u8> {
    (0..600 * 1024_u32).map(|index| (index.wrapping_mul(2_654_435_761) >> 24) as u8).collect()
}

/// The stdio server's command line for `workspace` (state inside it, hidden).
fn stdio_command(workspace: &Path, session: &str) -> Vec<String> {
    let cache = toolcell_tests::shared_cache_dir();
    let state = workspace.join(".toolcell-state");
    [env!("CARGO_BIN_EXE_toolcell"), "--cache-dir", path(&cache), "--state-dir", path(&state), "mcp", "--workspace", path(workspace)]
        .into_iter()
        .map(str::to_owned)
        .chain(["--role", "impl", "--session", session].map(str::to_owned))
        .collect()
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

/// Start `toolcell serve` on `workspace` for one `impl` principal; its token.
fn serve(root: &Path, workspace: &Path) -> (served::Served, String) {
    let (token, line) = served::token();
    let config = root.join("service.toml");
    std::fs::write(
        &config,
        format!(
            "[workspaces]\napp = {:?}\n\n[[principals]]\nname = \"alice\"\n{line}\nworkspace = \"app\"\nrole = \"impl\"\n",
            path(workspace)
        ),
    )
    .expect("config");
    (served::serve(&config, &workspace.join(".toolcell-state"), &[] as &[&str]), token)
}

fn run(mut command: Command, what: &str) -> Value {
    let output = command.output().unwrap_or_else(|error| panic!("run the {what}: {error}"));
    assert!(output.status.success(), "the {what} failed:\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stdout)))
}

fn python(mode: &str, workspace: &Path, rest: &[String]) -> Value {
    let mut command = Command::new(python_with_mcp());
    command.arg(client_script("resources.py")).arg(mode).arg(workspace).args(rest);
    run(command, "Python client")
}

fn typescript(node: &Path, sdk: &Path, mode: &str, workspace: &Path, rest: &[String]) -> Value {
    let mut command = Command::new(node);
    command.arg(client_script("resources.mjs")).arg(sdk).arg(mode).arg(workspace).args(rest);
    run(command, "TypeScript client")
}

/// What every client must have seen, whatever the transport.
fn check(client: &str, report: &Value) {
    let resources = &report["capabilities"]["resources"];
    assert_eq!((resources["subscribe"].as_bool(), resources["listChanged"].as_bool()), (Some(true), Some(true)), "{client}: {report}");
    assert!(report["capabilities"]["completions"].is_object(), "{client}: {report}");

    // Every readable file, in pages of 50, and nothing else.
    assert_eq!(report["pages"], json!([50, 24]), "{client}");
    let listed: Vec<&str> =
        report["resources"].as_array().expect("resources").iter().map(|entry| entry["uri"].as_str().expect("uri")).collect();
    let mut expected = vec!["toolcell://workspace/data.bin".to_owned(), "toolcell://workspace/img.png".to_owned()];
    expected.extend((0..70).map(|index| format!("toolcell://workspace/many/f{index:02}.txt")));
    expected.extend(["toolcell://workspace/notes.txt".to_owned(), "toolcell://workspace/src/main.rs".to_owned()]);
    assert_eq!(listed, expected, "{client}: neither `.env` nor the state directory is listed");
    let notes = report["resources"].as_array().expect("resources").iter().find(|entry| entry["name"] == "notes.txt").expect("notes.txt");
    assert_eq!(
        *notes,
        json!({ "uri": "toolcell://workspace/notes.txt", "name": "notes.txt", "mimeType": "text/plain", "size": 12 }),
        "{client}"
    );
    assert_eq!(report["templates"], json!(["toolcell://workspace/{+path}"]), "{client}");

    // Text as text, the image as a base64 blob.
    assert_eq!(
        report["text"],
        json!([{ "uri": "toolcell://workspace/notes.txt", "mimeType": "text/plain", "text": "hello\r\nworld" }]),
        "{client}"
    );
    assert_eq!(
        report["image"],
        json!([{ "uri": "toolcell://workspace/img.png", "mimeType": "image/png", "blob": "iVBORw0KGgoAAAANSUhEUg==" }]),
        "{client}"
    );

    // Any other binary file as a base64 blob of its exact bytes.
    let binary = &report["binary"][0];
    assert_eq!(
        (&binary["uri"], &binary["mimeType"]),
        (&json!("toolcell://workspace/data.bin"), &json!("application/octet-stream")),
        "{client}"
    );
    let blob = binary["blob"].as_str().expect("a blob");
    assert_eq!(blob.len(), (600 * 1024_usize).div_ceil(3) * 4, "{client}");
    assert_eq!(toolcell_tests::sha256_hex(&base64_decode(blob)), toolcell_tests::sha256_hex(&binary_fixture()), "{client}");

    // Denied, hidden and foreign answer exactly as missing: the same code, the same message
    // with only the URI changed, the URI in `data`; for reads and subscriptions alike.
    let shape = |label: &str, operation: &str| {
        let case = &report["errors"][label];
        let uri = case["uri"].as_str().expect("uri");
        let error = &case[operation];
        assert_eq!(error["data"], json!({ "uri": uri }), "{client} {label} {operation}: {error}");
        (error["code"].clone(), error["message"].as_str().expect("message").replace(uri, "URI"))
    };
    for operation in ["read", "subscribe"] {
        let missing = shape("missing", operation);
        assert_eq!(missing.0, -32602, "{client}");
        for label in ["denied", "hidden", "foreign"] {
            assert_eq!(shape(label, operation), missing, "{client}: {label} {operation} answers as missing");
        }
    }
    // Nothing about the denied file; one update for the outside edit; the list changed once
    // for the new file; nothing after unsubscribing.
    assert_eq!(report["after_denied_edits"], json!([]), "{client}");
    assert_eq!(report["after_edit"], json!([{ "updated": "toolcell://workspace/notes.txt" }]), "{client}");
    assert_eq!(report["reread"], "edited outside\n", "{client}");
    assert_eq!(report["after_create"], json!([{ "list_changed": true }]), "{client}");
    assert_eq!(report["after_unsubscribe"], json!([]), "{client}");

    // Completion: readable files only.
    let completions = &report["completions"];
    assert_eq!(completions["src/"]["values"], json!(["src/main.rs"]), "{client}");
    assert_eq!(completions["."]["values"], json!([]), "{client}: no `.env`, no state directory");
    assert_eq!(completions["many/f0"]["values"].as_array().expect("values").len(), 10, "{client}");
    let all = completions[""]["values"].as_array().expect("values");
    assert_eq!(completions[""]["total"], 75, "{client}: the 74 files and fresh.txt");
    assert!(all.iter().all(|value| !value.as_str().expect("value").starts_with('.')), "{client}: {all:?}");
    assert!(!all.iter().any(|value| value == "secret.pem"), "{client}: {all:?}");
}

/// The governed path: each read is an audited `read_file` call, and the refused read of
/// `.env` is audited with the rule that refused it.
fn check_audited(workspace: &Path) {
    let trail = std::fs::read_to_string(workspace.join(".toolcell-state/audit.jsonl")).expect("audit trail");
    let records: Vec<Value> = trail.lines().map(|line| serde_json::from_str(line).expect("record")).collect();
    // Allowed accesses are counted on their call's record; refused ones have their own.
    let reads =
        records.iter().filter(|record| record["kind"] == "call" && record["tool"] == "read_file" && record["outcome"] == "ok").count();
    assert!(reads >= 3, "the text, the image and the re-read are audited `read_file` calls ({reads})");
    assert!(
        records.iter().any(|record| record["kind"] == "fs"
            && record["tool"] == "read_file"
            && record["path"] == ".env"
            && record["decision"] == "deny"
            && record["rule"] == "impl-secrets-unreadable"),
        "the refused read of `.env` is in the trail with its rule"
    );
}

#[test]
fn the_python_sdk_lists_reads_subscribes_and_completes_over_stdio_and_http() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let stdio_workspace = workspace(&temp.path().join("stdio"));
    let report = python("stdio", &stdio_workspace, &stdio_command(&stdio_workspace, "py-resources"));
    check("python stdio", &report);
    check_audited(&stdio_workspace);

    let http_workspace = workspace(&temp.path().join("http"));
    let (served, token) = serve(&temp.path().join("http"), &http_workspace);
    let report = python("http", &http_workspace, &[served.url.clone(), token]);
    check("python http", &report);
    check_audited(&http_workspace);
}

#[test]
fn the_typescript_sdk_lists_reads_subscribes_and_completes_over_stdio_and_http() {
    let Some(node) = node_tool("TOOLCELL_CONFORMANCE_NODE") else { return };
    let Some(sdk) = node_tool("TOOLCELL_TS_SDK") else { return };
    let temp = tempfile::tempdir().expect("temporary directory");
    let stdio_workspace = workspace(&temp.path().join("stdio"));
    let report = typescript(&node, &sdk, "stdio", &stdio_workspace, &stdio_command(&stdio_workspace, "ts-resources"));
    check("typescript stdio", &report);

    let http_workspace = workspace(&temp.path().join("http"));
    let (served, token) = serve(&temp.path().join("http"), &http_workspace);
    let report = typescript(&node, &sdk, "http", &http_workspace, &[served.url.clone(), token]);
    check("typescript http", &report);
}

/// A role that may not read files is served no resources: the capability is not declared,
/// and the methods are not found.
#[test]
fn a_role_without_the_reading_tools_has_no_resources() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = workspace(temp.path());
    let policy = temp.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[roles.writer]\ntools = [\"write_file\"]\n[[roles.writer.rules]]\naccess = [\"write\"]\npaths = [\"**\"]\neffect = \"allow\"\n",
    )
    .expect("policy");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .arg("--cache-dir")
        .arg(toolcell_tests::shared_cache_dir())
        .arg("--state-dir")
        .arg(temp.path().join("state"))
        .arg("--policy")
        .arg(&policy)
        .args(["mcp", "--workspace"])
        .arg(&workspace)
        .args(["--role", "writer"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start toolcell mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut exchange = |message: Value| -> Option<Value> {
        writeln!(stdin, "{message}").expect("send");
        message.get("id")?;
        let mut line = String::new();
        stdout.read_line(&mut line).expect("receive");
        Some(serde_json::from_str(&line).expect("a JSON-RPC answer"))
    };
    let initialized = exchange(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}))
    .expect("answer");
    let capabilities = &initialized["result"]["capabilities"];
    assert!(capabilities["tools"].is_object() && capabilities.get("resources").is_none(), "{initialized}");
    assert!(capabilities.get("completions").is_none(), "{initialized}");
    exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for (id, method, params) in [
        (2, "resources/list", json!({})),
        (3, "resources/read", json!({"uri": "toolcell://workspace/notes.txt"})),
        (4, "resources/subscribe", json!({"uri": "toolcell://workspace/notes.txt"})),
    ] {
        let answer = exchange(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).expect("answer");
        assert_eq!(answer["error"]["code"], -32601, "{method}: {answer}");
    }
    drop(stdin);
    let _ = child.wait();
}

/// Run `tests/mcp-clients/roots.py` in `mode` with the client's `roots` against `toolcell mcp`
/// started with `server` (after the global options).
fn roots_client(mode: &str, roots: &[String], state: &Path, server: &[&str]) -> Value {
    let mut command = Command::new(python_with_mcp());
    command.arg(client_script("roots.py")).arg(mode).args(roots).arg("--").arg(env!("CARGO_BIN_EXE_toolcell"));
    command.arg("--cache-dir").arg(toolcell_tests::shared_cache_dir()).arg("--state-dir").arg(state).arg("mcp").args(server);
    run(command, "Python roots client")
}

fn file_uri(path: &Path) -> String {
    format!("file://{}", path.to_str().expect("a UTF-8 temporary path").replace(' ', "%20"))
}

/// Without `--workspace`, the workspace is the client's first root, and follows it when the
/// roots change.
#[test]
fn the_clients_first_root_is_the_workspace_and_is_followed() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (first, next) = (temp.path().join("first"), temp.path().join("next"));
    std::fs::create_dir_all(&first).expect("first");
    std::fs::create_dir_all(&next).expect("next");
    std::fs::write(first.join("notes.txt"), "from the first root\n").expect("write");
    std::fs::write(next.join("notes.txt"), "from the next root\n").expect("write");
    std::fs::write(next.join("other.txt"), "other\n").expect("write");
    let report = roots_client("follow", &[file_uri(&first), file_uri(&next)], &temp.path().join("state"), &["--role", "impl"]);
    assert_eq!(report["first"], json!(["toolcell://workspace/notes.txt"]), "{report}");
    assert_eq!(report["read"], "     1\tfrom the first root", "{report}");
    assert_eq!(report["next"], json!(["toolcell://workspace/notes.txt", "toolcell://workspace/other.txt"]), "{report}");
    assert_eq!(report["seen"], json!(["list_changed"]), "{report}");
}

/// The same with the TypeScript SDK's client.
#[test]
fn the_typescript_sdk_sets_and_changes_the_workspace_through_roots() {
    let Some(node) = node_tool("TOOLCELL_CONFORMANCE_NODE") else { return };
    let Some(sdk) = node_tool("TOOLCELL_TS_SDK") else { return };
    let temp = tempfile::tempdir().expect("temporary directory");
    let (first, next) = (temp.path().join("first"), temp.path().join("next"));
    std::fs::create_dir_all(&first).expect("first");
    std::fs::create_dir_all(&next).expect("next");
    std::fs::write(first.join("notes.txt"), "from the first root\n").expect("write");
    std::fs::write(next.join("notes.txt"), "from the next root\n").expect("write");
    std::fs::write(next.join("other.txt"), "other\n").expect("write");
    let mut command = Command::new(node);
    command.arg(client_script("roots.mjs")).arg(sdk).arg(file_uri(&first)).arg(file_uri(&next)).arg("--");
    command.arg(env!("CARGO_BIN_EXE_toolcell")).arg("--cache-dir").arg(toolcell_tests::shared_cache_dir());
    command.arg("--state-dir").arg(temp.path().join("state")).args(["mcp", "--role", "impl"]);
    let report = run(command, "TypeScript roots client");
    assert_eq!(report["first"], json!(["toolcell://workspace/notes.txt"]), "{report}");
    assert_eq!(report["read"], "     1\tfrom the first root", "{report}");
    assert_eq!(report["next"], json!(["toolcell://workspace/notes.txt", "toolcell://workspace/other.txt"]), "{report}");
    assert_eq!(report["seen"], json!(["list_changed"]), "{report}");
}

/// A root that is not a local directory is refused, saying why; a client without roots is
/// told to give `--workspace`.
#[test]
fn a_root_that_is_not_a_local_directory_is_refused_and_without_roots_the_workspace_is_asked_for() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let file = temp.path().join("notes.txt");
    std::fs::write(&file, "a file, not a directory\n").expect("write");
    let state = temp.path().join("state");
    let repository = std::fs::canonicalize(temp.path()).expect("canonical").join("repo");
    std::fs::create_dir_all(repository.join(".git")).expect("a repository");
    std::fs::create_dir_all(repository.join("docs")).expect("docs");
    for (root, why) in [
        ("file://fileserver/share".to_owned(), "it names another host"),
        (file_uri(&file), "it is not a directory"),
        (file_uri(&temp.path().join("missing")), "no such directory"),
        // The policy's paths start at the workspace: a root inside a project would move them.
        (file_uri(&repository.join("docs")), "it is inside the git repository"),
        (file_uri(&repository.join(".git")), "it is in a `.git` directory"),
        ("file:///".to_owned(), "it holds projects rather than being one"),
        ("file:///proc/self".to_owned(), "it is in `/proc`, a directory of the machine"),
    ] {
        let report = roots_client("refused", std::slice::from_ref(&root), &state, &[]);
        for request in ["list", "call"] {
            let message = report[request]["message"].as_str().unwrap_or_else(|| panic!("{root} {request}: {report}"));
            assert!(message.starts_with(&format!("root `{root}` is refused: {why}")), "{root} {request}: {message}");
        }
    }
    let report = roots_client("none", &[], &state, &[]);
    for request in ["list", "call"] {
        let message = report[request]["message"].as_str().unwrap_or_else(|| panic!("{request}: {report}"));
        assert!(message.contains("declares no `roots`") && message.contains("--workspace DIR"), "{request}: {message}");
    }
}

/// With `--workspace`, roots are advisory: a root elsewhere is never served.
#[test]
fn with_a_workspace_given_a_root_elsewhere_is_never_served() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (given, elsewhere) = (temp.path().join("given"), temp.path().join("elsewhere"));
    std::fs::create_dir_all(&given).expect("given");
    std::fs::create_dir_all(&elsewhere).expect("elsewhere");
    std::fs::write(given.join("notes.txt"), "given\n").expect("write");
    std::fs::write(elsewhere.join("notes.txt"), "elsewhere\n").expect("write");
    std::fs::write(elsewhere.join("secret.txt"), "elsewhere\n").expect("write");
    let report =
        roots_client("advisory", &[file_uri(&elsewhere)], &temp.path().join("state"), &["--workspace", path(&given), "--role", "impl"]);
    assert_eq!(report["first"], json!(["toolcell://workspace/notes.txt"]), "{report}");
    assert_eq!(report["read"], "     1\tgiven", "{report}");
}

/// One connection holds at most 256 subscriptions; the next is refused saying what to do,
/// and unsubscribing makes room.
#[test]
fn subscriptions_are_capped_per_connection_with_a_clear_error() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    for index in 0..257 {
        std::fs::write(workspace.join(format!("f{index:03}.txt")), "x\n").expect("write");
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command
        .arg("--cache-dir")
        .arg(toolcell_tests::shared_cache_dir())
        .arg("--state-dir")
        .arg(temp.path().join("state"))
        .args(["mcp", "--role", "impl", "--workspace"])
        .arg(&workspace)
        .stderr(Stdio::null());
    let (mut client, _) = toolcell_mcp::client::StdioClient::spawn(&mut command).expect("start toolcell mcp");
    let uri = |index: usize| format!("toolcell://workspace/f{index:03}.txt");
    for index in 0..256 {
        client.request("resources/subscribe", json!({ "uri": uri(index) })).expect("subscribe");
    }
    // Subscribing again to one already held takes no more room.
    client.request("resources/subscribe", json!({ "uri": uri(0) })).expect("subscribe again");
    let refused = client.request("resources/subscribe", json!({ "uri": uri(256) })).expect_err("the 257th").to_string();
    assert!(
        refused.contains("subscribed to 256 resources, the most it may be")
            && refused.contains("`resources/unsubscribe`")
            && refused.contains(&format!("`{}`", uri(256))),
        "{refused}"
    );
    client.request("resources/unsubscribe", json!({ "uri": uri(0) })).expect("unsubscribe");
    client.request("resources/subscribe", json!({ "uri": uri(256) })).expect("room again");
    client.close().expect("the server exits when stdin closes");
}

/// The bytes of standard base64 `text`.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |byte: u8| match byte {
        b'A'..=b'Z' => byte - b'A',
        b'a'..=b'z' => byte - b'a' + 26,
        b'0'..=b'9' => byte - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {byte}"),
    };
    let mut bytes = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let digits: Vec<u8> = chunk.iter().copied().filter(|&byte| byte != b'=').map(value).collect();
        let word = digits.iter().enumerate().fold(0_u32, |word, (index, digit)| word | u32::from(*digit) << (18 - 6 * index));
        bytes.extend(word.to_be_bytes()[1..digits.len()].iter());
    }
    bytes
}

#[test]
fn a_file_with_several_hard_links_is_neither_listed_as_a_resource_nor_completed() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("alone.txt"), "one name\n").expect("write");
    std::fs::write(workspace.join("linked.txt"), "two names\n").expect("write");
    std::fs::hard_link(workspace.join("linked.txt"), workspace.join("linked-again.txt")).expect("hard link");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .arg("--cache-dir")
        .arg(toolcell_tests::shared_cache_dir())
        .arg("--state-dir")
        .arg(temp.path().join("state"))
        .args(["mcp", "--workspace"])
        .arg(&workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start toolcell mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut exchange = |message: Value| -> Option<Value> {
        writeln!(stdin, "{message}").expect("send");
        message.get("id")?;
        let mut line = String::new();
        stdout.read_line(&mut line).expect("receive");
        Some(serde_json::from_str(&line).expect("a JSON-RPC answer"))
    };
    exchange(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}))
    .expect("answer");
    exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let listed = exchange(json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {}})).expect("answer");
    let uris: Vec<&str> =
        listed["result"]["resources"].as_array().expect("resources").iter().filter_map(|resource| resource["uri"].as_str()).collect();
    // Every read of it is refused, under either name: it is not offered.
    assert_eq!(uris, ["toolcell://workspace/alone.txt"], "{listed}");
    let subscribed =
        exchange(json!({"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe", "params": {"uri": "toolcell://workspace/linked.txt"}}))
            .expect("answer");
    assert!(subscribed.get("error").is_some(), "{subscribed}");
    // Nor is it completed.
    let completed = exchange(json!({"jsonrpc": "2.0", "id": 4, "method": "completion/complete", "params": {
        "ref": {"type": "ref/resource", "uri": "toolcell://workspace/{+path}"},
        "argument": {"name": "path", "value": ""}}}))
    .expect("answer");
    assert_eq!(completed["result"]["completion"]["values"], json!(["alone.txt"]), "{completed}");
    drop(stdin);
    let _ = child.wait();
}

//! `toolcell mcp` driven by a real MCP client: the official Python SDK, in a virtual
//! environment the test creates once under the target directory (set `TOOLCELL_TEST_PYTHON` to
//! use another interpreter that has `mcp` installed).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::python_mcp;
use python_mcp::python_with_mcp;

/// Run the Python client `script` (in `tests/`) against `toolcell mcp` on `workspace`, with its
/// state in `state`; what it printed, as JSON.
fn run_client(script: &str, workspace: &Path, state: &Path) -> serde_json::Value {
    let output = Command::new(python_with_mcp())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(script))
        .arg(env!("CARGO_BIN_EXE_toolcell"))
        .arg(workspace)
        .arg(state)
        .output()
        .expect("run the Python MCP client");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the client failed:\n{stderr}");
    serde_json::from_slice(&output.stdout).expect("the client prints JSON")
}

#[test]
fn the_python_sdk_lists_calls_and_sees_denials_as_is_error() {
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::create_dir_all(workspace.path().join("src")).expect("mkdir");
    std::fs::create_dir_all(workspace.path().join("docs")).expect("mkdir");
    std::fs::write(workspace.path().join("src/main.rs"), "fn main() { println!(\"hello world\"); }\n").expect("write");
    std::fs::write(workspace.path().join("docs/guide.md"), "# Guide\n").expect("write");
    let state = tempfile::tempdir().expect("state");
    let report = run_client("mcp_client.py", workspace.path(), state.path());

    let names = |role: &str| -> Vec<String> {
        report[role]["tools"].as_array().expect("tools").iter().map(|tool| tool["name"].as_str().expect("name").to_owned()).collect()
    };
    assert_eq!(names("control"), ["directory_tree", "file_info", "list_files", "read_file", "read_many", "search_files"]);
    assert_eq!(
        names("impl"),
        [
            "apply_patch",
            "create_directory",
            "delete_file",
            "directory_tree",
            "edit_file",
            "file_info",
            "insert_text",
            "list_files",
            "lock_files",
            "move_file",
            "read_file",
            "read_many",
            "search_files",
            "undo_edit",
            "unlock_files",
            "write_file"
        ]
    );
    assert_eq!(report["impl"]["server"], "toolcell");
    for tool in report["impl"]["tools"].as_array().expect("tools") {
        assert_eq!(tool["has_schema"], true, "{tool}");
        assert!(tool["title"].is_string(), "{tool}");
    }
    let tool =
        |name: &str| report["impl"]["tools"].as_array().expect("tools").iter().find(|tool| tool["name"] == name).expect("listed").clone();
    let read_file = tool("read_file");
    assert_eq!((read_file["read_only"].as_bool(), read_file["destructive"].as_bool()), (Some(true), Some(false)));
    let write_file = tool("write_file");
    assert_eq!((write_file["read_only"].as_bool(), write_file["destructive"].as_bool()), (Some(false), Some(true)));

    let calls = &report["impl"]["calls"];
    assert_eq!(calls["read"]["is_error"], false);
    assert!(calls["read"]["text"].as_str().expect("text").contains("hello world"));
    assert_eq!(calls["read"]["structured"]["total_lines"], 1);
    assert_eq!(calls["edit"]["is_error"], false, "{}", calls["edit"]);
    assert!(calls["read_again"]["text"].as_str().expect("text").contains("hello mcp"));
    assert_eq!(calls["denied_write"]["is_error"], true);
    let denial = calls["denied_write"]["text"].as_str().expect("text");
    assert!(denial.starts_with("denied: write of `docs/guide.md` is denied for role `impl` by rule `docs-read-only`"), "{denial}");
    assert_eq!(calls["denied_write"]["meta"]["toolcell/error"]["kind"], "denied");
    assert!(calls["denied_write"]["structured"].is_null(), "an error carries no structured content");
    assert_eq!(calls["bad_args"]["is_error"], true);
    assert!(calls["bad_args"]["text"].as_str().expect("text").contains("`path`"), "{}", calls["bad_args"]);
    assert_eq!(calls["unknown_tool"]["is_error"], true);
    let control_write = &report["control"]["calls"]["write"];
    assert_eq!(control_write["is_error"], true);
    assert!(control_write["text"].as_str().expect("text").contains("role `control` may not call `write_file`"));

    assert_eq!(std::fs::read_to_string(workspace.path().join("docs/guide.md")).expect("read"), "# Guide\n");
    assert!(!workspace.path().join("src/new.rs").exists());
    assert!(!report.to_string().contains(workspace.path().to_str().expect("UTF-8")), "no host path");
}

#[test]
fn the_providers_built_in_tools_are_mcp_tools_of_their_names() {
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::create_dir_all(workspace.path().join("secrets")).expect("mkdir");
    std::fs::write(workspace.path().join("primes.py"), "def get_primes(limit):\n    for num in range(2, limit + 1)\n        pass\n")
        .expect("write");
    std::fs::write(workspace.path().join("secrets/key.txt"), "hunter2\n").expect("write");
    // A 1×1 PNG.
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\x0dIDATx\xdacd`\xf8_\x0f\x00\x02\x87\x01\x80\xebG\xba\x92\x00\x00\x00\x00IEND\xaeB`\x82";
    std::fs::write(workspace.path().join("logo.png"), png).expect("write");
    let state = tempfile::tempdir().expect("state");
    let policy = state.path().join("providers.toml");
    std::fs::write(
        &policy,
        r#"
version = 1

[roles.impl]
tools = ["str_replace_based_edit_tool", "read_file", "directory_tree", "write_file", "edit_file", "insert_text", "undo_edit", "apply_patch"]

[[roles.impl.rules]]
id = "impl-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "secrets"
access = ["read", "list", "write", "delete"]
paths = ["secrets/**"]
effect = "deny"
"#,
    )
    .expect("write the policy");
    let output = Command::new(python_with_mcp())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/provider_client.py"))
        .arg(env!("CARGO_BIN_EXE_toolcell"))
        .arg(workspace.path())
        .arg(state.path())
        .arg(&policy)
        .output()
        .expect("run the Python MCP client");
    assert!(output.status.success(), "the client failed:\n{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("the client prints JSON");
    let schema = &report["tools"]["str_replace_based_edit_tool"];
    assert_eq!(schema["properties"]["command"]["enum"], serde_json::json!(["view", "create", "str_replace", "insert", "undo_edit"]));
    assert!(report["tools"]["apply_patch"]["properties"]["operation"].is_object(), "{report}");
    let call = |label: &str| &report["calls"][label];
    assert_eq!(call("view")["is_error"], false, "{report}");
    assert!(call("view")["text"].as_str().expect("text").starts_with("Here's the result of running `cat -n` on primes.py:"), "{report}");
    assert_eq!(call("replace")["is_error"], false, "{report}");
    assert!(call("replace")["text"].as_str().expect("text").starts_with("The file primes.py has been edited."), "{report}");
    assert!(std::fs::read_to_string(workspace.path().join("primes.py")).expect("read").contains("limit + 1):"));
    assert_eq!(call("denied")["is_error"], true, "{report}");
    assert!(!call("denied")["text"].as_str().expect("text").contains("hunter2"), "{report}");
    assert_eq!(call("patch")["is_error"], false, "{report}");
    assert_eq!(std::fs::read_to_string(workspace.path().join("notes.md")).expect("read"), "hello\n");
    // An image is MCP image content beside the line that says what it is.
    assert_eq!(call("image")["is_error"], false, "{report}");
    assert_eq!(call("image")["images"], serde_json::json!([{"mime_type": "image/png", "bytes": png.len()}]), "{report}");
    assert!(call("image")["text"].as_str().expect("text").starts_with("Image `logo.png`: PNG, 1×1 pixels"), "{report}");
}

#[test]
fn the_task_chain_scenario_runs_over_mcp_with_one_server_per_role() {
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::create_dir_all(workspace.path().join("src")).expect("mkdir");
    std::fs::write(workspace.path().join("src/main.rs"), "fn main() {}\n").expect("write");
    let state = tempfile::tempdir().expect("state");
    let report = run_client("chain_client.py", workspace.path(), state.path());
    let tools = |key: &str| -> Vec<String> {
        report[key].as_array().expect("tools").iter().map(|name| name.as_str().expect("a name").to_owned()).collect()
    };
    for tool in ["chain_new", "task_add", "task_start", "spawn_impl_session", "task_approve", "task_rework", "chain_list"] {
        assert!(tools("control_tools").contains(&tool.to_owned()), "control serves {tool}");
        assert!(!tools("impl_tools").contains(&tool.to_owned()), "impl does not serve {tool}");
    }
    for tool in ["task_status", "task_complete", "task_block", "write_file"] {
        assert!(tools("impl_tools").contains(&tool.to_owned()), "impl serves {tool}");
    }
    let calls = report["calls"].as_array().expect("calls");
    let summary: Vec<(String, String, bool)> = calls
        .iter()
        .map(|call| {
            (call["role"].as_str().unwrap_or("").to_owned(), call["tool"].as_str().unwrap_or("").to_owned(), call["is_error"] == true)
        })
        .collect();
    let expected_errors: Vec<&str> = vec!["move_file"];
    for ((role, tool, is_error), call) in summary.iter().zip(calls) {
        assert_eq!(*is_error, expected_errors.contains(&tool.as_str()), "{role} {tool}: {}", call["text"]);
    }
    let refused = calls.iter().find(|call| call["tool"] == "move_file").expect("the move was tried");
    assert!(refused["text"].as_str().unwrap_or("").contains("docs-read-only"), "{refused}");
    let status = calls.iter().rev().find(|call| call["tool"] == "task_status").expect("task_status");
    assert!(status["text"].as_str().unwrap_or("").contains("Garbage is accepted."), "the rework reason reached the impl session");
    let chain = calls.last().expect("chain_status");
    assert_eq!(chain["structured"]["done"], 1, "{chain}");
    assert_eq!(chain["structured"]["locks"], serde_json::json!([]), "approval released the chain's locks");
    assert!(workspace.path().join("docs/tasks/done/CHAIN-039-file-ops/001-parse-headers.md").exists());
    assert_eq!(std::fs::read_to_string(workspace.path().join("src/main.rs")).expect("read"), "fn main() { parse().unwrap(); }\n");

    // The spawned session was run by its own server, recorded and ended with its client.
    let child = report["child"].as_str().expect("the child's id");
    let listed = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .args(["--state-dir"])
        .arg(state.path())
        .args(["sessions", "list", "--json"])
        .output()
        .expect("sessions list");
    let sessions: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let record = sessions.as_array().expect("a list").iter().find(|record| record["id"] == child).expect("the child is listed");
    assert_eq!(record["parent"], "py-control");
    assert_eq!(record["task"], "CHAIN-039-file-ops/001-parse-headers");
    assert_eq!(record["state"], "ended");
}

#[test]
fn malformed_tool_calls_are_invalid_params_and_unknown_methods_are_not_found() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("workspace");
    std::fs::create_dir(&workspace).expect("create workspace");
    std::fs::write(workspace.join("notes.txt"), "one\n").expect("write file");
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command
        .arg("--cache-dir")
        .arg(toolcell_tests::shared_cache_dir())
        .arg("--state-dir")
        .arg(temp.path().join("state"))
        .args(["mcp", "--role", "impl", "--workspace"])
        .arg(&workspace)
        .stderr(std::process::Stdio::null());
    let (mut client, _) = toolcell_mcp::client::StdioClient::spawn(&mut command).expect("start toolcell mcp");
    let cases = [
        ("tools/call", serde_json::json!({"name": "read_file", "arguments": [1]}), "-32602", "`arguments` is an array"),
        ("tools/call", serde_json::json!({"name": "read_file", "arguments": "notes.txt"}), "-32602", "`arguments` is a string"),
        ("tools/call", serde_json::json!({"arguments": {}}), "-32602", "`name` is missing"),
        ("tools/call", serde_json::json!({"name": 7}), "-32602", "`name` is a number"),
        ("resources/subscribe/nothing", serde_json::json!({}), "-32601", "resources/subscribe/nothing"),
        // Not declared, so not answered: there are no prompts (resources and completion are
        // served to a role that may read, see resources.rs), and none to complete.
        ("prompts/list", serde_json::json!({}), "-32601", "prompts/list"),
        (
            "completion/complete",
            serde_json::json!({"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}),
            "-32602",
            "it has no prompts",
        ),
        // Removed in 2026-07-28: a request made under it finds no `logging/setLevel`.
        (
            "logging/setLevel",
            serde_json::json!({"level": "info", "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"}
            }}),
            "-32601",
            "logging/setLevel",
        ),
        // Removed before its params are read: a level it would refuse does not matter.
        (
            "logging/setLevel",
            serde_json::json!({"level": "loud", "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"}
            }}),
            "-32601",
            "logging/setLevel",
        ),
        // Under the version the session negotiated, a level it does not know is invalid params.
        ("logging/setLevel", serde_json::json!({"level": "loud"}), "-32602", "invalid params for `logging/setLevel`"),
    ];
    for (method, params, code, message) in cases {
        let error = client.request(method, params.clone()).expect_err(&format!("{method} {params}")).to_string();
        assert!(error.contains(&format!("\"code\":{code}")) && error.contains(message), "{method} {params}: {error}");
    }
    // Under the version the session negotiated, it is still served.
    client.request("logging/setLevel", serde_json::json!({"level": "info"})).expect("logging/setLevel under 2025-06-18");
    // The connection is still usable, and a well-formed call works.
    let result = client.call_tool("read_file", &serde_json::json!({"path": "notes.txt"})).expect("tools/call");
    assert_eq!(result["isError"], false, "{result}");
    client.close().expect("the server exits when stdin closes");
}

use crate::served;
use served::{Served, token};

/// Start `toolcell serve` with `config` and its state in `state`; waits for it to listen.
fn serve(config: &Path, state: &Path) -> Served {
    served::serve(config, state, &[] as &[&str])
}

/// [`serve`] with more global options (`--policy`, `--plugin-dir`).
fn serve_with(config: &Path, state: &Path, options: &[&std::ffi::OsStr]) -> Served {
    served::serve(config, state, options)
}

/// A workspace, a service configuration with an `impl` and a `reviewer` principal, and their
/// tokens.
fn service_fixture(root: &Path) -> (PathBuf, String, String) {
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "hello\n").expect("write");
    std::fs::write(workspace.join(".env"), "SECRET=1\n").expect("write");
    let (impl_token, impl_line) = token();
    let (review_token, review_line) = token();
    let config = root.join("service.toml");
    std::fs::write(
        &config,
        format!(
            "[workspaces]\napp = \"workspace\"\n\n[[principals]]\nname = \"alice\"\n{impl_line}\nworkspace = \"app\"\nrole = \"impl\"\n\n\
             [[principals]]\nname = \"rita\"\n{review_line}\nworkspace = \"app\"\nrole = \"reviewer\"\n"
        ),
    )
    .expect("config");
    (config, impl_token, review_token)
}

fn run_http_client(args: &[&str]) -> serde_json::Value {
    let output = Command::new(python_with_mcp())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/http_client.py"))
        .args(args)
        .output()
        .expect("run the Python HTTP client");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the client failed:\n{stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stdout)))
}

/// The audit records of the trail in `state`.
/// Wait until `done` holds, or `limit` has passed (what the caller checks next then fails).
fn wait_until(limit: std::time::Duration, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() && started.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn audit_records(state: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(state.join("audit.jsonl")).expect("audit trail");
    text.lines().map(|line| serde_json::from_str(line).expect("record")).collect()
}

#[test]
fn the_http_service_takes_the_role_from_the_token_and_refuses_everyone_else() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, impl_token, review_token) = service_fixture(temp.path());
    let state = temp.path().join("state");
    // A tree to scan, with a progress token (reporting progress if it runs past 50 ms).
    for directory in 0..20 {
        let directory = temp.path().join(format!("workspace/tree/d{directory}"));
        std::fs::create_dir_all(&directory).expect("mkdir");
        for file in 0..100 {
            std::fs::write(directory.join(format!("f{file}.txt")), "hay\n".repeat(100)).expect("write");
        }
    }
    let served = serve(&config, &state);
    let report = run_http_client(&["main", &served.url, &impl_token, &review_token]);

    let impl_seen = &report["impl"];
    assert!(impl_seen["tools"].as_array().expect("tools").iter().any(|tool| tool == "edit_file"), "{impl_seen}");
    assert!(impl_seen["capabilities"]["logging"].is_object(), "{impl_seen}");
    assert_eq!(impl_seen["read"]["is_error"], false, "{impl_seen}");
    assert_eq!(impl_seen["edit"]["is_error"], false, "{impl_seen}");
    assert_eq!(impl_seen["secret"]["is_error"], true, "{impl_seen}");
    assert_eq!(impl_seen["search"]["is_error"], false, "{impl_seen}");
    // The refusal reached the client as a log notification, naming the path and the rule.
    let logs = impl_seen["logs"].as_array().expect("logs");
    assert!(logs.iter().any(|log| log["level"] == "notice" && log["data"]["path"] == ".env"), "{logs:?}");
    assert_eq!(std::fs::read_to_string(temp.path().join("workspace/notes.txt")).expect("read"), "hello over http\n");

    // The reviewer's token gives the reviewer's tools, whatever the client asks for.
    let review = &report["review"];
    assert_eq!(review["tools"], serde_json::json!(["directory_tree", "file_info", "list_files", "read_file", "read_many", "search_files"]));
    assert_eq!(review["write"]["is_error"], true, "{review}");
    assert!(review["write"]["text"].as_str().expect("text").contains("write_file"), "{review}");
    assert_eq!(review["read"]["is_error"], false, "{review}");
    // An unknown tool's error names only the tools this role may call.
    let unknown = review["unknown"]["text"].as_str().expect("text");
    assert!(unknown.contains("no tool named `rm_rf`") && unknown.contains("read_file") && !unknown.contains("write_file"), "{unknown}");
    // With the `_meta` kind every tool error carries.
    assert_eq!(review["unknown"]["meta"]["toolcell/error"]["kind"], "not-found", "{review}");

    let raw = &report["raw"];
    for refused in ["no_token", "unknown_token", "basic_auth"] {
        assert_eq!(raw[refused]["status"], 401, "{refused}: {raw}");
        assert_eq!(raw[refused]["www_authenticate"], "Bearer realm=\"toolcell\"", "{refused}: {raw}");
    }
    assert_eq!(raw["foreign_host"]["status"], 403, "{raw}");
    assert_eq!(raw["foreign_origin"]["status"], 403, "{raw}");
    assert_eq!(raw["too_large"]["status"], 413, "{raw}");
    assert_eq!(raw["good"]["status"], 200, "{raw}");
    // A call with a progress token: its progress, if any, on its own stream, then its result
    // (a_call_the_client_cancels_is_stopped_and_rolled_back sees a long call report progress).
    let stream = raw["progress_stream"].as_array().expect("messages");
    assert_eq!(stream.last(), Some(&serde_json::json!("result")), "{raw}");
    assert!(stream[..stream.len() - 1].iter().all(|message| message == "notifications/progress"), "{raw}");
    assert!(raw["progress_tokens"].as_array().expect("tokens").iter().all(|token| token == "p-7"), "{raw}");

    // Every record of the calls names the workspace and who made them.
    let workspace = std::fs::canonicalize(temp.path().join("workspace")).expect("canonical");
    let records = audit_records(&state);
    let calls: Vec<_> = records.iter().filter(|record| record["kind"] == "call").collect();
    assert!(calls.len() >= 6, "{calls:?}");
    for record in records.iter().filter(|record| record["kind"] == "call" || record["kind"] == "fs") {
        assert_eq!(record["workspace"], workspace.display().to_string(), "{record}");
        assert!(record["principal"] == "alice" || record["principal"] == "rita", "{record}");
    }
    assert!(records.iter().any(|record| record["principal"] == "alice" && record["decision"] == "deny" && record["path"] == ".env"));
}

#[test]
fn a_call_over_max_request_bytes_is_an_error_the_python_sdk_shows_and_its_session_goes_on() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, impl_token, review_token) = service_fixture(temp.path());
    let served = serve(&config, &temp.path().join("state"));
    // A 5 MiB `write_file` against the default cap of 4 MiB.
    let report = run_http_client(&["too-large", &served.url, &impl_token, &review_token]);
    let error = &report["big"]["error"];
    assert_eq!(error["code"], toolcell_mcp::REQUEST_TOO_LARGE.0, "{report}");
    let message = error["message"].as_str().expect("message");
    assert!(message.contains("over 4194304 bytes") && message.contains("`max_request_bytes`"), "{message}");
    assert!(!temp.path().join("workspace/big.txt").exists());
    // The same session's next call is served.
    assert_eq!(report["after"]["is_error"], false, "{report}");
    assert!(report["after"]["text"].as_str().is_some_and(|text| text.contains("hello")), "{report}");
}

#[test]
fn an_http_session_survives_a_restart_and_releases_its_locks_when_it_ends() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, impl_token, review_token) = service_fixture(temp.path());
    let state = temp.path().join("state");
    let served = serve(&config, &state);
    let before = run_http_client(&["before-restart", &served.url, &impl_token, &review_token]);
    assert_eq!(before["locked"]["message"]["result"]["isError"], false, "{before}");
    assert_eq!(before["edited"]["message"]["result"]["isError"], false, "{before}");
    assert_eq!(before["hijack"], 404, "another principal cannot use the session: {before}");
    assert_eq!(before["made_up"], 404, "{before}");
    let owners = std::fs::read_dir(state.join("mcp-sessions"))
        .expect("session directory")
        .filter(|entry| entry.as_ref().is_ok_and(|entry| entry.path().extension().is_some_and(|extension| extension == "owner")))
        .count();
    assert_eq!(owners, 1, "only the session the service issued is recorded");
    assert_eq!(std::fs::read_to_string(temp.path().join("workspace/notes.txt")).expect("read"), "hello before the restart\n");
    drop(served);

    let served = serve(&config, &state);
    let session = before["session"].as_str().expect("session id");
    let after = run_http_client(&["after-restart", &served.url, &impl_token, &review_token, session]);
    assert_eq!(after["undone"]["message"]["result"]["isError"], false, "the undo history came back with the session: {after}");
    assert_eq!(after["blocked"]["message"]["result"]["isError"], true, "{after}");
    let blocked = after["blocked"]["message"]["result"]["content"][0]["text"].as_str().expect("text");
    assert!(blocked.contains("locked by"), "{blocked}");
    assert_eq!(after["ended"], 204, "{after}");
    assert_eq!(after["after_end"]["message"]["result"]["isError"], false, "ending the session released its lock: {after}");
    assert_eq!(after["gone"], 404, "{after}");
    assert_eq!(std::fs::read_to_string(temp.path().join("workspace/notes.txt")).expect("read"), "other session");
}

/// A path `.ci/mcp-conformance` printed, from the environment variable `name`; `None` (and a
/// SKIPPED line) when it is not set, which fails the test where
/// `TOOLCELL_REQUIRE_CONFORMANCE=1` (CI).
fn node_tool(name: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(name) {
        return Some(PathBuf::from(path));
    }
    let required = std::env::var_os("TOOLCELL_REQUIRE_CONFORMANCE").is_some_and(|value| value == "1");
    assert!(!required, "TOOLCELL_REQUIRE_CONFORMANCE=1 but {name} is not set (.ci/mcp-conformance prints it)");
    let _ = writeln!(std::io::stderr(), "SKIPPED: set {name} (from .ci/mcp-conformance) to run this test");
    None
}

/// The scenarios of the official MCP conformance suite that apply to a server of tools, every
/// one of which must pass. The suite's other server scenarios call tools of its own reference
/// server (`test_tool_with_logging`, `test_tool_with_progress`, `json_schema_2020_12_tool`,
/// the image/audio/resource/sampling/elicitation tools, and the reconnection tool of
/// `server-sse-polling`), read, subscribe to or complete the reference server's own `test://`
/// resources, or exercise prompts, which toolcell does not offer; the book lists them.
const CONFORMANCE_SCENARIOS: [&str; 8] = [
    "server-initialize",
    "resources-list",
    "ping",
    "tools-list",
    "tools-call-error",
    "logging-set-level",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
];

/// The scenarios of the suite's newest release (beside the pinned one) that apply to a server of
/// tools: the pinned ones, the session lifecycle, the 2026-07-28 header validation and the
/// resource-not-found error. The README lists the others with the reason each does not apply.
const NEXT_CONFORMANCE_SCENARIOS: [&str; 11] = [
    "server-initialize",
    "resources-list",
    "server-session-lifecycle",
    "ping",
    "tools-list",
    "tools-call-error",
    "logging-set-level",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "http-header-validation",
    "sep-2164-resource-not-found",
];

#[test]
fn the_official_conformance_suite_passes_every_scenario_that_applies_to_a_tool_server() {
    let Some(node) = node_tool("TOOLCELL_CONFORMANCE_NODE") else { return };
    let Some(suite) = node_tool("TOOLCELL_CONFORMANCE_SUITE") else { return };
    let Some(next) = node_tool("TOOLCELL_CONFORMANCE_SUITE_NEXT") else { return };
    let temp = tempfile::tempdir().expect("temporary directory");
    std::fs::create_dir(temp.path().join("workspace")).expect("workspace");
    std::fs::write(temp.path().join("workspace/notes.txt"), "hello\n").expect("write");
    let config = temp.path().join("service.toml");
    // The suite sends no credentials: the service admits it as an anonymous principal.
    std::fs::write(
        &config,
        "anonymous = \"conformance\"\n\n[workspaces]\napp = \"workspace\"\n\n[[principals]]\nname = \"conformance\"\nworkspace = \"app\"\nrole = \"impl\"\n",
    )
    .expect("config");
    let served = serve(&config, &temp.path().join("state"));
    let runs = CONFORMANCE_SCENARIOS
        .iter()
        .map(|scenario| (&suite, scenario))
        .chain(NEXT_CONFORMANCE_SCENARIOS.iter().map(|scenario| (&next, scenario)));
    for (suite, scenario) in runs {
        let output = Command::new(&node)
            .arg(suite)
            .args(["server", "--url", &served.url, "--scenario", scenario])
            .output()
            .expect("run the conformance suite");
        let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        let summary =
            printed.lines().find(|line| line.starts_with("Passed: ")).unwrap_or_else(|| panic!("{scenario}: no summary in\n{printed}"));
        let (passed, total) = summary["Passed: ".len()..].split(',').next().and_then(|counts| counts.split_once('/')).expect("counts");
        assert!(summary.contains(" 0 failed") && passed == total && passed != "0", "{} {scenario}: {summary}\n{printed}", suite.display());
    }
}

#[test]
fn a_call_the_client_cancels_is_stopped_and_rolled_back() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, impl_token, review_token) = service_fixture(temp.path());
    let plugins = temp.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins");
    std::fs::write(plugins.join("misbehave.wasm"), toolcell_tests::guest_program("misbehave")).expect("plugin");
    let policy = temp.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[limits]\ndeadline_ms = 60000\n[roles.impl]\ntools = [\"*\"]\n[[roles.impl.rules]]\naccess = [\"read\", \"list\", \"write\"]\npaths = [\"**\"]\neffect = \"allow\"\n\
         [roles.reviewer]\ntools = [\"read_file\"]\n",
    )
    .expect("policy");
    let served = serve_with(
        &config,
        &temp.path().join("state"),
        &["--policy".as_ref(), policy.as_os_str(), "--plugin-dir".as_ref(), plugins.as_os_str()],
    );
    // With a progress token, rmcp's session runs the call; without, the service does: each is
    // stopped by the client's `notifications/cancelled`. A plain call is also stopped when its
    // session ends (also after another call under its request id came and went), and when its
    // client went away and then cancels it from another connection.
    let scenarios = [
        ("cancel-progress", "spun.txt"),
        ("cancel-plain", "spun-plain.txt"),
        ("cancel-end", "spun-end.txt"),
        ("cancel-gone", "spun-gone.txt"),
        ("cancel-dupid", "spun-dupid.txt"),
    ];
    for (scenario, path) in scenarios {
        let report = run_http_client(&[scenario, &served.url, &impl_token, &review_token]);
        // The component wrote, then spun with a minute left on its deadline: the cancellation
        // stopped it at once, and its write was rolled back.
        assert!(report["seconds"].as_f64().expect("seconds") < 20.0, "{report}");
        assert!(!temp.path().join("workspace").join(path).exists(), "the stopped call's write was rolled back: {report}");
        assert_eq!(report["after"]["message"]["result"]["isError"], false, "the session still works: {report}");
        let progress = report["progress_tokens"].as_array().expect("progress tokens");
        if scenario == "cancel-progress" {
            // It asked for progress, and ran for seconds: its stream carried progress with its token.
            assert!(!progress.is_empty() && progress.iter().all(|token| token == "p-spin"), "{report}");
        } else if scenario != "cancel-gone" {
            // Answered by the service itself: no response to the stopped request, and not even
            // the priming event of rmcp's streams.
            assert_eq!(report["lines"], serde_json::json!([]), "{report}");
        }
        if scenario == "cancel-dupid" {
            assert_eq!(report["same_id"]["message"]["result"]["isError"], false, "{report}");
        }
        if scenario == "cancel-plain" {
            // A cancellation rmcp refuses (a foreign `Origin`) cancels nothing.
            assert_eq!(report["refused_cancel_status"], 403, "{report}");
            assert_eq!(report["alive_after_refused_cancel"], true, "{report}");
        }
    }
    // The host writes each call's record once the stopped call is rolled back.
    let is_the_call = |record: &serde_json::Value| record["kind"] == "call" && record["tool"] == "misbehave";
    wait_until(std::time::Duration::from_secs(30), || {
        audit_records(&temp.path().join("state")).iter().filter(|record| is_the_call(record)).count() == scenarios.len()
    });
    let records = audit_records(&temp.path().join("state"));
    // Each ended within the wait (the component would spin for its whole minute otherwise).
    assert_eq!(records.iter().filter(|record| is_the_call(record)).count(), scenarios.len(), "{records:?}");
    for cancelled in records.iter().filter(|record| is_the_call(record)) {
        assert!(cancelled["message"].as_str().expect("message").contains("cancelled by the client"), "{cancelled}");
        assert_eq!(cancelled["outcome"], "trapped", "{cancelled}");
    }
    // The writes did happen before the cancellations (and were then undone).
    for (_, path) in scenarios {
        assert!(
            records.iter().any(|record| record["kind"] == "fs" && record["path"] == path && record["decision"] == "allow"),
            "{records:?}"
        );
    }
}

use crate::load;

#[test]
fn a_service_killed_under_load_restarts_with_whole_files_and_a_verified_trail() {
    const CLIENTS: usize = 6;
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("workspace");
    std::fs::create_dir(&workspace).expect("workspace");
    // Two whole versions of each file; a write lands one or the other, never a mix.
    let version = |letter: char| format!("{}\n", letter.to_string().repeat(1023)).repeat(256);
    let mut config = String::from("[workspaces]\napp = \"workspace\"\n");
    for client in 0..CLIENTS {
        std::fs::write(workspace.join(format!("f{client}.txt")), version('a')).expect("file");
        let hash = toolcell_mcp::config::hex(&toolcell_mcp::config::token_hash(&format!("token-{client}")));
        config.push_str(&format!(
            "\n[[principals]]\nname = \"c{client}\"\ntoken_sha256 = \"{hash}\"\nworkspace = \"app\"\nrole = \"impl\"\n"
        ));
    }
    let config_path = temp.path().join("service.toml");
    std::fs::write(&config_path, config).expect("config");
    let state = temp.path().join("state");
    let mut served = serve(&config_path, &state);
    let acknowledged = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let (url, acknowledged, version) = (served.url.clone(), &acknowledged, &version);
            scope.spawn(move || {
                let Ok(mut session) = load::Client::connect(&url, &format!("token-{client}")) else { return };
                let path = format!("f{client}.txt");
                for round in 0.. {
                    if session.call("read_file", serde_json::json!({"path": path, "limit": 1})).is_err() {
                        return;
                    }
                    let content = version(if round % 2 == 0 { 'b' } else { 'a' });
                    match session.call("write_file", serde_json::json!({"path": path, "content": content})) {
                        Ok(result) if result["isError"] == false => {
                            acknowledged.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        _ => return,
                    }
                }
            });
        }
        // Kill the service mid-load (SIGKILL: no chance to clean up), once the load is under
        // way however slowly the machine started it.
        wait_until(std::time::Duration::from_secs(60), || acknowledged.load(std::sync::atomic::Ordering::Relaxed) >= 2 * CLIENTS);
        std::thread::sleep(std::time::Duration::from_millis(500));
        served.child.kill().expect("kill the service");
    });
    assert!(acknowledged.load(std::sync::atomic::Ordering::Relaxed) > 0, "the load ran before the kill");
    for client in 0..CLIENTS {
        let content = std::fs::read_to_string(workspace.join(format!("f{client}.txt"))).expect("read");
        assert!(content == version('a') || content == version('b'), "f{client}.txt is not a whole version ({} bytes)", content.len());
    }
    // The service starts again, recovers what the kill interrupted, and clients reconnect.
    drop(served);
    let served = serve(&config_path, &state);
    let mut session = load::Client::connect(&served.url, "token-0").expect("reconnect");
    let read = session.call("read_file", serde_json::json!({"path": "f0.txt", "limit": 1})).expect("read after restart");
    assert_eq!(read["isError"], false, "{read}");
    let written = session.call("write_file", serde_json::json!({"path": "f0.txt", "content": "after\n"})).expect("write after restart");
    assert_eq!(written["isError"], false, "{written}");
    // The temporary sibling of a rewrite the kill interrupted is gone.
    let leftovers: Vec<_> = std::fs::read_dir(&workspace).expect("list").map(|entry| entry.expect("entry").file_name()).collect();
    assert_eq!(leftovers.len(), CLIENTS, "nothing beside the files: {leftovers:?}");
    let journals: Vec<_> = std::fs::read_dir(state.join("journal"))
        .map(|entries| {
            entries.filter_map(Result::ok).filter(|entry| entry.path().extension().is_some_and(|extension| extension == "jsonl")).collect()
        })
        .unwrap_or_default();
    assert!(journals.len() <= 1, "only the running service's journal is left: {journals:?}");
    drop(served);
    let verified =
        Command::new(env!("CARGO_BIN_EXE_toolcell")).arg("--state-dir").arg(&state).args(["audit", "verify"]).output().expect("verify");
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stdout));
    let records = audit_records(&state);
    for recovery in records.iter().filter(|record| record["kind"] == "recovery") {
        assert_eq!(recovery["outcome"], "rolled_back", "{recovery}");
    }
}

/// Check what the TypeScript SDK's client saw: every tool declares an output schema, every
/// valid call succeeded (the SDK checked its structured result against that schema), every
/// invalid one is a tool error naming the argument.
fn check_ts_report(transport: &str, report: &serde_json::Value) {
    let tools = report["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 16, "{transport}: {tools:?}");
    for tool in tools {
        assert_eq!(tool["hasOutputSchema"], true, "{transport}: {tool}");
    }
    let calls = report["calls"].as_object().expect("calls");
    assert_eq!(calls.len(), 16, "{transport}");
    for (name, call) in calls {
        assert_eq!(call["valid"]["isError"], false, "{transport} {name}: {call}");
        assert!(call["valid"]["structured"].is_object(), "{transport} {name}: {call}");
        assert_eq!(call["invalid"]["isError"], true, "{transport} {name}: {call}");
        assert!(call["invalid"]["text"].as_str().expect("text").contains("no_such_argument"), "{transport} {name}: {call}");
    }
}

fn run_ts_client(node: &Path, sdk: &Path, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let output = Command::new(node)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ts_client.mjs"))
        .arg(sdk)
        .args(args)
        .output()
        .expect("run the TypeScript client");
    assert!(output.status.success(), "the TypeScript client failed:\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stdout)))
}

#[test]
fn the_typescript_sdk_calls_every_tool_over_both_transports_and_checks_the_output_schemas() {
    let Some(node) = node_tool("TOOLCELL_CONFORMANCE_NODE") else { return };
    let Some(sdk) = node_tool("TOOLCELL_TS_SDK") else { return };
    // stdio: `toolcell mcp`, started by the SDK's transport.
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("workspace");
    std::fs::create_dir(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "hello\n").expect("write");
    let state = temp.path().join("state");
    let cache = toolcell_tests::shared_cache_dir();
    let toolcell: &std::ffi::OsStr = env!("CARGO_BIN_EXE_toolcell").as_ref();
    let stdio = run_ts_client(&node, &sdk, &["stdio".as_ref(), toolcell, workspace.as_os_str(), state.as_os_str(), cache.as_os_str()]);
    check_ts_report("stdio", &stdio);

    // Streamable HTTP: `toolcell serve`, with a bearer token.
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, impl_token, _) = service_fixture(temp.path());
    let served = serve(&config, &temp.path().join("state"));
    let http = run_ts_client(&node, &sdk, &["http".as_ref(), served.url.as_ref(), impl_token.as_ref()]);
    check_ts_report("http", &http);
}

#[test]
fn clients_that_stall_mid_request_hold_up_no_one_else() {
    use std::io::Write as _;
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, impl_token, _) = service_fixture(temp.path());
    let served = serve(&config, &temp.path().join("state"));
    let address = served.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    // Twenty connections stop halfway through their headers, twenty halfway through a body.
    let mut stalled = Vec::new();
    for index in 0..40 {
        let mut stream = std::net::TcpStream::connect(&address).expect("connect");
        let partial = if index % 2 == 0 {
            format!("POST / HTTP/1.1\r\nHost: {address}\r\nAuthor")
        } else {
            format!(
                "POST / HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {impl_token}\r\nContent-Type: application/json\r\n\
                 Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{{\"jsonrpc\": \"2.0\""
            )
        };
        stream.write_all(partial.as_bytes()).expect("send part of a request");
        stalled.push(stream);
    }
    // Meanwhile a well-behaved client opens a session and works as usual.
    let mut client = load::Client::connect(&served.url, &impl_token).expect("connect while others stall");
    for _ in 0..5 {
        let read = client.call("read_file", serde_json::json!({"path": "notes.txt"})).expect("read while others stall");
        assert_eq!(read["isError"], false, "{read}");
    }
    client.end().expect("end the session");
    drop(stalled);
}

#[test]
fn one_token_trickling_bodies_is_bounded_and_starves_no_other_principal() {
    use std::io::{Read as _, Write as _};
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, impl_token, review_token) = service_fixture(temp.path());
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("request_body_timeout = \"2s\"\nmax_requests_per_principal = 8\n{text}")).expect("config");
    let served = serve(&config, &temp.path().join("state"));
    let address = served.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    // One principal's token opens 30 requests whose bodies never finish arriving.
    let mut trickling: Vec<std::net::TcpStream> = (0..30)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(&address).expect("connect");
            let head = format!(
                "POST / HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {impl_token}\r\nContent-Type: application/json\r\n\
                 Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{{"
            );
            stream.write_all(head.as_bytes()).expect("send the head and a byte");
            // Far longer than the bodies' 2 s: a stream still unanswered then was never answered.
            stream.set_read_timeout(Some(std::time::Duration::from_secs(60))).expect("timeout");
            stream
        })
        .collect();
    // Another principal is served meanwhile.
    let mut client = load::Client::connect(&served.url, &review_token).expect("connect while one token trickles");
    let read = client.call("read_file", serde_json::json!({"path": "notes.txt"})).expect("read while one token trickles");
    assert_eq!(read["isError"], false, "{read}");
    client.end().expect("end the session");
    // Every trickling request is answered: past the principal's bound at once (429), the rest
    // when their bodies' time runs out; none is left holding a connection.
    let mut statuses: Vec<String> = Vec::new();
    for stream in &mut trickling {
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer.lines().next().map(str::to_owned);
        statuses.push(match (read, status) {
            (_, Some(status)) => status,
            (Ok(_), None) => "closed".to_owned(),
            (Err(error), None) => format!("no answer: {error}"),
        });
    }
    let refused = statuses.iter().filter(|status| status.contains(" 429 ")).count();
    assert!(refused >= 22, "past the bound of 8, requests are refused at once: {statuses:?}");
    assert!(statuses.iter().all(|status| !status.contains(" 200 ")), "{statuses:?}");
    // Each was answered or closed by the service when its body's time ran out, long before the
    // reader gave up (no wall-clock bound: a loaded machine may take its time).
    assert!(statuses.iter().all(|status| !status.starts_with("no answer")), "the bodies' time never ran out: {statuses:?}");
    // The bound is free again.
    let mut again = load::Client::connect(&served.url, &impl_token).expect("the principal connects again");
    let read = again.call("read_file", serde_json::json!({"path": "notes.txt"})).expect("read");
    assert_eq!(read["isError"], false, "{read}");
    again.end().expect("end the session");
}

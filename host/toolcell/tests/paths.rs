//! Paths as clients send them, through the real CLI and MCP server: absolute paths and
//! `file://` URIs into the workspace are taken as workspace-relative, and answers speak
//! workspace-relative; absolute paths elsewhere are refused; a `\` and a `~` get hints.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn toolcell(state: &Path, args: &[&std::ffi::OsStr]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .arg("--cache-dir")
        .arg(toolcell_tests::shared_cache_dir())
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("TOOLCELL_CACHE_DIR")
        .env_remove("TOOLCELL_STATE_DIR")
        .output()
        .expect("run toolcell");
    Run {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}

/// A workspace reached through a symlink (`link` → `real`), holding `src/main.rs`; the
/// temporary directory, the path through the link and the canonical path.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let temp = tempfile::tempdir().expect("temporary directory");
    let real = temp.path().join("real");
    std::fs::create_dir_all(real.join("src")).expect("create workspace");
    std::fs::write(real.join("src/main.rs"), "fn main() {}\n").expect("write file");
    std::fs::write(temp.path().join("secret.txt"), "outside\n").expect("write file");
    let link = temp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let canonical = std::fs::canonicalize(&real).expect("canonical workspace");
    (temp, link, canonical)
}

/// `toolcell call --json`: the result as JSON on stdout.
fn call(temp: &Path, workspace: &Path, tool: &str, args: &serde_json::Value) -> Run {
    let args = args.to_string();
    toolcell(
        &temp.join("state"),
        &["call".as_ref(), tool.as_ref(), args.as_ref(), "--json".as_ref(), "--workspace".as_ref(), workspace.as_os_str()],
    )
}

/// `toolcell call`: an error is on stderr.
fn call_plain(temp: &Path, workspace: &Path, tool: &str, args: &serde_json::Value) -> Run {
    let args = args.to_string();
    toolcell(&temp.join("state"), &["call".as_ref(), tool.as_ref(), args.as_ref(), "--workspace".as_ref(), workspace.as_os_str()])
}

fn text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

#[test]
fn absolute_paths_and_file_uris_into_the_workspace_are_workspace_relative() {
    let (temp, link, canonical) = setup();
    let through_link = format!("{}/src/main.rs", text(&link));
    let canonical_file = format!("{}/src/main.rs", text(&canonical));
    let uri = format!("file://{}/src/%6Dain.rs", text(&canonical));
    for sent in [&through_link, &canonical_file, &uri] {
        let run = call(temp.path(), &link, "read_file", &serde_json::json!({"path": sent}));
        assert_eq!(run.status, 0, "{sent}: {}", run.stderr);
        let result: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON output");
        assert_eq!(result["structured"]["path"], "src/main.rs", "{sent}: {result}");
        assert!(run.stdout.contains("fn main()"), "{sent}: {}", run.stdout);
        assert!(!run.stdout.contains(text(temp.path())), "{sent}: the answer shows a host path: {}", run.stdout);
    }
    // A write and a listing take them too; the file lands inside the workspace.
    let written = format!("{}/src/new.rs", text(&link));
    let run = call(temp.path(), &link, "write_file", &serde_json::json!({"path": written, "content": "// new\n"}));
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(canonical.join("src/new.rs")).expect("written"), "// new\n");
    assert!(!run.stdout.contains(text(temp.path())), "{}", run.stdout);
    let run = call(temp.path(), &link, "list_files", &serde_json::json!({"path": text(&link)}));
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(run.stdout.contains("src/") && !run.stdout.contains(text(temp.path())), "{}", run.stdout);
    // read_many's `paths` and move_file's `source` and `destination` too.
    let run = call(temp.path(), &link, "read_many", &serde_json::json!({"paths": [canonical_file, "src/new.rs"]}));
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(run.stdout.contains("fn main()") && run.stdout.contains("// new"), "{}", run.stdout);
    let moved = serde_json::json!({"source": format!("{}/src/new.rs", text(&canonical)), "destination": format!("file://{}/src/moved.rs", text(&link))});
    let run = call(temp.path(), &link, "move_file", &moved);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(canonical.join("src/moved.rs").exists());
    assert!(!run.stdout.contains(text(temp.path())), "{}", run.stdout);
    // A patch's file headers, as a model trained on absolute paths writes them.
    let patch = format!("*** Begin Patch\n*** Update File: {}/src/moved.rs\n@@\n-// new\n+// patched\n*** End Patch\n", text(&link));
    let run = call(temp.path(), &link, "apply_patch", &serde_json::json!({"patch": patch}));
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(canonical.join("src/moved.rs")).expect("patched"), "// patched\n");
    assert!(!run.stdout.contains(text(temp.path())), "{}", run.stdout);
}

#[test]
fn absolute_paths_outside_the_workspace_are_refused_without_being_shown() {
    let (temp, link, _) = setup();
    let outside = format!("{}/secret.txt", text(temp.path()));
    let escaping = format!("{}/../secret.txt", text(&link));
    let uri = format!("file://{outside}");
    for sent in [&outside, &escaping, &uri] {
        let run = call_plain(temp.path(), &link, "read_file", &serde_json::json!({"path": sent}));
        assert_eq!(run.status, 1, "{sent}: {}", run.stdout);
        assert!(run.stderr.starts_with("denied: "), "{sent}: {}", run.stderr);
        assert!(!run.stderr.contains(text(temp.path())) && !run.stdout.contains("outside"), "{sent}: {}", run.stderr);
    }
    let run = call(temp.path(), &link, "write_file", &serde_json::json!({"path": outside, "content": "x"}));
    assert_eq!(run.status, 1);
    assert_eq!(std::fs::read_to_string(temp.path().join("secret.txt")).expect("read"), "outside\n");
}

#[test]
fn a_backslash_path_gets_a_separator_hint_and_a_tilde_workspace_a_hint_about_expansion() {
    let (temp, link, _) = setup();
    let run = call_plain(temp.path(), &link, "read_file", &serde_json::json!({"path": "src\\main.rs"}));
    assert_eq!(run.status, 1, "{}", run.stdout);
    assert!(run.stderr.starts_with("not-found: "), "{}", run.stderr);
    assert!(run.stderr.contains("workspace paths use `/`, as in `src/main.rs`"), "{}", run.stderr);
    // A path that exists is not second-guessed: `\` is a file name character.
    std::fs::write(link.join("a\\b.txt"), "backslash\n").expect("write file");
    let run = call(temp.path(), &link, "read_file", &serde_json::json!({"path": "a\\b.txt"}));
    assert_eq!(run.status, 0, "{}", run.stderr);

    let run = toolcell(
        &temp.path().join("state"),
        &["call".as_ref(), "read_file".as_ref(), "{}".as_ref(), "--workspace".as_ref(), "~/repo".as_ref()],
    );
    assert_eq!(run.status, 2, "{}", run.stdout);
    assert!(run.stderr.contains("`~` is not expanded here"), "{}", run.stderr);
    assert!(run.stderr.contains("/home/NAME/repo"), "{}", run.stderr);
}

#[test]
fn an_mcp_client_may_send_absolute_paths_and_file_uris() {
    let (temp, link, canonical) = setup();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command
        .arg("--cache-dir")
        .arg(toolcell_tests::shared_cache_dir())
        .arg("--state-dir")
        .arg(temp.path().join("state"))
        .args(["mcp", "--role", "impl", "--workspace"])
        .arg(&link)
        .stderr(std::process::Stdio::null());
    let (mut client, _) = toolcell_mcp::client::StdioClient::spawn(&mut command).expect("start toolcell mcp");
    let absolute = format!("{}/src/main.rs", text(&link));
    let read = client.call_tool("read_file", &serde_json::json!({"path": absolute})).expect("tools/call");
    assert_eq!(read["isError"], false, "{read}");
    assert_eq!(read["structuredContent"]["path"], "src/main.rs", "{read}");
    // Read first, so the edit passes read-before-write: the two name one file.
    let uri = format!("file://{}/src/main.rs", text(&canonical));
    let edit = serde_json::json!({"path": uri, "old_string": "fn main() {}", "new_string": "fn main() { run() }"});
    let edited = client.call_tool("edit_file", &edit).expect("tools/call");
    assert_eq!(edited["isError"], false, "{edited}");
    assert!(!edited.to_string().contains(text(temp.path())), "{edited}");
    assert_eq!(std::fs::read_to_string(canonical.join("src/main.rs")).expect("read"), "fn main() { run() }\n");
    let outside =
        client.call_tool("read_file", &serde_json::json!({"path": format!("{}/secret.txt", text(temp.path()))})).expect("tools/call");
    assert_eq!(outside["isError"], true, "{outside}");
    assert!(!outside.to_string().contains("outside\\n"), "{outside}");
    // A hint reaches an MCP client in the text and, structured, in the result's `_meta`.
    let missing = client.call_tool("read_file", &serde_json::json!({"path": "src\\main.rs"})).expect("tools/call");
    assert_eq!(missing["isError"], true, "{missing}");
    let error = &missing["_meta"]["toolcell/error"];
    assert_eq!(error["kind"], "not-found", "{missing}");
    assert!(error["hint"].as_str().is_some_and(|hint| hint.contains("as in `src/main.rs`")), "{missing}");
    assert!(missing["content"][0]["text"].as_str().is_some_and(|text| text.contains("\nhint: `src\\main.rs` holds `\\`")), "{missing}");
    client.close().expect("the server exits when stdin closes");
}

//! Paths that try to leave the workspace, through the built-in tools and through a component
//! that calls `std::fs` directly. Every one is refused, no message shows a host path, and the
//! files outside stay as they were.

use serde_json::{Value, json};
use toolcell_tests::{CANARY, Fixture};
use toolcell_types::ToolErrorKind;

/// Lexical escapes, refused before anything touches the filesystem.
const LEXICAL_ESCAPES: &[&str] = &[
    "../outside/secret.txt",
    "a/../../outside/secret.txt",
    "./../outside/secret.txt",
    "src/../../workspace-sibling/secret.txt",
    "../workspace-sibling/secret.txt",
    "/etc/passwd",
    "//etc/passwd",
    "C:\\Windows\\win.ini",
    "\\\\server\\share\\x",
    "~/secret.txt",
    "..",
];

/// The arguments each built-in tool takes for a path.
fn args_for(tool: &str, path: &str) -> Value {
    match tool {
        "read_file" => json!({"path": path}),
        "write_file" => json!({"path": path, "content": "pwned"}),
        "edit_file" => json!({"path": path, "old_string": "CANARY", "new_string": "pwned"}),
        "list_files" => json!({"path": path}),
        "search_files" => json!({"query": "CANARY", "path": path}),
        other => panic!("no arguments for {other}"),
    }
}

const TOOLS: &[&str] = &["read_file", "write_file", "edit_file", "list_files", "search_files"];

#[test]
fn lexical_escapes_are_denied_by_every_tool() {
    let fixture = Fixture::new();
    fixture.write("src/a.txt", "inside\n");
    for tool in TOOLS {
        for path in LEXICAL_ESCAPES {
            let message = fixture.error(tool, args_for(tool, path), ToolErrorKind::Denied);
            assert!(message.contains("workspace"), "{tool} {path}: {message}");
        }
        // The allowed sibling control still works.
        let outcome = fixture.call(tool, &args_for(tool, "src/a.txt"));
        if *tool != "list_files" && *tool != "edit_file" {
            assert!(outcome.result.is_ok(), "{tool} on an inside path: {:?}", outcome.result);
        }
    }
    fixture.assert_outside_untouched();
}

#[test]
fn symlinks_to_outside_are_refused() {
    let fixture = Fixture::new();
    let outside = fixture.base().join("outside");
    fixture.symlink(outside.join("secret.txt"), "file-link");
    fixture.symlink(&outside, "dir-link");
    fixture.symlink("../outside/secret.txt", "relative-link");
    fixture.write("src/ok.txt", "CANARY-free inside\n");
    for tool in TOOLS {
        for path in ["file-link", "dir-link/secret.txt", "relative-link"] {
            let outcome = fixture.call(tool, &args_for(tool, path));
            match outcome.result {
                Err(error) => {
                    assert!(matches!(error.kind, ToolErrorKind::Denied | ToolErrorKind::Unsupported), "{tool} {path}: {error}");
                    fixture.assert_no_host_path(&error.message);
                }
                Ok(output) => panic!("{tool} {path} escaped through a symlink:\n{}", output.text),
            }
        }
    }
    fixture.error("list_files", json!({"path": "dir-link"}), ToolErrorKind::Denied);
    fixture.error("write_file", json!({"path": "dir-link/new.txt", "content": "x"}), ToolErrorKind::Denied);
    // Searching the workspace does not follow the links out.
    let output = fixture.ok("search_files", json!({"query": "CANARY", "output_mode": "content"}));
    assert_eq!(output.text, "src/ok.txt:1:CANARY-free inside");
    fixture.assert_outside_untouched();
}

#[test]
fn a_component_using_std_fs_cannot_leave_the_workspace() {
    let fixture = Fixture::new();
    let outside = fixture.base().join("outside");
    fixture.write("inside.txt", "inside");
    fixture.symlink(outside.join("secret.txt"), "file-link");
    fixture.symlink(&outside, "dir-link");
    let outside_absolute = outside.join("secret.txt").to_string_lossy().into_owned();
    let attempts = json!([
        {"op": "read", "path": "../outside/secret.txt"},
        {"op": "read", "path": "../workspace-sibling/secret.txt"},
        {"op": "read", "path": outside_absolute},
        {"op": "read", "path": "file-link"},
        {"op": "read", "path": "dir-link/secret.txt"},
        {"op": "read", "path": "/../outside/secret.txt"},
        {"op": "write", "path": "../outside/secret.txt", "content": "pwned"},
        {"op": "write", "path": "../outside/new.txt", "content": "pwned"},
        {"op": "write", "path": "file-link", "content": "pwned"},
        {"op": "write", "path": "dir-link/new.txt", "content": "pwned"},
        {"op": "append", "path": "file-link", "content": "pwned"},
        {"op": "truncate", "path": "file-link"},
        {"op": "mkdir", "path": "../outside/newdir"},
        {"op": "mkdir", "path": "dir-link/newdir"},
        {"op": "remove", "path": "dir-link/secret.txt"},
        {"op": "rename", "path": "inside.txt", "to": "../outside/moved.txt"},
        {"op": "rename", "path": "inside.txt", "to": "dir-link/moved.txt"},
        {"op": "rename", "path": "../outside/secret.txt", "to": "stolen.txt"},
        {"op": "hard_link", "path": "../outside/secret.txt", "to": "stolen-link.txt"},
        {"op": "hard_link", "path": "dir-link/secret.txt", "to": "stolen-link2.txt"},
        {"op": "list", "path": ".."},
        {"op": "list", "path": "dir-link"},
        {"op": "stat", "path": "../outside/secret.txt"},
        {"op": "stat", "path": "dir-link/secret.txt"}
    ]);
    // One attempt per call: the host turns a call with a refusal into a `denied` result.
    for attempt in attempts.as_array().expect("attempts") {
        let outcome = fixture.call("fs_probe", &json!({"ops": [attempt]}));
        match outcome.result {
            Err(error) => {
                assert_eq!(error.kind, ToolErrorKind::Denied, "{attempt}: {error}");
                assert!(!outcome.denials.is_empty(), "{attempt}: a denied result must come from a refusal");
                fixture.assert_no_host_path(&error.message);
            }
            Ok(output) => {
                let result = &output.structured.expect("structured")[0];
                assert_eq!(result["ok"], false, "an escape succeeded: {result}");
                let error = result["error"].as_str().expect("an error message");
                assert!(error.starts_with("NotFound"), "{attempt}: {result}");
            }
        }
    }
    // The root the component sees is the workspace, whatever it calls it.
    let probe = fixture.ok(
        "fs_probe",
        json!({"ops": [
            {"op": "list", "path": "/"},
            {"op": "list", "path": "."},
            {"op": "canonicalize", "path": "inside.txt"},
            {"op": "env", "path": ""},
            {"op": "read", "path": "inside.txt"}
        ]}),
    );
    let results = probe.structured.expect("structured");
    let listing = json!(["dir-link", "file-link", "inside.txt"]);
    assert_eq!(results[0]["value"], listing);
    assert_eq!(results[1]["value"], listing);
    assert_eq!(results[2]["value"], "/inside.txt");
    assert_eq!(results[3]["value"], json!([]), "the environment must be empty");
    assert_eq!(results[4]["value"], "inside");
    fixture.assert_outside_untouched();
    assert!(!fixture.root().join("stolen.txt").exists());
    assert!(!fixture.root().join("stolen-link.txt").exists());
    assert_eq!(fixture.read_text("inside.txt"), "inside");
    assert_ne!(CANARY, "");
}

/// The workspace's directory moved away and another put at its path between calls (a checkout
/// swapped under a running server): each call still works in the directory the workspace was
/// opened as, the component's preopen as much as the guard's judgement, and learns nothing of
/// the directory now at the path.
#[test]
fn a_workspace_path_taken_by_another_directory_leads_no_call_there() {
    let fixture = Fixture::new();
    fixture.write("mine.txt", "mine\n");
    let moved = fixture.base().join("moved");
    std::fs::rename(fixture.root(), &moved).expect("move the workspace away");
    std::fs::create_dir(fixture.root()).expect("another directory at the workspace's path");
    std::fs::write(fixture.root().join("theirs.txt"), CANARY).expect("write");

    let listed = fixture.ok("list_files", json!({}));
    assert_eq!(listed.text.lines().collect::<Vec<_>>(), ["mine.txt"]);
    let probed = fixture.call(
        "fs_probe",
        &json!({"ops": [
            {"op": "raw_list_preopen", "path": "."},
            {"op": "stat", "path": "theirs.txt"},
            {"op": "write", "path": "new.txt", "content": "new"},
        ]}),
    );
    let results = probed.result.expect("the probe runs").structured.expect("structured");
    assert_eq!(results[0]["value"], json!(["mine.txt"]), "{results}");
    assert_eq!(results[1]["ok"], false, "{results}");
    assert_eq!(results[2]["ok"], true, "{results}");
    assert_eq!(std::fs::read_to_string(moved.join("new.txt")).expect("written where the workspace is"), "new");
    assert!(!fixture.root().join("new.txt").exists());
    assert_eq!(std::fs::read_to_string(fixture.root().join("theirs.txt")).expect("read"), CANARY);
}

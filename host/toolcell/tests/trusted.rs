//! What any toolcell run trusts stays out of every tool's reach, whatever this run is
//! configured with: the default cache, state and configuration directories of a `$HOME`
//! workspace while the run uses others, the running executable, and the configuration of the
//! `serve` that serves the workspace.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::load;
use crate::served;

/// Everything is allowed to `admin`: only the host's own protection stands in the way.
const ALLOW_ALL: &str = r#"
version = 1

[roles.admin]
tools = ["*"]

[[roles.admin.rules]]
id = "admin-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"
"#;

/// A `$HOME` workspace holding a user's default toolcell directories, and a place elsewhere for
/// this run's own state, cache and policy.
struct Home {
    _temp: tempfile::TempDir,
    home: PathBuf,
    elsewhere: PathBuf,
}

fn home() -> Home {
    let temp = tempfile::tempdir().expect("temporary directory");
    let home = temp.path().join("home");
    let elsewhere = temp.path().join("elsewhere");
    for (relative, content) in [
        (".cache/toolcell/cache.key", "K".repeat(32)),
        (".cache/toolcell/0123.cwasm", "artifact".to_owned()),
        (".local/state/toolcell/state.key", "S".repeat(32)),
        (".local/state/toolcell/journal/old.jsonl", "{}\n".to_owned()),
        (".config/toolcell/service.toml", "listen = \"127.0.0.1:8750\"\n".to_owned()),
        ("project/notes.txt", "notes\n".to_owned()),
    ] {
        let path = home.join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }
    std::fs::create_dir_all(&elsewhere).expect("elsewhere");
    std::fs::write(elsewhere.join("allow-all.toml"), ALLOW_ALL).expect("policy");
    Home { _temp: temp, home, elsewhere }
}

/// Run `executable call TOOL ARGS` as `admin` on the workspace `home`, with `$HOME` there and
/// this run's cache and state elsewhere. Returns (exit status, stdout + stderr).
fn call(executable: &Path, home: &Home, tool: &str, args: serde_json::Value) -> (i32, String) {
    let output = Command::new(executable)
        .arg("--cache-dir")
        .arg(home.elsewhere.join("cache"))
        .arg("--state-dir")
        .arg(home.elsewhere.join("state"))
        .arg("--policy")
        .arg(home.elsewhere.join("allow-all.toml"))
        .args(["call", tool, &args.to_string(), "--role", "admin", "--workspace"])
        .arg(&home.home)
        .env("HOME", &home.home)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("TOOLCELL_CACHE_DIR")
        .env_remove("TOOLCELL_STATE_DIR")
        .output()
        .expect("run toolcell");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), text)
}

fn snapshot(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.parent().is_some_and(|parent| parent.ends_with(".local/state/toolcell"))
                && path.file_name().is_some_and(|name| name == "locations" || name == "locations.lock")
            {
                // The run itself records the locations it was told to use there.
            } else {
                files.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn a_run_with_its_own_directories_still_protects_the_default_ones() {
    let home = home();
    let executable = Path::new(env!("CARGO_BIN_EXE_toolcell"));
    let before = snapshot(&home.home.join(".cache"));
    let state_before = snapshot(&home.home.join(".local"));
    let config_before = snapshot(&home.home.join(".config"));
    for (tool, args) in [
        ("read_file", json!({"path": ".cache/toolcell/cache.key"})),
        ("read_file", json!({"path": ".local/state/toolcell/state.key"})),
        ("read_file", json!({"path": ".config/toolcell/service.toml"})),
        ("write_file", json!({"path": ".cache/toolcell/0123.cwasm", "content": "patched machine code"})),
        ("write_file", json!({"path": ".local/state/toolcell/state.key", "content": "planted key"})),
        ("write_file", json!({"path": ".local/state/toolcell/journal/planted.jsonl", "content": "{}"})),
        ("write_file", json!({"path": ".config/toolcell/service.toml", "content": "root = \"/\""})),
        ("delete_file", json!({"path": ".local/state/toolcell/journal/old.jsonl"})),
        ("move_file", json!({"source": ".local/state/toolcell", "destination": "moved-state"})),
    ] {
        let (status, text) = call(executable, &home, tool, args.clone());
        assert_eq!(status, 1, "{tool} {args}: {text}");
        assert!(text.contains("toolcell's own state"), "{tool} {args}: {text}");
        assert!(!text.contains("KKKK") && !text.contains("SSSS"), "{tool} {args}: {text}");
    }
    // Listings leave them out, and searches do not look inside.
    let (status, text) = call(executable, &home, "list_files", json!({"path": ".cache"}));
    assert_eq!(status, 0, "{text}");
    assert!(!text.contains("toolcell"), "{text}");
    let (_, text) = call(executable, &home, "search_files", json!({"query": "SSSS", "path": "."}));
    assert!(!text.contains("state.key"), "{text}");
    assert_eq!(snapshot(&home.home.join(".cache")), before);
    assert_eq!(snapshot(&home.home.join(".local")), state_before);
    assert_eq!(snapshot(&home.home.join(".config")), config_before);
    // The run itself works.
    let (status, text) = call(executable, &home, "write_file", json!({"path": "project/notes.txt", "content": "changed\n"}));
    assert_eq!(status, 0, "{text}");
}

#[test]
fn the_running_executable_is_protected_inside_the_workspace() {
    let home = home();
    let installed = home.home.join(".cargo/bin/toolcell");
    std::fs::create_dir_all(installed.parent().expect("parent")).expect("mkdir");
    std::fs::copy(env!("CARGO_BIN_EXE_toolcell"), &installed).expect("install a copy");
    let before = std::fs::read(&installed).expect("read");
    let (status, text) =
        call(&installed, &home, "write_file", json!({"path": ".cargo/bin/toolcell", "content": "#!/bin/sh\necho owned\n"}));
    assert_eq!(status, 1, "{text}");
    assert!(text.contains("toolcell's own state"), "{text}");
    let (status, text) = call(&installed, &home, "move_file", json!({"source": ".cargo", "destination": "elsewhere-cargo"}));
    assert_eq!(status, 1, "{text}");
    assert!(std::fs::read(&installed).expect("read") == before, "the executable changed");
}

#[test]
fn the_configuration_of_serve_is_protected_in_the_workspace_it_serves() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("app");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "hello\n").expect("write");
    std::fs::write(temp.path().join("allow-all.toml"), ALLOW_ALL).expect("policy");
    let (token, hash_line) = served::token();
    let config = workspace.join("service.toml");
    let config_text =
        format!("[workspaces]\napp = \".\"\n\n[[principals]]\nname = \"ada\"\n{hash_line}\nworkspace = \"app\"\nrole = \"admin\"\n");
    std::fs::write(&config, &config_text).expect("config");
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command.arg("--cache-dir").arg(temp.path().join("cache")).arg("--state-dir").arg(temp.path().join("state"));
    command.arg("--policy").arg(temp.path().join("allow-all.toml"));
    command.args(["serve", "--listen", "127.0.0.1:0", "--config"]).arg(&config);
    let served = served::spawn(command);

    let mut client = load::Client::connect(&served.url, &token).expect("connect");
    let written = client.call("write_file", json!({"path": "service.toml", "content": "root = \"/\"\n"})).expect("answer");
    assert_eq!(written["isError"], true, "{written}");
    assert!(written.to_string().contains("toolcell's own state"), "{written}");
    let read = client.call("read_file", json!({"path": "service.toml"})).expect("answer");
    assert_eq!(read["isError"], true, "{read}");
    assert!(!read.to_string().contains("token_sha256"), "{read}");
    let listed = client.call("list_files", json!({"path": "."})).expect("answer");
    assert!(!listed.to_string().contains("service.toml"), "{listed}");
    let moved = client.call("move_file", json!({"source": "service.toml", "destination": "old.toml"})).expect("answer");
    assert_eq!(moved["isError"], true, "{moved}");
    // Other files are served as usual.
    let notes = client.call("read_file", json!({"path": "notes.txt"})).expect("answer");
    assert_eq!(notes["isError"], false, "{notes}");
    drop(served);
    assert_eq!(std::fs::read_to_string(&config).expect("config"), config_text);
}

//! The `toolcell` command as a user runs it: real processes, exit codes, and snapshots of
//! what it prints (temporary paths filtered out).

use std::path::Path;
use std::process::{Command, Output};

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

/// Run `toolcell` with a private cache directory.
fn toolcell(cache: &Path, args: &[&str]) -> Run {
    let state = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-state");
    let has_state_dir = args.contains(&"--state-dir");
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command.arg("--cache-dir").arg(cache);
    if !has_state_dir {
        command.arg("--state-dir").arg(state);
    }
    let Output { status, stdout, stderr } =
        command.args(args).env_remove("TOOLCELL_CACHE_DIR").env_remove("TOOLCELL_STATE_DIR").output().expect("run toolcell");
    Run {
        status: status.code().unwrap_or(-1),
        stdout: String::from_utf8(stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(stderr).expect("UTF-8 stderr"),
    }
}

/// A workspace with one file, and a cache directory shared by this test binary.
fn setup() -> (tempfile::TempDir, std::path::PathBuf) {
    let workspace = tempfile::tempdir().expect("temporary workspace");
    std::fs::write(workspace.path().join("notes.txt"), "first\nsecond\n").expect("write file");
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-component-cache");
    (workspace, cache)
}

fn filtered(text: &str, workspace: &Path) -> String {
    text.replace(&workspace.to_string_lossy().into_owned(), "[WORKSPACE]")
}

#[test]
fn tools_lists_every_builtin_with_its_schema() {
    let (_workspace, cache) = setup();
    let run = toolcell(&cache, &["tools"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let headings: Vec<&str> = run.stdout.lines().filter(|line| line.contains(" — ")).collect();
    insta::assert_snapshot!(headings.join("\n"), @"
    apply_patch — Apply patch [destructive]
    chain_list — List chains [read-only, idempotent]
    chain_new — New chain []
    chain_status — Chain status [read-only, idempotent]
    create_directory — Create directory [idempotent]
    delete_file — Delete [destructive, idempotent]
    directory_tree — Directory tree [read-only, idempotent]
    edit_file — Edit file [destructive]
    file_info — File info [read-only, idempotent]
    insert_text — Insert text [destructive]
    list_files — List files [read-only, idempotent]
    lock_files — Lock files [idempotent]
    move_file — Move or rename [destructive]
    read_file — Read file [read-only, idempotent]
    read_many — Read several files [read-only, idempotent]
    search_files — Search files [read-only, idempotent]
    spawn_impl_session — Spawn implementation session []
    str_replace_based_edit_tool — Text editor [destructive]
    task_add — Add task []
    task_approve — Approve task []
    task_block — Block task []
    task_complete — Complete task []
    task_list — List tasks [read-only, idempotent]
    task_ready — Ready task []
    task_rework — Request rework []
    task_start — Start task []
    task_status — My task [read-only, idempotent]
    task_unblock — Unblock task []
    undo_edit — Undo edit [destructive]
    unlock_files — Unlock files [idempotent]
    write_file — Write file [destructive, idempotent]
    ");
    let tools = toolcell_builtins::components().count() + toolcell_runtime::NATIVE_TOOLS.len() + toolcell_runtime::ADAPTER_TOOLS.len();
    assert_eq!(run.stdout.matches("  arguments: {").count(), tools);

    let json = toolcell(&cache, &["tools", "--json"]);
    let tools: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON output");
    let tools = tools.as_array().expect("a list");
    assert_eq!(
        tools.len(),
        toolcell_builtins::components().count() + toolcell_runtime::NATIVE_TOOLS.len() + toolcell_runtime::ADAPTER_TOOLS.len()
    );
    let read_file = tools.iter().find(|tool| tool["name"] == "read_file").expect("read_file is listed");
    assert_eq!(read_file["input_schema"]["required"], serde_json::json!(["path"]));
}

#[test]
fn call_prints_the_output() {
    let (workspace, cache) = setup();
    let root = workspace.path().to_str().expect("UTF-8 path");
    let run = toolcell(&cache, &["call", "read_file", r#"{"path": "notes.txt"}"#, "--workspace", root]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout, @r"
         1	first
         2	second
    ");
    assert_eq!(run.stderr, "");
}

#[test]
fn a_tool_error_exits_1_with_the_message_on_stderr() {
    let (workspace, cache) = setup();
    let root = workspace.path().to_str().expect("UTF-8 path");
    let run = toolcell(&cache, &["call", "read_file", r#"{"path": "../x"}"#, "--workspace", root]);
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    insta::assert_snapshot!(run.stderr, @"denied: `../x` leaves the workspace: its `..` components climb above the workspace root; give a path inside the workspace");
    let run = toolcell(&cache, &["call", "read_file", r#"{"path": 1}"#, "--workspace", root]);
    assert_eq!(run.status, 1);
    insta::assert_snapshot!(run.stderr, @r#"
    invalid-args: invalid arguments to `read_file`: `path`: 1 is not of type "string".
    hint: check `read_file`'s input schema (MCP `tools/list`, or `toolcell tools`) and send the arguments it describes
    "#);
    // With `--json`, the hint is a field of the error.
    let run = toolcell(&cache, &["call", "read_file", r#"{"path": 1}"#, "--json", "--workspace", root]);
    let result: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(result["error"]["kind"], "invalid-args", "{result}");
    assert!(result["error"]["hint"].as_str().is_some_and(|hint| hint.starts_with("check `read_file`'s input schema")), "{result}");
}

#[test]
fn json_output_carries_the_structured_result_and_the_call_id() {
    let (workspace, cache) = setup();
    let root = workspace.path().to_str().expect("UTF-8 path");
    let run = toolcell(&cache, &["call", "write_file", r#"{"path": "new.txt", "content": "hi"}"#, "--workspace", root, "--json"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let document: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON output");
    assert_eq!(document["ok"], true);
    assert_eq!(document["structured"], serde_json::json!({"path": "new.txt", "action": "created", "bytes": 2}));
    assert!(document["call_id"].as_str().is_some_and(|id| id.starts_with("c-")));
    assert_eq!(std::fs::read_to_string(workspace.path().join("new.txt")).expect("written"), "hi");

    let run = toolcell(&cache, &["call", "read_file", r#"{"path": "nope"}"#, "--workspace", root, "--json"]);
    assert_eq!(run.status, 1);
    let document: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON output");
    assert_eq!(document["error"]["kind"], "not-found");
}

#[test]
fn host_errors_exit_2() {
    let (workspace, cache) = setup();
    let missing = workspace.path().join("missing");
    let missing = missing.to_str().expect("UTF-8 path");
    let run = toolcell(&cache, &["call", "read_file", "{}", "--workspace", missing]);
    assert_eq!(run.status, 2);
    insta::assert_snapshot!(
        filtered(&run.stderr, workspace.path()),
        @"error: cannot use `[WORKSPACE]/missing` as the workspace: it does not exist; create it or pass an existing directory"
    );
    let root = workspace.path().to_str().expect("UTF-8 path");
    let run = toolcell(&cache, &["call", "rm_rf", "{}", "--workspace", root]);
    assert_eq!(run.status, 2);
    insta::assert_snapshot!(run.stderr, @"error: there is no tool named `rm_rf`; the tools are: apply_patch, create_directory, delete_file, directory_tree, edit_file, file_info, insert_text, list_files, lock_files, move_file, read_file, read_many, search_files, undo_edit, unlock_files, write_file");
}

#[test]
fn built_in_tools_start_precompiled_and_plugins_from_the_cache() {
    // The built-in tools ship compiled for this machine: an empty cache compiles none of
    // them. A plugin is compiled once, then loaded from the cache.
    let cache = tempfile::tempdir().expect("temporary cache");
    let plugins = tempfile::tempdir().expect("plugin directory");
    std::fs::write(plugins.path().join("misbehave.wasm"), toolcell_tests::guest_program("misbehave")).expect("write plugin");
    let plugin_dir = plugins.path().to_str().expect("UTF-8 path");
    let builtins = toolcell_builtins::components().count();
    let first = toolcell(cache.path(), &["--plugin-dir", plugin_dir, "tools", "--verbose"]);
    assert_eq!(first.status, 0, "{}", first.stderr);
    assert_eq!(first.stderr.matches("(loaded precompiled from the binary)").count(), builtins, "{}", first.stderr);
    assert_eq!(first.stderr.matches("(compiled)").count(), 1, "{}", first.stderr);
    let second = toolcell(cache.path(), &["--plugin-dir", plugin_dir, "tools", "--verbose"]);
    assert_eq!(second.stderr.matches("(loaded precompiled from the binary)").count(), builtins, "{}", second.stderr);
    assert_eq!(second.stderr.matches("(loaded from cache)").count(), 1, "{}", second.stderr);
    assert_eq!(second.stderr.matches("(compiled)").count(), 0, "{}", second.stderr);
}

#[test]
fn compiling_a_plugin_is_announced_on_a_terminal_only() {
    let cache = tempfile::tempdir().expect("temporary cache");
    let plugins = tempfile::tempdir().expect("plugin directory");
    std::fs::write(plugins.path().join("misbehave.wasm"), toolcell_tests::guest_program("misbehave")).expect("write plugin");
    let plugin_dir = plugins.path().to_str().expect("UTF-8 path");
    // Through a pipe: nothing but the output.
    let piped = toolcell(cache.path(), &["--plugin-dir", plugin_dir, "tools"]);
    assert_eq!(piped.status, 0, "{}", piped.stderr);
    assert!(!piped.stderr.contains("compiling"), "{}", piped.stderr);
    // On a terminal (`script` gives the command one): a line before and after compiling.
    let fresh = tempfile::tempdir().expect("temporary cache");
    let command = format!(
        "{} --cache-dir {} --state-dir {} --plugin-dir {} tools > /dev/null",
        env!("CARGO_BIN_EXE_toolcell"),
        fresh.path().display(),
        fresh.path().join("state").display(),
        plugin_dir
    );
    let terminal = Command::new("script").args(["-qec", &command, "/dev/null"]).output().expect("run script");
    let screen = String::from_utf8_lossy(&terminal.stdout);
    assert!(terminal.status.success(), "{screen}");
    assert!(screen.contains("compiling `plugin:misbehave.wasm` for this machine (once: later starts load it from the cache)…"), "{screen}");
    assert!(screen.contains("compiled `plugin:misbehave.wasm` in "), "{screen}");
    // Cached now: nothing to announce.
    let again = Command::new("script").args(["-qec", &command, "/dev/null"]).output().expect("run script");
    assert!(!String::from_utf8_lossy(&again.stdout).contains("compiling"), "{}", String::from_utf8_lossy(&again.stdout));
}

#[test]
fn demo_runs_a_whole_session() {
    let (workspace, cache) = setup();
    let demo = workspace.path().join("demo");
    let run = toolcell(&cache, &["demo", "--workspace", demo.to_str().expect("UTF-8 path")]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(run.stdout.contains("Created `src/main.rs`"), "{}", run.stdout);
    assert!(run.stdout.contains("src/main.rs:3:    println!(\"Hello, {name}!\");"), "{}", run.stdout);
    assert!(run.stdout.contains("error denied: `../../etc/passwd` leaves the workspace"), "{}", run.stdout);
    assert!(run.stdout.contains("by rule `docs-read-only`"), "{}", run.stdout);
    assert!(run.stdout.contains("role `control` may not call `write_file`"), "{}", run.stdout);
    assert!(run.stdout.contains("Locked `src/**` (exclusive, token "), "{}", run.stdout);
    assert!(run.stdout.contains("failed the validator `json-syntax`"), "{}", run.stdout);
    assert!(run.stdout.contains("every change this call made was rolled back"), "{}", run.stdout);
    assert!(!demo.join("config.json").exists());
    // The edit to "toolcell" was undone.
    let main = std::fs::read_to_string(demo.join("src/main.rs")).expect("demo wrote src/main.rs");
    assert_eq!(main, "fn main() {\n    let name = \"world\";\n    println!(\"Hello, {name}!\");\n}\n");
}

#[test]
fn policy_check_reports_roles_or_the_first_error_with_its_line() {
    let (workspace, cache) = setup();
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/default.toml");
    let run = toolcell(&cache, &["policy", "check", policy.to_str().expect("UTF-8 path")]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("role `control`: read_file, read_many, file_info, list_files, directory_tree, search_files"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("role `reviewer`"), "{}", run.stdout);

    let bad = workspace.path().join("bad.toml");
    std::fs::write(&bad, "version = 1\n[roles.r]\ntools = [\"read_file\", \"red_file\"]\n").expect("write policy");
    let run = toolcell(&cache, &["policy", "check", bad.to_str().expect("UTF-8 path")]);
    assert_eq!(run.status, 1);
    insta::assert_snapshot!(
        filtered(&run.stderr, workspace.path()),
        @"[WORKSPACE]/bad.toml line 3: role `r` lists the unknown tool `red_file`; the tools are: apply_patch, chain_list, chain_new, chain_status, create_directory, delete_file, directory_tree, edit_file, file_info, insert_text, list_files, lock_files, move_file, read_file, read_many, search_files, spawn_impl_session, str_replace_based_edit_tool, task_add, task_approve, task_block, task_complete, task_list, task_ready, task_rework, task_start, task_status, task_unblock, undo_edit, unlock_files, write_file; if it is a plugin, install it with `toolcell tools add FILE`, or pass the `--plugin-dir` that holds it"
    );
}

#[test]
fn policy_explain_names_the_deciding_rule() {
    let (_workspace, cache) = setup();
    let explain = |role: &str, access: &str, path: &str| {
        let run = toolcell(&cache, &["policy", "explain", "--role", role, "--access", access, path]);
        // Exit status 1 for a denial, 0 otherwise.
        assert_eq!(run.status, i32::from(run.stdout.starts_with("deny")), "{}", run.stderr);
        run.stdout
    };
    insta::assert_snapshot!(
        [
            explain("impl", "write", "src/../docs/guide.md"),
            explain("impl", "write", "src/main.rs"),
            explain("control", "write", "src/main.rs"),
            explain("impl", "delete", ".git/HEAD"),
            explain("impl", "read", "../outside"),
        ]
        .concat(),
        @"
    deny: write of `docs/guide.md` by role `impl` (rule `docs-read-only`, policies/default.toml (built in) line 76)
    allow: write of `src/main.rs` by role `impl` (rule `impl-write`, policies/default.toml (built in) line 70)
    deny: write of `src/main.rs` by role `control` (rule `default-deny`)
    deny: delete of `.git/HEAD` by role `impl` (rule `protected:.git/**`)
    deny: `../outside` is outside the workspace (rule `workspace-boundary`)
    "
    );
}

#[test]
fn policy_explain_takes_the_policy_file_first_like_policy_check() {
    let (workspace, cache) = setup();
    let policy = workspace.path().join("strict.toml");
    std::fs::write(
        &policy,
        "version = 1\n\n[roles.impl]\ntools = [\"read_file\"]\n\n[[roles.impl.rules]]\nid = \"no-src\"\naccess = [\"write\"]\npaths = [\"src/**\"]\neffect = \"deny\"\n",
    )
    .expect("write the policy");
    let policy = policy.to_str().expect("UTF-8 path");
    let run = toolcell(&cache, &["policy", "explain", policy, "--role", "impl", "--access", "write", "src/main.rs"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(run.stdout.starts_with("deny: write of `src/main.rs` by role `impl` (rule `no-src`"), "{}", run.stdout);
    // Without it, the default policy decides.
    let run = toolcell(&cache, &["policy", "explain", "--role", "impl", "--access", "write", "src/main.rs"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let run = toolcell(&cache, &["policy", "explain", "a", "b", "c", "--role", "impl", "--access", "write"]);
    assert_eq!(run.status, 2, "three positionals are refused: {}", run.stderr);
}

#[test]
fn policy_explain_binds_rules_that_name_a_tool_or_a_task() {
    let (_workspace, cache) = setup();
    let explain = |extra: &[&str]| {
        let mut args = vec!["--policy", "builtin:workflow", "policy", "explain", "--role", "impl", "--access", "write"];
        args.extend_from_slice(extra);
        args.push("docs/tasks/in-review/CHAIN-039-x/001-a.md");
        let run = toolcell(&cache, &args);
        assert_eq!(run.status, i32::from(run.stdout.starts_with("deny")), "{}", run.stderr);
        run.stdout
    };
    insta::assert_snapshot!(
        [
            explain(&[]),
            explain(&["--tool", "task_complete"]),
            explain(&["--tool", "task:complete", "--task", "CHAIN-039-x/001-a"]),
            explain(&["--tool", "task_complete", "--task", "CHAIN-039-x/002-b"]),
        ]
        .concat(),
        @"
    deny: write of `docs/tasks/in-review/CHAIN-039-x/001-a.md` by role `impl` (rule `docs-read-only`, policies/workflow.toml (built in) line 200)
    deny: write of `docs/tasks/in-review/CHAIN-039-x/001-a.md` by role `impl` (rule `docs-read-only`, policies/workflow.toml (built in) line 200)
    tool `task_complete`: role `impl` may call it
    allow: write of `docs/tasks/in-review/CHAIN-039-x/001-a.md` by role `impl` (rule `task-complete-own-task`, policies/workflow.toml (built in) line 219)
    tool `task_complete`: role `impl` may call it
    deny: write of `docs/tasks/in-review/CHAIN-039-x/001-a.md` by role `impl` (rule `docs-read-only`, policies/workflow.toml (built in) line 200)
    tool `task_complete`: role `impl` may call it
    "
    );
}

#[test]
fn calls_are_governed_and_ask_needs_approve() {
    let (workspace, cache) = setup();
    let root = workspace.path().to_str().expect("UTF-8 path");
    let run = toolcell(&cache, &["call", "write_file", r#"{"path": "docs/a.md", "content": "x"}"#, "--workspace", root]);
    assert_eq!(run.status, 1);
    assert!(run.stderr.starts_with("denied: write of `docs` is denied for role `impl` by rule `docs-read-only`"), "{}", run.stderr);
    let run = toolcell(&cache, &["call", "write_file", r#"{"path": "a.md", "content": "x"}"#, "--workspace", root, "--role", "control"]);
    assert_eq!(run.status, 1);
    assert!(run.stderr.contains("role `control` may not call `write_file`"), "{}", run.stderr);

    let policy = workspace.path().join("ask.toml");
    std::fs::write(
        &policy,
        "version = 1\n[roles.impl]\ntools = [\"*\"]\n[[roles.impl.rules]]\nid = \"ask-all\"\naccess = [\"read\", \"list\", \"write\"]\npaths = [\"**\"]\neffect = \"ask\"\n",
    )
    .expect("write policy");
    let policy = policy.to_str().expect("UTF-8 path");
    let args = r#"{"path": "notes.txt", "content": "approved"}"#;
    let run = toolcell(&cache, &["--policy", policy, "call", "write_file", args, "--workspace", root]);
    assert_eq!(run.status, 1);
    assert!(run.stderr.contains("needs approval (rule `ask-all`"), "{}", run.stderr);
    assert!(run.stderr.contains("--approve"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(workspace.path().join("notes.txt")).expect("unchanged"), "first\nsecond\n");
    let run = toolcell(&cache, &["--policy", policy, "call", "write_file", args, "--workspace", root, "--approve"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(run.stderr.contains("approved (--approve): write of `notes.txt` for role `impl` (rule `ask-all`)"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(workspace.path().join("notes.txt")).expect("written"), "approved");
}

#[test]
fn audit_tail_shows_decisions_and_verify_catches_tampering() {
    let (workspace, cache) = setup();
    let state = tempfile::tempdir().expect("state directory");
    let state_dir = state.path().to_str().expect("UTF-8 path");
    let root = workspace.path().to_str().expect("UTF-8 path");
    let call = |tool: &str, args: &str, session: &str| {
        toolcell(&cache, &["--state-dir", state_dir, "call", tool, args, "--workspace", root, "--session", session])
    };
    assert_eq!(call("write_file", r#"{"path": "docs/a.md", "content": "x"}"#, "s-1").status, 1);
    assert_eq!(call("write_file", r#"{"path": "src/a.rs", "content": "x"}"#, "s-2").status, 0);
    assert_eq!(call("read_file", r#"{"path": "notes.txt"}"#, "s-2").status, 0);

    let tail = toolcell(&cache, &["--state-dir", state_dir, "audit", "tail"]);
    assert_eq!(tail.status, 0, "{}", tail.stderr);
    assert!(tail.stdout.contains("s-1 role=impl tool=write_file"), "{}", tail.stdout);
    assert!(tail.stdout.contains("DENY write `docs` create-directory-at (docs-read-only)"), "{}", tail.stdout);
    assert!(tail.stdout.contains("ALLOW write `src/a.rs` open-at (impl-write)"), "{}", tail.stdout);
    assert!(tail.stdout.contains("CALL denied"), "{}", tail.stdout);
    let session = toolcell(&cache, &["--state-dir", state_dir, "audit", "tail", "--session", "s-2", "-n", "1"]);
    assert_eq!(session.stdout.lines().count(), 1, "{}", session.stdout);
    assert!(session.stdout.contains("s-2 role=impl tool=read_file") && session.stdout.contains("CALL ok"), "{}", session.stdout);

    let verify = || toolcell(&cache, &["--state-dir", state_dir, "audit", "verify"]);
    let clean = verify();
    assert_eq!(clean.status, 0, "{}", clean.stderr);
    assert!(clean.stdout.contains("ok, "), "{}", clean.stdout);

    let log = state.path().join("audit.jsonl");
    let original = std::fs::read_to_string(&log).expect("read log");
    let lines: Vec<&str> = original.lines().collect();
    assert!(lines.len() >= 4, "{original}");
    let rewrite = |lines: Vec<String>| std::fs::write(&log, lines.join("\n") + "\n").expect("write log");
    let owned = || lines.iter().map(|line| (*line).to_owned()).collect::<Vec<_>>();

    let mut edited = owned();
    edited[1] = edited[1].replace("\"role\":\"impl\"", "\"role\":\"root\"");
    assert_ne!(edited[1], lines[1]);
    rewrite(edited);
    let run = verify();
    assert_eq!(run.status, 1);
    assert!(run.stderr.contains("line 2: its content does not match its hash"), "{}", run.stderr);

    let mut deleted = owned();
    deleted.remove(2);
    rewrite(deleted);
    let run = verify();
    assert_eq!(run.status, 1);
    assert!(run.stderr.contains("line 3: its seq is 4 where 3 was expected"), "{}", run.stderr);

    let mut swapped = owned();
    swapped.swap(1, 2);
    rewrite(swapped);
    let run = verify();
    assert_eq!(run.status, 1);
    assert!(run.stderr.contains("line 2: its seq is 3 where 2 was expected"), "{}", run.stderr);

    std::fs::write(&log, &original).expect("restore log");
    assert_eq!(verify().status, 0);
}

#[test]
fn concurrent_processes_keep_one_intact_chain() {
    let (workspace, cache) = setup();
    let state = tempfile::tempdir().expect("state directory");
    let state_dir = state.path().to_str().expect("UTF-8 path").to_owned();
    let root = workspace.path().to_str().expect("UTF-8 path").to_owned();
    // Warm the cache first, so the processes below overlap in their calls, not in compiling.
    assert_eq!(toolcell(&cache, &["tools"]).status, 0);
    let processes: Vec<_> = (0..4)
        .map(|process| {
            let (cache, state_dir, root) = (cache.clone(), state_dir.clone(), root.clone());
            std::thread::spawn(move || {
                for call in 0..5 {
                    let args = format!(r#"{{"path": "p{process}-{call}.txt", "content": "x"}}"#);
                    let run = toolcell(&cache, &["--state-dir", &state_dir, "call", "write_file", &args, "--workspace", &root]);
                    assert_eq!(run.status, 0, "{}", run.stderr);
                }
            })
        })
        .collect();
    for process in processes {
        process.join().expect("a writer process failed");
    }
    let verify = toolcell(&cache, &["--state-dir", &state_dir, "audit", "verify"]);
    assert_eq!(verify.status, 0, "{}", verify.stderr);
    // Each write_file call: one allowed write and one call record.
    assert!(verify.stdout.contains("ok, 40 records"), "{}", verify.stdout);
}

#[test]
fn audit_tail_follow_prints_new_records() {
    use std::io::BufRead as _;
    let (workspace, cache) = setup();
    let state = tempfile::tempdir().expect("state directory");
    let state_dir = state.path().to_str().expect("UTF-8 path");
    let root = workspace.path().to_str().expect("UTF-8 path");
    let mut follower = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .args(["--state-dir", state_dir, "audit", "tail", "--follow", "--session", "s-follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start audit tail --follow");
    let stdout = follower.stdout.take().expect("piped stdout");
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let run = toolcell(
        &cache,
        &["--state-dir", state_dir, "call", "read_file", r#"{"path": "notes.txt"}"#, "--workspace", root, "--session", "s-follow"],
    );
    assert_eq!(run.status, 0, "{}", run.stderr);
    let line = receiver.recv_timeout(std::time::Duration::from_secs(30));
    let _ = follower.kill();
    let _ = follower.wait();
    let line = line.expect("the follower printed the new record");
    assert!(line.contains("s-follow role=impl tool=read_file") && line.contains("CALL ok"), "{line}");
}

#[test]
fn schema_prints_a_roles_tools_in_each_providers_shape() {
    let (_workspace, cache) = setup();
    let schema = |role: &str, format: &str| {
        let run = toolcell(&cache, &["schema", "--role", role, "--format", format]);
        assert_eq!(run.status, 0, "{}", run.stderr);
        serde_json::from_str::<serde_json::Value>(&run.stdout).expect("JSON")
    };
    let mcp = schema("impl", "mcp");
    assert_eq!(mcp["tools"].as_array().map(Vec::len), Some(16));
    assert_eq!(mcp["tools"][0]["annotations"]["destructiveHint"], true);
    let anthropic = schema("control", "anthropic");
    let names: Vec<&str> = anthropic.as_array().expect("array").iter().filter_map(|tool| tool["name"].as_str()).collect();
    assert_eq!(names, ["directory_tree", "file_info", "list_files", "read_file", "read_many", "search_files"]);
    assert!(anthropic[0]["input_schema"].is_object());
    let openai = schema("reviewer", "openai");
    assert_eq!(openai[0]["type"], "function");
    assert!(openai[0]["function"]["parameters"].is_object());
    let run = toolcell(&cache, &["schema", "--role", "admin"]);
    assert_eq!(run.status, 2);
    assert!(run.stderr.contains("has no role `admin`"), "{}", run.stderr);
    // OpenAI's strict mode: every property required, the optional ones nullable.
    let run = toolcell(&cache, &["schema", "--role", "impl", "--format", "openai", "--strict"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let strict: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    let edit = strict.as_array().expect("array").iter().find(|tool| tool["function"]["name"] == "edit_file").expect("edit_file");
    assert_eq!(edit["function"]["strict"], true);
    let parameters = &edit["function"]["parameters"];
    assert_eq!(parameters["additionalProperties"], false);
    assert_eq!(parameters["required"].as_array().map(Vec::len), parameters["properties"].as_object().map(serde_json::Map::len));
    assert_eq!(parameters["properties"]["old_string"]["type"], serde_json::json!(["string", "null"]));
    let run = toolcell(&cache, &["schema", "--format", "anthropic", "--strict"]);
    assert_eq!(run.status, 2);
    assert!(run.stderr.contains("use it with `--format openai`"), "{}", run.stderr);
}

/// `toolcell lock ...` and `toolcell call ...` against one state directory and workspace.
struct LockSite {
    workspace: tempfile::TempDir,
    state: tempfile::TempDir,
    cache: std::path::PathBuf,
}

impl LockSite {
    fn new() -> Self {
        let (workspace, cache) = setup();
        std::fs::create_dir(workspace.path().join("src")).expect("mkdir");
        std::fs::write(workspace.path().join("src/a.rs"), "fn a() {}\n").expect("write");
        LockSite { workspace, state: tempfile::tempdir().expect("state"), cache }
    }

    fn run(&self, args: &[&str]) -> Run {
        let root = self.workspace.path().to_str().expect("UTF-8");
        let state = self.state.path().to_str().expect("UTF-8");
        let mut full = vec!["--state-dir", state];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--workspace", root]);
        toolcell(&self.cache, &full)
    }

    fn acquire(&self, owner: &str, ttl: &str) -> Run {
        self.run(&["lock", "acquire", "src/a.rs", "--owner", owner, "--session", &format!("s-{owner}"), "--ttl", ttl, "--json"])
    }

    fn write(&self, owner: &str, fences: &[u64], content: &str) -> Run {
        let args = serde_json::json!({"path": "src/a.rs", "content": content}).to_string();
        let fences: Vec<String> = fences.iter().map(u64::to_string).collect();
        let mut full = vec!["call", "write_file", &args, "--owner", owner];
        for fence in &fences {
            full.extend_from_slice(&["--fence", fence]);
        }
        self.run(&full)
    }

    fn content(&self) -> String {
        std::fs::read_to_string(self.workspace.path().join("src/a.rs")).expect("read")
    }
}

fn fence_of(run: &Run) -> u64 {
    let lock: serde_json::Value = serde_json::from_str(&run.stdout).unwrap_or_else(|_| panic!("JSON lock: {}", run.stderr));
    lock["token"].as_u64().expect("token")
}

#[test]
fn two_processes_contend_for_a_lock_and_the_loser_cannot_write() {
    let site = LockSite::new();
    // Two processes at once: exactly one wins.
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| site.acquire("CHAIN-039", "60s"));
        let second = scope.spawn(|| site.acquire("CHAIN-040", "60s"));
        (first.join().expect("thread"), second.join().expect("thread"))
    });
    let (winner, loser, won) = match (first.status, second.status) {
        (0, 1) => ("CHAIN-039", "CHAIN-040", first),
        (1, 0) => ("CHAIN-040", "CHAIN-039", second),
        other => panic!("expected one winner, got {other:?}: {} / {}", first.stderr, second.stderr),
    };
    let fence = fence_of(&won);
    let listed = site.run(&["lock", "list"]);
    assert!(listed.stdout.contains(&format!("`src/a.rs` is locked by `{winner}` (session s-{winner}, exclusive)")), "{}", listed.stdout);

    // The loser's write is refused, naming the owner, and audited as a lock conflict.
    let refused = site.write(loser, &[], "lost\n");
    assert_eq!(refused.status, 1, "{}", refused.stdout);
    assert!(
        refused.stderr.contains(&format!("conflict: `src/a.rs` is locked by `{winner}` until "))
            && !refused.stderr.contains(&format!("s-{winner}")),
        "{}",
        refused.stderr
    );
    assert_eq!(site.content(), "fn a() {}\n");
    let tail = toolcell(&site.cache, &["--state-dir", site.state.path().to_str().expect("UTF-8"), "audit", "tail", "-n", "50"]);
    assert!(tail.stdout.contains(&format!("DENY write `src/a.rs` open-at (lock:{fence})")), "{}", tail.stdout);
    assert!(tail.stdout.contains(&format!("LOCK acquired exclusive `src/a.rs` (fence:{fence})")), "{}", tail.stdout);

    // The winner writes; after it releases, the loser can too.
    assert_eq!(site.write(winner, &[fence], "won\n").status, 0);
    assert_eq!(site.content(), "won\n");
    let released = site.run(&["lock", "release", &fence.to_string(), "--owner", winner]);
    assert_eq!(released.status, 0, "{}", released.stderr);
    assert_eq!(site.write(loser, &[], "after release\n").status, 0);
    assert_eq!(site.content(), "after release\n");
    // Releasing what one does not hold is refused.
    let again = site.run(&["lock", "release", &fence.to_string(), "--owner", loser]);
    assert_eq!(again.status, 1);
    assert!(again.stderr.contains("is held by"), "{}", again.stderr);
}

#[test]
fn an_expired_lease_is_reclaimed_and_its_stale_holder_is_fenced() {
    let site = LockSite::new();
    let stale = fence_of(&site.acquire("A", "1s"));
    std::thread::sleep(std::time::Duration::from_millis(1200));
    // Expired: the holder's token no longer lets it write.
    let refused = site.write("A", &[stale], "stale\n");
    assert_eq!(refused.status, 1);
    assert!(refused.stderr.contains(&format!("covered by your lock `src/a.rs` (token {stale}), which expired at")), "{}", refused.stderr);
    // B reclaims it; A is now refused by B's lock, and after B is done, by its lapsed token.
    let fresh = site.acquire("B", "60s");
    assert_eq!(fresh.status, 0, "{}", fresh.stderr);
    let fresh = fence_of(&fresh);
    assert!(fresh > stale);
    assert!(site.write("A", &[stale], "stale\n").stderr.contains("is locked by `B`"));
    assert_eq!(site.run(&["lock", "release", &fresh.to_string(), "--owner", "B"]).status, 0);
    let refused = site.write("A", &[stale], "stale\n");
    assert!(refused.stderr.contains("expired and was reclaimed by another holder"), "{}", refused.stderr);
    assert_eq!(site.content(), "fn a() {}\n");
    // A lock on a path outside the workspace is refused.
    let outside = site.run(&["lock", "acquire", "../x", "--owner", "A"]);
    assert_eq!(outside.status, 2);
    assert!(outside.stderr.contains("outside the workspace"), "{}", outside.stderr);
}

/// A policy that lets `impl` call every tool, plugins included, with an optional pin.
fn plugin_policy(directory: &Path, pin: Option<&str>) -> std::path::PathBuf {
    let mut text = String::from("version = 1\n");
    if let Some(pin) = pin {
        text.push_str(&format!("[plugins.misbehave]\nsha256 = \"{pin}\"\n"));
    }
    text.push_str(
        "[roles.impl]\ntools = [\"*\"]\n[[roles.impl.rules]]\naccess = [\"read\", \"list\"]\npaths = [\"**\"]\neffect = \"allow\"\n",
    );
    let path = directory.join("plugins-policy.toml");
    std::fs::write(&path, text).expect("write policy");
    path
}

#[test]
fn a_plugin_is_added_checked_pinned_and_refused_when_it_changes() {
    let (workspace, cache) = setup();
    let base = tempfile::tempdir().expect("base");
    let plugins = base.path().join("plugins");
    let component = base.path().join("misbehave.wasm");
    std::fs::write(&component, toolcell_tests::guest_program("misbehave")).expect("write component");
    let dir = |args: &[&str]| {
        let mut full = vec!["--plugin-dir", plugins.to_str().expect("UTF-8")];
        full.extend_from_slice(args);
        toolcell(&cache, &full)
    };

    // `misbehave` crashes on purpose, so the conformance suite refuses it; `--force` adds it
    // anyway, with the failures as warnings.
    let refused = dir(&["tools", "add", component.to_str().expect("UTF-8")]);
    assert_eq!(refused.status, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("conformance check(s) of `misbehave` failed"), "{}", refused.stderr);
    assert!(refused.stderr.contains("add it anyway with --force"), "{}", refused.stderr);
    assert!(!plugins.join("misbehave.wasm").exists(), "nothing installed");
    let added = dir(&["tools", "add", "--force", component.to_str().expect("UTF-8")]);
    assert_eq!(added.status, 0, "{}", added.stderr);
    assert!(added.stderr.contains("warning: conformance check failed: never traps"), "{}", added.stderr);
    assert!(added.stdout.contains("added `misbehave` as "), "{}", added.stdout);
    let sha = added.stdout.lines().find_map(|line| line.strip_prefix("sha256 ")).expect("the hash").to_owned();
    assert!(added.stdout.contains(&format!("[plugins.misbehave]\nsha256 = \"{sha}\"")), "{}", added.stdout);
    assert!(plugins.join("misbehave.wasm").is_file());

    // Loaded from the plugin directory, and callable by a role that has it.
    let listed = dir(&["tools"]);
    assert!(listed.stdout.contains("misbehave — Misbehave"), "{}", listed.stdout);
    let policy = plugin_policy(base.path(), Some(&sha));
    let policy = policy.to_str().expect("UTF-8");
    let root = workspace.path().to_str().expect("UTF-8");
    let called = dir(&["--policy", policy, "call", "misbehave", r#"{"action": "ok"}"#, "--workspace", root]);
    assert_eq!((called.status, called.stdout.trim()), (0, "ok"), "{}", called.stderr);

    // Adding the same bytes again changes nothing; a different component named like an
    // installed one, or like a built-in tool, is a collision.
    let again = dir(&["tools", "add", component.to_str().expect("UTF-8")]);
    assert_eq!(again.status, 0, "{}", again.stderr);
    assert!(again.stdout.contains("is installed already, with the same bytes; nothing changed"), "{}", again.stdout);
    let mut other = toolcell_tests::guest_program("misbehave").to_vec();
    other.extend_from_slice(&[0x00, 0x05, 0x04, b'o', b't', b'h', b'r']);
    let other_path = base.path().join("misbehave-other.wasm");
    std::fs::write(&other_path, other).expect("write");
    let twin = dir(&["tools", "add", "--force", other_path.to_str().expect("UTF-8")]);
    assert_eq!(twin.status, 2);
    assert!(twin.stderr.contains("two tool components are named `misbehave`"), "{}", twin.stderr);
    let builtin = base.path().join("read_file.wasm");
    let read_file = toolcell_builtins::components().into_iter().find(|(name, _)| *name == "read_file").expect("read_file").1;
    std::fs::write(&builtin, read_file).expect("write");
    let collision = dir(&["tools", "add", builtin.to_str().expect("UTF-8")]);
    assert_eq!(collision.status, 2);
    assert!(collision.stderr.contains("two tool components are named `read_file`"), "{}", collision.stderr);

    // The installed bytes change (a custom section appended: still a valid component): the
    // pin refuses to load it, naming both hashes.
    let mut changed = std::fs::read(plugins.join("misbehave.wasm")).expect("read");
    changed.extend_from_slice(&[0x00, 0x05, 0x04, b'e', b'v', b'i', b'l']);
    std::fs::write(plugins.join("misbehave.wasm"), changed).expect("write");
    let refused = dir(&["--policy", policy, "tools"]);
    assert_eq!(refused.status, 2);
    assert!(refused.stderr.contains("providing `misbehave` has SHA-256"), "{}", refused.stderr);
    assert!(refused.stderr.contains(&format!("line 3 pins {sha}: the plugin changed since it was pinned")), "{}", refused.stderr);
    // Without the pin, the changed component loads (the pin was the only guard).
    let unpinned = plugin_policy(base.path(), None);
    assert_eq!(dir(&["--policy", unpinned.to_str().expect("UTF-8"), "tools"]).status, 0);
    // Under a policy that has the tool's table already (its stubs), `tools add` prints the line
    // to put in it, not a second table that would be a duplicate.
    assert_eq!(dir(&["tools", "remove", "misbehave"]).status, 0);
    let stubbed = base.path().join("stubbed-policy.toml");
    std::fs::write(&stubbed, "version = 1\n[plugins.misbehave]\nstub_imports = [\"wasi:sockets/*\"]\n[roles.impl]\ntools = [\"*\"]\n")
        .expect("policy");
    let readded = dir(&["--policy", stubbed.to_str().expect("UTF-8"), "tools", "add", "--force", component.to_str().expect("UTF-8")]);
    assert_eq!(readded.status, 0, "{}", readded.stderr);
    assert!(readded.stdout.contains("existing [plugins.misbehave] table"), "{}", readded.stdout);
    assert!(!readded.stdout.contains("\n[plugins.misbehave]\n"), "{}", readded.stdout);
}

#[test]
fn a_component_with_forbidden_imports_is_not_added() {
    let (_workspace, cache) = setup();
    let base = tempfile::tempdir().expect("base");
    let component = base.path().join("net.wasm");
    std::fs::write(&component, toolcell_tests::guest_program("net_probe")).expect("write component");
    let plugins = base.path().join("plugins");
    let run = toolcell(&cache, &["--plugin-dir", plugins.to_str().expect("UTF-8"), "tools", "add", component.to_str().expect("UTF-8")]);
    assert_eq!(run.status, 2);
    assert!(run.stderr.contains("wasi:sockets"), "{}", run.stderr);
    assert!(!plugins.exists() || std::fs::read_dir(&plugins).expect("read").next().is_none());
}

#[test]
fn conformance_reports_and_exits_by_the_verdict() {
    let (_workspace, cache) = setup();
    let base = tempfile::tempdir().expect("base");
    let good = base.path().join("read_file.wasm");
    let read_file = toolcell_builtins::components().into_iter().find(|(name, _)| *name == "read_file").expect("read_file").1;
    std::fs::write(&good, read_file).expect("write");
    let passed = toolcell(&cache, &["conformance", good.to_str().expect("UTF-8")]);
    assert_eq!(passed.status, 0, "{}{}", passed.stdout, passed.stderr);
    assert!(passed.stdout.contains("PASS behaviour read_file returns the file's lines"), "{}", passed.stdout);
    assert!(passed.stdout.ends_with("checks passed\n"), "{}", passed.stdout);

    let bad = base.path().join("misbehave.wasm");
    std::fs::write(&bad, toolcell_tests::guest_program("misbehave")).expect("write");
    let failed = toolcell(&cache, &["conformance", bad.to_str().expect("UTF-8"), "--json"]);
    assert_eq!(failed.status, 1);
    let report: serde_json::Value = serde_json::from_str(&failed.stdout).expect("JSON report");
    assert_eq!(report["tool"], "misbehave");
    let failing: Vec<&str> = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|check| check["passed"] == false)
        .filter_map(|check| check["name"].as_str())
        .collect();
    assert_eq!(failing, ["never traps on schema-generated arguments", "stays within its deadline and memory"]);

    // For CI systems: JUnit XML, a test case per check, a failure per failed check; the same
    // exit status.
    let junit = toolcell(&cache, &["conformance", bad.to_str().expect("UTF-8"), "--format", "junit"]);
    assert_eq!(junit.status, 1);
    let checks = report["checks"].as_array().expect("checks").len();
    assert!(junit.stdout.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites "), "{}", junit.stdout);
    assert!(junit.stdout.contains(&format!("tests=\"{checks}\" failures=\"2\"")), "{}", junit.stdout);
    assert_eq!(junit.stdout.matches("<testcase ").count(), checks, "{}", junit.stdout);
    assert_eq!(junit.stdout.matches("<failure message=").count(), 2, "{}", junit.stdout);
    assert!(junit.stdout.contains("name=\"stays within its deadline and memory\">"), "{}", junit.stdout);
    let as_format = toolcell(&cache, &["conformance", bad.to_str().expect("UTF-8"), "--format", "json"]);
    assert_eq!(as_format.stdout, failed.stdout);

    let missing = toolcell(&cache, &["conformance", "/nonexistent/tool.wasm"]);
    assert_eq!(missing.status, 2);
    assert!(missing.stderr.contains("cannot read `/nonexistent/tool.wasm`"), "{}", missing.stderr);
}

#[test]
fn audit_verify_notices_removed_records_and_a_missing_trail() {
    let (workspace, cache) = setup();
    let state = tempfile::tempdir().expect("state directory");
    let state_dir = state.path().to_str().expect("UTF-8 path");
    let root = workspace.path().to_str().expect("UTF-8 path");
    for _ in 0..2 {
        let run = toolcell(&cache, &["--state-dir", state_dir, "call", "read_file", r#"{"path": "notes.txt"}"#, "--workspace", root]);
        assert_eq!(run.status, 0, "{}", run.stderr);
    }
    let verify = || toolcell(&cache, &["--state-dir", state_dir, "audit", "verify"]);
    assert_eq!(verify().status, 0);

    // The last record cut off: every remaining record is intact, but the head is not reached.
    let log = state.path().join("audit.jsonl");
    let original = std::fs::read_to_string(&log).expect("read log");
    let lines: Vec<&str> = original.lines().collect();
    std::fs::write(&log, format!("{}\n", lines[..lines.len() - 1].join("\n"))).expect("truncate the log");
    let run = verify();
    assert_eq!(run.status, 1, "{}", run.stdout);
    assert!(run.stderr.contains("the last records were removed"), "{}", run.stderr);
    // Emptied altogether.
    std::fs::write(&log, "").expect("empty the log");
    let run = verify();
    assert_eq!(run.status, 1, "{}", run.stdout);
    assert!(run.stderr.contains("removed"), "{}", run.stderr);

    // Rewritten and re-sealed by someone who can write the log and its head file but not read
    // the state key: a record changed, the chain sealed again from the start, and the head
    // written as the chain now ends (untagged, tagged under a guessed key, or the old tag).
    std::fs::write(&log, &original).expect("restore the log");
    assert_eq!(verify().status, 0);
    let head_file = state.path().join("audit.head");
    let genuine_head = std::fs::read_to_string(&head_file).expect("the head file");
    let mut link = toolcell_audit::Link::GENESIS;
    let mut forged = String::new();
    for line in &lines {
        let mut record: toolcell_audit::Record = serde_json::from_str(line).expect("a record");
        record.role = "root".to_owned();
        let (sealed, next) = toolcell_audit::seal(&record, &link);
        forged.push_str(&sealed);
        forged.push('\n');
        link = next;
    }
    assert!(toolcell_audit::verify(forged.lines()).is_ok(), "the forged chain is consistent in itself");
    std::fs::write(&log, &forged).expect("forge the log");
    let tag = genuine_head.split(' ').nth(2).expect("the genuine head has a tag").to_owned();
    for head in [
        format!("{:020} {}\n", link.seq, link.hash),
        toolcell_audit::checkpoint(&link, &[0u8; 32]),
        format!("{:020} {} {tag}", link.seq, link.hash),
    ] {
        std::fs::write(&head_file, &head).expect("forge the head");
        let run = verify();
        assert_eq!(run.status, 1, "a re-sealed chain with head {head:?} passed: {}", run.stdout);
        assert!(run.stderr.contains("the checkpoint"), "{}", run.stderr);
    }
    // The genuine head still tells the forged chain from the one it sealed.
    std::fs::write(&head_file, &genuine_head).expect("restore the head");
    assert_eq!(verify().status, 1);
    std::fs::write(&log, &original).expect("restore the log");
    assert_eq!(verify().status, 0);

    // No trail at all: said, exit 1, and nothing is created.
    let missing = state.path().join("never-used");
    let run = toolcell(&cache, &["--state-dir", missing.to_str().expect("UTF-8"), "audit", "verify"]);
    assert_eq!(run.status, 1);
    assert!(run.stderr.contains("there is no audit trail"), "{}", run.stderr);
    // Where else it may be: another state directory, or PostgreSQL.
    assert!(run.stderr.contains("--state-dir") && run.stderr.contains("--store URL"), "{}", run.stderr);
    assert!(!missing.exists(), "verify created the state directory");
}

#[test]
fn component_text_is_printed_with_control_characters_escaped() {
    let (workspace, cache) = setup();
    let root = workspace.path().to_str().expect("UTF-8 path");
    let base = tempfile::tempdir().expect("base");
    let plugins = base.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugin directory");
    std::fs::write(plugins.join("misbehave.wasm"), toolcell_tests::guest_program("misbehave")).expect("install the plugin");
    let policy = plugin_policy(base.path(), None);
    let run_with = |args: &[&str]| {
        let mut full = vec!["--plugin-dir", plugins.to_str().expect("UTF-8"), "--policy", policy.to_str().expect("UTF-8")];
        full.extend_from_slice(args);
        toolcell(&cache, &full)
    };
    let hostile = r"clear\u001b[2J title\u001b]0;pwned\u0007 back\rline\nnext\tcell";
    let run = run_with(&["call", "misbehave", &format!(r#"{{"action": "echo", "text": "{hostile}"}}"#), "--workspace", root]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(!run.stdout.contains(['\u{1b}', '\u{7}', '\r']), "raw control characters reached the terminal: {:?}", run.stdout);
    assert_eq!(run.stdout, "clear\\u{1b}[2J title\\u{1b}]0;pwned\\u{7} back\\rline\nnext\tcell\n");
    let run = run_with(&["call", "misbehave", &format!(r#"{{"action": "echo_error", "text": "{hostile}"}}"#), "--workspace", root]);
    assert_eq!(run.status, 1);
    assert!(run.stderr.starts_with("failed: clear\\u{1b}[2J") && !run.stderr.contains('\u{1b}'), "{:?}", run.stderr);
    // JSON output is JSON: the text is there as the component returned it, escaped by JSON.
    let run = run_with(&["call", "misbehave", &format!(r#"{{"action": "echo", "text": "{hostile}"}}"#), "--workspace", root, "--json"]);
    let document: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON output");
    assert!(document["text"].as_str().is_some_and(|text| text.starts_with("clear\u{1b}[2J")), "{}", run.stdout);
}

/// Whether this process runs as root (the owner of `/proc/self` is the process's user).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|metadata| metadata.uid() == 0)
}

#[test]
fn a_write_the_filesystem_refuses_says_so_and_leaves_the_file_as_it_was() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    // Root writes anything; the check is for an ordinary user, so as root the command runs as
    // `nobody` (a copy of the binary, in a directory that user can reach).
    const NOBODY: u32 = 65534;
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("workspace");
    std::fs::create_dir(&workspace).expect("workspace");
    let file = workspace.join("locked.txt");
    std::fs::write(&file, "read-only\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    let as_root = running_as_root();
    let binary = if as_root { temp.path().join("toolcell") } else { std::path::PathBuf::from(env!("CARGO_BIN_EXE_toolcell")) };
    if as_root {
        std::fs::copy(env!("CARGO_BIN_EXE_toolcell"), &binary).expect("copy the binary");
    }
    let mut command = Command::new(&binary);
    if as_root {
        for path in [temp.path(), &workspace, &file, &binary] {
            std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).expect("chown");
        }
        std::os::unix::process::CommandExt::uid(&mut command, NOBODY);
        std::os::unix::process::CommandExt::gid(&mut command, NOBODY);
    }
    let before = std::fs::metadata(&file).expect("stat");
    let state = temp.path().join("state");
    let output = command
        .args(["--no-cache", "--state-dir"])
        .arg(&state)
        .args(["call", "write_file", r#"{"path": "locked.txt", "content": "changed\n"}"#, "--workspace"])
        .arg(&workspace)
        .env("HOME", temp.path())
        .env_remove("TOOLCELL_CACHE_DIR")
        .env_remove("TOOLCELL_STATE_DIR")
        .output()
        .expect("run toolcell");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refused by the filesystem: permission denied (its mode is 0444)") && !stderr.contains("outside the workspace"),
        "{stderr}"
    );
    let after = std::fs::metadata(&file).expect("stat");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "read-only\n");
    assert_eq!((after.ino(), after.gid(), after.mode()), (before.ino(), before.gid(), before.mode()), "the file was recreated");
    let names: Vec<String> = std::fs::read_dir(&workspace)
        .expect("list")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["locked.txt"], "nothing was left beside it");
}

#[test]
fn call_takes_the_current_directory_empty_arguments_stdin_and_files() {
    use std::io::Write as _;
    let (workspace, cache) = setup();
    let state = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-state");
    let base = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
        command.arg("--cache-dir").arg(&cache).arg("--state-dir").arg(&state).current_dir(workspace.path());
        command
    };
    // No `--workspace`: the current directory. No arguments: `{}`.
    let listed = base().args(["call", "list_files"]).output().expect("run");
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    assert!(String::from_utf8_lossy(&listed.stdout).contains("notes.txt"));
    // `-`: the arguments come from stdin.
    let mut child = base()
        .args(["call", "read_file", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(br#"{"path": "notes.txt"}"#).expect("write stdin");
    let from_stdin = child.wait_with_output().expect("wait");
    assert!(from_stdin.status.success());
    assert!(String::from_utf8_lossy(&from_stdin.stdout).contains("second"));
    // `@FILE`: from a file (outside the workspace: the CLI reads it, not the tool).
    let arguments = tempfile::NamedTempFile::new().expect("arguments file");
    std::fs::write(arguments.path(), r#"{"path": "notes.txt", "limit": 1}"#).expect("write arguments");
    let from_file = base().args(["call", "read_file", &format!("@{}", arguments.path().display())]).output().expect("run");
    assert!(from_file.status.success(), "{}", String::from_utf8_lossy(&from_file.stderr));
    let text = String::from_utf8_lossy(&from_file.stdout);
    assert!(text.contains("first") && !text.contains("\tsecond"), "{text}");
    // A missing arguments file is a host error naming it.
    let missing = base().args(["call", "read_file", "@no-such-args.json"]).output().expect("run");
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read the arguments from `no-such-args.json`"));
}

#[test]
fn lock_ttls_are_plain_seconds_or_durations() {
    let (workspace, cache) = setup();
    let root = workspace.path().to_str().expect("UTF-8 path");
    let seconds = toolcell(&cache, &["lock", "acquire", "notes.txt", "--workspace", root, "--owner", "A", "--ttl", "90", "--json"]);
    assert_eq!(seconds.status, 0, "{}", seconds.stderr);
    let lock: serde_json::Value = serde_json::from_str(&seconds.stdout).expect("JSON");
    let with_unit = toolcell(&cache, &["lock", "acquire", "notes.txt", "--workspace", root, "--owner", "A", "--ttl", "90s", "--json"]);
    assert_eq!(with_unit.status, 0, "{}", with_unit.stderr);
    assert_eq!(lock["pattern"], "notes.txt");
    let wrong = toolcell(&cache, &["lock", "acquire", "notes.txt", "--workspace", root, "--owner", "A", "--ttl", "soon"]);
    assert_eq!(wrong.status, 2);
    assert!(wrong.stderr.contains("write seconds (`90`)"), "{}", wrong.stderr);
}

#[test]
fn policy_show_prints_the_effective_policy_ready_to_copy() {
    let (workspace, cache) = setup();
    let shown = toolcell(&cache, &["policy", "show"]);
    assert_eq!(shown.status, 0, "{}", shown.stderr);
    let (header, text) = shown.stdout.split_once('\n').expect("a header line");
    assert!(header.starts_with("# The effective policy, from policies/default.toml"), "{header}");
    assert_eq!(text, toolcell_host::DEFAULT_POLICY);
    // What it prints loads as a policy file of its own.
    let copy = workspace.path().join("copy.toml");
    std::fs::write(&copy, &shown.stdout).expect("write the copy");
    let checked = toolcell(&cache, &["policy", "check", copy.to_str().expect("UTF-8 path")]);
    assert_eq!(checked.status, 0, "{}", checked.stderr);
    let workflow = toolcell(&cache, &["--policy", "builtin:workflow", "policy", "show"]);
    assert_eq!(workflow.status, 0, "{}", workflow.stderr);
    assert!(workflow.stdout.contains("may_spawn"), "{}", workflow.stdout);
}

#[test]
fn shell_completions_cover_the_commands() {
    let (_, cache) = setup();
    for shell in ["bash", "zsh", "fish"] {
        let script = toolcell(&cache, &["completions", shell]);
        assert_eq!(script.status, 0, "{shell}: {}", script.stderr);
        for word in ["toolcell", "serve", "conformance", "workspace"] {
            assert!(script.stdout.contains(word), "{shell} completions lack {word}");
        }
    }
}

#[test]
fn an_error_and_its_cause_are_each_said_once() {
    let (_, cache) = setup();
    let missing = toolcell(&cache, &["--policy", "/nonexistent/policy.toml", "tools"]);
    assert_eq!(missing.status, 2);
    insta::assert_snapshot!(missing.stderr, @"error: cannot read the policy `/nonexistent/policy.toml`: No such file or directory (os error 2)");
    // A command that serves says that the host did not start.
    let (workspace, _) = setup();
    let workspace = workspace.path().to_str().expect("UTF-8 path");
    let serving = toolcell(&cache, &["--policy", "/nonexistent/policy.toml", "mcp", "--workspace", workspace]);
    assert_eq!(serving.status, 2);
    insta::assert_snapshot!(serving.stderr, @"error: cannot start the toolcell host: cannot read the policy `/nonexistent/policy.toml`: No such file or directory (os error 2)");
}

#[test]
fn policy_explain_answers_in_json_and_whether_a_role_may_call_a_tool() {
    let (_workspace, cache) = setup();
    let json = toolcell(&cache, &["policy", "explain", "--role", "impl", "--access", "write", "src/main.rs", "--json"]);
    assert_eq!(json.status, 0, "{}", json.stderr);
    let decision: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(decision["effect"], "allow");
    assert_eq!(decision["rule"], "impl-write");
    assert_eq!(decision["path"], "src/main.rs");
    assert!(decision["line"].is_u64(), "{decision}");
    let denied = toolcell(&cache, &["policy", "explain", "--role", "control", "--access", "write", "src/main.rs", "--json"]);
    assert_eq!(denied.status, 1);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&denied.stdout).expect("JSON")["effect"], "deny");
    // A role that may read a path but not call the tool asked about: denied, and said why.
    let tool = toolcell(&cache, &["policy", "explain", "--role", "reviewer", "--access", "read", "src/main.rs", "--tool", "write_file"]);
    assert_eq!(tool.status, 1);
    assert!(tool.stdout.starts_with("allow: read of `src/main.rs`"), "{}", tool.stdout);
    assert!(tool.stdout.contains("tool `write_file`: role `reviewer` may not call it"), "{}", tool.stdout);
    let tool_json =
        toolcell(&cache, &["policy", "explain", "--role", "impl", "--access", "read", "src/main.rs", "--tool", "read_file", "--json"]);
    assert_eq!(tool_json.status, 0);
    let answer: serde_json::Value = serde_json::from_str(&tool_json.stdout).expect("JSON");
    assert_eq!(answer["tool"], serde_json::json!({"name": "read_file", "may_call": true}));
}

#[test]
fn a_conforming_plugin_is_added_without_force_and_removed_by_name() {
    let (_workspace, cache) = setup();
    let base = tempfile::tempdir().expect("base");
    let plugins = base.path().join("plugins");
    let component = base.path().join("word_count.wasm");
    let wasm = toolcell_tests::examples::COMPONENTS.iter().find(|(name, _)| *name == "word_count").expect("the example is built").1;
    std::fs::write(&component, wasm).expect("write component");
    let dir = |args: &[&str]| {
        let mut full = vec!["--plugin-dir", plugins.to_str().expect("UTF-8")];
        full.extend_from_slice(args);
        toolcell(&cache, &full)
    };
    let added = dir(&["tools", "add", component.to_str().expect("UTF-8")]);
    assert_eq!(added.status, 0, "{}", added.stderr);
    assert!(!added.stderr.contains("warning"), "{}", added.stderr);
    assert!(plugins.join("word_count.wasm").is_file());
    assert!(dir(&["tools"]).stdout.contains("word_count"));
    let removed = dir(&["tools", "remove", "word_count"]);
    assert_eq!(removed.status, 0, "{}", removed.stderr);
    assert!(removed.stdout.contains("remove its [plugins.word_count] pin"), "{}", removed.stdout);
    assert!(!plugins.join("word_count.wasm").exists());
    assert!(!dir(&["tools"]).stdout.contains("word_count"));
    let unknown = dir(&["tools", "remove", "word_count"]);
    assert_eq!(unknown.status, 2);
    assert!(
        unknown.stderr.contains("no plugin `word_count` is installed") && unknown.stderr.contains("the installed ones are: none"),
        "{}",
        unknown.stderr
    );
    // A name is a tool name, never a path.
    let escape = dir(&["tools", "remove", "../plugins/word_count"]);
    assert_eq!(escape.status, 2);
}

#[test]
fn sdk_writes_a_languages_sdk_and_the_contract() {
    let (_, cache) = setup();
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (language, files) in [("python", &["toolcell.py"][..]), ("javascript", &["toolcell.js", "build.mjs"][..])] {
        let out = tempfile::tempdir().expect("output directory");
        let run = toolcell(&cache, &["sdk", language, "--out", out.path().to_str().expect("UTF-8 path")]);
        assert_eq!(run.status, 0, "{}", run.stderr);
        assert!(run.stdout.contains("next: "), "{}", run.stdout);
        for file in files {
            let source = if language == "python" { "guest-tools/sdk-python" } else { "guest-tools/sdk-js" };
            assert_eq!(
                std::fs::read(out.path().join(file)).expect("written"),
                std::fs::read(repository.join(source).join(file)).expect("the SDK's source")
            );
        }
        // The whole contract, as wit/ holds it: nothing missing, nothing changed.
        let mut pending = vec![repository.join("wit")];
        while let Some(directory) = pending.pop() {
            for entry in std::fs::read_dir(&directory).expect("read wit/").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                let relative = path.strip_prefix(&repository).expect("inside the repository");
                assert_eq!(std::fs::read(out.path().join(relative)).ok(), std::fs::read(&path).ok(), "{}", relative.display());
            }
        }
    }
    let run = toolcell(&cache, &["sdk", "cobol"]);
    assert_eq!(run.status, 2, "{}", run.stderr);
}

#[test]
fn a_one_shot_search_sees_an_edit_that_kept_the_size_and_the_modification_time() {
    let (workspace, cache) = setup();
    let root = workspace.path();
    std::fs::write(root.join("config.rs"), "let mode = \"alpha\";\n").expect("write");
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let state = tempfile::tempdir().expect("state directory");
    let (dir, state) = (root.to_str().expect("UTF-8"), state.path().to_str().expect("UTF-8"));
    let built = toolcell(&cache, &["--state-dir", state, "index", "build", "--workspace", dir]);
    assert_eq!(built.status, 0, "{}", built.stderr);
    // Edited in place, same size, its modification time put back (by another program, or a
    // tool that wants its change unseen).
    let path = root.join("config.rs");
    let modified = std::fs::metadata(&path).and_then(|metadata| metadata.modified()).expect("mtime");
    std::fs::write(&path, "let mode = \"omega\";\n").expect("edit");
    std::fs::File::options().write(true).open(&path).and_then(|file| file.set_modified(modified)).expect("restore mtime");
    let search = |query: &str| {
        let args = format!(r#"{{"query": "{query}"}}"#);
        toolcell(&cache, &["--state-dir", state, "call", "search_files", &args, "--workspace", dir])
    };
    let found = search("omega");
    assert_eq!((found.status, found.stdout.trim()), (0, "config.rs"), "{}", found.stderr);
    let stale = search("alpha");
    assert!(!stale.stdout.contains("config.rs"), "the index answered from the old content: {}", stale.stdout);
}

#[test]
fn index_build_status_and_drop_and_a_damaged_index_is_never_used() {
    let (workspace, cache) = setup();
    let root = workspace.path();
    std::fs::create_dir_all(root.join("src")).expect("mkdir");
    for number in 0..40 {
        std::fs::write(root.join(format!("src/m{number}.rs")), format!("fn item_{number}() {{}}\n")).expect("write");
    }
    std::fs::write(root.join("blob.bin"), b"a\x00b").expect("write");
    // Older than a second: the index does not trust a stamp from the last second (it counts
    // such a file as changed until it is older).
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    // The state directory inside the workspace: the host's own files are never indexed.
    let state = root.join(".toolcell-state");
    let (dir, state) = (root.to_str().expect("UTF-8"), state.to_str().expect("UTF-8"));
    let index = |command: &str, json: bool| {
        let mut args = vec!["--state-dir", state, "index", command, "--workspace", dir];
        if json {
            args.push("--json");
        }
        toolcell(&cache, &args)
    };
    let absent = index("status", true);
    assert_eq!((absent.status, absent.stdout.trim()), (1, r#"{"state":"absent"}"#));
    let built = index("build", true);
    assert_eq!(built.status, 0, "{}", built.stderr);
    let built: serde_json::Value = serde_json::from_str(&built.stdout).expect("JSON");
    // notes.txt from the fixture, the 40 sources; not the binary file, not the state.
    assert_eq!(built["files"], 41, "{built}");
    let status: serde_json::Value = serde_json::from_str(&index("status", true).stdout).expect("JSON");
    assert_eq!((status["state"].as_str(), status["changed"].as_u64()), (Some("present"), Some(0)), "{status}");
    std::fs::write(root.join("src/m1.rs"), "fn changed() {}\n").expect("write");
    std::fs::write(root.join("src/new.rs"), "fn new() {}\n").expect("write");
    std::fs::remove_file(root.join("src/m2.rs")).expect("remove");
    let status: serde_json::Value = serde_json::from_str(&index("status", true).stdout).expect("JSON");
    assert_eq!(status["changed"], 3, "{status}");
    // Damaged or cut short: refused, never used, and rebuilt by `build`.
    let file =
        std::fs::read_dir(Path::new(state).join("index")).expect("the index directory").flatten().next().expect("an index file").path();
    let mut bytes = std::fs::read(&file).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xFF;
    std::fs::write(&file, &bytes).expect("damage");
    let damaged = index("status", false);
    assert_eq!(damaged.status, 1);
    assert!(damaged.stdout.contains("cannot be used") && damaged.stdout.contains("checksum"), "{}", damaged.stdout);
    bytes.truncate(10);
    std::fs::write(&file, &bytes).expect("cut");
    assert_eq!(index("status", false).status, 1);
    assert_eq!(index("build", false).status, 0);
    assert_eq!(index("status", false).status, 0);
    let dropped = index("drop", false);
    assert_eq!(dropped.stdout.trim(), "the index was removed");
    assert_eq!(index("status", false).status, 1);
}

#[test]
fn hosts_on_a_postgres_store_share_locks_and_one_audit_chain() {
    let Some(cluster) = toolcell_tests::postgres::Cluster::start() else {
        return;
    };
    let (workspace, cache) = setup();
    let dir = workspace.path().to_str().expect("UTF-8");
    let states = [tempfile::tempdir().expect("state"), tempfile::tempdir().expect("state")];
    // Host `index` (0 or 1), each with a state directory of its own.
    let on = |index: usize, args: &[&str]| {
        let mut all = vec!["--store", cluster.url.as_str(), "--state-dir", states[index].path().to_str().expect("UTF-8")];
        all.extend_from_slice(args);
        toolcell(&cache, &all)
    };
    // Not migrated: hosts refuse to start and say what to run; `status` says where it stands.
    let status = on(0, &["store", "status"]);
    assert_eq!(status.status, 1, "{}", status.stderr);
    assert!(
        status.stdout.contains("schema version 0; this toolcell needs 4: run `toolcell store migrate` with the same --store"),
        "{}",
        status.stdout
    );
    let refused = on(0, &["call", "read_file", r#"{"path": "notes.txt"}"#, "--workspace", dir]);
    assert_eq!(refused.status, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("toolcell store migrate"), "{}", refused.stderr);
    let migrated = on(0, &["store", "migrate"]);
    assert_eq!(migrated.status, 0, "{}", migrated.stderr);
    assert!(migrated.stdout.contains("migrated to schema version 4 (applied 1, 2, 3, 4)"), "{}", migrated.stdout);
    assert!(on(1, &["store", "migrate"]).stdout.contains("already at schema version 4"));
    // Host 0 locks; host 1 sees the lock, cannot take it, and may not write what it covers.
    let locked = on(0, &["lock", "acquire", "src/**", "--workspace", dir, "--owner", "A", "--json"]);
    assert_eq!(locked.status, 0, "{}", locked.stderr);
    let listed = on(1, &["lock", "list", "--workspace", dir]);
    assert!(listed.stdout.contains("src/**") && listed.stdout.contains('A'), "{}", listed.stdout);
    let taken = on(1, &["lock", "acquire", "src/a.rs", "--workspace", dir, "--owner", "B"]);
    assert_eq!(taken.status, 1, "{}", taken.stderr);
    let write = on(1, &["call", "write_file", r#"{"path": "src/a.rs", "content": "B\n"}"#, "--workspace", dir, "--owner", "B"]);
    assert_eq!(write.status, 1, "{}", write.stderr);
    assert!(write.stderr.starts_with("conflict:"), "{}", write.stderr);
    assert!(!workspace.path().join("src/a.rs").exists());
    // Both hosts' records are one chain, verified from either.
    let verified = on(1, &["audit", "verify"]);
    assert_eq!(verified.status, 0, "{}", verified.stderr);
    // Without --store, a host's state directory has no chain: the hint says where it is.
    let local = toolcell(&cache, &["--state-dir", states[0].path().to_str().expect("UTF-8"), "audit", "verify"]);
    assert_eq!(local.status, 1, "{}", local.stderr);
    assert!(
        local.stderr.contains("keeps its audit trail in PostgreSQL: pass --store URL")
            && local.stderr.contains("`[store] url` in `toolcell serve`'s service.toml"),
        "{}",
        local.stderr
    );
    assert!(verified.stdout.starts_with("postgres://toolcell@") && verified.stdout.contains(": ok, "), "{}", verified.stdout);
    let tail = on(0, &["audit", "tail", "-n", "50"]);
    assert!(tail.stdout.contains("LOCK acquired exclusive `src/**`") && tail.stdout.contains("DENY write `src`"), "{}", tail.stdout);
    // An edit in the table is found.
    cluster.psql(
        "ALTER TABLE toolcell_audit DISABLE TRIGGER toolcell_audit_append_only; UPDATE toolcell_audit SET line = replace(line, '\"decision\":\"deny\"', '\"decision\":\"allow\"')",
    );
    let tampered = on(0, &["audit", "verify"]);
    assert_eq!(tampered.status, 1, "{}", tampered.stdout);
    // The table's owner shortens the chain so that what is left verifies (the trigger
    // disabled): the table's own head agrees with what is left, but the host that wrote the
    // last records keeps a checkpoint of its own, tagged under its state key, which the
    // table's owner cannot remake.
    cluster.psql(
        "ALTER TABLE toolcell_audit DISABLE TRIGGER toolcell_audit_append_only; DELETE FROM toolcell_audit WHERE seq > 1; ALTER TABLE toolcell_audit ENABLE TRIGGER toolcell_audit_append_only",
    );
    let shortened = on(1, &["audit", "verify"]);
    assert_eq!(shortened.status, 1, "{}", shortened.stdout);
    assert!(shortened.stderr.contains("the last records were removed"), "{}", shortened.stderr);
    // Each host's checkpoint covers what it appended: host 0 wrote only the first record, and
    // a host that never appended (an auditor's) checks the chain and the table's head alone.
    assert_eq!(on(0, &["audit", "verify"]).status, 0);
    let auditor = tempfile::tempdir().expect("state");
    let audited =
        toolcell(&cache, &["--store", cluster.url.as_str(), "--state-dir", auditor.path().to_str().expect("UTF-8"), "audit", "verify"]);
    assert_eq!(audited.status, 0, "{}", audited.stderr);
}

#[test]
fn a_journal_that_does_not_verify_is_told_to_the_operator_and_stops_writes() {
    let (workspace, cache) = setup();
    let state = tempfile::tempdir().expect("state directory");
    let state_dir = state.path().to_str().expect("UTF-8 path");
    let root = workspace.path().to_str().expect("UTF-8 path");
    let call = |tool: &str, args: &str| toolcell(&cache, &["--state-dir", state_dir, "call", tool, args, "--workspace", root]);
    assert_eq!(call("read_file", r#"{"path": "notes.txt"}"#).status, 0);
    // Planted in the state directory, naming this workspace, with tags under another key.
    let canonical = std::fs::canonicalize(workspace.path()).expect("canonical");
    let header = serde_json::json!({"begin": {"version": 2, "workspace": canonical, "call_id": "c-planted", "session": "s"}});
    let planted = state.path().join("journal/1-planted.jsonl");
    std::fs::write(&planted, format!("{header}\t{}\n", "ab".repeat(32))).expect("plant");

    let run = call("write_file", r#"{"path": "notes.txt", "content": "x"}"#);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(run.stderr.contains("writes to this workspace are stopped"), "{}", run.stderr);
    // The operator is told once, with the journal to inspect and remove.
    assert_eq!(run.stderr.matches("toolcell: recovery in").count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains(&planted.display().to_string()), "{}", run.stderr);
    assert_eq!(call("read_file", r#"{"path": "notes.txt"}"#).status, 0, "reads go on");
    assert_eq!(std::fs::read_to_string(workspace.path().join("notes.txt")).expect("unchanged"), "first\nsecond\n");
    std::fs::remove_file(&planted).expect("the operator removes it");
    assert_eq!(call("write_file", r#"{"path": "notes.txt", "content": "x"}"#).status, 0);
}

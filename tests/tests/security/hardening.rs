//! The holes an attacker with a hostile component found, one test per class: native code
//! through the compiled-component cache, host-owned locations inside the workspace, directory
//! handles whose directory moved, symlinks that point outside after a move, audit flooding,
//! and probes that told hidden paths from missing ones.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use toolcell_runtime::{CacheOutcome, CallOutcome, CallRequest, Error, Runtime, RuntimeBuilder, Workspace};
use toolcell_tests::{builtin_runtime_builder, guest_program};
use toolcell_types::ToolErrorKind;

/// `impl` reads, lists and writes everything except `secrets/**`, which it may neither read nor
/// list (but may write: a drop box).
pub(crate) const DROPBOX_POLICY: &str = r#"
version = 1

[roles.impl]
tools = ["*"]

[[roles.impl.rules]]
id = "impl-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "secrets-hidden"
access = ["read", "list"]
paths = ["secrets/**"]
effect = "deny"
"#;

pub(crate) fn call(runtime: &Runtime, workspace: &Workspace, tool: &str, args: &Value) -> CallOutcome {
    let args = args.to_string();
    runtime
        .call(&CallRequest::new(workspace, "impl", "s-hardening", tool, &args))
        .unwrap_or_else(|error| panic!("host error calling {tool}: {error}"))
}

pub(crate) fn probe(runtime: &Runtime, workspace: &Workspace, ops: Value) -> CallOutcome {
    call(runtime, workspace, "fs_probe", &json!({ "ops": ops }))
}

pub(crate) fn records(state: &Path) -> Vec<toolcell_audit::Record> {
    let text = std::fs::read_to_string(state.join("audit.jsonl")).expect("read the audit log");
    toolcell_audit::verify(text.lines()).expect("the audit chain is intact");
    text.lines().map(|line| serde_json::from_str(line).expect("a record")).collect()
}

/// Panic unless the call was refused by the host and the audit trail in `state` holds exactly
/// one `deny` record for each of its refusals (same operation, path, access and rule), and no
/// other.
pub(crate) fn assert_audited(state: &Path, outcome: &CallOutcome, what: &str) {
    assert!(!outcome.denials.is_empty(), "{what}: not refused by the host: {:?}", outcome.result);
    let denies: Vec<toolcell_audit::Record> = records(state)
        .into_iter()
        .filter(|record| record.call_id == outcome.call_id && record.decision.as_deref() == Some("deny") && record.repeated.is_none())
        .collect();
    for denial in &outcome.denials {
        let event = &denial.event;
        let matching = denies
            .iter()
            .filter(|record| {
                record.operation.as_deref() == Some(event.operation)
                    && record.path.as_deref() == Some(event.path.as_str())
                    && record.access.as_deref() == Some(event.access.as_str())
                    && record.rule.as_deref() == Some(event.rule.as_str())
            })
            .count();
        assert_eq!(matching, 1, "{what}: the refusal {event:?} has {matching} deny records: {denies:?}");
    }
    assert_eq!(denies.len(), outcome.denials.len(), "{what}: {} refusals, deny records {denies:?}", outcome.denials.len());
}

pub(crate) fn write(root: &Path, relative: &str, content: &str) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("create parents");
    std::fs::write(path, content).expect("write file");
}

/// A workspace with `files`, governed by `policy`, with `fs_probe` and the built-in tools, and
/// an audit trail in `state` (beside the workspace).
pub(crate) struct Governed {
    pub(crate) _temp: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) state: PathBuf,
    pub(crate) runtime: Runtime,
    pub(crate) workspace: Workspace,
}

pub(crate) fn governed(policy: &str, files: &[(&str, &str)]) -> Governed {
    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path().join("workspace");
    let state = temp.path().join("state");
    std::fs::create_dir(&root).expect("workspace");
    for (relative, content) in files {
        write(&root, relative, content);
    }
    let runtime = builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .policy("dropbox.toml", policy)
        .audit_dir(&state)
        .build()
        .expect("runtime");
    let workspace = Workspace::open(&root).expect("workspace");
    Governed { _temp: temp, root, state, runtime, workspace }
}

/// The cached artifact files of a cache directory.
fn artifacts(cache: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache)
        .expect("read the cache")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "cwasm"))
        .collect();
    found.sort();
    found
}

/// A runtime with two built-in tools, cached in `cache`.
fn two_tools(cache: &Path) -> Result<Runtime, Error> {
    let mut builder = RuntimeBuilder::new().cache_dir(cache);
    for (name, wasm) in toolcell_builtins::components() {
        if name == "read_file" || name == "list_files" {
            builder = builder.component(format!("builtin:{name}"), wasm);
        }
    }
    builder.build()
}

#[test]
fn cached_artifacts_are_authenticated_before_they_are_loaded() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let cache = temp.path().join("cache");
    let first = two_tools(&cache).expect("first start");
    assert!(first.loaded().iter().all(|loaded| loaded.cache == CacheOutcome::Compiled));
    drop(first);
    let second = two_tools(&cache).expect("second start");
    assert!(second.loaded().iter().all(|loaded| loaded.cache == CacheOutcome::Cached));
    drop(second);
    let key = cache.join("cache.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).expect("the key exists").permissions());
    assert_eq!(mode & 0o777, 0o600, "the key is private");

    let files = artifacts(&cache);
    assert_eq!(files.len(), 2);
    let original = std::fs::read(&files[0]).expect("read artifact");
    let other = std::fs::read(&files[1]).expect("read artifact");
    // Each tamper keeps the file name, so only authentication can tell.
    let mut code_patched = original.clone();
    let middle = code_patched.len() / 2;
    for byte in &mut code_patched[middle..middle + 64] {
        *byte = 0xcc; // int3: machine code nobody compiled
    }
    let tampers: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", vec![0x5a; original.len()]),
        ("truncated", original[..original.len() / 3].to_vec()),
        ("valid header, patched code", code_patched),
        ("another component's genuine artifact", other),
        ("the bare wasmtime artifact without toolcell's tag", original[40..].to_vec()),
    ];
    for (what, bytes) in tampers {
        std::fs::write(&files[0], &bytes).expect("tamper with the artifact");
        let runtime = two_tools(&cache).unwrap_or_else(|error| panic!("{what}: the start fails: {error}"));
        let rejected: Vec<_> = runtime.loaded().iter().filter(|loaded| loaded.cache == CacheOutcome::Rejected).collect();
        assert_eq!(rejected.len(), 1, "{what}: exactly the tampered artifact is rejected: {:?}", runtime.loaded());
        assert!(
            runtime.warnings().iter().any(|warning| warning.contains("failed authentication")),
            "{what}: the operator is warned: {:?}",
            runtime.warnings()
        );
        // The component still works, compiled afresh, and the cache holds a genuine artifact again.
        let fixture = tempfile::tempdir().expect("workspace");
        std::fs::write(fixture.path().join("a.txt"), "hello\n").expect("write");
        let workspace = Workspace::open(fixture.path()).expect("workspace");
        let tool = rejected[0].tool.to_string();
        let args = if tool == "read_file" { json!({"path": "a.txt"}) } else { json!({}) };
        let outcome = call(&runtime, &workspace, &tool, &args);
        assert!(outcome.result.is_ok(), "{what}: {:?}", outcome.result);
        drop(runtime);
        let again = two_tools(&cache).expect("start after the recompilation");
        assert!(again.loaded().iter().all(|loaded| loaded.cache == CacheOutcome::Cached), "{what}");
        assert!(again.warnings().is_empty(), "{what}");
    }
}

#[test]
fn a_cache_or_key_that_others_could_change_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let temp = tempfile::tempdir().expect("temporary directory");
    let cache = temp.path().join("cache");
    drop(two_tools(&cache).expect("first start"));

    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    match two_tools(&cache) {
        Err(Error::Insecure { reason, .. }) => assert!(reason.contains("mode 777") && reason.contains("chmod"), "{reason}"),
        other => panic!("a world-writable cache must be refused, got {:?}", other.map(|_| ())),
    }
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::set_permissions(cache.join("cache.key"), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    match two_tools(&cache) {
        Err(Error::Insecure { reason, .. }) => assert!(reason.contains("the cache key has mode 644"), "{reason}"),
        other => panic!("a readable cache key must be refused, got {:?}", other.map(|_| ())),
    }
    std::fs::set_permissions(cache.join("cache.key"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    if rustix::process::geteuid().is_root() {
        // Owned by another user (`nobody`): refused as ssh refuses such a key directory.
        rustix::fs::chown(&cache, Some(rustix::process::Uid::from_raw(65534)), None).expect("chown");
        match two_tools(&cache) {
            Err(Error::Insecure { reason, .. }) => assert!(reason.contains("belongs to user 65534"), "{reason}"),
            other => panic!("a cache owned by another user must be refused, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn host_owned_locations_inside_the_workspace_cannot_be_changed_by_a_tool() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path().join("home");
    std::fs::create_dir(&root).expect("workspace");
    let cache = root.join(".cache/toolcell");
    let plugins = root.join("plugins"); // does not exist yet
    let state = root.join(".local/state/toolcell");
    let policy = root.join("policy.toml");
    std::fs::write(&policy, DROPBOX_POLICY).expect("write policy");
    let build = || {
        let mut builder = RuntimeBuilder::new().cache_dir(&cache).plugin_dir(&plugins).audit_dir(&state).policy_file(&policy);
        builder = builder.component("test:fs_probe", guest_program("fs_probe"));
        for (name, wasm) in toolcell_builtins::components() {
            if name == "read_file" || name == "move_file" {
                builder = builder.component(format!("builtin:{name}"), wasm);
            }
        }
        builder.build().expect("the runtime builds")
    };
    let runtime = build();
    let workspace = Workspace::open(&root).expect("workspace");
    let artifact = artifacts(&cache).into_iter().next().expect("an artifact");
    let artifact_name = format!(".cache/toolcell/{}", artifact.file_name().expect("name").to_string_lossy());
    let before = std::fs::read(&artifact).expect("read artifact");
    let attacks = [
        json!([{"op": "write", "path": artifact_name, "content": "\u{cc}\u{cc}\u{cc}"}]),
        json!([{"op": "truncate", "path": artifact_name}]),
        json!([{"op": "remove", "path": artifact_name}]),
        json!([{"op": "write", "path": "/.cache/toolcell/new.cwasm", "content": "x"}]),
        json!([{"op": "rename", "path": ".cache", "to": "moved"}]),
        json!([{"op": "rename", "path": ".cache/toolcell", "to": "moved"}]),
        json!([{"op": "mkdir", "path": "plugins"}]),
        json!([{"op": "write", "path": "plugins/evil.wasm", "content": "\u{0}asm"}]),
        json!([{"op": "symlink", "path": "plugins", "to": "elsewhere"}]),
        json!([{"op": "mkdir", "path": "staging"}, {"op": "rename", "path": "staging", "to": "plugins"}]),
        json!([{"op": "write", "path": ".local/state/toolcell/audit.jsonl", "content": ""}]),
        json!([{"op": "write", "path": "policy.toml", "content": "version = 1"}]),
        json!([{"op": "read", "path": ".cache/toolcell/cache.key"}]),
        json!([{"op": "hard_link", "path": ".cache/toolcell/cache.key", "to": "key-copy"}]),
    ];
    for ops in attacks {
        let outcome = probe(&runtime, &workspace, ops.clone());
        assert!(outcome.result.is_err(), "{ops} must be refused: {:?}", outcome.result);
        assert!(!outcome.denials.is_empty(), "{ops}: the guard refused it, not luck: {:?}", outcome.result);
        assert!(outcome.denials.iter().any(|denial| denial.event.rule.starts_with("protected:")), "{ops}: {:?}", outcome.denials);
        assert_audited(&state, &outcome, &ops.to_string());
    }
    // The cache is not even listed, nor shown where it lies.
    let listed = probe(&runtime, &workspace, json!([{"op": "list", "path": ".cache/toolcell"}]));
    assert!(listed.result.is_err(), "the cache is hidden: {:?}", listed.result);
    let listed = probe(&runtime, &workspace, json!([{"op": "list", "path": ".cache"}]));
    assert_eq!(listed.result.expect("`.cache` may be listed").structured.expect("structured")[0]["value"], json!([]));
    let _ = std::fs::remove_file(root.join("moved"));
    assert_eq!(std::fs::read(&artifact).expect("the artifact is still there"), before);
    assert!(!plugins.exists(), "no plugin directory was made");
    drop(runtime);
    // The next start loads the same authentic artifacts and no planted tool.
    let again = build();
    assert!(again.loaded().iter().all(|loaded| loaded.cache == CacheOutcome::Cached), "{:?}", again.loaded());
    assert_eq!(again.tools().count(), 3 + toolcell_runtime::NATIVE_TOOLS.len() + toolcell_runtime::ADAPTER_TOOLS.len());
}

#[test]
fn a_workspace_inside_a_host_directory_is_refused() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let state = temp.path().join("state");
    let runtime = builtin_runtime_builder().audit_dir(&state).build().expect("runtime");
    for inside in [state.clone(), state.join("journal"), state.join("workspaces/repo")] {
        std::fs::create_dir_all(&inside).expect("mkdir");
        let workspace = Workspace::open(&inside).expect("workspace");
        let refused = runtime.call(&CallRequest::new(&workspace, "impl", "s", "write_file", r#"{"path": "x.json", "content": "{}"}"#));
        match refused {
            Err(Error::Insecure { reason, .. }) => assert!(reason.contains("lies inside toolcell's own directory"), "{reason}"),
            other => panic!("{}: must be refused, got {:?}", inside.display(), other.map(|outcome| outcome.result)),
        }
        assert!(!inside.join("x.json").exists());
    }
}

#[test]
fn a_directory_handle_is_judged_where_the_directory_is_now() {
    let Governed { root, state, runtime, workspace, .. } =
        &governed(DROPBOX_POLICY, &[("pub/readme.txt", "public\n"), ("secrets/key.txt", "hidden\n")]);

    // The component moves the directory it holds into the hidden subtree, moves a hidden file
    // into it, and lists through the old handle.
    let outcome = probe(
        runtime,
        workspace,
        json!([
            {"op": "open_dir", "path": "pub"},
            {"op": "rename", "path": "pub", "to": "secrets/pub"},
            {"op": "rename", "path": "secrets/key.txt", "to": "secrets/pub/key.txt"},
            {"op": "list_held", "content": "0"},
        ]),
    );
    let shown = format!("{:?}", outcome.result);
    assert!(!shown.contains("key.txt\""), "a hidden name leaked through a stale handle: {shown}");
    assert!(outcome.result.is_err(), "{shown}");
    let refusal = outcome
        .denials
        .iter()
        .find(|denial| denial.event.operation == "read-directory")
        .unwrap_or_else(|| panic!("the listing is refused: {:?}", outcome.denials));
    assert_eq!(refusal.event.path, "secrets/pub", "judged where the directory is now");
    assert!(
        records(state)
            .iter()
            .any(|record| record.operation.as_deref() == Some("read-directory") && record.decision.as_deref() == Some("deny"))
    );
    // Rolled back: the call failed.
    assert!(root.join("pub/readme.txt").exists() && root.join("secrets/key.txt").exists());

    // Moved by someone else while the component holds the handle: a conflict, audited. The
    // component makes a directory once it holds the handle; the mover waits for it.
    let mover = {
        let root = root.clone();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            while !root.join("holding").is_dir() {
                assert!(started.elapsed() < std::time::Duration::from_secs(60), "the component never opened the directory");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            std::fs::rename(root.join("pub"), root.join("secrets/pub")).expect("move the directory");
            std::fs::rename(root.join("secrets/key.txt"), root.join("secrets/pub/key.txt")).expect("move the hidden file");
        })
    };
    let outcome = probe(
        runtime,
        workspace,
        json!([
            {"op": "open_dir", "path": "pub"},
            {"op": "mkdir", "path": "holding"},
            {"op": "sleep", "content": "3000"},
            {"op": "list_held", "content": "0"},
        ]),
    );
    mover.join().expect("the mover ran");
    let shown = format!("{:?}", outcome.result);
    assert!(!shown.contains("key.txt\""), "a hidden name leaked through a stale handle: {shown}");
    let error = outcome.result.expect_err("the stale listing is refused");
    assert_eq!(error.kind, ToolErrorKind::Conflict, "{}", error.message);
    assert!(outcome.denials.iter().any(|denial| denial.event.rule == "descriptor-moved"), "{:?}", outcome.denials);
    assert!(records(state).iter().any(|record| record.rule.as_deref() == Some("descriptor-moved")));
}

#[test]
fn a_move_may_not_make_a_symlink_point_outside() {
    let Governed { root, state, runtime, workspace, .. } = &governed(DROPBOX_POLICY, &[("x", "target\n"), ("a/b/c/keep.txt", "kept\n")]);
    // `a/b/c/l` leads to `x`; one level shallower, the same target climbs out.
    std::os::unix::fs::symlink("../../../x", root.join("a/b/c/l")).expect("symlink");
    let refused = [
        ("move_file", json!({"source": "a/b/c/l", "destination": "l"})),
        ("move_file", json!({"source": "a/b/c", "destination": "c"})),
        ("move_file", json!({"source": "a/b", "destination": "b"})),
        ("fs_probe", json!({"ops": [{"op": "rename", "path": "a/b/c/l", "to": "l"}]})),
        ("fs_probe", json!({"ops": [{"op": "rename", "path": "a/b", "to": "b"}]})),
        ("fs_probe", json!({"ops": [{"op": "hard_link", "path": "a/b/c/l", "to": "l2"}]})),
    ];
    for (tool, args) in refused {
        let outcome = call(runtime, workspace, tool, &args);
        let error = outcome.result.clone().expect_err("refused");
        assert_eq!(error.kind, ToolErrorKind::Denied, "{tool} {args}: {}", error.message);
        assert!(error.message.contains("a/b/c/l") && error.message.contains("outside the workspace"), "{tool} {args}: {}", error.message);
        assert!(outcome.denials.iter().any(|denial| denial.event.rule == "symlink-target"), "{tool} {args}");
        assert_audited(state, &outcome, &format!("{tool} {args}"));
        assert_eq!(std::fs::read_link(root.join("a/b/c/l")).expect("the link stays").to_string_lossy(), "../../../x");
    }
    // Moves that keep the target inside are fine.
    let moved = call(runtime, workspace, "move_file", &json!({"source": "a/b", "destination": "a/d"}));
    assert!(moved.result.is_ok(), "{:?}", moved.result);
    assert_eq!(std::fs::read_to_string(root.join("a/d/c/l")).expect("the link still resolves"), "target\n");
    let moved = call(runtime, workspace, "move_file", &json!({"source": "a/d/c/l", "destination": "a/e/f/l"}));
    assert!(moved.result.is_ok(), "a move deeper keeps the target inside: {:?}", moved.result);
}

#[test]
fn repeated_refusals_are_coalesced_and_a_flood_of_distinct_ones_stops_the_call() {
    let policy = format!("{DROPBOX_POLICY}\n[limits]\naudit_records = 40\n");
    let Governed { root, state, runtime, workspace, .. } = &governed(&policy, &[("secrets/key.txt", "hidden\n")]);

    // The same refusal 20,000 times: one record, and one saying how often it was repeated.
    for (operation, ops) in [
        ("stat-at", json!([{"op": "repeat", "path": "secrets/key.txt", "to": "stat", "content": "20000"}])),
        ("inspect", json!([{"op": "repeat", "path": "secrets/key.txt", "to": "inspect", "content": "20000"}])),
    ] {
        let outcome = probe(runtime, workspace, ops);
        let error = outcome.result.expect_err("refused");
        assert_eq!(error.kind, ToolErrorKind::Denied, "{}", error.message);
        let call_id = outcome.call_id.clone();
        let call_records: Vec<_> = records(state).into_iter().filter(|record| record.call_id == call_id).collect();
        let denies: Vec<_> = call_records.iter().filter(|record| record.decision.as_deref() == Some("deny")).collect();
        assert_eq!(denies.len(), 2, "{operation}: {denies:?}");
        assert_eq!(denies.iter().filter_map(|record| record.repeated).sum::<u64>(), 19_999, "{operation}: {denies:?}");
        assert!(denies.iter().all(|record| record.operation == denies[0].operation), "{operation}: {denies:?}");
    }

    // Distinct refusals past the budget: the call is stopped, rolled back, and says why.
    let outcome = probe(
        runtime,
        workspace,
        json!([
            {"op": "write", "path": "src/new.txt", "content": "kept only if the call succeeds"},
            {"op": "stat_many", "path": "secrets/probe", "content": "100000"},
        ]),
    );
    let error = outcome.result.expect_err("stopped");
    assert_eq!(error.kind, ToolErrorKind::TooLarge, "{}", error.message);
    assert!(error.message.contains("`audit_records`") && error.message.contains("40"), "{}", error.message);
    assert!(!root.join("src/new.txt").exists(), "the call was rolled back");
    let call_id = outcome.call_id.clone();
    let call_records: Vec<_> = records(state).into_iter().filter(|record| record.call_id == call_id).collect();
    assert!(call_records.len() <= 40 + 4, "at most the budget of records: {}", call_records.len());
    assert!(call_records.iter().any(|record| record.rule.as_deref() == Some("audit-record-budget")));
    assert!(call_records.iter().any(|record| record.kind == toolcell_audit::Kind::Call && record.outcome.as_deref() == Some("too-large")));
}

#[test]
fn hidden_paths_cannot_be_told_from_missing_ones() {
    let Governed { runtime, workspace, .. } =
        &governed(DROPBOX_POLICY, &[("secrets/key.txt", "hidden\n"), ("secrets/sub/deeper.txt", "hidden\n")]);
    let answer = |tool: &str, path: &str| -> String {
        let outcome = match tool {
            "file_info" => call(runtime, workspace, "file_info", &json!({"path": path})),
            op => probe(runtime, workspace, json!([{"op": op, "path": path}])),
        };
        // The whole answer (the host's error, or what the component saw), with the path
        // replaced so that two answers can be compared.
        let answer = match outcome.result {
            Ok(output) => format!("ok {}", output.text),
            Err(error) => format!("{} {}", error.kind, error.message),
        };
        answer.replace(path, "PATH")
    };
    for tool in ["stat", "lstat", "stat_at", "inspect", "file_info"] {
        for (existing, missing) in [
            ("secrets/key.txt", "secrets/nope.txt"),
            ("secrets/sub", "secrets/nosub"),
            ("secrets/sub/deeper.txt", "secrets/nosub/deeper.txt"),
        ] {
            assert_eq!(answer(tool, existing), answer(tool, missing), "{tool}: `{existing}` and `{missing}` answer differently");
        }
    }
    // Outside the hidden subtree, a missing path is still `not-found`.
    let outcome = call(runtime, workspace, "file_info", &json!({"path": "nope.txt"}));
    assert_eq!(outcome.result.expect_err("missing").kind, ToolErrorKind::NotFound);
}

#[test]
fn refusals_name_the_policy_file_without_its_host_path() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path().join("workspace");
    write(&root, "secrets/key.txt", "hidden\n");
    let policy = temp.path().join("deployment").join("governance.toml");
    std::fs::create_dir_all(policy.parent().expect("parent")).expect("mkdir");
    std::fs::write(&policy, DROPBOX_POLICY).expect("write policy");
    let state = temp.path().join("state");
    let runtime = builtin_runtime_builder().policy_file(&policy).audit_dir(&state).build().expect("runtime");
    let workspace = Workspace::open(&root).expect("workspace");
    let outcome = call(&runtime, &workspace, "read_file", &json!({"path": "secrets/key.txt"}));
    assert_audited(&state, &outcome, "read_file secrets/key.txt");
    let error = outcome.result.expect_err("denied");
    assert!(error.message.contains("governance.toml line"), "{}", error.message);
    assert!(!error.message.contains(&temp.path().to_string_lossy().into_owned()), "a host path leaked: {}", error.message);
    assert!(!error.message.contains("deployment"), "a host path leaked: {}", error.message);
}

#[test]
fn new_names_with_control_characters_are_refused_by_the_builtin_tools() {
    let Governed { root, runtime, workspace, .. } = &governed(DROPBOX_POLICY, &[("a.txt", "a\n")]);
    let cases = [
        ("write_file", json!({"path": "evil\nname.txt", "content": "x"})),
        ("write_file", json!({"path": "dir\u{1b}[31m/x.txt", "content": "x"})),
        ("create_directory", json!({"path": "bell\u{7}"})),
        ("move_file", json!({"source": "a.txt", "destination": "b\r.txt"})),
        ("apply_patch", json!({"patch": "*** Begin Patch\n*** Add File: tab\u{1b}]0;title\u{7}.txt\n+x\n*** End Patch"})),
        ("apply_patch", json!({"patch": "*** Begin Patch\n*** Update File: a.txt\n*** Move to: x\u{8}.txt\n@@\n-a\n+b\n*** End Patch"})),
    ];
    for (tool, args) in cases {
        let outcome = call(runtime, workspace, tool, &args);
        let error = outcome.result.expect_err("refused");
        assert_eq!(error.kind, ToolErrorKind::InvalidArgs, "{tool} {args}: {}", error.message);
        assert!(error.message.contains("control character"), "{tool}: {}", error.message);
        assert!(!error.message.chars().any(|character| character.is_control() && character != '\n'), "{tool}: the message escapes it");
    }
    let names: Vec<String> =
        std::fs::read_dir(root).expect("list").map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["a.txt"], "nothing was created");
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).expect("read"), "a\n");
}

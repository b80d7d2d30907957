//! The boundary's third pass, one test per escape a hostile component found: reads through an
//! open for writing, toolcell's own state read back from inside the workspace, symlinks that
//! resolve outside through other symlinks, a state directory others can write with journals
//! planted in it, and the smaller oracles (`metadata-hash-at`, `ask`-gated search candidates,
//! names with control characters).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use toolcell_runtime::{Access, Approver, CallOutcome, CallRequest, Error, Workspace};
use toolcell_tests::{builtin_runtime_builder, guest_program};

use super::hardening::{DROPBOX_POLICY, Governed, assert_audited, call, governed, probe, records, write};

/// What `secrets/server.pem` holds: it must never reach a tool whose role may not read it.
const PEM: &str = "-----BEGIN PRIVATE KEY----- hunter2-pem-material";

/// The operations of an `fs_probe` result, each `{op, path, ok, value|error}` (none when the
/// host failed the call for a refusal).
pub(crate) fn results(outcome: &CallOutcome) -> Vec<Value> {
    match &outcome.result {
        Ok(output) => output.structured.as_ref().and_then(|structured| structured.as_array()).cloned().unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// Whether the `fs_probe` call's only operation succeeded.
fn succeeded(outcome: &CallOutcome) -> bool {
    results(outcome).first().is_some_and(|result| result["ok"] == true)
}

/// Everything a call showed the agent.
pub(crate) fn shown(outcome: &CallOutcome) -> String {
    let mut text = outcome.warnings.join("\n");
    match &outcome.result {
        Ok(output) => {
            text.push_str(&output.text);
            text.push_str(&output.structured.as_ref().map(|structured| structured.value().to_string()).unwrap_or_default());
        }
        Err(error) => text.push_str(&error.message),
    }
    text
}

#[test]
fn an_open_is_judged_for_every_access_its_flags_grant() {
    // `impl` may write `secrets/**` (a drop box) but not read it.
    let Governed { runtime, workspace, state, .. } =
        &governed(DROPBOX_POLICY, &[("secrets/server.pem", PEM), ("src/a.txt", "visible text\n")]);
    for flags in ["read+write", "read+mutate", "read+write+mutate"] {
        let outcome = probe(runtime, workspace, json!([{"op": "open_read", "path": "secrets/server.pem", "to": flags}]));
        assert!(!shown(&outcome).contains("hunter2"), "{flags}: the content leaked: {}", shown(&outcome));
        let refusal = outcome.denials.iter().find(|denial| denial.event.path == "secrets/server.pem");
        let refusal = refusal.unwrap_or_else(|| panic!("{flags}: the open was not refused: {:?}", outcome.result));
        assert_eq!((refusal.event.access, refusal.event.rule.as_str()), (Access::Read, "secrets-hidden"), "{flags}");
        assert!(
            records(state).iter().any(|record| record.call_id == outcome.call_id
                && record.access.as_deref() == Some("read")
                && record.decision.as_deref() == Some("deny")),
            "{flags}: the refused read is audited"
        );
    }
    // A write-only open is still allowed (the drop box), and reads nothing through it.
    let outcome = probe(runtime, workspace, json!([{"op": "open_read", "path": "secrets/server.pem", "to": "write"}]));
    assert!(!shown(&outcome).contains("hunter2"), "{}", shown(&outcome));
    // The control: where the role may read, the same opens read.
    for flags in ["read+write", "read+mutate"] {
        let outcome = probe(runtime, workspace, json!([{"op": "open_read", "path": "src/a.txt", "to": flags}]));
        assert_eq!(results(&outcome)[0]["value"], json!(["visible text\n", "visible text\n"]), "{flags}: {:?}", outcome.result);
    }
}

/// `impl` may read and write everything but `secrets/**` (write only) and `.env` (neither).
const HOME_POLICY: &str = r#"
version = 1

[roles.impl]
tools = ["*"]

[[roles.impl.rules]]
id = "impl-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "secrets-write-only"
access = ["read"]
paths = ["secrets/**", ".env", ".env.*"]
effect = "deny"
"#;

#[test]
fn what_toolcell_keeps_inside_the_workspace_is_invisible_to_tools() {
    // The common case: the workspace is $HOME, and the state directory and the policy lie in it.
    let temp = tempfile::tempdir().expect("temporary directory");
    let home = temp.path().join("home");
    write(&home, "secrets/server.pem", PEM);
    write(&home, ".env", "API_TOKEN=hunter2-env\n");
    write(&home, "notes.txt", "hello\n");
    let state = home.join(".local/state/toolcell");
    let policy = home.join("policy.toml");
    std::fs::write(&policy, HOME_POLICY).expect("write policy");
    let runtime = builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .policy_file(&policy)
        .audit_dir(&state)
        .build()
        .expect("runtime");
    let workspace = Workspace::open(&home).expect("workspace");
    // Copies of the hidden contents land in the state directory: the undo record of the
    // overwritten key, the index of every text file, the journals and the audit trail.
    let overwrite = probe(&runtime, &workspace, json!([{"op": "write", "path": "secrets/server.pem", "content": "rotated"}]));
    assert!(succeeded(&overwrite), "{:?}", overwrite.result);
    std::fs::write(home.join(".env"), "API_TOKEN=hunter2-env\n").expect("rewrite .env");
    runtime.build_index(&workspace).expect("the index builds");

    let mut kept = Vec::new();
    let mut pending = vec![state.clone()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).expect("list state").flatten() {
            let path = entry.path();
            let relative = path.strip_prefix(&home).expect("inside").to_string_lossy().into_owned();
            let metadata = std::fs::symlink_metadata(&path).expect("lstat");
            let mode = std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o777;
            assert_eq!(mode & 0o077, 0, "`{relative}` is private (mode {mode:03o})");
            if metadata.is_dir() {
                pending.push(path);
            }
            kept.push(relative);
        }
    }
    assert!(kept.iter().any(|path| path.contains("undo")), "an undo record exists: {kept:?}");
    assert!(kept.iter().any(|path| path.contains("index")), "an index exists: {kept:?}");
    kept.push(".local/state/toolcell".to_owned());
    kept.push("policy.toml".to_owned());
    for path in &kept {
        for op in ["read", "stat", "lstat", "stat_at", "metadata_hash", "list", "open_read"] {
            let outcome = probe(&runtime, &workspace, json!([{"op": op, "path": path, "to": "read"}]));
            assert!(!shown(&outcome).contains("hunter2"), "{op} `{path}`: {}", shown(&outcome));
            assert!(!succeeded(&outcome) && !outcome.denials.is_empty(), "{op} `{path}` must be refused: {:?}", outcome.result);
            assert!(outcome.denials.iter().all(|denial| denial.event.rule.starts_with("protected:")), "{op} {path}: {:?}", outcome.denials);
            assert_audited(&state, &outcome, &format!("{op} `{path}`"));
        }
    }
    // Not listed where it lies, not found by a search, not a search candidate.
    let listing = probe(&runtime, &workspace, json!([{"op": "list", "path": ".local/state"}, {"op": "list", "path": "."}]));
    let listing = results(&listing);
    assert_eq!(listing[0]["value"], json!([]), "{listing:?}");
    assert!(!listing[1]["value"].to_string().contains("policy.toml"), "{listing:?}");
    for query in ["hunter2", "API_TOKEN", "call_id", "impl-all"] {
        let search = call(&runtime, &workspace, "search_files", &json!({"query": query}));
        let text = shown(&search);
        assert!(!text.contains(".local/state") && !text.contains("policy.toml"), "`{query}` found toolcell's own files: {text}");
        if query.starts_with("hunter2") {
            let files = search.result.expect("searched").structured.expect("structured")["files"].clone();
            assert_eq!(files, json!([]), "no file this role may read holds it");
        }
        let candidates = probe(&runtime, &workspace, json!([{"op": "candidates", "content": query}]));
        let value = results(&candidates).first().map(|result| result["value"].to_string()).unwrap_or_default();
        assert!(!value.contains(".local/state") && !value.contains("policy.toml"), "`{query}`: {value}");
    }
}

#[test]
fn a_new_symlink_is_judged_where_the_kernel_would_resolve_it() {
    let Governed { root, state, runtime, workspace, .. } = &governed(DROPBOX_POLICY, &[("a/inside.txt", "in\n"), ("x", "x\n")]);
    // Allowed: links that lead, and will lead, inside.
    for (link, target) in [("dot", "."), ("a/up", ".."), ("a/sibling", "../x"), ("via", "a/up/x")] {
        let outcome = probe(runtime, workspace, json!([{"op": "symlink", "path": link, "to": target}]));
        assert!(succeeded(&outcome), "`{link} -> {target}`: {:?}", outcome.result);
    }
    // Refused: outside through an existing link, or a `..` after a name, which a link made
    // later could send outside (`later -> d/..` with `d -> .` made afterwards).
    for (link, target) in [
        ("esc", "dot/.."),
        ("esc2", "dot/../workspace/x"),
        ("esc3", "a/up/../x"),
        ("a/esc4", "up/.."),
        ("later", "d/.."),
        ("later2", "a/../x"),
    ] {
        let outcome = probe(runtime, workspace, json!([{"op": "symlink", "path": link, "to": target}]));
        assert!(!succeeded(&outcome), "`{link} -> {target}` must be refused: {:?}", outcome.result);
        let denial = outcome.denials.iter().find(|denial| denial.event.rule == "symlink-target");
        assert!(denial.is_some(), "`{link} -> {target}`: {:?}", outcome.denials);
        assert_audited(state, &outcome, &format!("`{link} -> {target}`"));
        assert!(std::fs::symlink_metadata(root.join(link)).is_err(), "`{link}` was not made");
    }
    // Nor may an allowed link be moved where it would resolve outside.
    let outcome = probe(runtime, workspace, json!([{"op": "rename", "path": "a/up", "to": "up"}]));
    assert!(!succeeded(&outcome), "{:?}", outcome.result);
    assert!(outcome.denials.iter().any(|denial| denial.event.rule == "symlink-target"), "{:?}", outcome.denials);
    assert_audited(state, &outcome, "rename `a/up` to `up`");
    // A link planted from outside toolcell is reported as it resolves, not as it reads.
    std::os::unix::fs::symlink("dot/..", root.join("planted")).expect("plant");
    let info = call(runtime, workspace, "file_info", &json!({"path": "planted"}));
    let info = info.result.expect("file_info").structured.expect("structured");
    assert_eq!(info["target_type"], "outside the workspace", "{info}");
    assert!(info.get("target_path").is_none(), "{info}");
    let info = call(runtime, workspace, "file_info", &json!({"path": "via"})).result.expect("file_info").structured.expect("structured");
    assert_eq!((info["target_path"].as_str(), info["target_type"].as_str()), (Some("x"), Some("file")), "{info}");
}

#[test]
fn a_state_directory_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let temp = tempfile::tempdir().expect("temporary directory");
    let state = temp.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    for mode in [0o777, 0o770, 0o757] {
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(mode)).expect("chmod");
        match builtin_runtime_builder().audit_dir(&state).build() {
            Err(Error::Insecure { reason, .. }) => {
                assert!(reason.contains(&format!("mode {mode:03o}")) && reason.contains("chmod go-w"), "{reason}");
            }
            other => panic!("a state directory of mode {mode:03o} must be refused, got {:?}", other.map(|_| ())),
        }
    }
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    drop(builtin_runtime_builder().audit_dir(&state).build().expect("a directory only its owner writes is used"));
    // A symlink in its place is someone else's choice of where the state goes.
    let link = temp.path().join("link");
    std::os::unix::fs::symlink(&state, &link).expect("symlink");
    assert!(builtin_runtime_builder().audit_dir(link.join("inner")).build().is_ok(), "a real directory reached through a link");
}

#[test]
fn a_planted_journal_is_never_replayed() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let state = temp.path().join("state");
    let victim = temp.path().join("victim");
    let workspace_root = temp.path().join("workspace");
    for directory in [&victim, &workspace_root] {
        std::fs::create_dir_all(directory).expect("mkdir");
    }
    std::fs::write(victim.join(".bashrc"), "alias ls=ls\n").expect("write");
    drop(builtin_runtime_builder().audit_dir(&state).build().expect("first start"));
    // Another local user (or a tool that once reached the directory) plants a journal naming
    // the victim's directory: as the journal's own format, and with a well-formed tag made
    // under a key of its own.
    let header = json!({"begin": {"version": 2, "workspace": victim, "call_id": "c-planted", "session": "s"}});
    let step = json!({"step": {"call": "c-planted", "step": {"path": ".bashrc", "prior": {"kind": "file", "hex": "6375726c206576696c", "mode": 420}}}});
    let forged_tag = "ab".repeat(32);
    let planted = format!("{header}\t{forged_tag}\n{step}\t{forged_tag}\n");
    std::fs::create_dir_all(state.join("journal")).expect("journal directory");
    std::fs::write(state.join("journal/1-planted.jsonl"), &planted).expect("plant");
    std::fs::write(state.join("journal/2-untagged.jsonl"), format!("{header}\n{step}\n")).expect("plant");

    // An unrelated call replays nothing; opening the victim's directory replays nothing either.
    let runtime = builtin_runtime_builder().audit_dir(&state).build().expect("start");
    let unrelated = Workspace::open(&workspace_root).expect("workspace");
    let outcome = call(&runtime, &unrelated, "list_files", &json!({}));
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let victim_workspace = Workspace::open(&victim).expect("workspace");
    let found = runtime.recover(&victim_workspace);
    assert!(found.iter().all(|recovery| recovery.steps == 0 || recovery.error.is_some()), "{found:?}");
    assert!(found.iter().any(|recovery| recovery.error.as_deref().is_some_and(|error| error.contains("does not verify"))), "{found:?}");
    assert_eq!(std::fs::read_to_string(victim.join(".bashrc")).expect("read"), "alias ls=ls\n", "the planted journal was replayed");
}

#[test]
fn a_metadata_lookup_tells_a_hidden_file_from_a_missing_one_no_better_than_stat() {
    let Governed { runtime, workspace, .. } =
        &governed(HOME_POLICY, &[(".env", "API_TOKEN=x\n"), ("secrets/a.pem", "k\n"), ("notes.txt", "n\n")]);
    // The whole answer: the host's error, or what the component saw.
    let answer = |op: &str, path: &str| {
        let outcome = probe(runtime, workspace, json!([{"op": op, "path": path}]));
        match &outcome.result {
            Ok(_) => results(&outcome)[0]["error"].as_str().unwrap_or("ok").to_owned(),
            Err(error) => format!("{} {}", error.kind, error.message).replace(path, "PATH"),
        }
    };
    for op in ["metadata_hash", "stat", "lstat", "stat_at"] {
        assert_eq!(answer(op, ".env"), answer(op, ".env.local"), "{op}");
        assert_eq!(answer(op, "secrets/a.pem"), answer(op, "secrets/missing/a.pem"), "{op}");
    }
    assert_eq!(answer("metadata_hash", "notes.txt"), "ok");
}

/// Approves nothing, and counts what it was asked.
struct Refuser {
    asked: AtomicUsize,
}

impl Approver for Refuser {
    fn approve(&self, _role: &str, _access: Access, _path: &str, _rule: &str) -> bool {
        self.asked.fetch_add(1, Ordering::SeqCst);
        false
    }
}

#[test]
fn search_candidates_say_nothing_of_files_that_need_approval() {
    let policy = format!(
        "{DROPBOX_POLICY}\n[[roles.impl.rules]]\nid = \"ask-vault\"\naccess = [\"read\"]\npaths = [\"vault/**\"]\neffect = \"ask\"\n"
    );
    let Governed { runtime, workspace, .. } =
        &governed(&policy, &[("vault/token.txt", "needle-in-vault\n"), ("src/main.rs", "fn main() {} // needle\n")]);
    // Older than a second: the index trusts only such stamps.
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    runtime.build_index(workspace).expect("index");
    let refuser = Arc::new(Refuser { asked: AtomicUsize::new(0) });
    let approver: Arc<dyn Approver> = refuser.clone();
    let args = json!({"ops": [{"op": "candidates", "content": "needle-in-vault"}, {"op": "candidates", "content": "needle"}]}).to_string();
    let outcome = runtime
        .call(&CallRequest { approver: Some(&approver), ..CallRequest::new(workspace, "impl", "s-ask", "fs_probe", &args) })
        .expect("call");
    let found = results(&outcome);
    assert_eq!(found[0]["value"], json!([]), "an unapproved file is no candidate: {found:?}");
    assert_eq!(found[1]["value"], json!(["src/main.rs"]), "{found:?}");
    assert_eq!(refuser.asked.load(Ordering::SeqCst), 0, "nobody is asked about a file that only may match");
    // Without an approver at all, the same.
    let outcome = probe(runtime, workspace, json!([{"op": "candidates", "content": "needle-in-vault"}]));
    assert_eq!(results(&outcome)[0]["value"], json!([]));
}

#[test]
fn a_component_may_not_create_names_with_control_characters() {
    let Governed { root, state, runtime, workspace, .. } = &governed(DROPBOX_POLICY, &[("a.txt", "a\n")]);
    for ops in [
        json!([{"op": "write", "path": "evil\nname.txt", "content": "x"}]),
        json!([{"op": "mkdir", "path": "esc\u{1b}[31m"}]),
        json!([{"op": "rename", "path": "a.txt", "to": "b\r.txt"}]),
        json!([{"op": "symlink", "path": "link\u{7}", "to": "a.txt"}]),
        json!([{"op": "hard_link", "path": "a.txt", "to": "hard\u{1b}x"}]),
    ] {
        let outcome = probe(runtime, workspace, ops.clone());
        assert!(!succeeded(&outcome), "{ops}: {:?}", outcome.result);
        assert!(outcome.denials.iter().any(|denial| denial.event.rule == "control-character"), "{ops}: {:?}", outcome.denials);
        assert_audited(state, &outcome, &ops.to_string());
    }
    let names: Vec<String> =
        std::fs::read_dir(root).expect("list").map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["a.txt"], "nothing was created");
}

#[test]
fn host_files_planted_as_links_or_devices_are_not_read() {
    let Governed { runtime, workspace, .. } = &governed(DROPBOX_POLICY, &[("a.txt", "needle\n")]);
    let index = runtime.index_path(workspace);
    std::fs::create_dir_all(index.parent().expect("parent")).expect("mkdir");
    let _ = std::fs::remove_file(&index);
    std::os::unix::fs::symlink("/dev/zero", &index).expect("plant a link to a device");
    let started = std::time::Instant::now();
    let status = runtime.index_status(workspace);
    assert!(status.is_err() || matches!(status, Ok(toolcell_runtime::IndexStatus::Absent | toolcell_runtime::IndexStatus::Damaged(_))));
    let search = call(runtime, workspace, "search_files", &json!({"query": "needle"}));
    assert_eq!(search.result.expect("searched by a walk").text, "a.txt");
    std::fs::remove_file(&index).expect("remove");
    rustix::fs::mknodat(rustix::fs::CWD, &index, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).expect("mkfifo");
    let _ = runtime.index_status(workspace);
    let search = call(runtime, workspace, "search_files", &json!({"query": "needle"}));
    assert_eq!(search.result.expect("searched by a walk").text, "a.txt");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "nothing hung");
}

#[test]
fn a_file_with_several_hard_links_is_not_offered_as_readable_by_inspect() {
    let Governed { runtime, workspace, root, .. } = &governed(DROPBOX_POLICY, &[("a.txt", "alone\n"), ("b.txt", "twice\n")]);
    std::fs::hard_link(root.join("b.txt"), root.join("b-again.txt")).expect("hard link");
    // Reading it is refused, under either name.
    let read = call(runtime, workspace, "read_file", &json!({"path": "b.txt"}));
    assert!(read.result.is_err() && read.denials.iter().any(|denial| denial.event.rule == "hard-link"), "{:?}", read.result);
    // `inspect` (here through `file_info`) judges it as the guard judges each access, and
    // says why beside the result (the tool's own attempt to read the file is refused as any).
    for path in ["b.txt", "b-again.txt"] {
        let info = call(runtime, workspace, "file_info", &json!({"path": path}));
        let output = info.result.as_ref().expect("file_info of a hard-linked file answers");
        let access = &output.structured.as_ref().expect("structured")["access"];
        assert_eq!((&access["read"], &access["write"], &access["delete"]), (&json!("deny"), &json!("deny"), &json!("deny")), "{access}");
        assert!(
            info.warnings.iter().any(|warning| warning.contains(&format!("`{path}` has 2 hard links")))
                && output.text.contains("hard links"),
            "{:?} {}",
            info.warnings,
            output.text
        );
        assert!(info.denials.iter().all(|denial| denial.event.rule == "hard-link"), "{:?}", info.denials);
    }
    // A file with one link still reads `allow`.
    let info = call(runtime, workspace, "file_info", &json!({"path": "a.txt"})).result.expect("file_info").structured.expect("structured");
    assert_eq!(info["access"]["read"], "allow", "{info}");
}

/// A policy whose rules are named as the host names its own judgments.
const LOOKALIKE_POLICY: &str = r#"
version = 1

[roles.impl]
tools = ["*"]

[[roles.impl.rules]]
id = "all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "read-only-call"
access = ["read", "write"]
paths = ["a.txt"]
effect = "deny"

[[roles.impl.rules]]
id = "protected:.toolcell-*"
access = ["read", "write"]
paths = ["b.txt"]
effect = "deny"

[[roles.impl.rules]]
id = "default-deny"
access = ["read", "write"]
paths = ["c.txt"]
effect = "deny"
"#;

#[test]
fn a_refusal_is_worded_from_what_decided_it_not_from_the_rule_name() {
    let Governed { runtime, workspace, .. } = &governed(LOOKALIKE_POLICY, &[("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")]);
    for (path, rule, line) in [("a.txt", "read-only-call", 13), ("b.txt", "protected:.toolcell-*", 19), ("c.txt", "default-deny", 25)] {
        let read = call(runtime, workspace, "read_file", &json!({"path": path}));
        let message = &read.result.as_ref().expect_err("denied by the policy's rule").message;
        assert!(
            message.contains(&format!("read of `{path}` is denied for role `impl` by rule `{rule}`, dropbox.toml line {line}")),
            "{message}"
        );
        assert!(read.denials.iter().any(|denial| denial.event.rule == rule), "{:?}", read.denials);
    }
}

/// A symlink the user made whose target leads outside the workspace (`../../state`, `..`, an
/// absolute path, or a target that goes out through another link: `dot -> .`, `dot/../x`):
/// following it is refused, and reading it told the component the name outside. Its target is
/// now refused as well, recorded, and named nowhere; a target inside is read as it was.
#[test]
fn a_symlinks_target_outside_the_workspace_is_not_shown() {
    let governed = governed(DROPBOX_POLICY, &[("src/inner.txt", "inner\n")]);
    for (target, link) in
        [("../../state", "src/out"), ("..", "up"), ("/etc/passwd", "abs"), (".", "dot"), ("dot/../x", "through"), ("inner.txt", "src/in")]
    {
        std::os::unix::fs::symlink(target, governed.root.join(link)).expect("symlink");
    }
    for (link, target) in [("src/out", "../../state"), ("up", ".."), ("abs", "/etc/passwd"), ("through", "dot/../x")] {
        let outcome = probe(&governed.runtime, &governed.workspace, json!([{"op": "read_link", "path": link}]));
        assert!(outcome.result.is_err(), "{link}: {:?}", outcome.result);
        let shown = format!("{:?}{:?}", outcome.result, outcome.denials);
        assert!(!shown.contains(target) || target == "..", "{link}: its target was shown: {shown}");
        assert!(!shown.contains("state") && !shown.contains("passwd"), "{link}: {shown}");
        assert_audited(&governed.state, &outcome, link);
        assert_eq!(outcome.denials[0].event.rule, "workspace-boundary", "{link}");
    }
    for (link, target) in [("src/in", "inner.txt"), ("dot", ".")] {
        let outcome = probe(&governed.runtime, &governed.workspace, json!([{"op": "read_link", "path": link}]));
        assert_eq!(results(&outcome)[0]["value"], target, "{link}: {:?}", outcome.result);
        assert!(outcome.denials.is_empty(), "{link}: {:?}", outcome.denials);
    }
}

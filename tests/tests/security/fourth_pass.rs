//! The boundary's fourth pass: what one call has in flight is invisible to every other call,
//! hard links and `ask` rules, and a symlink judged and made as one step while another call
//! renames its directory. (The trusted locations of other runs — default cache and state
//! directories, the executable, `serve`'s configuration — are tested through the binary, in
//! `host/toolcell/tests/trusted.rs`.)

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use toolcell_runtime::{Approver, CallOutcome, CallRequest, Runtime, Workspace};
use toolcell_tests::{builtin_runtime_builder, guest_program};

use super::boundary::{results, shown};
use super::hardening::{Governed, governed, records, write};

/// `admin` rotates the protected `.env`; `impl` works everywhere else and may not touch it;
/// `secrets/**` needs approval to be read.
pub(crate) const TWO_ROLES: &str = r#"
version = 1

protected = [".env"]

[roles.admin]
tools = ["*"]

[[roles.admin.rules]]
id = "admin-all"
access = ["read", "list", "write", "delete"]
paths = ["**", ".env"]
effect = "allow"

[roles.impl]
tools = ["*"]

[[roles.impl.rules]]
id = "impl-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "env-hidden"
access = ["read", "list"]
paths = [".env"]
effect = "deny"

[[roles.impl.rules]]
id = "secrets-ask"
access = ["read"]
paths = ["secrets/**"]
effect = "ask"

[[roles.impl.rules]]
id = "docs-read-only"
access = ["write", "delete"]
paths = ["docs/**"]
effect = "deny"
"#;

const OLD_SECRET: &str = "API_KEY=old-secret-0000";
const NEW_SECRET: &str = "API_KEY=new-secret-rotated-4242";

/// Call `tool` as `role` in the session `s-<role>`.
pub(crate) fn call_as(runtime: &Runtime, workspace: &Workspace, role: &str, tool: &str, args: &Value) -> CallOutcome {
    let args = args.to_string();
    runtime
        .call(&CallRequest::new(workspace, role, &format!("s-{role}"), tool, &args))
        .unwrap_or_else(|error| panic!("host error calling {tool}: {error}"))
}

/// The names in the workspace's directory `relative` that the host reserves for calls in flight.
fn in_flight_names(root: &Path, relative: &str) -> Vec<String> {
    std::fs::read_dir(root.join(relative))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(".toolcell-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_rewrite_in_flight_has_no_name_any_other_call_can_reach() {
    let Governed { runtime, workspace, root, state, .. } = &governed(TWO_ROLES, &[(".env", OLD_SECRET), ("src/a.txt", "a\n")]);
    // `admin` rewrites `.env`, then holds its call open for a while before it commits.
    let admin_ops = json!([{"op": "write", "path": ".env", "content": NEW_SECRET}, {"op": "sleep", "content": "1500"}]);
    std::thread::scope(|scope| {
        let admin = scope.spawn(|| probe_as(runtime, workspace, "admin", admin_ops.clone()));
        // While the rewrite is in flight: nothing of it has a name, in the workspace or
        // anywhere a listing of `impl` shows.
        let mut looked = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1200);
        while std::time::Instant::now() < deadline && !admin.is_finished() {
            assert_eq!(in_flight_names(root, "."), Vec::<String>::new(), "a call's rewrite has a name in the workspace");
            let listed = probe_as(runtime, workspace, "impl", json!([{"op": "list", "path": "."}]));
            assert!(!shown(&listed).contains(".toolcell-"), "impl listed another call's rewrite: {}", shown(&listed));
            assert!(!shown(&listed).contains("new-secret"), "{}", shown(&listed));
            looked += 1;
        }
        assert!(looked > 0, "the admin call ended before anything looked");
        let admin = admin.join().expect("the admin call");
        assert!(admin.result.is_ok(), "{:?}", admin.result);
    });
    assert_eq!(std::fs::read_to_string(root.join(".env")).expect(".env"), NEW_SECRET);
    assert_eq!(in_flight_names(root, "."), Vec::<String>::new());
    records(state);
}

fn probe_as(runtime: &Runtime, workspace: &Workspace, role: &str, ops: Value) -> CallOutcome {
    call_as(runtime, workspace, role, "fs_probe", &json!({ "ops": ops }))
}

#[test]
fn names_reserved_for_calls_in_flight_are_refused_to_every_call() {
    // A name of the reserved form, as another process of an older version (or a crash) left
    // it, and as a hostile plugin would guess one.
    let Governed { runtime, workspace, root, state, .. } =
        &governed(TWO_ROLES, &[(".env", OLD_SECRET), (".toolcell-c-17-0-.env", NEW_SECRET), ("src/a.txt", "a\n")]);
    for role in ["impl", "admin"] {
        let ops = json!([
            {"op": "read", "path": ".toolcell-c-17-0-.env"},
            {"op": "write", "path": ".toolcell-c-17-0-.env", "content": "planted"},
            {"op": "stat", "path": ".toolcell-c-17-0-.env"},
            {"op": "hard_link", "path": ".toolcell-c-17-0-.env", "to": "src/kept"},
            {"op": "rename", "path": ".toolcell-c-17-0-.env", "to": "src/moved"},
            {"op": "remove", "path": ".toolcell-c-17-0-.env"},
            {"op": "write", "path": "src/.toolcell-x-1-0-a.txt", "content": "planted"},
            {"op": "symlink", "path": "src/.toolcell-y-1-0-b", "to": "a.txt"},
            {"op": "rename", "path": "src/a.txt", "to": "src/.toolcell-z-1-0-a.txt"},
            {"op": "mkdir", "path": ".toolcell-dir"},
        ]);
        let outcome = probe_as(runtime, workspace, role, ops);
        let results = results(&outcome);
        assert!(results.iter().all(|result| result["ok"] == false), "{role}: an operation on a reserved name succeeded: {results:?}");
        assert!(!shown(&outcome).contains("new-secret"), "{role}: {}", shown(&outcome));
        let listed = probe_as(runtime, workspace, role, json!([{"op": "list", "path": "."}, {"op": "list", "path": "src"}]));
        assert!(!shown(&listed).contains(".toolcell-"), "{role}: {}", shown(&listed));
        assert!(outcome.denials.iter().all(|denial| denial.event.rule == "protected:.toolcell-*"), "{:?}", outcome.denials);
        assert!(outcome.denials.iter().any(|denial| denial.message.contains("reserved")), "{:?}", outcome.denials);
    }
    assert_eq!(std::fs::read_to_string(root.join(".toolcell-c-17-0-.env")).expect("kept"), NEW_SECRET);
    assert_eq!(std::fs::read_to_string(root.join("src/a.txt")).expect("kept"), "a\n");
    assert_eq!(in_flight_names(root, "src"), Vec::<String>::new());
    let denials = records(state).iter().filter(|record| record.rule.as_deref() == Some("protected:.toolcell-*")).count();
    assert!(denials >= 20, "every refusal is audited: {denials}");
}

#[test]
fn whole_file_rewrites_still_land_with_their_mode() {
    let Governed { runtime, workspace, root, .. } = &governed(TWO_ROLES, &[("src/run.sh", "#!/bin/sh\n")]);
    std::fs::set_permissions(root.join("src/run.sh"), std::os::unix::fs::PermissionsExt::from_mode(0o750)).expect("chmod");
    let read = call_as(runtime, workspace, "impl", "read_file", &json!({"path": "src/run.sh"}));
    assert!(read.result.is_ok(), "{:?}", read.result);
    let written = call_as(runtime, workspace, "impl", "write_file", &json!({"path": "src/run.sh", "content": "#!/bin/sh\necho hi\n"}));
    assert!(written.result.is_ok(), "{:?}", written.result);
    let created = call_as(runtime, workspace, "impl", "write_file", &json!({"path": "src/new/deep.txt", "content": "new\n"}));
    assert!(created.result.is_ok(), "{:?}", created.result);
    assert_eq!(std::fs::read_to_string(root.join("src/run.sh")).expect("run.sh"), "#!/bin/sh\necho hi\n");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(root.join("src/run.sh")).expect("stat").permissions());
    assert_eq!(mode & 0o777, 0o750);
    assert_eq!(std::fs::metadata(root.join("src/run.sh")).map(|metadata| std::os::unix::fs::MetadataExt::nlink(&metadata)).ok(), Some(1));
    assert_eq!(std::fs::read_to_string(root.join("src/new/deep.txt")).expect("deep"), "new\n");
    assert_eq!(in_flight_names(root, "src"), Vec::<String>::new());
}

/// Refuses every approval, and counts the questions.
struct Refuser;

impl Approver for Refuser {
    fn approve(&self, _role: &str, _access: toolcell_runtime::Access, _path: &str, _rule: &str) -> bool {
        false
    }
}

#[test]
fn an_ask_rule_is_not_granted_by_a_hard_link_or_a_move() {
    let Governed { runtime, workspace, root, state, .. } =
        &governed(TWO_ROLES, &[("secrets/key.txt", "ASK-GATED-key"), ("public/readme", "hi")]);
    let approver: Arc<dyn Approver> = Arc::new(Refuser);
    for ops in [
        json!([{"op": "hard_link", "path": "secrets/key.txt", "to": "public/key.txt"}, {"op": "read", "path": "public/key.txt"}]),
        json!([{"op": "rename", "path": "secrets/key.txt", "to": "public/key.txt"}, {"op": "read", "path": "public/key.txt"}]),
        json!([{"op": "rename", "path": "secrets", "to": "public/secrets"}, {"op": "read", "path": "public/secrets/key.txt"}]),
    ] {
        let args = json!({ "ops": ops }).to_string();
        let outcome = runtime
            .call(&CallRequest { approver: Some(&approver), ..CallRequest::new(workspace, "impl", "s-ask", "fs_probe", &args) })
            .expect("call");
        assert!(!shown(&outcome).contains("ASK-GATED"), "{ops}: the gated content leaked: {}", shown(&outcome));
        assert!(!outcome.denials.is_empty(), "{ops}: nothing was refused");
    }
    assert!(!root.join("public/key.txt").exists() && !root.join("public/secrets").exists());
    assert_eq!(std::fs::read_to_string(root.join("secrets/key.txt")).expect("key"), "ASK-GATED-key");
    records(state);
}

#[test]
fn a_hard_link_is_made_only_between_names_judged_alike() {
    let Governed { runtime, workspace, root, .. } = &governed(TWO_ROLES, &[("src/a.txt", "a\n"), ("secrets/old.txt", "s\n")]);
    // `impl` may write both names, but reads `secrets/**` only when approved: one file under
    // both names would be read where it may be, and changed where it needs approval.
    let outcome = probe_as(runtime, workspace, "impl", json!([{"op": "hard_link", "path": "src/a.txt", "to": "secrets/a.txt"}]));
    assert!(outcome.result.is_err(), "{:?}", outcome.result);
    assert!(outcome.denials.iter().any(|denial| denial.event.rule == "hard-link"), "{:?}", outcome.denials);
    // `.env` is judged differently for `impl` than any other name: not even `admin` links it.
    let outcome = probe_as(runtime, workspace, "admin", json!([{"op": "hard_link", "path": "src/a.txt", "to": ".env"}]));
    assert!(outcome.denials.iter().any(|denial| denial.event.rule == "hard-link"), "{:?}", outcome.denials);
    assert!(!root.join("secrets/a.txt").exists() && !root.join(".env").exists());
    // Names judged alike may be linked.
    let outcome = probe_as(runtime, workspace, "impl", json!([{"op": "hard_link", "path": "src/a.txt", "to": "src/b.txt"}]));
    assert_eq!(results(&outcome).first().map(|result| result["ok"].clone()), Some(json!(true)), "{:?}", outcome.result);
}

#[test]
fn planted_hard_links_are_not_read_through() {
    let Governed { runtime, workspace, root, state, _temp, .. } = &governed(TWO_ROLES, &[(".env", OLD_SECRET), ("src/a.txt", "a\n")]);
    // Another program links a host file outside the workspace, and the hidden `.env`, into it.
    let outside = _temp.path().join("host-only.txt");
    std::fs::write(&outside, "HOST-ONLY-content").expect("outside file");
    std::fs::hard_link(&outside, root.join("src/outside.txt")).expect("link outside");
    std::fs::hard_link(root.join(".env"), root.join("src/env-copy")).expect("link .env");
    for path in ["src/outside.txt", "src/env-copy"] {
        let read = call_as(runtime, workspace, "impl", "read_file", &json!({"path": path}));
        let error = read.result.as_ref().expect_err("refused");
        assert!(error.message.contains("hard links"), "{path}: {}", error.message);
        let probed = probe_as(
            runtime,
            workspace,
            "impl",
            json!([{"op": "read", "path": path}, {"op": "write", "path": path, "content": "x"}, {"op": "open_read", "path": path, "to": "read"}]),
        );
        assert!(results(&probed).iter().all(|result| result["ok"] == false), "{path}: {:?}", results(&probed));
        for outcome in [&read, &probed] {
            assert!(!shown(outcome).contains("HOST-ONLY") && !shown(outcome).contains("old-secret"), "{path}: {}", shown(outcome));
            assert!(outcome.denials.iter().all(|denial| denial.event.rule == "hard-link"), "{path}: {:?}", outcome.denials);
        }
    }
    assert_eq!(std::fs::read_to_string(&outside).expect("outside"), "HOST-ONLY-content");
    assert_eq!(std::fs::read_to_string(root.join(".env")).expect(".env"), OLD_SECRET);
    assert!(records(state).iter().any(|record| record.rule.as_deref() == Some("hard-link")));
}

#[test]
fn a_symlink_is_judged_and_made_where_no_concurrent_rename_moves_it() {
    // One call makes `a/b/l -> ../..` (the workspace itself, seen from `a/b`) over and over;
    // another renames `a/b` to `b`, where the same link would lead to the workspace's parent.
    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path().join("workspace");
    write(&root, "a/b/file.txt", "x");
    let runtime = builtin_runtime_builder().component("test:fs_probe", guest_program("fs_probe")).build().expect("runtime");
    let workspace = Workspace::open(&root).expect("workspace");
    let maker: Vec<Value> = (0..400)
        .flat_map(|_| [json!({"op": "symlink", "path": "a/b/l", "to": "../.."}), json!({"op": "remove", "path": "a/b/l"})])
        .collect();
    let mut escapes = Vec::new();
    for attempt in 0..12 {
        std::thread::scope(|scope| {
            let making = scope.spawn(|| probe_as(&runtime, &workspace, "impl", json!(maker)));
            std::thread::sleep(std::time::Duration::from_millis(2 + attempt));
            let _ = probe_as(&runtime, &workspace, "impl", json!([{"op": "rename", "path": "a/b", "to": "b"}]));
            making.join().expect("the maker call");
        });
        // Wherever the link ended up, it must not lead outside.
        for link in ["b/l", "a/b/l"] {
            let path = root.join(link);
            if std::fs::symlink_metadata(&path).is_ok() {
                let resolved = std::fs::canonicalize(&path).ok();
                if resolved.as_ref().is_none_or(|resolved| !resolved.starts_with(&root)) {
                    escapes.push((attempt, link));
                }
                std::fs::remove_file(&path).expect("remove the link");
            }
        }
        if root.join("b").exists() {
            std::fs::rename(root.join("b"), root.join("a/b")).expect("put a/b back");
        }
    }
    assert_eq!(escapes, Vec::<(u64, &str)>::new(), "a link made during a rename leads outside");
}

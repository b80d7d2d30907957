//! Attacks on the fourth pass's mechanisms from outside: a hostile component (`fs_probe`),
//! another role, a concurrent call. Each test names what must hold.

use std::sync::Arc;

use serde_json::{Value, json};

use toolcell_runtime::{CallOutcome, CallRequest, Runtime, Workspace};

use super::boundary::results;
use super::fourth_pass::TWO_ROLES as POLICY;
use super::hardening::{Governed, governed};

pub(super) fn probe_as(runtime: &Runtime, workspace: &Workspace, role: &str, ops: &Value) -> CallOutcome {
    let args = json!({ "ops": ops }).to_string();
    runtime
        .call(&CallRequest::new(workspace, role, &format!("s-{role}"), "fs_probe", &args))
        .unwrap_or_else(|error| panic!("host error: {error}"))
}

/// A file with several links is opened by no role, so its content stays unread; the content
/// index must not answer for it either: whether it "may match" a pattern, asked pattern after
/// pattern, would spell out what it holds. (Holds today: a guard against the index learning
/// to answer for them.)
#[test]
fn search_candidates_say_nothing_of_a_file_with_several_links() {
    let Governed { runtime, workspace, root, _temp, .. } =
        &governed(POLICY, &[(".env", "API_KEY=new-secret-rotated-4242\n"), ("src/a.txt", "a\n")]);
    // Another program links the hidden `.env`, and a host file outside, into the workspace.
    std::fs::hard_link(root.join(".env"), root.join("src/env-copy")).expect("link .env");
    let outside = _temp.path().join("host-only.txt");
    std::fs::write(&outside, "HOST-ONLY-content\n").expect("outside file");
    std::fs::hard_link(&outside, root.join("src/outside.txt")).expect("link outside");
    // Older than a second: the index trusts only such stamps.
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    runtime.build_index(workspace).expect("index");
    let outcome = probe_as(
        runtime,
        workspace,
        "impl",
        &json!([
            {"op": "candidates", "content": "new-secret-rotated"},
            {"op": "candidates", "content": "HOST-ONLY"},
            {"op": "candidates", "content": "zzz-nowhere"},
        ]),
    );
    let found = results(&outcome);
    assert_eq!(found.len(), 3, "{:?}", outcome.result);
    // Whatever the index says of them, it says the same for a pattern they hold as for one
    // no file holds.
    assert_eq!(found[0]["value"], found[2]["value"], "the index tells what a file no role may open holds: {found:?}");
    assert_eq!(found[1]["value"], found[2]["value"], "the index tells what a file no role may open holds: {found:?}");
    // The built-in search says nothing of them either.
    let args = json!({"query": "new-secret-rotated"}).to_string();
    let searched = runtime.call(&CallRequest::new(workspace, "impl", "s-impl", "search_files", &args)).expect("call");
    let text = match &searched.result {
        Ok(output) => {
            format!("{}{}", output.text, output.structured.as_ref().map(|structured| structured.value().to_string()).unwrap_or_default())
        }
        Err(error) => error.message.clone(),
    };
    assert!(!text.contains("new-secret-rotated-4242") && !text.contains("HOST-ONLY-content"), "{text}");
}

/// Odd names through every operation the new checks sit on (reserved names, symlinks on the
/// way, hard links): the host answers each, panics on none, and shows no host path.
#[test]
fn odd_names_through_the_namespace_operations_are_answered() {
    let Governed { runtime, workspace, root, _temp, .. } = &governed(POLICY, &[("src/a.txt", "a\n"), (".env", "SECRET=1\n")]);
    let long = "n".repeat(300);
    let names = [
        "",
        ".",
        "..",
        "/",
        "./.toolcell-",
        ".toolcell-",
        "src/.toolcell-",
        "src/../.toolcell-x",
        "src/./.toolcell-x/y",
        ".toolcell",
        "src//a.txt",
        "src/a.txt/",
        "src/a.txt/.",
        "src/a.txt/..",
        "café/\u{301}",
        "\u{202e}txt.exe",
        long.as_str(),
        "src/\u{0}x",
    ];
    let host = _temp.path().display().to_string();
    for name in names {
        let ops: Vec<Value> =
            ["symlink", "hard_link", "rename", "remove", "rmdir", "mkdir", "write", "stat", "list", "read_link", "open_read"]
                .iter()
                .flat_map(|op| {
                    [
                        json!({"op": op, "path": name, "to": "src/a.txt", "content": "x"}),
                        json!({"op": op, "path": "src/a.txt", "to": name, "content": "x"}),
                    ]
                })
                .collect();
        let outcome = probe_as(runtime, workspace, "impl", &json!(ops));
        let text = match &outcome.result {
            Ok(output) => output.text.clone(),
            Err(error) => error.message.clone(),
        };
        assert!(!outcome.trapped, "`{name}`: {text}");
        assert!(!text.contains(&host), "`{name}`: a host path in {text}");
        assert!(!text.contains("SECRET=1"), "`{name}`: {text}");
        // Put `src/a.txt` back for the next name.
        if !root.join("src/a.txt").exists() {
            std::fs::create_dir_all(root.join("src")).expect("src");
            std::fs::write(root.join("src/a.txt"), "a\n").expect("restore");
        }
    }
}

/// A file whose name is long (the kernel allows 255 bytes) is rewritten like any other: the
/// host's reserved names for what it has in flight must not push past the limit, and a call
/// that fails after such a rewrite landed is rolled back whole.
#[test]
fn a_file_with_a_long_name_is_rewritten_and_rolled_back() {
    let long = format!("src/{}", "n".repeat(240));
    let Governed { runtime, workspace, root, .. } = &governed(POLICY, &[(long.as_str(), "original\n"), ("src/b.txt", "b\n")]);
    let args = json!({"path": long, "content": "rewritten\n"}).to_string();
    let written = runtime.call(&CallRequest::new(workspace, "impl", "s-impl", "write_file", &args)).expect("call");
    assert!(written.result.is_ok(), "a long name cannot be rewritten: {:?}", written.result);
    assert_eq!(std::fs::read_to_string(root.join(&long)).expect("read"), "rewritten\n");
    // Rewritten, put in place by a later read, then the call fails: all of it is undone.
    let failed = probe_as(
        runtime,
        workspace,
        "impl",
        &json!([
            {"op": "write", "path": long, "content": "half-done\n"},
            {"op": "read", "path": long},
            {"op": "write", "path": "src/b.txt", "content": "half-done\n"},
            {"op": "fail"},
        ]),
    );
    assert!(failed.result.is_err());
    let message = failed.result.as_ref().err().map(|error| error.message.clone()).unwrap_or_default();
    assert!(message.contains("rolled back"), "{message}");
    assert_eq!(std::fs::read_to_string(root.join(&long)).expect("read"), "rewritten\n", "{message}");
    assert_eq!(std::fs::read_to_string(root.join("src/b.txt")).expect("read"), "b\n", "{message}");
}

/// Answers only when the test lets it, and says when it was asked.
struct HeldApprover {
    asked: std::sync::atomic::AtomicBool,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl toolcell_runtime::Approver for HeldApprover {
    fn approve(&self, _role: &str, _access: toolcell_runtime::Access, _path: &str, _rule: &str) -> bool {
        self.asked.store(true, std::sync::atomic::Ordering::SeqCst);
        // Held until released once; every question after that is answered at once (the
        // receiver put in its place has lost its sender).
        if let Ok(mut release) = self.release.lock() {
            let _ = release.recv_timeout(std::time::Duration::from_secs(60));
            *release = std::sync::mpsc::channel().1;
        }
        true
    }
}

/// The namespace lock is the whole workspace's, across roles and processes: it must not be held
/// while a person is asked to approve one call's change. Otherwise one `ask` left unanswered
/// stops every other call's create, rename and delete in the workspace, past their deadlines.
#[test]
fn an_unanswered_approval_does_not_hold_every_other_call() {
    let policy =
        format!("{POLICY}\n[[roles.impl.rules]]\nid = \"gated-ask\"\naccess = [\"write\"]\npaths = [\"gated/**\"]\neffect = \"ask\"\n");
    let Governed { runtime, workspace, root, .. } = &governed(&policy, &[("gated/keep", "k\n"), ("src/a.txt", "a\n")]);
    let (release, released) = std::sync::mpsc::channel();
    let approver = Arc::new(HeldApprover { asked: false.into(), release: std::sync::Mutex::new(released) });
    let shared: Arc<dyn toolcell_runtime::Approver> = approver.clone();
    std::thread::scope(|scope| {
        let gated = scope.spawn(|| {
            let args = json!({"ops": [{"op": "mkdir", "path": "gated/new"}]}).to_string();
            runtime.call(&CallRequest { approver: Some(&shared), ..CallRequest::new(workspace, "impl", "s-gated", "fs_probe", &args) })
        });
        while !approver.asked.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(!gated.is_finished(), "the gated call ended without asking");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // While the person thinks: another role makes a directory elsewhere.
        let other = scope.spawn(|| probe_as(runtime, workspace, "admin", &json!([{"op": "mkdir", "path": "src/other"}])));
        let waited = std::time::Instant::now();
        while !other.is_finished() && waited.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let finished = other.is_finished();
        release.send(()).expect("release the approver");
        let _ = gated.join();
        let _ = other.join();
        assert!(finished, "another role's mkdir waited 20 s on an approval it has nothing to do with");
    });
    assert!(root.join("src/other").is_dir());
}

/// A file with several links is opened by no role. Deleting one of its names and failing the
/// call must not turn it into a file that can be opened: a rollback that puts the name back as a
/// new file (one link) with the saved content hands the content of the other name (a host file
/// outside, the hidden `.env`) to whoever reads it next.
#[test]
fn a_rollback_does_not_turn_a_linked_file_into_a_readable_copy() {
    let Governed { runtime, workspace, root, _temp, .. } = &governed(POLICY, &[(".env", "SECRET=env-1234\n"), ("src/a.txt", "a\n")]);
    let outside = _temp.path().join("host-only.txt");
    std::fs::write(&outside, "HOST-ONLY-content\n").expect("outside file");
    std::fs::hard_link(&outside, root.join("src/outside.txt")).expect("link outside");
    std::fs::hard_link(root.join(".env"), root.join("src/env-copy")).expect("link .env");
    for path in ["src/outside.txt", "src/env-copy"] {
        let failed = probe_as(runtime, workspace, "impl", &json!([{"op": "remove", "path": path}, {"op": "fail"}]));
        assert!(failed.result.is_err());
        let read = probe_as(runtime, workspace, "impl", &json!([{"op": "read", "path": path}]));
        let shown = results(&read).first().map(Value::to_string).unwrap_or_default();
        assert!(!shown.contains("HOST-ONLY") && !shown.contains("SECRET=env"), "{path}: read after a rolled-back delete: {shown}");
        let args = json!({"path": path}).to_string();
        let builtin = runtime.call(&CallRequest::new(workspace, "impl", "s-impl", "read_file", &args)).expect("call");
        let text = builtin.result.as_ref().map(|output| output.text.clone()).unwrap_or_default();
        assert!(!text.contains("HOST-ONLY") && !text.contains("SECRET=env"), "{path}: read_file after a rolled-back delete: {text}");
    }
}

/// Random sequences of namespace operations over a small tree, from two roles at once: the
/// host answers every one (no trap, no host error), nothing outside changes, no symlink in
/// the workspace leads outside, and `.env` never reaches `impl`.
#[test]
fn random_namespace_operations_from_two_roles_keep_the_invariants() {
    let Governed { runtime, workspace, root, _temp, .. } =
        &governed(POLICY, &[(".env", "SECRET=env-5678\n"), ("src/a.txt", "a\n"), ("src/d/b.txt", "b\n"), ("docs/readme", "r\n")]);
    let outside = _temp.path().join("outside-canary");
    std::fs::write(&outside, "canary\n").expect("canary");
    let names = ["src", "src/a.txt", "src/d", "src/d/b.txt", "src/l", "docs", "docs/readme", ".env", "x", "x/y", "src/d/l", ".."];
    let targets = [".", "..", "../..", "a.txt", "d", "../docs", "../.env", "l"];
    let ops = ["symlink", "hard_link", "rename", "remove", "rmdir", "mkdir", "write", "read", "list", "truncate", "append"];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    for round in 0..12 {
        let mut batches: Vec<(String, Vec<Value>)> = Vec::new();
        for role in ["impl", "admin"] {
            let batch: Vec<Value> = (0..40)
                .map(|_| {
                    let op = ops[next(ops.len())];
                    let path = names[next(names.len())];
                    let to = if op == "symlink" { targets[next(targets.len())] } else { names[next(names.len())] };
                    json!({"op": op, "path": path, "to": to, "content": format!("{role}-{round}")})
                })
                .collect();
            batches.push((role.to_owned(), batch));
        }
        let outcomes: Vec<(String, CallOutcome)> = std::thread::scope(|scope| {
            let handles: Vec<_> = batches
                .iter()
                .map(|(role, batch)| {
                    scope.spawn(move || {
                        let args = json!({ "ops": batch }).to_string();
                        let outcome = runtime
                            .call(&CallRequest::new(workspace, role, &format!("s-{role}"), "fs_probe", &args))
                            .unwrap_or_else(|error| panic!("round {round}: host error: {error}"));
                        (role.clone(), outcome)
                    })
                })
                .collect();
            handles.into_iter().map(|handle| handle.join().expect("call")).collect()
        });
        for (role, outcome) in &outcomes {
            assert!(!outcome.trapped, "round {round} {role}: {:?}", outcome.result);
            let text = match &outcome.result {
                Ok(output) => output.text.clone(),
                Err(error) => error.message.clone(),
            };
            if role == "impl" {
                assert!(!text.contains("SECRET=env"), "round {round}: .env reached impl: {text}");
            }
            assert!(!text.contains(&_temp.path().display().to_string()), "round {round} {role}: a host path: {text}");
        }
        assert_eq!(std::fs::read_to_string(&outside).expect("canary"), "canary\n");
        // No symlink in the workspace leads outside.
        let mut pending = vec![root.clone()];
        while let Some(directory) = pending.pop() {
            for entry in std::fs::read_dir(&directory).expect("read dir").flatten() {
                let path = entry.path();
                let metadata = std::fs::symlink_metadata(&path).expect("lstat");
                if metadata.is_symlink() {
                    if let Ok(resolved) = std::fs::canonicalize(&path) {
                        assert!(resolved.starts_with(root), "round {round}: `{}` leads outside", path.display());
                    }
                } else if metadata.is_dir() {
                    pending.push(path);
                }
            }
        }
    }
}

/// Refuses every approval.
struct Refuser;

impl toolcell_runtime::Approver for Refuser {
    fn approve(&self, _role: &str, _access: toolcell_runtime::Access, _path: &str, _rule: &str) -> bool {
        false
    }
}

/// A file that needs approval to be read is left out of listings until approved. Looking it up
/// by name must not tell whether it exists either: a missing name and an existing one are
/// answered alike (both put to the approver, both refused when it says no).
#[test]
fn a_lookup_does_not_tell_which_files_needing_approval_exist() {
    let policy =
        format!("{POLICY}\n[[roles.impl.rules]]\nid = \"vault-ask\"\naccess = [\"read\"]\npaths = [\"vault/**\"]\neffect = \"ask\"\n");
    let Governed { runtime, workspace, .. } = &governed(&policy, &[("vault/token.txt", "needle\n"), ("src/a.txt", "a\n")]);
    let approver: Arc<dyn toolcell_runtime::Approver> = Arc::new(Refuser);
    let answer = |ops: Value| {
        let args = json!({ "ops": ops }).to_string();
        let outcome = runtime
            .call(&CallRequest { approver: Some(&approver), ..CallRequest::new(workspace, "impl", "s-ask", "fs_probe", &args) })
            .expect("call");
        let found: Vec<String> = results(&outcome)
            .iter()
            .map(|result| {
                format!("{} {}", result["ok"], result["error"].as_str().unwrap_or_default().split(':').next().unwrap_or_default())
            })
            .collect();
        (found, outcome.denials.len())
    };
    let listed = answer(json!([{"op": "list", "path": "vault"}]));
    let exists = answer(json!([{"op": "stat", "path": "vault/token.txt"}, {"op": "stat_at", "path": "vault/token.txt"}]));
    let missing = answer(json!([{"op": "stat", "path": "vault/nothing.txt"}, {"op": "stat_at", "path": "vault/nothing.txt"}]));
    assert_eq!(exists, missing, "a lookup tells which names exist where the listing ({listed:?}) shows none");
}

/// A directory handle a call holds is listed through the path it was opened at. If another
/// call (of a role that may) moves the directory where this role may not look, and files are
/// made in it there, the handle must not list their names as if they stood where it was opened.
#[test]
fn a_held_directory_moved_by_another_call_lists_nothing_hidden() {
    let policy = format!(
        "{POLICY}\n[[roles.impl.rules]]\nid = \"vault-hidden\"\naccess = [\"read\", \"list\"]\npaths = [\"vault\", \"vault/**\"]\neffect = \"deny\"\n"
    );
    let Governed { runtime, workspace, .. } = &governed(&policy, &[("drafts/plan.txt", "p\n"), ("vault/keep", "k\n")]);
    std::thread::scope(|scope| {
        let lister = scope.spawn(|| {
            probe_as(
                runtime,
                workspace,
                "impl",
                &json!([{"op": "open_dir", "path": "drafts"}, {"op": "sleep", "content": "1500"}, {"op": "list_held", "content": "0"}]),
            )
        });
        std::thread::sleep(std::time::Duration::from_millis(400));
        let moved = probe_as(
            runtime,
            workspace,
            "admin",
            &json!([
                {"op": "rename", "path": "drafts", "to": "vault/drafts"},
                {"op": "write", "path": "vault/drafts/password-is-hunter2.txt", "content": "x"},
            ]),
        );
        assert!(results(&moved).iter().all(|result| result["ok"] == true), "{:?}", moved.result);
        let listed = lister.join().expect("the lister");
        let shown = format!("{:?}", listed.result);
        assert!(!shown.contains("hunter2"), "a held handle listed a name in a directory impl may not list: {shown}");
    });
}

/// As [`an_unanswered_approval_does_not_hold_every_other_call`], for a directory move whose
/// entries need approval to be moved: each entry is put to the approver before the lock too.
#[test]
fn an_unanswered_approval_for_a_moved_entry_does_not_hold_every_other_call() {
    let policy = format!(
        "{POLICY}\n[[roles.impl.rules]]\nid = \"gated-ask\"\naccess = [\"delete\"]\npaths = [\"box/gated/**\"]\neffect = \"ask\"\n"
    );
    let Governed { runtime, workspace, root, .. } = &governed(&policy, &[("box/gated/keep", "k\n"), ("src/a.txt", "a\n")]);
    let (release, released) = std::sync::mpsc::channel();
    let approver = Arc::new(HeldApprover { asked: false.into(), release: std::sync::Mutex::new(released) });
    let shared: Arc<dyn toolcell_runtime::Approver> = approver.clone();
    std::thread::scope(|scope| {
        let gated = scope.spawn(|| {
            let args = json!({"ops": [{"op": "rename", "path": "box", "to": "moved-box"}]}).to_string();
            runtime.call(&CallRequest { approver: Some(&shared), ..CallRequest::new(workspace, "impl", "s-gated", "fs_probe", &args) })
        });
        while !approver.asked.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(!gated.is_finished(), "the gated call ended without asking");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let other = scope.spawn(|| probe_as(runtime, workspace, "admin", &json!([{"op": "mkdir", "path": "src/other"}])));
        let waited = std::time::Instant::now();
        while !other.is_finished() && waited.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let finished = other.is_finished();
        release.send(()).expect("release the approver");
        let _ = gated.join();
        let _ = other.join();
        assert!(finished, "another role's mkdir waited 20 s on an approval it has nothing to do with");
    });
    assert!(root.join("src/other").is_dir());
}

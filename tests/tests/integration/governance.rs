//! The policy, enforced by the host on every filesystem call: through the built-in tools and
//! through a hostile component that calls `std::fs` directly.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolcell_runtime::{Access, Approver};
use toolcell_tests::{Fixture, default_policy_runtime, governed_runtime};
use toolcell_types::ToolErrorKind;

const GUIDE: &str = "# Guide\n\nRead me.\n";

fn project() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "fn main() {}\n");
    fixture.write("docs/guide.md", GUIDE);
    fixture.write("secrets/key.pem", "PRIVATE KEY\n");
    fixture
}

fn probe(op: &str, path: &str, to: &str) -> serde_json::Value {
    json!({"ops": [{"op": op, "path": path, "to": to, "content": "pwned"}]})
}

#[test]
fn tool_gating_refuses_before_any_instance() {
    let fixture = project();
    let outcome = fixture.call_on(default_policy_runtime(), "control", "write_file", &json!({"path": "src/new.rs", "content": "x"}), None);
    assert!(outcome.gated);
    assert!(outcome.events.is_empty() && outcome.denials.is_empty(), "no component may have run");
    let error = outcome.result.expect_err("control may not write");
    assert_eq!(error.kind, ToolErrorKind::Denied);
    assert!(error.message.contains("role `control` may not call `write_file`"), "{}", error.message);
    assert!(error.message.contains("read_file, read_many, file_info, list_files, directory_tree, search_files"), "{}", error.message);
    assert!(!fixture.root().join("src/new.rs").exists());
    let read = fixture.call_on(default_policy_runtime(), "control", "read_file", &json!({"path": "src/main.rs"}), None);
    assert!(read.result.is_ok(), "{:?}", read.result);
}

#[test]
fn control_cannot_write_even_through_a_component_that_tries() {
    let fixture = project();
    for (op, path, to) in [
        ("write", "src/main.rs", ""),
        ("write", "src/new.rs", ""),
        ("append", "src/main.rs", ""),
        ("truncate", "src/main.rs", ""),
        ("mkdir", "newdir", ""),
        ("remove", "src/main.rs", ""),
        ("rename", "src/main.rs", "src/moved.rs"),
    ] {
        let (message, rules) = fixture.denied("control", "fs_probe", probe(op, path, to));
        assert!(rules.iter().all(|rule| rule == "default-deny"), "{op} {path}: {rules:?}");
        assert!(message.contains("denied for role `control`"), "{message}");
    }
    assert_eq!(fixture.read_text("src/main.rs"), "fn main() {}\n");
    assert!(!fixture.root().join("newdir").exists());
}

#[test]
fn impl_reads_docs_but_cannot_modify_them() {
    let fixture = project();
    let output = fixture.allowed("impl", "read_file", json!({"path": "docs/guide.md"}));
    assert!(output.text.contains("# Guide"));
    let (message, rules) = fixture.denied("impl", "write_file", json!({"path": "docs/guide.md", "content": "x"}));
    assert_eq!(rules, ["docs-read-only"]);
    assert!(message.contains("write of `docs/guide.md` is denied for role `impl` by rule `docs-read-only`"), "{message}");
    assert!(message.contains("test-policy.toml line"), "the message names the rule's place: {message}");
    let (_, rules) = fixture.denied("impl", "edit_file", json!({"path": "docs/guide.md", "old_string": "Read me.", "new_string": "x"}));
    assert_eq!(rules, ["docs-read-only"]);
    fixture.denied("impl", "write_file", json!({"path": "docs/new.md", "content": "x"}));
    let (message, _) = fixture.denied("impl", "write_file", json!({"path": "docs/café.md", "content": "x"}));
    assert!(message.contains("write of `docs/café.md` is denied"), "paths are shown as they are: {message}");
    assert_eq!(fixture.read_text("docs/guide.md"), GUIDE);
    assert!(!fixture.root().join("docs/new.md").exists());
    fixture.allowed("impl", "write_file", json!({"path": "src/lib.rs", "content": "pub fn f() {}\n"}));
    assert_eq!(fixture.read_text("src/lib.rs"), "pub fn f() {}\n");
}

#[test]
fn paths_are_judged_after_canonicalisation() {
    let fixture = project();
    fixture.symlink("../docs", "src/link");
    // `src/link/..` is `docs/..`, the root: symlinks resolve before `..`, as in POSIX.
    for path in ["src/../docs/x.md", "./docs//x.md", "src/link/x.md", "src/link/../docs/x.md"] {
        let (_, rules) = fixture.denied("impl", "fs_probe", probe("write", path, ""));
        assert_eq!(rules, ["docs-read-only"], "{path}");
        if path != "src/link/../docs/x.md" {
            let (_, rules) = fixture.denied("impl", "write_file", json!({"path": path, "content": "x"}));
            assert_eq!(rules, ["docs-read-only"], "write_file {path}");
        }
    }
    // The SDK normalises `..` lexically, so write_file names (and writes) `src/docs/x.md`; the
    // host judges the path it really touches.
    let output = fixture.allowed("impl", "write_file", json!({"path": "src/link/../docs/x.md", "content": "x"}));
    assert!(output.text.contains("`src/docs/x.md`"), "{}", output.text);
    let (_, rules) = fixture.denied("impl", "fs_probe", probe("write", "src/link/../../docs/x.md", ""));
    assert_eq!(rules, ["workspace-boundary"]);
    let outcome = fixture.call_on(governed_runtime(), "impl", "fs_probe", &probe("write", "src/link/x.md", ""), None);
    let denial = &outcome.denials[0];
    assert_eq!(denial.event.path, "docs/x.md");
    assert_eq!(denial.event.access, Access::Write);
    assert_eq!(denial.event.operation, "open-at");
    assert!(!fixture.root().join("docs/x.md").exists());
}

#[test]
fn a_hostile_component_is_refused_every_time() {
    let fixture = project();
    std::fs::write(fixture.root().join("src/readonly.txt"), "keep").expect("write");
    let attempts = [
        (probe("write", "docs/guide.md", ""), "docs-read-only"),
        (probe("rename", "src/main.rs", "docs/main.rs"), "docs-read-only"),
        (probe("rename", "docs/guide.md", "src/stolen.md"), "docs-read-only"),
        (probe("hard_link", "docs/guide.md", "src/guide-link.md"), "docs-read-only"),
        (probe("truncate", "docs/guide.md", ""), "docs-read-only"),
        (probe("append", "docs/guide.md", ""), "docs-read-only"),
        (probe("mkdir", "docs/new", ""), "docs-read-only"),
        (probe("remove", "docs/guide.md", ""), "docs-read-only"),
        (probe("read", "secrets/key.pem", ""), "secrets-hidden"),
        (probe("symlink", "src/escape", "../../outside/secret.txt"), "symlink-target"),
        (probe("symlink", "src/abs", "/etc/passwd"), "symlink-target"),
    ];
    for (attempt, rule) in attempts {
        let (message, rules) = fixture.denied("impl", "fs_probe", attempt.clone());
        assert!(rules.contains(&rule.to_owned()), "{attempt}: {rules:?} {message}");
    }
    assert_eq!(fixture.read_text("docs/guide.md"), GUIDE);
    assert!(fixture.root().join("src/main.rs").exists());
    for absent in ["docs/main.rs", "src/stolen.md", "src/guide-link.md", "docs/new", "src/escape", "src/abs"] {
        assert!(fixture.root().join(absent).symlink_metadata().is_err(), "{absent} must not exist");
    }
    fixture.assert_outside_untouched();
    // A symlink that stays inside is fine.
    let output = fixture.allowed("impl", "fs_probe", probe("symlink", "src/to-main", "main.rs"));
    assert_eq!(output.structured.expect("structured")[0]["ok"], true);
}

#[test]
fn writes_through_a_hard_link_are_refused() {
    let fixture = project();
    std::fs::hard_link(fixture.root().join("docs/guide.md"), fixture.root().join("src/guide.md")).expect("hard link");
    let (message, rules) = fixture.denied("impl", "write_file", json!({"path": "src/guide.md", "content": "x"}));
    assert_eq!(rules, ["hard-link"]);
    assert!(message.contains("other hard links"), "{message}");
    assert_eq!(fixture.read_text("docs/guide.md"), GUIDE);
}

#[test]
fn hidden_entries_do_not_appear_in_listings_or_searches() {
    let fixture = project();
    fixture.write("secrets/notes.txt", "KEY material\n");
    fixture.write("src/keys.rs", "// KEY handling\n");
    let listing = fixture.allowed("impl", "list_files", json!({"recursive": true}));
    assert!(listing.text.contains("secrets/"), "the directory itself may be listed: {}", listing.text);
    assert!(!listing.text.contains("secrets/key.pem"), "{}", listing.text);
    assert!(!listing.text.contains("secrets/notes.txt"), "{}", listing.text);
    let search = fixture.allowed("impl", "search_files", json!({"query": "KEY"}));
    assert_eq!(search.text, "src/keys.rs");
    let raw = fixture.allowed("impl", "fs_probe", probe("list", "secrets", ""));
    assert_eq!(raw.structured.expect("structured")[0]["value"], json!([]));
    // The control role sees everything it may read.
    let search = fixture.allowed("control", "search_files", json!({"query": "KEY"}));
    assert_eq!(search.text, "secrets/key.pem\nsecrets/notes.txt\nsrc/keys.rs");
}

struct Recorder {
    answer: bool,
    asked: AtomicUsize,
}

impl Approver for Recorder {
    fn approve(&self, role: &str, access: Access, path: &str, rule: &str) -> bool {
        // write_file creates the directory first, then the file: both are asked about.
        assert!(path == "release" || path == "release/notes.md", "{path}");
        assert_eq!((role, access, rule), ("impl", Access::Write, "ask-before-release"));
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answer
    }
}

#[test]
fn ask_goes_to_the_approver() {
    let fixture = project();
    let args = json!({"path": "release/notes.md", "content": "v1\n"});
    let (message, rules) = fixture.denied("impl", "write_file", args.clone());
    assert_eq!(rules, ["ask-before-release"]);
    assert!(message.contains("needs approval") && message.contains("--approve"), "{message}");

    let refusing = Arc::new(Recorder { answer: false, asked: AtomicUsize::new(0) });
    let approver: Arc<dyn Approver> = refusing.clone();
    let outcome = fixture.call_on(governed_runtime(), "impl", "write_file", &args, Some(&approver));
    assert_eq!(outcome.result.expect_err("refused").kind, ToolErrorKind::Denied);
    assert!(refusing.asked.load(Ordering::SeqCst) >= 1);
    assert!(!fixture.root().join("release/notes.md").exists());

    let approving = Arc::new(Recorder { answer: true, asked: AtomicUsize::new(0) });
    let approver: Arc<dyn Approver> = approving.clone();
    let outcome = fixture.call_on(governed_runtime(), "impl", "write_file", &args, Some(&approver));
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert_eq!(fixture.read_text("release/notes.md"), "v1\n");
    assert!(outcome.events.iter().any(|event| event.asked && event.rule == "ask-before-release"));
    // Asked once per access and path in a call (the directory, then the file), not again for
    // each write through the descriptor it opened.
    assert_eq!(approving.asked.load(Ordering::SeqCst), 2);
}

#[test]
fn unknown_roles_are_a_host_error() {
    let fixture = project();
    let result = governed_runtime().call(&toolcell_runtime::CallRequest::new(
        &fixture.workspace,
        "admin",
        "s",
        "read_file",
        r#"{"path": "src/main.rs"}"#,
    ));
    match result {
        Err(toolcell_runtime::Error::UnknownRole { role, roles }) => {
            assert_eq!(role, "admin");
            assert_eq!(roles, "control, impl");
        }
        other => panic!("expected an unknown role error, got {:?}", other.map(|outcome| outcome.result)),
    }
}

/// The rows of the book's table of what the shipped roles may not do: `(roles, accesses, path,
/// anywhere)`.
fn readme_promises() -> Vec<(Vec<String>, Vec<String>, String, bool)> {
    let readme = include_str!("../../../docs/src/governance.md");
    let table = readme
        .split_once("| role | may not | path | where |")
        .map(|(_, rest)| rest)
        .expect("the book has the table of what the shipped roles may not do");
    table
        .lines()
        .skip(2)
        .map(str::trim)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 4, "a row of four cells: {line}");
            let list = |cell: &str| cell.split(", ").map(str::to_owned).collect::<Vec<_>>();
            let path = cells[2].trim_matches('`').to_owned();
            let anywhere = match cells[3] {
                "anywhere" => true,
                "root" => false,
                other => panic!("`where` is `anywhere` or `root`, not `{other}`"),
            };
            (list(cells[0]), list(cells[1]), path, anywhere)
        })
        .collect()
}

#[test]
fn readme_promises_hold_for_the_shipped_policy() {
    let runtime = default_policy_runtime();
    let policy = runtime.policy().expect("the default policy");
    let promises = readme_promises();
    assert!(promises.len() >= 9, "the table was read: {promises:?}");
    let mut checked = 0;
    for (roles, accesses, path, anywhere) in &promises {
        let mut paths = vec![path.clone()];
        if *anywhere {
            paths.extend([format!("config/{path}"), format!("services/api/deep/{path}")]);
        }
        for role_name in roles {
            let role = policy.role(role_name).unwrap_or_else(|| panic!("the book names the role `{role_name}`"));
            for access in accesses {
                let access = Access::from_name(access).unwrap_or_else(|| panic!("the book names the access `{access}`"));
                for path in &paths {
                    let decision = policy.decide(role, access, path);
                    assert_eq!(
                        decision.effect,
                        toolcell_runtime::Effect::Deny,
                        "the book promises {role_name} may not {access} `{path}`, but rule `{}` allows it",
                        decision.rule
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 60, "{checked}");

    // And through the real host: nested secrets are neither readable nor found by a search.
    let fixture = Fixture::new();
    fixture.write("config/.env.local", "API_TOKEN=hunter2\n");
    fixture.write("services/api/.env", "API_TOKEN=hunter2\n");
    fixture.write("src/main.rs", "fn main() {}\n");
    for role in ["control", "impl", "reviewer"] {
        for path in ["config/.env.local", "services/api/.env"] {
            let outcome = fixture.call_on(runtime, role, "read_file", &json!({"path": path}), None);
            assert_eq!(outcome.result.expect_err("denied").kind, ToolErrorKind::Denied, "{role} {path}");
        }
        let search = fixture.call_on(runtime, role, "search_files", &json!({"query": "API_TOKEN"}), None);
        let text = search.result.map(|output| output.text).unwrap_or_else(|error| error.message);
        assert!(!text.contains("hunter2"), "{role}: {text}");
    }
    let outcome = fixture.call_on(runtime, "impl", "write_file", &json!({"path": "config/.env", "content": "X=1\n"}), None);
    assert_eq!(outcome.result.expect_err("protected").kind, ToolErrorKind::Denied);
}

//! Task chains through the real host and the real task-chain components, governed by the
//! shipped `policies/workflow.toml`: the whole control/impl scenario, the role matrix cell by
//! cell, a hostile implementation session, chains' locks, and malformed task files.

use serde_json::{Value, json};
use toolcell_host::{Host, Session, TaskBinding, ToolErrorKind};
use toolcell_runtime::{Runtime, Workspace};
use toolcell_tests::{Fixture, builtin_runtime_builder, guest_program};

const WORKFLOW: &str = include_str!("../../../policies/workflow.toml");
const CHAIN: &str = "CHAIN-039-file-ops";
const FIRST: &str = "CHAIN-039-file-ops/001-parse-headers";
const SECOND: &str = "CHAIN-039-file-ops/002-print-headers";

/// The shipped workflow policy, with the test programs added to the impl role's tools (a
/// hostile component as the impl agent would have it), keeping its state in `state`.
fn workflow_runtime(state: &std::path::Path, policy: &str) -> Runtime {
    let policy = policy.replace(
        r#""chain_status", "task_status", "task_complete", "task_block","#,
        r#""chain_status", "task_status", "task_complete", "task_block", "fs_probe", "misbehave","#,
    );
    builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .component("test:misbehave", guest_program("misbehave"))
        .policy("workflow.toml", policy)
        .audit_dir(state)
        .build()
        .unwrap_or_else(|error| panic!("the workflow runtime does not build: {error}"))
}

struct Project {
    fixture: Fixture,
    _state: tempfile::TempDir,
    host: Host,
}

impl Project {
    fn new() -> Project {
        Project::with_policy(WORKFLOW)
    }

    fn with_policy(policy: &str) -> Project {
        let fixture = Fixture::new();
        fixture.write("src/main.rs", "fn main() {}\n");
        let state = tempfile::tempdir().expect("a state directory");
        let runtime = workflow_runtime(state.path(), policy);
        let host = Host::new(runtime, Workspace::open(fixture.root()).expect("workspace"), None);
        Project { fixture, _state: state, host }
    }

    fn control(&self) -> Session {
        self.host.session("control", "control-1").expect("control session")
    }

    fn impl_for(&self, session: &str, task: &str) -> Session {
        self.host.session("impl", session).expect("impl session").with_task(TaskBinding::parse(task).expect("a task"))
    }

    /// A chain with two tasks in `todo`.
    fn planned(&self) -> Session {
        let control = self.control();
        ok(&control, "chain_new", json!({"cr": "CR-039", "slug": "file-ops", "title": "File operations", "goal": "Headers in and out."}));
        for (title, criteria) in
            [("Parse headers", ["parses `a: b`", "rejects garbage"]), ("Print headers", ["prints them", "round-trips"])]
        {
            ok(
                &control,
                "task_add",
                json!({"chain": CHAIN, "title": title, "objective": format!("{title} in src/."), "criteria": criteria}),
            );
        }
        control
    }

    fn task_path(&self, status: &str, task: &str) -> String {
        let (chain, name) = task.split_once('/').expect("CHAIN/TASK");
        format!("docs/tasks/{status}/{chain}/{name}.md")
    }

    fn exists(&self, relative: &str) -> bool {
        self.fixture.root().join(relative).exists()
    }

    /// Where `task` lies: the one status directory that holds it.
    fn status_of(&self, task: &str) -> String {
        let found: Vec<&str> = ["backlog", "todo", "in-progress", "in-review", "done", "blocked"]
            .into_iter()
            .filter(|status| self.exists(&self.task_path(status, task)))
            .collect();
        assert_eq!(found.len(), 1, "{task} lies in {found:?}");
        let text = self.fixture.read_text(&self.task_path(found[0], task));
        assert!(text.contains(&format!("**Status**: {}\n", found[0])), "the status line agrees with the directory:\n{text}");
        found[0].to_owned()
    }
}

fn call(session: &Session, tool: &str, args: Value) -> toolcell_host::CallResult {
    session.call(tool, &args.to_string()).unwrap_or_else(|error| panic!("host error calling {tool}: {error}"))
}

fn ok(session: &Session, tool: &str, args: Value) -> toolcell_host::ToolOutput {
    let result = call(session, tool, args.clone());
    result.output.unwrap_or_else(|error| panic!("{} {tool} {args} failed: {error}", session.role()))
}

fn refused(session: &Session, tool: &str, args: Value, kind: ToolErrorKind) -> (String, Vec<String>) {
    let result = call(session, tool, args.clone());
    match result.output {
        Ok(output) => panic!("{} {tool} {args} should fail but returned:\n{}", session.role(), output.text),
        Err(error) => {
            assert_eq!(error.kind, kind, "{} {tool} {args}: {error}", session.role());
            (error.message, result.denials.iter().map(|denial| denial.event.rule.clone()).collect())
        }
    }
}

fn audit(project: &Project) -> Vec<toolcell_audit::Record> {
    toolcell_tests::audit_records(project.host.runtime())
}

#[test]
fn the_whole_control_and_impl_scenario_runs_through_the_host() {
    let project = Project::new();
    let control = project.planned();
    assert_eq!(project.status_of(FIRST), "todo");
    assert_eq!(project.status_of(SECOND), "todo");

    let started = ok(&control, "task_start", json!({"task": FIRST, "locks": ["src/**"], "ttl_seconds": 600}));
    assert!(started.text.contains("Locked for CHAIN-039-file-ops: `src/**`"), "{}", started.text);
    assert_eq!(project.status_of(FIRST), "in-progress");
    let spawned = ok(&control, "spawn_impl_session", json!({"task": FIRST}));
    let structured = spawned.structured.expect("structured handoff");
    let child = structured["session_id"].as_str().expect("a session id").to_owned();
    assert!(child.starts_with("impl-039-001-"), "{child}");
    assert!(spawned.text.contains(&format!("--session {child}")), "the handoff says how to connect:\n{}", spawned.text);
    assert!(spawned.text.contains("## Acceptance criteria"), "the handoff carries the task text");
    project.fixture.assert_no_host_path(&spawned.text);
    let record = project.host.runtime().sessions().get(&child).expect("the session is recorded");
    assert_eq!(
        (record.role.as_str(), record.task.as_deref(), record.owner.as_deref(), record.parent.as_deref()),
        ("impl", Some(FIRST), Some(CHAIN), Some("control-1"))
    );
    assert!(project.fixture.read_text(&project.task_path("in-progress", FIRST)).contains(&format!("**Session**: {child}")));

    // The implementation session, as the host opens it from the record.
    let implementer = project.host.spawned_session(&child).expect("the spawned session opens");
    assert_eq!(implementer.task().map(ToString::to_string).as_deref(), Some(FIRST));
    assert_eq!(implementer.owner(), Some(CHAIN));
    let status = ok(&implementer, "task_status", json!({}));
    assert!(status.text.contains("1. [ ] parses `a: b`"), "{}", status.text);
    ok(&implementer, "read_file", json!({"path": "src/main.rs"}));
    ok(&implementer, "write_file", json!({"path": "src/main.rs", "content": "fn main() { parse(); }\n"}));
    ok(&implementer, "task_complete", json!({"note": "Parses headers.", "criteria": [1]}));
    assert_eq!(project.status_of(FIRST), "in-review");
    let in_review = project.fixture.read_text(&project.task_path("in-review", FIRST));
    assert!(in_review.contains("- [x] parses `a: b`") && in_review.contains("- [ ] rejects garbage"), "{in_review}");
    assert!(in_review.contains("## Completion note (") && in_review.contains(&format!("session {child})")), "{in_review}");

    // Review: rework, then the same session again, then approval.
    ok(&control, "task_rework", json!({"task": FIRST, "reason": "Garbage is still accepted."}));
    assert_eq!(project.status_of(FIRST), "in-progress");
    let again = ok(&implementer, "task_status", json!({}));
    assert!(again.text.contains("Rework requested") && again.text.contains("Garbage is still accepted."), "{}", again.text);
    ok(&implementer, "edit_file", json!({"path": "src/main.rs", "old_string": "parse();", "new_string": "parse().expect(\"valid\");"}));
    ok(&implementer, "task_complete", json!({"note": "Rejects garbage now.", "criteria": [2]}));
    assert!(project.host.locks().expect("locks").iter().any(|lock| lock.owner == CHAIN), "the chain's locks hold until approval");
    let approved = ok(&control, "task_approve", json!({"task": FIRST, "note": "Good."}));
    assert!(approved.text.contains("1 lock(s) released"), "{}", approved.text);
    assert_eq!(project.status_of(FIRST), "done");
    assert!(project.host.locks().expect("locks").iter().all(|lock| lock.owner != CHAIN));
    assert_eq!(project.fixture.read_text("src/main.rs"), "fn main() { parse().expect(\"valid\"); }\n");

    let status = ok(&control, "chain_status", json!({"chain": CHAIN}));
    let structured = status.structured.expect("structured");
    assert_eq!((structured["done"].as_u64(), structured["total"].as_u64()), (Some(1), Some(2)), "{}", status.text);
    assert_eq!(structured["next"], json!(SECOND));
    let listed = ok(&control, "chain_list", json!({}));
    assert!(listed.text.contains("CHAIN-039-file-ops: 1/2 done"), "{}", listed.text);

    // The audit trail has the spawn with its parent, and the child's calls under its own id.
    let records = audit(&project);
    let spawn = records.iter().find(|record| record.kind == toolcell_audit::Kind::Spawn).expect("a spawn record");
    assert_eq!((spawn.session.as_str(), spawn.child.as_deref(), spawn.path.as_deref()), ("control-1", Some(child.as_str()), Some(FIRST)));
    assert!(
        records.iter().any(|record| record.session == child && record.tool == "task_complete" && record.outcome.as_deref() == Some("ok"))
    );
    // The changes the reviewer sees: the session's undo records hold both edits of src/main.rs.
    let changes = project.host.runtime().session_changes(project.host.workspace(), &child);
    let edits: Vec<_> = changes.iter().filter(|change| change.path == "src/main.rs").collect();
    assert_eq!(edits.len(), 2, "{changes:?}");
    assert_eq!(edits[0].before.as_deref(), Some(&b"fn main() {}\n"[..]));
    assert_eq!(edits[0].after, Some(Some(b"fn main() { parse(); }\n".to_vec())));
}

/// The matrix of `policies/workflow.toml` and the README: `(tool, control, impl)`.
const MATRIX: &[(&str, bool, bool)] = &[
    ("chain_status", true, true),
    ("chain_list", true, false),
    ("chain_new", true, false),
    ("task_add", true, false),
    ("task_list", true, false),
    ("task_ready", true, false),
    ("task_start", true, false),
    ("spawn_impl_session", true, false),
    ("task_status", false, true),
    ("task_complete", false, true),
    ("task_approve", true, false),
    ("task_rework", true, false),
    ("task_block", true, true),
    ("task_unblock", true, false),
];

#[test]
fn every_cell_of_the_role_matrix_is_enforced_and_documented() {
    let project = Project::new();
    project.planned();
    let control = project.control();
    let implementer = project.impl_for("impl-1", FIRST);
    for (tool, control_may, impl_may) in MATRIX {
        for (session, may) in [(&control, control_may), (&implementer, impl_may)] {
            let result = call(session, tool, json!({}));
            let gated =
                result.output.as_ref().is_err_and(|error| error.kind == ToolErrorKind::Denied && error.message.contains("may not call"));
            assert_eq!(!gated, *may, "{} calling {tool}: {:?}", session.role(), result.output);
        }
        // The spelling of the seed matrix is an alias.
        let alias = tool.replacen('_', ":", 1);
        let result = call(&control, &alias, json!({}));
        let gated = result.output.as_ref().is_err_and(|error| error.message.contains("may not call"));
        assert_eq!(!gated, *control_may, "control calling {alias}");
    }
    // The book documents the same matrix, row for row.
    let readme = include_str!("../../../docs/src/task-chains.md");
    for (tool, control_may, impl_may) in MATRIX {
        let mark = |may: &bool| if *may { "✓" } else { "–" };
        let row = format!("| `{tool}` | {} | {} |", mark(control_may), mark(impl_may));
        assert!(readme.contains(&row), "the book's matrix lacks the row {row}");
    }
    // And so does the policy: every matrix tool, and nothing else of the chain tools.
    let policy = project.host.runtime().policy().expect("a policy");
    for (tool, control_may, impl_may) in MATRIX {
        assert_eq!(policy.role("control").expect("control").may_call(tool), *control_may, "control {tool}");
        assert_eq!(policy.role("impl").expect("impl").may_call(tool), *impl_may, "impl {tool}");
    }
}

#[test]
fn a_hostile_impl_session_cannot_finish_its_own_task_or_touch_another() {
    let project = Project::new();
    let control = project.planned();
    ok(&control, "task_start", json!({"task": FIRST}));
    ok(&control, "task_start", json!({"task": SECOND}));
    let hostile = project.impl_for("impl-hostile", FIRST);
    let own = project.task_path("in-progress", FIRST);
    let other = project.task_path("in-progress", SECOND);
    let done = project.task_path("done", FIRST);
    let before = project.fixture.snapshot();

    // Straight to done, with the file tools and with a component of its own.
    let (_, rules) = refused(&hostile, "move_file", json!({"source": own, "destination": done}), ToolErrorKind::Denied);
    assert!(rules.iter().all(|rule| rule == "docs-read-only"), "{rules:?}");
    refused(&hostile, "write_file", json!({"path": own, "content": "**Status**: done"}), ToolErrorKind::Denied);
    refused(&hostile, "edit_file", json!({"path": own, "old_string": "in-progress", "new_string": "done"}), ToolErrorKind::Denied);
    let probe = |op: &str, path: &str, to: &str| json!({"ops": [{"op": op, "path": path, "to": to, "content": "# Done\n"}]});
    for (op, path, to) in [
        ("mkdir", "docs/tasks/done/CHAIN-039-file-ops", ""),
        ("rename", own.as_str(), done.as_str()),
        ("write", done.as_str(), ""),
        ("write", project.task_path("in-review", FIRST).as_str(), ""),
        ("remove", other.as_str(), ""),
        ("rename", other.as_str(), project.task_path("blocked", SECOND).as_str()),
    ] {
        let (_, rules) = refused(&hostile, "fs_probe", probe(op, path, to), ToolErrorKind::Denied);
        assert!(rules.iter().any(|rule| rule == "docs-read-only"), "{op} {path}: {rules:?}");
    }
    // The task tools act on its own task only: the host's `{task}` rules refuse the other.
    let (message, _) = refused(&hostile, "task_block", json!({"task": SECOND, "reason": "mine now"}), ToolErrorKind::Denied);
    assert!(message.contains(&format!("works on `{FIRST}` only")), "{message}");
    // The workflow capabilities the impl role is not granted.
    let (message, rules) =
        refused(&hostile, "misbehave", json!({"action": "spawn", "text": "impl", "path": SECOND}), ToolErrorKind::Denied);
    assert_eq!(rules, ["may_spawn"], "{message}");
    let (_, rules) =
        refused(&hostile, "misbehave", json!({"action": "lock_for_task", "text": "src/**", "path": FIRST}), ToolErrorKind::Denied);
    assert_eq!(rules, ["may_lock_for_chains"]);
    let (_, rules) = refused(&hostile, "misbehave", json!({"action": "release_task", "path": FIRST}), ToolErrorKind::Denied);
    assert_eq!(rules, ["may_lock_for_chains"]);
    assert_eq!(project.fixture.snapshot(), before, "nothing changed");
    assert!(project.host.runtime().sessions().list().is_empty(), "no session was spawned");

    // Every refusal is on the audit trail, with its rule.
    let records = audit(&project);
    let refusals: Vec<&str> = records
        .iter()
        .filter(|record| record.session == "impl-hostile" && record.decision.as_deref() == Some("deny"))
        .filter_map(|record| record.rule.as_deref())
        .collect();
    for rule in ["docs-read-only", "may_spawn", "may_lock_for_chains"] {
        assert!(refusals.contains(&rule), "{rule} is audited: {refusals:?}");
    }
    // What it may do, it does on its own task only: complete it, into review and no further.
    let bound = ok(&hostile, "misbehave", json!({"action": "task"}));
    assert_eq!(bound.text, FIRST);
    ok(&hostile, "task_complete", json!({"note": "Done."}));
    assert_eq!(project.status_of(FIRST), "in-review");
    assert_eq!(project.status_of(SECOND), "in-progress");
    refused(&hostile, "task_approve", json!({"task": FIRST}), ToolErrorKind::Denied);
}

#[test]
fn a_second_chains_writes_are_refused_by_the_first_chains_locks() {
    let project = Project::new();
    let control = project.planned();
    ok(&control, "task_start", json!({"task": FIRST, "locks": ["src/**"]}));
    ok(&control, "chain_new", json!({"cr": "CR-040", "slug": "other", "title": "Another change"}));
    ok(&control, "task_add", json!({"chain": "CHAIN-040-other", "title": "Touch main", "objective": "x", "criteria": ["y"]}));
    ok(&control, "task_start", json!({"task": "CHAIN-040-other/001-touch-main"}));
    let other = project.impl_for("impl-other", "CHAIN-040-other/001-touch-main");
    let (message, rules) = refused(&other, "write_file", json!({"path": "src/main.rs", "content": "x"}), ToolErrorKind::Conflict);
    assert!(message.contains("locked by `CHAIN-039-file-ops`"), "the refusal names the chain: {message}");
    assert!(rules.iter().all(|rule| rule.starts_with("lock")), "{rules:?}");
    assert_eq!(project.fixture.read_text("src/main.rs"), "fn main() {}\n");
    // The first chain's own session writes there; another chain's locking the same paths is refused.
    let first = project.impl_for("impl-first", FIRST);
    ok(&first, "write_file", json!({"path": "src/main.rs", "content": "fn main() { first(); }\n"}));
    ok(&control, "task_add", json!({"chain": "CHAIN-040-other", "title": "Lock main", "objective": "x", "criteria": ["y"]}));
    let (message, _) = refused(
        &control,
        "task_start",
        json!({"task": "CHAIN-040-other/002-lock-main", "locks": ["src/main.rs"]}),
        ToolErrorKind::Conflict,
    );
    assert!(message.contains("locked by `CHAIN-039-file-ops`"), "{message}");
    assert_eq!(project.status_of("CHAIN-040-other/002-lock-main"), "todo", "a refused lock undoes the start");
    // Tasks of one chain share its locks.
    ok(&control, "task_start", json!({"task": SECOND, "locks": ["src/main.rs"]}));
    // Outside the locked paths the second chain writes freely.
    ok(&other, "write_file", json!({"path": "tests/other.rs", "content": "// other\n"}));
    // The chain's locks are shown where the caller may see their paths: a lock on a file the
    // role may not read would name it.
    let owner = project.host.session("impl", "impl-first").expect("session").with_owner(CHAIN);
    owner.lock("config/.env", toolcell_host::LockMode::Exclusive, std::time::Duration::from_secs(60)).expect("lock");
    let status = ok(&control, "chain_status", json!({"chain": CHAIN})).structured.expect("structured");
    let patterns: Vec<&str> = status["locks"].as_array().expect("locks").iter().filter_map(|lock| lock["pattern"].as_str()).collect();
    assert!(patterns.contains(&"src/**") && patterns.contains(&"src/main.rs"), "{patterns:?}");
    assert!(!patterns.contains(&"config/.env"), "{patterns:?}");
}

#[test]
fn malformed_task_files_are_reported_and_never_half_moved() {
    let project = Project::new();
    let control = project.planned();
    let second = project.task_path("todo", SECOND);
    let good = project.fixture.read_text(&second);
    let table = [
        (good.replace("**CR**: CR-039\n", "").replace("**Type**: impl\n", ""), "lacks `**Type**`, `**CR**`"),
        (good.replace("**Status**: todo", "**Status**: done"), "says `**Status**: done` but lies where `todo` belongs"),
        (good.replace("**Chain**: CHAIN-039-file-ops", "**Chain**: CHAIN-001-x"), "says `**Chain**: CHAIN-001-x`"),
        (good.replacen("# Print headers", "Print headers", 1), "first line is not a `# Title` line"),
    ];
    for (text, reason) in table {
        project.fixture.write(&second, &text);
        let before = project.fixture.snapshot();
        let (message, _) = refused(&control, "task_start", json!({"task": SECOND, "locks": ["src/**"]}), ToolErrorKind::Conflict);
        assert!(message.contains(reason) && message.contains(&second), "{message}");
        assert_eq!(project.fixture.snapshot(), before, "nothing moved for: {reason}");
        assert!(project.host.locks().expect("locks").is_empty(), "no lock taken for: {reason}");
        let status = ok(&control, "chain_status", json!({"chain": CHAIN}));
        assert!(status.text.contains("Problem:") && status.text.contains(reason), "{}", status.text);
    }
    // A task in two statuses at once is named, not guessed.
    project.fixture.write(&second, &good);
    project.fixture.write(&project.task_path("done", SECOND), good.replace("**Status**: todo", "**Status**: done"));
    let (message, _) = refused(&control, "task_start", json!({"task": SECOND}), ToolErrorKind::Conflict);
    assert!(message.contains("in several statuses"), "{message}");
    // Moves that skip the state machine are refused by the tool, and by the host where a tool would try.
    std::fs::remove_file(project.fixture.root().join(project.task_path("done", SECOND))).expect("remove the copy");
    let (message, _) = refused(&control, "task_approve", json!({"task": SECOND}), ToolErrorKind::Conflict);
    assert!(message.contains("is in `todo`"), "{message}");
}

#[test]
fn blocking_and_unblocking_return_a_task_where_it_was() {
    let project = Project::new();
    let control = project.planned();
    ok(&control, "task_start", json!({"task": FIRST}));
    let implementer = project.impl_for("impl-1", FIRST);
    ok(&implementer, "task_block", json!({"reason": "Needs the header spec."}));
    assert_eq!(project.status_of(FIRST), "blocked");
    assert!(project.fixture.read_text(&project.task_path("blocked", FIRST)).contains("**Blocked-from**: in-progress"));
    // The impl session cannot unblock; control puts it back where it was.
    refused(&implementer, "task_unblock", json!({"task": FIRST}), ToolErrorKind::Denied);
    ok(&control, "task_unblock", json!({"task": FIRST, "note": "Spec is in docs/spec.md."}));
    assert_eq!(project.status_of(FIRST), "in-progress");
    assert!(!project.fixture.read_text(&project.task_path("in-progress", FIRST)).contains("Blocked-from"));
    // A backlog task is made ready, then started.
    ok(&control, "task_add", json!({"chain": CHAIN, "title": "Later", "objective": "x", "criteria": ["y"], "status": "backlog"}));
    refused(&control, "task_start", json!({"task": "CHAIN-039-file-ops/003-later"}), ToolErrorKind::Conflict);
    ok(&control, "task_ready", json!({"task": "CHAIN-039-file-ops/003-later"}));
    ok(&control, "task_start", json!({"task": "CHAIN-039-file-ops/003-later"}));
}

#[test]
fn spawning_and_chain_locks_need_the_policys_grant() {
    let policy = WORKFLOW.replace("may_spawn = [\"impl\"]\n", "").replace("may_lock_for_chains = true\n", "");
    let project = Project::with_policy(&policy);
    let control = project.planned();
    let before = project.fixture.snapshot();
    let (message, rules) = refused(&control, "task_start", json!({"task": FIRST, "locks": ["src/**"]}), ToolErrorKind::Denied);
    assert_eq!(rules, ["may_lock_for_chains"], "{message}");
    assert_eq!(project.fixture.snapshot(), before, "the refused lock undid the start");
    ok(&control, "task_start", json!({"task": FIRST}));
    let (message, rules) = refused(&control, "spawn_impl_session", json!({"task": FIRST}), ToolErrorKind::Denied);
    assert_eq!(rules, ["may_spawn"], "{message}");
    assert!(message.contains("may not start `impl` sessions"), "{message}");
    assert!(project.host.runtime().sessions().list().is_empty());
    assert!(!project.fixture.read_text(&project.task_path("in-progress", FIRST)).contains("**Session**"));
}

#[test]
fn a_spawned_session_is_what_its_record_says() {
    let project = Project::new();
    let control = project.planned();
    ok(&control, "task_start", json!({"task": FIRST}));
    let spawned = ok(&control, "spawn_impl_session", json!({"task": FIRST})).structured.expect("structured");
    let child = spawned["session_id"].as_str().expect("id");
    assert!(project.host.spawned_session("impl-unknown").is_err());
    let session = project.host.spawned_session(child).expect("opens");
    assert_eq!(project.host.runtime().sessions().get(child).expect("record").state, toolcell_host::SessionState::Active);
    assert_eq!(session.role(), "impl");
    // Its task is not an argument anyone passes: the component reads the host's binding.
    let bound = ok(&session, "misbehave", json!({"action": "task"}));
    assert_eq!(bound.text, FIRST);
    project.host.runtime().sessions().set_state(child, toolcell_host::SessionState::Ended).expect("end it");
    let error = project.host.spawned_session(child).err().expect("an ended session does not reopen");
    assert!(error.to_string().contains("has ended"), "{error}");
}

#[test]
fn rules_bound_to_the_session_task_limit_any_component_to_that_task() {
    // The task tools are trusted to act on the session's task; the host does not rely on it. A
    // rule naming a component and `{chain}/{task}` lets that component, bound to one task,
    // write that task's file and no other, whatever it asks for.
    let policy = WORKFLOW.replace(
        "[[roles.impl.rules]]\nid = \"impl-task-directories\"",
        "[[roles.impl.rules]]\nid = \"probe-own-task\"\ntools = [\"fs_probe\"]\naccess = [\"write\"]\npaths = [\"docs/tasks/in-review/{chain}/{task}.md\"]\neffect = \"allow\"\n\n[[roles.impl.rules]]\nid = \"impl-task-directories\"",
    );
    let project = Project::with_policy(&policy);
    project.planned();
    project.fixture.write("docs/tasks/in-review/CHAIN-039-file-ops/.keep", "");
    let probe = |path: &str| json!({"ops": [{"op": "write", "path": path, "content": "# Done\n"}]});
    let own = project.task_path("in-review", FIRST);
    let other = project.task_path("in-review", SECOND);
    let bound = project.impl_for("impl-probe", FIRST);
    ok(&bound, "fs_probe", probe(&own));
    let (_, rules) = refused(&bound, "fs_probe", probe(&other), ToolErrorKind::Denied);
    assert_eq!(rules, ["docs-read-only"]);
    // Unbound, the rule applies to nothing.
    let unbound = project.host.session("impl", "impl-unbound").expect("session");
    let (_, rules) = refused(&unbound, "fs_probe", probe(&own), ToolErrorKind::Denied);
    assert_eq!(rules, ["docs-read-only"]);
    // Another tool bound to the same task gets nothing from the rule.
    let (_, rules) = refused(&bound, "write_file", json!({"path": own, "content": "x"}), ToolErrorKind::Denied);
    assert_eq!(rules, ["docs-read-only"]);
    assert_eq!(project.fixture.read_text(&own), "# Done\n");
    assert!(!project.exists(&other));
}

#[test]
fn a_component_flooding_the_workflow_with_refusals_is_stopped() {
    let policy = format!("{WORKFLOW}\n[limits]\naudit_records = 20\n");
    let project = Project::with_policy(&policy);
    let hostile = project.impl_for("impl-flood", FIRST);
    let result = call(&hostile, "misbehave", json!({"action": "spawn_loop", "text": "impl", "bytes": 5000}));
    let error = result.output.expect_err("stopped");
    assert_eq!(error.kind, ToolErrorKind::TooLarge, "{error}");
    assert!(error.message.contains("audit records"), "{error}");
    let records = audit(&project).into_iter().filter(|record| record.session == "impl-flood").count();
    assert!(records <= 25, "the refusals were bounded by the budget, not one record each: {records}");
    assert!(project.host.runtime().sessions().list().is_empty());
}

#[test]
fn locks_for_a_chain_need_a_task_in_progress() {
    // A control-role component that locks `**` for a chain nobody made would stop every other
    // chain's writes.
    let policy = WORKFLOW.replace("\"spawn_impl_session\",", "\"spawn_impl_session\", \"misbehave\",");
    let project = Project::with_policy(&policy);
    let control = project.planned();
    let lock = |task: &str| call(&control, "misbehave", json!({"action": "lock_for_task", "text": "**", "path": task}));
    let live = || project.host.runtime().live_locks(&Workspace::open(project.fixture.root()).expect("workspace")).expect("locks");
    for task in ["CHAIN-999-made-up/001-anything", FIRST] {
        let error = lock(task).output.expect_err("refused");
        assert_eq!(error.kind, ToolErrorKind::Conflict, "{task}: {error}");
        assert!(error.message.contains("is not in progress") && error.message.contains("task_start"), "{task}: {error}");
        assert!(live().is_empty(), "{task}: {:?}", live());
    }
    // Started, its chain may lock.
    ok(&control, "task_start", json!({"task": FIRST}));
    assert_eq!(ok(&control, "misbehave", json!({"action": "lock_for_task", "text": "src/**", "path": FIRST})).text, "1 locked");
    assert_eq!(live().iter().map(|lock| lock.owner.as_str()).collect::<Vec<_>>(), [CHAIN]);
}

#[test]
fn a_chains_locks_cover_only_what_its_roles_may_write() {
    // A control-role component, and a `docs` role that may write `docs/**` and the protected
    // `.env`, which neither `control` nor the `impl` sessions writing as the chain may write.
    let policy = format!(
        "{}\n{}",
        WORKFLOW.replace("\"spawn_impl_session\",", "\"spawn_impl_session\", \"misbehave\","),
        r#"
[roles.docs]
tools = ["read_file", "write_file"]

[[roles.docs.rules]]
id = "docs-rw"
access = ["read", "list", "write"]
paths = ["docs/**", "**/.env"]
effect = "allow"
"#
    );
    let project = Project::with_policy(&policy);
    project.fixture.write("docs/guide.md", "# guide\n");
    project.fixture.write(".env", "A=1\n");
    let control = project.planned();
    ok(&control, "task_start", json!({"task": FIRST}));
    let lock = |pattern: &str| call(&control, "misbehave", json!({"action": "lock_for_task", "text": pattern, "path": FIRST}));
    for glob in ["**", "d?cs/*", "*.env"] {
        assert_eq!(lock(glob).output.unwrap_or_else(|error| panic!("{glob}: {error}")).text, "1 locked");
    }
    // The chain's `**` keeps nobody from what its roles may not write.
    let docs = project.host.session("docs", "docs-1").expect("docs session");
    ok(&docs, "read_file", json!({"path": "docs/guide.md"}));
    ok(&docs, "write_file", json!({"path": "docs/guide.md", "content": "# new\n"}));
    ok(&docs, "write_file", json!({"path": ".env", "content": "A=2\n"}));
    // What `impl` may write is the chain's.
    let outsider = project.host.session("impl", "impl-outsider").expect("impl session");
    let (message, rules) = refused(&outsider, "write_file", json!({"path": "src/main.rs", "content": "x"}), ToolErrorKind::Conflict);
    assert!(message.contains(&format!("locked by `{CHAIN}`")), "{message}");
    assert!(rules[0].starts_with("lock:"), "{rules:?}");
    // A literal path none of the chain's roles may write is refused, naming the rule, audited.
    for (path, rule) in [("docs/guide.md", "docs-read-only"), (".env", "protected:**/.env")] {
        let error = lock(path).output.expect_err("refused");
        assert_eq!(error.kind, ToolErrorKind::Denied, "{path}: {error}");
        assert!(error.message.contains(&format!("`{path}` may not be locked for the chain")), "{error}");
        assert!(error.message.contains(rule), "{path}: {error}");
        assert!(
            audit(&project).iter().any(|record| record.session == "control-1"
                && record.operation.as_deref() == Some("lock-for-task")
                && record.rule.as_deref() == Some(rule)
                && record.decision.as_deref() == Some("deny")),
            "the refusal to lock {path} is audited"
        );
    }
}

#[test]
fn a_chains_lock_on_the_task_files_does_not_stop_another_chains_task_tools() {
    // The shipped policy: `control` may move any chain's task files, but only through the task
    // tools; that narrow right is theirs, not a claim chain 039 may lock against chain 040.
    let project = Project::new();
    let control = project.planned();
    ok(&control, "task_start", json!({"task": FIRST, "locks": ["docs/tasks/**", "**"], "ttl_seconds": 86_400}));
    ok(&control, "chain_new", json!({"cr": "CR-040", "slug": "other", "title": "Another change"}));
    ok(&control, "task_add", json!({"chain": "CHAIN-040-other", "title": "Other work", "objective": "Do it.", "criteria": ["done"]}));
    let other = "CHAIN-040-other/001-other-work";
    ok(&control, "task_start", json!({"task": other}));
    let implementer = project.impl_for("impl-040", other);
    ok(&implementer, "task_complete", json!({"note": "Done.", "criteria": [1]}));
    ok(&control, "task_approve", json!({"task": other, "note": "Good."}));
    assert_eq!(project.status_of(other), "done");
    // What the chain's roles may write themselves stays the chain's.
    let (message, _) = refused(&implementer, "write_file", json!({"path": "src/main.rs", "content": "x"}), ToolErrorKind::Conflict);
    assert!(message.contains(&format!("locked by `{CHAIN}`")), "{message}");
}

#[test]
fn spawns_need_a_task_in_progress_and_are_bounded() {
    // A control-role component that loops on `spawn-session`.
    let policy = WORKFLOW.replace("\"spawn_impl_session\",", "\"spawn_impl_session\", \"misbehave\",");
    let project = Project::with_policy(&policy);
    let control = project.planned();
    let spawn_loop = |task: &str, times: u32| {
        let output = ok(&control, "misbehave", json!({"action": "spawn_loop", "text": "impl", "path": task, "bytes": times}));
        output.text
    };
    // Tasks that do not exist, and one that exists but was not started: nothing is spawned.
    assert_eq!(spawn_loop("", 2_000), "spawned 0");
    assert_eq!(spawn_loop(FIRST, 10), "spawned 0");
    let single = call(&control, "misbehave", json!({"action": "spawn", "text": "impl", "path": FIRST})).output.expect_err("refused");
    assert_eq!(single.kind, ToolErrorKind::Conflict, "{single}");
    assert!(single.message.contains("is not in progress") && single.message.contains("task_start"), "{single}");
    assert!(project.host.runtime().sessions().list().is_empty());
    // Started: at most 4 in one call, and at most 4 that have not ended for one task.
    ok(&control, "task_start", json!({"task": FIRST}));
    assert_eq!(spawn_loop(FIRST, 2_000), format!("spawned {}", toolcell_runtime::MAX_SPAWNS_PER_CALL));
    assert_eq!(spawn_loop(FIRST, 10), "spawned 0");
    let (message, _) = refused(&control, "spawn_impl_session", json!({"task": FIRST}), ToolErrorKind::Conflict);
    assert!(message.contains("sessions that have not ended"), "{message}");
    let sessions = project.host.runtime().sessions().list();
    assert_eq!(sessions.len(), toolcell_runtime::MAX_SESSIONS_PER_TASK);
    // One ends: one more may start.
    project.host.runtime().sessions().set_state(&sessions[0].id, toolcell_host::SessionState::Ended).expect("end one");
    assert_eq!(spawn_loop(FIRST, 10), "spawned 1");
}

//! Behaviour checks for the task-chain tools: each moves a task file exactly as the workflow
//! says, or refuses a task in the wrong status and leaves it where it was.

use serde_json::json;
use toolcell_runtime::Runtime;
use toolcell_types::ToolErrorKind;

use super::{Behaviour, Scratch, expect, shorten};

const CHAIN: &str = "CHAIN-7-demo";
const TASK: &str = "CHAIN-7-demo/001-first";

/// A task file of `CHAIN-7-demo` in `status`, as the workflow writes them.
fn task_file(task: &str, status: &str, extra: &str) -> String {
    format!(
        "# First task\n\n**Chain**: {CHAIN}\n**Task**: {task}\n**Status**: {status}\n**Type**: impl\n**Created**: 2026-01-01\n**CR**: CR-7\n{extra}\n## Objective\n\nDo it.\n\n## Acceptance criteria\n\n- [ ] done\n"
    )
}

impl Scratch {
    /// Put `001-first` of `CHAIN-7-demo` in `status`.
    fn put_task(&self, status: &str, extra: &str) {
        let directory = self.root().join(format!("docs/tasks/{status}/{CHAIN}"));
        let _ = std::fs::create_dir_all(&directory);
        let _ = std::fs::write(directory.join("001-first.md"), task_file("001-first", status, extra));
    }

    /// The status `001-first` lies in, if exactly one, with its `**Status**` line agreeing.
    fn task_status(&self) -> Result<String, String> {
        let found: Vec<&str> = ["backlog", "todo", "in-progress", "in-review", "done", "blocked"]
            .into_iter()
            .filter(|status| self.read(&format!("docs/tasks/{status}/{CHAIN}/001-first.md")).is_some())
            .collect();
        let [status] = found.as_slice() else {
            return Err(format!("`{TASK}` lies in {found:?}, not in exactly one status"));
        };
        let text = self.read(&format!("docs/tasks/{status}/{CHAIN}/001-first.md")).unwrap_or_default();
        if !text.contains(&format!("**Status**: {status}\n")) {
            return Err(format!("`{TASK}` lies in `{status}` but its status line disagrees:\n{}", shorten(&text)));
        }
        Ok((*status).to_owned())
    }
}

/// A move from `from` to `to` by `tool` with `args`, and its refusal from the wrong status.
fn moves(
    scratch: &Scratch,
    runtime: &Runtime,
    tool: &str,
    args: serde_json::Value,
    from: &str,
    to: &str,
    bound: bool,
) -> Result<(), String> {
    scratch.put_task(if from == "blocked" { "blocked" } else { from }, if from == "blocked" { "**Blocked-from**: todo\n" } else { "" });
    if bound {
        scratch.ok_bound(runtime, tool, args.clone(), TASK)?;
    } else {
        scratch.ok(runtime, tool, args.clone())?;
    }
    let status = scratch.task_status()?;
    expect(status == to, format!("{tool} {args} left `{TASK}` in `{status}` instead of `{to}`"))?;
    // From a status the move does not start in: a conflict, and the file stays.
    scratch.reset();
    let wrong = if from == "done" { "todo" } else { "done" };
    scratch.put_task(wrong, "");
    let result = if bound {
        scratch.call_bound(runtime, tool, &args.to_string(), TASK).result
    } else {
        scratch.call(runtime, "agent", tool, &args.to_string()).result
    };
    match result {
        Err(error) if error.kind == ToolErrorKind::Conflict => {}
        other => return Err(format!("{tool} on a task in `{wrong}` should be a conflict; it returned {}", super::summary(&other))),
    }
    let status = scratch.task_status()?;
    expect(status == wrong, format!("a refused {tool} moved `{TASK}` to `{status}`"))
}

/// The behaviour checks for a task-chain tool name.
pub(crate) fn behaviours(tool: &str) -> Vec<(&'static str, Behaviour)> {
    match tool {
        "chain_new" => vec![("chain_new creates the chain's charter in the backlog", |scratch, runtime| {
            let output = scratch.ok(runtime, "chain_new", json!({"cr": "CR-7", "slug": "demo", "title": "Demo"}))?;
            let charter = scratch.read("docs/tasks/backlog/CHAIN-7-demo/000-charter.md").unwrap_or_default();
            expect(
                charter.starts_with("# Demo\n") && charter.contains("**Status**: backlog") && charter.contains("**CR**: CR-7"),
                format!("chain_new said {} and wrote the charter {}", shorten(&output.text), shorten(&charter)),
            )?;
            scratch.err(runtime, "chain_new", json!({"cr": "CR-7", "slug": "demo", "title": "Again"}), ToolErrorKind::Conflict)
        })],
        "chain_list" => vec![("chain_list lists a chain with its progress", |scratch, runtime| {
            scratch.put_task("done", "");
            let text = scratch.ok(runtime, "chain_list", json!({}))?.text;
            expect(text.contains("CHAIN-7-demo: 1/1 done"), format!("chain_list returned {}", shorten(&text)))
        })],
        "chain_status" => vec![("chain_status counts a chain's tasks by status", |scratch, runtime| {
            scratch.put_task("todo", "");
            let output = scratch.ok(runtime, "chain_status", json!({"chain": CHAIN}))?;
            let structured = output.structured.unwrap_or_default();
            expect(
                structured["total"] == 1 && structured["done"] == 0 && structured["next"] == TASK,
                format!("chain_status returned {}", shorten(&structured.to_string())),
            )
        })],
        "task_add" => vec![("task_add adds a numbered task to todo", |scratch, runtime| {
            scratch.put_task("done", "");
            scratch.ok(runtime, "task_add", json!({"chain": CHAIN, "title": "Second one", "objective": "More.", "criteria": ["works"]}))?;
            let added = scratch.read("docs/tasks/todo/CHAIN-7-demo/002-second-one.md").unwrap_or_default();
            expect(
                added.contains("**Status**: todo") && added.contains("- [ ] works"),
                format!("`docs/tasks/todo/CHAIN-7-demo/002-second-one.md` holds {}", shorten(&added)),
            )
        })],
        "task_list" => vec![("task_list lists a chain's tasks with their status", |scratch, runtime| {
            scratch.put_task("in-review", "");
            let text = scratch.ok(runtime, "task_list", json!({"chain": CHAIN}))?.text;
            expect(text.contains("in-review") && text.contains("001-first"), format!("task_list returned {}", shorten(&text)))
        })],
        "task_ready" => vec![("task_ready moves backlog to todo", |scratch, runtime| {
            moves(scratch, runtime, "task_ready", json!({"task": TASK}), "backlog", "todo", false)
        })],
        "task_start" => vec![("task_start moves todo to in-progress", |scratch, runtime| {
            moves(scratch, runtime, "task_start", json!({"task": TASK}), "todo", "in-progress", false)
        })],
        "task_approve" => vec![("task_approve moves in-review to done", |scratch, runtime| {
            moves(scratch, runtime, "task_approve", json!({"task": TASK}), "in-review", "done", false)
        })],
        "task_rework" => vec![("task_rework moves in-review back to in-progress", |scratch, runtime| {
            moves(scratch, runtime, "task_rework", json!({"task": TASK, "reason": "Again."}), "in-review", "in-progress", false)
        })],
        "task_unblock" => vec![("task_unblock returns a task where it was blocked from", |scratch, runtime| {
            moves(scratch, runtime, "task_unblock", json!({"task": TASK}), "blocked", "todo", false)
        })],
        "task_block" => vec![("task_block moves a task to blocked", |scratch, runtime| {
            scratch.put_task("todo", "");
            scratch.ok(runtime, "task_block", json!({"task": TASK, "reason": "Waiting."}))?;
            let status = scratch.task_status()?;
            let text = scratch.read(&format!("docs/tasks/blocked/{CHAIN}/001-first.md")).unwrap_or_default();
            expect(
                status == "blocked" && text.contains("**Blocked-from**: todo"),
                format!("after task_block: `{status}`, {}", shorten(&text)),
            )
        })],
        "task_complete" => vec![("task_complete moves the session's own task to in-review", |scratch, runtime| {
            moves(scratch, runtime, "task_complete", json!({"note": "Done."}), "in-progress", "in-review", true)
        })],
        "task_status" => vec![("task_status shows the session's own task", |scratch, runtime| {
            scratch.put_task("in-progress", "");
            let text = scratch.ok_bound(runtime, "task_status", json!({}), TASK)?.text;
            expect(text.contains("# First task") && text.contains("1. [ ] done"), format!("task_status returned {}", shorten(&text)))
        })],
        "spawn_impl_session" => vec![("spawn_impl_session starts a session and records it in the task", |scratch, runtime| {
            scratch.put_task("in-progress", "");
            let output = scratch.ok(runtime, "spawn_impl_session", json!({"task": TASK}))?;
            let id = output.structured.as_ref().and_then(|value| value["session_id"].as_str().map(str::to_owned)).unwrap_or_default();
            let text = scratch.read(&format!("docs/tasks/in-progress/{CHAIN}/001-first.md")).unwrap_or_default();
            expect(
                !id.is_empty() && text.contains(&format!("**Session**: {id}")),
                format!("spawned `{id}`; the task file holds {}", shorten(&text)),
            )
        })],
        _ => Vec::new(),
    }
}

//! `chain_status`: a chain's tasks by status, its progress, who holds its locks, and the next task.

use serde::Deserialize;
use serde_json::{Value, json};
use toolcell_sdk::chain::{self, Found, Status};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, workflow};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    chain: Option<String>,
}

struct ChainStatus;

impl Tool for ChainStatus {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "chain_status",
            "Chain status",
            "Show one task chain (`docs/tasks/<status>/<CHAIN-ID>/`): its tasks grouped by status, \
             progress (implementation tasks done of all), the locks held for the chain and by whom, \
             the next task to start, and any task file that is malformed. An implementation session \
             may leave `chain` out to see its own task's chain.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "chain": {"type": "string", "description": "The chain id, e.g. `CHAIN-039-file-operations`; default: the chain of your session's task."}
            },
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"chain": {"type": "string"}, "done": {"type": "integer", "minimum": 0}, "total": {"type": "integer", "minimum": 0}, "tasks": {"type": "object"}, "locks": {"type": "array", "items": {"type": "object"}}, "next": {"type": ["string", "null"]}, "problems": {"type": "array"}}, "required": ["chain", "done", "total", "tasks", "locks", "next", "problems"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let chain = match args.chain {
            Some(chain) => chain::chain_id(&chain)?,
            None => {
                chain::bound_task().map_err(|_| ToolError::InvalidArgs("give `chain`: this session is bound to no task".to_owned()))?.chain
            }
        };
        let tasks = chain::tasks_of(&chain)?;
        if tasks.is_empty() {
            return Err(ToolError::NotFound(format!(
                "there is no chain `{chain}` under `{}`; `chain_list` lists the chains",
                chain::TASKS_DIR
            )));
        }
        let (done, total) = chain::progress(&tasks);
        let mut text = format!("Chain {chain}: {done}/{total} implementation tasks done\n");
        let mut statuses = serde_json::Map::new();
        for (status, found) in chain::by_status(&tasks) {
            text.push_str(&format!("\n{} ({}):\n", status.as_str(), found.len()));
            let mut listed = Vec::new();
            for task in found {
                text.push_str(&format!("  {}\n", line(task)));
                listed.push(entry(task));
            }
            statuses.insert(status.as_str().to_owned(), Value::Array(listed));
        }
        let locks: Vec<workflow::LockInfo> = workflow::locks().into_iter().filter(|lock| lock.owner == chain).collect();
        text.push_str("\nLocks held for the chain:");
        if locks.is_empty() {
            text.push_str(" none\n");
        } else {
            text.push('\n');
            for lock in &locks {
                text.push_str(&format!("  `{}` ({}) by {} until {}\n", lock.pattern, lock.mode, lock.session, lock.expires));
            }
        }
        let next = next_task(&tasks);
        match next {
            Some(task) => text.push_str(&format!("Next task: {} ({})\n", task.task, task.status.as_str())),
            None => text.push_str("Next task: none waiting\n"),
        }
        let problems: Vec<String> =
            tasks.iter().filter_map(|task| task.checked().err()).map(|error| toolcell_sdk::error_parts(&error).1.to_owned()).collect();
        for problem in &problems {
            text.push_str(&format!("Problem: {problem}\n"));
        }
        Ok(Output::text(text.trim_end().to_owned()).with_structured(json!({
            "chain": chain,
            "done": done,
            "total": total,
            "tasks": statuses,
            "locks": locks.iter().map(|lock| json!({"pattern": lock.pattern, "owner": lock.owner, "session": lock.session, "mode": lock.mode, "expires": lock.expires})).collect::<Vec<_>>(),
            "next": next.map(|task| task.task.to_string()),
            "problems": problems,
        })))
    }
}

fn line(task: &Found) -> String {
    match &task.file {
        Ok(file) => {
            let mut line = format!("{}  {}", task.task.task, file.title);
            if let Some(session) = file.field("Session") {
                line.push_str(&format!("  [session {session}]"));
            }
            if !file.is_impl() {
                line.push_str("  [control]");
            }
            line
        }
        Err(_) => format!("{}  (malformed)", task.task.task),
    }
}

fn entry(task: &Found) -> Value {
    json!({
        "task": task.task.to_string(),
        "title": task.file.as_ref().map(|file| file.title.clone()).ok(),
        "type": task.file.as_ref().ok().and_then(|file| file.field("Type").map(str::to_owned)),
        "session": task.file.as_ref().ok().and_then(|file| file.field("Session").map(str::to_owned)),
    })
}

/// The first implementation task ready to start, else the first in the backlog.
fn next_task(tasks: &[Found]) -> Option<&Found> {
    let waiting = |status: Status| tasks.iter().find(|task| task.status == status && task.file.as_ref().is_ok_and(|file| file.is_impl()));
    waiting(Status::Todo).or_else(|| waiting(Status::Backlog))
}

toolcell_sdk::export_tool!(ChainStatus);

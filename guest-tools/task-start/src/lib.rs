//! `task_start`: todo → in-progress, the task's chain as its owner, its paths locked for the chain.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain::{self, Status};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    task: String,
    locks: Option<Vec<String>>,
    ttl_seconds: Option<u32>,
}

struct Run;

impl Tool for Run {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "task_start",
            "Start task",
            "Start a task: move it from `todo` to `in-progress`, record its chain as owner, and lock the paths it will change (`locks`: paths or globs) for the chain, so that sessions of other chains cannot write them until `task_approve` or the lease ends. Then start its implementation session with `spawn_impl_session`.",
        )
        .schema(json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "The task, `CHAIN-ID/NNN-slug`."}, "locks": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 64, "description": "Paths or globs the task will change, locked for the chain."}, "ttl_seconds": {"type": "integer", "minimum": 1, "maximum": 86400, "description": "Lease of the locks; default 3600."}},
            "required": ["task"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"task": {"type": "string", "description": "CHAIN-ID/NNN-slug"}, "status": {"type": "string"}, "path": {"type": "string", "description": "The task file."}, "locks": {"type": "array", "items": {"type": "string"}}}, "required": ["task", "status", "path", "locks"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let task = chain::TaskRef::parse(&args.task)?;
        let (_, path) = chain::transition(&task, &[Status::Todo], Status::InProgress, |file, _| {
            file.set_field("Owner", &task.chain);
            file.set_field("Started", &chain::today());
            Ok(())
        })?;
        let locks = args.locks.unwrap_or_default();
        let mut text = format!("Started {task}: `{path}`, owner {}.", task.chain);
        let mut locked = Vec::new();
        if !locks.is_empty() {
            // After the move: if the locks are refused, the call fails and the host undoes the move.
            locked = toolcell_sdk::workflow::lock_for_task(&task.to_string(), &locks, args.ttl_seconds.unwrap_or(3600))?;
            text.push_str(&format!(
                " Locked for {}: {}.",
                task.chain,
                locked.iter().map(|lock| format!("`{}` until {}", lock.pattern, lock.expires)).collect::<Vec<_>>().join(", ")
            ));
        }
        text.push_str(" Next: `spawn_impl_session` to hand it to an implementation session.");
        Ok(Output::text(text).with_structured(json!({"task": task.to_string(), "status": "in-progress", "path": path, "locks": locked.iter().map(|lock| lock.pattern.clone()).collect::<Vec<_>>()})))
    }
}

toolcell_sdk::export_tool!(Run);

//! `task_block`: any status → blocked, with a reason; an implementation session blocks only its own task.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain::{self, Status};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    task: Option<String>,
    reason: String,
}

struct Run;

impl Tool for Run {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "task_block",
            "Block task",
            "Mark a task blocked with the reason (what it waits for): it moves to `blocked` and remembers where it was, so `task_unblock` can put it back. An implementation session blocks only its own task and may leave `task` out.",
        )
        .schema(json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "The task, `CHAIN-ID/NNN-slug`; default: your session's task."}, "reason": {"type": "string", "minLength": 1, "maxLength": 20000}},
            "required": ["reason"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"task": {"type": "string", "description": "CHAIN-ID/NNN-slug"}, "status": {"type": "string"}, "path": {"type": "string", "description": "The task file."}, "from": {"type": "string", "description": "The status it left."}}, "required": ["task", "status", "path", "from"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let task = chain::task_for_call(args.task.as_deref())?;
        let role = toolcell_sdk::role();
        let from = [Status::Backlog, Status::Todo, Status::InProgress, Status::InReview, Status::Done];
        let (left, path) = chain::transition(&task, &from, Status::Blocked, |file, status| {
            file.set_field("Blocked-from", status.as_str());
            file.append_section(&format!("Blocked ({}, by {role})", chain::today()), args.reason.trim());
            Ok(())
        })?;
        Ok(Output::text(format!("Blocked {task} (it was {}): `{path}`.", left.as_str()))
            .with_structured(json!({"task": task.to_string(), "status": "blocked", "from": left.as_str(), "path": path})))
    }
}

toolcell_sdk::export_tool!(Run);

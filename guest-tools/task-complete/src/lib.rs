//! `task_complete`: in-progress → in-review, the session's own task only, with a completion note.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain::{self, Status};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    note: String,
    criteria: Option<Vec<u32>>,
}

struct Run;

impl Tool for Run {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "task_complete",
            "Complete task",
            "Hand your task in for review: move it from `in-progress` to `in-review` with your completion note (what you changed, how you checked it, anything left open) appended to the task file, and optionally tick acceptance criteria by number (`task_status` numbers them). Only the task this session was started for; you cannot approve it yourself.",
        )
        .schema(json!({
            "type": "object",
            "properties": {"note": {"type": "string", "minLength": 1, "maxLength": 20000, "description": "What you did, how you verified it, what is left."}, "criteria": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 50, "description": "Numbers of the acceptance criteria you met."}},
            "required": ["note"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"task": {"type": "string", "description": "CHAIN-ID/NNN-slug"}, "status": {"type": "string"}, "path": {"type": "string", "description": "The task file."}}, "required": ["task", "status", "path"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let task = chain::bound_task()?;
        let session = toolcell_sdk::session_id();
        let (_, path) = chain::transition(&task, &[Status::InProgress], Status::InReview, |file, _| {
            file.check_criteria(&args.criteria.unwrap_or_default())?;
            file.append_section(&format!("Completion note ({}, session {session})", chain::today()), args.note.trim());
            Ok(())
        })?;
        Ok(Output::text(format!("Completed {task}: it is in review (`{path}`). The control agent approves it or asks for rework."))
            .with_structured(json!({"task": task.to_string(), "status": "in-review", "path": path})))
    }
}

toolcell_sdk::export_tool!(Run);

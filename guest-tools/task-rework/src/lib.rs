//! `task_rework`: in-review → in-progress, with the reviewer's reason appended.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain::{self, Status};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    task: String,
    reason: String,
}

struct Run;

impl Tool for Run {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "task_rework",
            "Request rework",
            "Send a reviewed task back: move it from `in-review` to `in-progress` with your reason appended to the task file; its implementation session reads it with `task_status` and completes it again.",
        )
        .schema(json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "The task, `CHAIN-ID/NNN-slug`."}, "reason": {"type": "string", "minLength": 1, "maxLength": 20000, "description": "What must change, concretely."}},
            "required": ["task", "reason"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"task": {"type": "string", "description": "CHAIN-ID/NNN-slug"}, "status": {"type": "string"}, "path": {"type": "string", "description": "The task file."}}, "required": ["task", "status", "path"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let task = chain::TaskRef::parse(&args.task)?;
        let (_, path) = chain::transition(&task, &[Status::InReview], Status::InProgress, |file, _| {
            file.append_section(&format!("Rework requested ({})", chain::today()), args.reason.trim());
            Ok(())
        })?;
        Ok(Output::text(format!("Sent {task} back for rework (`{path}`)."))
            .with_structured(json!({"task": task.to_string(), "status": "in-progress", "path": path})))
    }
}

toolcell_sdk::export_tool!(Run);

//! `task_ready`: backlog → todo.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain::{self, Status};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    task: String,
}

struct Run;

impl Tool for Run {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new("task_ready", "Ready task", "Mark a backlog task ready to start: move it from `backlog` to `todo`, where `task_start` can pick it up. Refused for a task in any other status.").schema(json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "The task, `CHAIN-ID/NNN-slug`."}},
            "required": ["task"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"task": {"type": "string", "description": "CHAIN-ID/NNN-slug"}, "status": {"type": "string"}, "path": {"type": "string", "description": "The task file."}}, "required": ["task", "status", "path"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let task = chain::TaskRef::parse(&args.task)?;
        let (_, path) = chain::transition(&task, &[Status::Backlog], Status::Todo, |_, _| Ok(()))?;
        Ok(Output::text(format!("{task} is ready to start (`{path}`)."))
            .with_structured(json!({"task": task.to_string(), "status": "todo", "path": path})))
    }
}

toolcell_sdk::export_tool!(Run);

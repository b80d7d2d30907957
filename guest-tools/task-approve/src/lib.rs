//! `task_approve`: in-review → done; the chain's locks for the task released.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain::{self, Status};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    task: String,
    note: Option<String>,
}

struct Run;

impl Tool for Run {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "task_approve",
            "Approve task",
            "Approve a reviewed task: move it from `in-review` to `done`, with an optional note, and release the locks taken for it. Review the change first (the session report, the diff, the acceptance criteria).",
        )
        .schema(json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "The task, `CHAIN-ID/NNN-slug`."}, "note": {"type": "string", "maxLength": 20000}},
            "required": ["task"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"task": {"type": "string", "description": "CHAIN-ID/NNN-slug"}, "status": {"type": "string"}, "path": {"type": "string", "description": "The task file."}, "released": {"type": "integer", "minimum": 0, "description": "Locks released."}}, "required": ["task", "status", "path", "released"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let task = chain::TaskRef::parse(&args.task)?;
        let (_, path) = chain::transition(&task, &[Status::InReview], Status::Done, |file, _| {
            file.set_field("Approved", &chain::today());
            if let Some(note) = args.note.as_deref().map(str::trim).filter(|note| !note.is_empty()) {
                file.append_section(&format!("Approved ({})", chain::today()), note);
            }
            Ok(())
        })?;
        let released = toolcell_sdk::workflow::release_task(&task.to_string())?;
        Ok(Output::text(format!("Approved {task}: done (`{path}`); {released} lock(s) released."))
            .with_structured(json!({"task": task.to_string(), "status": "done", "path": path, "released": released})))
    }
}

toolcell_sdk::export_tool!(Run);

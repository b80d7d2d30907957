//! `task_unblock`: blocked → the status it was blocked from.

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
            "task_unblock",
            "Unblock task",
            "Put a blocked task back where it was blocked from (`todo` if that is not recorded), with an optional note on what resolved it.",
        )
        .schema(json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "The task, `CHAIN-ID/NNN-slug`."}, "note": {"type": "string", "maxLength": 20000}},
            "required": ["task"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"task": {"type": "string", "description": "CHAIN-ID/NNN-slug"}, "status": {"type": "string"}, "path": {"type": "string", "description": "The task file."}}, "required": ["task", "status", "path"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let task = chain::TaskRef::parse(&args.task)?;
        let found = chain::find(&task)?;
        let back = found
            .checked()?
            .field("Blocked-from")
            .and_then(Status::from_name)
            .filter(|status| !matches!(status, Status::Blocked | Status::Done))
            .unwrap_or(Status::Todo);
        let (_, path) = chain::transition(&task, &[Status::Blocked], back, |file, _| {
            file.remove_field("Blocked-from");
            if let Some(note) = args.note.as_deref().map(str::trim).filter(|note| !note.is_empty()) {
                file.append_section(&format!("Unblocked ({})", chain::today()), note);
            }
            Ok(())
        })?;
        Ok(Output::text(format!("Unblocked {task}: back in {} (`{path}`).", back.as_str()))
            .with_structured(json!({"task": task.to_string(), "status": back.as_str(), "path": path})))
    }
}

toolcell_sdk::export_tool!(Run);

//! `task_status`: the implementation session's own task, whole, and its acceptance criteria.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {}

struct TaskStatus;

impl Tool for TaskStatus {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "task_status",
            "My task",
            "Show the task this session was started for: its status, the whole task file \
             (objective, notes, review feedback) and its numbered acceptance criteria. Read it \
             before you start, and again after a rework request.",
        )
        .schema(json!({"type": "object", "properties": {}, "additionalProperties": false}))
        .read_only()
        .output(json!({"type": "object", "properties": {"task": {"type": "string"}, "status": {"type": "string"}, "path": {"type": "string"}, "title": {"type": "string"}, "criteria": {"type": "array", "items": {"type": "object", "properties": {"done": {"type": "boolean"}, "text": {"type": "string"}}, "required": ["done", "text"]}}, "content": {"type": "string"}}, "required": ["task", "status", "path", "title", "criteria", "content"]}))
    }

    fn call(_args: Args) -> Result<Output, ToolError> {
        let task = chain::bound_task()?;
        let found = chain::find(&task)?;
        let file = found.checked()?;
        let criteria = file.criteria();
        let mut text = format!("Task {task} is {} (`{}`).\n\n{}", found.status.as_str(), found.path(), file.render());
        text.push_str("\nAcceptance criteria:\n");
        for (index, (done, criterion)) in criteria.iter().enumerate() {
            text.push_str(&format!("  {}. [{}] {criterion}\n", index + 1, if *done { "x" } else { " " }));
        }
        Ok(Output::text(text.trim_end().to_owned()).with_structured(json!({
            "task": task.to_string(),
            "status": found.status.as_str(),
            "path": found.path(),
            "title": file.title,
            "criteria": criteria.iter().map(|(done, text)| json!({"done": done, "text": text})).collect::<Vec<_>>(),
            "content": file.render(),
        })))
    }
}

toolcell_sdk::export_tool!(TaskStatus);

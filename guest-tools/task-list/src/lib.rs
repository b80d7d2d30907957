//! `task_list`: a chain's tasks with their status.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain::{self, Status};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    chain: String,
    status: Option<String>,
}

struct TaskList;

impl Tool for TaskList {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "task_list",
            "List tasks",
            "List a chain's tasks in number order, each with its status, type and title; optionally only those in one status.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "chain": {"type": "string", "description": "The chain id."},
                "status": {"type": "string", "enum": ["backlog", "todo", "in-progress", "in-review", "done", "blocked"]}
            },
            "required": ["chain"],
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"chain": {"type": "string"}, "tasks": {"type": "array", "items": {"type": "object", "properties": {"task": {"type": "string"}, "status": {"type": "string"}, "type": {"type": ["string", "null"]}, "title": {"type": ["string", "null"]}, "path": {"type": "string"}}, "required": ["task", "status", "path"]}}}, "required": ["chain", "tasks"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let chain = chain::chain_id(&args.chain)?;
        let only = args.status.as_deref().and_then(Status::from_name);
        let tasks = chain::tasks_of(&chain)?;
        if tasks.is_empty() {
            return Err(ToolError::NotFound(format!("there is no chain `{chain}`; `chain_list` lists the chains")));
        }
        let mut text = String::new();
        let mut listed = Vec::new();
        for found in tasks.iter().filter(|found| only.is_none_or(|status| found.status == status)) {
            let (kind, title) = match found.checked() {
                Ok(file) => (file.field("Type").unwrap_or("?").to_owned(), file.title.clone()),
                Err(error) => ("?".to_owned(), format!("(problem: {})", toolcell_sdk::error_parts(&error).1)),
            };
            text.push_str(&format!("{:<12} {:<8} {}  {title}\n", found.status.as_str(), kind, found.task.task));
            listed.push(json!({"task": found.task.to_string(), "status": found.status.as_str(), "type": kind, "title": title, "path": found.path()}));
        }
        if listed.is_empty() {
            text.push_str("No tasks in that status.");
        }
        Ok(Output::text(text.trim_end().to_owned()).with_structured(json!({"chain": chain, "tasks": listed})))
    }
}

toolcell_sdk::export_tool!(TaskList);

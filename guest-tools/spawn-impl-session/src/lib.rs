//! `spawn_impl_session`: start an implementation session for one in-progress task (a host capability).

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
        ToolInfo::new(
            "spawn_impl_session",
            "Spawn implementation session",
            "Start a fresh implementation session for one task in `in-progress`: the host creates it (role impl, bound to the task, writing for the task's chain, this session as its parent) and returns its id and how its agent connects, with the task text to hand over. The session id is recorded in the task file. Only the host can bind a session to a task.",
        )
        .schema(json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "The task, `CHAIN-ID/NNN-slug`."}},
            "required": ["task"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"task": {"type": "string"}, "session_id": {"type": "string"}, "connect": {"type": "string", "description": "How to start the session."}}, "required": ["task", "session_id", "connect"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let task = chain::TaskRef::parse(&args.task)?;
        let found = chain::find(&task)?;
        if found.status != Status::InProgress {
            return Err(ToolError::Conflict(format!(
                "the task `{task}` is in `{}`: start it with `task_start` first (a session works on an in-progress task)",
                found.status.as_str()
            )));
        }
        let mut file = found.checked()?.clone();
        let handoff = toolcell_sdk::workflow::spawn_session("impl", &task.to_string())?;
        file.set_field("Session", &handoff.session_id);
        chain::rewrite(&found.path(), &file.render())?;
        let text = format!(
            "Spawned implementation session {} for {task}.\nConnect: {}\n\nHandoff for its agent:\nYou are the implementation agent for task {task}. Read it with `task_status`, do the work within the task's scope, and finish with `task_complete`.\n\n{}",
            handoff.session_id,
            handoff.connect,
            file.render()
        );
        Ok(Output::text(text)
            .with_structured(json!({"task": task.to_string(), "session_id": handoff.session_id, "connect": handoff.connect})))
    }
}

toolcell_sdk::export_tool!(Run);

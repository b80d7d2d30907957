//! `chain_list`: every task chain with its progress.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {}

struct ChainList;

impl Tool for ChainList {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "chain_list",
            "List chains",
            "List every task chain under `docs/tasks/` with its progress (implementation tasks done of all) and how many tasks are in each status.",
        )
        .schema(json!({"type": "object", "properties": {}, "additionalProperties": false}))
        .read_only()
        .output(json!({"type": "object", "properties": {"chains": {"type": "array", "items": {"type": "object", "properties": {"chain": {"type": "string"}, "done": {"type": "integer", "minimum": 0}, "total": {"type": "integer", "minimum": 0}, "statuses": {"type": "object"}}, "required": ["chain", "done", "total"]}}}, "required": ["chains"]}))
    }

    fn call(_args: Args) -> Result<Output, ToolError> {
        let mut text = String::new();
        let mut listed = Vec::new();
        for chain in chain::chains()? {
            let tasks = chain::tasks_of(&chain)?;
            let (done, total) = chain::progress(&tasks);
            let counts: Vec<(String, usize)> =
                chain::by_status(&tasks).into_iter().map(|(status, found)| (status.as_str().to_owned(), found.len())).collect();
            let shown = counts.iter().map(|(status, count)| format!("{status} {count}")).collect::<Vec<_>>().join(", ");
            text.push_str(&format!("{chain}: {done}/{total} done ({shown})\n"));
            listed.push(json!({"chain": chain, "done": done, "total": total, "statuses": counts.into_iter().map(|(status, count)| (status, json!(count))).collect::<serde_json::Map<_, _>>()}));
        }
        if listed.is_empty() {
            text.push_str("No chains yet: `chain_new` creates one.");
        }
        Ok(Output::text(text.trim_end().to_owned()).with_structured(json!({"chains": listed})))
    }
}

toolcell_sdk::export_tool!(ChainList);

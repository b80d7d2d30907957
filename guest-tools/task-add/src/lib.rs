//! `task_add`: add a task to a chain, in the backlog or ready to start.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain::{self, Status, TaskFile};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    chain: String,
    title: String,
    objective: String,
    criteria: Vec<String>,
    status: Option<String>,
    r#type: Option<String>,
    slug: Option<String>,
}

struct TaskAdd;

impl Tool for TaskAdd {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "task_add",
            "Add task",
            "Add a task to a chain with a title, an objective and acceptance criteria. It gets the \
             next number (`NNN-slug`) and goes to `todo` (ready to start) or `backlog`. One task is \
             one implementation session's work: keep it small enough to complete and review at once.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "chain": {"type": "string", "description": "The chain id, e.g. `CHAIN-039-file-operations`."},
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "objective": {"type": "string", "minLength": 1, "maxLength": 20000, "description": "What the task achieves and where."},
                "criteria": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 2000}, "minItems": 1, "maxItems": 50, "description": "Acceptance criteria, one per item."},
                "status": {"type": "string", "enum": ["todo", "backlog"], "description": "Default `todo`."},
                "type": {"type": "string", "enum": ["impl", "control"], "description": "Default `impl`."},
                "slug": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": 60, "description": "Default: from the title."}
            },
            "required": ["chain", "title", "objective", "criteria"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"task": {"type": "string", "description": "CHAIN-ID/NNN-slug"}, "status": {"type": "string"}, "path": {"type": "string", "description": "The task file."}}, "required": ["task", "status", "path"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let chain = chain::chain_id(&args.chain)?;
        let tasks = chain::tasks_of(&chain)?;
        if tasks.is_empty() {
            return Err(ToolError::NotFound(format!("there is no chain `{chain}`; create it with `chain_new`, or see `chain_list`")));
        }
        let title = args.title.trim();
        if title.contains('\n') || title.chars().any(char::is_control) {
            return Err(ToolError::InvalidArgs("the title must be one line of text without control characters".to_owned()));
        }
        if let Some(bad) = args.criteria.iter().find(|criterion| criterion.contains('\n')) {
            return Err(ToolError::InvalidArgs(format!(
                "each criterion is one line; this one has several: {:?}",
                bad.chars().take(60).collect::<String>()
            )));
        }
        let status = match args.status.as_deref() {
            Some("backlog") => Status::Backlog,
            _ => Status::Todo,
        };
        let number = tasks.iter().map(|found| found.task.number()).max().unwrap_or(0) + 1;
        let slug = args.slug.unwrap_or_else(|| chain::slug_of(title));
        let task = format!("{number:03}-{slug}");
        let cr = tasks
            .iter()
            .find_map(|found| found.file.as_ref().ok().and_then(|file| file.field("CR").map(str::to_owned)))
            .unwrap_or_else(|| "-".to_owned());
        let criteria: String = args.criteria.iter().map(|criterion| format!("- [ ] {}\n", criterion.trim())).collect();
        let file = TaskFile {
            title: title.to_owned(),
            fields: vec![
                ("Chain".to_owned(), chain.clone()),
                ("Task".to_owned(), task.clone()),
                ("Status".to_owned(), status.as_str().to_owned()),
                ("Type".to_owned(), args.r#type.unwrap_or_else(|| "impl".to_owned())),
                ("Created".to_owned(), chain::today()),
                ("CR".to_owned(), cr),
            ],
            body: format!("## Objective\n\n{}\n\n## Acceptance criteria\n\n{criteria}", args.objective.trim()),
        };
        let directory = format!("{}/{chain}", status.directory());
        let shown = toolcell_sdk::WorkspacePath::parse(&directory)?;
        std::fs::create_dir_all(&directory).map_err(|error| shown.io_error(error))?;
        let path = format!("{directory}/{task}.md");
        chain::write_new(&path, &file.render())?;
        Ok(Output::text(format!("Added {chain}/{task} to {} (`{path}`).", status.as_str()))
            .with_structured(json!({"task": format!("{chain}/{task}"), "status": status.as_str(), "path": path})))
    }
}

toolcell_sdk::export_tool!(TaskAdd);

//! `chain_new`: create a task chain from a change request id and a slug.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::chain::{self, Status, TaskFile};
use toolcell_sdk::path::quote;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    cr: String,
    slug: String,
    title: String,
    goal: Option<String>,
}

struct ChainNew;

impl Tool for ChainNew {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "chain_new",
            "New chain",
            "Create a task chain for a change request: its id is `CHAIN-<the CR's number>-<slug>` \
             (CR `CR-039` and slug `file-operations` give `CHAIN-039-file-operations`), and its \
             charter (`000-charter`, a control task holding the title and goal) goes to the backlog. \
             Add its tasks with `task_add`.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "cr": {"type": "string", "minLength": 1, "maxLength": 40, "description": "The change request id, e.g. `CR-039`."},
                "slug": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": 60, "description": "Lowercase words joined by `-`, e.g. `file-operations`."},
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "goal": {"type": "string", "maxLength": 20000, "description": "What the chain achieves, for the charter."}
            },
            "required": ["cr", "slug", "title"],
            "additionalProperties": false
        }))
        .output(json!({"type": "object", "properties": {"chain": {"type": "string"}, "charter": {"type": "string", "description": "The charter file."}}, "required": ["chain", "charter"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let number: String = args.cr.chars().filter(char::is_ascii_digit).collect();
        if number.is_empty() || number.len() > 12 {
            return Err(ToolError::InvalidArgs(format!(
                "the CR id {} has no number (or too long a one): give it as `CR-039`",
                quote(&args.cr)
            )));
        }
        let title = args.title.trim();
        if title.contains('\n') || title.chars().any(char::is_control) {
            return Err(ToolError::InvalidArgs("the title must be one line of text without control characters".to_owned()));
        }
        let chain = chain::chain_id(&format!("CHAIN-{number}-{}", args.slug))?;
        if !chain::tasks_of(&chain)?.is_empty() || chain::chains()?.contains(&chain) {
            return Err(ToolError::Conflict(format!(
                "the chain `{chain}` exists already; `chain_status` shows it, or choose another slug"
            )));
        }
        let cr = args.cr.trim().to_owned();
        let charter = TaskFile {
            title: title.to_owned(),
            fields: vec![
                ("Chain".to_owned(), chain.clone()),
                ("Task".to_owned(), "000-charter".to_owned()),
                ("Status".to_owned(), Status::Backlog.as_str().to_owned()),
                ("Type".to_owned(), "control".to_owned()),
                ("Created".to_owned(), chain::today()),
                ("CR".to_owned(), cr.clone()),
            ],
            body: format!("## Goal\n\n{}\n", args.goal.as_deref().map(str::trim).filter(|goal| !goal.is_empty()).unwrap_or(title)),
        };
        let directory = format!("{}/{chain}", Status::Backlog.directory());
        let shown = toolcell_sdk::WorkspacePath::parse(&directory)?;
        std::fs::create_dir_all(&directory).map_err(|error| shown.io_error(error))?;
        let path = format!("{directory}/000-charter.md");
        chain::write_new(&path, &charter.render())?;
        toolcell_sdk::note(&format!("created chain {chain} for {cr}"));
        Ok(Output::text(format!("Created chain {chain} for {cr}; its charter is `{path}`. Add tasks with `task_add`."))
            .with_structured(json!({"chain": chain, "charter": path})))
    }
}

toolcell_sdk::export_tool!(ChainNew);

//! `create_directory`: `mkdir -p`, quiet if the directory already exists.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::quote;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
}

struct CreateDirectory;

impl Tool for CreateDirectory {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "create_directory",
            "Create directory",
            "Create a directory and any missing parents (like `mkdir -p`). Succeeds quietly if \
             the directory already exists; fails if a file is in the way. Not needed before \
             write_file, which creates parents itself. The structured result is `{path, \
             created}`. Paths are relative to the workspace root.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The directory to create, relative to the workspace root."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .idempotent()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "created": {"type": "boolean", "description": "False if it existed already."}}, "required": ["path", "created"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        path.check_new_name()?;
        let created = match std::fs::metadata(path.as_str()) {
            Ok(metadata) if metadata.is_dir() => false,
            Ok(_) => {
                return Err(ToolError::Conflict(format!(
                    "{} exists and is not a directory: choose another path, or move the file away first",
                    quote(path.as_str())
                )));
            }
            Err(error) if matches!(error.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
                // The first ancestor that is not a directory gets the blame.
                let mut ancestor = path.parent();
                while let Some(parent) = ancestor.filter(|parent| !parent.is_root()) {
                    if let Ok(metadata) = std::fs::metadata(parent.as_str()) {
                        if !metadata.is_dir() {
                            return Err(ToolError::Conflict(format!(
                                "{} is a file, so {} cannot be created under it",
                                quote(parent.as_str()),
                                quote(path.as_str())
                            )));
                        }
                        break;
                    }
                    ancestor = parent.parent();
                }
                std::fs::create_dir_all(path.as_str()).map_err(|error| path.io_error(error))?;
                true
            }
            Err(error) => return Err(path.io_error(error)),
        };
        let text = if created {
            format!("Created the directory {}.", quote(path.as_str()))
        } else {
            format!("The directory {} already exists; nothing to do.", quote(path.as_str()))
        };
        Ok(Output::text(text).with_structured(json!({"path": path.as_str(), "created": created})))
    }
}

toolcell_sdk::export_tool!(CreateDirectory);

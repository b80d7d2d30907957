//! `move_file`: rename or move a file, a directory or a symlink inside the workspace.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::quote;
use toolcell_sdk::walk;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    source: String,
    destination: String,
    #[serde(default)]
    overwrite: bool,
}

struct MoveFile;

impl Tool for MoveFile {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "move_file",
            "Move or rename",
            "Move or rename a file, directory or symlink: `source` becomes `destination` (the new \
             path itself, not a directory to move into). Missing parent directories of the \
             destination are created. An existing destination is refused unless `overwrite: \
             true`, which replaces a file (never a directory). A symlink is moved as a link; its \
             target is not touched. Use this instead of reading, writing and deleting: it keeps \
             the content byte for byte. The policy must allow deleting the source and writing \
             the destination (and everything under a moved directory). The structured result is \
             `{source, destination, kind, overwritten}`. Paths are relative to the workspace root.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "source": {
                    "type": "string",
                    "description": "The path to move, relative to the workspace root."
                },
                "destination": {
                    "type": "string",
                    "description": "Its new path, relative to the workspace root."
                },
                "overwrite": {
                    "type": "boolean",
                    "description": "Replace an existing file at the destination. Default: false."
                }
            },
            "required": ["source", "destination"],
            "additionalProperties": false
        }))
        .destructive()
        .output(json!({"type": "object", "properties": {"source": {"type": "string"}, "destination": {"type": "string"}, "kind": {"type": "string"}, "overwritten": {"type": "boolean"}}, "required": ["source", "destination", "kind", "overwritten"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let source = WorkspacePath::parse(&args.source)?;
        let destination = WorkspacePath::parse(&args.destination)?;
        destination.check_new_name()?;
        if source.is_root() || destination.is_root() {
            return Err(ToolError::InvalidArgs(
                "`.` is the workspace root, which cannot be moved or replaced: give the paths of entries inside it".to_owned(),
            ));
        }
        if source == destination {
            return Err(ToolError::InvalidArgs(format!(
                "{} is both the source and the destination: give a different destination",
                quote(source.as_str())
            )));
        }
        if destination.strip_prefix(&source).is_some() {
            return Err(ToolError::InvalidArgs(format!(
                "{} is inside {}: a directory cannot be moved into itself",
                quote(destination.as_str()),
                quote(source.as_str())
            )));
        }
        let metadata = std::fs::symlink_metadata(source.as_str()).map_err(|error| source.io_error(error))?;
        let kind = walk::EntryKind::of(&metadata.file_type()).as_str();
        let overwritten = match std::fs::symlink_metadata(destination.as_str()) {
            Ok(existing) if existing.is_dir() => {
                return Err(ToolError::Conflict(format!(
                    "{} is an existing directory: move_file never replaces a directory; to move {} into it, give the full new path (for example {})",
                    quote(destination.as_str()),
                    quote(source.as_str()),
                    quote(destination.join(source.as_str().rsplit('/').next().unwrap_or(source.as_str())).as_str())
                )));
            }
            Ok(_) if !args.overwrite => {
                return Err(ToolError::Conflict(format!(
                    "{} already exists: set `overwrite: true` to replace it, or choose another destination",
                    quote(destination.as_str())
                )));
            }
            Ok(_) if metadata.is_dir() => {
                return Err(ToolError::Conflict(format!(
                    "{} is a directory and {} is a file: a directory cannot replace a file; delete the file first",
                    quote(source.as_str()),
                    quote(destination.as_str())
                )));
            }
            Ok(_) => true,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
            Err(error) => return Err(destination.io_error(error)),
        };
        if let Some(parent) = destination.parent().filter(|parent| !parent.is_root()) {
            std::fs::create_dir_all(parent.as_str()).map_err(|error| parent.io_error(error))?;
        }
        std::fs::rename(source.as_str(), destination.as_str()).map_err(|error| destination.io_error(error))?;
        let text = format!(
            "Moved {} {} to {}{}.",
            kind,
            quote(source.as_str()),
            quote(destination.as_str()),
            if overwritten { ", replacing the file that was there" } else { "" }
        );
        Ok(Output::text(text).with_structured(json!({
            "source": source.as_str(),
            "destination": destination.as_str(),
            "kind": kind,
            "overwritten": overwritten,
        })))
    }
}

toolcell_sdk::export_tool!(MoveFile);

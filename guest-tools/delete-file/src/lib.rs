//! `delete_file`: remove a file or symlink, or a directory tree with `recursive`.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::quote;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    #[serde(default)]
    recursive: bool,
}

struct DeleteFile;

impl Tool for DeleteFile {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "delete_file",
            "Delete",
            "Delete a file or a symlink (the link, never its target). A directory is deleted only \
             with `recursive: true`, together with everything in it; if anything inside cannot be \
             deleted (the policy protects it, or it is hidden from your role), nothing is \
             deleted. The change can be undone with undo_edit, one file at a time. The policy must \
             allow deleting every path involved. The structured result is `{path, kind, files, \
             directories}`. Paths are relative to the workspace root.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The file, symlink or directory to delete, relative to the workspace root."
                },
                "recursive": {
                    "type": "boolean",
                    "description": "Required to delete a directory: deletes it and everything in it. Default: false."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .destructive()
        .idempotent()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "kind": {"type": "string"}, "files": {"type": "integer", "minimum": 0}, "directories": {"type": "integer", "minimum": 0}}, "required": ["path", "kind", "files", "directories"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        if path.is_root() {
            return Err(ToolError::InvalidArgs(
                "`.` is the workspace root, which cannot be deleted: give the path of an entry inside it".to_owned(),
            ));
        }
        let metadata = std::fs::symlink_metadata(path.as_str()).map_err(|error| path.io_error(error))?;
        let mut counts = Counts::default();
        let kind = if metadata.is_dir() {
            if !args.recursive {
                let entries = std::fs::read_dir(path.as_str()).map(Iterator::count).unwrap_or(0);
                return Err(ToolError::InvalidArgs(format!(
                    "{} is a directory ({entries} visible entries): set `recursive: true` to delete it with everything in it",
                    quote(path.as_str())
                )));
            }
            remove_tree(&path, &mut counts)?;
            "directory"
        } else {
            std::fs::remove_file(path.as_str()).map_err(|error| path.io_error(error))?;
            counts.files += 1;
            if metadata.file_type().is_symlink() { "symlink" } else { "file" }
        };
        let text = if kind == "directory" {
            format!(
                "Deleted the directory {} ({} and {} in all).",
                quote(path.as_str()),
                toolcell_sdk::text::counted(counts.files, "file", "files"),
                toolcell_sdk::text::counted(counts.directories, "directory", "directories")
            )
        } else {
            format!("Deleted the {kind} {}.", quote(path.as_str()))
        };
        Ok(Output::text(text).with_structured(json!({
            "path": path.as_str(),
            "kind": kind,
            "files": counts.files,
            "directories": counts.directories,
        })))
    }
}

#[derive(Default)]
struct Counts {
    files: u64,
    directories: u64,
}

/// Delete `directory` and everything in it, depth first. Symlinks are removed, not followed.
fn remove_tree(directory: &WorkspacePath, counts: &mut Counts) -> Result<(), ToolError> {
    let entries = std::fs::read_dir(directory.as_str()).map_err(|error| directory.io_error(error))?;
    for entry in entries {
        let entry = entry.map_err(|error| directory.io_error(error))?;
        let child = directory.join(&entry.file_name().to_string_lossy());
        let file_type = entry.file_type().map_err(|error| child.io_error(error))?;
        if file_type.is_dir() {
            remove_tree(&child, counts)?;
        } else {
            std::fs::remove_file(child.as_str()).map_err(|error| child.io_error(error))?;
            counts.files += 1;
        }
    }
    std::fs::remove_dir(directory.as_str()).map_err(|error| match error.kind() {
        std::io::ErrorKind::DirectoryNotEmpty => ToolError::Denied(format!(
            "{} still holds entries your role cannot see, so it cannot be deleted; nothing was deleted",
            quote(directory.as_str())
        )),
        _ => directory.io_error(error),
    })?;
    counts.directories += 1;
    Ok(())
}

toolcell_sdk::export_tool!(DeleteFile);

//! `write_file`: create a file or replace its whole content.

use std::io::Write;

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::quote;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    content: String,
    #[serde(default)]
    create_only: bool,
}

struct WriteFile;

impl Tool for WriteFile {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "write_file",
            "Write file",
            "Create a file, or replace the whole content of an existing one, with `content` \
             (UTF-8 text, written exactly as given). Missing parent directories are created. To \
             change part of an existing file, prefer edit_file: it is safer and shows what \
             changed. Read a file before replacing it. With `create_only: true` the call fails \
             instead of replacing an existing file. The structured result is `{path, action: \
             created|modified, bytes}`. A replaced file keeps its permissions. Paths are \
             relative to the workspace root.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The file to write, relative to the workspace root."
                },
                "content": {
                    "type": "string",
                    "description": "The complete new content of the file."
                },
                "create_only": {
                    "type": "boolean",
                    "description": "Fail if the file already exists, instead of replacing it. Default: false."
                }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }))
        .destructive()
        .idempotent()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "action": {"type": "string", "description": "created or overwritten."}, "bytes": {"type": "integer", "minimum": 0}}, "required": ["path", "action", "bytes"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        if path.is_root() {
            return Err(ToolError::InvalidArgs("`.` is the workspace root, a directory: give the path of a file to write".to_owned()));
        }
        let existed = match std::fs::metadata(path.as_str()) {
            Ok(metadata) if metadata.is_dir() => {
                return Err(ToolError::Unsupported(format!("{} is a directory: give the path of a file inside it", quote(path.as_str()))));
            }
            Ok(metadata) if !metadata.is_file() => {
                return Err(ToolError::Unsupported(format!(
                    "{} is not a regular file (it is a FIFO, socket or device): write_file only writes regular files",
                    quote(path.as_str())
                )));
            }
            Ok(_) => true,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                path.check_new_name()?;
                false
            }
            Err(error) => return Err(path.io_error(error)),
        };
        if existed && args.create_only {
            return Err(ToolError::Conflict(format!(
                "{} already exists and `create_only` is set: read it and use edit_file to change it, or call write_file without `create_only` to replace it",
                quote(path.as_str())
            )));
        }
        if let Some(parent) = path.parent().filter(|parent| !parent.is_root()) {
            std::fs::create_dir_all(parent.as_str()).map_err(|error| parent.io_error(error))?;
        }
        if args.create_only {
            // `create_new` makes the existence check and the creation one step, so a file that
            // appeared since the check above is not replaced.
            let mut file =
                std::fs::OpenOptions::new().write(true).create_new(true).open(path.as_str()).map_err(|error| path.io_error(error))?;
            file.write_all(args.content.as_bytes()).map_err(|error| path.io_error(error))?;
        } else {
            // Writing in place (truncate, then write) keeps the file's mode and owner.
            std::fs::write(path.as_str(), args.content.as_bytes()).map_err(|error| path.io_error(error))?;
        }
        let bytes = args.content.len();
        let (action, text) = if existed {
            ("modified", format!("Replaced the content of {} ({bytes} bytes).", quote(path.as_str())))
        } else {
            ("created", format!("Created {} ({bytes} bytes).", quote(path.as_str())))
        };
        Ok(Output::text(text).with_structured(json!({
            "path": path.as_str(),
            "action": action,
            "bytes": bytes,
        })))
    }
}

toolcell_sdk::export_tool!(WriteFile);

//! `word_count`: count the lines, words and bytes of a workspace file, like `wc`.
//!
//! An example of a third-party toolcell tool: a struct, serde arguments, a `call` method.
//! Everything it touches goes through `std::fs` on a workspace-relative path; the host checks
//! each filesystem call against the caller's policy, so the tool needs no checks of its own
//! beyond giving agents good messages.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

/// Files larger than this are refused rather than read whole.
const MAX_BYTES: u64 = 64 << 20;

#[derive(Deserialize)]
struct Args {
    path: String,
}

struct WordCount;

impl Tool for WordCount {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "word_count",
            "Word count",
            "Count the lines, words and bytes of one file in the workspace, like `wc`. Use it to size a file before reading it.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file, relative to the workspace root (for example `src/main.rs`)."}
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .output(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "lines": {"type": "integer", "minimum": 0},
                "words": {"type": "integer", "minimum": 0},
                "bytes": {"type": "integer", "minimum": 0}
            },
            "required": ["path", "lines", "words", "bytes"]
        }))
        .read_only()
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        let metadata = std::fs::metadata(path.as_str()).map_err(|error| path.io_error(error))?;
        if metadata.is_dir() {
            return Err(ToolError::InvalidArgs(format!(
                "`{}` is a directory; give a file (list_files shows what is in it)",
                path.as_str()
            )));
        }
        if metadata.len() > MAX_BYTES {
            return Err(ToolError::TooLarge(format!(
                "`{}` has {} bytes, more than the {} MiB this tool counts; count a smaller file",
                path.as_str(),
                metadata.len(),
                MAX_BYTES >> 20
            )));
        }
        let bytes = std::fs::read(path.as_str()).map_err(|error| path.io_error(error))?;
        let lines = bytes.iter().filter(|byte| **byte == b'\n').count();
        let words = bytes.split(|byte| byte.is_ascii_whitespace()).filter(|word| !word.is_empty()).count();
        Ok(Output::text(format!("{lines} lines, {words} words, {} bytes in `{}`", bytes.len(), path.as_str())).with_structured(json!({
            "path": path.as_str(),
            "lines": lines,
            "words": words,
            "bytes": bytes.len(),
        })))
    }
}

toolcell_sdk::export_tool!(WordCount);

//! `read_file`: a window of a text file as numbered lines.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::read;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

/// The text returned stops growing past this size, whatever `limit` says.
const MAX_OUTPUT_BYTES: usize = 256 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
    tail: Option<u64>,
}

struct ReadFile;

impl Tool for ReadFile {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "read_file",
            "Read file",
            "Read a text file from the workspace. Returns the lines prefixed with their 1-based line \
             numbers (`cat -n` style: number, tab, text), so you can cite them and build exact \
             `old_string`s for edit_file (never include the number prefix in an edit). By default \
             returns up to 2000 lines from the start; for long files pass `offset` (first line to \
             read, 1-based) and `limit` (how many lines). Lines longer than 2000 characters are cut \
             with a marker. `tail: N` reads the last N lines instead (for logs). The structured \
             result gives `total_lines` and `truncated`. Refuses \
             binary files, directories (use list_files) and special files. Paths are relative to \
             the workspace root.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The file to read, relative to the workspace root (for example `src/main.rs`)."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The 1-based line number to start reading at. Default: 1."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "How many lines to return. Default: 2000."
                },
                "tail": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Read the last `tail` lines instead (for logs); not with `offset` or `limit`."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "start_line": {"type": "integer", "minimum": 0, "description": "First line returned (0 for an empty file)."}, "end_line": {"type": "integer", "minimum": 0, "description": "Last line returned."}, "total_lines": {"type": "integer", "minimum": 0}, "truncated": {"type": "boolean", "description": "More lines follow than were returned."}, "clipped_lines": {"type": "integer", "minimum": 0, "description": "Lines cut at 2000 characters."}, "next_offset": {"type": "integer", "minimum": 0, "description": "The `offset` that reads on, when more lines follow."}}, "required": ["path", "start_line", "end_line", "total_lines", "truncated", "clipped_lines"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        let Some(tail) = args.tail else {
            return read::read_lines(&path, args.offset, args.limit, MAX_OUTPUT_BYTES);
        };
        if args.offset.is_some() || args.limit.is_some() {
            return Err(ToolError::InvalidArgs(
                "`tail` reads the last lines by itself: give either `tail`, or `offset` and `limit`, not both".to_owned(),
            ));
        }
        let total = read::count_lines(&path)?;
        let offset = total.saturating_sub(tail).saturating_add(1);
        read::read_lines(&path, Some(offset), Some(tail), MAX_OUTPUT_BYTES)
    }
}

toolcell_sdk::export_tool!(ReadFile);

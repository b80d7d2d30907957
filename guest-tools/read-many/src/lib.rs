//! `read_many`: several text files in one call, each like `read_file`; one failure does not
//! stop the rest.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::shown;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath, read};

/// Files one call may name.
const MAX_PATHS: usize = 50;
/// The text of all files together stops growing past this size.
const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// No file gets less than this share of the output when several are read.
const MIN_FILE_BYTES: usize = 4 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    paths: Vec<String>,
    limit: Option<u64>,
}

struct ReadMany;

impl Tool for ReadMany {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "read_many",
            "Read several files",
            "Read several text files at once (up to 50), when you already know you need all of \
             them: faster than one read_file per file. Each file is shown under a `==> path <==` \
             header as numbered lines, exactly like read_file (from line 1, up to `limit` lines \
             each, default 2000); a file that cannot be read (missing, binary, refused) shows its \
             error and the others are still returned. The output is shared between the files \
             (256 KiB in all): for long files use read_file with `offset`. The structured result \
             lists each file with `ok`, `total_lines` and `truncated` (and `encoding` for one \
             not in UTF-8, shown decoded), or its `error`. Paths are \
             relative to the workspace root.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "paths": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "maxItems": MAX_PATHS,
                    "description": "The files to read, relative to the workspace root."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The most lines to return per file. Default: 2000."
                }
            },
            "required": ["paths"],
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"files": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "ok": {"type": "boolean"}, "start_line": {"type": "integer", "minimum": 0, "description": "First line returned (0 for an empty file)."}, "end_line": {"type": "integer", "minimum": 0, "description": "Last line returned."}, "total_lines": {"type": "integer", "minimum": 0}, "truncated": {"type": "boolean", "description": "More lines follow than were returned."}, "clipped_lines": {"type": "integer", "minimum": 0, "description": "Lines cut at 2000 characters."}, "next_offset": {"type": "integer", "minimum": 0, "description": "The `offset` that reads on, when more lines follow."}, "encoding": {"type": "string", "description": "The file's encoding when it is not UTF-8 (`utf-16le`, `windows-1252`, ...): the lines are shown decoded."}, "bom": {"type": "boolean", "description": "The file starts with a byte-order mark (not shown)."}, "undecodable_lines": {"type": "integer", "minimum": 0, "description": "Lines shown with bytes that are not valid UTF-8 replaced by U+FFFD."}, "error": {"type": "object", "properties": {"kind": {"type": "string"}, "message": {"type": "string"}}, "required": ["kind", "message"]}}, "required": ["path", "ok"]}}, "failed": {"type": "integer", "minimum": 0, "description": "Files that could not be read."}}, "required": ["files", "failed"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        if args.paths.is_empty() || args.paths.len() > MAX_PATHS {
            return Err(ToolError::InvalidArgs(format!("`paths` has {} entries: give between 1 and {MAX_PATHS}", args.paths.len())));
        }
        let share = (MAX_OUTPUT_BYTES / args.paths.len()).max(MIN_FILE_BYTES);
        let mut sections = Vec::with_capacity(args.paths.len());
        let mut files = Vec::with_capacity(args.paths.len());
        let mut failed = 0;
        for raw in &args.paths {
            let result =
                WorkspacePath::parse(raw).and_then(|path| read::read_lines(&path, None, args.limit, share).map(|output| (path, output)));
            match result {
                Ok((path, output)) => {
                    let (text, structured) = output.into_parts();
                    let mut entry = structured.unwrap_or_else(|| json!({}));
                    entry["path"] = json!(path.as_str());
                    entry["ok"] = json!(true);
                    files.push(entry);
                    sections.push(format!("==> {path} <==\n{text}"));
                }
                Err(error) => {
                    failed += 1;
                    let (kind, message) = toolcell_sdk::error_parts(&error);
                    files.push(json!({"path": shown(raw), "ok": false, "error": {"kind": kind, "message": message}}));
                    sections.push(format!("==> {} <==\nError ({kind}): {message}", shown(raw)));
                }
            }
        }
        let mut text = sections.join("\n\n");
        if failed > 0 {
            text.push_str(&format!("\n\n[{failed} of {} file(s) could not be read; the others are complete as shown]", args.paths.len()));
        }
        Ok(Output::text(text).with_structured(json!({"files": files, "failed": failed})))
    }
}

toolcell_sdk::export_tool!(ReadMany);

//! `read_file`: a window of a text file as numbered lines (or, with `raw`, of any file's bytes).

mod raw;

use serde::Deserialize;
use serde_json::json;

use toolcell_sdk::path::quote;
use toolcell_sdk::read;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

/// The text returned stops growing past this size, whatever `limit` says.
const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Larger images are refused: what one result may show (the host's limit, and the largest
/// image the providers' APIs take).
const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
    tail: Option<u64>,
    #[serde(default)]
    raw: bool,
    byte_offset: Option<u64>,
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
             result gives `total_lines` and `truncated`. A file not in UTF-8 (UTF-16, or a legacy \
             encoding such as windows-1252) is shown decoded, and the result names its \
             `encoding` (and `bom` for a byte-order mark); edit_file, insert_text and write_file \
             keep it. A PNG, JPEG, GIF or WebP image (up to 5 \
             MiB) is returned as an image you can see. Refuses other \
             binary files (unless `raw`), directories (use list_files) and special files. \
             `raw: true` returns a file's exact bytes instead, base64-encoded in the structured \
             result, 512 KiB at a time from `byte_offset`. Paths are relative to the workspace root.",
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
                },
                "raw": {
                    "type": "boolean",
                    "description": "Return the file's exact bytes, base64-encoded in the structured result (`base64`), for binary files or byte-exact copies; not with `offset`, `limit` or `tail`. Default: false."
                },
                "byte_offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "With `raw`: the first byte to return (0-based). Default: 0."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "image": {"type": "object", "description": "For an image: what it is (its bytes are shown as an image).", "properties": {"mime_type": {"type": "string"}, "bytes": {"type": "integer", "minimum": 0}, "width": {"type": "integer", "minimum": 0}, "height": {"type": "integer", "minimum": 0}}, "required": ["mime_type", "bytes"]}, "start_line": {"type": "integer", "minimum": 0, "description": "First line returned (0 for an empty file)."}, "end_line": {"type": "integer", "minimum": 0, "description": "Last line returned."}, "total_lines": {"type": "integer", "minimum": 0}, "truncated": {"type": "boolean", "description": "More lines follow than were returned."}, "clipped_lines": {"type": "integer", "minimum": 0, "description": "Lines cut at 2000 characters."}, "next_offset": {"type": "integer", "minimum": 0, "description": "The `offset` that reads on, when more lines follow."}, "encoding": {"type": "string", "description": "The file's encoding when it is not UTF-8 (`utf-16le`, `windows-1252`, ...): the lines are shown decoded."}, "bom": {"type": "boolean", "description": "The file starts with a byte-order mark (not shown)."}, "undecodable_lines": {"type": "integer", "minimum": 0, "description": "Lines shown with bytes that are not valid UTF-8 replaced by U+FFFD."}, "base64": {"type": "string", "description": "With `raw`: the bytes, base64-encoded."}, "byte_offset": {"type": "integer", "minimum": 0, "description": "With `raw`: the first byte returned."}, "bytes": {"type": "integer", "minimum": 0, "description": "With `raw`: how many bytes were returned."}, "total_bytes": {"type": "integer", "minimum": 0, "description": "With `raw`: the file's size."}, "next_byte_offset": {"type": "integer", "minimum": 0, "description": "With `raw`: the `byte_offset` that reads on, when more bytes follow."}}, "required": ["path"], "description": "A text file's window has the line fields (`start_line`, `end_line`, `total_lines`, `truncated`, `clipped_lines`); an image has `image`; a raw read has `base64`, `byte_offset`, `bytes` and `total_bytes`."}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        if args.raw {
            if args.offset.is_some() || args.limit.is_some() || args.tail.is_some() {
                return Err(ToolError::InvalidArgs(
                    "`raw` reads bytes, not lines: leave out `offset`, `limit` and `tail` (use `byte_offset`)".to_owned(),
                ));
            }
            return raw::read_raw(&path, args.byte_offset.unwrap_or(0));
        }
        if args.byte_offset.is_some() {
            return Err(ToolError::InvalidArgs("`byte_offset` is for `raw: true` reads; for lines, give `offset`".to_owned()));
        }
        // Opened once: its first bytes tell an image, and are the start of its text.
        let opened = read::OpenedFile::open(&path)?;
        if let Some(mime_type) = toolcell_sdk::image_type(opened.head()) {
            if args.offset.is_some() || args.limit.is_some() || args.tail.is_some() {
                return Err(ToolError::InvalidArgs(format!(
                    "{} is an image ({mime_type}), read whole: leave out `offset`, `limit` and `tail`",
                    quote(path.as_str())
                )));
            }
            return image(&path, mime_type);
        }
        let Some(tail) = args.tail else {
            return opened.read_lines(&path, args.offset, args.limit, MAX_OUTPUT_BYTES);
        };
        drop(opened);
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

/// The image at `path`, shown to the agent beside a line saying what it is.
fn image(path: &WorkspacePath, mime_type: &'static str) -> Result<Output, ToolError> {
    let size = std::fs::metadata(path.as_str()).map_err(|error| path.io_error(error))?.len();
    let kind = mime_type.trim_start_matches("image/").to_uppercase();
    if size > MAX_IMAGE_BYTES {
        return Err(ToolError::TooLarge(format!(
            "{} is a {kind} image of {}, over the {} MiB an image result may hold: use a smaller or scaled-down copy, or file_info for its size",
            quote(path.as_str()),
            human_size(size),
            MAX_IMAGE_BYTES >> 20
        )));
    }
    let data = std::fs::read(path.as_str()).map_err(|error| path.io_error(error))?;
    toolcell_sdk::attach_image(mime_type, &data)?;
    let mut structured = json!({"path": path.as_str(), "image": {"mime_type": mime_type, "bytes": data.len()}});
    let dimensions = match imagesize::blob_size(&data) {
        Ok(size) => {
            structured["image"]["width"] = json!(size.width);
            structured["image"]["height"] = json!(size.height);
            format!(", {}×{} pixels", size.width, size.height)
        }
        Err(_) => String::new(),
    };
    Ok(Output::text(format!("Image {}: {kind}{dimensions}, {} (shown as an image).", quote(path.as_str()), human_size(data.len() as u64)))
        .with_structured(structured))
}

fn human_size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

toolcell_sdk::export_tool!(ReadFile);

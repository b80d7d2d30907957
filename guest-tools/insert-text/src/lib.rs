//! `insert_text`: insert lines after a given line of a text file.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::quote;
use toolcell_sdk::text::{self, Document, SnippetStyle};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

/// How the inserted lines are shown: 3 lines of context.
const SNIPPETS: SnippetStyle = SnippetStyle { context_lines: 3, max_shown: 1, max_line_chars: 500 };

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    line: u64,
    text: String,
}

struct InsertText;

impl Tool for InsertText {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "insert_text",
            "Insert text",
            "Insert `text` into an existing text file after line `line` (1-based, as read_file \
             numbers them; 0 inserts at the top, the file's line count appends at the end). The \
             text is inserted as whole lines: a missing final newline is added. Use it to add \
             code or entries at a known place without repeating existing text; to change \
             existing text use edit_file. The file keeps its line endings (CRLF or LF), its \
             encoding (UTF-8, UTF-16 or a legacy one such as windows-1252), its byte-order mark \
             and its permissions; a character its encoding cannot hold is refused. Returns the inserted lines with 3 numbered \
             lines of context. Read the file first.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The file to insert into, relative to the workspace root."
                },
                "line": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Insert after this line (1-based); 0 inserts before the first line."
                },
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The lines to insert."
                }
            },
            "required": ["path", "line", "text"],
            "additionalProperties": false
        }))
        .destructive()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer", "minimum": 0, "description": "The line the text went after (0: at the top)."}, "inserted_lines": {"type": "integer", "minimum": 0}, "total_lines": {"type": "integer", "minimum": 0}, "encoding": {"type": "string", "description": "The file's encoding, kept, when it is not UTF-8."}, "bom": {"type": "boolean", "description": "The file starts with a byte-order mark, kept."}}, "required": ["path", "line", "inserted_lines", "total_lines"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        if args.text.is_empty() {
            return Err(ToolError::InvalidArgs("`text` is empty: give the lines to insert".to_owned()));
        }
        let metadata = toolcell_sdk::scan::stat(path.as_str()).map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => ToolError::NotFound(format!(
                "{} does not exist: insert_text only inserts into existing files; use write_file to create it",
                quote(path.as_str())
            )),
            _ => path.io_error(error),
        })?;
        if metadata.kind != toolcell_sdk::walk::EntryKind::File {
            return Err(ToolError::Unsupported(format!(
                "{} is not a regular file: insert_text only inserts into text files",
                quote(path.as_str())
            )));
        }
        let bytes = std::fs::read(path.as_str()).map_err(|error| path.io_error(error))?;
        let document = Document::decode(&bytes).map_err(|not_text| not_text.to_error(&path, "insert_text"))?;
        let inserted = insert(&document.body, args.line, &args.text.replace("\r\n", "\n")).map_err(|total| {
            ToolError::InvalidArgs(format!(
                "line {} is past the end of {}, which has {total} line(s): give a line from 0 (the top) to {total} (the end)",
                args.line,
                quote(path.as_str())
            ))
        })?;
        // A character the file's encoding cannot hold fails the call before anything is written.
        let rendered = document.render(&inserted.content).map_err(|unencodable| unencodable.to_error(&path))?;
        std::fs::write(path.as_str(), rendered).map_err(|error| path.io_error(error))?;

        let count = text::lines(&args.text).count();
        let snippet = text::snippets(&inserted.content, &[inserted.region], SNIPPETS);
        let where_ = if args.line == 0 { "at the top".to_owned() } else { format!("after line {}", args.line) };
        let kept = if document.encoding.is_utf8() { String::new() } else { format!(" (kept in {})", document.encoding.describe()) };
        let mut text = format!("Inserted {count} line(s) into {}{kept} {where_}.", quote(path.as_str()));
        for shown in &snippet.shown {
            text.push_str("\n\n");
            text.push_str(shown);
        }
        let total = text::lines(&inserted.content).count();
        let mut structured = json!({
            "path": path.as_str(),
            "line": args.line,
            "inserted_lines": count,
            "total_lines": total,
        });
        document.encoding.annotate(&mut structured);
        Ok(Output::text(text).with_structured(structured))
    }
}

struct Inserted {
    content: String,
    /// The byte range of the inserted text in `content`.
    region: (usize, usize),
}

/// `body` with `text` inserted as whole lines after line `line`; `Err(total lines)` if the
/// body has fewer lines.
fn insert(body: &str, line: u64, text: &str) -> Result<Inserted, usize> {
    let total = text::lines(body).count();
    if usize::try_from(line).map_or(true, |line| line > total) {
        return Err(total);
    }
    let line = usize::try_from(line).unwrap_or(total);
    // The byte offset after line `line`'s newline (or the end of an unterminated last line).
    let mut at = 0;
    for _ in 0..line {
        at = body[at..].find('\n').map_or(body.len(), |newline| at + newline + 1);
    }
    let mut insertion = String::with_capacity(text.len() + 2);
    let unterminated_end = at == body.len() && !body.is_empty() && !body.ends_with('\n');
    if unterminated_end {
        insertion.push('\n');
    }
    let start = at + insertion.len();
    insertion.push_str(text);
    if !text.ends_with('\n') && !unterminated_end {
        insertion.push('\n');
    }
    let end = start + text.len();
    let mut content = String::with_capacity(body.len() + insertion.len());
    content.push_str(&body[..at]);
    content.push_str(&insertion);
    content.push_str(&body[at..]);
    Ok(Inserted { content, region: (start, end) })
}

toolcell_sdk::export_tool!(InsertText);

#[cfg(test)]
mod tests {
    use super::*;

    fn inserted(body: &str, line: u64, text: &str) -> String {
        insert(body, line, text).map(|inserted| inserted.content).unwrap_or_else(|total| format!("past {total}"))
    }

    #[test]
    fn inserts_whole_lines() {
        assert_eq!(inserted("a\nb\n", 0, "x"), "x\na\nb\n");
        assert_eq!(inserted("a\nb\n", 1, "x\ny\n"), "a\nx\ny\nb\n");
        assert_eq!(inserted("a\nb\n", 2, "x"), "a\nb\nx\n");
        assert_eq!(inserted("a\nb", 2, "x"), "a\nb\nx");
        assert_eq!(inserted("", 0, "x"), "x\n");
        assert_eq!(inserted("a\nb\n", 3, "x"), "past 2");
    }

    #[test]
    fn region_covers_the_insertion() {
        let result = insert("a\nb", 2, "x").expect("in range");
        assert_eq!(&result.content[result.region.0..result.region.1], "x");
    }
}

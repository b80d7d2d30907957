//! `edit_file`: exact string replacement in a text file, one edit or several in order, all or
//! nothing.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::quote;
use toolcell_sdk::text::{self, Document, SnippetStyle, line_of};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

/// How edited regions are shown: 3 lines of context, at most 10 regions, lines cut at 500
/// characters.
const SNIPPETS: SnippetStyle = SnippetStyle { context_lines: 3, max_shown: 10, max_line_chars: 500 };

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Edit {
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    old_string: Option<String>,
    new_string: Option<String>,
    replace_all: Option<bool>,
    edits: Option<Vec<Edit>>,
    dry_run: Option<bool>,
}

/// Lines of context in the dry run's unified diff.
const DIFF_CONTEXT: usize = 3;

struct EditFile;

impl Tool for EditFile {
    type Args = Args;

    fn info() -> ToolInfo {
        let edit_properties = json!({
            "old_string": {
                "type": "string",
                "minLength": 1,
                "description": "The exact text to replace, including whitespace and indentation, as read_file shows it without the line-number prefix. It must match exactly one place unless replace_all is set."
            },
            "new_string": {
                "type": "string",
                "description": "The replacement text (may be empty, to delete old_string). Given with old_string, and only with it."
            },
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence of old_string instead of requiring exactly one. Default: false."
            }
        });
        let mut properties = edit_properties.clone();
        properties["path"] = json!({
            "type": "string",
            "description": "The file to edit, relative to the workspace root."
        });
        properties["dry_run"] = json!({
            "type": "boolean",
            "description": "Check the edits and return the unified diff they would make, without writing anything. Default: false."
        });
        properties["edits"] = json!({
            "type": "array",
            "minItems": 1,
            "description": "Several edits, applied in order to the result of the previous ones; if any fails, none is applied. Use instead of old_string/new_string.",
            "items": {
                "type": "object",
                "properties": edit_properties,
                "required": ["old_string", "new_string"],
                "additionalProperties": false
            }
        });
        ToolInfo::new(
            "edit_file",
            "Edit file",
            "Replace exact text in an existing text file. Give `old_string` (the exact current \
             text, copied from read_file output without the line-number prefix) and `new_string`; \
             old_string must match exactly one place, or set `replace_all` to replace every \
             occurrence. For several changes to one file, pass `edits: [{old_string, new_string, \
             replace_all?}, ...]`: they apply in order, and if any fails nothing is written. An \
             empty new_string deletes the text. The file keeps its line endings (CRLF or LF), its \
             encoding (UTF-8, UTF-16 or a legacy one such as windows-1252, as read_file names \
             it), its byte-order mark and its permissions; a character its encoding cannot hold \
             is refused. Returns each edited region with 3 numbered \
             lines of context; with `dry_run: true`, the unified diff instead, and nothing is \
             written. Read the file first.",
        )
        .schema(json!({
            "type": "object",
            "properties": properties,
            "required": ["path"],
            "additionalProperties": false
        }))
        .destructive()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "edits": {"type": "integer", "minimum": 0}, "replacements": {"type": "integer", "minimum": 0}, "line_endings": {"enum": ["lf", "crlf"]}, "encoding": {"type": "string", "description": "The file's encoding, kept, when it is not UTF-8 (for example `windows-1252`, `utf-16le`)."}, "bom": {"type": "boolean", "description": "The file starts with a byte-order mark, kept."}, "dry_run": {"type": "boolean"}, "diff": {"type": "string", "description": "The unified diff, for a dry run."}}, "required": ["path", "edits", "replacements", "line_endings", "dry_run"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        let dry_run = args.dry_run.unwrap_or(false);
        let edits = edits_of(args)?;
        let metadata = toolcell_sdk::scan::stat(path.as_str()).map_err(|error| path.io_error(error))?;
        if metadata.kind != toolcell_sdk::walk::EntryKind::File {
            return Err(ToolError::Unsupported(format!("{} is not a regular file: edit_file only edits text files", quote(path.as_str()))));
        }
        let bytes = std::fs::read(path.as_str()).map_err(|error| path.io_error(error))?;
        let document = Document::decode(&bytes).map_err(|not_text| not_text.to_error(&path, "edit_file"))?;
        let applied = apply_edits(&path, &document.body, document.crlf, &edits)?;
        // A character the file's encoding cannot hold fails the edit before anything is written.
        let rendered = document.render(&applied.content).map_err(|unencodable| unencodable.to_error(&path))?;
        let count = applied.replacements;
        let mut structured = json!({
            "path": path.as_str(),
            "edits": edits.len(),
            "replacements": count,
            "line_endings": document.line_endings(),
            "dry_run": dry_run,
        });
        document.encoding.annotate(&mut structured);
        if dry_run {
            let (old_name, new_name) = (format!("a/{path}"), format!("b/{path}"));
            let (before, after) = (document.text(&document.body), document.text(&applied.content));
            let diff = similar::TextDiff::from_lines(before.as_str(), after.as_str())
                .unified_diff()
                .context_radius(DIFF_CONTEXT)
                .header(&old_name, &new_name)
                .to_string();
            let text = if diff.is_empty() { format!("The edit of {} changes nothing.", quote(path.as_str())) } else { diff.clone() };
            structured["diff"] = json!(diff);
            return Ok(Output::text(text).with_structured(structured));
        }
        std::fs::write(path.as_str(), rendered).map_err(|error| path.io_error(error))?;

        let snippets = text::snippets(&applied.content, &applied.regions, SNIPPETS);
        let mut text = format!(
            "Edited {}{}: {count} replacement{} from {} edit{}.",
            quote(path.as_str()),
            if document.encoding.is_utf8() { String::new() } else { format!(" (kept in {})", document.encoding.describe()) },
            if count == 1 { "" } else { "s" },
            edits.len(),
            if edits.len() == 1 { "" } else { "s" },
        );
        for snippet in &snippets.shown {
            text.push_str("\n\n");
            text.push_str(snippet);
        }
        if snippets.hidden > 0 {
            text.push_str(&format!("\n\n[{} more edited region(s) not shown]", snippets.hidden));
        }
        Ok(Output::text(text).with_structured(structured))
    }
}

fn edits_of(args: Args) -> Result<Vec<Edit>, ToolError> {
    let single = match (args.old_string, args.new_string) {
        (Some(old_string), Some(new_string)) => Some(Edit { old_string, new_string, replace_all: args.replace_all.unwrap_or(false) }),
        (None, None) => None,
        _ => {
            return Err(ToolError::InvalidArgs("`old_string` and `new_string` go together: give both, or use `edits`".to_owned()));
        }
    };
    let edits = match (single, args.edits) {
        (Some(edit), None) => vec![edit],
        (None, Some(edits)) => {
            if args.replace_all.is_some() {
                return Err(ToolError::InvalidArgs(
                    "`replace_all` at the top level goes with `old_string`; with `edits`, set it on each edit".to_owned(),
                ));
            }
            edits
        }
        (Some(_), Some(_)) => {
            return Err(ToolError::InvalidArgs("give either `old_string`/`new_string` or `edits`, not both".to_owned()));
        }
        (None, None) => {
            return Err(ToolError::InvalidArgs("nothing to do: give `old_string` and `new_string`, or `edits`".to_owned()));
        }
    };
    if edits.is_empty() {
        return Err(ToolError::InvalidArgs("`edits` is empty: give at least one edit".to_owned()));
    }
    for (index, edit) in edits.iter().enumerate() {
        let name = field_name(edits.len(), index);
        if edit.old_string.is_empty() {
            return Err(ToolError::InvalidArgs(format!(
                "{name}old_string` is empty: give the exact text to replace (to create a file, use write_file)"
            )));
        }
        if edit.old_string == edit.new_string {
            return Err(ToolError::InvalidArgs(format!("{name}old_string` and `new_string` are identical: the edit would change nothing")));
        }
    }
    Ok(edits)
}

/// "`" or "`edits[2]." : how a message names an edit's fields.
fn field_name(count: usize, index: usize) -> String {
    if count == 1 { "`".to_owned() } else { format!("`edits[{index}].") }
}

/// The edited body and where the new text landed in it.
struct Applied {
    content: String,
    /// Byte ranges of replaced text in `content`, sorted, not overlapping.
    regions: Vec<(usize, usize)>,
    replacements: usize,
}

/// Apply `edits` in order to `body` (a [`Document`]'s body; `crlf` says whether the file was
/// CRLF, in which case the edits' CRLFs are matched as LFs).
fn apply_edits(path: &WorkspacePath, body: &str, crlf: bool, edits: &[Edit]) -> Result<Applied, ToolError> {
    let normalise = |text: &str| if crlf { text.replace("\r\n", "\n") } else { text.to_owned() };
    let mut content = body.to_owned();
    let mut regions: Vec<(usize, usize)> = Vec::new();
    let mut replacements = 0;
    for (index, edit) in edits.iter().enumerate() {
        let name = field_name(edits.len(), index);
        let old = normalise(&edit.old_string);
        let new = normalise(&edit.new_string);
        let positions: Vec<usize> = content.match_indices(old.as_str()).map(|(at, _)| at).collect();
        match positions.len() {
            0 => {
                let hint = if index > 0 { " after the previous edits" } else { "" };
                return Err(ToolError::Conflict(format!(
                    "{name}old_string` was not found in {}{hint}: read the file again and copy the text exactly, including whitespace and indentation. Nothing was changed.",
                    quote(path.as_str())
                )));
            }
            count if count > 1 && !edit.replace_all => {
                let lines: Vec<String> = positions.iter().map(|&at| line_of(&content, at).to_string()).collect();
                return Err(ToolError::Conflict(format!(
                    "{name}old_string` matches {count} places in {} (lines {}): include more surrounding lines to make it unique, or set `replace_all` to replace every one. Nothing was changed.",
                    quote(path.as_str()),
                    lines.join(", ")
                )));
            }
            _ => {}
        }
        let mut rebuilt = String::with_capacity(content.len() + positions.len() * new.len());
        let mut last = 0;
        let delta = new.len() as isize - old.len() as isize;
        let mut new_regions = Vec::with_capacity(positions.len());
        for &at in &positions {
            rebuilt.push_str(&content[last..at]);
            let start = rebuilt.len();
            rebuilt.push_str(&new);
            new_regions.push((at, start, rebuilt.len()));
            last = at + old.len();
        }
        rebuilt.push_str(&content[last..]);
        // Move earlier regions to where their text now stands, merging those the edit touched.
        let mut moved = Vec::with_capacity(regions.len() + new_regions.len());
        for (start, end) in regions {
            let before = new_regions.iter().filter(|&&(at, _, _)| at + old.len() <= start).count() as isize;
            let offset = before * delta;
            let overlapped = new_regions.iter().any(|&(at, _, _)| at < end && start < at + old.len());
            if overlapped {
                continue;
            }
            moved.push(((start as isize + offset) as usize, (end as isize + offset) as usize));
        }
        moved.extend(new_regions.iter().map(|&(_, start, end)| (start, end)));
        moved.sort_unstable();
        regions = moved;
        replacements += positions.len();
        content = rebuilt;
    }
    Ok(Applied { content, regions, replacements })
}

toolcell_sdk::export_tool!(EditFile);

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str, replace_all: bool) -> Edit {
        Edit { old_string: old.to_owned(), new_string: new.to_owned(), replace_all }
    }

    fn apply(body: &str, edits: &[Edit]) -> Result<Applied, ToolError> {
        apply_with(body, false, edits)
    }

    fn apply_with(body: &str, crlf: bool, edits: &[Edit]) -> Result<Applied, ToolError> {
        apply_edits(&WorkspacePath::parse("f.txt").expect("valid"), body, crlf, edits)
    }

    #[test]
    fn edits_apply_in_order_and_track_regions() {
        let applied = apply("a\nb\nc\n", &[edit("b", "B\nB2", false), edit("c", "C", false)]).expect("applies");
        assert_eq!(applied.content, "a\nB\nB2\nC\n");
        assert_eq!(applied.replacements, 2);
        let regions: Vec<&str> = applied.regions.iter().map(|&(s, e)| &applied.content[s..e]).collect();
        assert_eq!(regions, ["B\nB2", "C"]);
    }

    #[test]
    fn ambiguous_and_missing_matches_are_conflicts() {
        match apply("x\ny\nx\n", &[edit("x", "z", false)]) {
            Err(ToolError::Conflict(message)) => assert!(message.contains("2 places") && message.contains("lines 1, 3"), "{message}"),
            other => panic!("expected a conflict, got {:?}", other.map(|a| a.content)),
        }
        assert!(matches!(apply("x\n", &[edit("q", "z", false)]), Err(ToolError::Conflict(_))));
        let all = apply("x\ny\nx\n", &[edit("x", "z", true)]).expect("replace_all applies");
        assert_eq!(all.content, "z\ny\nz\n");
    }

    #[test]
    fn crlf_and_bom_survive() {
        let document = Document::parse("\u{feff}one\r\ntwo\r\n");
        assert!(document.encoding.bom && document.crlf);
        let applied = apply_with(&document.body, true, &[edit("one\r\ntwo", "uno\ndos", false)]).expect("applies");
        assert_eq!(document.render(&applied.content), Ok("\u{feff}uno\r\ndos\r\n".as_bytes().to_vec()));
        let mixed = Document::parse("a\r\nb\n");
        assert!(!mixed.crlf);
        assert_eq!(mixed.render(&mixed.body), Ok(b"a\r\nb\n".to_vec()));
    }

    #[test]
    fn snippets_show_context() {
        let body: String = (1..=20).map(|n| format!("line {n}\n")).collect();
        let applied = apply(&body, &[edit("line 10\n", "ten\n", false)]).expect("applies");
        let shown = text::snippets(&applied.content, &applied.regions, SNIPPETS).shown;
        assert_eq!(shown.len(), 1);
        assert!(shown[0].starts_with("     7\tline 7"), "{}", shown[0]);
        assert!(shown[0].contains("    10\tten"));
        assert!(shown[0].ends_with("    13\tline 13"), "{}", shown[0]);
    }
}

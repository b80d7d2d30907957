//! `apply_patch`: add, update (and move) and delete several files in one step, all or none.
//!
//! The patch format is the one coding agents are trained on:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: docs/new.md
//! +first line
//! *** Update File: src/lib.rs
//! *** Move to: src/core.rs
//! @@ fn main
//!  context line
//! -removed line
//! +added line
//! *** Delete File: old.txt
//! *** End Patch
//! ```
//!
//! Every hunk is matched in memory first; only when all of them apply is anything written,
//! and the host's transaction undoes the writes made before any later failure (a refused path,
//! a full disk), so the workspace ends with every file changed or none.

mod hunks;
mod parse;

use serde::Deserialize;
use serde_json::{Value, json};
use toolcell_sdk::path::quote;
use toolcell_sdk::text::Document;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

use hunks::apply_chunks;
#[cfg(test)]
use hunks::{replacement, seek};
use parse::{Chunk, Line, Operation};

/// Lines of context in the dry run's unified diff.
const DIFF_CONTEXT: usize = 3;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    patch: Option<String>,
    operation: Option<OpenAiOperation>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    overwrite: bool,
}

/// One operation of OpenAI's `apply_patch` tool (`apply_patch_call.operation`): a file to
/// create (its `diff` is the new lines, each prefixed `+`), update (`diff` is V4A hunks) or
/// delete.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenAiOperation {
    #[serde(rename = "type")]
    kind: OperationKind,
    path: String,
    diff: Option<String>,
    move_to: Option<String>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
enum OperationKind {
    #[serde(rename = "create_file")]
    Create,
    #[serde(rename = "update_file")]
    Update,
    #[serde(rename = "delete_file")]
    Delete,
}

impl OpenAiOperation {
    /// The operation as a patch of one section.
    fn into_patch(self) -> Result<String, ToolError> {
        if self.kind != OperationKind::Update && self.move_to.is_some() {
            return Err(ToolError::InvalidArgs("`operation.move_to` goes with `update_file` only".to_owned()));
        }
        let diff = self.diff.unwrap_or_default();
        let body = match self.kind {
            OperationKind::Create => {
                // V4A joins the created lines without a final newline: a last `+` line makes
                // one, which an added file here always has.
                let lines: Vec<&str> = diff.lines().collect();
                let lines = match lines.split_last() {
                    Some((last, rest)) if *last == "+" => rest,
                    _ => &lines[..],
                };
                format!("*** Add File: {}\n{}", self.path, lines.join("\n"))
            }
            OperationKind::Update => {
                let moved = self.move_to.map(|destination| format!("*** Move to: {destination}\n")).unwrap_or_default();
                format!("*** Update File: {}\n{moved}{diff}", self.path)
            }
            OperationKind::Delete => format!("*** Delete File: {}", self.path),
        };
        Ok(format!("{BEGIN_PATCH}\n{}\n{END_PATCH}", body.trim_end_matches('\n')))
    }
}

/// An OpenAI operation changes only the file its `path` names: a `diff` (or a `path`) that
/// carries file headers of its own (`*** Add File`, `*** Delete File`) would change others.
fn check_one_file(operations: &[Operation], path: &str, kind: OperationKind) -> Result<(), ToolError> {
    let named = match (operations, kind) {
        ([Operation::Add { path: added, .. }], OperationKind::Create) => Some(added),
        ([Operation::Update { path: updated, .. }], OperationKind::Update) => Some(updated),
        ([Operation::Delete { path: deleted }], OperationKind::Delete) => Some(deleted),
        _ => None,
    };
    if named.is_some_and(|named| WorkspacePath::parse(path).is_ok_and(|given| given == *named)) {
        return Ok(());
    }
    Err(ToolError::InvalidArgs(format!(
        "this operation would change {}, but an operation changes only the file its `path` names (`{}`): its `diff` holds only that file's hunks (or, for `create_file`, its lines), with no file headers of its own. Send one operation per file.",
        if operations.len() == 1 { "another file".to_owned() } else { format!("{} files", operations.len()) },
        path.escape_default()
    )))
}

const BEGIN_PATCH: &str = "*** Begin Patch";
const END_PATCH: &str = "*** End Patch";

struct ApplyPatch;

impl Tool for ApplyPatch {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "apply_patch",
            "Apply patch",
            "Change several files in one step, all or none. `patch` is text between `*** Begin \
             Patch` and `*** End Patch` holding file sections: `*** Add File: PATH` followed by \
             the new file's lines each prefixed with `+`; `*** Delete File: PATH`; `*** Update \
             File: PATH`, optionally followed by `*** Move to: NEW_PATH`, then hunks. A hunk \
             starts with `@@` (optionally `@@ LINE` naming a line, such as a function header, \
             that comes before the change, to tell places apart) and lists the lines around the \
             change: ` ` (space) for unchanged context, `-` for removed, `+` for added lines; \
             give 3 lines of context before and after each change, and `*** End of File` after \
             a hunk that ends at the end of the file. Paths are relative to the workspace root. \
             If any hunk does not match, or any file cannot be changed, no file is changed and \
             the error names the file and hunk. With `dry_run: true` nothing is written and the \
             result is the unified diff. `*** Add File` and `*** Move to` refuse to replace an \
             existing file unless `overwrite: true`. Line endings (per line, in mixed files), \
             encodings (UTF-8, UTF-16, legacy ones such as windows-1252) and byte-order marks \
             are kept; hunks match exactly, else ignoring whitespace, else \
             with typographic dashes and quotes in the file matching ASCII ones in the patch. \
             For one change to one file, edit_file is simpler. Instead of `patch`, `operation` \
             takes one operation of OpenAI's apply_patch tool as it sends it: `{type: \
             \"create_file\"|\"update_file\"|\"delete_file\", path, diff, move_to}`.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "patch": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The patch, from `*** Begin Patch` to `*** End Patch`."
                },
                "operation": {
                    "type": "object",
                    "description": "Instead of `patch`: one operation of OpenAI's apply_patch tool.",
                    "properties": {
                        "type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"]},
                        "path": {"type": "string", "minLength": 1},
                        "diff": {"type": "string", "description": "For create_file the new lines, each prefixed `+`; for update_file the hunks."},
                        "move_to": {"type": "string", "minLength": 1, "description": "For update_file: the file's new path."}
                    },
                    "required": ["type", "path"],
                    "additionalProperties": false
                },
                "dry_run": {
                    "type": "boolean",
                    "description": "Check the patch and return the unified diff without writing anything. Default: false."
                },
                "overwrite": {
                    "type": "boolean",
                    "description": "Let `*** Add File` and `*** Move to` replace an existing file. Default: false."
                }
            },
            "additionalProperties": false
        }))
        .destructive()
        .output(json!({"type": "object", "properties": {"dry_run": {"type": "boolean"}, "files": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "action": {"enum": ["added", "deleted", "updated"]}, "added_lines": {"type": "integer", "minimum": 0}, "removed_lines": {"type": "integer", "minimum": 0}, "moved_to": {"type": "string"}, "encoding": {"type": "string", "description": "The file's encoding, kept, when it is not UTF-8."}, "bom": {"type": "boolean", "description": "The file starts with a byte-order mark, kept."}}, "required": ["path", "action", "added_lines", "removed_lines"]}}, "diff": {"type": "string", "description": "The unified diff, for a dry run."}}, "required": ["dry_run", "files"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let mut one_file = None;
        let patch = match (args.patch, args.operation) {
            (Some(patch), None) => patch,
            (None, Some(operation)) => {
                one_file = Some((operation.path.clone(), operation.kind));
                operation.into_patch()?
            }
            _ => {
                return Err(ToolError::InvalidArgs(
                    "give `patch` (the patch text) or `operation` (one operation of OpenAI's apply_patch tool), exactly one of them"
                        .to_owned(),
                ));
            }
        };
        let operations = parse::parse(&patch)?;
        let wording = if one_file.is_some() { Wording::Operation } else { Wording::Patch };
        if let Some((path, kind)) = one_file {
            check_one_file(&operations, &path, kind)?;
        }
        let planned = plan(&operations, args.overwrite, wording)?;
        // Every file's bytes, before anything is written: a character a file's encoding cannot
        // hold fails the whole patch.
        let rendered = planned.iter().map(Change::rendered).collect::<Result<Vec<_>, _>>()?;
        let mut diff = String::new();
        let mut files = Vec::with_capacity(planned.len());
        for change in &planned {
            files.push(change.summary());
            if args.dry_run {
                diff.push_str(&change.unified_diff());
            }
        }
        if args.dry_run {
            let text = if diff.is_empty() { "The patch applies and changes nothing.".to_owned() } else { diff.clone() };
            return Ok(Output::text(format!("Dry run: nothing was written. The patch applies cleanly.\n\n{text}"))
                .with_structured(json!({"dry_run": true, "files": files, "diff": diff})));
        }
        for (change, bytes) in planned.iter().zip(&rendered) {
            change.write(bytes.as_deref())?;
        }
        let mut text = format!("Applied the patch to {} file(s):", planned.len());
        for change in &planned {
            text.push('\n');
            text.push_str(&change.line());
        }
        Ok(Output::text(text).with_structured(json!({"dry_run": false, "files": files})))
    }
}

/// One file's change, computed in memory.
struct Change {
    path: WorkspacePath,
    kind: ChangeKind,
    /// The content before (empty for an added file) and after (empty for a deleted one), as
    /// the edits see it (LF endings, no byte-order mark).
    before: String,
    after: String,
    /// How to write `after` back (line endings, byte-order mark).
    document: Document,
}

enum ChangeKind {
    Add,
    Delete,
    Update { moved_to: Option<WorkspacePath> },
}

impl Change {
    fn counts(&self) -> (usize, usize) {
        let diff = similar::TextDiff::from_lines(&self.before, &self.after);
        let mut added = 0;
        let mut removed = 0;
        for change in diff.iter_all_changes() {
            match change.tag() {
                similar::ChangeTag::Insert => added += 1,
                similar::ChangeTag::Delete => removed += 1,
                similar::ChangeTag::Equal => {}
            }
        }
        (added, removed)
    }

    fn summary(&self) -> Value {
        let (added, removed) = self.counts();
        let mut value = json!({
            "path": self.path.as_str(),
            "action": match self.kind { ChangeKind::Add => "added", ChangeKind::Delete => "deleted", ChangeKind::Update { .. } => "updated" },
            "added_lines": added,
            "removed_lines": removed,
        });
        if let ChangeKind::Update { moved_to: Some(destination) } = &self.kind {
            value["moved_to"] = json!(destination.as_str());
        }
        if !matches!(self.kind, ChangeKind::Delete) {
            self.document.encoding.annotate(&mut value);
        }
        value
    }

    /// `M src/lib.rs (+3 -1)` and the like.
    fn line(&self) -> String {
        let (added, removed) = self.counts();
        let path = quote(self.path.as_str());
        match &self.kind {
            ChangeKind::Add => format!("A {path} (+{added})"),
            ChangeKind::Delete => format!("D {path} (-{removed})"),
            ChangeKind::Update { moved_to: None } => format!("M {path} (+{added} -{removed})"),
            ChangeKind::Update { moved_to: Some(destination) } => {
                format!("R {path} -> {} (+{added} -{removed})", quote(destination.as_str()))
            }
        }
    }

    fn unified_diff(&self) -> String {
        let old_name = match self.kind {
            ChangeKind::Add => "/dev/null".to_owned(),
            _ => format!("a/{}", self.path),
        };
        let new_name = match &self.kind {
            ChangeKind::Delete => "/dev/null".to_owned(),
            ChangeKind::Update { moved_to: Some(destination) } => format!("b/{destination}"),
            _ => format!("b/{}", self.path),
        };
        let diff = similar::TextDiff::from_lines(&self.before, &self.after);
        let mut rendered = diff.unified_diff().context_radius(DIFF_CONTEXT).header(&old_name, &new_name).to_string();
        if rendered.is_empty() && old_name.trim_start_matches("a/") != new_name.trim_start_matches("b/") {
            // A move without content changes.
            rendered = format!("--- {old_name}\n+++ {new_name}\n");
        }
        rendered
    }

    /// The bytes to write, in the file's encoding, with its byte-order mark and line endings;
    /// `None` for a deletion.
    fn rendered(&self) -> Result<Option<Vec<u8>>, ToolError> {
        match &self.kind {
            ChangeKind::Delete => Ok(None),
            ChangeKind::Add | ChangeKind::Update { .. } => {
                self.document.render(&self.after).map(Some).map_err(|unencodable| unencodable.to_error(&self.path))
            }
        }
    }

    fn write(&self, bytes: Option<&[u8]>) -> Result<(), ToolError> {
        let bytes = bytes.unwrap_or_default();
        match &self.kind {
            ChangeKind::Delete => std::fs::remove_file(self.path.as_str()).map_err(|error| self.path.io_error(error)),
            ChangeKind::Add => write_file(&self.path, bytes),
            ChangeKind::Update { moved_to } => {
                let target = moved_to.as_ref().unwrap_or(&self.path);
                write_file(target, bytes)?;
                if moved_to.is_some() {
                    std::fs::remove_file(self.path.as_str()).map_err(|error| self.path.io_error(error))?;
                }
                Ok(())
            }
        }
    }
}

fn write_file(path: &WorkspacePath, bytes: &[u8]) -> Result<(), ToolError> {
    if let Some(parent) = path.parent().filter(|parent| !parent.is_root()) {
        std::fs::create_dir_all(parent.as_str()).map_err(|error| parent.io_error(error))?;
    }
    std::fs::write(path.as_str(), bytes).map_err(|error| path.io_error(error))
}

/// How messages name what was asked: the patch's own sections, or the fields of an OpenAI
/// operation (which has no `*** Add File` and no `overwrite` to suggest).
#[derive(Clone, Copy)]
enum Wording {
    Patch,
    Operation,
}

impl Wording {
    /// The section (`Add`, `Update`, `Delete`) naming `path`.
    fn section(self, section: &str, path: &str) -> String {
        match self {
            Wording::Patch => format!("`*** {section} File: {path}`"),
            Wording::Operation => {
                let kind = match section {
                    "Add" => "create_file",
                    "Delete" => "delete_file",
                    _ => "update_file",
                };
                format!("The {kind} operation's path `{path}`")
            }
        }
    }

    /// What to do about a file to add that exists already.
    fn exists(self) -> &'static str {
        match self {
            Wording::Patch => "use `*** Update File` to change it, or pass `overwrite: true` to replace it whole",
            Wording::Operation => "send an update_file operation to change it",
        }
    }

    /// A move's destination `path`, and what to do when it exists.
    fn move_to(self, path: &str) -> (String, &'static str) {
        match self {
            Wording::Patch => (format!("`*** Move to: {path}`"), "choose another destination, or pass `overwrite: true` to replace it"),
            Wording::Operation => (format!("`move_to` `{path}`"), "choose another destination"),
        }
    }

    /// How to create a file.
    fn create(self) -> &'static str {
        match self {
            Wording::Patch => "to create a file, use `*** Add File`",
            Wording::Operation => "to create a file, send a create_file operation",
        }
    }
}

/// Check every operation against the workspace and compute every new content, writing nothing.
fn plan(operations: &[Operation], overwrite: bool, wording: Wording) -> Result<Vec<Change>, ToolError> {
    let mut touched: Vec<WorkspacePath> = Vec::new();
    let mut claim = |path: &WorkspacePath| {
        if touched.contains(path) {
            return Err(ToolError::InvalidArgs(format!(
                "the patch changes {} more than once: put all of a file's hunks in one `*** Update File` section. Nothing was changed.",
                quote(path.as_str())
            )));
        }
        touched.push(path.clone());
        Ok(())
    };
    let mut planned = Vec::with_capacity(operations.len());
    for operation in operations {
        let change = match operation {
            Operation::Add { path, lines } => {
                claim(path)?;
                let mut after = lines.join("\n");
                after.push('\n');
                match std::fs::symlink_metadata(path.as_str()) {
                    Ok(_) if overwrite => {
                        // Replaced whole: the patch gives every line; the file keeps its encoding,
                        // byte-order mark and line endings.
                        let (document, _) = read_text(path, "Add", wording)?;
                        let before = document.body.clone();
                        Change { path: path.clone(), kind: ChangeKind::Update { moved_to: None }, before, after, document }
                    }
                    Ok(_) => {
                        return Err(ToolError::Conflict(format!(
                            "{} names a file that already exists: {}. Nothing was changed.",
                            wording.section("Add", path.as_str()),
                            wording.exists()
                        )));
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        Change { path: path.clone(), kind: ChangeKind::Add, before: String::new(), after, document: Document::parse("") }
                    }
                    Err(error) => return Err(path.io_error(error)),
                }
            }
            Operation::Delete { path } => {
                claim(path)?;
                let (document, _) = read_text(path, "Delete", wording)?;
                Change { path: path.clone(), kind: ChangeKind::Delete, before: document.body.clone(), after: String::new(), document }
            }
            Operation::Update { path, moved_to, chunks } => {
                claim(path)?;
                if let Some(destination) = moved_to {
                    claim(destination)?;
                    match std::fs::symlink_metadata(destination.as_str()) {
                        Ok(metadata) if overwrite && metadata.is_file() => {}
                        Ok(_) if overwrite => {
                            return Err(ToolError::Conflict(format!(
                                "`*** Move to: {}` names something that is not a regular file, which `overwrite` does not replace: choose another destination. Nothing was changed.",
                                destination.as_str()
                            )));
                        }
                        Ok(_) => {
                            let (named, remedy) = wording.move_to(destination.as_str());
                            return Err(ToolError::Conflict(format!(
                                "{named} names a path that already exists: {remedy}. Nothing was changed."
                            )));
                        }
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                        Err(error) => return Err(destination.io_error(error)),
                    }
                }
                let (document, _) = read_text(path, "Update", wording)?;
                let after = apply_chunks(path, &document.body, chunks)?;
                Change {
                    path: path.clone(),
                    kind: ChangeKind::Update { moved_to: moved_to.clone() },
                    before: document.body.clone(),
                    after,
                    document,
                }
            }
        };
        planned.push(change);
    }
    Ok(planned)
}

/// The text of an existing file a section names.
fn read_text(path: &WorkspacePath, section: &str, wording: Wording) -> Result<(Document, usize), ToolError> {
    let metadata = std::fs::metadata(path.as_str()).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => ToolError::NotFound(format!(
            "{} names a file that does not exist: check the path with list_files ({}). Nothing was changed.",
            wording.section(section, path.as_str()),
            wording.create()
        )),
        _ => path.io_error(error),
    })?;
    if !metadata.is_file() {
        return Err(ToolError::Unsupported(format!(
            "{} is not a regular file: patches change text files only. Nothing was changed.",
            wording.section(section, path.as_str())
        )));
    }
    let bytes = std::fs::read(path.as_str()).map_err(|error| path.io_error(error))?;
    let document = Document::decode(&bytes).map_err(|not_text| not_text.to_error(path, "apply_patch"))?;
    Ok((document, bytes.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(context: Option<&str>, old: &[&str], new: &[&str]) -> Chunk {
        let mut lines: Vec<Line> = old.iter().map(|line| Line::Removed((*line).to_owned())).collect();
        lines.extend(new.iter().map(|line| Line::Added((*line).to_owned())));
        Chunk { context: context.map(str::to_owned), lines, end_of_file: false }
    }

    fn path() -> WorkspacePath {
        WorkspacePath::parse("f.txt").expect("valid")
    }

    #[test]
    fn hunks_apply_in_order() {
        let body = "fn a() {\n    1\n}\nfn b() {\n    1\n}\n";
        let chunks = [chunk(Some("fn b()"), &["    1"], &["    2"])];
        assert_eq!(apply_chunks(&path(), body, &chunks).expect("applies"), "fn a() {\n    1\n}\nfn b() {\n    2\n}\n");
        let chunks = [chunk(None, &["    1"], &["    3"]), chunk(None, &["    1"], &["    4"])];
        assert_eq!(apply_chunks(&path(), body, &chunks).expect("applies"), "fn a() {\n    3\n}\nfn b() {\n    4\n}\n");
    }

    #[test]
    fn a_missing_hunk_names_itself() {
        let chunks = [chunk(None, &["a"], &["b"]), chunk(None, &["zzz"], &["y"])];
        match apply_chunks(&path(), "a\n", &chunks) {
            Err(ToolError::Conflict(message)) => assert!(message.starts_with("hunk 2 of `f.txt`"), "{message}"),
            other => panic!("expected a conflict, got {:?}", other.is_ok()),
        }
    }

    #[test]
    fn context_lines_keep_the_files_own_bytes() {
        let hunk = [Line::Context("a".to_owned()), Line::Removed("b".to_owned()), Line::Added("c".to_owned())];
        let matched = ["a  ".to_owned(), "b".to_owned()];
        assert_eq!(replacement(&hunk, &matched, false), ["a  ", "c"]);
    }

    #[test]
    fn mixed_line_endings_are_kept_per_line() {
        let body = "lf one\ncrlf one\r\ncrlf two\r\nlf two\n";
        let chunks = [chunk(None, &["crlf two"], &["crlf new", "crlf newer"]), chunk(None, &["lf two"], &["lf new"])];
        assert_eq!(apply_chunks(&path(), body, &chunks).expect("applies"), "lf one\ncrlf one\r\ncrlf new\r\ncrlf newer\r\nlf new\n");
        // A pure addition takes its neighbour's ending.
        let chunks = [Chunk { context: Some("crlf one".to_owned()), lines: vec![Line::Added("added".to_owned())], end_of_file: false }];
        assert_eq!(apply_chunks(&path(), body, &chunks).expect("applies"), "lf one\ncrlf one\r\nadded\r\ncrlf two\r\nlf two\n");
    }

    #[test]
    fn ascii_punctuation_matches_typographic_as_a_last_pass() {
        let lines: Vec<String> =
            ["say \u{201c}hi\u{201d} \u{2014} it\u{2019}s", "plain - \"x\""].iter().map(|line| (*line).to_owned()).collect();
        assert_eq!(seek(&lines, &["say \"hi\" - it's".to_owned()], 0, false), Some(0));
        // An exact match elsewhere wins over a typographic one earlier.
        let lines: Vec<String> = ["a \u{2013} b", "a - b"].iter().map(|line| (*line).to_owned()).collect();
        assert_eq!(seek(&lines, &["a - b".to_owned()], 0, false), Some(1));
        assert_eq!(seek(&lines, &["a = b".to_owned()], 0, false), None);
    }

    #[test]
    fn whitespace_tolerant_matching() {
        let lines: Vec<String> = ["a  ", " b"].iter().map(|line| (*line).to_owned()).collect();
        assert_eq!(seek(&lines, &["a".to_owned()], 0, false), Some(0));
        assert_eq!(seek(&lines, &["b".to_owned()], 0, false), Some(1));
        assert_eq!(seek(&lines, &["c".to_owned()], 0, false), None);
    }
}

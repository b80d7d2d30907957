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

mod parse;

use serde::Deserialize;
use serde_json::{Value, json};
use toolcell_sdk::path::quote;
use toolcell_sdk::text::{self, Document};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

use parse::{Chunk, Line, Operation};

/// Lines of context in the dry run's unified diff.
const DIFF_CONTEXT: usize = 3;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    patch: String,
    #[serde(default)]
    dry_run: bool,
}

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
             result is the unified diff. Line endings and byte-order marks are kept. For one \
             change to one file, edit_file is simpler.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "patch": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The patch, from `*** Begin Patch` to `*** End Patch`."
                },
                "dry_run": {
                    "type": "boolean",
                    "description": "Check the patch and return the unified diff without writing anything. Default: false."
                }
            },
            "required": ["patch"],
            "additionalProperties": false
        }))
        .destructive()
        .output(json!({"type": "object", "properties": {"dry_run": {"type": "boolean"}, "files": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "action": {"enum": ["added", "deleted", "updated"]}, "added_lines": {"type": "integer", "minimum": 0}, "removed_lines": {"type": "integer", "minimum": 0}, "moved_to": {"type": "string"}}, "required": ["path", "action", "added_lines", "removed_lines"]}}, "diff": {"type": "string", "description": "The unified diff, for a dry run."}}, "required": ["dry_run", "files"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let operations = parse::parse(&args.patch)?;
        let planned = plan(&operations)?;
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
        for change in &planned {
            change.write()?;
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

    fn write(&self) -> Result<(), ToolError> {
        match &self.kind {
            ChangeKind::Delete => std::fs::remove_file(self.path.as_str()).map_err(|error| self.path.io_error(error)),
            ChangeKind::Add => write_file(&self.path, &self.document.render(&self.after)),
            ChangeKind::Update { moved_to } => {
                let target = moved_to.as_ref().unwrap_or(&self.path);
                write_file(target, &self.document.render(&self.after))?;
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

/// Check every operation against the workspace and compute every new content, writing nothing.
fn plan(operations: &[Operation]) -> Result<Vec<Change>, ToolError> {
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
                match std::fs::symlink_metadata(path.as_str()) {
                    Ok(_) => {
                        return Err(ToolError::Conflict(format!(
                            "`*** Add File: {}` names a file that already exists: use `*** Update File` to change it, or delete it first. Nothing was changed.",
                            path.as_str()
                        )));
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => return Err(path.io_error(error)),
                }
                let mut after = lines.join("\n");
                after.push('\n');
                Change { path: path.clone(), kind: ChangeKind::Add, before: String::new(), after, document: Document::parse("") }
            }
            Operation::Delete { path } => {
                claim(path)?;
                let (document, _) = read_text(path, "Delete")?;
                Change { path: path.clone(), kind: ChangeKind::Delete, before: document.body.clone(), after: String::new(), document }
            }
            Operation::Update { path, moved_to, chunks } => {
                claim(path)?;
                if let Some(destination) = moved_to {
                    claim(destination)?;
                    if std::fs::symlink_metadata(destination.as_str()).is_ok() {
                        return Err(ToolError::Conflict(format!(
                            "`*** Move to: {}` names a path that already exists: choose another destination, or delete it first. Nothing was changed.",
                            destination.as_str()
                        )));
                    }
                }
                let (document, _) = read_text(path, "Update")?;
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
fn read_text(path: &WorkspacePath, section: &str) -> Result<(Document, usize), ToolError> {
    let metadata = std::fs::metadata(path.as_str()).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => ToolError::NotFound(format!(
            "`*** {section} File: {}` names a file that does not exist: check the path with list_files (to create a file, use `*** Add File`). Nothing was changed.",
            path.as_str()
        )),
        _ => path.io_error(error),
    })?;
    if !metadata.is_file() {
        return Err(ToolError::Unsupported(format!(
            "`*** {section} File: {}` is not a regular file: patches change text files only. Nothing was changed.",
            path.as_str()
        )));
    }
    let bytes = std::fs::read(path.as_str()).map_err(|error| path.io_error(error))?;
    if text::is_binary(&bytes) {
        return Err(ToolError::Unsupported(format!(
            "{} looks like a binary file: patches change text files only. Nothing was changed.",
            quote(path.as_str())
        )));
    }
    let size = bytes.len();
    let original = String::from_utf8(bytes)
        .map_err(|_| ToolError::Unsupported(format!("{} is not valid UTF-8 text. Nothing was changed.", quote(path.as_str()))))?;
    Ok((Document::parse(&original), size))
}

/// Apply an update section's hunks, in order, to `body`.
fn apply_chunks(path: &WorkspacePath, body: &str, chunks: &[Chunk]) -> Result<String, ToolError> {
    let mut lines: Vec<String> = body.split('\n').map(str::to_owned).collect();
    // A final newline does not start another line.
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut cursor = 0;
    for (index, chunk) in chunks.iter().enumerate() {
        let number = index + 1;
        let failure = |what: String| {
            ToolError::Conflict(format!(
                "hunk {number} of {} does not apply: {what}. Read the file again and copy the lines exactly. Nothing was changed.",
                quote(path.as_str())
            ))
        };
        if let Some(context) = &chunk.context {
            // The `@@` line names a whole line, or the start of one (a function's header).
            let found = seek(&lines, std::slice::from_ref(context), cursor, false)
                .or_else(|| (cursor..lines.len()).find(|&at| lines[at].trim_start().starts_with(context.trim())));
            match found {
                Some(found) => cursor = found + 1,
                None => return Err(failure(format!("its `@@ {context}` line was not found after line {cursor}"))),
            }
        }
        let mut hunk: &[Line] = &chunk.lines;
        let mut old = chunk.old();
        if old.is_empty() {
            // A pure addition: where the `@@` line put it, else at the end.
            let at = if chunk.context.is_some() && !chunk.end_of_file { cursor } else { lines.len() };
            let added: Vec<String> = replacement(hunk, &[]);
            cursor = at + added.len();
            lines.splice(at..at, added);
            continue;
        }
        let mut found = seek(&lines, &old, cursor, chunk.end_of_file);
        if found.is_none() && hunk.last() == Some(&Line::Context(String::new())) {
            // A blank line at the end of a hunk is often only the patch's own spacing.
            hunk = &hunk[..hunk.len() - 1];
            old.pop();
            found = seek(&lines, &old, cursor, chunk.end_of_file);
        }
        let Some(at) = found else {
            let shown: Vec<String> = old.iter().take(5).map(|line| format!("    {line}")).collect();
            return Err(failure(format!(
                "these lines were not found{}:\n{}{}\n",
                if cursor > 0 { format!(" after line {cursor}") } else { String::new() },
                shown.join("\n"),
                if old.len() > 5 { format!("\n    … ({} more)", old.len() - 5) } else { String::new() }
            )));
        };
        let replaced = replacement(hunk, &lines[at..at + old.len()]);
        cursor = at + replaced.len();
        lines.splice(at..at + old.len(), replaced);
    }
    let mut content = lines.join("\n");
    if !lines.is_empty() {
        content.push('\n');
    }
    Ok(content)
}

/// The lines that replace `matched` (the file's lines the hunk's context and removed lines
/// matched, in order): the file's own context lines, kept byte for byte even when they matched
/// only up to whitespace, and the hunk's added lines.
fn replacement(hunk: &[Line], matched: &[String]) -> Vec<String> {
    let mut matched = matched.iter();
    let mut replaced = Vec::with_capacity(hunk.len());
    for line in hunk {
        match line {
            Line::Context(text) => replaced.push(matched.next().cloned().unwrap_or_else(|| text.clone())),
            Line::Removed(_) => {
                matched.next();
            }
            Line::Added(text) => replaced.push(text.clone()),
        }
    }
    replaced
}

/// Where `pattern` starts in `lines` at or after `start`: exactly, else ignoring trailing
/// whitespace, else ignoring surrounding whitespace. With `at_end`, the end of the file is
/// tried first.
fn seek(lines: &[String], pattern: &[String], start: usize, at_end: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let comparisons: [fn(&str, &str) -> bool; 3] = [|a, b| a == b, |a, b| a.trim_end() == b.trim_end(), |a, b| a.trim() == b.trim()];
    for equal in comparisons {
        let matches = |at: usize| lines[at..at + pattern.len()].iter().zip(pattern).all(|(line, wanted)| equal(line, wanted));
        if at_end && last_start >= start && matches(last_start) {
            return Some(last_start);
        }
        if let Some(found) = (start..=last_start).find(|&at| matches(at)) {
            return Some(found);
        }
    }
    None
}

toolcell_sdk::export_tool!(ApplyPatch);

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
        assert_eq!(replacement(&hunk, &matched), ["a  ", "c"]);
    }

    #[test]
    fn whitespace_tolerant_matching() {
        let lines: Vec<String> = ["a  ", " b"].iter().map(|line| (*line).to_owned()).collect();
        assert_eq!(seek(&lines, &["a".to_owned()], 0, false), Some(0));
        assert_eq!(seek(&lines, &["b".to_owned()], 0, false), Some(1));
        assert_eq!(seek(&lines, &["c".to_owned()], 0, false), None);
    }
}

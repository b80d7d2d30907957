//! Tools in the shape of a model provider's built-in tool, so that a platform that enables the
//! built-in can route the model's calls to toolcell unchanged: `str_replace_based_edit_tool`,
//! Anthropic's text editor tool (`view`, `create`, `str_replace`, `insert`, `undo_edit`).
//!
//! An adapter does nothing itself: each command becomes a call of a governed tool
//! (`read_file`, `directory_tree`, `write_file`, `edit_file`, `insert_text`, `undo_edit`) in the
//! caller's session, with that tool's gate, policy, locks, read-before-write check and audit
//! record, and the adapter only words the result the way the provider documents it. (OpenAI's
//! `apply_patch` tool needs no adapter: the `apply_patch` component takes its operations.)

use serde::Deserialize;
use serde_json::{Value, json};
use toolcell_types::{Annotations, ToolErrorKind, ToolInfo, ToolName, ToolOutput};

use toolcell_types::ToolError;

use crate::host_tools::UNDO_EDIT;
use crate::schema::ArgsSchema;

/// What an adapter reads and rewords of a governed call's outcome.
pub trait Outcome {
    /// The call's result.
    fn result(&self) -> &Result<ToolOutput, ToolError>;
    /// The call's result, to reword.
    fn result_mut(&mut self) -> &mut Result<ToolOutput, ToolError>;
    /// Whether the call attached images (a `view` of an image shows them as they are).
    fn has_images(&self) -> bool;
}

/// The name of Anthropic's text editor tool (`text_editor_20250728` and later).
pub const TEXT_EDITOR: &str = "str_replace_based_edit_tool";

/// Every adapter, by name.
pub const ADAPTER_TOOLS: &[&str] = &[TEXT_EDITOR];

/// A provider's built-in tool the host adapts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// [`TEXT_EDITOR`].
    TextEditor,
}

/// The text editor tool's input, as the model sends it.
#[derive(Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
enum EditorCommand {
    View { path: String, view_range: Option<Vec<i64>> },
    Create { path: String, file_text: String },
    StrReplace { path: String, old_str: String, new_str: Option<String> },
    Insert { path: String, insert_line: u64, insert_text: Option<String>, new_str: Option<String> },
    UndoEdit { path: String },
}

impl Adapter {
    /// Every adapter.
    pub const ALL: [Adapter; 1] = [Adapter::TextEditor];

    /// The adapter's description and compiled schema.
    pub fn describe(self) -> (ToolInfo, ArgsSchema) {
        let schema = json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
                "path": {"type": "string", "description": "The file or directory, relative to the workspace root, or absolute under the root the platform gave."},
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": "With `view` of a file: the first and last line to show, 1-based; -1 as the last means the end of the file."
                },
                "file_text": {"type": "string", "description": "With `create`: the new file's content."},
                "old_str": {"type": "string", "description": "With `str_replace`: the exact text to replace; it must occur once."},
                "new_str": {"type": "string", "description": "With `str_replace`: the replacement (default empty); with `insert`: the text to insert."},
                "insert_line": {"type": "integer", "minimum": 0, "description": "With `insert`: the line after which to insert (0 for the top)."},
                "insert_text": {"type": "string", "description": "With `insert`: the text to insert."}
            },
            "required": ["command", "path"],
            "additionalProperties": false
        });
        let output = json!({
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "tool": {"type": "string", "description": "The governed tool that carried the command out."},
                "result": {"description": "That tool's structured result."}
            },
            "required": ["command", "tool"]
        });
        let (compiled, input_schema) = match ArgsSchema::compile(&schema.to_string()) {
            Ok(compiled) => compiled,
            Err(reason) => unreachable!("the host's own schema for `{TEXT_EDITOR}` is valid: {reason}"),
        };
        let info = ToolInfo {
            name: ToolName::new(TEXT_EDITOR).unwrap_or_else(|error| unreachable!("`{TEXT_EDITOR}` is a valid tool name: {error}")),
            title: "Text editor".to_owned(),
            description: "Anthropic's text editor tool: `view` a file (numbered lines, optionally `view_range`) or a \
                          directory (two levels deep), `create` a new file with `file_text`, `str_replace` the one \
                          occurrence of `old_str` with `new_str`, `insert` `insert_text` after line `insert_line`, \
                          `undo_edit` this session's last change to a file. Paths are relative to the workspace root, \
                          or absolute under the root the platform gave (such as `/repo`). \
                          Each command is carried out by toolcell's governed tools."
                .to_owned(),
            input_schema,
            output_schema: Some(output),
            annotations: Annotations { read_only: false, destructive: true, idempotent: false },
        };
        (info, compiled)
    }

    /// Carry out one call: each command as calls of the governed tools in the caller's
    /// session; the outcome is the last of them, its result worded as the provider documents.
    /// `refuse` makes (and audits) the outcome of a call refused before any tool ran.
    ///
    /// # Errors
    ///
    /// What a governed call failed with (the host's error, not the tool's).
    pub fn call<O: Outcome, E>(
        self,
        governed: &Governed<'_, O, E>,
        args: &str,
        refuse: &dyn Fn(ToolErrorKind, String) -> O,
    ) -> Result<O, E> {
        match self {
            Adapter::TextEditor => text_editor(governed, args, refuse),
        }
    }
}

/// What an adapter calls: the governed tools in the caller's session (a call as any other, by
/// tool name and arguments), the root the embedder put the text editor's paths under, and
/// whether a workspace path is a directory.
pub struct Governed<'a, O, E> {
    /// Call a governed tool.
    pub call: &'a dyn Fn(&str, &str) -> Result<O, E>,
    /// The root the text editor's paths are under, relative to the workspace.
    pub text_editor_root: Option<&'a str>,
    /// Whether the workspace path is a directory.
    pub is_directory: &'a dyn Fn(&str) -> bool,
}

fn text_editor<O: Outcome, E>(governed: &Governed<'_, O, E>, args: &str, refused: &dyn Fn(ToolErrorKind, String) -> O) -> Result<O, E> {
    let command: EditorCommand = match serde_json::from_str(args) {
        Ok(command) => command,
        Err(error) => return Ok(refused(ToolErrorKind::InvalidArgs, format!("invalid arguments to `{TEXT_EDITOR}`: {error}"))),
    };
    let call = |tool: &str, args: Value| (governed.call)(tool, &args.to_string());
    // The path as the model wrote it is how every message names it; the tools get it
    // relative to the workspace (under the embedder's root, if it gave one).
    let shown = command.path().to_owned();
    let path = match workspace_path(governed.text_editor_root, &shown) {
        Ok(path) => path,
        Err(message) => return Ok(refused(ToolErrorKind::InvalidArgs, message)),
    };
    let (name, tool, mut outcome) = match command {
        EditorCommand::View { view_range, .. } => {
            let (offset, limit) = match view_range.as_deref() {
                None => (None, None),
                Some(&[first, last]) if first >= 1 && (last == -1 || last >= first) => {
                    (Some(first), (last != -1).then(|| last - first + 1))
                }
                Some(range) => {
                    return Ok(refused(
                        ToolErrorKind::InvalidArgs,
                        format!(
                            "Invalid `view_range`: {range:?}. It should be [first, last] with 1 <= first <= last, or last = -1 for the end of the file."
                        ),
                    ));
                }
            };
            let mut args = json!({ "path": path });
            if let Some(offset) = offset {
                args["offset"] = json!(offset);
                // To the end: as much as one read returns.
                args["limit"] = json!(limit.unwrap_or(i64::from(u32::MAX)));
            }
            let outcome = call("read_file", args)?;
            match outcome.result() {
                Err(error) if error.kind == ToolErrorKind::Unsupported && error.message.contains("is a directory") => {
                    if view_range.is_some() {
                        return Ok(refused(
                            ToolErrorKind::InvalidArgs,
                            "The `view_range` parameter is not allowed when `path` points to a directory.".to_owned(),
                        ));
                    }
                    // As the reference lists one (`find PATH -maxdepth 2 -not -path '*/.*'`): the
                    // directory, then every path up to two levels below it, hidden ones left out.
                    let mut listed = call("directory_tree", json!({ "path": path, "depth": 2 }))?;
                    if let Ok(output) = listed.result_mut() {
                        let mut lines = vec![shown.clone()];
                        let tree = output.structured.as_ref().and_then(|tree| tree.get("children")).and_then(Value::as_array);
                        list_paths(tree.map_or(&[][..], Vec::as_slice), &shown_path(&shown, ""), &mut lines);
                        output.text = format!(
                            "Here's the files and directories up to 2 levels deep in {shown}, excluding hidden items:\n{}\n",
                            lines.join("\n")
                        );
                    }
                    ("view", "directory_tree", listed)
                }
                // An image is shown as one, with read_file's own line about it.
                _ if outcome.has_images() => ("view", "read_file", outcome),
                _ => {
                    let mut read = outcome;
                    reword(&mut read, |text| {
                        // read_file's pointer to the rest, in the text editor's own parameters.
                        let text = match text.split_once("call read_file with offset ") {
                            Some((before, after)) => {
                                let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
                                format!("{before}view with `view_range` [{digits}, -1]{}", &after[digits.len()..])
                            }
                            None => text.to_owned(),
                        };
                        format!("Here's the result of running `cat -n` on {shown}:\n{text}\n")
                    });
                    if let (Err(error), Some(range)) = (read.result_mut(), view_range.as_deref())
                        && let Some(lines) = line_count_of(&error.message)
                    {
                        error.message = format!(
                            "Invalid `view_range`: {range:?}. Its first element `{}` should be within the range of lines of the file: [1, {lines}]",
                            range[0]
                        );
                    }
                    ("view", "read_file", read)
                }
            }
        }
        EditorCommand::Create { file_text, .. } => {
            let mut outcome = call("write_file", json!({ "path": path, "content": file_text, "create_only": true }))?;
            if let Err(error) = outcome.result_mut()
                && error.kind == ToolErrorKind::Conflict
            {
                error.message = format!(
                    "File already exists at: {shown}. Cannot overwrite files using command `create`: use `str_replace` to change it."
                );
            }
            reword(&mut outcome, |_| format!("File created successfully at: {shown}"));
            ("create", "write_file", outcome)
        }
        EditorCommand::StrReplace { old_str, new_str, .. } => {
            let args = json!({ "path": path, "old_string": old_str, "new_string": new_str.unwrap_or_default() });
            let mut outcome = call("edit_file", args)?;
            if let Err(error) = outcome.result_mut()
                && error.kind == ToolErrorKind::Conflict
            {
                if error.message.contains("was not found") {
                    error.message = format!("No replacement was performed, old_str `{old_str}` did not appear verbatim in {shown}.");
                } else if let Some(lines) =
                    error.message.split_once("(lines ").and_then(|(_, rest)| rest.split_once(')')).map(|(lines, _)| lines)
                {
                    error.message = format!(
                        "No replacement was performed. Multiple occurrences of old_str `{old_str}` in lines [{lines}]. Please ensure it is unique"
                    );
                }
            }
            reword(&mut outcome, |text| {
                let snippet = text.split_once("\n\n").map_or("", |(_, snippet)| snippet);
                format!(
                    "The file {shown} has been edited. Here's the result of running `cat -n` on a snippet of {shown}:\n{snippet}\nReview the changes and make sure they are as expected. Edit the file again if necessary."
                )
            });
            ("str_replace", "edit_file", outcome)
        }
        EditorCommand::Insert { insert_line, insert_text, new_str, .. } => {
            let Some(text) = insert_text.or(new_str) else {
                return Ok(refused(ToolErrorKind::InvalidArgs, "Parameter `insert_text` is required for command: insert".to_owned()));
            };
            let mut outcome = call("insert_text", json!({ "path": path, "line": insert_line, "text": text }))?;
            if let Err(error) = outcome.result_mut()
                && let Some(lines) = line_count_of(&error.message)
            {
                error.message = format!(
                    "Invalid `insert_line` parameter: {insert_line}. It should be within the range of lines of the file: [0, {lines}]"
                );
            }
            reword(&mut outcome, |text| {
                let snippet = text.split_once("\n\n").map_or("", |(_, snippet)| snippet);
                format!(
                    "The file {shown} has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n{snippet}\nReview the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary."
                )
            });
            ("insert", "insert_text", outcome)
        }
        EditorCommand::UndoEdit { .. } => {
            let mut outcome = call(UNDO_EDIT, json!({ "path": path }))?;
            if let Err(error) = outcome.result_mut()
                && error.kind == ToolErrorKind::NotFound
            {
                error.message = format!("No edit history found for {shown}.");
            }
            reword(&mut outcome, |text| format!("Last edit to {shown} undone successfully. {text}"));
            ("undo_edit", UNDO_EDIT, outcome)
        }
    };
    // What every command may meet, in the reference's words.
    if let Err(error) = outcome.result_mut() {
        if error.kind == ToolErrorKind::NotFound && error.message.contains("does not exist") {
            error.message = format!("The path {shown} does not exist. Please provide a valid path.");
        } else if error.kind == ToolErrorKind::Unsupported && name != "view" && (governed.is_directory)(&path) {
            // Seen by the tool already (it would have been refused, not unsupported, if hidden).
            error.message = format!("The path {shown} is a directory and only the `view` command can be used on directories");
        }
    }
    if let Ok(output) = outcome.result_mut() {
        let result = output.structured.take();
        output.structured = Some(json!({ "command": name, "tool": tool, "result": result }).into());
    }
    Ok(outcome)
}

impl EditorCommand {
    fn path(&self) -> &str {
        match self {
            EditorCommand::View { path, .. }
            | EditorCommand::Create { path, .. }
            | EditorCommand::StrReplace { path, .. }
            | EditorCommand::Insert { path, .. }
            | EditorCommand::UndoEdit { path } => path,
        }
    }
}

/// The workspace-relative path of `path` as the model wrote it: relative already, or absolute
/// under the root the embedder maps the workspace to (`/repo/x.py` with root `/repo`).
fn workspace_path(root: Option<&str>, path: &str) -> Result<String, String> {
    let Some(root) = root.map(|root| root.trim_end_matches('/')).filter(|_| path.starts_with('/')) else {
        return Ok(path.to_owned());
    };
    if path == root || path == format!("{root}/") {
        return Ok(".".to_owned());
    }
    match path.strip_prefix(&format!("{root}/")) {
        Some(relative) => Ok(relative.to_owned()),
        None => Err(format!("The path {path} is not under {root}, the root of the files you can edit. Please provide a valid path.")),
    }
}

/// The prefix of the paths listed under the directory the model named `shown`.
fn shown_path(shown: &str, below: &str) -> String {
    match shown.trim_end_matches('/') {
        "" | "." => below.to_owned(),
        base => format!("{base}/{below}"),
    }
}

/// Each entry of a `directory_tree` result's `children`, as a path under `prefix`, depth
/// first, hidden entries (and what is under them) left out.
fn list_paths(children: &[Value], prefix: &str, lines: &mut Vec<String>) {
    for child in children {
        let Some(name) = child.get("name").and_then(Value::as_str).filter(|name| !name.starts_with('.')) else {
            continue;
        };
        let path = format!("{prefix}{name}");
        lines.push(path.clone());
        if let Some(grandchildren) = child.get("children").and_then(Value::as_array) {
            list_paths(grandchildren, &format!("{path}/"), lines);
        }
    }
}

/// The number of lines a tool's "past the end ..., which has N lines" message names.
fn line_count_of(message: &str) -> Option<u64> {
    let (_, rest) = message.split_once("which has ")?;
    rest.split(' ').next()?.parse().ok()
}

/// Rewrite a successful outcome's text.
fn reword<O: Outcome>(outcome: &mut O, wording: impl FnOnce(&str) -> String) {
    if let Ok(ToolOutput { text, .. }) = outcome.result_mut() {
        *text = wording(text);
    }
}

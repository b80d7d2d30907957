//! The patch text into operations, with errors that name the line.

use toolcell_sdk::{ToolError, WorkspacePath};

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";

/// One file section of a patch.
#[derive(Debug)]
pub(crate) enum Operation {
    Add { path: WorkspacePath, lines: Vec<String> },
    Delete { path: WorkspacePath },
    Update { path: WorkspacePath, moved_to: Option<WorkspacePath>, chunks: Vec<Chunk> },
}

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Line {
    /// ` text`: unchanged.
    Context(String),
    /// `-text`.
    Removed(String),
    /// `+text`.
    Added(String),
}

/// One hunk of an update.
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    /// The text after `@@ `, a line that comes before the change.
    pub(crate) context: Option<String>,
    /// The hunk's lines, in order.
    pub(crate) lines: Vec<Line>,
    /// The hunk ends at the end of the file.
    pub(crate) end_of_file: bool,
}

impl Chunk {
    /// The lines the hunk expects in the file: context and removed lines.
    pub(crate) fn old(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter_map(|line| match line {
                Line::Context(text) | Line::Removed(text) => Some(text.clone()),
                Line::Added(_) => None,
            })
            .collect()
    }

    /// Whether the hunk adds or removes anything.
    pub(crate) fn changes(&self) -> bool {
        self.lines.iter().any(|line| !matches!(line, Line::Context(_)))
    }
}

/// Parse a whole patch.
pub(crate) fn parse(patch: &str) -> Result<Vec<Operation>, ToolError> {
    let all: Vec<&str> = patch.trim().lines().map(|line| line.strip_suffix('\r').unwrap_or(line)).collect();
    // Line numbers in messages count the lines as sent, a heredoc's first line included.
    let (lines, first_number) = match unwrap_heredoc(&all) {
        Some(inner) => (inner, 2),
        None => (all.as_slice(), 1),
    };
    let error = |number: usize, what: String| {
        ToolError::InvalidArgs(format!("patch line {}: {what}. Nothing was changed.", number + first_number - 1))
    };
    if lines.first().map(|line| line.trim()) != Some(BEGIN) {
        return Err(ToolError::InvalidArgs(format!("the patch must start with `{BEGIN}` (and end with `{END}`). Nothing was changed.")));
    }
    if lines.last().map(|line| line.trim()) != Some(END) {
        return Err(ToolError::InvalidArgs(format!("the patch must end with `{END}`. Nothing was changed.")));
    }
    let body = &lines[1..lines.len() - 1];
    let path_of = |number: usize, raw: &str| WorkspacePath::parse(raw.trim()).map_err(|problem| error(number, problem_message(problem)));
    // A path the patch creates (an added file, a move's destination).
    let new_path_of = |number: usize, raw: &str| {
        let path = path_of(number, raw)?;
        path.check_new_name().map_err(|problem| error(number, problem_message(problem)))?;
        Ok::<_, ToolError>(path)
    };
    let mut operations = Vec::new();
    let mut index = 0;
    while index < body.len() {
        let number = index + 2;
        // Section headers may be indented: models often pad them.
        let line = body[index].trim_start();
        if let Some(raw) = line.strip_prefix(ADD) {
            let path = new_path_of(number, raw)?;
            index += 1;
            let mut added = Vec::new();
            while index < body.len() && !is_header(body[index]) {
                match body[index].strip_prefix('+') {
                    Some(text) => added.push(text.to_owned()),
                    None => return Err(error(index + 2, "every line of an added file starts with `+`".to_owned())),
                }
                index += 1;
            }
            operations.push(Operation::Add { path, lines: added });
        } else if let Some(raw) = line.strip_prefix(DELETE) {
            operations.push(Operation::Delete { path: path_of(number, raw)? });
            index += 1;
        } else if let Some(raw) = line.strip_prefix(UPDATE) {
            let path = path_of(number, raw)?;
            index += 1;
            let mut moved_to = None;
            if let Some(raw) = body.get(index).and_then(|line| line.trim_start().strip_prefix(MOVE)) {
                moved_to = Some(new_path_of(index + 2, raw)?);
                index += 1;
            }
            let mut chunks: Vec<Chunk> = Vec::new();
            while index < body.len() && (!is_header(body[index]) || body[index].trim() == END_OF_FILE) {
                let line = body[index];
                let number = index + 2;
                if line.trim() == END_OF_FILE {
                    match chunks.last_mut() {
                        Some(chunk) => chunk.end_of_file = true,
                        None => return Err(error(number, format!("`{END_OF_FILE}` comes before any hunk"))),
                    }
                } else if line == "@@" || line.starts_with("@@ ") {
                    let context = line.strip_prefix("@@").map(str::trim).filter(|text| !text.is_empty()).map(str::to_owned);
                    chunks.push(Chunk { context, ..Chunk::default() });
                } else {
                    if chunks.is_empty() || chunks.last().is_some_and(|chunk| chunk.end_of_file) {
                        // The first hunk may leave out its `@@` line.
                        chunks.push(Chunk::default());
                    }
                    let Some(chunk) = chunks.last_mut() else {
                        return Err(error(number, "a hunk line outside any hunk".to_owned()));
                    };
                    match line.chars().next() {
                        Some(' ') => chunk.lines.push(Line::Context(line[1..].to_owned())),
                        // A blank line is a blank context line.
                        None => chunk.lines.push(Line::Context(String::new())),
                        Some('-') => chunk.lines.push(Line::Removed(line[1..].to_owned())),
                        Some('+') => chunk.lines.push(Line::Added(line[1..].to_owned())),
                        Some(_) => {
                            return Err(error(
                                number,
                                format!(
                                    "`{}` is not a hunk line: each starts with ` ` (context), `-` (removed) or `+` (added)",
                                    shorten(line)
                                ),
                            ));
                        }
                    }
                }
                index += 1;
            }
            if !chunks.iter().any(Chunk::changes) && moved_to.is_none() {
                return Err(error(number, format!("`{UPDATE}{}` has no change in it", raw.trim())));
            }
            operations.push(Operation::Update { path, moved_to, chunks });
        } else if line.trim().is_empty() {
            index += 1;
        } else {
            return Err(error(number, format!("expected `{ADD}PATH`, `{UPDATE}PATH` or `{DELETE}PATH`, found `{}`", shorten(line))));
        }
    }
    if operations.is_empty() {
        return Err(ToolError::InvalidArgs("the patch has no file sections: nothing to do".to_owned()));
    }
    Ok(operations)
}

/// Whether `line` starts a section (or ends a hunk): any `*** ` line, or a known header
/// indented (an indented line that is not a header is a context line).
fn is_header(line: &str) -> bool {
    if line.starts_with("*** ") {
        return true;
    }
    let trimmed = line.trim_start();
    [ADD, DELETE, UPDATE, MOVE].iter().any(|header| trimmed.starts_with(header)) || trimmed == END_OF_FILE || trimmed == END
}

/// The patch inside a shell heredoc (`<<'EOF'` … `EOF`, optionally after an `apply_patch`
/// command), as models sometimes send it; `None` if `lines` is not wrapped so.
fn unwrap_heredoc<'a>(lines: &'a [&'a str]) -> Option<&'a [&'a str]> {
    let (first, rest) = lines.split_first()?;
    let (last, inner) = rest.split_last()?;
    let first = first.trim();
    let first = first.strip_prefix("apply_patch").or_else(|| first.strip_prefix("applypatch")).unwrap_or(first).trim_start();
    let marker = first.strip_prefix("<<")?.trim_start_matches('-').trim();
    let delimiter = match marker.chars().next()? {
        quote @ ('\'' | '"') => marker.strip_prefix(quote)?.strip_suffix(quote)?,
        _ => marker,
    };
    let is_word = !delimiter.is_empty() && delimiter.chars().all(|character| character.is_ascii_alphanumeric() || character == '_');
    (is_word && last.trim() == delimiter).then_some(inner)
}

fn problem_message(problem: ToolError) -> String {
    toolcell_sdk::error_parts(&problem).1.to_owned()
}

fn shorten(line: &str) -> String {
    let escaped: String = line.chars().flat_map(char::escape_default).collect();
    match escaped.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &escaped[..cut]),
        None => escaped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_section() {
        let patch = "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Update File: b.txt\n*** Move to: c.txt\n@@ fn x\n ctx\n-old\n+new\n*** End of File\n*** Delete File: d.txt\n*** End Patch\n";
        let operations = parse(patch).expect("parses");
        assert_eq!(operations.len(), 3);
        match &operations[1] {
            Operation::Update { path, moved_to, chunks } => {
                assert_eq!(path.as_str(), "b.txt");
                assert_eq!(moved_to.as_ref().map(WorkspacePath::as_str), Some("c.txt"));
                assert_eq!(chunks.len(), 1);
                assert_eq!(chunks[0].context.as_deref(), Some("fn x"));
                assert_eq!(
                    chunks[0].lines,
                    [Line::Context("ctx".to_owned()), Line::Removed("old".to_owned()), Line::Added("new".to_owned())]
                );
                assert!(chunks[0].end_of_file);
            }
            other => panic!("expected an update, got {other:?}"),
        }
    }

    #[test]
    fn lenient_forms_models_send() {
        let inner = "*** Begin Patch\n  *** Update File: a.txt\n@@\n-old\n+new\n   *** End of File\n *** Delete File: b.txt\n*** End Patch";
        for patch in [
            inner.to_owned(),
            format!("<<'EOF'\n{inner}\nEOF"),
            format!("apply_patch <<\"PATCH\"\n{inner}\nPATCH\n"),
            format!("<<-EOF\n{inner}\n  EOF"),
        ] {
            let operations = parse(&patch).unwrap_or_else(|error| panic!("{patch:?}: {}", problem_message(error)));
            assert_eq!(operations.len(), 2, "{patch:?}");
            match &operations[0] {
                Operation::Update { path, chunks, .. } => {
                    assert_eq!(path.as_str(), "a.txt");
                    assert!(chunks[0].end_of_file);
                }
                other => panic!("expected an update, got {other:?}"),
            }
        }
        // An indented line that is no header is context.
        let operations = parse("*** Begin Patch\n*** Update File: a\n  *** not a header\n-x\n+y\n*** End Patch").expect("parses");
        match &operations[0] {
            Operation::Update { chunks, .. } => assert_eq!(chunks[0].lines[0], Line::Context(" *** not a header".to_owned())),
            other => panic!("expected an update, got {other:?}"),
        }
        // A wrapper whose ends disagree is not unwrapped.
        assert!(parse(&format!("<<'EOF'\n{inner}\nEND")).is_err());
        // Line numbers count the lines as sent, the wrapper's included.
        match parse("<<'EOF'\n*** Begin Patch\n*** Frobnicate: a\n*** End Patch\nEOF") {
            Err(error) => assert!(problem_message(error).starts_with("patch line 3:")),
            Ok(_) => panic!("parsed"),
        }
    }

    #[test]
    fn errors_name_the_line() {
        let message = |patch: &str| match parse(patch) {
            Err(error) => problem_message(error),
            Ok(_) => "parsed".to_owned(),
        };
        assert!(message("*** Update File: a\n").contains("must start with"));
        assert!(message("*** Begin Patch\n*** Frobnicate: a\n*** End Patch").starts_with("patch line 2:"));
        assert!(message("*** Begin Patch\n*** Add File: a\nno plus\n*** End Patch").starts_with("patch line 3:"));
        assert!(message("*** Begin Patch\n*** Add File: ../a\n+x\n*** End Patch").contains("leaves the workspace"));
    }
}

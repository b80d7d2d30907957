//! An update section's hunks applied to a file's text: each hunk found (exactly, else up to
//! whitespace, else up to typographic punctuation) and replaced, line endings kept.

use super::*;

/// Apply an update section's hunks, in order, to `body`.
pub(crate) fn apply_chunks(path: &WorkspacePath, body: &str, chunks: &[Chunk]) -> Result<String, ToolError> {
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
            // New lines take the line ending of the line they follow (or precede, at the top).
            let neighbour = at.checked_sub(1).or((!lines.is_empty()).then_some(0)).and_then(|index| lines.get(index));
            let added: Vec<String> = replacement(hunk, &[], neighbour.is_some_and(|line| line.ends_with('\r')));
            // Appended at the end, it says nothing of where the next hunk is: that one is
            // still looked for from here (as Codex does), so a later hunk may change earlier
            // lines.
            if at < lines.len() {
                cursor = at + added.len();
            }
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
        let replaced = replacement(hunk, &lines[at..at + old.len()], false);
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
///
/// In a file of mixed line endings each line keeps its `\r`: an added line takes the ending
/// of the file's line before it (the first matched line's, at the top; `crlf` when nothing
/// was matched).
pub(crate) fn replacement(hunk: &[Line], matched: &[String], crlf: bool) -> Vec<String> {
    let mut cr = matched.first().map_or(crlf, |line| line.ends_with('\r'));
    let mut matched = matched.iter();
    let mut replaced = Vec::with_capacity(hunk.len());
    for line in hunk {
        match line {
            Line::Context(text) => match matched.next() {
                Some(own) => {
                    cr = own.ends_with('\r');
                    replaced.push(own.clone());
                }
                None => replaced.push(text.clone()),
            },
            Line::Removed(_) => {
                if let Some(own) = matched.next() {
                    cr = own.ends_with('\r');
                }
            }
            Line::Added(text) if cr && !text.ends_with('\r') => replaced.push(format!("{text}\r")),
            Line::Added(text) => replaced.push(text.clone()),
        }
    }
    replaced
}

/// Where `pattern` starts in `lines` at or after `start`: exactly, else ignoring trailing
/// whitespace, else ignoring surrounding whitespace, else also taking typographic punctuation
/// in either for its ASCII twin (models write `-` and `"` where files hold `–` and `“`). With
/// `at_end`, the end of the file is tried first.
pub(crate) fn seek(lines: &[String], pattern: &[String], start: usize, at_end: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let comparisons: [fn(&str, &str) -> bool; 4] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
        |a, b| a.trim().chars().map(plain_punctuation).eq(b.trim().chars().map(plain_punctuation)),
    ];
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

/// The ASCII twin of a typographic dash, quote or space.
pub(crate) fn plain_punctuation(character: char) -> char {
    match character {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}'..='\u{201B}' | '\u{2032}' => '\'',
        '\u{201C}'..='\u{201F}' | '\u{2033}' => '"',
        '\u{00A0}' | '\u{2002}'..='\u{200B}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

toolcell_sdk::export_tool!(ApplyPatch);

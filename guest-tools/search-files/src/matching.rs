//! The query compiled for how it is matched, and a search's results as they are taken: the
//! page (`offset`, `max_results`), the counts, and each file's matching lines.

use super::*;

/// The query, compiled for how it is matched.
pub(crate) enum Matcher {
    /// Each line on its own (`^` and `$` are the line's ends), and, when it can stand in for
    /// it, a regex matching the whole file at once: a file it does not match has no matching
    /// line.
    /// `literal`, when known, is held by every match: only lines holding it are matched.
    Lines { line: regex::bytes::Regex, file: Option<regex::bytes::Regex>, literal: Option<memchr::memmem::Finder<'static>> },
    /// Over the whole file: a match may span lines.
    Multiline(regex::bytes::Regex),
}

impl Matcher {
    /// Both forms match bytes, as ripgrep does: files are searched without being decoded, and
    /// a byte that is not UTF-8 matches nothing unless the expression asks for bytes
    /// (`(?-u:\xFF)`).
    pub(crate) fn compile(query: &str, case_insensitive: bool, multiline: bool) -> Result<Matcher, ToolError> {
        let build = |multi_line: bool| {
            regex::bytes::RegexBuilder::new(query)
                .case_insensitive(case_insensitive)
                .multi_line(multi_line)
                .crlf(multi_line)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|error| ToolError::InvalidArgs(format!("`query` {} is not a valid regular expression: {error}", quote(query))))
        };
        if multiline {
            return Ok(Matcher::Multiline(build(true)?));
        }
        let line = build(false)?;
        // In multi-line mode `^` and `$` match at every line's ends, so a line's match is also
        // a match in the whole file; only `\A`, `\z` and `(?-m)` (the text's own ends) break that.
        let whole_file_is_sound = regex_syntax::ParserBuilder::new()
            .case_insensitive(case_insensitive)
            .multi_line(true)
            .crlf(true)
            .build()
            .parse(query)
            .is_ok_and(|hir| {
                let looks = hir.properties().look_set();
                !looks.contains(regex_syntax::hir::Look::Start) && !looks.contains(regex_syntax::hir::Look::End)
            });
        let file = if whole_file_is_sound { Some(build(true)?) } else { None };
        Ok(Matcher::Lines { line, file, literal: crate::literal::required(query, case_insensitive) })
    }

    /// Whether `bytes` (a whole file) has a match.
    pub(crate) fn has_match(&self, bytes: &[u8]) -> bool {
        match self {
            Matcher::Lines { line, file, literal } => matching_lines(line, file.as_ref(), literal.as_ref(), bytes).next().is_some(),
            Matcher::Multiline(regex) => regex.is_match(bytes),
        }
    }

    /// How many matches `bytes` has: matching lines, or matches when they may span lines.
    pub(crate) fn count(&self, bytes: &[u8]) -> usize {
        match self {
            Matcher::Lines { line, file, literal } => matching_lines(line, file.as_ref(), literal.as_ref(), bytes).count(),
            Matcher::Multiline(regex) => regex.find_iter(bytes).count(),
        }
    }

    /// The matches of `bytes` as ranges of 0-based line numbers, first and last line
    /// included, in order and not overlapping (matches sharing a line are one range).
    pub(crate) fn hits(&self, bytes: &[u8], lines: &[&[u8]]) -> Vec<(usize, usize)> {
        match self {
            Matcher::Lines { line, file, literal } => {
                matching_lines(line, file.as_ref(), literal.as_ref(), bytes).map(|index| (index, index)).collect()
            }
            Matcher::Multiline(regex) => {
                let starts = line_starts(bytes);
                let line_of = |offset: usize| starts.partition_point(|&start| start <= offset).saturating_sub(1);
                let mut hits: Vec<(usize, usize)> = Vec::new();
                for found in regex.find_iter(bytes) {
                    let first = line_of(found.start());
                    // The match's last byte decides its last line (a match ending with a
                    // newline does not reach the next line).
                    let last = line_of(found.end().saturating_sub(1).max(found.start())).min(lines.len().saturating_sub(1));
                    match hits.last_mut() {
                        Some(previous) if first <= previous.1 => previous.1 = previous.1.max(last),
                        _ => hits.push((first, last.max(first))),
                    }
                }
                hits
            }
        }
    }
}

/// The 0-based numbers of the lines of `bytes` (as [`text::byte_lines`] cuts them) that
/// `line` matches, in order.
///
/// With `file` (the query over the whole text, which matches wherever a line does), the
/// buffer is searched at once, as ripgrep does: `file` finds the next candidate with its
/// literal prefilter, only the line around it is matched on its own, and the lines between
/// are never looked at one by one. With `literal` (held by every match), it is what is looked
/// for instead, with `memmem`, as ripgrep does. Without either, each line is matched.
fn matching_lines<'a>(
    line: &'a regex::bytes::Regex,
    file: Option<&'a regex::bytes::Regex>,
    literal: Option<&'a memchr::memmem::Finder<'static>>,
    bytes: &'a [u8],
) -> impl Iterator<Item = usize> + 'a {
    let mut each_line = (file.is_none() && literal.is_none()).then(|| text::byte_lines(bytes).enumerate());
    // Where the search goes on, and the number of the line starting at `counted_to`.
    let (mut from, mut counted_to, mut number) = (0, 0, 0);
    std::iter::from_fn(move || {
        if let Some(lines) = each_line.as_mut() {
            return lines.find(|(_, text)| line.is_match(text)).map(|(index, _)| index);
        }
        loop {
            // A text ending with a newline has no line after it.
            if from >= bytes.len() {
                return None;
            }
            let found = match literal {
                Some(literal) => from + literal.find(&bytes[from..])?,
                None => file?.find_at(bytes, from)?.start(),
            };
            if found == bytes.len() && bytes.last() == Some(&b'\n') {
                return None;
            }
            let start = memchr::memrchr(b'\n', &bytes[..found]).map_or(0, |newline| newline + 1);
            let (end, next) = match memchr::memchr(b'\n', &bytes[found..]) {
                Some(newline) => (found + newline, found + newline + 1),
                None => (bytes.len(), bytes.len()),
            };
            let mut text = &bytes[start..end];
            if end < bytes.len() {
                text = text.strip_suffix(b"\r").unwrap_or(text);
            }
            number += memchr::memchr_iter(b'\n', &bytes[counted_to..start]).count();
            counted_to = start;
            from = next;
            if line.is_match(text) {
                return Some(number);
            }
        }
    })
}

/// The byte offset at which each line of `bytes` starts.
pub(crate) fn line_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = vec![0];
    starts.extend(memchr::memchr_iter(b'\n', bytes).map(|newline| newline + 1).filter(|&start| start < bytes.len()));
    starts
}

pub(crate) struct Search {
    pub(crate) matcher: Matcher,
    pub(crate) mode: Mode,
    pub(crate) before: usize,
    pub(crate) after: usize,
    /// Results skipped before the page starts.
    pub(crate) offset: u64,
    pub(crate) max_results: u64,
    /// Text lines of the result.
    pub(crate) results: Vec<String>,
    pub(crate) structured: Vec<serde_json::Value>,
    /// Results met so far, skipped ones included: files (files, count) or matches (content).
    pub(crate) seen: u64,
    pub(crate) truncated: bool,
    pub(crate) files_searched: u64,
    pub(crate) skipped_binary: u64,
    pub(crate) skipped_large: u64,
}

/// What to do with the next result.
pub(crate) enum Take {
    /// Before the page: counted, not shown.
    Skip,
    Show,
    /// The page is full: the search stops.
    Stop,
}

impl Search {
    pub(crate) fn next_result(&mut self) -> Take {
        if self.seen == self.offset.saturating_add(self.max_results) {
            self.truncated = true;
            return Take::Stop;
        }
        self.seen += 1;
        if self.seen > self.offset { Take::Show } else { Take::Skip }
    }

    /// Search one regular file (a file that cannot be read is passed over).
    pub(crate) fn file(&mut self, path: &WorkspacePath) -> ControlFlow<()> {
        let Some(bytes) = searchable(path, &mut self.files_searched, &mut self.skipped_binary, &mut self.skipped_large) else {
            return ControlFlow::Continue(());
        };
        match self.mode {
            Mode::Files => {
                if self.matcher.has_match(&bytes) {
                    return self.emit_file(path, None);
                }
                ControlFlow::Continue(())
            }
            Mode::Count => match self.matcher.count(&bytes) {
                0 => ControlFlow::Continue(()),
                count => self.emit_file(path, Some(count)),
            },
            Mode::Content => self.content(path, &bytes),
        }
    }

    /// The page from the parts of a split search. The parts told which files match (and, in
    /// `count` mode, how often): those are shown as they are; only `content` reads its files
    /// again, for their lines, and stops where the page is full.
    pub(crate) fn assemble(&mut self, merged: &Merged) {
        for (path, count) in &merged.files {
            let taken = match self.mode {
                Mode::Files => self.emit_file(path, None),
                Mode::Count => self.emit_file(path, Some(usize::try_from(*count).unwrap_or(usize::MAX))),
                Mode::Content => self.file(path),
            };
            if taken.is_break() {
                break;
            }
        }
        self.files_searched = merged.files_searched;
        self.skipped_binary = merged.skipped_binary;
        self.skipped_large = merged.skipped_large;
    }

    pub(crate) fn emit_file(&mut self, path: &WorkspacePath, count: Option<usize>) -> ControlFlow<()> {
        match self.next_result() {
            Take::Stop => return ControlFlow::Break(()),
            Take::Skip => return ControlFlow::Continue(()),
            Take::Show => {}
        }
        match count {
            None => {
                self.results.push(path.to_string());
                self.structured.push(json!(path.as_str()));
            }
            Some(count) => {
                self.results.push(format!("{path}:{count}"));
                self.structured.push(json!({ "path": path.as_str(), "count": count }));
            }
        }
        ControlFlow::Continue(())
    }

    pub(crate) fn content(&mut self, path: &WorkspacePath, content: &[u8]) -> ControlFlow<()> {
        let lines: Vec<&[u8]> = text::byte_lines(content).collect();
        let hits = self.matcher.hits(content, &lines);
        let has_context = self.before > 0 || self.after > 0;
        let mut last_printed: Option<usize> = None;
        // Matching is over bytes; printed lines of a file in a legacy single- or multi-byte
        // encoding (windows-1252, Shift_JIS) are decoded in it, as read_file shows them.
        let legacy = (!hits.is_empty() && std::str::from_utf8(content).is_err())
            .then(|| encoding::detect(content, true))
            .flatten()
            .filter(|found| !found.is_utf8() && !found.is_utf16());
        let render = |line: usize| {
            let decoded = match legacy {
                Some(found) => found.encoding.decode_without_bom_handling(lines[line]).0,
                None => text::decode(lines[line]),
            };
            text::clip(&decoded, MAX_LINE_CHARS).into_owned()
        };
        for (number, &(first, last)) in hits.iter().enumerate() {
            match self.next_result() {
                Take::Stop => return ControlFlow::Break(()),
                Take::Skip => continue,
                Take::Show => {}
            }
            let mut from = first.saturating_sub(self.before);
            match last_printed {
                Some(printed) if printed + 1 >= from => from = printed + 1,
                Some(_) => self.results.push("--".to_owned()),
                None if has_context && !self.results.is_empty() => self.results.push("--".to_owned()),
                None => {}
            }
            // After-context stops where the next match starts: it prints itself.
            let next_first = hits.get(number + 1).map_or(usize::MAX, |next| next.0);
            let to = last.saturating_add(self.after).min(lines.len().saturating_sub(1)).min(next_first.saturating_sub(1)).max(last);
            for line in from..=to {
                let separator = if (first..=last).contains(&line) { ':' } else { '-' };
                self.results.push(format!("{path}{separator}{}{separator}{}", line + 1, render(line)));
            }
            last_printed = Some(to);
            let shown: Vec<String> = (first..=last).take(MAX_MATCH_LINES).map(render).collect();
            let mut structured = json!({ "path": path.as_str(), "line": first + 1, "text": shown.join("\n") });
            if last != first {
                structured["end_line"] = json!(last + 1);
            }
            self.structured.push(structured);
        }
        ControlFlow::Continue(())
    }

    pub(crate) fn finish(self, query: &str, root: &WorkspacePath, unreadable_directories: usize) -> Output {
        let unit = if self.mode == Mode::Content { "matches" } else { "files" };
        let mut text = if !self.results.is_empty() {
            self.results.join("\n")
        } else if self.offset > 0 && self.seen > 0 {
            format!(
                "No more matches for {} in {}: there are {} {unit} in all, fewer than `offset` {} skips.",
                quote(query),
                quote(root.as_str()),
                self.seen,
                self.offset
            )
        } else {
            format!("No matches for {} in {}.", quote(query), quote(root.as_str()))
        };
        let next_offset = self.offset.saturating_add(self.max_results);
        if self.truncated {
            text.push_str(&format!(
                "\n[{unit} {}-{next_offset} shown; more follow: call search_files again with `offset` {next_offset} for the next page, or narrow `path`, `type`, `include` or `query`]",
                self.offset + 1
            ));
        }
        let mut skipped = Vec::new();
        if self.skipped_binary > 0 {
            skipped.push(format!("{} binary", self.skipped_binary));
        }
        if self.skipped_large > 0 {
            skipped.push(format!("{} over 16 MiB", self.skipped_large));
        }
        if unreadable_directories > 0 {
            skipped.push(format!("{unreadable_directories} unreadable directories"));
        }
        if !skipped.is_empty() && self.results.is_empty() {
            text.push_str(&format!("\n[skipped: {}]", skipped.join(", ")));
        }
        let (mode, key) = match self.mode {
            Mode::Files => ("files", "files"),
            Mode::Content => ("content", "matches"),
            Mode::Count => ("count", "counts"),
        };
        let mut structured = json!({
            "mode": mode,
            key: self.structured,
            "truncated": self.truncated,
            "files_searched": self.files_searched,
            "skipped_binary": self.skipped_binary,
            "skipped_large": self.skipped_large,
        });
        if self.truncated {
            structured["next_offset"] = json!(next_offset);
        }
        Output::text(text).with_structured(structured)
    }
}

toolcell_sdk::export_tool!(SearchFiles);

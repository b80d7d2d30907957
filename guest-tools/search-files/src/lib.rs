//! `search_files`: regular-expression search over the workspace's text files.

use std::ops::ControlFlow;

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::quote;
use toolcell_sdk::walk::{self, EntryKind};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};
use toolcell_sdk::{scan, text};

const DEFAULT_MAX_RESULTS: u64 = 200;
const MAX_MAX_RESULTS: u64 = 10_000;
const MAX_CONTEXT: u64 = 20;
/// Matched and context lines are cut to this many characters.
const MAX_LINE_CHARS: usize = 500;
/// Larger files are skipped (and counted).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// The compiled regex may not grow past this (the regex crate guarantees linear-time matching;
/// this bounds its memory).
const REGEX_SIZE_LIMIT: usize = 8 * 1024 * 1024;

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
enum Mode {
    #[default]
    Files,
    Content,
    Count,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Globs {
    One(String),
    Many(Vec<String>),
}

impl Globs {
    fn into_vec(self) -> Vec<String> {
        match self {
            Globs::One(glob) => vec![glob],
            Globs::Many(globs) => globs,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    query: String,
    path: Option<String>,
    include: Option<Globs>,
    exclude: Option<Globs>,
    #[serde(default)]
    output_mode: Mode,
    #[serde(default)]
    context: u64,
    #[serde(default)]
    case_insensitive: bool,
    max_results: Option<u64>,
}

struct SearchFiles;

impl Tool for SearchFiles {
    type Args = Args;

    fn info() -> ToolInfo {
        let globs = json!({
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string" } }
            ]
        });
        let mut include = globs.clone();
        include["description"] = json!(
            "Only search files matching these globs (for example `*.rs` or `src/**/*.ts`). A glob without `/` matches the file name; one with `/` matches the workspace-relative path."
        );
        let mut exclude = globs;
        exclude["description"] = json!("Skip files matching these globs (same rules as `include`).");
        ToolInfo::new(
            "search_files",
            "Search files",
            "Search the workspace's text files for a regular expression (Rust `regex` syntax, \
             like ripgrep: `fn\\s+main`, `log.*Error`; escape literal braces and dots). Each \
             line is matched on its own: `^` and `$` are its start and end. \
             `output_mode`: `files` (default) lists the paths that match, `content` shows the \
             matching lines as `path:line:text` (with `context` lines before and after as \
             `path-line-text`, groups separated by `--`), `count` gives `path:count`. Narrow with \
             `path` (a directory or a file) and `include`/`exclude` globs. Binary files, files \
             over 16 MiB and the contents of `.git` are skipped; symlinks are not followed; long \
             lines are cut at 500 characters. Results are in path order and capped by \
             `max_results` (default 200 files or lines), with `truncated` in the structured result.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The regular expression to search for."
                },
                "path": {
                    "type": "string",
                    "description": "The directory or file to search, relative to the workspace root. Default: the whole workspace."
                },
                "include": include,
                "exclude": exclude,
                "output_mode": {
                    "type": "string",
                    "enum": ["files", "content", "count"],
                    "description": "What to return. Default: `files`."
                },
                "context": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_CONTEXT,
                    "description": "With output_mode `content`: lines of context before and after each match. Default: 0."
                },
                "case_insensitive": {
                    "type": "boolean",
                    "description": "Match letters regardless of case. Default: false."
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_MAX_RESULTS,
                    "description": "The most files (files, count) or matching lines (content) to return. Default: 200."
                }
            },
            "required": ["query"],
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"mode": {"enum": ["files", "content", "count"]}, "files": {"type": "array", "items": {"type": "string"}}, "matches": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer", "minimum": 0}, "text": {"type": "string"}}, "required": ["path", "line", "text"]}}, "counts": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "count": {"type": "integer", "minimum": 0}}, "required": ["path", "count"]}}, "truncated": {"type": "boolean"}, "files_searched": {"type": "integer", "minimum": 0}, "skipped_binary": {"type": "integer", "minimum": 0}, "skipped_large": {"type": "integer", "minimum": 0}}, "required": ["mode", "truncated", "files_searched", "skipped_binary", "skipped_large"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let (regex, file_regex) = compile(&args.query, args.case_insensitive)?;
        let include = FileFilter::new("include", args.include)?;
        let exclude = FileFilter::new("exclude", args.exclude)?;
        let root = WorkspacePath::parse(args.path.as_deref().unwrap_or("."))?;
        let max_results = args.max_results.unwrap_or(DEFAULT_MAX_RESULTS);
        let mut search = Search {
            regex,
            file_regex,
            mode: args.output_mode,
            context: usize::try_from(args.context).unwrap_or(0),
            max_results,
            results: Vec::new(),
            structured: Vec::new(),
            emitted: 0,
            truncated: false,
            files_searched: 0,
            skipped_binary: 0,
            skipped_large: 0,
        };
        let metadata = std::fs::metadata(root.as_str()).map_err(|error| root.io_error(error))?;
        let mut unreadable_directories = 0;
        if metadata.is_file() {
            // A single file: whether the cap stopped the search shows in `truncated`.
            let _stopped = search.file(&root);
        } else {
            let summary = walk::walk(&root, true, |entry| {
                if entry.kind != EntryKind::File {
                    return ControlFlow::Continue(());
                }
                if !include.is_empty() && !include.matches(&entry.path) || !exclude.is_empty() && exclude.matches(&entry.path) {
                    return ControlFlow::Continue(());
                }
                search.file(&entry.path)
            })
            .map_err(|error| root.io_error(error))?;
            unreadable_directories = summary.unreadable_directories;
        }
        Ok(search.finish(&args.query, &root, unreadable_directories))
    }
}

/// Compiled `include` or `exclude` globs.
struct FileFilter {
    by_name: globset::GlobSet,
    by_path: globset::GlobSet,
}

impl FileFilter {
    fn new(field: &str, globs: Option<Globs>) -> Result<Self, ToolError> {
        let mut by_name = globset::GlobSetBuilder::new();
        let mut by_path = globset::GlobSetBuilder::new();
        for pattern in globs.map(Globs::into_vec).unwrap_or_default() {
            let glob =
                globset::GlobBuilder::new(&pattern).literal_separator(true).backslash_escape(true).build().map_err(|error| {
                    ToolError::InvalidArgs(format!("`{field}` glob {} is not valid: {}", quote(&pattern), error.kind()))
                })?;
            if pattern.contains('/') {
                by_path.add(glob);
            } else {
                by_name.add(glob);
            }
        }
        let build = |builder: globset::GlobSetBuilder| {
            builder.build().map_err(|error| ToolError::InvalidArgs(format!("`{field}` globs are not valid: {error}")))
        };
        Ok(FileFilter { by_name: build(by_name)?, by_path: build(by_path)? })
    }

    fn is_empty(&self) -> bool {
        self.by_name.is_empty() && self.by_path.is_empty()
    }

    fn matches(&self, path: &WorkspacePath) -> bool {
        let name = path.as_str().rsplit('/').next().unwrap_or(path.as_str());
        self.by_name.is_match(name) || self.by_path.is_match(path.as_str())
    }
}

/// The query compiled to match one line (`^` and `$` are the line's ends), and, when it can
/// stand in for it, to match a whole file at once: a file it does not match has no matching
/// line.
///
/// Both match bytes, as ripgrep does: files are searched without being decoded, and a byte
/// that is not UTF-8 matches nothing unless the expression asks for bytes (`(?-u:\xFF)`).
fn compile(query: &str, case_insensitive: bool) -> Result<(regex::bytes::Regex, Option<regex::bytes::Regex>), ToolError> {
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
    let line = build(false)?;
    // In multi-line mode `^` and `$` match at every line's ends, so a line's match is also a
    // match in the whole file; only `\A`, `\z` and `(?-m)` (the text's own ends) break that.
    let whole_file_is_sound =
        regex_syntax::ParserBuilder::new().case_insensitive(case_insensitive).multi_line(true).crlf(true).build().parse(query).is_ok_and(
            |hir| {
                let looks = hir.properties().look_set();
                !looks.contains(regex_syntax::hir::Look::Start) && !looks.contains(regex_syntax::hir::Look::End)
            },
        );
    let file = if whole_file_is_sound { Some(build(true)?) } else { None };
    Ok((line, file))
}

struct Search {
    regex: regex::bytes::Regex,
    file_regex: Option<regex::bytes::Regex>,
    mode: Mode,
    context: usize,
    max_results: u64,
    /// Text lines of the result.
    results: Vec<String>,
    structured: Vec<serde_json::Value>,
    /// Files (files, count) or matching lines (content) emitted so far.
    emitted: u64,
    truncated: bool,
    files_searched: u64,
    skipped_binary: u64,
    skipped_large: u64,
}

impl Search {
    /// Search one regular file (a file that cannot be read is passed over).
    fn file(&mut self, path: &WorkspacePath) -> ControlFlow<()> {
        let bytes = match scan::read_file(path.as_str(), MAX_FILE_BYTES) {
            Ok(scan::FileContent::Bytes(bytes)) => bytes,
            Ok(scan::FileContent::TooLarge(_)) => {
                self.skipped_large += 1;
                return ControlFlow::Continue(());
            }
            Err(_) => return ControlFlow::Continue(()),
        };
        if text::is_binary(&bytes) {
            self.skipped_binary += 1;
            return ControlFlow::Continue(());
        }
        self.files_searched += 1;
        // Most files do not match at all: one pass over the whole file settles them.
        if self.file_regex.as_ref().is_some_and(|file_regex| !file_regex.is_match(&bytes)) {
            return ControlFlow::Continue(());
        }
        match self.mode {
            Mode::Files => {
                if text::byte_lines(&bytes).any(|line| self.regex.is_match(line)) {
                    return self.emit_file(path, None);
                }
                ControlFlow::Continue(())
            }
            Mode::Count => {
                let count = text::byte_lines(&bytes).filter(|line| self.regex.is_match(line)).count();
                if count > 0 {
                    return self.emit_file(path, Some(count));
                }
                ControlFlow::Continue(())
            }
            Mode::Content => self.content(path, &bytes),
        }
    }

    fn emit_file(&mut self, path: &WorkspacePath, count: Option<usize>) -> ControlFlow<()> {
        if self.emitted == self.max_results {
            self.truncated = true;
            return ControlFlow::Break(());
        }
        self.emitted += 1;
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

    fn content(&mut self, path: &WorkspacePath, content: &[u8]) -> ControlFlow<()> {
        let lines: Vec<&[u8]> = text::byte_lines(content).collect();
        let matching: Vec<usize> = (0..lines.len()).filter(|&index| self.regex.is_match(lines[index])).collect();
        if matching.is_empty() {
            return ControlFlow::Continue(());
        }
        let mut last_printed: Option<usize> = None;
        for &index in &matching {
            if self.emitted == self.max_results {
                self.truncated = true;
                return ControlFlow::Break(());
            }
            self.emitted += 1;
            let from = index.saturating_sub(self.context);
            let to = (index + self.context).min(lines.len() - 1);
            let from = match last_printed {
                Some(printed) if printed + 1 >= from => printed + 1,
                Some(_) => {
                    self.results.push("--".to_owned());
                    from
                }
                None if !self.results.is_empty() && self.context > 0 => {
                    self.results.push("--".to_owned());
                    from
                }
                None => from,
            };
            for (line, content) in lines.iter().enumerate().take(to + 1).skip(from) {
                // Later matches print themselves; context stops at the next match.
                if line > index && matching.binary_search(&line).is_ok() {
                    break;
                }
                let separator = if line == index { ':' } else { '-' };
                let content = text::decode(content);
                let clipped = text::clip(&content, MAX_LINE_CHARS);
                self.results.push(format!("{path}{separator}{}{separator}{clipped}", line + 1));
                last_printed = Some(line);
            }
            self.structured.push(json!({
                "path": path.as_str(),
                "line": index + 1,
                "text": text::clip(&text::decode(lines[index]), MAX_LINE_CHARS),
            }));
        }
        ControlFlow::Continue(())
    }

    fn finish(self, query: &str, root: &WorkspacePath, unreadable_directories: usize) -> Output {
        let mut text = if self.results.is_empty() {
            format!("No matches for {} in {}.", quote(query), quote(root.as_str()))
        } else {
            self.results.join("\n")
        };
        if self.truncated {
            let unit = if self.mode == Mode::Content { "matching lines" } else { "files" };
            text.push_str(&format!(
                "\n[truncated at {} {unit}: narrow `path`, `include` or `query`, or raise `max_results` (up to {MAX_MAX_RESULTS})]",
                self.max_results
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
        Output::text(text).with_structured(json!({
            "mode": mode,
            key: self.structured,
            "truncated": self.truncated,
            "files_searched": self.files_searched,
            "skipped_binary": self.skipped_binary,
            "skipped_large": self.skipped_large,
        }))
    }
}

toolcell_sdk::export_tool!(SearchFiles);

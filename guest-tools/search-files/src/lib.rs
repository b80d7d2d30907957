//! `search_files`: regular-expression search over the workspace's text files.

mod ignore_files;
mod literal;
mod matching;
mod split;

use std::ops::ControlFlow;

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::quote;
use toolcell_sdk::walk::{self, EntryKind};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};
use toolcell_sdk::{encoding, scan, text};

use ignore_files::IgnoreFiles;
use matching::{Matcher, Search};
use split::{Merged, Part, Share};

const DEFAULT_MAX_RESULTS: u64 = 200;
const MAX_MAX_RESULTS: u64 = 10_000;
const MAX_CONTEXT: u64 = 20;
/// Matched and context lines are cut to this many characters.
const MAX_LINE_CHARS: usize = 500;
/// A multiline match shows at most this many of its lines in the structured result.
const MAX_MATCH_LINES: usize = 50;
/// Larger files are skipped (and counted).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// The compiled regex may not grow past this (the regex crate guarantees linear-time matching;
/// this bounds its memory).
const REGEX_SIZE_LIMIT: usize = 8 * 1024 * 1024;
/// A scan that has searched this many files without filling its page asks the host to run it
/// in parts side by side (`context.split`), one per core: smaller trees are not worth the
/// instances, and what larger ones searched before the split is little.
const SPLIT_AFTER_FILES: u64 = 100;
/// A search given more candidates than this by the content index splits as a scan does:
/// most of the tree may match the index and not the pattern.
const SPLIT_CANDIDATES: usize = 4 * SPLIT_AFTER_FILES as usize;
/// Parts asked for; the host runs as many as it has cores for.
const SPLIT_PARTS: u32 = 8;

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
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(one) => vec![one],
            OneOrMany::Many(many) => many,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    query: String,
    path: Option<String>,
    include: Option<OneOrMany>,
    exclude: Option<OneOrMany>,
    #[serde(rename = "type")]
    file_type: Option<OneOrMany>,
    #[serde(default)]
    output_mode: Mode,
    context: Option<u64>,
    before: Option<u64>,
    after: Option<u64>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    multiline: bool,
    respect_gitignore: Option<bool>,
    max_results: Option<u64>,
    #[serde(default)]
    offset: u64,
}

struct SearchFiles;

impl Tool for SearchFiles {
    type Args = Args;

    fn info() -> ToolInfo {
        let one_or_many = json!({
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string" } }
            ]
        });
        let mut include = one_or_many.clone();
        include["description"] = json!(
            "Only search files matching these globs (for example `*.rs` or `src/**/*.ts`). A glob without `/` matches the file name; one with `/` matches the workspace-relative path."
        );
        let mut exclude = one_or_many.clone();
        exclude["description"] = json!("Skip files matching these globs (same rules as `include`).");
        let mut file_type = one_or_many;
        file_type["description"] = json!(
            "Only search files of these types, by ripgrep's type names (`rust`, `py`, `js`, `ts`, `go`, `java`, `c`, `cpp`, `md`, `json`, `yaml`, `toml`, ...)."
        );
        let context = |what: &str| {
            json!({
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_CONTEXT,
                "description": format!("With output_mode `content`: lines of context {what} each match. Default: 0.")
            })
        };
        ToolInfo::new(
            "search_files",
            "Search files",
            "Search the workspace's text files for a regular expression (Rust `regex` syntax, \
             like ripgrep: `fn\\s+main`, `log.*Error`; escape literal braces and dots). Each \
             line is matched on its own (`^` and `$` are its start and end) unless `multiline` \
             is true: then a match may span lines (`\\n` matches a newline; `.` does too after \
             `(?s)`). `output_mode`: `files` (default) lists the paths that match, `content` \
             shows the matching lines as `path:line:text` (with `context`, or `before` and \
             `after`, lines around each match as `path-line-text`, groups separated by `--`), \
             `count` gives `path:count`. Narrow with `path` (a directory or a file), `type` \
             (`rust`, `py`, ...) and `include`/`exclude` globs. Files ignored by `.gitignore` \
             and `.ignore` files (and `.git/info/exclude`) are skipped unless \
             `respect_gitignore` is false; binary files (UTF-16 ones too), files over 16 MiB \
             and the contents of `.git` are always skipped; files are matched as bytes, so in a \
             file not in UTF-8 (windows-1252, say) only ASCII text matches, and its lines are \
             shown decoded; symlinks are not followed; long lines are cut at 500 \
             characters. Results are in path order, `max_results` at a time (default 200 files \
             or lines); when there are more, the result says which `offset` gives the next page.",
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
                "type": file_type,
                "output_mode": {
                    "type": "string",
                    "enum": ["files", "content", "count"],
                    "description": "What to return. Default: `files`."
                },
                "context": context("before and after"),
                "before": context("before (overrides `context`)"),
                "after": context("after (overrides `context`)"),
                "case_insensitive": {
                    "type": "boolean",
                    "description": "Match letters regardless of case. Default: false."
                },
                "multiline": {
                    "type": "boolean",
                    "description": "Let a match span lines (`a\\s+b` across a line break, `(?s)start.*end`). `count` then counts matches. Default: false."
                },
                "respect_gitignore": {
                    "type": "boolean",
                    "description": "Skip files ignored by `.gitignore`/`.ignore` files and `.git/info/exclude`, as ripgrep does. Default: true."
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_MAX_RESULTS,
                    "description": "The most files (files, count) or matches (content) to return. Default: 200."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Skip this many results first: the next page after a truncated result. Default: 0."
                }
            },
            "required": ["query"],
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"mode": {"enum": ["files", "content", "count"]}, "files": {"type": "array", "items": {"type": "string"}}, "matches": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer", "minimum": 0}, "end_line": {"type": "integer", "minimum": 0, "description": "The last line of a multiline match."}, "text": {"type": "string"}}, "required": ["path", "line", "text"]}}, "counts": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "count": {"type": "integer", "minimum": 0}}, "required": ["path", "count"]}}, "truncated": {"type": "boolean"}, "next_offset": {"type": "integer", "minimum": 0, "description": "The `offset` of the next page, when truncated."}, "files_searched": {"type": "integer", "minimum": 0, "description": "The files read. When the page is cut short, a search split into parts may have read some past its end."}, "skipped_binary": {"type": "integer", "minimum": 0, "description": "Of the files read, those skipped as binary."}, "skipped_large": {"type": "integer", "minimum": 0, "description": "Of the files read, those skipped as too large."}}, "required": ["mode", "truncated", "files_searched", "skipped_binary", "skipped_large"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let matcher = Matcher::compile(&args.query, args.case_insensitive, args.multiline)?;
        let include = FileFilter::new("include", args.include)?;
        let exclude = FileFilter::new("exclude", args.exclude)?;
        let types = file_types(args.file_type)?;
        let root = WorkspacePath::parse(args.path.as_deref().unwrap_or("."))?;
        let context = args.context.unwrap_or(0);
        let as_lines = |value: u64| usize::try_from(value).unwrap_or(0);
        let mut search = Search {
            matcher,
            mode: args.output_mode,
            before: as_lines(args.before.unwrap_or(context)),
            after: as_lines(args.after.unwrap_or(context)),
            offset: args.offset,
            max_results: args.max_results.unwrap_or(DEFAULT_MAX_RESULTS),
            results: Vec::new(),
            structured: Vec::new(),
            seen: 0,
            truncated: false,
            files_searched: 0,
            skipped_binary: 0,
            skipped_large: 0,
        };
        let metadata = std::fs::metadata(root.as_str()).map_err(|error| root.io_error(error))?;
        let mut unreadable_directories = 0;
        if metadata.is_file() {
            // A single file named outright is searched whatever filters say; whether the cap
            // stopped the search shows in `truncated`.
            let _stopped = search.file(&root);
        } else {
            let mut ignore_files = args.respect_gitignore.unwrap_or(true).then(|| IgnoreFiles::above(&root));
            let wanted = |path: &WorkspacePath| {
                if !include.is_empty() && !include.matches(path) || !exclude.is_empty() && exclude.matches(path) {
                    return false;
                }
                let name = path.as_str().rsplit('/').next().unwrap_or(path.as_str());
                types.as_ref().is_none_or(|types| types.matched(name, false).is_whitelist())
            };
            // The parts of a split search ran: their matching files, in walk order, give the
            // page exactly as one search would.
            let merged = match toolcell_sdk::shard_results() {
                Some(parts) => Merged::of(parts)?,
                None => None,
            };
            if let Some(merged) = merged {
                search.assemble(&merged);
                unreadable_directories = merged.unreadable_directories;
            // With the workspace's content index, only the files that may match are read; the
            // answer is the same as the walk's.
            } else if let Some(candidates) = toolcell_sdk::search_candidates(&args.query, args.case_insensitive, &root) {
                // A part of a split search takes every count-th candidate of the list the call
                // was given; a long list is split as a long scan is.
                let shard = toolcell_sdk::shard().map(|(index, count)| (index as usize, count.max(1) as usize));
                let (first, step) = shard.unwrap_or((0, 1));
                let splits = shard.is_none() && candidates.len() > SPLIT_CANDIDATES;
                let mut part = Part::new(first);
                for candidate in candidates.iter().skip(first).step_by(step) {
                    let Ok(path) = WorkspacePath::parse(candidate) else {
                        continue;
                    };
                    if ignore_files.as_mut().is_some_and(|ignore_files| ignore_files.ignores(&root, &path)) || !wanted(&path) {
                        continue;
                    }
                    if shard.is_some() {
                        if part.file(&mut search, &path).is_break() {
                            break;
                        }
                        continue;
                    }
                    if splits && search.files_searched == SPLIT_AFTER_FILES && toolcell_sdk::split(SPLIT_PARTS) > 0 {
                        // The host runs the parts, then this call again to assemble them.
                        return Ok(Output::text("split"));
                    }
                    if search.file(&path).is_break() {
                        break;
                    }
                }
                if shard.is_some() {
                    return Ok(part.output(None, 0));
                }
            } else {
                let shard = toolcell_sdk::shard();
                let mut share = shard.map(Share::new);
                let is_part = share.is_some();
                let mut part = Part::new(shard.map_or(0, |(index, _)| index as usize));
                let mut split = false;
                let summary = walk::walk_filtered(
                    &root,
                    true,
                    |directory, children| {
                        if let Some(ignore_files) = ignore_files.as_mut() {
                            ignore_files.enter(directory, children);
                        }
                        if let Some(share) = share.as_mut() {
                            share.enter(directory, children);
                        }
                    },
                    |entry| {
                        if entry.kind != EntryKind::File || !wanted(&entry.path) {
                            return ControlFlow::Continue(());
                        }
                        if is_part {
                            return part.file(&mut search, &entry.path);
                        }
                        if search.files_searched == SPLIT_AFTER_FILES && toolcell_sdk::split(SPLIT_PARTS) > 0 {
                            split = true;
                            return ControlFlow::Break(());
                        }
                        search.file(&entry.path)
                    },
                )
                .map_err(|error| root.io_error(error))?;
                if split {
                    // The host runs the parts, then this call again to assemble them.
                    return Ok(Output::text("split"));
                }
                if let Some(share) = share {
                    return Ok(part.output(Some(share), summary.unreadable_directories));
                }
                unreadable_directories = summary.unreadable_directories;
            }
        }
        Ok(search.finish(&args.query, &root, unreadable_directories))
    }
}

/// The bytes of `path` if it is searched, counted in `searched`: not over 16 MiB (else
/// counted in `skipped_large`), not binary (`skipped_binary`), readable (else passed over).
fn searchable(path: &WorkspacePath, searched: &mut u64, skipped_binary: &mut u64, skipped_large: &mut u64) -> Option<Vec<u8>> {
    let bytes = match scan::read_file(path.as_str(), MAX_FILE_BYTES) {
        Ok(scan::FileContent::Bytes(bytes)) => bytes,
        Ok(scan::FileContent::TooLarge(_)) => {
            *skipped_large += 1;
            return None;
        }
        Err(_) => return None,
    };
    if text::is_binary(&bytes) {
        *skipped_binary += 1;
        return None;
    }
    *searched += 1;
    Some(bytes)
}

/// Compiled `include` or `exclude` globs.
struct FileFilter {
    by_name: globset::GlobSet,
    by_path: globset::GlobSet,
}

impl FileFilter {
    fn new(field: &str, globs: Option<OneOrMany>) -> Result<Self, ToolError> {
        let mut by_name = globset::GlobSetBuilder::new();
        let mut by_path = globset::GlobSetBuilder::new();
        for pattern in globs.map(OneOrMany::into_vec).unwrap_or_default() {
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

/// The file-type filter from ripgrep's own type table (the `ignore` crate's defaults), or
/// `None` when no type was asked for.
fn file_types(names: Option<OneOrMany>) -> Result<Option<ignore::types::Types>, ToolError> {
    let Some(names) = names.map(OneOrMany::into_vec).filter(|names| !names.is_empty()) else {
        return Ok(None);
    };
    let mut builder = ignore::types::TypesBuilder::new();
    builder.add_defaults();
    let known: Vec<String> = builder.definitions().into_iter().map(|definition| definition.name().to_owned()).collect();
    for name in &names {
        if !known.contains(name) {
            let close: Vec<&str> = known
                .iter()
                .filter(|candidate| candidate.starts_with(name.get(..1).unwrap_or("")) && candidate.len().abs_diff(name.len()) <= 2)
                .map(String::as_str)
                .take(8)
                .collect();
            let hint = if close.is_empty() { String::new() } else { format!(" (close: {})", close.join(", ")) };
            return Err(ToolError::InvalidArgs(format!(
                "`type` {} is not a known file type{hint}: use ripgrep's type names, such as `rust`, `py`, `js`, `ts`, `go`, `md`, or `include` globs",
                quote(name)
            )));
        }
        builder.select(name);
    }
    builder.build().map(Some).map_err(|error| ToolError::InvalidArgs(format!("`type` is not valid: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(query: &str, multiline: bool, content: &str) -> Vec<(usize, usize)> {
        let matcher = Matcher::compile(query, false, multiline).expect("valid query");
        let lines: Vec<&[u8]> = text::byte_lines(content.as_bytes()).collect();
        matcher.hits(content.as_bytes(), &lines)
    }

    #[test]
    fn hits_are_line_ranges() {
        let content = "fn main() {\n    hello();\n}\nfn other() {}\n";
        assert_eq!(hits("hello", false, content), [(1, 1)]);
        assert_eq!(hits("fn", false, content), [(0, 0), (3, 3)]);
        assert_eq!(hits("(?s)fn main.*hello", true, content), [(0, 1)]);
        assert!(hits("(?s)fn main.*hello", false, content).is_empty());
        // `.` stops at a newline unless `(?s)` says otherwise.
        assert!(hits("fn main.*hello", true, content).is_empty());
        assert_eq!(hits("\\{\\n\\s+hello", true, content), [(0, 1)]);
        // A match ending with its newline stays on its line; two matches on a line are one hit.
        assert_eq!(hits("hello\\(\\);\\n", true, content), [(1, 1)]);
        assert_eq!(hits("fn", true, content), [(0, 0), (3, 3)]);
        assert_eq!(hits("o", true, "foo\n"), [(0, 0)]);
        // CRLF lines are counted like LF ones.
        assert_eq!(hits("a\\r?\\nb", true, "a\r\nb\r\n"), [(0, 1)]);
    }

    /// Lines found by searching the whole buffer are those each line matched on its own
    /// finds, whatever the line ends, the empty lines and the matches that span lines.
    #[test]
    fn whole_buffer_line_matching_agrees_with_matching_each_line() {
        let contents = [
            "",
            "\n",
            "needle",
            "needle\n",
            "a\nneedle\r\nb\r\nneedle\r",
            "x\n\n\nneedle x\nneedle\n\n",
            "fn main() {\n    hello();\n}\nfn other() {}\n",
            "a b\na\nb\nab\n",
            "word\n word \nwords\n",
        ];
        let queries = [
            "needle",
            "^needle$",
            "eedle\\r?$",
            "^needle x",
            "ord\\b",
            "^$",
            "x*",
            "a\\sb",
            "a[^x]b",
            "^\\s*$",
            "\\bword\\b",
            "e\\r?$",
            "(?i)NEEDLE",
            "fn|hello",
        ];
        for query in queries {
            let matcher = Matcher::compile(query, false, false).expect("valid query");
            let Matcher::Lines { line, .. } = &matcher else { panic!("line matching") };
            for content in contents {
                let bytes = content.as_bytes();
                let expected: Vec<(usize, usize)> =
                    text::byte_lines(bytes).enumerate().filter(|(_, text)| line.is_match(text)).map(|(index, _)| (index, index)).collect();
                let lines: Vec<&[u8]> = text::byte_lines(bytes).collect();
                assert_eq!(matcher.hits(bytes, &lines), expected, "{query:?} in {content:?}");
                assert_eq!(matcher.count(bytes), expected.len(), "{query:?} in {content:?}");
                assert_eq!(matcher.has_match(bytes), !expected.is_empty(), "{query:?} in {content:?}");
            }
        }
    }

    #[test]
    fn unknown_types_are_refused_with_close_names() {
        match file_types(Some(OneOrMany::One("rusty".to_owned()))) {
            Err(ToolError::InvalidArgs(message)) => assert!(message.contains("rust"), "{message}"),
            other => panic!("expected invalid-args, got {:?}", other.is_ok()),
        }
        let types = file_types(Some(OneOrMany::Many(vec!["rust".to_owned(), "md".to_owned()]))).expect("known").expect("some");
        assert!(types.matched("lib.rs", false).is_whitelist());
        assert!(types.matched("README.md", false).is_whitelist());
        assert!(!types.matched("main.py", false).is_whitelist());
    }
}

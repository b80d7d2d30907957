//! `list_files`: the entries of a directory, optionally recursive and filtered by a glob.

use std::ops::ControlFlow;

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::path::quote;
use toolcell_sdk::time::rfc3339;
use toolcell_sdk::walk::{self, EntryKind};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

const DEFAULT_MAX_RESULTS: u64 = 1000;
const MAX_MAX_RESULTS: u64 = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: Option<String>,
    pattern: Option<String>,
    recursive: Option<bool>,
    max_results: Option<u64>,
    sort: Option<Sort>,
}

/// The order of the entries.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Sort {
    /// Depth-first, each directory's entries by name.
    Name,
    /// Most recently modified first (the newest `max_results` of all that match).
    Modified,
}

struct ListFiles;

impl Tool for ListFiles {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "list_files",
            "List files",
            "List the entries of a workspace directory, one workspace-relative path per line; \
             directories end with `/`, symlinks with `@` (never followed). `pattern` is a glob \
             matched against each entry's path relative to `path`: `*` and `?` stay within one \
             path component, `**` crosses directories, `{a,b}` picks alternatives (for example \
             `**/*.rs`). `recursive` descends into subdirectories; it defaults to true when the \
             pattern contains `/` or `**`, false otherwise. Order: depth-first, each directory's \
             entries sorted by name, a directory before its contents. The contents of `.git` are \
             not listed. `sort: \"modified\"` lists the most recently modified entries first \
             instead (each with its modification time), as when looking for what changed last. At \
             most `max_results` entries (default 1000) are returned; the structured result says \
             `truncated` if more matched.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The directory to list, relative to the workspace root. Default: `.`, the root."
                },
                "pattern": {
                    "type": "string",
                    "description": "A glob over paths relative to `path`, for example `*.md` or `src/**/*.rs`."
                },
                "recursive": {
                    "type": "boolean",
                    "description": "Descend into subdirectories. Default: true if `pattern` contains `/` or `**`, else false."
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_MAX_RESULTS,
                    "description": "The most entries to return. Default: 1000."
                },
                "sort": {
                    "enum": ["name", "modified"],
                    "description": "`name` (default): depth-first by name. `modified`: newest first."
                }
            },
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "entries": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "type": {"type": "string"}, "modified": {"type": "string", "description": "RFC 3339 UTC, when sorted by modification time."}}, "required": ["path", "type"]}}, "truncated": {"type": "boolean"}}, "required": ["path", "entries", "truncated"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let root = WorkspacePath::parse(args.path.as_deref().unwrap_or("."))?;
        let matcher = match &args.pattern {
            Some(pattern) => Some(
                globset::GlobBuilder::new(pattern)
                    .literal_separator(true)
                    .backslash_escape(true)
                    .build()
                    .map_err(|error| ToolError::InvalidArgs(format!("`pattern` {} is not a valid glob: {}", quote(pattern), error.kind())))?
                    .compile_matcher(),
            ),
            None => None,
        };
        let recursive = args
            .recursive
            .unwrap_or_else(|| args.pattern.as_deref().is_some_and(|pattern| pattern.contains('/') || pattern.contains("**")));
        let max_results = args.max_results.unwrap_or(DEFAULT_MAX_RESULTS);
        let by_modified = args.sort == Some(Sort::Modified);
        let mut entries = Vec::new();
        let mut truncated = false;
        // The walk's first listing is the check that `root` is a directory: no `stat` first.
        let walked = walk::walk(&root, recursive, |entry| {
            let relative = entry.path.strip_prefix(&root).unwrap_or(entry.path.as_str());
            if matcher.as_ref().is_some_and(|matcher| !matcher.is_match(relative)) {
                return ControlFlow::Continue(());
            }
            // By modification time every match is a candidate; by name the walk's order is the
            // answer, so it stops at the limit.
            if !by_modified && entries.len() as u64 == max_results {
                truncated = true;
                return ControlFlow::Break(());
            }
            entries.push((entry.path.clone(), entry.kind));
            ControlFlow::Continue(())
        });
        let summary = match walked {
            Ok(summary) => summary,
            // Not a directory: `root` itself is a file (or one of its parents is, which
            // `io_error` words).
            Err(error)
                if error.kind() == std::io::ErrorKind::NotADirectory
                    && toolcell_sdk::scan::stat(root.as_str()).is_ok_and(|stat| stat.kind != walk::EntryKind::Directory) =>
            {
                return Err(ToolError::Unsupported(format!(
                    "{} is a file, not a directory: use read_file to read it, or list its parent directory",
                    quote(root.as_str())
                )));
            }
            Err(error) => return Err(root.io_error(error)),
        };
        // Seconds and nanoseconds since the epoch of each entry, when sorting by them (not
        // followed: a symlink's own time).
        let mut modified: Vec<Option<std::time::Duration>> = Vec::new();
        if by_modified {
            let mut timed: Vec<_> = entries
                .drain(..)
                .map(|(path, kind)| {
                    let time = toolcell_sdk::scan::symlink_stat(path.as_str()).ok().and_then(|stat| stat.modified);
                    (time, path, kind)
                })
                .collect();
            // Newest first; equal times by path, so the order is stable.
            timed.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.as_str().cmp(b.1.as_str())));
            truncated = timed.len() as u64 > max_results;
            timed.truncate(usize::try_from(max_results).unwrap_or(usize::MAX));
            for (time, path, kind) in timed {
                modified.push(time);
                entries.push((path, kind));
            }
        }

        // One string, no per-entry allocation; a name is written as its `Display` shows it,
        // control characters escaped (a raw newline would forge a line of the listing).
        let mut text = String::with_capacity(entries.iter().map(|(path, _)| path.as_str().len() + 2).sum());
        for (index, (path, kind)) in entries.iter().enumerate() {
            if index > 0 {
                text.push('\n');
            }
            let _ = std::fmt::Write::write_fmt(&mut text, format_args!("{path}"));
            match kind {
                EntryKind::Directory => text.push('/'),
                EntryKind::Symlink => text.push('@'),
                _ => {}
            }
        }
        if entries.is_empty() {
            text = match &args.pattern {
                Some(pattern) => format!("No entries in {} match {}.", quote(root.as_str()), quote(pattern)),
                None => format!("{} is empty.", quote(root.as_str())),
            };
        }
        if truncated {
            text.push_str(&format!(
                "\n[truncated at {max_results} entries: narrow `path` or `pattern`, or raise `max_results` (up to {MAX_MAX_RESULTS})]"
            ));
        }
        if summary.unreadable_directories > 0 {
            text.push_str(&format!("\n[{} directories could not be read and were skipped]", summary.unreadable_directories));
        }
        // Serialized from the entries as they are: no JSON value built per entry first.
        let structured_entries: Vec<ListedEntry<'_>> = entries
            .iter()
            .enumerate()
            .map(|(index, (path, kind))| ListedEntry {
                path: path.as_str(),
                kind: kind.as_str(),
                modified: modified.get(index).copied().flatten().map(|time| rfc3339(time.as_secs())),
            })
            .collect();
        Ok(Output::text(text).with_structured(Listing { path: root.as_str(), entries: structured_entries, truncated }))
    }
}

/// The structured result.
#[derive(serde::Serialize)]
struct Listing<'a> {
    path: &'a str,
    entries: Vec<ListedEntry<'a>>,
    truncated: bool,
}

#[derive(serde::Serialize)]
struct ListedEntry<'a> {
    path: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    modified: Option<String>,
}

toolcell_sdk::export_tool!(ListFiles);

//! `directory_tree`: a directory's structure as a JSON tree.

use serde::Deserialize;
use serde_json::{Value, json};
use toolcell_sdk::path::quote;
use toolcell_sdk::walk;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

/// Levels shown when the caller gives no `depth`.
const DEFAULT_DEPTH: u64 = 3;
/// The deepest tree a call may ask for.
const MAX_DEPTH: u64 = 20;
/// Entries in one tree at most; past it the tree is cut and says so.
const MAX_ENTRIES: usize = 2000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: Option<String>,
    depth: Option<u64>,
    #[serde(default)]
    exclude: Vec<String>,
}

struct DirectoryTree;

impl Tool for DirectoryTree {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "directory_tree",
            "Directory tree",
            "Show the structure of a directory as a JSON tree: each entry is `{name, type}` \
             (`file`, `directory`, `symlink` or `other`), directories with `children`. Use it to \
             get a picture of a project's layout; to find files by name use list_files, to find \
             text use search_files. `depth` limits the levels shown (default 3, at most 20); a \
             directory deeper than that has `\"truncated\": true` instead of children. \
             `exclude` takes globs matched against each entry's name and its path below `path` \
             (for example `target`, `**/*.log`). Symlinks are shown, never followed; `.git` is \
             shown but not opened; entries your role may not read are left out. At most 2000 \
             entries; a cut tree says so at its top (`truncated`).",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The directory to show, relative to the workspace root. Default: the root."
                },
                "depth": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_DEPTH,
                    "description": "How many levels to show. Default: 3."
                },
                "exclude": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Globs of names or paths to leave out, for example [\"target\", \"**/*.log\"]."
                }
            },
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "entries": {"type": "integer", "minimum": 0}, "truncated": {"type": "boolean"}, "unreadable_directories": {"type": "integer", "minimum": 0}, "children": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "type": {"type": "string"}, "children": {"type": "array"}, "truncated": {"type": "boolean"}, "unreadable": {"type": "boolean"}}, "required": ["name", "type"]}}}, "required": ["path", "entries", "truncated", "unreadable_directories", "children"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let root = WorkspacePath::parse(args.path.as_deref().unwrap_or("."))?;
        let depth = args.depth.unwrap_or(DEFAULT_DEPTH).clamp(1, MAX_DEPTH);
        let mut excluded = globset::GlobSetBuilder::new();
        for pattern in &args.exclude {
            let glob = globset::GlobBuilder::new(pattern).literal_separator(true).build().map_err(|error| {
                ToolError::InvalidArgs(format!("`exclude` entry {} is not a valid glob: {}", quote(pattern), error.kind()))
            })?;
            excluded.add(glob);
        }
        let excluded =
            excluded.build().map_err(|error| ToolError::InvalidArgs(format!("`exclude` is not a valid set of globs: {error}")))?;
        let metadata = toolcell_sdk::scan::stat(root.as_str()).map_err(|error| root.io_error(error))?;
        if metadata.kind != toolcell_sdk::walk::EntryKind::Directory {
            return Err(ToolError::Unsupported(format!(
                "{} is a file, not a directory: use file_info or read_file on it, or show its parent directory",
                quote(root.as_str())
            )));
        }
        let mut walk = Walk { root: &root, excluded: &excluded, max_depth: depth, entries: 0, cut: false, unreadable: 0 };
        let children = walk.children(&root, 1).map_err(|error| root.io_error(error))?;
        let tree = json!({
            "path": root.as_str(),
            "entries": walk.entries,
            "truncated": walk.cut,
            "unreadable_directories": walk.unreadable,
            "children": children,
        });
        let mut text = serde_json::to_string_pretty(&tree).unwrap_or_default();
        if walk.cut {
            text.push_str(&format!(
                "\n[cut at {MAX_ENTRIES} entries: show a subdirectory, lower `depth`, or `exclude` what you do not need]"
            ));
        }
        Ok(Output::text(text).with_structured(tree))
    }
}

struct Walk<'a> {
    root: &'a WorkspacePath,
    excluded: &'a globset::GlobSet,
    max_depth: u64,
    entries: usize,
    cut: bool,
    unreadable: usize,
}

impl Walk<'_> {
    /// The sorted entries of `directory` (at `depth`, 1 for the root's children) as JSON nodes.
    fn children(&mut self, directory: &WorkspacePath, depth: u64) -> std::io::Result<Vec<Value>> {
        let mut listing: Vec<(String, std::fs::FileType)> = std::fs::read_dir(directory.as_str())?
            .filter_map(Result::ok)
            .filter_map(|entry| Some((entry.file_name().to_string_lossy().into_owned(), entry.file_type().ok()?)))
            .collect();
        listing.sort_unstable_by(|left, right| left.0.cmp(&right.0));
        let mut nodes = Vec::with_capacity(listing.len());
        for (name, file_type) in listing {
            let path = directory.join(&name);
            let relative = path.strip_prefix(self.root).unwrap_or(path.as_str());
            if self.excluded.is_match(&name) || self.excluded.is_match(relative) {
                continue;
            }
            if self.entries >= MAX_ENTRIES {
                self.cut = true;
                break;
            }
            self.entries += 1;
            let kind = walk::EntryKind::of(&file_type).as_str();
            let mut node = json!({"name": name, "type": kind});
            if kind == "directory" {
                if name == ".git" || depth >= self.max_depth {
                    node["truncated"] = json!(true);
                } else {
                    match self.children(&path, depth + 1) {
                        Ok(children) => node["children"] = Value::Array(children),
                        Err(_) => {
                            self.unreadable += 1;
                            node["unreadable"] = json!(true);
                        }
                    }
                }
            }
            nodes.push(node);
        }
        Ok(nodes)
    }
}

toolcell_sdk::export_tool!(DirectoryTree);

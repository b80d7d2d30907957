//! Paths as clients send them. Agents trained on other tools send absolute paths
//! (`/home/me/repo/src/main.rs`) and `file://` URIs; components see only workspace-relative
//! paths. Before a component runs, the path arguments of a call that lead into the workspace
//! are rewritten to their workspace-relative form, so the component never learns where the
//! workspace is and its results speak workspace-relative. A path that leads elsewhere is left
//! as an absolute path, which every tool refuses.
//!
//! Which arguments are paths is a naming convention, written in `wit/tool.wit`: a string, or
//! an array of strings, under a key named `path`, `paths`, `source`, `destination`,
//! `directory`, `file`, `files` or `move_to`, or ending in `_path`, `_paths`, `_file`,
//! `_files`, `_dir` or `_directory`, at any depth, and the file headers of a patch under a
//! key `patch` (`*** Update File: PATH`). Other strings (file contents, patterns, the lines of
//! a patch) are never touched.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

/// Keys whose string values are paths.
const PATH_KEYS: &[&str] = &["path", "paths", "source", "destination", "directory", "file", "files", "move_to"];
/// Key endings whose string values are paths.
const PATH_KEY_SUFFIXES: &[&str] = &["_path", "_paths", "_file", "_files", "_dir", "_directory"];

/// Whether a key of a call's arguments names a path.
pub fn is_path_key(key: &str) -> bool {
    PATH_KEYS.contains(&key) || PATH_KEY_SUFFIXES.iter().any(|suffix| key.ends_with(suffix))
}

/// The host paths that name the workspace root: its canonical path and the absolute path it
/// was opened by, when that differs (a root under a symlink such as macOS's `/tmp`).
pub struct Roots<'a> {
    /// The workspace root's canonical path.
    pub canonical: &'a Path,
    /// The absolute path it was opened by, when that differs.
    pub given: Option<&'a Path>,
}

/// Rewrite the path arguments of `args` that lead into the workspace to their
/// workspace-relative form, and `file://` URIs to paths; the rewritten arguments, or `None`
/// if nothing changed.
pub fn rewrite(args: &str, roots: &Roots<'_>) -> Option<String> {
    // Cheap test first, so that a call's arguments are not parsed twice (the schema check
    // parses them too): one that names no root and no URI, with no escape that could spell
    // one, has nothing to rewrite.
    let names_a_root =
        [Some(roots.canonical), roots.given].into_iter().flatten().any(|root| root.to_str().is_none_or(|root| args.contains(root)));
    if !names_a_root && !args.contains("file:") && !args.contains('\\') {
        return None;
    }
    let mut value: Value = serde_json::from_str(args).ok()?;
    rewrite_value(&mut value, false, roots).then(|| value.to_string())
}

fn rewrite_value(value: &mut Value, is_path: bool, roots: &Roots<'_>) -> bool {
    match value {
        Value::String(text) if is_path => match as_workspace_path(text, roots) {
            Some(relative) if relative != *text => {
                *text = relative;
                true
            }
            _ => false,
        },
        Value::Array(items) => items.iter_mut().fold(false, |changed, item| rewrite_value(item, is_path, roots) | changed),
        Value::Object(fields) => fields.iter_mut().fold(false, |changed, (key, field)| {
            let rewritten = match field {
                Value::String(patch) if key == "patch" => rewrite_patch_headers(patch, roots),
                _ => rewrite_value(field, is_path_key(key), roots),
            };
            rewritten | changed
        }),
        _ => false,
    }
}

/// The file headers of a patch (`*** Add File: PATH`, `*** Update File: PATH`,
/// `*** Delete File: PATH`, `*** Move to: PATH`) name paths too: rewrite those that lead into
/// the workspace, keeping each line's indentation and ending.
fn rewrite_patch_headers(patch: &mut String, roots: &Roots<'_>) -> bool {
    const HEADERS: [&str; 4] = ["*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "];
    if !patch.contains("*** ") {
        return false;
    }
    let mut changed = false;
    let mut rewritten = String::with_capacity(patch.len());
    for line in patch.split_inclusive('\n') {
        let content = line.trim_end_matches(['\n', '\r']);
        let indent = &content[..content.len() - content.trim_start().len()];
        let header = HEADERS.iter().find_map(|header| content.trim_start().strip_prefix(header).map(|path| (header, path)));
        match header.and_then(|(header, path)| Some((header, as_workspace_path(path.trim(), roots)?))) {
            Some((header, relative)) => {
                changed = true;
                rewritten.push_str(indent);
                rewritten.push_str(header);
                rewritten.push_str(&relative);
                rewritten.push_str(&line[content.len()..]);
            }
            None => rewritten.push_str(line),
        }
    }
    if changed {
        *patch = rewritten;
    }
    changed
}

/// `text` as the component should see it: the workspace-relative path of an absolute path
/// or `file://` URI inside the workspace (`.` for the root); the absolute path of a `file://`
/// URI that leads elsewhere; `None` to leave it as it is.
pub fn as_workspace_path(text: &str, roots: &Roots<'_>) -> Option<String> {
    let absolute = if text.starts_with("file:") { file_uri_path(text)? } else { PathBuf::from(text) };
    if !absolute.is_absolute() {
        return None;
    }
    // `..` is resolved by the host after the symlinks before it, which only the guard may
    // follow: such a path is left absolute, and refused.
    if absolute.components().any(|component| component == Component::ParentDir) {
        return None;
    }
    let inside = [Some(roots.canonical), roots.given]
        .into_iter()
        .flatten()
        .find_map(|root| relative_to(&absolute, root))
        .map(|relative| if relative.is_empty() { ".".to_owned() } else { relative });
    match inside {
        Some(relative) => Some(relative),
        None if text.starts_with("file:") => absolute.to_str().map(str::to_owned),
        None => None,
    }
}

/// The path of a local `file://` URI (percent-decoded); `None` for another host or a URI
/// that does not parse.
fn file_uri_path(text: &str) -> Option<PathBuf> {
    let uri = url::Url::parse(text).ok()?;
    if uri.scheme() != "file" {
        return None;
    }
    uri.to_file_path().ok()
}

/// `path` relative to `root` (neither holds `..`), joined with `/`; `None` if it does not
/// lie under `root` or is not valid UTF-8.
fn relative_to(path: &Path, root: &Path) -> Option<String> {
    let names_of_path = names(path);
    let rest = names_of_path.strip_prefix(names(root).as_slice())?;
    let parts: Option<Vec<&str>> = rest.iter().map(|part| part.to_str()).collect();
    Some(parts?.join("/"))
}

/// The names along an absolute path.
fn names(path: &Path) -> Vec<&std::ffi::OsStr> {
    path.components()
        .filter_map(|component| match component {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect()
}

/// A hint for a not-found answer to a call whose path arguments hold a `\`: toolcell paths
/// are separated by `/`.
pub fn separator_hint(args: &str) -> Option<String> {
    if !args.contains("\\\\") {
        return None;
    }
    let value: Value = serde_json::from_str(args).ok()?;
    let mut found = None;
    find_backslash_path(&value, false, &mut found);
    let path = found?;
    let suggested = path.replace('\\', "/");
    Some(format!(
        "`{}` holds `\\`, which is part of a file name here, not a separator: workspace paths use `/`, as in `{}`",
        toolcell_types::escape_control(&path),
        toolcell_types::escape_control(&suggested)
    ))
}

fn find_backslash_path(value: &Value, is_path: bool, found: &mut Option<String>) {
    if found.is_some() {
        return;
    }
    match value {
        Value::String(text) if is_path && text.contains('\\') => *found = Some(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| find_backslash_path(item, is_path, found)),
        Value::Object(fields) => fields.iter().for_each(|(key, field)| find_backslash_path(field, is_path_key(key), found)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(args: &str) -> String {
        let roots = Roots { canonical: Path::new("/srv/work/repo"), given: Some(Path::new("/home/me/repo")) };
        rewrite(args, &roots).unwrap_or_else(|| "unchanged".to_owned())
    }

    #[test]
    fn path_arguments_inside_the_workspace_become_relative() {
        let table = [
            (r#"{"path":"/srv/work/repo/src/main.rs"}"#, r#"{"path":"src/main.rs"}"#),
            (r#"{"path":"/home/me/repo/src/main.rs"}"#, r#"{"path":"src/main.rs"}"#),
            (r#"{"path":"/home/me/repo"}"#, r#"{"path":"."}"#),
            (r#"{"path":"/home/me/repo/"}"#, r#"{"path":"."}"#),
            (r#"{"path":"/home/me/repo/./b.txt"}"#, r#"{"path":"b.txt"}"#),
            // `..` after a symlink leads where the host's resolution says: left absolute.
            (r#"{"path":"/home/me/repo/a/../b.txt"}"#, "unchanged"),
            // A URI's dot segments are removed as the URI standard says, before any of this.
            (r#"{"path":"file:///home/me/repo/a/../b.txt"}"#, r#"{"path":"b.txt"}"#),
            (r#"{"file_path":"/home/me/repo/a.md"}"#, r#"{"file_path":"a.md"}"#),
            (r#"{"paths":["/home/me/repo/a","b","/srv/work/repo/c"]}"#, r#"{"paths":["a","b","c"]}"#),
            (r#"{"source":"/home/me/repo/a","destination":"/home/me/repo/d/a"}"#, r#"{"destination":"d/a","source":"a"}"#),
            (
                r#"{"operations":[{"path":"/home/me/repo/x","move_to":"/home/me/repo/y"}]}"#,
                r#"{"operations":[{"move_to":"y","path":"x"}]}"#,
            ),
            (r#"{"path":"file:///home/me/repo/src/a%20b.rs"}"#, r#"{"path":"src/a b.rs"}"#),
            (r#"{"path":"file://localhost/home/me/repo/x"}"#, r#"{"path":"x"}"#),
            // Outside: an absolute path stays as sent (every tool refuses it); a URI becomes its path.
            (r#"{"path":"/home/me/repository/x"}"#, "unchanged"),
            (r#"{"path":"/home/me/repo/../other/x"}"#, "unchanged"),
            (r#"{"path":"/etc/passwd"}"#, "unchanged"),
            (r#"{"path":"file:///etc/passwd"}"#, r#"{"path":"/etc/passwd"}"#),
            (r#"{"path":"file://elsewhere/home/me/repo/x"}"#, "unchanged"),
            // Not path arguments: contents, patterns and relative paths are never touched.
            (r#"{"path":"a.txt","content":"/home/me/repo/x"}"#, "unchanged"),
            (r#"{"pattern":"/home/me/repo/**"}"#, "unchanged"),
            // A patch's file headers are paths; its other lines are content.
            (
                r#"{"patch":"*** Begin Patch\n*** Update File: /home/me/repo/a.rs\r\n  *** Move to: file:///home/me/repo/b.rs\n-/home/me/repo/x\n+y\n*** Delete File: /etc/x\n*** End Patch"}"#,
                r#"{"patch":"*** Begin Patch\n*** Update File: a.rs\r\n  *** Move to: b.rs\n-/home/me/repo/x\n+y\n*** Delete File: /etc/x\n*** End Patch"}"#,
            ),
            (r#"{"path":"src/main.rs"}"#, "unchanged"),
        ];
        for (args, expected) in table {
            assert_eq!(rewritten(args), expected, "{args}");
        }
    }

    #[test]
    fn a_backslash_in_a_path_argument_gets_a_hint() {
        let hint = separator_hint(r#"{"path":"src\\main.rs"}"#).expect("a hint");
        assert!(hint.contains("`src\\main.rs`") && hint.contains("`src/main.rs`"), "{hint}");
        assert_eq!(separator_hint(r#"{"path":"src/main.rs","content":"a\\b"}"#), None);
    }
}

//! A deterministic directory walk for listing and searching.
//!
//! Order: depth-first, the entries of each directory sorted by name (byte order), a directory
//! before its contents. Symlinks are reported but never followed, so a walk cannot loop or
//! leave the workspace through one. The contents of `.git` are skipped. Entries the host hides
//! (the policy does not let the caller read them) never appear.

use std::ops::ControlFlow;

use crate::WorkspacePath;

pub use crate::entry::EntryKind;

/// One entry met by [`walk`].
#[derive(Debug, Clone)]
pub struct Entry {
    /// The entry's workspace-relative path.
    pub path: WorkspacePath,
    /// What it is.
    pub kind: EntryKind,
    /// 1 for the root's direct children, 2 for theirs, and so on.
    pub depth: usize,
}

/// Totals of a walk, for the result's footnotes.
#[derive(Debug, Clone, Default)]
pub struct WalkSummary {
    /// Directories that could not be read (the host refused them, or they vanished).
    pub unreadable_directories: usize,
}

/// Walk the directory `root`, calling `visit` for each entry below it (not for `root`
/// itself). `recursive: false` visits only the direct children. `visit` may stop the walk.
///
/// # Errors
///
/// The I/O error of reading `root` itself; errors on subdirectories are counted in the
/// summary instead.
pub fn walk(root: &WorkspacePath, recursive: bool, visit: impl FnMut(&Entry) -> ControlFlow<()>) -> std::io::Result<WalkSummary> {
    walk_filtered(root, recursive, |_, _| {}, visit)
}

/// [`walk`], with `enter` called on each directory's children (names and kinds, sorted) as
/// they are listed, before any of them is visited: the children it removes are neither
/// visited nor, for directories, descended into (an ignore-file filter, for example).
///
/// # Errors
///
/// As [`walk`].
pub fn walk_filtered(
    root: &WorkspacePath,
    recursive: bool,
    mut enter: impl FnMut(&WorkspacePath, &mut Vec<(String, EntryKind)>),
    mut visit: impl FnMut(&Entry) -> ControlFlow<()>,
) -> std::io::Result<WalkSummary> {
    let mut summary = WalkSummary::default();
    let mut stack: Vec<Entry> = Vec::new();
    let mut children = sorted_children(root)?;
    enter(root, &mut children);
    push_children(&mut stack, root, children, 1);
    while let Some(entry) = stack.pop() {
        let (kind, depth) = (entry.kind, entry.depth);
        if visit(&entry).is_break() {
            break;
        }
        if recursive && kind == EntryKind::Directory && entry.path.as_str().rsplit('/').next() != Some(".git") {
            match sorted_children(&entry.path) {
                Ok(mut children) => {
                    enter(&entry.path, &mut children);
                    push_children(&mut stack, &entry.path, children, depth + 1);
                }
                Err(_) => summary.unreadable_directories += 1,
            }
        }
    }
    Ok(summary)
}

fn sorted_children(directory: &WorkspacePath) -> std::io::Result<Vec<(String, EntryKind)>> {
    let mut children = crate::scan::read_dir(directory.as_str())?;
    children.sort_unstable_by(|left, right| left.0.cmp(&right.0));
    Ok(children)
}

fn push_children(stack: &mut Vec<Entry>, parent: &WorkspacePath, children: Vec<(String, EntryKind)>, depth: usize) {
    // Reversed, so that popping yields the names in order.
    stack.extend(children.into_iter().rev().map(|(name, kind)| Entry { path: parent.join(&name), kind, depth }));
}

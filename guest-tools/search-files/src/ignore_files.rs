//! `.gitignore`, `.ignore` and `.git/info/exclude`, with ripgrep's meaning (the `ignore`
//! crate's matcher), read through the host like every other file.
//!
//! Unlike ripgrep, a `.gitignore` counts without a `.git` directory beside it: the workspace
//! is often a subdirectory of a repository whose `.git` the tool cannot see.

use std::collections::HashMap;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use toolcell_sdk::WorkspacePath;
use toolcell_sdk::walk::EntryKind;

/// The files each ignore file of a directory holds: later ones win, so `.ignore` overrides
/// `.gitignore`, as in ripgrep.
const IGNORE_FILES: [&str; 2] = [".gitignore", ".ignore"];

/// The ignore rules met so far, by directory.
pub(crate) struct IgnoreFiles {
    /// Each directory's rules, by its workspace-relative path (`.` for the root).
    by_directory: HashMap<String, Gitignore>,
    /// Directories whose ignore files were looked for.
    looked_in: std::collections::HashSet<String>,
    /// `.git/info/exclude`: below every `.gitignore`.
    exclude: Option<Gitignore>,
    /// Directories judged by [`ignores`](Self::ignores): whether they, or one above them, are
    /// ignored.
    directories: HashMap<String, bool>,
}

impl IgnoreFiles {
    /// The rules of `root`'s ancestors (the workspace root included), which apply below it; a
    /// walk from `root` adds the rest as it enters directories.
    pub(crate) fn above(root: &WorkspacePath) -> IgnoreFiles {
        let mut ignore_files = IgnoreFiles {
            by_directory: HashMap::new(),
            looked_in: std::collections::HashSet::new(),
            exclude: None,
            directories: HashMap::new(),
        };
        // Only where the role sees a `.git` directory: a policy that hides `.git` would
        // otherwise refuse (and record) this read in every search.
        let has_git = toolcell_sdk::scan::read_dir(".")
            .is_ok_and(|children| children.iter().any(|(name, kind)| name == ".git" && *kind == EntryKind::Directory));
        if has_git {
            ignore_files.exclude = read_rules(&WorkspacePath::root(), &[".git/info/exclude"]);
        }
        let mut directory = root.parent();
        while let Some(parent) = directory {
            ignore_files.load(&parent);
            ignore_files.looked_in.insert(parent.as_str().to_owned());
            directory = parent.parent();
        }
        ignore_files
    }

    /// Read `directory`'s ignore files (if it has any), then drop the children they, or the
    /// rules above, ignore.
    pub(crate) fn enter(&mut self, directory: &WorkspacePath, children: &mut Vec<(String, EntryKind)>) {
        if children.iter().any(|(name, kind)| *kind == EntryKind::File && IGNORE_FILES.contains(&name.as_str())) {
            self.load(directory);
        }
        // No rules met yet (most trees outside a repository): nothing to match.
        if self.by_directory.is_empty() && self.exclude.is_none() {
            return;
        }
        children.retain(|(name, kind)| !self.is_ignored(&directory.join(name), *kind == EntryKind::Directory));
    }

    /// Whether the file `path`, below the search's `root`, is ignored, or lies in a directory
    /// that is (which a walk would not have entered): for a file met without a walk. Each
    /// directory is judged once.
    pub(crate) fn ignores(&mut self, root: &WorkspacePath, path: &WorkspacePath) -> bool {
        if path.strip_prefix(root).is_none() {
            return false;
        }
        let directory = path.parent().unwrap_or_else(WorkspacePath::root);
        let ignored = match self.directories.get(directory.as_str()) {
            Some(ignored) => *ignored,
            None => {
                let ignored = self.directory_ignored(root, &directory);
                self.directories.insert(directory.as_str().to_owned(), ignored);
                ignored
            }
        };
        ignored || (!(self.by_directory.is_empty() && self.exclude.is_none()) && self.is_ignored(path, false))
    }

    /// Whether `directory` (at or below `root`) or one between it and `root` is ignored; reads
    /// the ignore files of each on the way, `directory`'s own included.
    fn directory_ignored(&mut self, root: &WorkspacePath, directory: &WorkspacePath) -> bool {
        let relative = directory.strip_prefix(root).unwrap_or_default();
        let mut current = root.clone();
        for name in relative.split('/').filter(|name| !name.is_empty() && *name != ".") {
            if self.looked_in.insert(current.as_str().to_owned()) {
                self.load(&current);
            }
            let child = current.join(name);
            if !(self.by_directory.is_empty() && self.exclude.is_none()) && self.is_ignored(&child, true) {
                return true;
            }
            current = child;
        }
        if self.looked_in.insert(current.as_str().to_owned()) {
            self.load(&current);
        }
        false
    }

    fn load(&mut self, directory: &WorkspacePath) {
        if let Some(rules) = read_rules(directory, &IGNORE_FILES) {
            self.by_directory.insert(directory.as_str().to_owned(), rules);
        }
    }

    /// Whether `path` is ignored: the nearest directory whose rules say anything about it
    /// decides (a `!pattern` re-includes), then `.git/info/exclude`.
    fn is_ignored(&self, path: &WorkspacePath, is_directory: bool) -> bool {
        let mut directory = path.parent();
        while let Some(current) = directory {
            if let Some(rules) = self.by_directory.get(current.as_str()) {
                let relative = path.strip_prefix(&current).unwrap_or(path.as_str());
                match rules.matched(relative, is_directory) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            directory = current.parent();
        }
        self.exclude.as_ref().is_some_and(|exclude| exclude.matched(path.as_str(), is_directory).is_ignore())
    }
}

/// The rules of the files `names` in `directory`, or `None` if there are none (a file the
/// host refuses or that is missing is passed over).
fn read_rules(directory: &WorkspacePath, names: &[&str]) -> Option<Gitignore> {
    let mut builder = GitignoreBuilder::new("");
    let mut any = false;
    for name in names {
        let path = directory.join(name);
        let Ok(content) = std::fs::read_to_string(path.as_str()) else {
            continue;
        };
        for line in content.lines() {
            // A line that is not a valid glob is skipped, as git skips it.
            if builder.add_line(None, line).is_ok() {
                any = true;
            }
        }
    }
    if !any {
        return None;
    }
    builder.build().ok()
}

//! What a call left at each path it changed in place, so that its rollback puts back only what
//! the call itself changed.
//!
//! A removal, a rename, a link, a symlink or a new directory is made in place while the call
//! runs. Another process (whose in-flight table does not hold this call's paths) or another
//! program may change such a path before the call fails: write a file where the call removed
//! one, say. The journal says what was there before the call, not that someone came after it;
//! restoring it would destroy what they made. So the call notes, right after each change, what
//! it left there (nothing, or which object: device, inode and birth time), and its rollback
//! leaves every path that holds something else now as the other made it.
//!
//! A path is noted once the operation that journaled it has run (see [`LeftBehind::noted`]);
//! one never noted (an operation the guard does not follow up, such as `undo_edit`'s) is
//! restored as before, never left: what is not known is not taken for another's change.

use std::collections::HashMap;

use rustix::fs::{AtFlags, StatxFlags};

use toolcell_state::beneath;

/// What stands at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Nothing.
    Nothing,
    /// A file, directory or symlink: its device, inode, and birth time where the file system
    /// keeps one (a number freed and given to another object is not taken for the first).
    Object { device: (u32, u32), inode: u64, born: Option<(i64, u32)> },
}

impl Standing {
    /// What stands at `path` beneath `root` now (not followed if a symlink); `None` if it cannot
    /// be told (a symlink on the way, a directory that may not be searched).
    pub(crate) fn at(root: &cap_std::fs::Dir, path: &str) -> Option<Standing> {
        let (directory, name) = match beneath::parent(root, path) {
            Err(error) if is_gone(error.raw_os_error()) => return Some(Standing::Nothing),
            result => result.ok()?,
        };
        match rustix::fs::statx(&directory, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::INO | StatxFlags::BTIME) {
            Err(errno) if is_gone(Some(errno.raw_os_error())) => Some(Standing::Nothing),
            Err(_) => None,
            Ok(stat) => {
                let born = (stat.stx_mask & StatxFlags::BTIME.bits() != 0).then_some((stat.stx_btime.tv_sec, stat.stx_btime.tv_nsec));
                Some(Standing::Object { device: (stat.stx_dev_major, stat.stx_dev_minor), inode: stat.stx_ino, born })
            }
        }
    }
}

/// Whether an error says nothing is at the path: it is missing, or a directory on its way is
/// not one (a file stands there).
fn is_gone(errno: Option<i32>) -> bool {
    errno == Some(rustix::io::Errno::NOENT.raw_os_error()) || errno == Some(rustix::io::Errno::NOTDIR.raw_os_error())
}

/// What one call left at the paths it changed in place.
#[derive(Debug, Default)]
pub(crate) struct LeftBehind {
    /// Each path the call changed, with what it left there.
    left: HashMap<String, Standing>,
    /// Paths journaled for an operation that has not run yet (or whose outcome is not noted):
    /// noted by [`noted`](Self::noted) once it has.
    pending: Vec<String>,
    /// Paths another changed between two changes of the call: the older changes' journal steps
    /// were dropped (the newer ones put back what the other made).
    between: Vec<String>,
    /// Paths under a directory the call moved: where what the call left there stands now, and
    /// what that is. The rollback moves the directory back before it restores them, so another's
    /// change at the new place would come back under the old name and be restored over.
    carried: HashMap<String, (String, Standing)>,
}

/// Whether `path` is `directory` or lies beneath it.
fn at_or_under(path: &str, directory: &str) -> bool {
    path.strip_prefix(directory).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

impl LeftBehind {
    /// Before the call journals `path` again: whether another changed it since the call left
    /// it (so that the older steps of `path` must not be replayed: they would put back, over
    /// what the other made, what was there before the call). A path changed `in_place` is
    /// pending from here; one about to be rewritten through a new file is not changed until
    /// that lands ([`placed`](Self::placed)), and what stands there now is what the call left.
    pub(crate) fn changed_before_journaling(&mut self, root: &cap_std::fs::Dir, path: &str, in_place: bool) -> bool {
        let (left, now) = match self.left.get(path) {
            Some(left) => (Some(*left), Standing::at(root, path)),
            None => (None, None),
        };
        let changed = left.is_some_and(|left| now.is_some_and(|now| now != left));
        if changed {
            self.changed_between(path);
        }
        if in_place {
            self.left.remove(path);
            self.carried.remove(path);
            if !self.pending.iter().any(|pending| pending == path) {
                self.pending.push(path.to_owned());
            }
        } else if let (true, Some(now)) = (changed, now) {
            self.left.insert(path.to_owned(), now);
        }
        changed
    }

    /// The operation the pending paths were journaled for has run (or failed): note what each
    /// holds now.
    pub(crate) fn noted(&mut self, root: &cap_std::fs::Dir) {
        for path in std::mem::take(&mut self.pending) {
            if let Some(now) = Standing::at(root, &path) {
                self.carry_to(&path, now);
                self.left.insert(path, now);
            }
        }
    }

    /// The call itself left `now` at `location`: so it is for the paths carried there.
    fn carry_to(&mut self, location: &str, now: Standing) {
        for (_, left) in self.carried.values_mut().filter(|(carried_to, _)| carried_to == location) {
            *left = now;
        }
    }

    /// The call put a file in place at `path` (or changed it otherwise without journaling it
    /// again): it left what stands there now.
    pub(crate) fn placed(&mut self, root: &cap_std::fs::Dir, path: &str) {
        self.carried.remove(path);
        match Standing::at(root, path) {
            Some(now) => {
                self.carry_to(path, now);
                self.left.insert(path.to_owned(), now)
            }
            None => self.left.remove(path),
        };
    }

    /// The call renamed `from` to `to`: nothing is under `from` now. What is under `to` is
    /// what was under `from` (the steps of those paths, and what the call left there, stay
    /// under their old names); it is noted again if the call changes it there.
    pub(crate) fn moved(&mut self, from: &str, to: &str) {
        let under = |path: &str, directory: &str| path.strip_prefix(directory).is_some_and(|rest| rest.starts_with('/'));
        self.left.retain(|path, _| !under(path, to));
        self.carried.retain(|_, (location, _)| !under(location, to));
        // What was carried under `from` before goes on with it.
        for (_, (location, _)) in self.carried.iter_mut().filter(|(_, (location, _))| at_or_under(location, from)) {
            *location = format!("{to}{}", &location[from.len()..]);
        }
        for (path, left) in self.left.iter_mut().filter(|(path, _)| under(path, from)) {
            // The object the call left goes with the directory; nothing stays under the old name.
            if !self.carried.contains_key(path) {
                self.carried.insert(path.clone(), (format!("{to}{}", &path[from.len()..]), *left));
            }
            *left = Standing::Nothing;
        }
    }

    /// Of `paths` (those the call's journal holds), the ones that hold something else now than
    /// what the call left there: another process or program changed them since.
    pub(crate) fn changed_since<'a>(&self, root: &cap_std::fs::Dir, paths: impl Iterator<Item = &'a String>) -> Vec<String> {
        let mut looked = std::collections::HashSet::new();
        let mut changed: Vec<String> = Vec::new();
        for path in paths {
            if !looked.insert(path) {
                continue;
            }
            let here = self.left.get(path).is_some_and(|left| Standing::at(root, path).is_some_and(|now| now != *left));
            // Under a directory the call moved: where what it left there stands now, too.
            let carried =
                self.carried.get(path).is_some_and(|(location, left)| Standing::at(root, location).is_some_and(|now| now != *left));
            if here || carried {
                changed.push(path.clone());
            }
        }
        changed
    }

    /// Another changed `path` between two changes of the call (the older changes' journal steps
    /// are dropped).
    pub(crate) fn changed_between(&mut self, path: &str) {
        if !self.between.iter().any(|between| between == path) {
            self.between.push(path.to_owned());
        }
    }

    /// The paths another changed between two changes of the call.
    pub(crate) fn between(&self) -> &[String] {
        &self.between
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, cap_std::fs::Dir) {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = cap_std::fs::Dir::open_ambient_dir(temp.path(), cap_std::ambient_authority()).expect("open");
        (temp, root)
    }

    #[test]
    fn a_path_made_again_by_another_is_told_from_what_the_call_left() {
        let (temp, root) = workspace();
        root.write("d.txt", "old").expect("write");
        let mut left = LeftBehind::default();
        assert!(!left.changed_before_journaling(&root, "d.txt", true));
        root.remove_file("d.txt").expect("rm");
        left.noted(&root);
        let journaled = vec!["d.txt".to_owned()];
        assert!(left.changed_since(&root, journaled.iter()).is_empty(), "as the call left it");
        // Another writes a new file there.
        std::fs::write(temp.path().join("d.txt"), "theirs").expect("write");
        assert_eq!(left.changed_since(&root, journaled.iter()), journaled);
        // The call then removes it again: its older step is not to be replayed.
        assert!(left.changed_before_journaling(&root, "d.txt", true));
        assert_eq!(left.between(), journaled.as_slice());
    }

    #[test]
    fn the_calls_own_removal_and_remaking_is_its_own() {
        let (_temp, root) = workspace();
        root.write("d.txt", "old").expect("write");
        let mut left = LeftBehind::default();
        left.changed_before_journaling(&root, "d.txt", true);
        root.remove_file("d.txt").expect("rm");
        left.noted(&root);
        assert!(!left.changed_before_journaling(&root, "d.txt", true));
        root.create_dir("d.txt").expect("mkdir");
        left.noted(&root);
        let journaled = ["d.txt".to_owned()];
        assert!(left.changed_since(&root, journaled.iter()).is_empty());
        assert!(left.between().is_empty());
        // Not noted: not known, so not taken for another's.
        left.changed_before_journaling(&root, "d.txt", true);
        root.remove_dir("d.txt").expect("rmdir");
        root.write("d.txt", "new").expect("write");
        assert!(left.changed_since(&root, journaled.iter()).is_empty());
    }

    #[test]
    fn what_a_directory_move_took_away_is_gone_from_where_it_was() {
        let (_temp, root) = workspace();
        root.create_dir_all("a").expect("mkdir");
        root.write("a/x", "x").expect("write");
        let mut left = LeftBehind::default();
        left.changed_before_journaling(&root, "a/x", true);
        root.remove_file("a/x").expect("rm");
        left.noted(&root);
        root.write("a/y", "y").expect("write");
        left.placed(&root, "a/y");
        root.rename("a", &root, "b").expect("mv");
        left.moved("a", "b");
        let journaled: Vec<String> = ["a/x", "a/y", "b/x", "b/y"].iter().map(|path| (*path).to_owned()).collect();
        assert!(left.changed_since(&root, journaled.iter()).is_empty());
        root.create_dir("a").expect("mkdir");
        root.write("a/y", "theirs").expect("write");
        assert_eq!(left.changed_since(&root, journaled.iter()), vec!["a/y".to_owned()]);
    }
}

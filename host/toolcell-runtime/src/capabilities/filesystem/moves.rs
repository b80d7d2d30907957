//! Moves and links: every entry a rename carries, symlinks that must stay inside, hidden entries
//! that must stay hidden, hard links, and descriptors that move with their directory.

use toolcell_policy::{Access, Effect};
use toolcell_types::{ToolErrorKind, escape_control};

use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::{FsError, FsResult};

use super::*;

/// Entries a directory rename may carry with it (each is checked like a move of its own).
pub(super) const MAX_MOVED_ENTRIES: usize = 100_000;

impl FsGuard {
    /// Before the directory `from` is renamed to `to`: everything under it moves too, so each
    /// entry must be deletable where it is and writable where it lands (policy, protected
    /// paths and locks), hidden entries included. A rule on a file deep inside cannot be
    /// bypassed by moving its directory.
    pub(super) fn check_subtree_move(&mut self, operation: &'static str, from: &str, to: &str) -> FsResult<()> {
        let Some(root) = self.root.as_deref() else {
            return Ok(());
        };
        // Each entry with whether it is a directory and whether a symlink, as the listing says
        // (no link followed).
        let mut entries: Vec<(String, bool, bool)> = Vec::new();
        let mut pending = vec![from.to_owned()];
        while let Some(directory) = pending.pop() {
            let listing = root.read_dir(&directory).map_err(|error| FsError::from(ErrorCode::from(error)))?;
            for entry in listing {
                // The walk is one filesystem call: past the deadline it stops too.
                if self.timed_out || self.deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
                    self.timed_out = true;
                    return Err(FsError::trap(wasmtime::format_err!("the call ran past its deadline and was stopped by the host")));
                }
                let entry = entry.map_err(|error| FsError::from(ErrorCode::from(error)))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let path = format!("{directory}/{name}");
                let file_type = entry.file_type().map_err(|error| FsError::from(ErrorCode::from(error)))?;
                let is_directory = file_type.is_dir();
                if is_directory {
                    pending.push(path.clone());
                }
                entries.push((path, is_directory, file_type.is_symlink()));
                if entries.len() > MAX_MOVED_ENTRIES {
                    let message = format!(
                        "moving the directory `{}` is refused: it holds more than {MAX_MOVED_ENTRIES} entries, each of which would have to be checked; move its contents in parts",
                        escape_control(from)
                    );
                    return Err(self.refuse_rule(operation, from, Access::Delete, "move-too-large", message, ToolErrorKind::TooLarge));
                }
            }
        }
        for (path, is_directory, is_symlink) in entries {
            let Some(rest) = path.strip_prefix(from) else {
                continue;
            };
            let landing = format!("{to}{rest}");
            if is_symlink {
                self.check_link_stays_inside(operation, (from, to), &path, &landing)?;
                self.check_symlink_not_on_the_way(operation, &landing)?;
            }
            if self.state_path_of(&path).is_some() {
                // toolcell's own state is refused as such, whatever the policy says of it.
                self.check(operation, &path, Access::Delete)?;
            }
            if !self.is_visible(&path, is_directory) {
                // An entry the role may not see moves only if it may be deleted where it is,
                // written where it lands, and stays hidden there (what `check_hidden_stays_hidden`
                // requires of a single move); the refusal names the directory, not the entry
                // (the audit record has the entry).
                let movable = self.decide(Access::Delete, &path).effect == Effect::Allow
                    && self.decide(Access::Write, &landing).effect == Effect::Allow
                    && !self.is_visible(&landing, is_directory);
                if !movable {
                    let message = format!(
                        "moving the directory `{}` is refused: it holds entries your role may not see, and they may not be moved with it; move the entries you can see instead",
                        escape_control(from)
                    );
                    return Err(self.refuse_rule(operation, &path, Access::Delete, "hidden-entry", message, ToolErrorKind::Denied));
                }
            }
            self.check(operation, &path, Access::Delete)?;
            self.check(operation, &landing, Access::Write)?;
        }
        Ok(())
    }

    /// Before the namespace lock is taken for moving the directory `from` to `to`: put every
    /// entry's removal and landing that the policy leaves to the approver to it now, so that no
    /// other call waits on the lock while a person decides ([`approve_before_lock`]). Everything
    /// is judged again under the lock; a directory too large to move is left to that judgement.
    ///
    /// [`approve_before_lock`]: FsGuard::approve_before_lock
    pub(super) fn approve_moved_entries(&mut self, operation: &'static str, from: &str, to: &str) -> FsResult<()> {
        let Some(root) = self.root.as_deref() else {
            return Ok(());
        };
        if !root.symlink_metadata(from).is_ok_and(|metadata| metadata.is_dir()) {
            return Ok(());
        }
        let mut entries: Vec<String> = Vec::new();
        let mut pending = vec![from.to_owned()];
        while let Some(directory) = pending.pop() {
            let Ok(listing) = root.read_dir(&directory) else {
                continue;
            };
            for entry in listing.flatten() {
                let path = format!("{directory}/{}", entry.file_name().to_string_lossy());
                if entry.file_type().is_ok_and(|file_type| file_type.is_dir()) {
                    pending.push(path.clone());
                }
                entries.push(path);
                if entries.len() > MAX_MOVED_ENTRIES {
                    return Ok(());
                }
            }
        }
        for path in entries {
            let Some(rest) = path.strip_prefix(from) else {
                continue;
            };
            let landing = format!("{to}{rest}");
            for (access, at) in [(Access::Delete, path.as_str()), (Access::Write, landing.as_str())] {
                if self.effect(access, at) == Effect::Ask && !self.approved.contains(&(access, at.to_owned())) {
                    self.check(operation, at, access)?;
                }
            }
        }
        Ok(())
    }

    /// Refuse to move the symlink `link` to `landing` (as part of moving `moved`) if its
    /// relative target, read from where it would land, leaves the workspace: toolcell never
    /// follows it there, but people, CI and other programs would. An absolute target is left
    /// alone (moving it changes nothing of where it points).
    pub(super) fn check_link_stays_inside(
        &mut self,
        operation: &'static str,
        (moved, moved_to): (&str, &str),
        link: &str,
        landing: &str,
    ) -> FsResult<()> {
        let Some(root) = self.root.as_deref() else {
            return Ok(());
        };
        let Ok(target) = root.read_link_contents(link) else {
            // Gone since it was listed: the move itself will say so.
            return Ok(());
        };
        let target = target.to_string_lossy().into_owned();
        if target.starts_with('/') {
            return Ok(());
        }
        let landing_directory = landing.rsplit_once('/').map_or(".", |(parent, _)| parent);
        if self.link_target_escape(landing_directory, &target).is_none() {
            return Ok(());
        }
        let message = if moved == link {
            format!(
                "moving the symlink `{}` to `{}` is refused: its target `{}` would then lead outside the workspace. Move it where its target stays inside, or recreate it there with a target that does",
                escape_control(link),
                escape_control(landing),
                escape_control(&target)
            )
        } else {
            format!(
                "moving `{}` to `{}` is refused: the symlink `{}` in it (target `{}`) would then lead outside the workspace. Move it where the link's target stays inside, or change the link first",
                escape_control(moved),
                escape_control(moved_to),
                escape_control(link),
                escape_control(&target)
            )
        };
        Err(self.refuse_rule(operation, link, Access::Write, "symlink-target", message, ToolErrorKind::Denied))
    }

    /// Why a symlink in the workspace directory `directory` whose target is `target` leads, or
    /// may come to lead, outside the workspace; `None` if it stays inside. The target is
    /// resolved as the kernel resolves it, from the link's directory through every existing
    /// symlink (`dot -> .` makes `dot/..` the workspace's parent). A `..` after a name is
    /// refused even when it resolves inside now: the name could later become a symlink (to `.`,
    /// or to a directory elsewhere in the tree) that sends the `..` out, without this link
    /// changing.
    pub(super) fn link_target_escape(&self, directory: &str, target: &str) -> Option<&'static str> {
        if target.starts_with('/') {
            return Some("an absolute target may name anything on the host");
        }
        let mut named = false;
        for component in target.split('/') {
            match component {
                "" | "." => {}
                ".." if named => {
                    return Some("a `..` after a name can be sent outside by a symlink made later; write the target without it");
                }
                ".." => {}
                _ => named = true,
            }
        }
        match resolve(self.root.as_deref(), directory, target, true) {
            Resolved::Inside(_) => None,
            Resolved::Outside => Some("resolved through the symlinks on its way, it leads outside the workspace"),
            Resolved::Loop => Some("it goes through too many symlinks"),
        }
    }

    /// The refusal of removing the directory `path`, which is not empty (`error`): if what
    /// is left in it is hidden from the role (a directory that lists as empty), the refusal
    /// says so and names that rule, recorded with the first such entry; otherwise `error`.
    pub(super) fn not_empty(&mut self, operation: &'static str, path: &str, error: FsError) -> FsError {
        let hidden = self.root.as_deref().and_then(|root| root.read_dir(path).ok()).and_then(|entries| {
            entries.filter_map(Result::ok).find_map(|entry| {
                let inner = format!("{path}/{}", entry.file_name().to_string_lossy());
                let is_directory = entry.file_type().is_ok_and(|kind| kind.is_dir());
                (!self.is_visible(&inner, is_directory)).then_some(inner)
            })
        });
        let Some(hidden) = hidden else {
            return error;
        };
        let message = format!(
            "removing the directory `{}` is refused: it holds entries your role may not see, which stay; remove the entries you can see instead, or ask the operator",
            escape_control(path)
        );
        self.refuse_rule(operation, &hidden, Access::Delete, "hidden-entry", message, ToolErrorKind::Denied)
    }

    /// Refuse to move or link `from`, which the role may not read, to `to`, where it could:
    /// that would hand it the content the policy hides. (Moving a hidden entry to a place
    /// where it stays hidden is allowed.)
    pub(super) fn check_hidden_stays_hidden(&mut self, operation: &'static str, from: &str, to: &str, is_directory: bool) -> FsResult<()> {
        if self.is_visible(from, is_directory) || !self.is_visible(to, is_directory) {
            return Ok(());
        }
        let message = format!(
            "moving or linking `{}` to `{}` is refused: your role may not read it where it is, and could where it would go",
            escape_control(from),
            escape_control(to)
        );
        Err(self.refuse_rule(operation, from, Access::Read, "hidden-stays-hidden", message, ToolErrorKind::Denied))
    }

    /// Refuse to make `link` a hard link to `source` unless the two names are judged alike: for
    /// every role of the policy (and the role as bound for this call), every access the policy
    /// decides, and the host's own paths. Otherwise the one object would be reachable under a
    /// name where some role may do what it may not do under the other.
    pub(super) fn check_link_judged_alike(&mut self, operation: &'static str, source: &str, link: &str) -> FsResult<()> {
        const ACCESSES: [Access; 4] = [Access::Read, Access::List, Access::Write, Access::Delete];
        let host_owned_differs = self.state_path_of(source).is_some() != self.state_path_of(link).is_some();
        let policy_differs = self.policy.as_deref().is_some_and(|policy| {
            policy.roles().chain(self.bound.as_deref()).any(|role| {
                ACCESSES.iter().any(|&access| policy.verdict(role, access, source).effect() != policy.verdict(role, access, link).effect())
            })
        });
        if !host_owned_differs && !policy_differs {
            return Ok(());
        }
        let message = format!(
            "a hard link from `{}` to `{}` is refused: the policy judges the two names differently for some role, and one file under both names would let that role around its rules. Copy the file instead.",
            escape_control(link),
            escape_control(source)
        );
        Err(self.refuse_rule(operation, link, Access::Write, "hard-link", message, ToolErrorKind::Denied))
    }

    /// Refuse to change or remove a file with several hard links: the other names may lie where
    /// the role may not write, and a removal the call rolls back would put the name back as a
    /// copy with one link, which every role could then open (the content of a host file
    /// outside, or of a hidden one).
    pub(super) fn check_single_link(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        let Some(root) = self.root.as_deref().filter(|_| path != ".") else {
            return Ok(());
        };
        match root.symlink_metadata(path) {
            Ok(metadata) if metadata.is_file() && cap_std::fs::MetadataExt::nlink(&metadata) > 1 => {
                let message = format!(
                    "changing or removing `{}` is refused: the file has other hard links, which may lie outside the workspace or where this role may not go. Ask the operator to replace it with a copy (or remove its other links).",
                    escape_control(path)
                );
                Err(self.refuse_rule(operation, path, Access::Write, "hard-link", message, ToolErrorKind::Denied))
            }
            _ => Ok(()),
        }
    }

    /// After `from` was renamed to `to`: every descriptor opened at or under `from` now
    /// refers to the same object under `to`, and nothing the call left under `from` is there
    /// any more.
    pub(super) fn moved(&mut self, from: &str, to: &str) {
        if let Some(transaction) = self.transaction.as_mut() {
            transaction.left.moved(from, to);
            transaction.moves.push((from.to_owned(), to.to_owned()));
        }
        for path in self.descriptors.values_mut() {
            if path == from {
                *path = to.to_owned();
            } else if let Some(rest) = path.strip_prefix(from).filter(|rest| rest.starts_with('/')) {
                *path = format!("{to}{rest}");
            }
        }
    }

    /// Refuse to place a symlink at `path` when a host-owned location lies beneath it (a
    /// default state directory not made yet, say): the location is protected by its path, and
    /// a symlink on its way would send the next run that trusts it to files a tool wrote.
    pub(super) fn check_symlink_not_on_the_way(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        let Some(owned) =
            self.state_paths.iter().find(|owned| path == "." || owned.strip_prefix(path).is_some_and(|rest| rest.starts_with('/')))
        else {
            return Ok(());
        };
        let rule = format!("protected:{owned}");
        let message = format!(
            "a symlink at `{}` is refused: toolcell's own state (`{}`) lies beneath that name, and a link there would lead it elsewhere. Use another name.",
            escape_control(path),
            escape_control(owned)
        );
        Err(self.refuse_rule(operation, path, Access::Write, &rule, message, ToolErrorKind::Denied))
    }

    /// Refuse to create an entry whose name (the last component of the canonical `path`) holds
    /// a control character: a newline or an escape in a name forges lines and terminal output
    /// wherever it is shown later (listings, `lock list`, reports, the audit trail).
    pub(super) fn check_new_name(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        let name = path.rsplit_once('/').map_or(path, |(_, name)| name);
        if !name.chars().any(char::is_control) {
            return Ok(());
        }
        let message = format!(
            "creating `{}` is refused: its name holds a control character (a newline, tab or escape), which would forge lines or terminal output wherever it is shown. Choose a name without one.",
            escape_control(path)
        );
        Err(self.refuse_rule(operation, path, Access::Write, "control-character", message, ToolErrorKind::InvalidArgs))
    }

    /// Whether `path` is a symlink (not followed).
    pub(super) fn is_symlink(&self, path: &str) -> bool {
        self.root.as_deref().and_then(|root| root.symlink_metadata(path).ok()).is_some_and(|metadata| metadata.is_symlink())
    }

    /// Whether anything (a symlink included) is at `path`.
    pub(super) fn exists(&self, path: &str) -> bool {
        self.root.as_deref().is_some_and(|root| root.symlink_metadata(path).is_ok())
    }

    /// Whether `path` is a directory (not a symlink to one).
    pub(super) fn is_directory(&self, path: &str) -> bool {
        self.root.as_deref().and_then(|root| root.symlink_metadata(path).ok()).is_some_and(|metadata| metadata.is_dir())
    }

    /// Whether an existing directory the role may see is at `path`: creating it again is then
    /// answered `exist` without a refusal, as `mkdir -p` (and std's `create_dir_all`) expect.
    pub(super) fn is_visible_directory(&self, path: &str) -> bool {
        self.is_directory(path) && self.is_visible(path, true)
    }
}

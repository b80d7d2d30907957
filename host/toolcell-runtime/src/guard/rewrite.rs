//! Whole-file rewrites: written to a temporary sibling that replaces the file at once (when the
//! call commits, or as soon as anything else touches it), so no reader sees half a file.

use toolcell_types::escape_control;

use crate::journal::SHADOW_PREFIX;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::OpenFlags;
use wasmtime_wasi::p2::{FsError, FsResult};

use crate::beneath;

use super::*;

impl FsGuard {
    /// Whether opening `path` with these flags rewrites it whole (or creates it), so that the
    /// write can go to a temporary sibling that replaces it at once.
    pub(super) fn rewrites_whole(&self, path: &str, open_flags: OpenFlags) -> bool {
        let (Some(root), Some(transaction)) = (self.root.as_ref(), self.transaction.as_ref()) else {
            return false;
        };
        if path == "." || open_flags.contains(OpenFlags::DIRECTORY) || transaction.shadows.iter().any(|(shadowed, _)| shadowed == path) {
            return false;
        }
        match root.symlink_metadata(path) {
            Ok(metadata) => metadata.is_file() && open_flags.contains(OpenFlags::TRUNCATE) && !open_flags.contains(OpenFlags::EXCLUSIVE),
            Err(error) => error.kind() == std::io::ErrorKind::NotFound && open_flags.contains(OpenFlags::CREATE),
        }
    }

    /// Create the temporary sibling that will replace `path` (already journaled), with the
    /// mode `path` has. Returns its workspace path.
    pub(super) fn shadow(&mut self, path: &str) -> FsResult<String> {
        let (parent, name) = path.rsplit_once('/').map_or((None, path), |(parent, name)| (Some(parent), name));
        let Some(transaction) = self.transaction.as_ref() else {
            return Err(FsError::from(ErrorCode::Access));
        };
        let temporary_name = format!("{SHADOW_PREFIX}{}-{}-{name}", transaction.call_id, transaction.shadows.len());
        let temporary = match parent {
            Some(parent) => format!("{parent}/{temporary_name}"),
            None => temporary_name,
        };
        // Not journaled: a rollback removes every `SHADOW_PREFIX<call id>-*` file beside the
        // journaled paths.
        let Some(root) = self.root.as_ref() else {
            return Err(FsError::from(ErrorCode::Access));
        };
        let created = (|| {
            // Created where the judged path is, not where a symlink swapped in since leads.
            let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::EXCL;
            let file = std::fs::File::from(beneath::open(root, &temporary, flags, rustix::fs::Mode::from_raw_mode(0o600))?);
            if let Ok(metadata) = root.symlink_metadata(path) {
                file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(cap_std::fs::PermissionsExt::mode(
                    &metadata.permissions(),
                )))?;
            }
            Ok::<_, std::io::Error>(())
        })();
        created.map_err(|error| FsError::from(ErrorCode::from(error)))?;
        if let Some(transaction) = self.transaction.as_mut() {
            transaction.shadows.push((path.to_owned(), temporary.clone()));
        }
        Ok(temporary)
    }

    /// If `path`, or a file under it, is being rewritten through a temporary sibling, put the
    /// new content in place now: another operation (on the file, or renaming or removing its
    /// directory) is about to touch it.
    pub(super) fn land(&mut self, path: &str) -> FsResult<()> {
        let Some(transaction) = self.transaction.as_mut() else {
            return Ok(());
        };
        let under =
            |shadowed: &str| path == "." || shadowed == path || shadowed.strip_prefix(path).is_some_and(|rest| rest.starts_with('/'));
        if !transaction.shadows.iter().any(|(shadowed, _)| under(shadowed)) {
            return Ok(());
        }
        // The call goes on after this: its journal must be on the disk before a file changes.
        if let Some(journal) = transaction.journal.as_mut() {
            journal.make_durable().map_err(|error| FsError::from(ErrorCode::from(error)))?;
        }
        let (landing, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut transaction.shadows).into_iter().partition(|(shadowed, _)| under(shadowed));
        transaction.shadows = kept;
        let sync = transaction.durability.syncs();
        let Some(root) = self.root.as_ref() else {
            return Ok(());
        };
        for (path, temporary) in landing {
            land_file(root, &path, &temporary, sync).map_err(|error| FsError::from(ErrorCode::from(error)))?;
        }
        Ok(())
    }

    /// Put the rewritten files directly inside `directory` in place.
    pub(super) fn land_in(&mut self, directory: &str) -> FsResult<()> {
        let inside: Vec<String> = self
            .transaction
            .as_ref()
            .map(|transaction| {
                transaction
                    .shadows
                    .iter()
                    .filter(|(path, _)| path.rsplit_once('/').map_or(".", |(parent, _)| parent) == directory)
                    .map(|(path, _)| path.clone())
                    .collect()
            })
            .unwrap_or_default();
        for path in inside {
            self.land(&path)?;
        }
        Ok(())
    }

    /// Put every rewritten file in place: the call is about to commit.
    pub(crate) fn land_all(&mut self) -> Result<(), String> {
        let Some(transaction) = self.transaction.as_mut() else {
            return Ok(());
        };
        let shadows = std::mem::take(&mut transaction.shadows);
        // A call whose only change is one whole-file rewrite is done by one rename: a crash
        // leaves the old file or the new one, and there is nothing for the journal to undo.
        // Any other call needs its journal on the disk before its first file lands.
        let single_rewrite = shadows.len() == 1 && transaction.journal.as_ref().is_some_and(|journal| journal.len() == 1);
        if !single_rewrite && let Some(journal) = transaction.journal.as_mut() {
            journal.make_durable().map_err(|error| format!("the call's journal cannot be saved ({error})"))?;
        }
        let sync = transaction.durability.syncs();
        let Some(root) = self.root.as_ref() else {
            return Ok(());
        };
        for (path, temporary) in shadows {
            if self.timed_out || self.deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
                self.timed_out = true;
                return Err("the call ran past its deadline before its writes were all put in place".to_owned());
            }
            land_file(root, &path, &temporary, sync).map_err(|error| format!("`{}`: {error}", escape_control(&path)))?;
        }
        Ok(())
    }

    /// Whether `name` in `directory` is a temporary sibling of this call's rewrites (hidden
    /// from listings).
    pub(super) fn is_shadow(&self, child: &str) -> bool {
        self.transaction.as_ref().is_some_and(|transaction| transaction.shadows.iter().any(|(_, temporary)| temporary == child))
    }
}

/// Replace `path` with its rewritten temporary sibling: synced first (with `sync`), then
/// renamed over it, both names taken in one directory opened without following a symlink (so a
/// directory on the way swapped for one cannot send the content elsewhere).
pub(super) fn land_file(root: &cap_std::fs::Dir, path: &str, temporary: &str, sync: bool) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let (parent, name) = path.rsplit_once('/').unwrap_or((".", path));
    let temporary_name = temporary.rsplit_once('/').map_or(temporary, |(_, name)| name);
    let directory = beneath::open(root, parent, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())?;
    let file = rustix::fs::openat(&directory, temporary_name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    if sync {
        rustix::fs::fdatasync(&file)?;
    }
    rustix::fs::renameat(&directory, temporary_name, &directory, name)?;
    Ok(())
}

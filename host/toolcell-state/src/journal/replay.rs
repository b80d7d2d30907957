//! Replaying a call's journal backwards: each step restores its path to the state it had just
//! before the call's mutation, idempotently, so that a rollback a crash interrupted is simply
//! replayed again (by the call itself, or by recovery after a restart).

use super::*;

/// What a replay left as it found, and what it made again, because of what others did meanwhile.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Directories the call made that hold something else now (another session, or another
    /// program, put it there): left in place, with what is in them.
    pub left: Vec<String>,
    /// Directories made again to put back a path the call removed or changed, whose directory
    /// another session (or program) had moved or removed meanwhile.
    pub remade: Vec<String>,
    /// Paths the call removed (or moved away) that were not put back, because another session
    /// (or program) put a file or symlink where a directory on their way was: that is left as
    /// it is (never followed), and the call's removal or move of the path stands.
    pub unrestored: Vec<String>,
    /// Paths whose times the call set and the rollback could not set back: they belong to
    /// another user, who alone may set them to a given time.
    pub times_unrestored: Vec<String>,
}

/// Remove the temporary files the call's whole-file rewrites left beside its paths (they may
/// stand in a directory the replay must remove), then restore each step's path, newest first.
/// What others made meanwhile is never removed: a directory the call made that is not empty
/// once the call's own paths in it are gone stays, and a removed file whose directory is gone
/// is put back in that directory made again.
pub(crate) fn replay(root: &Dir, directory: &Path, call_id: &str, steps: &[Step]) -> Result<Replayed, String> {
    use rustix::fs::{Mode, OFlags};
    let prefix = format!("{}{call_id}-", IN_FLIGHT_PREFIX);
    let mut parents: Vec<&str> = steps.iter().map(|step| step.path.rsplit_once('/').map_or(".", |(parent, _)| parent)).collect();
    parents.sort_unstable();
    parents.dedup();
    for parent in parents {
        let Ok(opened) = crate::beneath::open(root, parent, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()) else {
            continue;
        };
        let opened = Dir::from_std_file(File::from(opened));
        let Ok(entries) = opened.entries() else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with(&prefix) {
                opened.remove_file(&name).map_err(|error| format!("`{parent}/{}`: {error}", name.to_string_lossy()))?;
            }
        }
    }
    let mut replayed = Replayed::default();
    let mut newer: std::collections::HashSet<&str> = std::collections::HashSet::new();
    // The paths restored from a saved object, and which object: its times, saved by an older
    // step, go back on the copy.
    let mut copied: std::collections::HashMap<&str, Option<(u64, u64)>> = std::collections::HashMap::new();
    for step in steps.iter().rev() {
        if matches!(step.prior, Prior::Times { .. }) {
            let copy = copied.get(step.path.as_str()).is_some_and(|identity| *identity == step.identity);
            match times::put_back(root, step, copy) {
                Ok(true) => {}
                Ok(false) => replayed.times_unrestored.push(step.path.clone()),
                Err(error) if is_blocked(&error) => {}
                Err(error) => return Err(format!("`{}`: {error}", step.path)),
            }
            continue;
        }
        // A path whose new content was never put in place was not changed by its call: it is
        // left as it stands (its directory was cleared of the call's reserved names above); so
        // is one where another program put another file since the call's landed (unless the
        // call itself changed the path after, in a newer step).
        let newest = newer.insert(step.path.as_str());
        if let Some(rewrite) = &step.rewrite
            && (!rewrite.landing || (newest && replaced_since_landing(root, &step.path, rewrite.landed_as)))
        {
            continue;
        }
        match restore_leaving(root, directory, step, &mut replayed) {
            // A file or symlink stands where a directory on the path was: another session's,
            // so the rollback does not wedge on it. Nothing the call made can be beneath it.
            Err(error) if is_blocked(&error) => {
                if step.prior != Prior::Absent && !replayed.unrestored.contains(&step.path) {
                    replayed.unrestored.push(step.path.clone());
                }
            }
            result => result.map_err(|error| format!("`{}`: {error}", step.path))?,
        }
        if step.prior == Prior::Absent {
            copied.remove(step.path.as_str());
        } else {
            copied.insert(step.path.as_str(), step.identity);
        }
    }
    Ok(replayed)
}

/// Whether `path` holds something else than the file `landed` (which a call put there), or
/// nothing: another program replaced or removed it since.
fn replaced_since_landing(root: &Dir, path: &str, landed: Option<Landed>) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Some(landed) = landed else {
        return false;
    };
    let Ok((parent, name)) = crate::beneath::parent(root, path) else {
        return true;
    };
    let Ok(file) = crate::beneath::open_in(&parent, name, rustix::fs::OFlags::PATH) else {
        return true;
    };
    let Ok(metadata) = file.metadata() else {
        return true;
    };
    (metadata.dev(), metadata.ino()) != landed.inode || landed.born.is_some_and(|born| crate::storage::birth_of(&file) != Some(born))
}

/// Whether `error` says that a non-directory stands where a directory on a path was: a file
/// (`ENOTDIR`) or a symlink (`ELOOP`: the opens beneath the root follow none).
fn is_blocked(error: &std::io::Error) -> bool {
    crate::beneath::is_symlink_on_path(error) || error.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error())
}

/// [`restore`] in a rollback: a directory the call made that holds something else now is
/// left, and a path whose directory is gone is restored in that directory made again
/// (beneath `root`, through no symlink); both noted in `replayed`.
fn restore_leaving(root: &Dir, directory: &Path, step: &Step, replayed: &mut Replayed) -> std::io::Result<()> {
    match &step.prior {
        Prior::Absent => {
            let (parent, name) = match crate::beneath::parent(root, &step.path) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                result => result?,
            };
            match remove(&parent, name) {
                Err(error) if error.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                    replayed.left.push(step.path.clone());
                    Ok(())
                }
                result => result,
            }
        }
        Prior::Moved { .. } => restore(root, directory, step),
        _ => {
            if let Err(error) = crate::beneath::parent(root, &step.path)
                && error.kind() == std::io::ErrorKind::NotFound
            {
                make_parents(root, &step.path, &mut replayed.remade)?;
            }
            restore(root, directory, step)
        }
    }
}

/// Make the missing directories on the way to the canonical path `path` beneath `root`, each
/// opened following no symlink (one on the way fails the restore); note each one made.
fn make_parents(root: &Dir, path: &str, made: &mut Vec<String>) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd as _;
    let Some((parents, _)) = path.rsplit_once('/') else {
        return Ok(());
    };
    let mut current: Option<File> = None;
    let mut walked = String::new();
    for component in parents.split('/') {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(component);
        let at = current.as_ref().map_or_else(|| root.as_fd(), |file| file.as_fd());
        let opened = match crate::beneath::open_in(at, component, OFlags::DIRECTORY | OFlags::RDONLY) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                match rustix::fs::mkdirat(at, component, Mode::RWXU | Mode::RWXG | Mode::RWXO) {
                    Ok(()) => made.push(walked.clone()),
                    // Made by someone else just now: used as it is.
                    Err(rustix::io::Errno::EXIST) => {}
                    Err(error) => return Err(error.into()),
                }
                crate::beneath::open_in(at, component, OFlags::DIRECTORY | OFlags::RDONLY)?
            }
            result => result?,
        };
        current = Some(opened);
    }
    Ok(())
}

/// Restore one step's path to its prior state. Every change is made in the path's directory
/// opened without following a symlink: if a directory on the way was swapped for one, the
/// restore fails (and the journal stays) rather than write where the symlink leads.
///
/// # Errors
///
/// Whatever restoring the path fails with.
pub fn restore(root: &Dir, directory: &Path, step: &Step) -> std::io::Result<()> {
    let path = step.path.as_str();
    let (parent, name) = match crate::beneath::parent(root, path) {
        // Nothing to remove where there is no directory.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && step.prior == Prior::Absent => return Ok(()),
        result => result?,
    };
    match &step.prior {
        Prior::Absent => remove(&parent, name),
        Prior::File { .. } | Prior::Inline { .. } => {
            if is_untouched(&parent, name, directory, step)? {
                return Ok(());
            }
            // Named by a hash of the name, not the name itself: a name near the kernel's 255
            // bytes could not be restored otherwise.
            let temporary = format!("{RESTORE_PREFIX}{:016x}", {
                use std::hash::{Hash as _, Hasher as _};
                let mut hasher = std::hash::DefaultHasher::new();
                name.hash(&mut hasher);
                hasher.finish()
            });
            let _ = parent.remove_file(&temporary);
            let mut file = parent.open_with(&temporary, cap_std::fs::OpenOptions::new().write(true).create_new(true))?;
            let mode = match &step.prior {
                Prior::File { blob, mode } => {
                    crate::storage::copy_sparse(&File::open(directory.join(blob))?, &file)?;
                    mode
                }
                Prior::Inline { hex, mode } => {
                    file.write_all(&unhex(hex)?)?;
                    mode
                }
                _ => unreachable!("matched above"),
            };
            file.set_permissions(cap_std::fs::Permissions::from_mode(*mode))?;
            // Put back as it was, times included (as a copy made for a write in place keeps
            // them): a file never written by anyone else since is the file it was.
            if let Some(times) = step.times {
                times.set_on(&file)?;
            }
            file.sync_data()?;
            if parent.symlink_metadata(name).is_ok_and(|metadata| metadata.is_dir()) {
                parent.remove_dir(name)?;
            }
            parent.rename(&temporary, &parent, name)
        }
        Prior::Directory { mode } => {
            match parent.symlink_metadata(name) {
                Ok(metadata) if metadata.is_dir() => {}
                Ok(_) => {
                    parent.remove_file(name)?;
                    parent.create_dir(name)?;
                }
                Err(_) => parent.create_dir(name)?,
            }
            let restored = crate::beneath::open_in(&parent, name, rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY)?;
            restored.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(*mode))
        }
        Prior::Symlink { target } => {
            remove(&parent, name)?;
            parent.symlink_contents(target, name)
        }
        Prior::Moved { to } => {
            if parent.symlink_metadata(name).is_err() {
                let (to_parent, to_name) = crate::beneath::parent(root, to)?;
                to_parent.rename(to_name, &parent, name)?;
            }
            Ok(())
        }
        Prior::Times { .. } => times::put_back(root, step, false).map(drop),
    }
}

/// Whether `name` in `parent` is still the very file `step` saved, with its mode and its
/// content: then restoring it would only replace it with a copy (a new inode, perhaps another
/// group), so it is left alone. For a step taken before a whole rewrite, the inode and its
/// birth time tell: the call's change never landed, and what another program wrote there
/// stays.
fn is_untouched(parent: &Dir, name: &str, journal: &Path, step: &Step) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt as _;
    let (Some((device, inode)), Prior::File { mode, .. } | Prior::Inline { mode, .. }) = (step.identity, &step.prior) else {
        return Ok(false);
    };
    let Ok(mut current) = crate::beneath::open_in(parent, name, rustix::fs::OFlags::RDONLY) else {
        return Ok(false);
    };
    let metadata = current.metadata()?;
    if !metadata.is_file() || metadata.dev() != device || metadata.ino() != inode {
        return Ok(false);
    }
    if let Some(born) = step.rewrite.as_ref().and_then(|rewrite| rewrite.born)
        && crate::storage::birth_of(&current) == Some(born)
    {
        // The call's change would have been another file: it never landed.
        return Ok(true);
    }
    if metadata.mode() & 0o7777 != mode & 0o7777 {
        return Ok(false);
    }
    let mut saved: Box<dyn std::io::Read> = match &step.prior {
        Prior::File { blob, .. } => Box::new(File::open(journal.join(blob))?),
        Prior::Inline { hex, .. } => Box::new(std::io::Cursor::new(unhex(hex)?)),
        _ => return Ok(false),
    };
    same_content(&mut current, &mut saved)
}

/// Whether two readers yield the same bytes.
fn same_content(a: &mut impl std::io::Read, b: &mut impl std::io::Read) -> std::io::Result<bool> {
    let mut left = vec![0u8; 64 * 1024];
    let mut right = vec![0u8; 64 * 1024];
    loop {
        let read = fill(a, &mut left)?;
        if fill(b, &mut right[..read.max(1)])? != read || left[..read] != right[..read] {
            return Ok(false);
        }
        if read == 0 {
            return Ok(true);
        }
    }
}

/// Read until `buffer` is full or the reader ends; the bytes read.
fn fill(reader: &mut impl std::io::Read, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..])? {
            0 => break,
            read => filled += read,
        }
    }
    Ok(filled)
}

/// Decode a step's hex content.
pub(crate) fn unhex(hex: &str) -> std::io::Result<Vec<u8>> {
    toolcell_audit::unhex(hex).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "a journal step's content is not hex"))
}

/// Remove whatever is at `name` in `directory` (a directory only if empty: anything in it the
/// call did not create is not the rollback's to delete).
fn remove(directory: &Dir, name: &str) -> std::io::Result<()> {
    match directory.symlink_metadata(name) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
        Ok(metadata) if metadata.is_dir() => directory.remove_dir(name),
        Ok(_) => directory.remove_file(name),
    }
}

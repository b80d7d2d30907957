//! Every write to a file goes to a file that has no name until it replaces the file at once
//! (when the call commits, or as soon as anything else touches its name), so no reader sees half
//! a file and no other call can see, read, write, link or rename what this call has in flight.
//!
//! The new content goes to an `O_TMPFILE` in the file's directory: an inode with no name, which
//! only this call's descriptors reach. A file opened to be written in place (not truncated) is
//! copied there first, with its holes and times. To land, it gets a name reserved for the host
//! ([`IN_FLIGHT_PREFIX`]: every call is refused every access to such names), the host checks
//! that this name holds the very inode it wrote, and renames it over the file. On a filesystem
//! without `O_TMPFILE`, the file is created under that reserved name from the start.
//!
//! The call itself sees what it has written: opening the path again, or asking its status,
//! reaches the new content ([`FsGuard::reopen_shadow`]), and a listing of its directory shows
//! the name of a file it is creating; only what acts on the name (a rename, a removal, a link)
//! puts it in place first.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags};
use toolcell_types::escape_control;

use toolcell_state::journal::IN_FLIGHT_PREFIX;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::OpenFlags;
use wasmtime_wasi::p2::{FsError, FsResult};

use toolcell_state::beneath;

use super::*;

/// A file being rewritten whole: the new content, not yet in place.
pub(crate) struct Shadow {
    /// The workspace path it will replace.
    pub(crate) path: String,
    /// The new content's inode (a duplicate of the descriptor the component writes through).
    pub(crate) file: OwnedFd,
    /// The reserved name it was created under, where the filesystem has no `O_TMPFILE`.
    named: Option<String>,
    /// The reserved name it gets when it lands.
    landing_name: String,
    /// Whether anything was written to it (a copy made for an in-place write that wrote nothing
    /// by the call's end is dropped, not put in place: the file keeps its inode).
    pub(crate) written: bool,
    /// What stood at the path when the call began to write it (`None`: nothing). The new
    /// content lands only over that very version: a change another program (or a host on
    /// another state directory) made meanwhile is not lost under it.
    was: Option<Stamp>,
}

/// What tells a file from its next version: device, inode, length, modification and change
/// times (any write, truncation, `chmod`, link or rename of it moves the change time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    identity: (u64, u64),
    length: i64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Stamp {
    fn of(stat: &rustix::fs::Stat) -> Stamp {
        let nanoseconds = |nanoseconds| i64::try_from(nanoseconds).unwrap_or_default();
        Stamp {
            identity: (stat.st_dev, stat.st_ino),
            length: stat.st_size,
            modified: (stat.st_mtime, nanoseconds(stat.st_mtime_nsec)),
            changed: (stat.st_ctime, nanoseconds(stat.st_ctime_nsec)),
        }
    }
}

/// The error of a landing that found another version at the path than the call began to write
/// over: nothing was put in place.
#[derive(Debug)]
pub(super) struct ChangedMeanwhile;

impl std::fmt::Display for ChangedMeanwhile {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("it was changed by another program or host while this call wrote it")
    }
}

impl std::error::Error for ChangedMeanwhile {}

/// What a file written through a [`Shadow`] starts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ShadowKind {
    /// Empty: the file is created, or truncated.
    Whole,
    /// A copy of the file: it is written in place.
    InPlace,
}

impl FsGuard {
    /// How opening `path` for writing with these flags is written through a new file that
    /// replaces it at once: `Some(Whole)` for a file created or truncated, `Some(InPlace)` for
    /// an existing file written without truncating it (the new file starts as its copy);
    /// `None` where there is no such file to make (a directory, a descriptor that cannot write
    /// (`access`, the open's `O_ACCMODE` part, is `O_RDONLY`), or no transaction).
    pub(super) fn shadow_kind(&self, path: &str, open_flags: OpenFlags, access: OFlags) -> Option<ShadowKind> {
        let (Some(root), Some(transaction)) = (self.root.as_deref(), self.transaction.as_ref()) else {
            return None;
        };
        if path == "."
            || open_flags.contains(OpenFlags::DIRECTORY)
            || !access.intersects(OFlags::WRONLY | OFlags::RDWR)
            || transaction.shadows.iter().any(|shadow| shadow.path == path)
        {
            return None;
        }
        match root.symlink_metadata(path) {
            Ok(metadata) if metadata.is_file() && !open_flags.contains(OpenFlags::EXCLUSIVE) => {
                Some(if open_flags.contains(OpenFlags::TRUNCATE) { ShadowKind::Whole } else { ShadowKind::InPlace })
            }
            Ok(_) => None,
            Err(error) => {
                (error.kind() == std::io::ErrorKind::NotFound && open_flags.contains(OpenFlags::CREATE)).then_some(ShadowKind::Whole)
            }
        }
    }

    /// Create the file that will replace `path` (already journaled), with the mode `path` has,
    /// in `path`'s directory, open for `access` (`O_WRONLY` or `O_RDWR`); for an in-place
    /// write, with `path`'s content (holes kept) and times. Returns the descriptor the
    /// component writes through.
    pub(super) fn shadow(&mut self, path: &str, access: OFlags, kind: ShadowKind) -> FsResult<std::fs::File> {
        let parent = path.rsplit_once('/').map_or(".", |(parent, _)| parent);
        let (Some(root), Some(transaction)) = (self.root.as_deref(), self.transaction.as_ref()) else {
            return Err(FsError::from(ErrorCode::Access));
        };
        // Without the file's own name: a name near the kernel's 255 bytes could not be
        // rewritten otherwise.
        let landing_name = format!("{IN_FLIGHT_PREFIX}{}-{}", transaction.call_id, transaction.shadows.len());
        let access = access & (OFlags::WRONLY | OFlags::RDWR);
        let deadline = self.deadline;
        let name = path.rsplit_once('/').map_or(path, |(_, name)| name);
        let created = (|| {
            // Created where the judged path is, not where a symlink swapped in since leads.
            let directory = beneath::open(root, parent, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())?;
            // What stands at the path now: the new content lands only over that very version.
            let was = match rustix::fs::statat(&directory, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => Some(stat),
                Err(rustix::io::Errno::NOENT) => None,
                Err(errno) => return Err(std::io::Error::from(errno)),
            };
            let unnamed = OFlags::TMPFILE | access | OFlags::CLOEXEC;
            let (file, named) = match rustix::fs::openat(&directory, ".", unnamed, Mode::from_raw_mode(0o600)) {
                Ok(file) => (file, None),
                // No `O_TMPFILE` here (`EOPNOTSUPP`, or `EISDIR`/`EINVAL` from kernels that do
                // not know the flag): a reserved name no call may touch.
                Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR | rustix::io::Errno::INVAL) => {
                    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC | access;
                    let file = rustix::fs::openat(&directory, landing_name.as_str(), flags, Mode::from_raw_mode(0o600))?;
                    (file, Some(landing_name.clone()))
                }
                Err(errno) => return Err(std::io::Error::from(errno)),
            };
            let made = (|| {
                if kind == ShadowKind::InPlace {
                    // The file as judged, read in its directory opened without following a
                    // symlink, and still the version seen above.
                    let source = beneath::open(&directory, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK, Mode::empty())?;
                    let stat = rustix::fs::fstat(&source)?;
                    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile
                        || was.as_ref().map(Stamp::of) != Some(Stamp::of(&stat))
                    {
                        return Err(std::io::Error::other("the file was replaced while it was being opened"));
                    }
                    toolcell_state::storage::copy_sparse_until(&source, &file, deadline)?;
                    let times = rustix::fs::Timestamps {
                        last_access: rustix::fs::Timespec { tv_sec: stat.st_atime, tv_nsec: stat.st_atime_nsec as _ },
                        last_modification: rustix::fs::Timespec { tv_sec: stat.st_mtime, tv_nsec: stat.st_mtime_nsec as _ },
                    };
                    rustix::fs::futimens(&file, &times)?;
                }
                if let Some(stat) = &was {
                    // The file's owner and group, where the host may give them; never its
                    // setuid and setgid bits (a file a tool wrote is not one to run as
                    // another user, as the kernel clears them on an unprivileged write).
                    let (owner, group) = (rustix::fs::Uid::from_raw(stat.st_uid), rustix::fs::Gid::from_raw(stat.st_gid));
                    if rustix::fs::fchown(&file, Some(owner), Some(group)).is_err() {
                        let _ = rustix::fs::fchown(&file, None, Some(group));
                    }
                    copy_attributes(&directory, name, &file)?;
                    rustix::fs::fchmod(&file, Mode::from_raw_mode(stat.st_mode & 0o1777))?;
                }
                Ok(())
            })();
            if let Err(error) = made {
                if let Some(named) = &named {
                    let _ = rustix::fs::unlinkat(&directory, named.as_str(), AtFlags::empty());
                }
                return Err(error);
            }
            Ok::<_, std::io::Error>((file, named, was.as_ref().map(Stamp::of)))
        })();
        let (file, named, was) = match created {
            Ok(created) => created,
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {
                return Err(self.within_deadline().err().unwrap_or_else(|| ErrorCode::Io.into()));
            }
            Err(error) => return Err(FsError::from(ErrorCode::from(error))),
        };
        let kept = file.try_clone().map_err(|error| FsError::from(ErrorCode::from(error)))?;
        if let Some(transaction) = self.transaction.as_mut() {
            let written = kind == ShadowKind::Whole;
            transaction.shadows.push(Shadow { path: path.to_owned(), file: kept, named, landing_name, written, was });
        }
        Ok(std::fs::File::from(file))
    }

    /// The new content of `path`, which this call is writing, opened again with `flags`
    /// (`O_RDONLY`, `O_WRONLY` or `O_RDWR`, perhaps `O_TRUNC`): another descriptor of the same
    /// unnamed file, through its `/proc/self/fd` link. `None` if `path` has no new content in
    /// this call, or where `/proc` is not mounted (the content is then put in place first).
    pub(super) fn reopen_shadow(&mut self, path: &str, flags: OFlags) -> FsResult<Option<std::fs::File>> {
        let Some(shadow) = self.shadow_mut(path) else {
            return Ok(None);
        };
        let by_proc = format!("/proc/self/fd/{}", shadow.file.as_raw_fd());
        match rustix::fs::openat(rustix::fs::CWD, by_proc.as_str(), flags | OFlags::CLOEXEC | OFlags::NOCTTY, Mode::empty()) {
            Ok(file) => {
                if flags.contains(OFlags::TRUNC) {
                    shadow.written = true;
                }
                Ok(Some(std::fs::File::from(file)))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(errno) => Err(FsError::from(ErrorCode::from(std::io::Error::from(errno)))),
        }
    }

    /// The new content of `path`, if it has one in this call: a duplicate of the host's own
    /// descriptor of it, to be asked its status (not to be given to the component: it may
    /// write).
    pub(super) fn shadow_file(&self, path: &str) -> FsResult<Option<std::fs::File>> {
        let Some(shadow) = self.shadow_of(path) else {
            return Ok(None);
        };
        let file = shadow.file.try_clone().map_err(|error| FsError::from(ErrorCode::from(error)))?;
        Ok(Some(std::fs::File::from(file)))
    }

    /// Note that the new content of `path` (if it has one in this call) was written to.
    pub(super) fn shadow_written(&mut self, path: &str) {
        if let Some(shadow) = self.shadow_mut(path) {
            shadow.written = true;
        }
    }

    /// If `path`, or a file under it, is being rewritten, put the new content in place now:
    /// another operation (on the file, or renaming or removing its directory) is about to
    /// touch it.
    pub(super) fn land(&mut self, path: &str) -> FsResult<()> {
        let Some(transaction) = self.transaction.as_mut() else {
            return Ok(());
        };
        let under =
            |shadowed: &str| path == "." || shadowed == path || shadowed.strip_prefix(path).is_some_and(|rest| rest.starts_with('/'));
        if !transaction.shadows.iter().any(|shadow| under(&shadow.path)) {
            return Ok(());
        }
        let (landing, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut transaction.shadows).into_iter().partition(|shadow| under(&shadow.path));
        transaction.shadows = kept;
        // A copy nothing was written to yet lands too: the component's descriptor of it stays
        // the file's. The call goes on after this: its journal (which says these land) must be
        // on the disk before a file changes.
        if let Some(journal) = transaction.journal.as_mut() {
            journal
                .landing(&landing_files(&landing))
                .and_then(|()| journal.make_durable())
                .map_err(|error| FsError::from(ErrorCode::from(error)))?;
        }
        let sync = transaction.durability.syncs();
        let mut landing = landing.into_iter();
        while let Some(shadow) = landing.next() {
            if self.land_one(shadow, sync, false).is_err() {
                if let Some(transaction) = self.transaction.as_mut() {
                    transaction.shadows.extend(landing);
                }
                return Err(FsError::from(ErrorCode::Access));
            }
        }
        Ok(())
    }

    /// Put one file's new content in place, checked first: still this call's to write (the
    /// lock table, which another host may have changed since the open), and the path still the
    /// version the call began to write over. A refusal or a failure is recorded (the call then
    /// fails) and the content is not put in place. `at_end`: the call is committing.
    fn land_one(&mut self, shadow: Shadow, sync: bool, at_end: bool) -> Result<(), (ToolErrorKind, String)> {
        let path = shadow.path.clone();
        let checked = self.check_lock("land", &path, Access::Write);
        let landed = match (checked, self.root.as_deref()) {
            (Err(_), _) => Err(None),
            (Ok(()), Some(root)) => land_file(root, &shadow, sync).map_err(Some),
            (Ok(()), None) => return Ok(()),
        };
        match landed {
            Ok(landed) => {
                if let (Some(transaction), Some(root)) = (self.transaction.as_mut(), self.root.as_deref()) {
                    transaction.left.placed(root, &path);
                    if at_end {
                        transaction.landed.push((path, landed));
                    } else {
                        transaction.landed_mid_call(path, landed);
                    }
                }
                Ok(())
            }
            Err(error) => {
                if let Some(transaction) = self.transaction.as_mut() {
                    // Kept, not landed: let go of at the call's end.
                    transaction.shadows.push(shadow);
                }
                let shown = escape_control(&path);
                let (rule, message, kind) = match error {
                    // Refused and recorded by the lock check.
                    None => return Err(self.last_refusal(ToolErrorKind::Conflict)),
                    Some(error) if error.get_ref().is_some_and(|inner| inner.is::<ChangedMeanwhile>()) => (
                        "changed-meanwhile",
                        format!(
                            "`{shown}` was changed by another program or host while this call wrote it, so this call's content was not put in place: read it again, then make the change"
                        ),
                        ToolErrorKind::Conflict,
                    ),
                    Some(error) => ("landing-failed", format!("`{shown}` could not be put in place ({error})"), ToolErrorKind::Failed),
                };
                self.refuse_rule("land", &path, Access::Write, rule, message.clone(), kind);
                Err((kind, message))
            }
        }
    }

    /// Put every rewritten file in place: the call is about to commit.
    pub(crate) fn land_all(&mut self) -> Result<(), (ToolErrorKind, String)> {
        let Some(transaction) = self.transaction.as_mut() else {
            return Ok(());
        };
        // A copy nothing was written to is not put in place: the file stays as it is (the copy
        // is let go of at the call's end).
        let (shadows, unwritten): (Vec<_>, Vec<_>) =
            std::mem::take(&mut transaction.shadows).into_iter().partition(|shadow| shadow.written);
        transaction.shadows = unwritten;
        if shadows.is_empty() {
            return Ok(());
        }
        // A call whose only change is one whole-file rewrite is done by one rename: a crash
        // leaves the old file or the new one, and there is nothing for the journal to undo
        // (its step, without a landing line, is not replayed). Any other call needs its journal
        // on the disk, with the files about to land, before its first file lands.
        let single_rewrite = shadows.len() == 1 && transaction.journal.as_ref().is_some_and(|journal| journal.len() == 1);
        if let Some(journal) = transaction.journal.as_mut() {
            let files = landing_files(&shadows);
            if single_rewrite {
                journal.landing_unrecorded(&files);
            } else {
                journal
                    .landing(&files)
                    .and_then(|()| journal.make_durable())
                    .map_err(|error| (ToolErrorKind::Failed, format!("the call's journal cannot be saved ({error})")))?;
            }
        }
        let sync = transaction.durability.syncs();
        let mut shadows = shadows.into_iter();
        while let Some(shadow) = shadows.next() {
            if self.timed_out || self.deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
                self.timed_out = true;
                if let Some(transaction) = self.transaction.as_mut() {
                    transaction.shadows.push(shadow);
                    transaction.shadows.extend(shadows);
                }
                return Err((ToolErrorKind::Failed, "the call ran past its deadline before its writes were all put in place".to_owned()));
            }
            if let Err(failure) = self.land_one(shadow, sync, true) {
                if let Some(transaction) = self.transaction.as_mut() {
                    transaction.shadows.extend(shadows);
                }
                return Err(failure);
            }
        }
        Ok(())
    }

    /// The new content of `path`, if it is being rewritten in this call.
    pub(super) fn shadow_of(&self, path: &str) -> Option<&Shadow> {
        self.transaction.as_ref()?.shadows.iter().find(|shadow| shadow.path == path)
    }

    fn shadow_mut(&mut self, path: &str) -> Option<&mut Shadow> {
        self.transaction.as_mut()?.shadows.iter_mut().find(|shadow| shadow.path == path)
    }
}

impl Transaction {
    /// Let go of the new content not put in place (the call failed, or nothing was written to
    /// it): a file made under its reserved name (no `O_TMPFILE`) is removed, if that name still
    /// holds it.
    pub(crate) fn discard_shadows(&mut self, root: &cap_std::fs::Dir) {
        for shadow in std::mem::take(&mut self.shadows) {
            let Some(named) = shadow.named.as_deref() else {
                continue;
            };
            let parent = shadow.path.rsplit_once('/').map_or(".", |(parent, _)| parent);
            let Ok(directory) = beneath::open(root, parent, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()) else {
                continue;
            };
            let same = |stat: rustix::fs::Stat, other: rustix::fs::Stat| (stat.st_dev, stat.st_ino) == (other.st_dev, other.st_ino);
            if let (Ok(held), Ok(there)) =
                (rustix::fs::fstat(&shadow.file), rustix::fs::statat(&directory, named, AtFlags::SYMLINK_NOFOLLOW))
                && same(held, there)
            {
                let _ = rustix::fs::unlinkat(&directory, named, AtFlags::empty());
            }
        }
    }
}

/// Replace the shadowed path with its new content: synced first (with `sync`), given its
/// reserved name, checked to be the very inode this call wrote, then renamed over the path, all
/// in one directory opened without following a symlink (so a directory on the way swapped for
/// one cannot send the content elsewhere). Returns what it landed as (its change time taken
/// from the file itself once in place, and its content).
pub(super) fn land_file(root: &cap_std::fs::Dir, shadow: &Shadow, sync: bool) -> std::io::Result<transaction::Landed> {
    let (parent, name) = shadow.path.rsplit_once('/').unwrap_or((".", shadow.path.as_str()));
    let directory = beneath::open(root, parent, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())?;
    if sync {
        rustix::fs::fdatasync(&shadow.file)?;
    }
    let landing = shadow.named.as_deref().unwrap_or(&shadow.landing_name);
    if shadow.named.is_none() {
        give_name(&shadow.file, &directory, landing)?;
    }
    let written = rustix::fs::fstat(&shadow.file)?;
    let named = rustix::fs::statat(&directory, landing, AtFlags::SYMLINK_NOFOLLOW)?;
    if (named.st_dev, named.st_ino) != (written.st_dev, written.st_ino) {
        // Something else stands under the reserved name: nothing is placed.
        return Err(std::io::Error::other("the file to be put in place is not the one this call wrote"));
    }
    // Read (the component's descriptor may be write-only) under the name no call may touch:
    // what it lands with tells a later change of its content from one of its metadata alone.
    let readable =
        rustix::fs::openat(&directory, landing, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK, Mode::empty());
    let content = readable.ok().and_then(|readable| landed::content_of(&shadow.file, &readable));
    // The file replaced is freed after the call, not in the rename (see `release`).
    let replaced = release::hold(&directory, name);
    // The last look before the rename (the hash above takes time on a big file): the path must
    // still be the version the call began to write over.
    let now = match rustix::fs::statat(&directory, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Some(Stamp::of(&stat)),
        Err(rustix::io::Errno::NOENT) => None,
        Err(errno) => return Err(unname(&directory, landing, errno.into())),
    };
    if now != shadow.was {
        return Err(unname(&directory, landing, std::io::Error::other(ChangedMeanwhile)));
    }
    if let Err(errno) = rustix::fs::renameat(&directory, landing, &directory, name) {
        return Err(unname(&directory, landing, errno.into()));
    }
    release::later(replaced);
    // The change time is the one the rename gave it.
    transaction::Landed::of(&shadow.file, content)
}

/// The paths of `shadows` with the files they are about to land as, for the journal.
fn landing_files(shadows: &[Shadow]) -> Vec<(String, toolcell_state::journal::Landed)> {
    shadows
        .iter()
        .filter_map(|shadow| {
            let stat = rustix::fs::fstat(&shadow.file).ok()?;
            let born = toolcell_state::storage::birth_of(&shadow.file);
            Some((shadow.path.clone(), toolcell_state::journal::Landed { inode: (stat.st_dev, stat.st_ino), born }))
        })
        .collect()
}

/// Give `file` the extended attributes of `name` in `directory` (its POSIX ACLs among them, so
/// that a user the file's ACL kept out stays out), but not its file capabilities
/// (`security.capability`), which a write clears as it clears setuid. Read through the
/// directory's `/proc/self/fd` link (the file may be write-only), or, where `/proc` is not
/// mounted, through the file opened for reading.
fn copy_attributes(directory: &OwnedFd, name: &str, file: &OwnedFd) -> std::io::Result<()> {
    use rustix::io::Errno;
    let by_proc = format!("/proc/self/fd/{}/{name}", directory.as_raw_fd());
    // Most files have none: a small list first, the kernel's largest if it does not fit.
    let mut names = vec![0u8; 1024];
    let mut listing = rustix::fs::llistxattr(by_proc.as_str(), &mut names[..]);
    if listing == Err(Errno::RANGE) {
        names.resize(64 << 10, 0);
        listing = rustix::fs::llistxattr(by_proc.as_str(), &mut names[..]);
    }
    let (listed, source) = match listing {
        Ok(0) => return Ok(()),
        Ok(listed) => (listed, None),
        Err(Errno::NOTSUP) => return Ok(()),
        Err(Errno::NOENT) => {
            let opened = beneath::open(directory, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK, Mode::empty())?;
            names.resize(64 << 10, 0);
            match rustix::fs::flistxattr(&opened, &mut names[..]) {
                Ok(listed) => (listed, Some(opened)),
                Err(Errno::NOTSUP) => return Ok(()),
                Err(errno) => return Err(errno.into()),
            }
        }
        Err(errno) => return Err(errno.into()),
    };
    let mut value = vec![0u8; 64 << 10];
    for attribute in
        names[..listed].split(|byte| *byte == 0).filter(|attribute| !attribute.is_empty() && *attribute != b"security.capability")
    {
        let attribute = std::ffi::CString::new(attribute).map_err(std::io::Error::other)?;
        let length = match &source {
            Some(opened) => rustix::fs::fgetxattr(opened, attribute.as_c_str(), &mut value[..]),
            None => rustix::fs::lgetxattr(by_proc.as_str(), attribute.as_c_str(), &mut value[..]),
        };
        let length = match length {
            Ok(length) => length,
            // Removed since it was listed.
            Err(Errno::NODATA) => continue,
            Err(errno) => return Err(errno.into()),
        };
        rustix::fs::fsetxattr(file, attribute.as_c_str(), &value[..length], rustix::fs::XattrFlags::empty())?;
    }
    Ok(())
}

/// Take the reserved name `landing` away again (the content was not put in place), then
/// return `error`.
fn unname(directory: &OwnedFd, landing: &str, error: std::io::Error) -> std::io::Error {
    let _ = rustix::fs::unlinkat(directory, landing, AtFlags::empty());
    error
}

/// Give the unnamed file `file` the name `name` in `directory`: through its `/proc/self/fd`
/// link, or with `AT_EMPTY_PATH` where `/proc` is not mounted (which needs
/// `CAP_DAC_READ_SEARCH`).
fn give_name(file: &OwnedFd, directory: &OwnedFd, name: &str) -> std::io::Result<()> {
    let by_proc = format!("/proc/self/fd/{}", file.as_raw_fd());
    match rustix::fs::linkat(rustix::fs::CWD, by_proc.as_str(), directory, name, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::NOENT) => {
            rustix::fs::linkat(file.as_fd(), "", directory, name, AtFlags::EMPTY_PATH).map_err(std::io::Error::from)
        }
        Err(errno) => Err(std::io::Error::from(errno)),
    }
}

//! A path's access and modification times in the journal: saved with every file saved whole (a
//! rollback's copy of the file gets them back), and before a call sets the times of a path in
//! place (`set-times`, `set-times-at`), which a rollback puts back on that very object.

use rustix::fs::{AtFlags, StatxFlags, Timespec, Timestamps};

use super::*;

/// When a path was last read and written: seconds and nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Times {
    /// The access time.
    pub accessed: (i64, u32),
    /// The modification time.
    pub modified: (i64, u32),
}

impl Times {
    /// The times `metadata` gives.
    pub(crate) fn of(metadata: &impl std::os::unix::fs::MetadataExt) -> Times {
        let nanoseconds = |value: i64| u32::try_from(value).unwrap_or_default();
        Times {
            accessed: (metadata.atime(), nanoseconds(metadata.atime_nsec())),
            modified: (metadata.mtime(), nanoseconds(metadata.mtime_nsec())),
        }
    }

    fn timestamps(self) -> Timestamps {
        let spec = |(seconds, nanoseconds): (i64, u32)| Timespec { tv_sec: seconds, tv_nsec: nanoseconds.into() };
        Timestamps { last_access: spec(self.accessed), last_modification: spec(self.modified) }
    }

    /// Give the open file `file` these times.
    pub(crate) fn set_on(self, file: &impl rustix::fd::AsFd) -> std::io::Result<()> {
        rustix::fs::futimens(file, &self.timestamps()).map_err(std::io::Error::from)
    }
}

/// What stands at a name: its device and inode, its birth time where the file system keeps
/// one, and its times.
struct Standing {
    identity: (u64, u64),
    born: Option<(i64, u32)>,
    times: Times,
}

/// What stands at `name` in `directory` (not followed if a symlink); `None` if nothing does.
fn standing(directory: &Dir, name: &str) -> std::io::Result<Option<Standing>> {
    let flags = AtFlags::SYMLINK_NOFOLLOW;
    match rustix::fs::statx(directory, name, flags, StatxFlags::INO | StatxFlags::ATIME | StatxFlags::MTIME | StatxFlags::BTIME) {
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(errno) => Err(errno.into()),
        Ok(stat) => Ok(Some(Standing {
            identity: (rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor), stat.stx_ino),
            born: (stat.stx_mask & StatxFlags::BTIME.bits() != 0).then_some((stat.stx_btime.tv_sec, stat.stx_btime.tv_nsec)),
            times: Times {
                accessed: (stat.stx_atime.tv_sec, stat.stx_atime.tv_nsec),
                modified: (stat.stx_mtime.tv_sec, stat.stx_mtime.tv_nsec),
            },
        })),
    }
}

impl Journal {
    /// Save the times of `path` (canonical, in `root`) before the call sets them in place: a
    /// rollback puts them back on the object now there (file, directory or symlink), if the
    /// path still holds it, or holds a copy a rollback made of it. Nothing is saved for a
    /// missing path (the call changes nothing there), nor for an object whose times this call
    /// already saved.
    ///
    /// # Errors
    ///
    /// Whatever looking the path up fails with; the times must not be set then.
    pub fn preserve_times(&mut self, root: &Dir, path: &str) -> std::io::Result<()> {
        let (directory, name) = match crate::beneath::parent(root, path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            result => result?,
        };
        let Some(Standing { identity, born, times }) = standing(&directory, name)? else {
            return Ok(());
        };
        if !self.times_saved.insert((path.to_owned(), identity)) {
            return Ok(());
        }
        self.append(Step {
            path: path.to_owned(),
            prior: Prior::Times { born },
            identity: Some(identity),
            rewrite: None,
            times: Some(times),
        })
    }
}

/// Put back the times `step` (a [`Prior::Times`] step) saved, on the object it saved them of:
/// the one at its path if that is still it, or if `copied` (the rollback restored the path from
/// a step that saved that very object). Anything else there now is another's, left as it is;
/// so is a path that is gone. `Ok(false)` if the times could not be set (the file belongs to
/// another user, who alone may set them).
pub(super) fn put_back(root: &Dir, step: &Step, copied: bool) -> std::io::Result<bool> {
    let Some(times) = step.times else {
        return Ok(true);
    };
    let (directory, name) = match crate::beneath::parent(root, &step.path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        result => result?,
    };
    let Some(now) = standing(&directory, name)? else {
        return Ok(true);
    };
    let born = match step.prior {
        Prior::Times { born } => born,
        _ => None,
    };
    let same = Some(now.identity) == step.identity && born.is_none_or(|born| now.born == Some(born));
    if !(same || copied) || now.times == times {
        return Ok(true);
    }
    match rustix::fs::utimensat(&directory, name, &times.timestamps(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::PERM | rustix::io::Errno::ACCESS | rustix::io::Errno::ROFS) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

//! Files a call replaced or removed, let go of once the call no longer waits on it.
//!
//! When a rename over a file or an unlink drops the last name of an inode that nothing holds
//! open, the kernel frees its blocks in that very call; on a filesystem mounted with `discard`
//! and no journal to batch them, it first waits for the device to discard them. On the 2-core
//! VM the benches run on, a rename over a 4 KiB file took a median 97–155 µs that way and
//! 12–44 µs with the old file held open, the wait then moving to the `close`. So before such a
//! rename or unlink, the host opens the file it replaces (`O_PATH`: nothing is read, and no
//! component ever sees the descriptor) and hands that descriptor here once the change is made:
//! a thread of its own closes it, and the blocks are freed there while the call answers.
//!
//! Only what this pays for is held: a regular file with no other name, of at most
//! [`MOST_HELD_BYTES`] on the disk, on ext4 (where it was measured). A large file is freed in
//! the call, so that its space is free when the call answers (a delete to make room, then a
//! write); and a network filesystem such as NFS would rename a file still held open aside
//! (`.nfsXXXX`) rather than remove it, leaving a name in the workspace.
//!
//! At most [`MOST_HELD`] descriptors wait in the queue; past that (a slow device, a burst of
//! writes) a call closes its own, as before. Besides those, the thread holds the one it is
//! closing, and each call the one between its hold and its change: a descriptor waits no
//! longer than the closes queued ahead of it.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

use rustix::fs::{FileType, Mode, OFlags};

/// Descriptors queued for the closing thread at most.
pub(crate) const MOST_HELD: usize = 64;
/// The largest file held (its blocks on the disk): bigger ones are freed in the call.
pub(crate) const MOST_HELD_BYTES: u64 = 1 << 20;
/// `statfs`'s `f_type` of ext2, ext3 and ext4.
const EXT4_SUPER_MAGIC: i128 = 0xEF53;

/// The closing thread's queue: `None` if the thread could not be started (every call then
/// closes its own).
static QUEUE: OnceLock<Option<SyncSender<OwnedFd>>> = OnceLock::new();

/// The file named `name` in `directory`, held so that it outlives a rename over it or its
/// unlink (see the module's documentation); `None` if there is none, if holding it does not
/// pay (see [`worth_holding`]), or if it cannot be opened: the change then frees it in place,
/// as it would have.
pub(crate) fn hold(directory: impl AsFd, name: &str) -> Option<OwnedFd> {
    let held = rustix::fs::openat(directory, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).ok()?;
    worth_holding(&held).then_some(held)
}

/// Whether the change about to drop `held`'s name would free it, and holding it moves only a
/// short wait: a regular file with no other name and at most [`MOST_HELD_BYTES`] of blocks,
/// on ext4.
fn worth_holding(held: &OwnedFd) -> bool {
    let Ok(stat) = rustix::fs::fstat(held) else { return false };
    let small = u64::try_from(stat.st_blocks).is_ok_and(|blocks| blocks.saturating_mul(512) <= MOST_HELD_BYTES);
    let plain = FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile && stat.st_nlink == 1;
    plain && small && rustix::fs::fstatfs(held).is_ok_and(|filesystem| i128::from(filesystem.f_type) == EXT4_SUPER_MAGIC)
}

impl super::FsGuard {
    /// The file at the canonical workspace `path` (not followed if a symlink), held as
    /// [`hold`] holds it, before an unlink or a rename over it.
    pub(super) fn hold(&self, path: &str) -> Option<OwnedFd> {
        let root = self.root.as_deref()?;
        let held = toolcell_state::beneath::open(root, path, OFlags::PATH | OFlags::NOFOLLOW, Mode::empty()).ok()?;
        worth_holding(&held).then_some(held)
    }
}

/// Close `held` on the closing thread, or here if its queue is full.
pub(crate) fn later(held: Option<OwnedFd>) {
    let Some(held) = held else { return };
    let queue = QUEUE.get_or_init(|| {
        let (queue, closing) = sync_channel::<OwnedFd>(MOST_HELD);
        std::thread::Builder::new()
            .name("toolcell-release".to_owned())
            .spawn(move || {
                for held in closing {
                    drop(held);
                }
            })
            .ok()
            .map(|_| queue)
    });
    match queue.as_ref().map(|queue| queue.try_send(held)) {
        None => {}
        Some(Ok(())) => {}
        Some(Err(TrySendError::Full(held) | TrySendError::Disconnected(held))) => drop(held),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    #[test]
    fn a_held_file_is_closed_on_the_closing_thread() {
        // The write end of a pipe: once it is closed, the read end sees the end of input.
        let (mut reader, writer) = std::io::pipe().expect("pipe");
        later(Some(OwnedFd::from(writer)));
        // Blocks until the closing thread has closed it (a leak would block forever).
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).expect("the read end sees the end once the write end is closed");
        assert!(rest.is_empty());
    }

    /// Whether `directory` is on ext4.
    fn on_ext4(directory: &std::path::Path) -> bool {
        let opened = std::fs::File::open(directory).expect("open the directory");
        i128::from(rustix::fs::fstatfs(&opened).expect("fstatfs").f_type) == EXT4_SUPER_MAGIC
    }

    #[test]
    fn hold_keeps_a_renamed_over_file_alive_until_released() {
        let directory = tempfile::tempdir().expect("temporary directory");
        std::fs::write(directory.path().join("old"), b"old content").expect("write");
        std::fs::write(directory.path().join("new"), b"new").expect("write");
        let opened = std::fs::File::open(directory.path()).expect("open the directory");
        assert!(hold(&opened, "missing").is_none());
        let Some(held) = hold(&opened, "old") else {
            // Held only on ext4, as the temporary directory is on the machines CI runs on.
            assert!(!on_ext4(directory.path()), "a small file with one name on ext4 is held");
            return;
        };
        assert!(on_ext4(directory.path()));
        let before = rustix::fs::fstat(&held).expect("fstat");
        std::fs::rename(directory.path().join("new"), directory.path().join("old")).expect("rename over it");
        // The old inode has no name left, and is still there through the descriptor.
        let after = rustix::fs::fstat(&held).expect("fstat the held file");
        assert_eq!((after.st_ino, after.st_nlink), (before.st_ino, 0));
        later(Some(held));
    }

    #[test]
    fn what_holding_would_not_pay_for_is_not_held() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path();
        // Large: freed in the call, so that its space is free when the call answers.
        std::fs::write(path.join("large"), vec![7_u8; 2 << 20]).expect("write");
        // Another name: nothing is freed.
        std::fs::write(path.join("linked"), b"x").expect("write");
        std::fs::hard_link(path.join("linked"), path.join("other-name")).expect("link");
        std::fs::create_dir(path.join("directory")).expect("mkdir");
        std::os::unix::fs::symlink("linked", path.join("symlink")).expect("symlink");
        let opened = std::fs::File::open(path).expect("open the directory");
        for name in ["large", "linked", "directory", "symlink"] {
            assert!(hold(&opened, name).is_none(), "{name} is not held");
        }
        // Not on ext4 (tmpfs here): a network filesystem would rename a held file aside.
        let shared = tempfile::tempdir_in("/dev/shm").expect("a temporary directory in /dev/shm");
        assert!(!on_ext4(shared.path()));
        std::fs::write(shared.path().join("small"), b"x").expect("write");
        let opened = std::fs::File::open(shared.path()).expect("open the directory");
        assert!(hold(&opened, "small").is_none());
    }
}

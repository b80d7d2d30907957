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
//! At most [`MOST_HELD`] descriptors wait at once; past that (a slow device, a burst of
//! writes) a call closes its own, as before. The process never holds more descriptors than
//! that for this, and a descriptor waits no longer than the closes queued ahead of it.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

use rustix::fs::{Mode, OFlags};

/// Descriptors queued for the closing thread at most.
pub(crate) const MOST_HELD: usize = 64;

/// The closing thread's queue: `None` if the thread could not be started (every call then
/// closes its own).
static QUEUE: OnceLock<Option<SyncSender<OwnedFd>>> = OnceLock::new();

/// The file named `name` in `directory`, held so that it outlives a rename over it or its
/// unlink (see the module's documentation); `None` if there is none (or it cannot be opened:
/// the change then frees it in place, as it would have).
pub(crate) fn hold(directory: impl AsFd, name: &str) -> Option<OwnedFd> {
    rustix::fs::openat(directory, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).ok()
}

impl super::FsGuard {
    /// The file at the canonical workspace `path` (not followed if a symlink), held as
    /// [`hold`] holds it, before an unlink or a rename over it.
    pub(super) fn hold(&self, path: &str) -> Option<OwnedFd> {
        let root = self.root.as_ref()?;
        toolcell_state::beneath::open(root, path, OFlags::PATH | OFlags::NOFOLLOW, Mode::empty()).ok()
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

    #[test]
    fn hold_keeps_a_renamed_over_file_alive_until_released() {
        let directory = tempfile::tempdir().expect("temporary directory");
        std::fs::write(directory.path().join("old"), b"old content").expect("write");
        std::fs::write(directory.path().join("new"), b"new").expect("write");
        let opened = std::fs::File::open(directory.path()).expect("open the directory");
        let held = hold(&opened, "old").expect("the file is there");
        let before = rustix::fs::fstat(&held).expect("fstat");
        std::fs::rename(directory.path().join("new"), directory.path().join("old")).expect("rename over it");
        // The old inode has no name left, and is still there through the descriptor.
        let after = rustix::fs::fstat(&held).expect("fstat the held file");
        assert_eq!((after.st_ino, after.st_nlink), (before.st_ino, 0));
        assert!(hold(&opened, "missing").is_none());
        later(Some(held));
    }
}

//! Judging and carrying out a namespace change as one step.
//!
//! A symlink's target is judged from the directory it is made in; a move is judged by what the
//! moved directory holds. If another call could rename that directory, or make a link in it,
//! between the judgement and the act, the judgement would be of a tree that is no longer
//! there (a link `a/b/l -> ../..` judged in `a/b`, made after `a/b` became `b`, leads outside).
//! So every change of names in a workspace (create, link, symlink, rename, remove) is judged
//! and made while the caller holds the workspace's namespace lock: an exclusive `flock` on the
//! workspace directory itself, taken through a descriptor of its own. Every toolcell call, of
//! this process or any other, takes the same lock on the same directory, whatever state
//! directory it uses. Programs other than toolcell do not take it.

use std::os::fd::OwnedFd;

use rustix::fs::{FlockOperation, Mode, OFlags};

/// Held while a namespace change is judged and made; released when dropped.
pub struct NamespaceLock {
    _directory: OwnedFd,
}

impl NamespaceLock {
    /// Wait for the namespace lock of the workspace `root`.
    ///
    /// # Errors
    ///
    /// Whatever opening the workspace directory or locking it fails with.
    pub fn acquire(root: &cap_std::fs::Dir) -> std::io::Result<Self> {
        // A descriptor of its own: `flock` locks belong to an open file description, so two
        // calls sharing one would not exclude each other.
        let directory = rustix::fs::openat(root, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        loop {
            match rustix::fs::flock(&directory, FlockOperation::LockExclusive) {
                Err(rustix::io::Errno::INTR) => {}
                Err(errno) => return Err(errno.into()),
                Ok(()) => return Ok(NamespaceLock { _directory: directory }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_across_descriptors() {
        let temp = tempfile::tempdir().expect("temp dir");
        let root = cap_std::fs::Dir::open_ambient_dir(temp.path(), cap_std::ambient_authority()).expect("open");
        let held = NamespaceLock::acquire(&root).expect("first");
        let other = rustix::fs::openat(&root, ".", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).expect("open");
        assert_eq!(rustix::fs::flock(&other, FlockOperation::NonBlockingLockExclusive), Err(rustix::io::Errno::WOULDBLOCK));
        drop(held);
        assert_eq!(rustix::fs::flock(&other, FlockOperation::NonBlockingLockExclusive), Ok(()));
    }
}

//! What changed in a workspace since the last look, from the kernel (inotify): one watch per
//! directory, drained without blocking before a search answers.
//!
//! The kernel queues an event while the system call that changed the directory entry or the
//! file runs, so every change whose call returned before [`Watcher::drain`] began is in the
//! queue when it reads. What inotify does not report — a write through a hard link from
//! outside the watched directories, a write through a shared mapping, another machine's write
//! on a network file system — it cannot say; the content index treats files with more than one
//! link as always changed, and the README lists the rest. A queue that overflowed says so, and
//! the caller falls back to comparing every file.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

/// The events that can change what a search would find.
fn interesting() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::DONT_FOLLOW
        | WatchFlags::ONLYDIR
        | WatchFlags::EXCL_UNLINK
}

/// The watches on a workspace's directories.
#[derive(Debug)]
pub struct Watcher {
    fd: OwnedFd,
    /// The workspace's host path (watches are added by path).
    root: PathBuf,
    /// Watch descriptor → the directory's workspace-relative path (`""` for the root).
    directories: HashMap<i32, String>,
    /// The reverse, to remove the watches below a directory that moved away.
    watches: HashMap<String, i32>,
}

/// What draining the queue found.
pub enum Drained {
    /// Workspace-relative paths whose entries (files or directories) may have changed.
    Changed(Vec<String>),
    /// The kernel dropped events (or the watches could not follow the tree): what changed is
    /// unknown, and every file must be compared.
    Lost,
}

impl Watcher {
    /// Watches on `root` (the workspace's host path) and on each of `directories` (relative).
    pub fn start(root: &Path, directories: impl IntoIterator<Item = String>) -> std::io::Result<Watcher> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        let mut watcher = Watcher { fd, root: root.to_path_buf(), directories: HashMap::new(), watches: HashMap::new() };
        watcher.watch(String::new())?;
        for directory in directories {
            watcher.watch(directory)?;
        }
        Ok(watcher)
    }

    /// Watch the directory at `relative`.
    pub fn watch(&mut self, relative: String) -> std::io::Result<()> {
        let path = if relative.is_empty() { self.root.clone() } else { self.root.join(&relative) };
        let wd = inotify::add_watch(&self.fd, &path, interesting())?;
        if let Some(previous) = self.directories.insert(wd, relative.clone())
            && previous != relative
        {
            self.watches.remove(&previous);
        }
        self.watches.insert(relative, wd);
        Ok(())
    }

    /// Stop watching `relative` and every directory below it (it moved or is gone).
    fn forget(&mut self, relative: &str) {
        let below: Vec<String> = self
            .watches
            .keys()
            .filter(|path| *path == relative || path.strip_prefix(relative).is_some_and(|rest| rest.starts_with('/')))
            .cloned()
            .collect();
        for path in below {
            if let Some(wd) = self.watches.remove(&path) {
                self.directories.remove(&wd);
                let _ = inotify::remove_watch(&self.fd, wd);
            }
        }
    }

    /// Every event queued since the last drain, as the paths they name. New directories are
    /// not watched here: the caller walks them (which finds their files and directories) and
    /// calls [`watch`](Self::watch) for each, after which nothing created in them is missed
    /// (what was created before the watch, the walk sees).
    pub fn drain(&mut self) -> Drained {
        let mut buffer = [MaybeUninit::<u8>::uninit(); 16 * 1024];
        let mut reader = inotify::Reader::new(&self.fd, &mut buffer);
        let mut changed = Vec::new();
        let mut moved_away = Vec::new();
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return Drained::Lost,
            };
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                return Drained::Lost;
            }
            let Some(directory) = self.directories.get(&event.wd()).cloned() else {
                continue;
            };
            if flags.contains(ReadFlags::IGNORED) {
                // The directory itself is gone (its parent's event names it).
                self.directories.remove(&event.wd());
                if self.watches.get(&directory) == Some(&event.wd()) {
                    self.watches.remove(&directory);
                }
                continue;
            }
            if flags.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF) {
                if directory.is_empty() {
                    // The workspace's own directory moved or went: nothing is known any more.
                    return Drained::Lost;
                }
                changed.push(directory);
                continue;
            }
            let Some(name) = event.file_name().and_then(|name| name.to_str().ok()) else {
                // A name that is not UTF-8 is never a workspace path; its directory is looked at.
                changed.push(directory);
                continue;
            };
            let path = if directory.is_empty() { name.to_owned() } else { format!("{directory}/{name}") };
            if flags.contains(ReadFlags::ISDIR) && flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::DELETE) {
                moved_away.push(path.clone());
            }
            changed.push(path);
        }
        for path in moved_away {
            self.forget(&path);
        }
        changed.sort();
        changed.dedup();
        Drained::Changed(changed)
    }

    /// A second descriptor of the notification queue, to wait on for events without holding
    /// the watcher (it reads nothing).
    pub fn queue(&self) -> std::io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// Whether `relative` is watched.
    pub fn watches(&self, relative: &str) -> bool {
        self.watches.contains_key(relative)
    }
}

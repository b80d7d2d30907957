//! The index's background work: building an index when a search first wants one, and taking
//! in a watched workspace's change notifications between searches, each on a thread of its
//! own that runs once more when asked again while it works.

use super::*;

/// Workspaces with a background thread at work, each with whether it was asked for again
/// while it ran.
pub(super) type Running = Arc<Mutex<HashMap<PathBuf, bool>>>;

/// Run `work` on a thread named `name`, unless one runs for `workspace` in `running` already;
/// then that thread runs `work` once more when it is done, since what it did may already be
/// out of date for whoever asked (an index damaged after it was written, a watcher replaced
/// after the thread saw it go).
pub(super) fn spawn_once(running: &Running, workspace: &std::path::Path, name: &str, mut work: impl FnMut() + Send + 'static) {
    {
        let mut running = running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(again) = running.get_mut(workspace) {
            *again = true;
            return;
        }
        running.insert(workspace.to_path_buf(), false);
    }
    let (done, key) = (Arc::clone(running), workspace.to_path_buf());
    let spawned = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
        loop {
            work();
            let mut running = done.lock().unwrap_or_else(PoisonError::into_inner);
            match running.get_mut(&key) {
                Some(again) if *again => *again = false,
                _ => {
                    running.remove(&key);
                    break;
                }
            }
        }
    });
    if spawned.is_err() {
        running.lock().unwrap_or_else(PoisonError::into_inner).remove(workspace);
    }
}

/// The nice value of a background index build.
pub(super) const BUILD_NICENESS: i32 = 10;

/// How long the thread taking in a workspace's notifications waits for one before it checks
/// that its index is still wanted.
pub(super) const ABSORB_IDLE: Duration = Duration::from_secs(1);
/// How long it lets a burst of notifications gather before taking them in.
pub(super) const ABSORB_GATHER: Duration = Duration::from_millis(2);

impl IndexStore {
    /// Take in the notifications of the workspace at `root_path` as they come, between
    /// searches (a thread per watched workspace, waiting on the queue, ending with the store or
    /// when the index stops watching): a search after a burst of edits then finds them read
    /// already. Searches still drain the queue themselves before answering; this only moves
    /// work ahead of them.
    pub(super) fn absorb_in_background(
        &self,
        slot: &Arc<Mutex<Option<Live>>>,
        root_path: &std::path::Path,
        root: &cap_std::fs::Dir,
        skip: &[String],
    ) {
        let Ok(root) = root.try_clone() else {
            return;
        };
        let (slot, workspace, skip, freshness) = (Arc::downgrade(slot), root_path.to_path_buf(), skip.to_vec(), self.freshness);
        spawn_once(&self.absorbing, root_path, "toolcell-index-watch", move || {
            loop {
                // The queue as it is now (a rebuilt index watches with a new one).
                let queue = {
                    let Some(slot) = slot.upgrade() else {
                        break;
                    };
                    let live = slot.lock().unwrap_or_else(PoisonError::into_inner);
                    match live.as_ref().and_then(|current| current.watcher.as_ref()).map(Watcher::queue) {
                        Some(Ok(queue)) => queue,
                        _ => break,
                    }
                };
                let mut waiting = [rustix::event::PollFd::new(&queue, rustix::event::PollFlags::IN)];
                let timeout = rustix::event::Timespec::try_from(ABSORB_IDLE).ok();
                match rustix::event::poll(&mut waiting, timeout.as_ref()) {
                    Ok(0) => continue,
                    Ok(_) => {}
                    Err(_) => {
                        std::thread::sleep(ABSORB_GATHER * 50);
                        continue;
                    }
                }
                std::thread::sleep(ABSORB_GATHER);
                let Some(slot) = slot.upgrade() else {
                    break;
                };
                let unread = {
                    let mut live = slot.lock().unwrap_or_else(PoisonError::into_inner);
                    let Some(current) = live.as_mut().filter(|current| current.watcher.is_some()) else {
                        break;
                    };
                    current.refresh(&workspace, &root, &skip, freshness);
                    current.unread()
                };
                // One file at a time, so that a search waits for one read at most.
                for path in unread {
                    let mut live = slot.lock().unwrap_or_else(PoisonError::into_inner);
                    match live.as_mut() {
                        Some(current) => current.read_one(&root, &path),
                        None => break,
                    }
                }
            }
        });
    }
}

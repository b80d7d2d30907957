//! The content index of a workspace, kept in the state directory (never in the workspace,
//! where tools could change it): built by the host from the workspace's text files, checked
//! whole when read back, and compared with the workspace to say how much changed since.
//!
//! Which files are indexed is what `search_files` searches: regular files under 16 MiB with
//! no NUL byte in their first 8 KiB, outside `.git`, not through symlinks, and none of the
//! host's own paths. The index holds every such file whatever the roles may read: who may
//! learn what from it is decided when it is asked, not here.

mod background;
mod live;
mod scan;

use background::*;
use live::*;
use scan::*;

use cap_std::fs::MetadataExt as _;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::Digest as _;
use toolcell_index::{Index, IndexBuilder, Stamp};

use crate::index_watch::{Drained, Watcher};

/// Files larger than this are not indexed (nor searched).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Leading bytes in which a NUL makes a file binary.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// What building an index did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexReport {
    /// Files indexed.
    pub files: usize,
    /// Distinct trigrams.
    pub trigrams: usize,
    /// Bytes of text indexed.
    pub text_bytes: u64,
    /// Bytes of the index file.
    pub index_bytes: u64,
    /// How long building and writing took.
    pub took: Duration,
}

impl IndexReport {
    fn of(index: &Index, index_bytes: usize, took: Duration) -> Self {
        IndexReport {
            files: index.len(),
            trigrams: index.trigrams(),
            text_bytes: index.text_bytes(),
            index_bytes: index_bytes as u64,
            took,
        }
    }
}

/// What the state directory holds for a workspace's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexStatus {
    /// No index (never built, or dropped).
    Absent,
    /// An index file that failed its checks; it is not used, and building replaces it.
    Damaged(String),
    /// A usable index.
    Present {
        /// Its numbers, as built.
        report: IndexReport,
        /// Files added, removed or changed in the workspace since it was built.
        changed: usize,
    },
}

impl IndexStore {
    /// Build the content index of the workspace at `root_path` (opened as `root`) from its text
    /// files, leaving out `never_indexed` (the host's own paths in it), and keep it in the state
    /// directory, replacing any earlier one.
    ///
    /// # Errors
    ///
    /// The I/O error if the index cannot be written.
    pub fn build(&self, root_path: &std::path::Path, root: &cap_std::fs::Dir, never_indexed: &[String]) -> std::io::Result<IndexReport> {
        let started = Instant::now();
        let (index, bytes) = build_into(root, never_indexed, &self.path_for(root_path))?;
        Ok(IndexReport::of(&index, bytes, started.elapsed()))
    }

    /// The index of the workspace at `root_path` as the state directory holds it, checked
    /// whole, and how many files changed since it was built.
    ///
    /// # Errors
    ///
    /// The I/O error if the index file exists but cannot be read.
    pub fn status(&self, root_path: &std::path::Path, root: &cap_std::fs::Dir, never_indexed: &[String]) -> std::io::Result<IndexStatus> {
        let bytes = match crate::storage::read_host_file(&self.path_for(root_path)) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(IndexStatus::Absent),
            Err(error) => return Err(error),
        };
        let index = match Index::from_bytes(&bytes) {
            Ok(index) => index,
            Err(reason) => return Ok(IndexStatus::Damaged(reason.to_string())),
        };
        let now: HashMap<String, Stamp> = walk(root, "", never_indexed, None).into_iter().map(|file| (file.path, file.stamp)).collect();
        let indexed: HashSet<&str> = index.files().map(|(file, _)| file).collect();
        // Changed or gone since; then text files that are new.
        let mut changed = index.files().filter(|(file, stamp)| now.get(*file) != Some(stamp)).count();
        changed += now.keys().filter(|file| !indexed.contains(file.as_str()) && !is_binary(root, file)).count();
        Ok(IndexStatus::Present { report: IndexReport::of(&index, bytes.len(), Duration::ZERO), changed })
    }

    /// Remove the index of the workspace at `root_path`; whether there was one.
    ///
    /// # Errors
    ///
    /// The I/O error if it exists and cannot be removed.
    pub fn remove(&self, root_path: &std::path::Path) -> std::io::Result<bool> {
        match std::fs::remove_file(self.path_for(root_path)) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// How a long-running host learns what changed in a workspace since its index was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexFreshness {
    /// The kernel's change notifications (inotify), drained before each search; every file is
    /// compared only when the index is loaded or the notifications were lost. The default.
    #[default]
    Watch,
    /// Every file's size, modification time and inode compared before each search: slower on
    /// large trees, and it also sees what notifications cannot (see the README).
    Walk,
}

/// The indexes in the state directory, each kept loaded while its file is unchanged together
/// with what changed in its workspace since it was built; shared with the calls, whose tools
/// ask it for search candidates.
#[derive(Debug)]
pub struct IndexStore {
    directory: PathBuf,
    freshness: IndexFreshness,
    build_on_first_search: bool,
    live: Mutex<HashMap<PathBuf, Arc<Mutex<Option<Live>>>>>,
    /// Workspaces whose index is being built in the background.
    building: Running,
    /// Workspaces whose notifications a thread takes in between searches.
    absorbing: Running,
}

/// What a call needs to ask for search candidates: the store and the workspace.
#[derive(Debug, Clone)]
pub struct IndexScope {
    /// The indexes.
    pub store: Arc<IndexStore>,
    /// The canonical host path of the workspace.
    pub workspace: PathBuf,
}

impl IndexStore {
    /// The indexes kept under `state_dir`, kept fresh as `freshness` says, and built in the
    /// background on a search that finds none when `build_on_first_search`.
    pub fn new(state_dir: &std::path::Path, freshness: IndexFreshness, build_on_first_search: bool) -> Self {
        IndexStore {
            directory: state_dir.join(crate::INDEX_DIR),
            freshness,
            build_on_first_search,
            live: Mutex::default(),
            building: Arc::default(),
            absorbing: Arc::default(),
        }
    }

    /// Where the index of the workspace at `root` is kept: a file in the state directory.
    pub fn path_for(&self, root: &std::path::Path) -> PathBuf {
        let key = toolcell_audit::hex(&sha2::Sha256::digest(root.as_os_str().as_encoded_bytes()));
        self.directory.join(format!("{}.idx", &key[..32]))
    }

    /// The slot of the workspace at `root`.
    fn slot(&self, root: &std::path::Path) -> Arc<Mutex<Option<Live>>> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(live.entry(root.to_path_buf()).or_default())
    }

    /// The host changed `paths` in the workspace at `root_path` (a committed call): taken in
    /// now, with the notifications queued so far, and the files read, so that the next search
    /// finds the host's own writes indexed. Work moved ahead of the search only: the commit's
    /// own notifications name the same paths, so when a search holds the index (the commit
    /// does not wait for it) they are left to the next one.
    pub fn note_written(&self, root_path: &std::path::Path, root: &cap_std::fs::Dir, skip: &[String], paths: &[String]) {
        if paths.is_empty() {
            return;
        }
        let Some(slot) = self.live.lock().unwrap_or_else(PoisonError::into_inner).get(root_path).cloned() else {
            return;
        };
        let mut live = match slot.try_lock() {
            Ok(live) => live,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if let Some(live) = live.as_mut()
            // Without notifications the next search compares every file anyway.
            && live.watcher.is_some()
        {
            if !live.take_notified(root, skip, paths) {
                // Lost: the next search compares every file.
                live.watcher = None;
                return;
            }
            for path in paths {
                live.read_one(root, path);
            }
        }
    }

    /// Build the index of the workspace at `root` in the background, unless one is being built;
    /// a build asked for while one finishes runs after it, unless that one left a usable index.
    fn build_in_background(&self, root_path: &std::path::Path, root: &cap_std::fs::Dir, skip: &[String]) {
        let Ok(root) = root.try_clone() else {
            return;
        };
        let (skip, path) = (skip.to_vec(), self.path_for(root_path));
        spawn_once(&self.building, root_path, "toolcell-index", move || {
            if read_index(&path).is_some() {
                return;
            }
            // Behind the calls it serves: on Linux a thread's nice value is its own (who = 0
            // names the calling thread), so only this build yields.
            let _ = rustix::process::setpriority_process(None, BUILD_NICENESS);
            // A failed build leaves no index: searches scan, and the next one tries again.
            let _ = build_into(&root, &skip, &path);
        });
    }
}

/// The index file at `path`, if it is there and passes its checks.
fn read_index(path: &std::path::Path) -> Option<Index> {
    Index::from_bytes(&crate::storage::read_host_file(path).ok()?).ok()
}

impl IndexScope {
    /// The files under `under` that may hold a match of `pattern`, in walk order: the index's
    /// candidates among the files as they were indexed, and the files added or changed since
    /// that may match (read by the host once per version, none started past `deadline`: those
    /// are candidates). `None` without a usable index or for a pattern the index cannot read.
    /// Who may see which file is the caller's to filter.
    pub fn candidates(
        &self,
        root: &cap_std::fs::Dir,
        host_paths: &[String],
        question: (&str, bool, &str),
        deadline: Option<Instant>,
    ) -> Option<Vec<String>> {
        let (pattern, case_insensitive, under) = question;
        let store = &self.store;
        let query = toolcell_index::plan(pattern, case_insensitive).ok()?;
        if query == toolcell_index::Query::All {
            // Nothing to look up: every file is a candidate, and the tool scans (on every core).
            return None;
        }
        let slot = store.slot(&self.workspace);
        let mut live = slot.lock().unwrap_or_else(PoisonError::into_inner);
        let path = store.path_for(&self.workspace);
        let file = std::fs::symlink_metadata(&path).ok().and_then(|metadata| Some((metadata.modified().ok()?, metadata.len())));
        // Whether the index is usable, and whether it was just compared with the workspace.
        let (usable, compared) = match (file, live.as_ref()) {
            (Some(file), Some(current)) if current.file == file => (true, false),
            (Some(file), _) => {
                // Read the index while the workspace is walked to compare with it: neither
                // needs the other, and each takes about as long.
                let (index, (files, watcher)) = std::thread::scope(|scope| {
                    let looking = scope.spawn(|| look(&self.workspace, root, host_paths, store.freshness));
                    let index = read_index(&path);
                    (index, looking.join().unwrap_or_else(|_| look(&self.workspace, root, host_paths, store.freshness)))
                });
                match index {
                    Some(index) => {
                        let mut fresh = Live::new(file, Arc::new(index));
                        fresh.compare(&files, watcher);
                        *live = Some(fresh);
                        (true, true)
                    }
                    None => (false, false),
                }
            }
            (None, _) => (false, false),
        };
        if !usable {
            // No index, or a damaged one (never used): a host that builds on first search
            // (re)builds it for the searches after this one.
            *live = None;
            if store.build_on_first_search {
                store.build_in_background(&self.workspace, root, host_paths);
            }
            return None;
        }
        let current = live.as_mut()?;
        if !compared {
            current.refresh(&self.workspace, root, host_paths, store.freshness);
        }
        if current.watcher.is_some() {
            store.absorb_in_background(&slot, &self.workspace, root, host_paths);
        }
        Some(current.candidates(root, &query, under, deadline))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// A build asked for while one is finishing (the index it wrote was damaged before the
    /// thread ended) is not lost: the running thread works once more. Asked for any number of
    /// times meanwhile, it runs once more.
    #[test]
    fn asking_while_the_work_runs_runs_it_once_more() {
        let running = Running::default();
        let workspace = std::path::Path::new("/w");
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (started_sender, started_receiver) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let counted = Arc::clone(&runs);
        spawn_once(&running, workspace, "test-work", move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            started_sender.send(()).expect("tell");
            released.recv().expect("released");
        });
        started_receiver.recv().expect("the first run started");
        for _ in 0..3 {
            spawn_once(&running, workspace, "test-work", || panic!("a second thread ran"));
        }
        release.send(()).expect("release the first run");
        started_receiver.recv().expect("the second run started");
        release.send(()).expect("release the second run");
        while running.lock().expect("lock").contains_key(workspace) {
            std::thread::yield_now();
        }
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}

//! What `undo_edit` restores: for each session, the state each file had before the session's
//! last successful calls changed it, taken from those calls' journals when they were kept.
//!
//! Kept in `undo/<hash of workspace and session>/` in the state directory (the index and one
//! blob per saved file), at most [`MAX_ENTRIES`] per session, oldest dropped first.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use crate::deferred::Deferred;
use crate::journal::{Prior, Step};
use crate::reads::hash_of;

/// Changes remembered per session.
pub(crate) const MAX_ENTRIES: usize = 100;

/// One undoable change of one file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct UndoEntry {
    /// The canonical workspace-relative path.
    pub(crate) path: String,
    /// The call that made the change.
    pub(crate) call_id: String,
    /// What the file was before: absent, or a file whose content is the blob in this
    /// session's undo directory.
    pub(crate) prior: Prior,
    /// SHA-256 of the content the call left, or `None` if it removed the file.
    pub(crate) after: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    entries: Vec<UndoEntry>,
    next_blob: u64,
}

/// Every session's undoable changes.
#[derive(Debug)]
pub(crate) struct UndoStore {
    directory: PathBuf,
    lock: Arc<Mutex<()>>,
    /// Records are written after the call answers; reading them waits for that.
    deferred: Arc<Deferred>,
}

impl UndoStore {
    pub(crate) fn new(work_dir: &Path, deferred: Arc<Deferred>) -> Self {
        UndoStore { directory: work_dir.join("undo"), lock: Arc::default(), deferred }
    }

    /// The directory of `session`'s undo entries and blobs.
    pub(crate) fn session_dir(&self, session: &str, workspace: &Path) -> PathBuf {
        self.directory.join(crate::session_key(session, workspace))
    }

    /// Keep what a committed call's journal saved: the first prior state of each file it
    /// changed, and a hash of what it left (taken now). Written after the call answers; the
    /// blobs are moved out of `blob_dir`, which is then removed.
    pub(crate) fn record(&self, session: &str, workspace: &Path, root: &Dir, call_id: &str, steps: Vec<Step>, blob_dir: Option<PathBuf>) {
        let mut seen = std::collections::HashSet::new();
        let mut kept = Vec::new();
        for step in steps {
            if !seen.insert(step.path.clone()) {
                continue;
            }
            let after = match root.symlink_metadata(&step.path) {
                Err(_) => None,
                Ok(metadata) if metadata.is_file() => match hash_of(root, &step.path) {
                    Some(hash) => Some(hash),
                    None => continue,
                },
                // Directories and symlinks are not edits; `undo_edit` restores files.
                Ok(_) => continue,
            };
            if matches!(step.prior, Prior::Absent | Prior::File { .. } | Prior::Inline { .. }) {
                kept.push((step, after));
            }
        }
        let directory = self.session_dir(session, workspace);
        let lock = Arc::clone(&self.lock);
        let call_id = call_id.to_owned();
        self.deferred.submit(move || {
            // Without the record the change still stands; `undo_edit` will say there is
            // nothing to undo.
            let _guard = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = store_record(&directory, &call_id, kept, blob_dir.as_deref());
            if let Some(blob_dir) = blob_dir {
                let _ = std::fs::remove_dir_all(blob_dir);
            }
        });
    }

    /// The latest undoable change of `path` by `session`.
    pub(crate) fn last(&self, session: &str, workspace: &Path, path: &str) -> Option<UndoEntry> {
        self.deferred.flush();
        let _guard = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        load(&self.session_dir(session, workspace)).entries.into_iter().rev().find(|entry| entry.path == path)
    }

    /// Forget the change `entry` (after it was undone), and its blob.
    pub(crate) fn forget(&self, session: &str, workspace: &Path, entry: &UndoEntry) -> std::io::Result<()> {
        self.deferred.flush();
        let _guard = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let directory = self.session_dir(session, workspace);
        let mut index = load(&directory);
        if let Some(position) = index.entries.iter().rposition(|kept| kept.path == entry.path && kept.call_id == entry.call_id) {
            let removed = index.entries.remove(position);
            if let Prior::File { blob, .. } = removed.prior {
                let _ = std::fs::remove_file(directory.join(blob));
            }
        }
        store(&directory, &index)
    }
}

/// One change a session made to one file, for a reviewer: the content before, and the content
/// after when it can still be told (the next change's prior state, or the file as it is now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionChange {
    /// The call that made it.
    pub call_id: String,
    /// The canonical workspace-relative path.
    pub path: String,
    /// The content before; `None` if the file did not exist.
    pub before: Option<Vec<u8>>,
    /// The content after: `Some(None)` if the call removed the file, `None` if it changed
    /// again since in a way the records do not hold.
    pub after: Option<Option<Vec<u8>>>,
}

impl UndoStore {
    /// The changes `session` made in `workspace` that its undo records still hold (the last
    /// [`MAX_ENTRIES`]), oldest first.
    pub(crate) fn changes(&self, session: &str, workspace: &Path, root: &Dir) -> Vec<SessionChange> {
        use sha2::Digest as _;
        self.deferred.flush();
        let _guard = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let directory = self.session_dir(session, workspace);
        let entries = load(&directory).entries;
        let content = |prior: &Prior| match prior {
            Prior::File { blob, .. } => std::fs::read(directory.join(blob)).ok(),
            _ => None,
        };
        let mut changes = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let before = content(&entry.prior);
            let after = match &entry.after {
                None => Some(None),
                Some(hash) => {
                    let next = entries[index + 1..].iter().find(|later| later.path == entry.path);
                    let candidate = match next {
                        Some(later) => content(&later.prior),
                        None => root.read(&entry.path).ok(),
                    };
                    candidate.filter(|bytes| crate::hex(&sha2::Sha256::digest(bytes)) == *hash).map(Some)
                }
            };
            changes.push(SessionChange { call_id: entry.call_id.clone(), path: entry.path.clone(), before, after });
        }
        changes
    }
}

/// Add one call's entries to the session's index in `directory`, taking blobs from `blob_dir`,
/// and drop the oldest past [`MAX_ENTRIES`].
fn store_record(directory: &Path, call_id: &str, kept: Vec<(Step, Option<String>)>, blob_dir: Option<&Path>) -> std::io::Result<()> {
    std::fs::create_dir_all(directory)?;
    let mut index = load(directory);
    for (step, after) in kept {
        let prior = match step.prior {
            Prior::Absent => Prior::Absent,
            Prior::File { blob, mode } => {
                let Some(blob_dir) = blob_dir else {
                    continue;
                };
                index.next_blob += 1;
                let kept = index.next_blob.to_string();
                std::fs::rename(blob_dir.join(blob), directory.join(&kept))?;
                Prior::File { blob: kept, mode }
            }
            // Kept as a blob too: the index stays small.
            Prior::Inline { hex, mode } => {
                index.next_blob += 1;
                let kept = index.next_blob.to_string();
                std::fs::write(directory.join(&kept), crate::journal::unhex(&hex)?)?;
                Prior::File { blob: kept, mode }
            }
            _ => continue,
        };
        index.entries.push(UndoEntry { path: step.path, call_id: call_id.to_owned(), prior, after });
    }
    while index.entries.len() > MAX_ENTRIES {
        let dropped = index.entries.remove(0);
        if let Prior::File { blob, .. } = dropped.prior {
            let _ = std::fs::remove_file(directory.join(blob));
        }
    }
    store(directory, &index)
}

fn load(directory: &Path) -> Index {
    std::fs::read(directory.join("index.json")).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default()
}

fn store(directory: &Path, index: &Index) -> std::io::Result<()> {
    crate::replace_json(&directory.join("index.json"), index, false)
}

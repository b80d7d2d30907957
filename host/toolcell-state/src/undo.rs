//! What `undo_edit` restores: for each session, the state each file had before the session's
//! last successful calls changed it, taken from those calls' journals when they were kept.
//!
//! Kept in `undo/<hash of workspace and session>/` in the state directory: `log.jsonl`, to
//! which each committed call appends one line per file it changed (a small file's prior
//! content inline, a bigger one's as a blob file moved there from the journal) and `undo_edit`
//! a line forgetting what it restored. So recording costs one append; the log is rewritten
//! only when it has grown well past the [`MAX_ENTRIES`] it keeps per session (oldest dropped).

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use crate::journal::{Prior, Step};
use crate::reads::{Version, hash_of};

/// Changes remembered per session.
pub const MAX_ENTRIES: usize = 100;
/// The log is rewritten with only what it keeps once it holds this many lines.
const COMPACT_LINES: usize = 4 * MAX_ENTRIES;
use crate::dir::UNDO_LOG_FILE as LOG;

/// One undoable change of one file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UndoEntry {
    /// The canonical workspace-relative path.
    pub path: String,
    /// The call that made the change.
    pub call_id: String,
    /// What the file was before: absent, a small file's content inline, or a file whose
    /// content is the blob in this session's undo directory.
    pub prior: Prior,
    /// SHA-256 of the content the call left, or `None` if it removed the file (empty for a
    /// directory).
    pub after: Option<String>,
    /// The entry is a directory the call created: undoing a file the call created in it
    /// removes it too, once it is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub directory: bool,
}

/// One line of a session's log.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Line {
    Record(UndoEntry),
    /// `undo_edit` restored this change: it is no longer undoable.
    Forget {
        path: String,
        call_id: String,
    },
}

/// Every session's undoable changes.
#[derive(Debug)]
pub struct UndoStore {
    directory: PathBuf,
    /// Held while a log is read or written; the number of lines in each log this process has
    /// counted (so that deciding to compact does not read the log on every append).
    lock: Mutex<HashMap<PathBuf, usize>>,
    /// The store every host shares, which holds the logs and their blobs instead (`None`:
    /// this host's state directory). Blobs are still put in the session's directory here
    /// before a restore reads them.
    shared: Option<std::sync::Arc<dyn crate::SessionBackend>>,
}

impl UndoStore {
    /// Undo records in `work_dir/undo`.
    pub fn new(work_dir: &Path) -> Self {
        UndoStore { directory: work_dir.join(crate::UNDO_DIR), lock: Mutex::new(HashMap::new()), shared: None }
    }

    /// Undo records in a store every host shares (blobs are fetched into `work_dir/undo`
    /// when a restore needs them), so that an edit on one host is undone on another.
    pub fn shared(work_dir: &Path, backend: std::sync::Arc<dyn crate::SessionBackend>) -> Self {
        UndoStore { shared: Some(backend), ..UndoStore::new(work_dir) }
    }

    /// The undoable changes of `session`, oldest first.
    fn entries(&self, session: &str, workspace: &Path) -> Result<Vec<UndoEntry>, crate::SessionStoreError> {
        match &self.shared {
            Some(backend) => {
                let lines = backend.undo_lines(&crate::storage::session_key(session, workspace))?;
                Ok(entries_of(lines.iter().map(String::as_bytes)))
            }
            None => Ok(load(&self.session_dir(session, workspace))),
        }
    }

    /// Append `lines` to `session`'s log, here or in the shared store (with the blobs they
    /// name, read from the session's directory).
    fn append_lines(&self, session: &str, workspace: &Path, lines: &[Line], counts: &mut HashMap<PathBuf, usize>) -> std::io::Result<()> {
        let directory = self.session_dir(session, workspace);
        let Some(backend) = &self.shared else {
            return append(&directory, lines, counts);
        };
        if lines.is_empty() {
            return Ok(());
        }
        let mut texts = Vec::new();
        let mut blobs = Vec::new();
        for line in lines {
            texts.push(serde_json::to_string(line).map_err(std::io::Error::other)?);
            if let Line::Record(UndoEntry { prior: Prior::File { blob, .. }, .. }) = line {
                blobs.push((blob.clone(), crate::storage::read_host_file(&directory.join(blob))?));
            }
        }
        backend
            .append_undo(&crate::storage::session_key(session, workspace), &texts, &blobs, COMPACT_LINES)
            .map_err(std::io::Error::other)?;
        // The store keeps them now; a restore fetches the one it needs.
        for (name, _) in &blobs {
            let _ = std::fs::remove_file(directory.join(name));
        }
        Ok(())
    }

    /// The content of the blob `name` of `session`: in its directory here, or fetched from
    /// the shared store (and kept here for the restore that reads it).
    fn blob(&self, session: &str, workspace: &Path, name: &str) -> Option<Vec<u8>> {
        let directory = self.session_dir(session, workspace);
        if let Ok(bytes) = crate::storage::read_host_file(&directory.join(name)) {
            return Some(bytes);
        }
        let backend = self.shared.as_ref()?;
        let bytes = backend.undo_blob(&crate::storage::session_key(session, workspace), name).ok()??;
        crate::storage::create_private_dirs(&directory).ok()?;
        crate::storage::replace_bytes(&directory.join(name), &bytes, false).ok()?;
        Some(bytes)
    }

    /// The directory of `session`'s undo entries and blobs.
    pub fn session_dir(&self, session: &str, workspace: &Path) -> PathBuf {
        self.directory.join(crate::storage::session_key(session, workspace))
    }

    /// Keep what a committed call's journal saved: the first prior state of each file it
    /// changed, with a hash of what the call left (taken from `written`, the versions of files
    /// it wrote with their content hashed as they were placed, where a file still has one; see
    /// [`crate::reads::ReadTracker::changes`]). Blobs are moved out of `blob_dir`.
    #[expect(
        clippy::too_many_arguments,
        reason = "the call's session and files, its journal's steps and blobs, and what it wrote: all of what one record holds"
    )]
    pub fn record(
        &self,
        session: &str,
        workspace: &Path,
        root: &Dir,
        call_id: &str,
        steps: Vec<Step>,
        blob_dir: Option<&Path>,
        written: &[(String, Version)],
    ) -> std::io::Result<()> {
        let mut counts = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let directory = self.session_dir(session, workspace);
        let lines = lines_of(root, call_id, steps, written, |blob, kept| {
            let Some(blob_dir) = blob_dir else {
                return Ok(false);
            };
            crate::storage::create_private_dirs(&directory)?;
            std::fs::rename(blob_dir.join(blob), directory.join(kept))?;
            Ok(true)
        })?;
        self.append_lines(session, workspace, &lines, &mut counts)
    }

    /// Whether the undo records are in a store every host shares.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// With a shared store, keep a call's undo record (from its journal `steps`, the blobs read
    /// from `blob_dir`, which stays whole for a rollback) and what it taught the session
    /// (`reads`, see [`crate::reads::ReadTracker::changes`]) in one transaction, while its
    /// journal is still open: if the store cannot keep them, the caller rolls the call back,
    /// so that a call never stands without its undo record.
    ///
    /// # Errors
    ///
    /// [`crate::SessionStoreError`] (nothing is kept), or an I/O error reading a blob.
    #[expect(
        clippy::too_many_arguments,
        reason = "the call's session and files, its journal's steps and blobs, and its reads: all of what one record holds"
    )]
    pub fn record_shared_call(
        &self,
        session: &str,
        workspace: &Path,
        root: &Dir,
        call_id: &str,
        steps: Vec<Step>,
        blob_dir: Option<&Path>,
        reads: &[(String, Option<Version>)],
        written: &[(String, Version)],
    ) -> Result<(), SharedRecordError> {
        let Some(backend) = &self.shared else {
            return Ok(());
        };
        let _counts = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut blobs = Vec::new();
        let lines = lines_of(root, call_id, steps, written, |blob, kept| {
            let Some(blob_dir) = blob_dir else {
                return Ok(false);
            };
            blobs.push((kept.to_owned(), crate::storage::read_host_file(&blob_dir.join(blob))?));
            Ok(true)
        })
        .map_err(SharedRecordError::Io)?;
        let texts = lines
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| SharedRecordError::Io(std::io::Error::other(error)))?;
        let reads: Vec<(&str, Option<Version>)> = reads.iter().map(|(path, version)| (path.as_str(), version.clone())).collect();
        if texts.is_empty() && reads.is_empty() {
            return Ok(());
        }
        backend
            .record_call(&crate::storage::session_key(session, workspace), &reads, &texts, &blobs, COMPACT_LINES)
            .map_err(SharedRecordError::Store)
    }

    /// The latest undoable change of `path` by `session`; its blob, if it has one, is in
    /// [`session_dir`](Self::session_dir) for the restore.
    ///
    /// # Errors
    ///
    /// [`crate::SessionStoreError`] if the shared store cannot be used.
    pub fn last(&self, session: &str, workspace: &Path, path: &str) -> Result<Option<UndoEntry>, crate::SessionStoreError> {
        let _counts = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = self.entries(session, workspace)?.into_iter().rev().find(|entry| entry.path == path);
        if let Some(UndoEntry { prior: Prior::File { blob, .. }, .. }) = &entry {
            // Recorded by another host: its blob comes from the shared store.
            let _ = self.blob(session, workspace, blob);
        }
        Ok(entry)
    }

    /// The directories the call of `entry` created above its path that are still undoable,
    /// deepest first.
    pub fn created_directories(&self, session: &str, workspace: &Path, entry: &UndoEntry) -> Vec<UndoEntry> {
        let _counts = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut directories: Vec<UndoEntry> = self
            .entries(session, workspace)
            .unwrap_or_default()
            .into_iter()
            .filter(|candidate| {
                candidate.directory
                    && candidate.call_id == entry.call_id
                    && entry.path.strip_prefix(candidate.path.as_str()).is_some_and(|rest| rest.starts_with('/'))
            })
            .collect();
        directories.sort_by_key(|directory| std::cmp::Reverse(directory.path.len()));
        directories
    }

    /// Forget the change `entry` (after it was undone), and its blob.
    ///
    /// # Errors
    ///
    /// Whatever appending to the session's undo log fails with.
    pub fn forget(&self, session: &str, workspace: &Path, entry: &UndoEntry) -> std::io::Result<()> {
        let mut counts = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let directory = self.session_dir(session, workspace);
        self.append_lines(session, workspace, &[Line::Forget { path: entry.path.clone(), call_id: entry.call_id.clone() }], &mut counts)?;
        if let Prior::File { blob, .. } = &entry.prior {
            let _ = std::fs::remove_file(directory.join(blob));
        }
        Ok(())
    }
}

/// Append `lines` to the log in `directory` (made if missing), in one write; rewrite the log
/// once it has grown past [`COMPACT_LINES`] (`counts`: the lines of the logs counted so far).
fn append(directory: &Path, lines: &[Line], counts: &mut HashMap<PathBuf, usize>) -> std::io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut bytes = Vec::new();
    for line in lines {
        serde_json::to_writer(&mut bytes, line).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
    }
    let path = directory.join(LOG);
    let mut log = crate::storage::open_append(&path)?;
    // Counted once per process; other processes' appends are counted at the next compaction.
    let count = match counts.get(directory) {
        Some(count) => *count,
        None => count_lines(&path),
    };
    log.write_all(&bytes)?;
    let count = count + lines.len();
    if count > COMPACT_LINES {
        compact(directory)?;
        counts.insert(directory.to_path_buf(), count_lines(&path));
    } else {
        counts.insert(directory.to_path_buf(), count);
    }
    Ok(())
}

/// The lines in the log `path` (0 if there is none).
fn count_lines(path: &Path) -> usize {
    crate::storage::read_host_file(path).map_or(0, |bytes| bytes.iter().filter(|&&byte| byte == b'\n').count())
}

/// Rewrite the log with only the entries it keeps, and remove the blobs nothing refers to.
fn compact(directory: &Path) -> std::io::Result<()> {
    let entries = load(directory);
    let mut bytes = Vec::new();
    let mut blobs = std::collections::HashSet::new();
    for entry in entries {
        if let Prior::File { blob, .. } = &entry.prior {
            blobs.insert(blob.clone());
        }
        serde_json::to_writer(&mut bytes, &Line::Record(entry)).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
    }
    crate::storage::replace_bytes(&directory.join(LOG), &bytes, false)?;
    for entry in std::fs::read_dir(directory)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != LOG && !name.ends_with(".tmp") && !blobs.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

/// The undoable changes in the log in `directory`, oldest first: of the last [`MAX_ENTRIES`]
/// recorded, those not forgotten. A torn line (a crash mid-append) is skipped.
fn load(directory: &Path) -> Vec<UndoEntry> {
    let Ok(bytes) = crate::storage::read_host_file(&directory.join(LOG)) else {
        return Vec::new();
    };
    entries_of(bytes.split(|&byte| byte == b'\n'))
}

/// The undoable changes of a log's `lines`, oldest first (see [`load`]).
fn entries_of<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Vec<UndoEntry> {
    let lines: Vec<Line> = lines.filter_map(|line| serde_json::from_slice(line).ok()).collect();
    // The last MAX_ENTRIES records are kept, whatever was forgotten since.
    let records = lines.iter().filter(|line| matches!(line, Line::Record(_))).count();
    let mut skip = records.saturating_sub(MAX_ENTRIES);
    let mut entries: Vec<UndoEntry> = Vec::new();
    for line in lines {
        match line {
            Line::Record(_) if skip > 0 => skip -= 1,
            Line::Record(entry) => entries.push(entry),
            Line::Forget { path, call_id } => {
                if let Some(position) = entries.iter().rposition(|kept| kept.path == path && kept.call_id == call_id) {
                    entries.remove(position);
                }
            }
        }
    }
    entries
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
    pub fn changes(&self, session: &str, workspace: &Path, root: &Dir) -> Vec<SessionChange> {
        use sha2::Digest as _;
        let _counts = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entries = self.entries(session, workspace).unwrap_or_default();
        let content = |prior: &Prior| match prior {
            Prior::File { blob, .. } => self.blob(session, workspace, blob),
            Prior::Inline { hex, .. } => crate::journal::unhex(hex).ok(),
            _ => None,
        };
        let mut changes = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            if entry.directory {
                continue;
            }
            let before = content(&entry.prior);
            let after = match &entry.after {
                None => Some(None),
                Some(hash) => {
                    let next = entries[index + 1..].iter().find(|later| later.path == entry.path);
                    let candidate = match next {
                        Some(later) => content(&later.prior),
                        None => root.read(&entry.path).ok(),
                    };
                    candidate.filter(|bytes| crate::storage::hex(&sha2::Sha256::digest(bytes)) == *hash).map(Some)
                }
            };
            changes.push(SessionChange { call_id: entry.call_id.clone(), path: entry.path.clone(), before, after });
        }
        changes
    }
}

/// The undo log lines of a committed call's journal `steps`: the first prior state of each file
/// it changed, with a hash of what the call left. `keep_blob(blob, kept)` keeps the journal's
/// blob `blob` under the name `kept` (`false`: there is none, and the file is not undoable).
fn lines_of(
    root: &Dir,
    call_id: &str,
    steps: Vec<Step>,
    written: &[(String, Version)],
    mut keep_blob: impl FnMut(&str, &str) -> std::io::Result<bool>,
) -> std::io::Result<Vec<Line>> {
    let mut seen = std::collections::HashSet::new();
    let mut lines = Vec::new();
    // A change of times alone is no edit: `undo_edit` restores content.
    for step in steps.into_iter().filter(|step| !matches!(step.prior, Prior::Times { .. })) {
        if !seen.insert(step.path.clone()) {
            continue;
        }
        let (after, is_directory) = match root.symlink_metadata(&step.path) {
            Err(_) => (None, false),
            Ok(metadata) if metadata.is_file() => match Version::written_as(written, &step.path, &Version::from_metadata(&metadata))
                .and_then(|version| version.sha256.clone())
                .or_else(|| hash_of(root, &step.path))
            {
                Some(hash) => (Some(hash), false),
                None => continue,
            },
            // A directory the call created goes when what the call created in it is undone.
            Ok(metadata) if metadata.is_dir() && step.prior == Prior::Absent => (Some(String::new()), true),
            // Other directories and symlinks are not edits; `undo_edit` restores files.
            Ok(_) => continue,
        };
        let prior = match step.prior {
            prior @ (Prior::Absent | Prior::Inline { .. }) => prior,
            Prior::File { blob, mode } => {
                let kept = format!("{call_id}-{blob}");
                if !keep_blob(&blob, &kept)? {
                    continue;
                }
                Prior::File { blob: kept, mode }
            }
            _ => continue,
        };
        lines.push(Line::Record(UndoEntry { path: step.path, call_id: call_id.to_owned(), prior, after, directory: is_directory }));
    }
    Ok(lines)
}

/// Why [`UndoStore::record_shared_call`] kept nothing.
#[derive(Debug, thiserror::Error)]
pub enum SharedRecordError {
    /// The shared store could not keep it.
    #[error(transparent)]
    Store(crate::SessionStoreError),
    /// A blob of the call's journal could not be read.
    #[error("a prior content the call saved cannot be read: {0}")]
    Io(std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_appended_forgotten_and_the_log_keeps_the_last_hundred() {
        let temp = tempfile::tempdir().expect("tempdir");
        let workspace = temp.path().join("ws");
        std::fs::create_dir(&workspace).expect("mkdir");
        std::fs::write(workspace.join("a.txt"), "now").expect("write");
        let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");
        let store = UndoStore::new(temp.path());
        let step = |content: &str| Step {
            path: "a.txt".to_owned(),
            prior: Prior::Inline { hex: crate::storage::hex(content.as_bytes()), mode: 0o644 },
            identity: None,
            rewrite: None,
            times: None,
        };
        for index in 0..(COMPACT_LINES + 50) {
            store.record("s", &workspace, &root, &format!("c-{index}"), vec![step(&format!("before {index}"))], None, &[]).expect("record");
        }
        let directory = store.session_dir("s", &workspace);
        assert!(count_lines(&directory.join(LOG)) <= COMPACT_LINES, "the log was compacted");
        let last = store.last("s", &workspace, "a.txt").expect("a log").expect("an entry");
        assert_eq!(last.call_id, format!("c-{}", COMPACT_LINES + 49));
        assert_eq!(load(&directory).len(), MAX_ENTRIES);
        assert_eq!(load(&directory)[0].call_id, format!("c-{}", COMPACT_LINES + 50 - MAX_ENTRIES));
        // Forgetting the last change makes the one before it the last; a fresh store agrees.
        store.forget("s", &workspace, &last).expect("forget");
        let fresh = UndoStore::new(temp.path());
        assert_eq!(fresh.last("s", &workspace, "a.txt").expect("a log").expect("an entry").call_id, format!("c-{}", COMPACT_LINES + 48));
        let changes = fresh.changes("s", &workspace, &root);
        assert_eq!(changes.len(), MAX_ENTRIES - 1);
        assert_eq!(changes[0].before.as_deref(), Some(format!("before {}", COMPACT_LINES + 50 - MAX_ENTRIES).as_bytes()));
        // A torn last line (a crash mid-append) is skipped.
        std::fs::OpenOptions::new().append(true).open(directory.join(LOG)).expect("open").write_all(b"{\"record\":{\"pa").expect("tear");
        assert_eq!(fresh.last("s", &workspace, "a.txt").expect("a log").expect("an entry").call_id, format!("c-{}", COMPACT_LINES + 48));
    }

    #[test]
    fn what_a_call_left_is_hashed_from_what_it_wrote_while_the_file_still_is_that() {
        let temp = tempfile::tempdir().expect("tempdir");
        let workspace = temp.path().join("ws");
        std::fs::create_dir(&workspace).expect("mkdir");
        for name in ["a.txt", "b.txt"] {
            std::fs::write(workspace.join(name), "left by the call").expect("write");
        }
        let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");
        let written = |name: &str| {
            let stat = rustix::fs::stat(workspace.join(name)).expect("stat");
            (name.to_owned(), Version::hashed(&stat, &[9; 32]).expect("a file"))
        };
        let written = [written("a.txt"), written("b.txt")];
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(workspace.join("b.txt"), "changed since").expect("write");
        let step = |path: &str| Step {
            path: path.to_owned(),
            prior: Prior::Inline { hex: crate::storage::hex(b"before"), mode: 0o644 },
            identity: None,
            rewrite: None,
            times: None,
        };
        let lines = lines_of(&root, "c-1", vec![step("a.txt"), step("b.txt")], &written, |_, _| Ok(false)).expect("lines");
        let after = |path: &str| {
            lines.iter().find_map(|line| match line {
                Line::Record(entry) if entry.path == path => Some(entry.after.clone()),
                _ => None,
            })
        };
        // The hash given (not the content's: the file was not read again) ...
        assert_eq!(after("a.txt"), Some(Some(crate::storage::hex(&[9; 32]))));
        // ... unless the file changed since it was written.
        assert_eq!(after("b.txt"), Some(hash_of(&root, "b.txt")));
    }
}

//! Read tracking: which files each session has read, and what they were when it read them.
//!
//! A file counts as read when a call of the session opened it for reading, or wrote it (the
//! session knows what it wrote). Its version is its size, modification time and inode, plus the
//! SHA-256 of its content for files read by calls that opened only a few files (a search over a
//! whole tree records nothing: it is not a read of each file). Before a session modifies an
//! existing file, the guard compares: never read is a warning or a refusal, as the policy says;
//! changed since read is a conflict.
//!
//! With a state directory, each session's versions are kept in `sessions/<hash>.json`, so that
//! separate processes (one CLI call each) share them; otherwise in memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_std::fs::{Dir, MetadataExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::deferred::Deferred;

/// Calls that open more files than this for reading (searches, listings of content) record
/// none of them as read.
pub(crate) const MAX_TRACKED_READS: usize = 64;
/// Files larger than this are tracked by metadata only.
const MAX_HASHED_BYTES: u64 = 16 << 20;

/// What a file was when the session last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Version {
    len: u64,
    mtime_ns: i128,
    ino: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
}

impl Version {
    /// The metadata part of the version of the regular file `path`, or `None` if it is not one.
    pub(crate) fn stat(root: &Dir, path: &str) -> Option<Version> {
        let metadata = root.symlink_metadata(path).ok().filter(cap_std::fs::Metadata::is_file)?;
        Some(Version {
            len: metadata.len(),
            mtime_ns: i128::from(metadata.mtime()) * 1_000_000_000 + i128::from(metadata.mtime_nsec()),
            ino: metadata.ino(),
            sha256: None,
        })
    }

    /// The metadata part of the version of an open regular file, or `None` if it is not one.
    pub(crate) fn of(metadata: &std::fs::Metadata) -> Option<Version> {
        use std::os::unix::fs::MetadataExt as _;
        metadata.is_file().then(|| Version {
            len: metadata.len(),
            mtime_ns: i128::from(metadata.mtime()) * 1_000_000_000 + i128::from(metadata.mtime_nsec()),
            ino: metadata.ino(),
            sha256: None,
        })
    }

    /// Add the content hash, if the file still has this metadata.
    fn with_hash(mut self, root: &Dir, path: &str) -> Version {
        if self.len <= MAX_HASHED_BYTES
            && let Some(hash) = hash_of(root, path)
            && Version::stat(root, path).is_some_and(|now| now.same_metadata(&self))
        {
            self.sha256 = Some(hash);
        }
        self
    }

    fn same_metadata(&self, other: &Version) -> bool {
        (self.len, self.mtime_ns, self.ino) == (other.len, other.mtime_ns, other.ino)
    }

    /// Whether the file at `path`, whose metadata is now `current`, still has the content
    /// this version saw.
    pub(crate) fn unchanged(&self, root: &Dir, path: &str, current: &Version) -> bool {
        if self.same_metadata(current) {
            return true;
        }
        // Touched or rewritten with the same bytes: the content decides.
        self.len == current.len && self.sha256.is_some() && self.sha256 == hash_of(root, path)
    }
}

pub(crate) fn hash_of(root: &Dir, path: &str) -> Option<String> {
    use std::io::Read;
    let mut file = root.open(path).ok()?.into_std();
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 64 * 1024];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => hasher.update(&buffer[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(crate::hex(&hasher.finalize()))
}

/// A session file's stamp, `None` if it cannot be read.
fn stamp_of(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().and_then(|metadata| {
        use std::os::unix::fs::MetadataExt;
        Some((metadata.len(), metadata.modified().ok()?, metadata.ino()))
    })
}

/// One session's file versions.
pub(crate) type SessionReads = HashMap<String, Version>;

/// Every session's reads.
/// A session file's size, modification time and inode (it is replaced by rename, so a new
/// version is a new inode).
type Stamp = (u64, std::time::SystemTime, u64);

/// A session's versions in memory.
#[derive(Debug)]
struct Cached {
    /// The stamp of the session's file when it was last read or written (`None`: no file).
    stamp: Option<Stamp>,
    reads: Arc<SessionReads>,
    /// Updates not yet written to the file: while there are any, the memory is the truth.
    unwritten: usize,
}

#[derive(Debug)]
pub(crate) struct ReadTracker {
    directory: Option<PathBuf>,
    /// Each session's versions, with the size and modification time of its file when it was
    /// read (so that an unchanged file is not parsed again). In this process it is the truth:
    /// a session's file is written from it after the call ([`Deferred`]).
    sessions: Arc<Mutex<HashMap<String, Cached>>>,
    deferred: Arc<Deferred>,
}

impl ReadTracker {
    pub(crate) fn new(state_dir: Option<&Path>, deferred: Arc<Deferred>) -> Self {
        ReadTracker { directory: state_dir.map(|directory| directory.join("sessions")), sessions: Arc::default(), deferred }
    }

    /// The versions `session` has seen in `workspace`.
    pub(crate) fn load(&self, session: &str, workspace: &Path) -> Arc<SessionReads> {
        self.load_key(&crate::session_key(session, workspace))
    }

    fn load_key(&self, key: &str) -> Arc<SessionReads> {
        let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(directory) = &self.directory else {
            return sessions.get(key).map(|cached| Arc::clone(&cached.reads)).unwrap_or_default();
        };
        if let Some(cached) = sessions.get(key)
            && cached.unwritten > 0
        {
            return Arc::clone(&cached.reads);
        }
        // Another process may have updated the file: it is the truth, when it changed.
        let path = directory.join(format!("{key}.json"));
        let stamp = stamp_of(&path);
        if let Some(cached) = sessions.get(key)
            && cached.stamp == stamp
        {
            return Arc::clone(&cached.reads);
        }
        let reads: Arc<SessionReads> =
            Arc::new(std::fs::read(&path).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default());
        sessions.insert(key.to_owned(), Cached { stamp, reads: Arc::clone(&reads), unwritten: 0 });
        reads
    }

    /// After a call: record the files it read (with their versions when opened) and the
    /// current versions of the files it modified. `seen` is what the session had seen when the
    /// call started; nothing is written if the call taught it nothing new.
    pub(crate) fn update(
        &self,
        session: &str,
        workspace: &Path,
        root: &Dir,
        seen: &SessionReads,
        reads: &[(String, Version)],
        modified: &[String],
    ) -> std::io::Result<()> {
        let hash = reads.len() + modified.len() <= MAX_TRACKED_READS;
        let known =
            |path: &str, version: &Version| seen.get(path).is_some_and(|old| old.same_metadata(version) && (old.sha256.is_some() || !hash));
        let mut changes: Vec<(&str, Option<Version>)> = Vec::new();
        for (path, version) in reads {
            if !known(path, version) {
                // What the session saw is what it read, if the file has not changed since.
                changes.push((path, Some(if hash { version.clone().with_hash(root, path) } else { version.clone() })));
            }
        }
        for path in modified {
            match Version::stat(root, path) {
                Some(version) if known(path, &version) => {}
                Some(version) => changes.push((path, Some(if hash { version.with_hash(root, path) } else { version }))),
                None if seen.contains_key(path.as_str()) => changes.push((path, None)),
                None => {}
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        let key = crate::session_key(session, workspace);
        let mut updated = (*self.load_key(&key)).clone();
        for (path, version) in changes {
            match version {
                Some(version) => updated.insert(path.to_owned(), version),
                None => updated.remove(path),
            };
        }
        let writes_file = self.directory.is_some();
        {
            // The next call of the session sees this at once; the file follows.
            let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let cached = sessions.entry(key.clone()).or_insert_with(|| Cached { stamp: None, reads: Arc::default(), unwritten: 0 });
            cached.reads = Arc::new(updated);
            cached.unwritten += usize::from(writes_file);
        }
        let Some(directory) = self.directory.clone() else {
            return Ok(());
        };
        let sessions = Arc::clone(&self.sessions);
        self.deferred.submit(move || {
            // The latest versions, which later calls may have added to since.
            let latest =
                sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).map(|cached| Arc::clone(&cached.reads));
            let path = directory.join(format!("{key}.json"));
            if let Some(latest) = latest {
                // Best effort: a session whose file is missing is asked to read again.
                let _ = std::fs::create_dir_all(&directory).and_then(|()| crate::replace_json(&path, &*latest, false));
            }
            let stamp = stamp_of(&path);
            let mut sessions = sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(cached) = sessions.get_mut(&key) {
                cached.stamp = stamp;
                cached.unwritten = cached.unwritten.saturating_sub(1);
            }
        });
        Ok(())
    }
}

//! Read tracking: which files each session has read, and what they were when it read them.
//!
//! A file counts as read when a call of the session opened it for reading, or wrote it (the
//! session knows what it wrote). Its version is its size, modification time and inode, plus the
//! SHA-256 of its content for files read by calls that opened only a few files (a search over a
//! whole tree records nothing: it is not a read of each file). Before a session modifies an
//! existing file, the guard compares: never read is a warning or a refusal, as the policy says;
//! changed since read is a conflict.
//!
//! With a state directory, each session's versions are kept in `sessions/<hash>.jsonl`, so that
//! separate processes (one CLI call each) share them: a call that taught the session something
//! appends one line of what changed (one write, no file created or renamed), a process reads
//! only what others appended since it last looked, and the file is rewritten whole only when it
//! has grown to several times what it holds. Without a state directory they are kept in memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_std::fs::{Dir, MetadataExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Calls that open more files than this for reading (searches, listings of content) record
/// none of them as read.
pub const MAX_TRACKED_READS: usize = 64;
/// Files larger than this are tracked by metadata only.
const MAX_HASHED_BYTES: u64 = 16 << 20;

/// A file changed less than this long before its version was taken may change again with
/// every time it has left as it was: file systems stamp changes with a clock that advances in
/// ticks of a few milliseconds.
const RACY_NS: i128 = 100_000_000;

/// What a file was when the session last saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Version {
    len: u64,
    mtime_ns: i128,
    ino: u64,
    /// Its change time, which only the kernel sets: content written in place with its
    /// modification time put back still changes it. `None` in records made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ctime_ns: Option<i128>,
    /// Taken within [`RACY_NS`] of the file's last change: a change right after could leave its
    /// times as they were, so only its content tells (when it was hashed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    racy: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sha256: Option<String>,
}

/// Two versions are the same when they describe the same file and content; whether one was
/// taken close to the file's change is a note about the taking.
impl PartialEq for Version {
    fn eq(&self, other: &Version) -> bool {
        (self.len, self.mtime_ns, self.ino, self.ctime_ns, &self.sha256)
            == (other.len, other.mtime_ns, other.ino, other.ctime_ns, &other.sha256)
    }
}

impl Eq for Version {}

/// A file time (seconds and nanoseconds since the epoch) in nanoseconds.
fn nanoseconds(seconds: impl Into<i128>, nanoseconds: impl Into<i128>) -> i128 {
    seconds.into() * 1_000_000_000 + nanoseconds.into()
}

/// Whether a version taken now of a file changed at `ctime_ns` is racy (see [`Version::racy`]).
fn racy(ctime_ns: i128) -> bool {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |now| now.as_nanos());
    i128::try_from(now).unwrap_or(i128::MAX) - ctime_ns < RACY_NS
}

impl Version {
    /// The metadata part of the version of the regular file `path`, or `None` if it is not one.
    pub fn stat(root: &Dir, path: &str) -> Option<Version> {
        let metadata = root.symlink_metadata(path).ok().filter(cap_std::fs::Metadata::is_file)?;
        Some(Version::from_metadata(&metadata))
    }

    pub(crate) fn from_metadata(metadata: &cap_std::fs::Metadata) -> Version {
        let ctime_ns = nanoseconds(metadata.ctime(), metadata.ctime_nsec());
        Version {
            len: metadata.len(),
            mtime_ns: nanoseconds(metadata.mtime(), metadata.mtime_nsec()),
            ino: metadata.ino(),
            ctime_ns: Some(ctime_ns),
            racy: racy(ctime_ns),
            sha256: None,
        }
    }

    /// The metadata part of the version of an open regular file, or `None` if it is not one.
    pub fn of(stat: &rustix::fs::Stat) -> Option<Version> {
        (rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile).then(|| {
            let ctime_ns = nanoseconds(stat.st_ctime, stat.st_ctime_nsec);
            Version {
                len: u64::try_from(stat.st_size).unwrap_or(0),
                mtime_ns: nanoseconds(stat.st_mtime, stat.st_mtime_nsec),
                ino: stat.st_ino,
                ctime_ns: Some(ctime_ns),
                racy: racy(ctime_ns),
                sha256: None,
            }
        })
    }

    /// The version of an open regular file whose content is known to have the SHA-256
    /// `sha256` (a file the caller wrote and hashed, unchanged since), or `None` if it is not
    /// a regular file.
    pub fn hashed(stat: &rustix::fs::Stat, sha256: &[u8; 32]) -> Option<Version> {
        Version::of(stat).map(|version| Version { sha256: Some(crate::storage::hex(sha256)), ..version })
    }

    /// Of `written` (versions of files a call wrote, hashed as they were placed: see
    /// [`Version::hashed`]), the one of `path` that still describes the file there, whose
    /// metadata is `now` (the same inode, length and modification time).
    pub(crate) fn written_as<'a>(written: &'a [(String, Version)], path: &str, now: &Version) -> Option<&'a Version> {
        written.iter().find(|(written, version)| written == path && version.same_metadata(now)).map(|(_, version)| version)
    }

    /// Add the content hash, if the file still has this metadata.
    fn with_hash(mut self, root: &Dir, path: &str) -> Version {
        if self.len <= MAX_HASHED_BYTES
            && let Ok(file) = root.open(path)
            && let mut file = file.into_std()
            && let Some(hash) = hash_file(&mut file)
        {
            self.sha256 = Some(hash).filter(|_| {
                // The file hashed is the version recorded: the same inode, unchanged by the end.
                rustix::fs::fstat(&file).ok().and_then(|stat| Version::of(&stat)).is_some_and(|now| now.same_metadata(&self))
            });
        }
        self
    }

    fn same_metadata(&self, other: &Version) -> bool {
        let same_change = match (self.ctime_ns, other.ctime_ns) {
            (Some(ours), Some(theirs)) => ours == theirs,
            _ => true,
        };
        (self.len, self.mtime_ns, self.ino) == (other.len, other.mtime_ns, other.ino) && same_change
    }

    /// Whether the file at `path`, whose metadata is now `current`, still has the content
    /// this version saw. Unchanged metadata is enough unless the version was taken too close
    /// to the file's change to tell (see [`Version::racy`]) and has the content's hash.
    pub fn unchanged(&self, root: &Dir, path: &str, current: &Version) -> bool {
        if self.same_metadata(current) && !(self.racy && self.sha256.is_some()) {
            return true;
        }
        // Touched or rewritten with the same bytes: the content decides.
        self.len == current.len && self.sha256.is_some() && self.sha256 == hash_of(root, path)
    }
}

/// The SHA-256 (hex) of the content of `path` under `root`, or `None` if it cannot be read or
/// holds more than [`MAX_HOLE_BYTES`](crate::storage::MAX_HOLE_BYTES) of holes (its length is
/// not what it cost to make; reading it could take the host minutes).
pub fn hash_of(root: &Dir, path: &str) -> Option<String> {
    let mut file = root.open(path).ok()?.into_std();
    if crate::storage::hole_bytes(&file).ok()? > crate::storage::MAX_HOLE_BYTES {
        return None;
    }
    hash_file(&mut file)
}

/// The SHA-256 of what remains to be read of `file`, in hex.
fn hash_file(file: &mut std::fs::File) -> Option<String> {
    use std::io::Read;
    let mut hasher = Sha256::new();
    let mut buffer = [0; 16 * 1024];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => hasher.update(&buffer[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(crate::storage::hex(&hasher.finalize()))
}

/// The lines of a session file from byte `offset` on (a torn last line is ignored).
fn read_from(path: &Path, offset: u64) -> Vec<u8> {
    use std::io::{Read as _, Seek as _};
    let mut bytes = Vec::new();
    if let Ok(mut file) = std::fs::File::open(path)
        && file.seek(std::io::SeekFrom::Start(offset)).is_ok()
    {
        let _ = file.read_to_end(&mut bytes);
    }
    bytes
}

/// Apply a session file's lines to `reads`: each maps paths to their versions, or to `null`
/// for a file the session saw removed.
fn fold(reads: &mut SessionReads, lines: &[u8]) {
    for line in lines.split(|&byte| byte == b'\n') {
        let Ok(changes) = serde_json::from_slice::<HashMap<String, Option<Version>>>(line) else {
            continue;
        };
        for (path, version) in changes {
            match version {
                Some(version) => reads.insert(path, version),
                None => reads.remove(&path),
            };
        }
    }
}

/// A session file's stamp, `None` if it cannot be read.
fn stamp_of(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().and_then(|metadata| {
        use std::os::unix::fs::MetadataExt;
        Some((metadata.len(), metadata.modified().ok()?, metadata.ino()))
    })
}

/// One session's file versions.
pub type SessionReads = HashMap<String, Version>;

/// A session file's size, modification time and inode (appended to, or replaced by rename when
/// it is rewritten whole: a new inode).
type Stamp = (u64, std::time::SystemTime, u64);

/// A session file is rewritten whole once it is this many times the size of what it holds
/// (and at least [`COMPACT_MIN_BYTES`]).
const COMPACT_FACTOR: u64 = 4;
const COMPACT_MIN_BYTES: u64 = 64 * 1024;

/// A session's versions in memory, and the stamp of its file when they were read from it.
#[derive(Debug)]
struct Cached {
    stamp: Option<Stamp>,
    reads: Arc<SessionReads>,
}

/// Every session's reads.
#[derive(Debug)]
pub struct ReadTracker {
    directory: Option<PathBuf>,
    /// Each session's versions, with the stamp of its file when it was read (so that an
    /// unchanged file is not parsed again, and an appended one is read from where it was).
    sessions: Mutex<HashMap<String, Cached>>,
    /// Held by an update from reading a session's versions to caching what it appended, so
    /// that two calls of one session in this process do not drop each other's line.
    updating: Mutex<()>,
    /// The store every host shares, which holds the versions instead (`None`: this host's).
    shared: Option<Arc<dyn crate::SessionBackend>>,
}

impl ReadTracker {
    /// Versions kept in `state_dir/sessions`, or in memory without a state directory.
    pub fn new(state_dir: Option<&Path>) -> Self {
        ReadTracker {
            directory: state_dir.map(|directory| directory.join(crate::SESSIONS_DIR)),
            sessions: Mutex::new(HashMap::new()),
            updating: Mutex::new(()),
            shared: None,
        }
    }

    /// Versions kept in a store every host shares: each load asks it (one round trip), so
    /// that a read on one host is seen by a write on another.
    pub fn shared(backend: Arc<dyn crate::SessionBackend>) -> Self {
        ReadTracker { directory: None, sessions: Mutex::new(HashMap::new()), updating: Mutex::new(()), shared: Some(backend) }
    }

    /// The versions `session` has seen in `workspace` (none if the shared store cannot be
    /// used: see [`try_load`](Self::try_load)).
    pub fn load(&self, session: &str, workspace: &Path) -> Arc<SessionReads> {
        self.try_load(session, workspace).unwrap_or_default()
    }

    /// The versions `session` has seen in `workspace`, or none and why every write of the call
    /// must be refused (the shared store cannot be used: no write can be judged; reads go on).
    pub fn load_or_refusal(&self, session: &str, workspace: &Path) -> (Arc<SessionReads>, Option<String>) {
        match self.try_load(session, workspace) {
            Ok(reads) => (reads, None),
            Err(error) => (Arc::default(), Some(error.writes_refused())),
        }
    }

    /// The versions `session` has seen in `workspace`.
    ///
    /// # Errors
    ///
    /// [`crate::SessionStoreError`] if the shared store cannot be used.
    pub fn try_load(&self, session: &str, workspace: &Path) -> Result<Arc<SessionReads>, crate::SessionStoreError> {
        let key = crate::storage::session_key(session, workspace);
        match &self.shared {
            Some(backend) => backend.reads(&key).map(Arc::new),
            None => Ok(self.load_key(&key)),
        }
    }

    fn load_key(&self, key: &str) -> Arc<SessionReads> {
        let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(directory) = &self.directory else {
            return sessions.get(key).map(|cached| Arc::clone(&cached.reads)).unwrap_or_default();
        };
        // Another process may have appended to the file, or rewritten it: it is the truth.
        let path = directory.join(format!("{key}.jsonl"));
        let stamp = stamp_of(&path);
        let cached = sessions.get(key);
        if let Some(cached) = cached
            && cached.stamp == stamp
        {
            return Arc::clone(&cached.reads);
        }
        let reads = match (cached, stamp) {
            // Appended to since: read only the new lines.
            (Some(Cached { stamp: Some((size, _, inode)), reads }), Some((now, _, same))) if same == *inode && now > *size => {
                let mut reads = (**reads).clone();
                fold(&mut reads, &read_from(&path, *size));
                reads
            }
            _ => {
                let mut reads = SessionReads::new();
                fold(&mut reads, &read_from(&path, 0));
                reads
            }
        };
        let reads = Arc::new(reads);
        sessions.insert(key.to_owned(), Cached { stamp, reads: Arc::clone(&reads) });
        reads
    }

    /// After a call: record the files it read (with their versions when opened) and the
    /// current versions of the files it modified. `seen` is what the session had seen when the
    /// call started; nothing is written if the call taught it nothing new.
    #[expect(
        clippy::too_many_arguments,
        reason = "the session and its workspace, what it had seen, and the call's reads, changes and written files"
    )]
    pub fn update(
        &self,
        session: &str,
        workspace: &Path,
        root: &Dir,
        seen: &SessionReads,
        reads: &[(String, Version)],
        modified: &[String],
        written: &[(String, Version)],
    ) -> std::io::Result<()> {
        let changes = ReadTracker::changes(root, seen, reads, modified, written);
        let changes: Vec<(&str, Option<Version>)> = changes.iter().map(|(path, version)| (path.as_str(), version.clone())).collect();
        self.record(session, workspace, changes)
    }

    /// What a call taught the session, as [`update`](Self::update) records it: each path's
    /// version now (hashed, unless the call touched very many), or `None` for a file it saw
    /// removed; nothing the session had already seen. `written` are versions of files the call
    /// wrote whose content the caller hashed as it placed them ([`Version::hashed`]): a
    /// modified file that still has one is recorded with it instead of being read again.
    pub fn changes(
        root: &Dir,
        seen: &SessionReads,
        reads: &[(String, Version)],
        modified: &[String],
        written: &[(String, Version)],
    ) -> Vec<(String, Option<Version>)> {
        let hash = reads.len() + modified.len() <= MAX_TRACKED_READS;
        let known =
            |path: &str, version: &Version| seen.get(path).is_some_and(|old| old.same_metadata(version) && (old.sha256.is_some() || !hash));
        let mut changes: Vec<(String, Option<Version>)> = Vec::new();
        for (path, version) in reads {
            if !known(path, version) {
                // What the session saw is what it read, if the file has not changed since.
                changes.push((path.clone(), Some(if hash { version.clone().with_hash(root, path) } else { version.clone() })));
            }
        }
        for path in modified {
            match Version::stat(root, path) {
                Some(version) if known(path, &version) => {}
                Some(version) => {
                    let version = match Version::written_as(written, path, &version) {
                        // Within the size the tracker hashes at all, as a file read is.
                        Some(hashed) if hash && hashed.len <= MAX_HASHED_BYTES => hashed.clone(),
                        _ if hash => version.with_hash(root, path),
                        _ => version,
                    };
                    changes.push((path.clone(), Some(version)));
                }
                None if seen.contains_key(path.as_str()) => changes.push((path.clone(), None)),
                None => {}
            }
        }
        changes
    }

    /// Record `changes` for `session`.
    fn record(&self, session: &str, workspace: &Path, changes: Vec<(&str, Option<Version>)>) -> std::io::Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let key = crate::storage::session_key(session, workspace);
        if let Some(backend) = &self.shared {
            return backend.record_reads(&key, &changes).map_err(std::io::Error::other);
        }
        let _updating = self.updating.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut updated = (*self.load_key(&key)).clone();
        for (path, version) in &changes {
            match version {
                Some(version) => updated.insert((*path).to_owned(), version.clone()),
                None => updated.remove(*path),
            };
        }
        let Some(directory) = &self.directory else {
            let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            sessions.insert(key, Cached { stamp: None, reads: Arc::new(updated) });
            return Ok(());
        };
        let path = directory.join(format!("{key}.jsonl"));
        let line: std::collections::BTreeMap<&str, Option<Version>> = changes.into_iter().collect();
        let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        let mut file = crate::storage::open_append(&path)?;
        std::io::Write::write_all(&mut file, &bytes)?;
        let size = file.metadata()?.len();
        drop(file);
        if size > COMPACT_MIN_BYTES {
            let mut whole = serde_json::to_vec(&updated).map_err(std::io::Error::other)?;
            if size > COMPACT_FACTOR * whole.len() as u64 {
                // One line holding everything, replacing the file at once.
                whole.push(b'\n');
                crate::storage::replace_bytes(&path, &whole, false)?;
            }
        }
        // What this process wrote is what it knows: the next load reads only what others add.
        let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.insert(key, Cached { stamp: stamp_of(&path), reads: Arc::new(updated) });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn workspace_with(files: usize) -> (tempfile::TempDir, Dir) {
        let temp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(temp.path().join("ws")).expect("mkdir");
        for index in 0..files {
            std::fs::write(temp.path().join(format!("ws/f{index}.txt")), format!("file {index}")).expect("write");
        }
        let root = Dir::open_ambient_dir(temp.path().join("ws"), cap_std::ambient_authority()).expect("open");
        (temp, root)
    }

    fn read(root: &Dir, path: &str) -> (String, Version) {
        (path.to_owned(), Version::stat(root, path).expect("a file"))
    }

    #[test]
    fn a_sessions_versions_are_appended_and_another_process_reads_only_what_was_added() {
        let (temp, root) = workspace_with(3);
        let workspace = temp.path().join("ws");
        let state = temp.path().join("state");
        let writer = ReadTracker::new(Some(&state));
        let other = ReadTracker::new(Some(&state));
        writer.update("s", &workspace, &root, &SessionReads::new(), &[read(&root, "f0.txt")], &[], &[]).expect("update");
        assert!(other.load("s", &workspace).contains_key("f0.txt"));
        let file = state.join("sessions").join(format!("{}.jsonl", crate::storage::session_key("s", &workspace)));
        let size = std::fs::metadata(&file).expect("session file").len();
        // A second call appends one line, which the other tracker folds into what it had.
        let seen = writer.load("s", &workspace);
        writer.update("s", &workspace, &root, &seen, &[read(&root, "f1.txt")], &[], &[]).expect("update");
        assert!(std::fs::metadata(&file).expect("session file").len() > size);
        let loaded = other.load("s", &workspace);
        assert_eq!(loaded.keys().map(String::as_str).collect::<std::collections::BTreeSet<_>>(), ["f0.txt", "f1.txt"].into());
        assert!(loaded["f1.txt"].sha256.is_some(), "a read of few files is hashed");
        // A removed file the session wrote is dropped; a session of another name sees nothing.
        std::fs::remove_file(temp.path().join("ws/f0.txt")).expect("rm");
        let seen = writer.load("s", &workspace);
        writer.update("s", &workspace, &root, &seen, &[], &["f0.txt".to_owned()], &[]).expect("update");
        assert!(!other.load("s", &workspace).contains_key("f0.txt"));
        assert!(other.load("t", &workspace).is_empty());
    }

    #[test]
    fn a_change_in_place_is_seen_when_the_modification_time_is_put_back_or_has_not_moved() {
        let (temp, root) = workspace_with(1);
        let path = temp.path().join("ws/f0.txt");
        std::fs::write(&path, "aaa\n").expect("write");
        let modified = std::fs::metadata(&path).expect("metadata").modified().expect("mtime");
        std::thread::sleep(std::time::Duration::from_millis(150));
        let seen = Version::stat(&root, "f0.txt").expect("a file").with_hash(&root, "f0.txt");
        assert!(!seen.racy, "taken well after the change");
        // Rewritten in place, the same length, its modification time put back.
        std::fs::write(&path, "ccc\n").expect("write");
        std::fs::File::options().write(true).open(&path).expect("open").set_modified(modified).expect("set mtime");
        let now = Version::stat(&root, "f0.txt").expect("a file");
        assert!(!seen.unchanged(&root, "f0.txt", &now), "the change time tells");
        // Only touched: the content decides.
        std::fs::write(&path, "aaa\n").expect("write");
        let now = Version::stat(&root, "f0.txt").expect("a file");
        assert!(seen.unchanged(&root, "f0.txt", &now));

        // Taken right after a change: a second change in the same tick of the clock leaves
        // every time as it was, and the content still tells.
        std::fs::write(&path, "bbb\n").expect("write");
        let seen = Version::stat(&root, "f0.txt").expect("a file").with_hash(&root, "f0.txt");
        assert!(seen.racy);
        std::fs::write(&path, "ddd\n").expect("write");
        let mut now = Version::stat(&root, "f0.txt").expect("a file");
        // As if the clock had not moved between the two writes.
        (now.mtime_ns, now.ctime_ns) = (seen.mtime_ns, seen.ctime_ns);
        assert!(!seen.unchanged(&root, "f0.txt", &now));
        // A record made before change times were kept is read as before.
        let old: Version = serde_json::from_str(r#"{"len":4,"mtime_ns":1,"ino":2}"#).expect("an old record");
        assert_eq!((old.ctime_ns, old.racy), (None, false));
    }

    #[test]
    fn a_file_of_holes_is_not_hashed() {
        let (temp, root) = workspace_with(0);
        let sparse = std::fs::File::create_new(temp.path().join("ws/sparse.bin")).expect("create");
        sparse.set_len(4 << 30).expect("4 GiB of hole");
        assert_eq!(hash_of(&root, "sparse.bin"), None);
        sparse.set_len(crate::storage::MAX_HOLE_BYTES).expect("shrink");
        assert!(hash_of(&root, "sparse.bin").is_some(), "as many holes as a call may make are read");
    }

    #[test]
    fn a_session_file_grown_past_what_it_holds_is_rewritten_whole() {
        let (temp, root) = workspace_with(1);
        let workspace = temp.path().join("ws");
        let state = temp.path().join("state");
        let tracker = ReadTracker::new(Some(&state));
        let file = state.join("sessions").join(format!("{}.jsonl", crate::storage::session_key("s", &workspace)));
        let mut largest = 0;
        for round in 0..2_000 {
            // The file changes every round, so every round appends a line.
            std::fs::write(temp.path().join("ws/f0.txt"), format!("round {round}")).expect("write");
            let seen = tracker.load("s", &workspace);
            tracker.update("s", &workspace, &root, &seen, &[], &["f0.txt".to_owned()], &[]).expect("update");
            largest = largest.max(std::fs::metadata(&file).expect("session file").len());
        }
        assert!(largest <= COMPACT_MIN_BYTES + 1024, "the file grew to {largest} bytes");
        let fresh = ReadTracker::new(Some(&state));
        assert_eq!(
            fresh.load("s", &workspace).get("f0.txt"),
            Version::stat(&root, "f0.txt").map(|version| version.with_hash(&root, "f0.txt")).as_ref()
        );
    }

    #[test]
    fn a_written_version_with_its_hash_is_recorded_as_it_is_while_the_file_still_has_it() {
        let (temp, root) = workspace_with(2);
        let hashed = |path: &str, sha256: &[u8; 32]| {
            let file = root.open(path).expect("open").into_std();
            (path.to_owned(), Version::hashed(&rustix::fs::fstat(&file).expect("fstat"), sha256).expect("a file"))
        };
        // A hash the file's content does not have: taken as given, so not read again.
        let written = [hashed("f0.txt", &[7; 32]), hashed("f1.txt", &[7; 32])];
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::OpenOptions::new().append(true).open(temp.path().join("ws/f1.txt")).expect("open").write_all(b"+").expect("append");
        let modified = ["f0.txt".to_owned(), "f1.txt".to_owned()];
        let changes = ReadTracker::changes(&root, &SessionReads::new(), &[], &modified, &written);
        let hash_of_change =
            |path: &str| changes.iter().find(|(changed, _)| changed == path).and_then(|(_, version)| version.clone()?.sha256);
        assert_eq!(hash_of_change("f0.txt"), Some(crate::storage::hex(&[7; 32])));
        // Changed since it was written: its content now is read and hashed.
        assert_eq!(hash_of_change("f1.txt"), hash_of(&root, "f1.txt"));
        assert_ne!(hash_of_change("f1.txt"), Some(crate::storage::hex(&[7; 32])));
        // Larger than the tracker hashes at all: recorded by its metadata, as a file read is.
        let big = usize::try_from(MAX_HASHED_BYTES).expect("fits") + 1;
        std::fs::write(temp.path().join("ws/big.txt"), vec![b'x'; big]).expect("write");
        let written = [hashed("big.txt", &[7; 32])];
        let changes = ReadTracker::changes(&root, &SessionReads::new(), &[], &["big.txt".to_owned()], &written);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].1.clone().and_then(|version| version.sha256), None);
    }
}

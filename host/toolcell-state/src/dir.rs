//! The state directory: every name in it, its key, and how it is opened.
//!
//! ```text
//! state.key            the key that tags the audit checkpoint and authenticates journals
//! audit.jsonl          the audit trail (audit.head: its checkpoint; audit.spool.jsonl: records
//!                      waiting for a shared store)
//! locks/               one lock table per workspace (`<hash>.json`, locked through `<hash>.lock`)
//! sessions/            read versions, one file per session and workspace
//! journal/             call journals (`<pid>-<nonce>.jsonl`), their blobs (`<pid>-<nonce>.blobs/`)
//!                      and the ledger of journals verified (ledger, ledger.lock,
//!                      ledger.unverified)
//! undo/                undo records, one directory per session and workspace (log.jsonl and
//!                      the saved files)
//! index/               content indexes, one per workspace
//! spawned-sessions/    the task-chain workflow's spawned sessions
//! locations            (default state directory only) locations other runs were told to use
//! ```

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::storage::{KEY_BYTES, check_private, create_private_dirs, load_or_create_key};

/// The state directory's key (mode 0600), which tags the audit checkpoint and authenticates
/// the journals replayed after a crash.
pub const STATE_KEY_FILE: &str = "state.key";
/// The audit log.
pub const AUDIT_FILE: &str = "audit.jsonl";
/// The file beside the log that holds the chain's head (the last record's `seq` and hash) as
/// a checkpoint tagged under the state key ([`toolcell_audit::checkpoint`]), rewritten with
/// every append (under the log's lock; after each append to a shared store): a log whose last
/// records were cut off, or that was rewritten and re-sealed, no longer matches it, and nobody
/// without the key can make one that does ([`toolcell_audit::verify_checkpoint`]).
pub const AUDIT_HEAD_FILE: &str = "audit.head";
/// Where audit records wait, beside the log, for a shared store that could not take them.
pub const AUDIT_SPOOL_FILE: &str = "audit.spool.jsonl";
/// The lock tables' directory.
pub const LOCKS_DIR: &str = "locks";
/// The read versions' directory.
pub const SESSIONS_DIR: &str = "sessions";
/// The call journals' directory.
pub const JOURNAL_DIR: &str = "journal";
/// A journal file's extension in [`JOURNAL_DIR`].
pub const JOURNAL_EXTENSION: &str = "jsonl";
/// The extension of a journal's directory of blobs (files too big for a line).
pub const BLOBS_EXTENSION: &str = "blobs";
/// The ledger's file name in [`JOURNAL_DIR`] (no `.jsonl`: it is not a journal).
pub const LEDGER_FILE: &str = "ledger";
/// Held while the ledger is read and rewritten (by runtimes in any process).
pub const LEDGER_LOCK_FILE: &str = "ledger.lock";
/// Where a ledger that did not verify is set aside before a new one is written: while it is
/// there, a journal the new ledger does not list is one that does not verify (it may be a
/// crashed runtime's that the lost ledger listed), not a copy of one already replayed.
pub const LEDGER_SET_ASIDE_FILE: &str = "ledger.unverified";
/// The undo records' directory.
pub const UNDO_DIR: &str = "undo";
/// Each session's undo log, in its directory under [`UNDO_DIR`].
pub const UNDO_LOG_FILE: &str = "log.jsonl";
/// The content indexes' directory.
pub const INDEX_DIR: &str = "index";
/// The spawned sessions' directory.
pub const SPAWNED_SESSIONS_DIR: &str = "spawned-sessions";
/// The record of locations other runs were told to use (in the default state directory).
pub const LOCATIONS_FILE: &str = "locations";
/// The lock taken while [`LOCATIONS_FILE`] is rewritten.
pub const LOCATIONS_LOCK_FILE: &str = "locations.lock";

/// The state key.
pub type StateKey = [u8; KEY_BYTES];

/// A state directory: canonical, private to this user, with its key.
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
    key: Option<StateKey>,
}

impl StateDir {
    /// Use `path` as the state directory: created `rwx------` if missing, refused if someone
    /// else can write it, and its key read (made if missing).
    ///
    /// # Errors
    ///
    /// [`Error::Audit`] if the directory cannot be created or resolved; [`Error::Insecure`]
    /// if it or its key is not this user's alone; [`Error::State`] if the key cannot be made
    /// or read.
    pub fn open(path: &Path) -> Result<Self, Error> {
        create_private_dirs(path).map_err(|source| Error::Audit { path: path.to_path_buf(), source })?;
        let directory = std::fs::canonicalize(path).map_err(|source| Error::Audit { path: path.to_path_buf(), source })?;
        // Whoever else can write here could plant journals the next start replays, or forge
        // the trail.
        check_private(&directory, 0o022, "the state directory")?;
        let key_path = directory.join(STATE_KEY_FILE);
        let key = load_or_create_key(&key_path, "the state key", |source| Error::State { path: key_path.clone(), source })?;
        Ok(StateDir { path: directory, key: Some(key) })
    }

    /// An existing state directory, for reading and verifying: nothing is created, and it has
    /// a key only if one is there.
    ///
    /// # Errors
    ///
    /// [`Error::Audit`] (`NotFound`) if the directory does not exist; as [`open`](Self::open)
    /// for its key.
    pub fn existing(path: &Path) -> Result<Self, Error> {
        let directory = std::fs::canonicalize(path).map_err(|source| Error::Audit { path: path.to_path_buf(), source })?;
        let key_path = directory.join(STATE_KEY_FILE);
        let key = match std::fs::symlink_metadata(&key_path) {
            Ok(_) => Some(load_or_create_key(&key_path, "the state key", |source| Error::State { path: key_path.clone(), source })?),
            Err(_) => None,
        };
        Ok(StateDir { path: directory, key })
    }

    /// The directory (canonical, if opened by [`open`](Self::open) or
    /// [`existing`](Self::existing)).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state key, if there is one.
    pub fn key(&self) -> Option<&StateKey> {
        self.key.as_ref()
    }

    /// `name` (one of this module's constants) in the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_creates_a_private_directory_with_one_key_and_existing_reads_the_same() {
        use std::os::unix::fs::PermissionsExt as _;
        let temp = tempfile::tempdir().expect("temporary directory");
        let path = temp.path().join("state");
        let opened = StateDir::open(&path).expect("opens");
        let mode = std::fs::metadata(&path).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let again = StateDir::existing(&path).expect("exists");
        assert_eq!(opened.key(), again.key());
        assert_eq!(again.join(AUDIT_FILE), std::fs::canonicalize(&path).expect("canonical").join("audit.jsonl"));
    }

    #[test]
    fn a_state_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let temp = tempfile::tempdir().expect("temporary directory");
        let path = temp.path().join("state");
        std::fs::create_dir(&path).expect("mkdir");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        match StateDir::open(&path) {
            Err(Error::Insecure { reason, .. }) => assert!(reason.contains("mode 777") && reason.contains("chmod go-w"), "{reason}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(matches!(StateDir::existing(&temp.path().join("missing")), Err(Error::Audit { .. })));
    }
}

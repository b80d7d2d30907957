//! Where a runtime keeps call journals and undo records: its state directory, or, without one,
//! a private temporary directory removed with the runtime (calls are then still undone on
//! failure, but not recovered after a crash).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{Error, STATE_KEY_FILE, StateDir, StateKey};

/// Prefix of private work directories: `toolcell-<pid>-<nanos>`.
const PREFIX: &str = "toolcell-";

/// Remove the private work directories of processes that are gone (a runtime kept for the
/// whole life of its process, in a static, is never dropped).
fn remove_orphans(temp: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        // Only real directories of this user (never through a symlink someone planted).
        #[cfg(unix)]
        let ours = {
            use std::os::unix::fs::MetadataExt;
            let own_uid = std::fs::metadata("/proc/self").map(|metadata| metadata.uid()).ok();
            std::fs::symlink_metadata(entry.path()).is_ok_and(|metadata| metadata.is_dir() && Some(metadata.uid()) == own_uid)
        };
        #[cfg(not(unix))]
        let ours = false;
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Where journals and undo records go, laid out as [`StateDir`] lays out a state directory
/// (one owner of the layout): the state directory itself, or a private temporary directory
/// opened as one (with a key of its own), removed when this is dropped.
#[derive(Debug)]
pub struct WorkDir {
    state: StateDir,
    key: StateKey,
    temporary: bool,
}

impl WorkDir {
    /// The state directory `state` (opened, so its key is read already), or without one a new
    /// private temporary directory (`rwx------`) opened as a state directory.
    ///
    /// # Errors
    ///
    /// [`Error::Audit`] naming the temporary directory if it cannot be created;
    /// [`Error::State`] if its key cannot be made, or `state` has none (it was not opened
    /// with [`StateDir::open`]).
    pub fn new(state: Option<StateDir>) -> Result<WorkDir, Error> {
        if let Some(state) = state {
            let key = state.key().copied().ok_or_else(|| Error::State {
                path: state.join(STATE_KEY_FILE),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "the state directory has no key"),
            })?;
            return Ok(WorkDir { state, key, temporary: false });
        }
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_nanos()).unwrap_or(0);
        let temp = std::env::temp_dir();
        remove_orphans(&temp);
        let path = temp.join(format!("{PREFIX}{}-{nanos:x}", std::process::id()));
        // Created new, never taken over: a directory someone else made there first fails.
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&path)
            .map_err(|source| Error::Audit { path: temp, source })?;
        // Removed again if it cannot be opened as a state directory (its key made).
        let opened = StateDir::open(&path).and_then(|state| {
            let key = state.key().copied().ok_or_else(|| Error::State {
                path: state.join(STATE_KEY_FILE),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "the work directory has no key"),
            })?;
            Ok((state, key))
        });
        match opened {
            Ok((state, key)) => Ok(WorkDir { state, key, temporary: true }),
            Err(error) => {
                let _ = std::fs::remove_dir_all(&path);
                Err(error)
            }
        }
    }

    /// The key the journals here are authenticated with.
    pub fn key(&self) -> &StateKey {
        &self.key
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.state.path()
    }

    /// The directory as a state directory: every name in it is [`StateDir`]'s.
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// Its journals' directory.
    pub fn journals(&self) -> PathBuf {
        self.state.join(crate::JOURNAL_DIR)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(self.state.path());
        }
    }
}

//! Where a runtime keeps call journals and undo records: its state directory, or, without one,
//! a private temporary directory removed with the runtime (calls are then still undone on
//! failure, but not recovered after a crash).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

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

/// Where journals and undo records go: the state directory, or a private temporary directory
/// removed when this is dropped.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    temporary: bool,
}

impl WorkDir {
    /// The state directory `state_dir`, or a new private temporary directory (`rwx------`)
    /// without one.
    ///
    /// # Errors
    ///
    /// Whatever creating the temporary directory fails with.
    pub fn new(state_dir: Option<&Path>) -> std::io::Result<WorkDir> {
        if let Some(state_dir) = state_dir {
            return Ok(WorkDir { path: state_dir.to_path_buf(), temporary: false });
        }
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_nanos()).unwrap_or(0);
        remove_orphans(&std::env::temp_dir());
        let path = std::env::temp_dir().join(format!("{PREFIX}{}-{nanos:x}", std::process::id()));
        // Created new, never taken over: a directory someone else made there first fails.
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&path)?;
        Ok(WorkDir { path, temporary: true })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its journals' directory.
    pub fn journals(&self) -> PathBuf {
        self.path.join(crate::JOURNAL_DIR)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

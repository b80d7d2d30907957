//! Where a runtime keeps call journals and undo records: its state directory, or, without one,
//! a private temporary directory removed with the runtime (calls are then still undone on
//! failure, but not recovered after a crash).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug)]
pub(crate) struct WorkDir {
    path: PathBuf,
    temporary: bool,
}

impl WorkDir {
    pub(crate) fn new(state_dir: Option<&Path>) -> std::io::Result<WorkDir> {
        if let Some(state_dir) = state_dir {
            return Ok(WorkDir {
                path: state_dir.to_path_buf(),
                temporary: false,
            });
        }
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_nanos()).unwrap_or(0);
        let path = std::env::temp_dir().join(format!("toolcell-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(WorkDir { path, temporary: true })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn journals(&self) -> PathBuf {
        self.path.join("journal")
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

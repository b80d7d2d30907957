//! [`Workspace`]: the directory a call may touch, opened once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Error;
use toolcell_state::LockStoreError;

/// The workspace a call may touch: a directory on the host, granted to the component as its
/// only preopen, named `.`.
pub struct Workspace {
    pub(crate) root: PathBuf,
    /// The absolute path the workspace was opened by, when it is not `root` (a path through
    /// a symlink): clients may name files under either.
    pub(crate) given: Option<PathBuf>,
    /// The workspace directory, opened once; the guard resolves symlinks through it.
    pub(crate) directory: Arc<cap_std::fs::Dir>,
    /// The components' preopen of it: a descriptor of its own on the same directory
    /// (wasmtime-wasi owns the file it wraps), made once and shared by every call.
    preopen: wasmtime_wasi::filesystem::Dir,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Workspace")
            .field("root", &self.root)
            .field("given", &self.given)
            .field("directory", &self.directory)
            .finish_non_exhaustive()
    }
}

/// What a call holds of its workspace: the directory its guard resolves paths through, and the
/// component's preopen of that same directory. Shared by the calls of the workspace: a call
/// takes no descriptor of its own (a duplicate describes the same open directory anyway, and
/// nothing a call does through either changes it for another: every access is relative to it).
#[derive(Clone)]
pub(crate) struct Held {
    pub(crate) directory: Arc<cap_std::fs::Dir>,
    pub(crate) preopen: wasmtime_wasi::filesystem::Dir,
}

impl Workspace {
    /// Resolve `path` (symlinks included) and check that it is a directory.
    ///
    /// # Errors
    ///
    /// [`Error::Workspace`] if it does not exist or is not a directory.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let workspace_error = |reason: String| Error::Workspace { path: path.to_path_buf(), reason };
        let root = std::fs::canonicalize(path).map_err(|error| {
            workspace_error(match error.kind() {
                std::io::ErrorKind::NotFound if path.starts_with("~") => "it does not exist: `~` is not expanded here (an MCP client \
                     configuration starts toolcell without a shell), so write the home directory out, as in `/home/NAME/repo`"
                    .to_owned(),
                std::io::ErrorKind::NotFound => "it does not exist; create it or pass an existing directory".to_owned(),
                _ => error.to_string(),
            })
        })?;
        if !root.is_dir() {
            return Err(workspace_error("it is not a directory".to_owned()));
        }
        let directory = cap_std::fs::Dir::open_ambient_dir(&root, cap_std::ambient_authority())
            .map_err(|error| workspace_error(format!("it cannot be opened: {error}")))?;
        let preopen = wasmtime_wasi::filesystem::Dir::new(
            directory.try_clone().map_err(|error| workspace_error(format!("it cannot be opened: {error}")))?.into_std_file(),
            wasmtime_wasi::FsPerms::ReadWrite,
            wasmtime_wasi::filesystem::OpenMode::READ | wasmtime_wasi::filesystem::OpenMode::WRITE,
            crate::capabilities::filesystem::BLOCKING_IN_PLACE,
        );
        // A `..` in it was resolved after the symlinks before it: only the canonical root
        // says where the workspace is then.
        let given = std::path::absolute(path)
            .ok()
            .filter(|given| *given != root && !given.components().any(|component| component == std::path::Component::ParentDir));
        Ok(Workspace { root, given, directory: Arc::new(directory), preopen })
    }

    /// Create the directory `path` (and its parents) if missing, then [`open`](Self::open) it.
    ///
    /// # Errors
    ///
    /// [`Error::Workspace`] if it cannot be created or is not a directory.
    pub fn create(path: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(path)
            .map_err(|error| Error::Workspace { path: path.to_path_buf(), reason: format!("it cannot be created: {error}") })?;
        Self::open(path)
    }

    /// The canonical host path of the workspace root. For the operator only: never shown to
    /// a component or an agent.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The host paths a client may name the workspace root by.
    pub(crate) fn roots(&self) -> toolcell_args::client_paths::Roots<'_> {
        toolcell_args::client_paths::Roots { canonical: &self.root, given: self.given.as_deref() }
    }

    /// The canonical form of a lock pattern given relative to the workspace: a glob is
    /// normalised lexically (`./src//**` is `src/**`); a literal path is resolved through its
    /// symlinks, as the guard resolves the paths it judges.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if the pattern leads outside the workspace.
    pub fn lock_pattern(&self, pattern: &str) -> Result<String, Error> {
        toolcell_state::workflow::lock_pattern(&self.directory, pattern).map_err(|error| Error::Lock(LockStoreError::Lock(error)))
    }

    /// Whether `path` (workspace-relative) is a file with more than one hard link: the guard
    /// opens such a file under none of its names, so nothing built on a listing may offer it.
    pub fn is_hard_linked(&self, path: &str) -> bool {
        self.directory.symlink_metadata(path).is_ok_and(|metadata| metadata.is_file() && cap_std::fs::MetadataExt::nlink(&metadata) > 1)
    }

    /// The workspace, for one call.
    pub(crate) fn held(&self) -> Held {
        Held { directory: Arc::clone(&self.directory), preopen: self.preopen.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::fs::MetadataExt as _;
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::MetadataExt as _;

    #[test]
    fn calls_hold_the_workspace_without_a_descriptor_each_and_see_the_same_directory() {
        let temp = tempfile::tempdir().expect("temporary directory");
        let workspace = Workspace::open(temp.path()).expect("workspace");
        let (first, second) = (workspace.held(), workspace.held());
        assert_eq!(first.directory.as_raw_fd(), second.directory.as_raw_fd(), "the guard's directory is shared");
        assert_eq!(first.preopen.dir.as_raw_fd(), second.preopen.dir.as_raw_fd(), "the preopen is shared");
        // The component's preopen and the guard's directory are the same directory.
        let guard = first.directory.dir_metadata().expect("stat");
        let preopen = first.preopen.dir.metadata().expect("stat");
        assert_eq!((guard.dev(), guard.ino()), (preopen.dev(), preopen.ino()));
    }
}

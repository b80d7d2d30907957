//! The host's own paths as a workspace sees them.

use crate::runtime::Runtime;
use crate::{Error, Workspace};

impl Runtime {
    /// The host-owned locations inside `workspace`, workspace-relative: the guard hides them
    /// from every tool (what toolcell keeps there copies guarded data: undo records, indexes,
    /// the audit trail).
    ///
    /// # Errors
    ///
    /// [`Error::Insecure`] if the workspace lies inside a host-owned directory: every write a
    /// tool made would then be a write to the host's own state.
    pub(crate) fn host_paths_inside(&self, workspace: &Workspace) -> Result<Vec<String>, Error> {
        let mut known = self.host_inside.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(inside) = known.get(workspace.root()) {
            return Ok(inside.clone());
        }
        let mut inside = Vec::new();
        for owned in &self.host_owned {
            if owned.is_directory && workspace.root().starts_with(&owned.path) {
                return Err(Error::Insecure {
                    path: workspace.root().to_path_buf(),
                    reason: format!(
                        "the workspace lies inside toolcell's own directory `{}`, which tools must not change; use a workspace outside it",
                        owned.path.display()
                    ),
                });
            }
            if let Ok(relative) = owned.path.strip_prefix(workspace.root()) {
                inside.push(relative.to_string_lossy().into_owned());
            }
            // The symlinks a run follows to reach it: removing or replacing one would send the
            // next run elsewhere.
            for link in &owned.links {
                if let Ok(relative) = link.strip_prefix(workspace.root())
                    && !relative.as_os_str().is_empty()
                {
                    inside.push(relative.to_string_lossy().into_owned());
                }
            }
        }
        known.insert(workspace.root().to_path_buf(), inside.clone());
        Ok(inside)
    }
}

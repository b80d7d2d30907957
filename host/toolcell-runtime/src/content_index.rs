//! The content index, as the runtime asks for it: the index itself, how it is kept fresh and
//! the candidates a search asks for live in `toolcell_state::content_index`; here the CLI's and
//! embedders' operations on a workspace's index.

use std::path::PathBuf;

pub use toolcell_state::content_index::{IndexFreshness, IndexReport, IndexStatus};

use crate::error::Error;
use crate::runtime::Runtime;
use crate::workspace::Workspace;

impl Runtime {
    /// Where the index of `workspace` is kept: a file in the state directory.
    pub fn index_path(&self, workspace: &Workspace) -> PathBuf {
        self.indexes.path_for(workspace.root())
    }

    /// The host's own paths inside `workspace`, which are never indexed.
    pub(crate) fn never_indexed(&self, workspace: &Workspace) -> Result<Vec<String>, Error> {
        self.host_paths_inside(workspace)
    }

    /// Build the content index of `workspace` from its text files and keep it in the state
    /// directory, replacing any earlier one.
    ///
    /// # Errors
    ///
    /// [`Error::State`] if the index cannot be written.
    pub fn build_index(&self, workspace: &Workspace) -> Result<IndexReport, Error> {
        let never_indexed = self.never_indexed(workspace)?;
        self.indexes
            .build(workspace.root(), &workspace.directory, &never_indexed)
            .map_err(|source| Error::State(toolcell_state::Error::State { path: self.index_path(workspace), source }))
    }

    /// The index of `workspace` as the state directory holds it, checked whole, and how many
    /// files changed since it was built.
    ///
    /// # Errors
    ///
    /// [`Error::State`] if the index file exists but cannot be read.
    pub fn index_status(&self, workspace: &Workspace) -> Result<IndexStatus, Error> {
        let never_indexed = self.never_indexed(workspace)?;
        self.indexes
            .status(workspace.root(), &workspace.directory, &never_indexed)
            .map_err(|source| Error::State(toolcell_state::Error::State { path: self.index_path(workspace), source }))
    }

    /// Remove the index of `workspace`; whether there was one.
    ///
    /// # Errors
    ///
    /// [`Error::State`] if it exists and cannot be removed.
    pub fn drop_index(&self, workspace: &Workspace) -> Result<bool, Error> {
        self.indexes
            .remove(workspace.root())
            .map_err(|source| Error::State(toolcell_state::Error::State { path: self.index_path(workspace), source }))
    }
}

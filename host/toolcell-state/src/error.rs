//! The state crate's typed errors.

use std::path::PathBuf;

/// Why the state directory, or something in it, cannot be used. Messages name host paths (they
/// are for the operator, never a guest).
///
/// Not `#[non_exhaustive]`: the runtime maps each variant onto its own error of the same name,
/// and a new variant should make it decide how.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A host-owned location (the state directory, a key) could be changed by someone other
    /// than the user running toolcell.
    #[error("refusing to use `{}`: {reason}", path.display())]
    Insecure {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong, and how to fix it.
        reason: String,
    },

    /// The state directory (journals, undo records, read versions) cannot be used.
    #[error("cannot use the state directory at `{}`: {source}; check that it exists and this user may write it", path.display())]
    State {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// The audit trail's directory cannot be used.
    #[error("cannot use the audit trail at `{}`: {source}", path.display())]
    Audit {
        /// The state directory or log file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

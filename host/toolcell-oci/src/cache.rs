//! Pulled blobs (manifests, configs, components), kept by their sha256 digest: a pinned
//! reference already pulled needs no network. Every read is checked against its digest.

use crate::Error;
use sha2::Digest as _;

/// A content-addressed store of blobs in a directory (`blobs/sha256/HEX`).
#[derive(Debug, Clone)]
pub struct Cache {
    root: std::path::PathBuf,
}

impl Cache {
    /// The cache in `root` (created on the first write).
    pub fn new(root: impl Into<std::path::PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The cache's directory.
    pub(crate) fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// Write `bytes` to `path` (inside the cache) in one step.
    ///
    /// # Errors
    ///
    /// [`Error::Cache`] if the file cannot be written.
    pub(crate) fn put_file(&self, path: &std::path::Path, bytes: &[u8]) -> Result<(), Error> {
        use std::io::Write as _;
        let directory = path.parent().unwrap_or(&self.root);
        let fail = |source: std::io::Error| Error::Cache { path: directory.to_path_buf(), source };
        std::fs::create_dir_all(directory).map_err(fail)?;
        let mut staged = tempfile::NamedTempFile::new_in(directory).map_err(fail)?;
        staged.write_all(bytes).map_err(fail)?;
        staged.persist(path).map_err(|error| fail(error.error))?;
        Ok(())
    }

    fn path(&self, digest: &str) -> Option<std::path::PathBuf> {
        let hex = digest.strip_prefix("sha256:")?;
        (hex.len() == 64 && hex.bytes().all(|byte| byte.is_ascii_hexdigit())).then(|| self.root.join("blobs/sha256").join(hex))
    }

    /// The blob of `digest` (`sha256:HEX`), if it is kept and its bytes still hash to it (a
    /// damaged one is dropped and counts as absent).
    pub fn get(&self, digest: &str) -> Option<Vec<u8>> {
        let path = self.path(digest)?;
        let bytes = std::fs::read(&path).ok()?;
        if sha256_digest(&bytes) == digest {
            Some(bytes)
        } else {
            drop(std::fs::remove_file(&path));
            None
        }
    }

    /// Keep `bytes` under their own digest, which is returned.
    ///
    /// # Errors
    ///
    /// [`Error::Cache`] if the file cannot be written.
    pub fn put(&self, bytes: &[u8]) -> Result<String, Error> {
        let digest = sha256_digest(bytes);
        let Some(path) = self.path(&digest) else { return Ok(digest) };
        self.put_file(&path, bytes)?;
        Ok(digest)
    }
}

/// `sha256:HEX` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&sha2::Sha256::digest(bytes)))
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

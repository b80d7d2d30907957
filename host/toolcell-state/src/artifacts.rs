//! The compiled-component cache's files, without the engine that makes and loads them: each
//! artifact is stored with a tag (HMAC-SHA256 under the cache's key) over its name and bytes,
//! and is given back only if the tag is this installation's.

use std::path::{Path, PathBuf};

use sha2::Sha256;

/// What every artifact file starts with; the tag follows, then the serialized component.
const ARTIFACT_MAGIC: &[u8; 8] = b"TCCWASM1";
const TAG_BYTES: usize = 32;

type ArtifactMac = hmac::Hmac<Sha256>;

/// A directory of authenticated artifacts.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    directory: PathBuf,
    key: [u8; crate::storage::KEY_BYTES],
}

impl ArtifactStore {
    /// The artifacts in `directory`, authenticated with `key`. The caller created the
    /// directory private and loaded its key.
    pub fn new(directory: &Path, key: [u8; crate::storage::KEY_BYTES]) -> Self {
        ArtifactStore { directory: directory.to_path_buf(), key }
    }

    /// Where the artifact `name` is kept.
    pub fn path(&self, name: &str) -> PathBuf {
        self.directory.join(name)
    }

    /// The artifact inside the file `bytes` read from `name`, if its tag is this
    /// installation's; else why not.
    ///
    /// # Errors
    ///
    /// Why the bytes are not an authentic artifact.
    pub fn authenticate<'a>(&self, name: &str, bytes: &'a [u8]) -> Result<&'a [u8], &'static str> {
        use hmac::Mac as _;
        let rest = bytes.strip_prefix(ARTIFACT_MAGIC.as_slice()).ok_or("it does not start as toolcell's artifacts do")?;
        if rest.len() < TAG_BYTES {
            return Err("it is too short to hold a tag");
        }
        let (tag, artifact) = rest.split_at(TAG_BYTES);
        // Compared in constant time.
        self.mac(name, artifact)
            .verify_slice(tag)
            .map_err(|_| "its tag does not match its content: it was not written by this host, or was changed since")?;
        Ok(artifact)
    }

    /// The authentic artifact `name`: `Ok(None)` when there is none (or it cannot be read).
    ///
    /// # Errors
    ///
    /// Why the file there is not an authentic artifact; it has been removed.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, &'static str> {
        let Ok(mut bytes) = std::fs::read(self.path(name)) else {
            return Ok(None);
        };
        match self.authenticate(name, &bytes) {
            Ok(artifact) => {
                let header = bytes.len() - artifact.len();
                bytes.drain(..header);
                Ok(Some(bytes))
            }
            Err(reason) => {
                let _ = std::fs::remove_file(self.path(name));
                Err(reason)
            }
        }
    }

    /// Store `artifact` as `name`, tagged: written beside, then renamed, so that another
    /// process never sees a half-written artifact.
    ///
    /// # Errors
    ///
    /// Whatever writing or renaming fails with (the temporary file is removed).
    pub fn store(&self, name: &str, artifact: &[u8]) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(ARTIFACT_MAGIC.len() + TAG_BYTES + artifact.len());
        bytes.extend_from_slice(ARTIFACT_MAGIC);
        bytes.extend_from_slice(&self.tag(name, artifact));
        bytes.extend_from_slice(artifact);
        let temporary = self.directory.join(format!(".{}.{}.tmp", std::process::id(), unique_suffix()));
        let written = std::fs::write(&temporary, &bytes).and_then(|()| std::fs::rename(&temporary, self.path(name)));
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written
    }

    /// The MAC over the artifact `artifact` stored as `name`.
    fn mac(&self, name: &str, artifact: &[u8]) -> ArtifactMac {
        use hmac::{KeyInit as _, Mac as _};
        let mut mac = ArtifactMac::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(b"toolcell compiled component\0");
        mac.update(name.as_bytes());
        mac.update(b"\0");
        mac.update(artifact);
        mac
    }

    /// The tag of the artifact `artifact` stored as `name`.
    fn tag(&self, name: &str, artifact: &[u8]) -> [u8; TAG_BYTES] {
        use hmac::Mac as _;
        self.mac(name, artifact).finalize().into_bytes().into()
    }
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// The name of the artifact compiled from `wasm`: hex SHA-256 of the engine's `compatibility`
/// hash (only available as `impl Hash`), the compiler's `version` and the component's bytes.
pub fn artifact_name(compatibility: &impl std::hash::Hash, version: &str, wasm: &[u8]) -> String {
    use sha2::Digest as _;
    /// Feeds a `Hash` value into SHA-256, so that it becomes part of a stable digest.
    struct DigestHasher(Sha256);
    impl std::hash::Hasher for DigestHasher {
        fn finish(&self) -> u64 {
            0
        }

        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut hasher = DigestHasher(Sha256::new());
    compatibility.hash(&mut hasher);
    hasher.0.update(version.as_bytes());
    hasher.0.update((wasm.len() as u64).to_le_bytes());
    hasher.0.update(wasm);
    crate::storage::hex(&hasher.0.finalize())
}

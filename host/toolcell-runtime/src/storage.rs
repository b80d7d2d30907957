//! Small files the runtime keeps in its state directory, and their names.

use std::path::Path;

/// Replace `path` with `value` as JSON: written beside it and renamed over it, so that a reader
/// never sees half of it (synced first if `sync`).
pub(crate) fn replace_json(path: &Path, value: &impl serde::Serialize, sync: bool) -> std::io::Result<()> {
    replace_bytes(path, &serde_json::to_vec(value).map_err(std::io::Error::other)?, sync)
}

/// Replace `path` with `bytes`: written beside it and renamed over it, so that a reader never
/// sees half of it (synced first if `sync`).
pub(crate) fn replace_bytes(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    use std::io::Write as _;
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = path.with_file_name(format!("{name}.{}.tmp", std::process::id()));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    if sync {
        file.sync_data()?;
    }
    std::fs::rename(&temporary, path)
}

/// `path` opened for appending, created (with its directory) if missing.
pub(crate) fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    let open = || std::fs::OpenOptions::new().create(true).append(true).open(path);
    match open() {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if let Some(directory) = path.parent() {
                std::fs::create_dir_all(directory)?;
            }
            open()
        }
        result => result,
    }
}

/// The key of one session's state in one workspace (read versions, undo records): a hash, so
/// that neither the session id nor the workspace path becomes a file name.
pub(crate) fn session_key(session: &str, workspace: &Path) -> String {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    hasher.update(workspace.as_os_str().as_encoded_bytes());
    hasher.update([0]);
    hasher.update(session.as_bytes());
    hex(&hasher.finalize())
}

/// Lowercase hex of a digest.
pub(crate) use toolcell_audit::hex;

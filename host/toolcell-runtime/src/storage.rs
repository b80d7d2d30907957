//! Small files the runtime keeps in its state directory, and their names.

use std::path::Path;

use crate::error::Error;

/// The state directory's key (mode 0600), which authenticates the journals replayed after a
/// crash.
pub(crate) const STATE_KEY_FILE: &str = "state.key";

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
    let mut file = private_file().write(true).create(true).truncate(true).open(&temporary)?;
    file.write_all(bytes)?;
    if sync {
        file.sync_data()?;
    }
    std::fs::rename(&temporary, path)
}

/// `path` opened for appending, created (with its directory) if missing.
pub(crate) fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    let open = || private_file().create(true).append(true).open(path);
    match open() {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if let Some(directory) = path.parent() {
                create_private_dirs(directory)?;
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

/// Refuse `path` if it belongs to another user or if any permission bit in `forbidden` is set
/// (`0o022`: writable by group or others; `0o077`: any access by them): whoever else can
/// change it could change what toolcell trusts (journals it replays, code it loads, keys).
///
/// # Errors
///
/// [`Error::Insecure`] naming the path, what is wrong and the `chmod` that fixes it.
pub(crate) fn check_private(path: &Path, forbidden: u32, what: &str) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt as _;
    let insecure = |reason: String| Error::Insecure { path: path.to_path_buf(), reason };
    // Not followed: a symlink in place of a host-owned location is someone else's choice of
    // where toolcell keeps its state.
    let metadata = std::fs::symlink_metadata(path).map_err(|source| insecure(format!("{what} cannot be examined ({source})")))?;
    if metadata.file_type().is_symlink() {
        return Err(insecure(format!("{what} is a symlink; give toolcell the real location instead")));
    }
    let user = rustix::process::geteuid().as_raw();
    if metadata.uid() != user {
        return Err(insecure(format!(
            "{what} belongs to user {}, not to the user running toolcell ({user}); use a directory of your own",
            metadata.uid()
        )));
    }
    let mode = metadata.mode() & 0o777;
    if mode & forbidden != 0 {
        let fix = if forbidden & 0o044 != 0 { "go-rwx" } else { "go-w" };
        return Err(insecure(format!(
            "{what} has mode {mode:03o}, so other users could change what toolcell trusts; run `chmod {fix} {}`",
            path.display()
        )));
    }
    Ok(())
}

/// Create `path` and its missing parents, each new one `rwx------`.
pub(crate) fn create_private_dirs(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Options that create files readable and writable by this user alone: what the host keeps
/// (undo records, journals, indexes, the audit trail) holds copies of files some roles may not
/// read.
pub(crate) fn private_file() -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut options = std::fs::OpenOptions::new();
    options.mode(0o600);
    options
}

/// The largest file the host reads back from its own state (an index, an undo record).
pub(crate) const MAX_HOST_FILE_BYTES: u64 = 1 << 30;

/// Read a file the host keeps (index, undo records, sessions, locks): never through a
/// symlink, only a regular file, at most [`MAX_HOST_FILE_BYTES`], so that something planted
/// in its place (a link to `/dev/zero`, a FIFO) can neither hang nor exhaust the host.
pub(crate) fn read_host_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not a regular file"));
    }
    if metadata.len() > MAX_HOST_FILE_BYTES {
        return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, "larger than the host reads back"));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(MAX_HOST_FILE_BYTES).read_to_end(&mut bytes)?;
    Ok(bytes)
}

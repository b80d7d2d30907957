//! Small files toolcell keeps in its state directory: written whole or not at all, private to
//! this user, read back bounded; and the host keys.

use std::path::Path;

use crate::error::Error;

/// How long a host key is (the state key, the compiled-component cache's key).
pub const KEY_BYTES: usize = 32;

/// Replace `path` with `value` as JSON: written beside it and renamed over it, so that a reader
/// never sees half of it (synced first if `sync`).
///
/// # Errors
///
/// Whatever serializing, writing or renaming fails with; `path` is unchanged then.
pub fn replace_json(path: &Path, value: &impl serde::Serialize, sync: bool) -> std::io::Result<()> {
    replace_bytes(path, &serde_json::to_vec(value).map_err(std::io::Error::other)?, sync)
}

/// Replace `path` with `bytes`: written beside it and renamed over it, so that a reader never
/// sees half of it (synced first if `sync`).
///
/// # Errors
///
/// Whatever writing or renaming fails with; `path` is unchanged then.
pub fn replace_bytes(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
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
///
/// # Errors
///
/// Whatever creating the directory or opening the file fails with.
pub fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
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
pub fn session_key(session: &str, workspace: &Path) -> String {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    hasher.update(workspace.as_os_str().as_encoded_bytes());
    hasher.update([0]);
    hasher.update(session.as_bytes());
    hex(&hasher.finalize())
}

/// Lowercase hex of a digest.
pub use toolcell_audit::hex;

/// Refuse `path` if it belongs to another user or if any permission bit in `forbidden` is set
/// (`0o022`: writable by group or others; `0o077`: any access by them): whoever else can
/// change it could change what toolcell trusts (journals it replays, code it loads, keys).
///
/// # Errors
///
/// [`Error::Insecure`] naming the path, what is wrong and the `chmod` that fixes it.
pub fn check_private(path: &Path, forbidden: u32, what: &str) -> Result<(), Error> {
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
///
/// # Errors
///
/// Whatever creating a directory fails with.
pub fn create_private_dirs(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Options that create files readable and writable by this user alone: what the host keeps
/// (undo records, journals, indexes, the audit trail) holds copies of files some roles may not
/// read.
pub fn private_file() -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut options = std::fs::OpenOptions::new();
    options.mode(0o600);
    options
}

/// The most a file may hold in holes (length the file system stores no data for) and still be
/// read whole by the host: hashed for versions and undo records. A hole costs a component one
/// host call to make, and the host would read it at its whole length; a call may leave no more
/// than this in a file it extends (the runtime's `sparse-file` rule).
pub const MAX_HOLE_BYTES: u64 = 64 << 20;

/// The bytes of `file`'s length that the file system stores no data for.
///
/// # Errors
///
/// Whatever `fstat` fails with.
pub fn hole_bytes(file: &impl rustix::fd::AsFd) -> std::io::Result<u64> {
    Ok(holes_of(&rustix::fs::fstat(file)?))
}

/// The bytes of the length `stat` gives that the file system stores no data for.
pub fn holes_of(stat: &rustix::fs::Stat) -> u64 {
    let length = u64::try_from(stat.st_size).unwrap_or(0);
    length.saturating_sub(u64::try_from(stat.st_blocks).unwrap_or(0).saturating_mul(512))
}

/// The birth time of the file `file` (seconds, nanoseconds), where the file system keeps one
/// (ext4, XFS, btrfs, tmpfs): with the inode number, it tells one file from a later one that
/// was given the same number once the first was freed.
pub fn birth_of(file: &impl rustix::fd::AsFd) -> Option<(i64, u32)> {
    let statx = rustix::fs::statx(file, "", rustix::fs::AtFlags::EMPTY_PATH, rustix::fs::StatxFlags::BTIME).ok()?;
    (statx.stx_mask & rustix::fs::StatxFlags::BTIME.bits() != 0).then_some((statx.stx_btime.tv_sec, statx.stx_btime.tv_nsec))
}

/// Copy what `source` holds into `destination` (both at their start), leaving the holes of a
/// sparse file holes: only the ranges the file system says hold data are read and written, and
/// the copy is then given the source's length. Saving a file before a change costs what the
/// file takes on the disk, not its length (an 8 GiB file of one hole would otherwise be 8 GiB
/// written to the state directory, and 8 GiB again when it is put back).
///
/// # Errors
///
/// Whatever reading, writing or sizing fails with.
pub fn copy_sparse(source: &impl rustix::fd::AsFd, destination: &impl rustix::fd::AsFd) -> std::io::Result<()> {
    copy_sparse_until(source, destination, None)
}

/// [`copy_sparse`], given up (`TimedOut`) once `deadline` passes: a copy made for a tool call
/// ends with the call's time, however big the file.
///
/// # Errors
///
/// Whatever reading, writing or sizing fails with; `TimedOut` past the deadline.
pub fn copy_sparse_until(
    source: &impl rustix::fd::AsFd,
    destination: &impl rustix::fd::AsFd,
    deadline: Option<std::time::Instant>,
) -> std::io::Result<()> {
    let past = || deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline);
    use rustix::fs::SeekFrom;
    let length = u64::try_from(rustix::fs::fstat(source)?.st_size).unwrap_or(0);
    let mut buffer = vec![0u8; 64 << 10];
    let mut offset = 0u64;
    while offset < length {
        // The next range of data: where it starts, and where the hole after it does.
        let start = match rustix::fs::seek(source, SeekFrom::Data(offset)) {
            Ok(start) => start,
            // No data past `offset`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => break,
            // A file system without SEEK_DATA: everything is data.
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => offset,
            Err(errno) => return Err(errno.into()),
        };
        let end = rustix::fs::seek(source, SeekFrom::Hole(start)).unwrap_or(length).min(length);
        let mut at = start;
        while at < end {
            if past() {
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the call's deadline passed while a file was being copied"));
            }
            let want = usize::try_from(end - at).unwrap_or(usize::MAX).min(buffer.len());
            let read = match rustix::io::pread(source, &mut buffer[..want], at) {
                Ok(0) => break,
                Ok(read) => read,
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => return Err(errno.into()),
            };
            let mut written = 0;
            while written < read {
                match rustix::io::pwrite(destination, &buffer[written..read], at + written as u64) {
                    Ok(count) => written += count,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(errno) => return Err(errno.into()),
                }
            }
            at += read as u64;
        }
        offset = end.max(start + 1);
    }
    rustix::fs::ftruncate(destination, length)?;
    Ok(())
}

/// The largest file the host reads back from its own state (an index, an undo record).
pub const MAX_HOST_FILE_BYTES: u64 = 1 << 30;

/// Read a file the host keeps (index, undo records, sessions, locks): never through a
/// symlink, only a regular file, at most [`MAX_HOST_FILE_BYTES`], so that something planted
/// in its place (a link to `/dev/zero`, a FIFO) can neither hang nor exhaust the host.
///
/// # Errors
///
/// `InvalidData` if it is not a regular file, `FileTooLarge` if it is larger than [`MAX_HOST_FILE_BYTES`], `ELOOP` if it is a symlink, and whatever reading fails with.
pub fn read_host_file(path: &Path) -> std::io::Result<Vec<u8>> {
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

/// A host key (the cache's, the state directory's): read (it must be 32 bytes, this user's,
/// mode 0600 or stricter), or made from the OS's random source if it does not exist yet. A new
/// key is written whole to a file of its own and then linked into place, so that another
/// process starting at the same moment never reads a key half written: exactly one key wins.
/// `what` names it in messages; `io_error` says which part failed.
///
/// # Errors
///
/// `io_error` of what failed; [`Error::Insecure`] (converted) if the key is another user's, can
/// be read by others, or is not [`KEY_BYTES`] long.
pub fn load_or_create_key<E: From<Error>>(path: &Path, what: &str, io_error: impl Fn(std::io::Error) -> E) -> Result<[u8; KEY_BYTES], E> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let cache_error = io_error;
    let mut key = [0u8; KEY_BYTES];
    if std::fs::symlink_metadata(path).is_err() {
        let mut filled = 0;
        while filled < KEY_BYTES {
            filled += rustix::rand::getrandom(&mut key[filled..], rustix::rand::GetRandomFlags::empty())
                .map_err(|errno| cache_error(std::io::Error::from(errno)))?;
        }
        let fresh = path.with_extension(format!("key.{}-{}.new", std::process::id(), unique_suffix()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&fresh)
            .and_then(|mut file| file.write_all(&key).and_then(|()| file.sync_all()));
        let linked = written.and_then(|()| std::fs::hard_link(&fresh, path));
        let _ = std::fs::remove_file(&fresh);
        match linked {
            Ok(()) => return Ok(key),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(cache_error(error)),
        }
    }
    check_private(path, 0o077, what)?;
    let bytes = std::fs::read(path).map_err(cache_error)?;
    key = bytes.as_slice().try_into().map_err(|_| {
        E::from(Error::Insecure {
            path: path.to_path_buf(),
            reason: format!(
                "{what} holds {} bytes instead of {KEY_BYTES}; remove it to make a new one (what it signed is then no longer trusted)",
                bytes.len()
            ),
        })
    })?;
    Ok(key)
}

/// A number no other call in this process gets, for names of files written beside others.
fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileExt as _, MetadataExt as _};

    #[test]
    fn a_sparse_file_is_copied_with_its_holes_and_its_bytes() {
        let temp = tempfile::tempdir().expect("temp dir");
        let source = std::fs::File::create_new(temp.path().join("source")).expect("source");
        source.set_len(1 << 30).expect("a gigabyte of hole");
        source.write_all_at(b"middle", 512 << 20).expect("write");
        source.write_all_at(b"start", 0).expect("write");
        let copy = std::fs::File::create_new(temp.path().join("copy")).expect("copy");
        copy_sparse(&source, &copy).expect("copied");
        let metadata = copy.metadata().expect("metadata");
        assert_eq!(metadata.len(), 1 << 30);
        assert!(metadata.blocks() * 512 < 8 << 20, "the holes stay holes: {} blocks", metadata.blocks());
        let mut word = [0u8; 6];
        copy.read_exact_at(&mut word, 512 << 20).expect("read");
        assert_eq!(&word, b"middle");
        copy.read_exact_at(&mut word[..5], 0).expect("read");
        assert_eq!(&word[..5], b"start");
        copy.read_exact_at(&mut word, (1 << 30) - 6).expect("read");
        assert_eq!(word, [0; 6]);
        // A file with no hole is copied whole.
        let dense = std::fs::File::create_new(temp.path().join("dense")).expect("dense");
        dense.write_all_at(&vec![7u8; 200_000], 0).expect("write");
        let again = std::fs::File::create_new(temp.path().join("again")).expect("again");
        copy_sparse(&dense, &again).expect("copied");
        assert_eq!(std::fs::read(temp.path().join("again")).expect("read"), vec![7u8; 200_000]);
    }

    #[test]
    fn a_copy_past_its_deadline_is_given_up() {
        let temp = tempfile::tempdir().expect("temp dir");
        let source = std::fs::File::create_new(temp.path().join("source")).expect("source");
        source.write_all_at(&vec![1u8; 1 << 20], 0).expect("write");
        let copy = std::fs::File::create_new(temp.path().join("copy")).expect("copy");
        let passed = Some(std::time::Instant::now());
        let error = copy_sparse_until(&source, &copy, passed).expect_err("past the deadline");
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        let later = Some(std::time::Instant::now() + std::time::Duration::from_secs(60));
        copy_sparse_until(&source, &copy, later).expect("within the deadline");
        assert_eq!(std::fs::read(temp.path().join("copy")).expect("read").len(), 1 << 20);
    }
}

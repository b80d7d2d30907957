//! Filesystem calls for scans over many files, straight through the WASI filesystem interface.
//!
//! `std::fs` goes through wasi-libc, which asks the host for each listed entry's inode and
//! stats each opened file several times: host calls a search over 50,000 files pays for in
//! every file. These helpers make only the calls a scan needs — open and one listing per
//! directory (`toolcell:tool/listing`, all its entries at once), and open, stat, read and
//! close per file. They are governed by the host exactly like `std::fs` (the same WASI calls,
//! or a listing the host judges as the WASI calls it stands for, reach the same guard); only
//! fewer of them are made.

use std::cell::RefCell;
use std::io;

use wasip2::filesystem::types::{Descriptor, DescriptorFlags, DescriptorType, ErrorCode, OpenFlags, PathFlags};

use crate::entry::EntryKind;

thread_local! {
    /// The workspace's preopened directory, asked for once per call.
    static ROOT: RefCell<Option<Descriptor>> = const { RefCell::new(None) };
}

/// Run `body` with the workspace root's descriptor.
fn with_root<T>(body: impl FnOnce(&Descriptor) -> io::Result<T>) -> io::Result<T> {
    ROOT.with(|root| {
        let mut root = root.borrow_mut();
        if root.is_none() {
            *root = wasip2::filesystem::preopens::get_directories()
                .into_iter()
                .find_map(|(descriptor, name)| (name == ".").then_some(descriptor));
        }
        match root.as_ref() {
            Some(root) => body(root),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "the host granted no workspace")),
        }
    })
}

/// The entries of the directory `path` (workspace-relative; a final symlink is followed), with
/// what each is (a symlink is not followed). Entries the host hides are not listed.
///
/// # Errors
///
/// The host's refusal or the filesystem's error, as [`std::io::Error`].
pub fn read_dir(path: &str) -> io::Result<Vec<(String, EntryKind)>> {
    with_root(|root| {
        let directory = root.open_at(PathFlags::SYMLINK_FOLLOW, path, OpenFlags::DIRECTORY, DescriptorFlags::READ).map_err(to_io)?;
        // All the entries in one host call (`toolcell:tool/listing`), judged by the host as
        // `read-directory` and each `read-directory-entry` would be. A name that is not UTF-8
        // cannot be shown or opened: the host leaves it out, as std skips it.
        let entries = crate::bindings::toolcell::tool::listing::read_directory_entries(&directory).map_err(to_io)?;
        let children: Vec<(String, EntryKind)> = entries
            .names
            .split_terminator('\0')
            .zip(entries.types.iter())
            .map(|(name, type_)| (name.to_owned(), kind_of(*type_)))
            .collect();
        if children.len() != entries.types.len() || entries.names.matches('\0').count() != children.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the host's listing has names and types that do not pair up"));
        }
        Ok(children)
    })
}

/// What [`stat`] found at a path.
#[derive(Debug, Clone, Copy)]
pub struct FileStat {
    /// What it is.
    pub kind: EntryKind,
    /// Its size in bytes.
    pub size: u64,
    /// When its content last changed, since the Unix epoch (`None` if the host gives no time).
    pub modified: Option<std::time::Duration>,
}

/// What is at `path` (workspace-relative; a final symlink is followed, within the
/// workspace): one host call, where `std::fs::metadata` makes two (wasi-libc also asks for the
/// inode's hash, for `st_ino`).
///
/// # Errors
///
/// The host's refusal or the filesystem's error, as [`std::io::Error`].
pub fn stat(path: &str) -> io::Result<FileStat> {
    stat_with(PathFlags::SYMLINK_FOLLOW, path)
}

/// [`stat`] of `path` itself: a final symlink is not followed (its own kind and time).
///
/// # Errors
///
/// As [`stat`].
pub fn symlink_stat(path: &str) -> io::Result<FileStat> {
    stat_with(PathFlags::empty(), path)
}

fn stat_with(flags: PathFlags, path: &str) -> io::Result<FileStat> {
    with_root(|root| {
        let stat = root.stat_at(flags, path).map_err(to_io)?;
        // A time past what a `Duration` holds is no time (as `SystemTime` cannot hold it).
        let modified = stat.data_modification_timestamp.and_then(|time| {
            std::time::Duration::from_secs(time.seconds).checked_add(std::time::Duration::from_nanos(u64::from(time.nanoseconds)))
        });
        Ok(FileStat { kind: kind_of(stat.type_), size: stat.size, modified })
    })
}

/// What an entry of `type_` is.
fn kind_of(type_: DescriptorType) -> EntryKind {
    match type_ {
        DescriptorType::RegularFile => EntryKind::File,
        DescriptorType::Directory => EntryKind::Directory,
        DescriptorType::SymbolicLink => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

/// How many hard links the file `path` has (a final symlink is followed, within the
/// workspace). The host opens no file with more than one, under any name.
///
/// # Errors
///
/// The host's refusal or the filesystem's error, as [`std::io::Error`].
pub fn link_count(path: &str) -> io::Result<u64> {
    with_root(|root| root.stat_at(PathFlags::SYMLINK_FOLLOW, path).map(|stat| stat.link_count).map_err(to_io))
}

/// What [`read_file`] found.
#[derive(Debug)]
pub enum FileContent {
    /// The whole file.
    Bytes(Vec<u8>),
    /// The file is larger than the limit (its size); nothing was read.
    TooLarge(u64),
}

/// Bytes asked for by each read of [`read_file`].
const READ_CHUNK: u64 = 64 * 1024;

/// The content of the regular file `path` (workspace-relative; a final symlink is followed,
/// within the workspace), unless it is larger than `limit` bytes.
///
/// A file smaller than one read chunk costs three host calls: open, read, close. A regular
/// file's read that returns fewer bytes than asked has reached the end.
///
/// # Errors
///
/// The host's refusal or the filesystem's error, as [`std::io::Error`].
pub fn read_file(path: &str, limit: u64) -> io::Result<FileContent> {
    with_root(|root| {
        let file = root.open_at(PathFlags::SYMLINK_FOLLOW, path, OpenFlags::empty(), DescriptorFlags::READ).map_err(to_io)?;
        let mut content: Vec<u8> = Vec::new();
        loop {
            let (chunk, _end) = file.read(READ_CHUNK, content.len() as u64).map_err(to_io)?;
            let short = (chunk.len() as u64) < READ_CHUNK;
            if content.is_empty() {
                content = chunk;
            } else {
                content.extend_from_slice(&chunk);
            }
            if short {
                return Ok(FileContent::Bytes(content));
            }
            if content.len() as u64 == READ_CHUNK {
                // A large file: its size decides whether it is read at all.
                let size = file.stat().map_err(to_io)?.size;
                if size > limit {
                    return Ok(FileContent::TooLarge(size));
                }
            }
            if content.len() as u64 > limit {
                // It grew past the limit while being read.
                return Ok(FileContent::TooLarge(content.len() as u64));
            }
        }
    })
}

/// A regular file opened for reading straight through `wasi:filesystem` (one host call per
/// read, at an offset), where `std::fs` reads through a stream.
pub struct FileReader {
    file: Descriptor,
    position: u64,
}

/// Open the regular file `path` (workspace-relative; a final symlink is followed, within the
/// workspace) for reading.
///
/// # Errors
///
/// The host's refusal or the filesystem's error, as [`std::io::Error`].
pub fn open_reader(path: &str) -> io::Result<FileReader> {
    with_root(|root| {
        let file = root.open_at(PathFlags::SYMLINK_FOLLOW, path, OpenFlags::empty(), DescriptorFlags::READ).map_err(to_io)?;
        Ok(FileReader { file, position: 0 })
    })
}

impl FileReader {
    /// The file's size now (one host call).
    ///
    /// # Errors
    ///
    /// The host's refusal or the filesystem's error, as [`std::io::Error`].
    pub fn size(&self) -> io::Result<u64> {
        self.file.stat().map(|stat| stat.size).map_err(to_io)
    }
}

impl io::Read for FileReader {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let wanted = (buffer.len() as u64).min(READ_CHUNK);
        let (chunk, _end) = self.file.read(wanted, self.position).map_err(to_io)?;
        let read = chunk.len().min(buffer.len());
        buffer[..read].copy_from_slice(&chunk[..read]);
        self.position += read as u64;
        Ok(read)
    }
}

impl io::Seek for FileReader {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let position = match to {
            io::SeekFrom::Start(offset) => Some(offset),
            io::SeekFrom::Current(delta) => self.position.checked_add_signed(delta),
            io::SeekFrom::End(delta) => self.file.stat().map_err(to_io)?.size.checked_add_signed(delta),
        };
        self.position = position.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start of the file"))?;
        Ok(self.position)
    }
}

/// A WASI error code as the [`std::io::Error`] std would have returned.
fn to_io(code: ErrorCode) -> io::Error {
    let kind = match code {
        ErrorCode::NoEntry => io::ErrorKind::NotFound,
        ErrorCode::Access | ErrorCode::NotPermitted => io::ErrorKind::PermissionDenied,
        ErrorCode::IsDirectory => io::ErrorKind::IsADirectory,
        ErrorCode::NotDirectory => io::ErrorKind::NotADirectory,
        ErrorCode::Exist => io::ErrorKind::AlreadyExists,
        ErrorCode::NotEmpty => io::ErrorKind::DirectoryNotEmpty,
        ErrorCode::NameTooLong => io::ErrorKind::InvalidFilename,
        ErrorCode::InvalidSeek | ErrorCode::Invalid => io::ErrorKind::InvalidInput,
        ErrorCode::InsufficientMemory => io::ErrorKind::OutOfMemory,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("{code:?}"))
}

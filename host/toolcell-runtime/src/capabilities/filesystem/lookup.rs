//! Lookups and listings: `inspect`, `stat` answers that tell nothing about hidden paths, the
//! listing of what the role may see, and special files refused at open.

use toolcell_policy::{Access, Effect};
use toolcell_types::{ToolErrorKind, escape_control};

use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::clocks::wall_clock::Datetime;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::DescriptorStat;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{DescriptorType, DirectoryEntry};
use wasmtime_wasi::p2::{FsError, FsResult};

use super::*;

/// The buffer a directory is read with: about a thousand entries of short names a call.
const LIST_BUFFER_BYTES: usize = 32 << 10;

/// What [`FsGuard::inspect`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inspected {
    pub(crate) mode: u32,
    pub(crate) read: Effect,
    pub(crate) write: Effect,
    pub(crate) delete: Effect,
}

/// A directory listing made by the guard: the entries the role may see.
pub(crate) struct Listing {
    pub(super) entries: std::vec::IntoIter<Result<DirectoryEntry, ErrorCode>>,
}

impl FsGuard {
    /// The host side of `context.inspect`: the permission bits of `path` (relative to the
    /// workspace root, a final symlink not followed) and what the policy says about reading,
    /// writing and deleting it. Judged like a `stat`: a path outside, or one the role may not
    /// read, is refused and recorded.
    pub(crate) fn inspect(&mut self, path: &str) -> Result<Inspected, (ToolErrorKind, String)> {
        let shown = escape_control(path);
        if self.spend("inspect").is_err() {
            return Err(self.last_refusal(ToolErrorKind::TooLarge));
        }
        let canonical = match resolve(self.root.as_deref(), ".", path, false) {
            Resolved::Inside(canonical) => canonical,
            Resolved::Outside => {
                self.refuse_outside("inspect", path, Access::Read);
                return Err(self.last_refusal(ToolErrorKind::Denied));
            }
            Resolved::Loop => {
                return Err((ToolErrorKind::InvalidArgs, format!("`{shown}` goes through more than {MAX_SYMLINK_HOPS} symlinks")));
            }
        };
        if self.land(&canonical).is_err() {
            return Err((ToolErrorKind::Failed, format!("`{shown}` could not be looked up")));
        }
        let Some(root) = self.root.as_deref() else {
            return Err((ToolErrorKind::Failed, "the call has no workspace".to_owned()));
        };
        let metadata = match root.symlink_metadata(&canonical) {
            Ok(metadata) => metadata,
            Err(error) if matches!(error.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
                if self.check_missing("inspect", &canonical).is_err() {
                    return Err(self.last_refusal(ToolErrorKind::Denied));
                }
                return Err((ToolErrorKind::NotFound, format!("`{shown}` does not exist: check the path with `list_files`")));
            }
            Err(error) => return Err((ToolErrorKind::Failed, format!("`{shown}` could not be looked up ({})", error.kind()))),
        };
        let read = if metadata.is_dir() { Access::List } else { Access::Read };
        if self.check_lookup("inspect", &canonical, Some(metadata.is_dir())).is_err() {
            return Err(self.last_refusal(ToolErrorKind::Denied));
        }
        use cap_std::fs::PermissionsExt as _;
        // A file with several hard links is never opened under any of its names
        // (`refuse_linked`, `check_single_link`): its facts say so as the guard would judge
        // each access, and the reason goes to the agent beside the result, so no listing
        // built on them offers it as readable. Nothing was refused yet: nothing is recorded.
        let links = cap_std::fs::MetadataExt::nlink(&metadata);
        if metadata.is_file() && links > 1 {
            let warning = format!(
                "Note: `{shown}` has {links} hard links, so it is not opened under any of its names (reading, writing and deleting it are refused): its other names may lie outside the workspace or where your role may not go. Ask the operator to replace it with a copy (or remove its other links)."
            );
            if !self.warnings.contains(&warning) {
                self.warnings.push(warning);
            }
            return Ok(Inspected { mode: metadata.permissions().mode(), read: Effect::Deny, write: Effect::Deny, delete: Effect::Deny });
        }
        Ok(Inspected {
            mode: metadata.permissions().mode(),
            read: self.decide(read, &canonical).effect,
            write: self.decide(Access::Write, &canonical).effect,
            delete: self.decide(Access::Delete, &canonical).effect,
        })
    }

    /// Judge a lookup of the canonical `path`, which does not exist: refused (and recorded) as
    /// it would be if something were there that the role may not see — a file it may not read
    /// or a directory it may not list — so that "not found" and "denied" do not tell a
    /// component which hidden paths exist.
    pub(super) fn check_missing(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        self.check_lookup(operation, path, None)
    }

    /// Judge a lookup (`stat`, `inspect`) of the canonical `path`: a directory needs `list`,
    /// anything else `read`, and a missing path is refused if either would be ([`check_missing`]).
    /// Where the role may neither read nor list, every lookup is refused the same way, as a
    /// read, whatever is there: the answer tells nothing about what exists.
    pub(super) fn check_lookup(&mut self, operation: &'static str, path: &str, is_directory: Option<bool>) -> FsResult<()> {
        if self.is_hidden(path) {
            return self.check(operation, path, Access::Read);
        }
        // A missing path is judged as what the role may not see would be: `ask` counts as not
        // granted until approved, so a name that needs approval is put to the approver whether
        // or not anything is there (otherwise "not found" would tell which ones exist).
        match is_directory {
            Some(true) => self.check(operation, path, Access::List),
            Some(false) => self.check(operation, path, Access::Read),
            None if !self.is_visible(path, false) => self.check(operation, path, Access::Read),
            None if !self.is_visible(path, true) => self.check(operation, path, Access::List),
            None => Ok(()),
        }
    }

    /// Whether the role may neither read nor list `path` (toolcell's own state among them):
    /// every lookup of it is refused alike, whatever is there.
    pub(super) fn is_hidden(&self, path: &str) -> bool {
        self.effect(Access::Read, path) == Effect::Deny && self.effect(Access::List, path) == Effect::Deny
    }

    /// The entries of `directory` (the workspace path `path`) the role may see, read at once:
    /// entries it may not read or list, and names the host reserves for what calls have in
    /// flight, are left out, and the rest come in byte order of their names. An entry's type
    /// comes from the listing itself (`d_type`), so no entry is stat'ed unless the filesystem
    /// does not say.
    pub(super) fn list(&self, directory: &std::fs::File, path: &str) -> FsResult<Listing> {
        use rustix::fs::{AtFlags, FileType, Mode, OFlags};
        // A description of its own (the component's descriptor keeps its offset), opened for
        // reading whatever the component's was opened for (the workspace root's preopen is an
        // `O_PATH` descriptor, which `getdents64` refuses), read with a buffer that takes a
        // directory of some hundred entries in one `getdents64` (`rustix::fs::Dir` starts at
        // 768 bytes and grows: four calls for 100 entries).
        let reading = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let own = rustix::fs::openat(directory, ".", reading, Mode::empty()).map_err(std::io::Error::from)?;
        let mut buffer = Vec::with_capacity(LIST_BUFFER_BYTES);
        let mut reader = rustix::fs::RawDir::new(&own, buffer.spare_capacity_mut());
        let mut entries = Vec::new();
        let mut child = String::new();
        while let Some(entry) = reader.next() {
            let entry = match entry {
                Ok(entry) => entry,
                // The directory was removed while it was read: it has no more entries.
                Err(rustix::io::Errno::NOENT) => break,
                // Interrupted before it read anything: read again.
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => return Err(std::io::Error::from(errno).into()),
            };
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(name) else {
                // As wasmtime-wasi: the entry is an error, the listing goes on; but only where
                // the role may see it, judged by its name as text (each invalid byte a U+FFFD),
                // whatever its type: an entry the role may not see is not told to exist.
                child.clear();
                if path != "." {
                    child.push_str(path);
                    child.push('/');
                }
                child.push_str(&String::from_utf8_lossy(name));
                let visible = match entry.file_type() {
                    FileType::Directory => self.is_visible(&child, true),
                    FileType::Unknown => self.is_visible(&child, true) && self.is_visible(&child, false),
                    _ => self.is_visible(&child, false),
                };
                if visible {
                    entries.push(Err(ErrorCode::IllegalByteSequence));
                }
                continue;
            };
            let file_type = match entry.file_type() {
                FileType::Unknown => match rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    // Gone since it was listed.
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(errno) => {
                        entries.push(Err(ErrorCode::from(std::io::Error::from(errno))));
                        continue;
                    }
                },
                file_type => file_type,
            };
            let type_ = descriptor_type(file_type);
            child.clear();
            if path != "." {
                child.push_str(path);
                child.push('/');
            }
            child.push_str(name);
            if self.is_visible(&child, type_ == DescriptorType::Directory) {
                entries.push(Ok(DirectoryEntry { type_, name: name.to_owned() }));
            }
        }
        // The files this call is creating here have no name yet: the call sees them listed.
        if let Some(transaction) = self.transaction.as_ref() {
            for shadow in &transaction.shadows {
                let (parent, name) = shadow.path.rsplit_once('/').unwrap_or((".", shadow.path.as_str()));
                if parent == path && !entries.iter().any(|entry| matches!(entry, Ok(entry) if entry.name == name)) {
                    entries.push(Ok(DirectoryEntry { type_: DescriptorType::RegularFile, name: name.to_owned() }));
                }
            }
        }
        // In byte order of their names, the entries that are errors last: components sort a
        // listing anyway (the built-ins do), and a component's sort of an unsorted listing of
        // 1,000 was a twentieth of its call (its `memcmp`), where a sorted one costs a pass.
        entries.sort_unstable_by(|left, right| match (left, right) {
            (Ok(left), Ok(right)) => left.name.cmp(&right.name),
            (Ok(_), Err(_)) => std::cmp::Ordering::Less,
            (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
            (Err(_), Err(_)) => std::cmp::Ordering::Equal,
        });
        Ok(Listing { entries: entries.into_iter() })
    }

    /// The target `target` of the symlink `link` (a canonical workspace path), if the role may
    /// be shown it: a target that is absolute, or that leads outside the workspace as the kernel
    /// would resolve it from the link's directory (through the symlinks on its way), names
    /// something outside, which no tool is shown; reading it is refused (and recorded) with the
    /// target left out of the message.
    pub(super) fn shown_link_target(&mut self, operation: &'static str, link: &str, target: String) -> FsResult<String> {
        let directory = link.rsplit_once('/').map_or(".", |(parent, _)| parent);
        if target.starts_with('/') || matches!(resolve(self.root.as_deref(), directory, &target, true), Resolved::Outside) {
            let message = format!(
                "the target of the symlink `{}` leads outside the workspace, so it is not shown: tools can only reach paths inside it",
                escape_control(link)
            );
            return Err(self.refuse_rule(operation, link, Access::Read, "workspace-boundary", message, ToolErrorKind::Denied));
        }
        Ok(target)
    }

    /// Refuse to open a FIFO, socket or device: opening or reading one can block the host
    /// beyond any deadline, and no file tool needs one.
    pub(super) fn check_openable(&mut self, operation: &'static str, path: &str, access: Access) -> FsResult<()> {
        let Some(root) = self.root.as_deref() else {
            return Ok(());
        };
        let Ok(metadata) = root.metadata(path) else {
            return Ok(());
        };
        match special_kind(cap_std::fs::MetadataExt::mode(&metadata)) {
            Some(kind) => Err(self.refuse_special(operation, path, access, kind)),
            None => Ok(()),
        }
    }

    /// Refuse `access` to the regular file `path`, which has `links` hard links: its other
    /// names may lie outside the workspace or where this role may not read or write, and
    /// nothing tells where they are, so no role opens it under any name.
    pub(super) fn refuse_linked(&mut self, operation: &'static str, path: &str, access: Access, links: u64) -> FsError {
        let message = format!(
            "{access} of `{}` is refused: the file has {links} hard links, and its other names may lie outside the workspace or where your role may not go, so it is not opened under any of them. Ask the operator to replace it with a copy (or remove its other links).",
            escape_control(path)
        );
        self.refuse_rule(operation, path, access, "hard-link", message, ToolErrorKind::Denied)
    }

    /// Refuse `access` to the special file `path` (`kind` says what it is).
    pub(super) fn refuse_special(&mut self, operation: &'static str, path: &str, access: Access, kind: &str) -> FsError {
        let message = format!(
            "`{}` is {kind}, which tools may not open (it could block the host): only regular files and directories can be opened",
            escape_control(path)
        );
        self.refuse_rule(operation, path, access, "special-file", message, ToolErrorKind::Denied)
    }
}

/// What a special file is (`a FIFO`, ...) by its `st_mode`; `None` for a regular file,
/// directory or symlink.
pub(super) fn special_kind(mode: u32) -> Option<&'static str> {
    use rustix::fs::FileType;
    match FileType::from_raw_mode(mode) {
        FileType::Fifo => Some("a FIFO"),
        FileType::Socket => Some("a socket"),
        FileType::CharacterDevice | FileType::BlockDevice | FileType::Unknown => Some("a device"),
        FileType::RegularFile | FileType::Directory | FileType::Symlink => None,
    }
}

/// What WASI calls a file of type `file_type`.
pub(super) fn descriptor_type(file_type: rustix::fs::FileType) -> DescriptorType {
    use rustix::fs::FileType;
    match file_type {
        FileType::RegularFile => DescriptorType::RegularFile,
        FileType::Directory => DescriptorType::Directory,
        FileType::Symlink => DescriptorType::SymbolicLink,
        FileType::Fifo => DescriptorType::Fifo,
        FileType::Socket => DescriptorType::Socket,
        FileType::CharacterDevice => DescriptorType::CharacterDevice,
        FileType::BlockDevice => DescriptorType::BlockDevice,
        FileType::Unknown => DescriptorType::Unknown,
    }
}

/// A descriptor's stat as WASI gives it, made the way wasmtime-wasi makes it (the birth time
/// stands for the status-change time, and a time before 1970 is left out).
pub(super) fn descriptor_stat(metadata: &std::fs::Metadata) -> DescriptorStat {
    use std::os::unix::fs::MetadataExt as _;
    let datetime = |time: std::io::Result<std::time::SystemTime>| {
        let since_epoch = time.ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(Datetime { seconds: since_epoch.as_secs(), nanoseconds: since_epoch.subsec_nanos() })
    };
    DescriptorStat {
        type_: descriptor_type(rustix::fs::FileType::from_raw_mode(metadata.mode())),
        link_count: metadata.nlink(),
        size: metadata.len(),
        data_access_timestamp: datetime(metadata.accessed()),
        data_modification_timestamp: datetime(metadata.modified()),
        status_change_timestamp: datetime(metadata.created()),
    }
}

//! Acting on a judged path for the guest: the filesystem view the trait implementations run on,
//! opens from the workspace root that follow no symlink, descriptors checked against where their
//! object is now, and the WASI shapes of what the host reads.

use toolcell_policy::Access;
use toolcell_types::{ToolErrorKind, escape_control};

use wasmtime::component::Resource;
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{Descriptor, DescriptorFlags, OpenFlags, PathFlags};
use wasmtime_wasi::p2::{FsError, FsResult};
use wasmtime_wasi::{FsPerms, OpenMode};

use toolcell_state::beneath;

use super::*;

/// The most bytes one `read` returns (a larger request gets this much).
pub(super) const MAX_READ_BYTES: usize = 1 << 20;

/// wasmtime-wasi's filesystem view plus the guard: the host side of `wasi:filesystem` for a
/// governed call.
pub(crate) struct GuardedFilesystem<'a> {
    pub(crate) inner: WasiFilesystemCtxView<'a>,
    pub(crate) guard: &'a mut FsGuard,
}

impl GuardedFilesystem<'_> {
    /// Open the canonical `path` for the guest, following no symlink on the way (see
    /// [`beneath`]). `Ok(None)` if there is no workspace root to open it from.
    pub(super) fn open_beneath(&self, path: &str, open_flags: OpenFlags, flags: DescriptorFlags) -> std::io::Result<Option<std::fs::File>> {
        let Some(root) = self.guard.root.as_ref() else {
            return Ok(None);
        };
        let (os_flags, _) = os_open_flags(open_flags, flags);
        // Files are created `rw-rw-rw-` less the umask, as cap-std (and so wasmtime-wasi) does.
        let fd = beneath::open(root, path, os_flags, rustix::fs::Mode::from_raw_mode(0o666))?;
        Ok(Some(std::fs::File::from(fd)))
    }

    /// Give the guest the descriptor `file`, opened at the canonical `path` for `access`: a
    /// special file is refused now that it is known what it is (opened without blocking, never
    /// read), a file opened for reading counts as read.
    pub(super) fn admit_opened(
        &mut self,
        file: std::fs::File,
        path: String,
        access: Access,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
        perms: FsPerms,
    ) -> FsResult<Resource<Descriptor>> {
        // `fstat`, not `statx`: only the type and the version are wanted, on every open.
        let stat = rustix::fs::fstat(&file).map_err(std::io::Error::from)?;
        if let Some(kind) = special_kind(stat.st_mode) {
            drop(file);
            return Err(self.guard.refuse_special("open-at", &path, access, kind));
        }
        let file_type = rustix::fs::FileType::from_raw_mode(stat.st_mode);
        if file_type == rustix::fs::FileType::RegularFile && stat.st_nlink > 1 {
            drop(file);
            return Err(self.guard.refuse_linked("open-at", &path, access, stat.st_nlink));
        }
        let (_, mode) = os_open_flags(open_flags, flags);
        let descriptor = if file_type == rustix::fs::FileType::Directory {
            Descriptor::Dir(wasmtime_wasi::filesystem::Dir::new(file, perms, mode, BLOCKING_IN_PLACE))
        } else {
            if access == Access::Read {
                self.guard.track_read(&path, &stat);
            }
            Descriptor::File(wasmtime_wasi::filesystem::File::new(file, perms, mode, BLOCKING_IN_PLACE))
        };
        let opened = self.inner.table.push(descriptor)?;
        self.guard.descriptors.insert(opened.rep(), path);
        Ok(opened)
    }

    /// The workspace path of the object `fd` refers to, for an operation that acts through the
    /// descriptor itself (listing it, writing or resizing through it): the path recorded when
    /// it was opened, provided that path still names that very object. Something moved since
    /// (by another call, or outside toolcell) is refused as a conflict rather than judged by a
    /// name it no longer has. Operations relative to a descriptor (`open-at`, `stat-at`, ...)
    /// need no such check: they act on the path they judge, opened from the workspace root.
    pub(super) fn current_path(&mut self, fd: &Resource<Descriptor>, operation: &'static str, access: Access) -> FsResult<String> {
        let path = self.guard.base(fd)?;
        let Some(root) = self.guard.root.as_ref().filter(|_| path != ".") else {
            return Ok(path);
        };
        let held = match self.inner.table.get(fd)? {
            Descriptor::File(file) => rustix::fs::fstat(&*file.file),
            Descriptor::Dir(directory) => rustix::fs::fstat(&*directory.dir),
        }
        .map_err(std::io::Error::from)?;
        // A file being rewritten whole is written through its new, unnamed content.
        let now = match self.guard.shadow_of(&path) {
            Some(shadow) => rustix::fs::fstat(&shadow.file).map_err(std::io::Error::from),
            None => beneath::open(root, &path, rustix::fs::OFlags::PATH, rustix::fs::Mode::empty())
                .and_then(|now| rustix::fs::fstat(&now).map_err(std::io::Error::from)),
        };
        let same = now.is_ok_and(|now| now.st_dev == held.st_dev && now.st_ino == held.st_ino);
        if same {
            return Ok(path);
        }
        let (change, consequence) = if access == Access::List {
            ("moved, replaced or removed", "so it was not listed; list it again where it is now, if it still exists")
        } else {
            ("moved or replaced", "so nothing was done through the old handle; open it again where it is now")
        };
        let message = format!("`{}` was {change} since it was opened, {consequence}", escape_control(&path));
        Err(self.guard.refuse_rule(operation, &path, access, DESCRIPTOR_MOVED, message, ToolErrorKind::Conflict))
    }

    /// After `name` was made in the directory held by the descriptor `made_in`, judged as the
    /// workspace directory `directory`: if that descriptor's directory is no longer at
    /// `directory` (moved by a program that does not take the namespace lock), the new entry is
    /// removed again and the operation refused.
    pub(super) fn made_where_judged(
        &mut self,
        made_in: u32,
        directory: &str,
        name: &str,
        (operation, path): (&'static str, &str),
    ) -> FsResult<()> {
        let Some(root) = self.guard.root.as_ref() else {
            return Ok(());
        };
        let Descriptor::Dir(held) = self.inner.table.get(&Resource::<Descriptor>::new_borrow(made_in))? else {
            return Err(ErrorCode::NotDirectory.into());
        };
        let held_directory = Arc::clone(&held.dir);
        let held = rustix::fs::fstat(&*held_directory).map_err(std::io::Error::from)?;
        let same = beneath::open(root, directory, rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY, rustix::fs::Mode::empty())
            .and_then(|now| rustix::fs::fstat(&now).map_err(std::io::Error::from))
            .is_ok_and(|now| (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino));
        if same {
            return Ok(());
        }
        let _ = rustix::fs::unlinkat(&*held_directory, name, rustix::fs::AtFlags::empty());
        Err(self.changed_underfoot(operation, path, Access::Write))
    }

    /// Refuse a write to the existing file `path` that the filesystem would refuse (its mode,
    /// or its owner, does not let this user write it), before anything is journaled or a
    /// temporary copy is made.
    pub(super) fn check_writable(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        let Some(root) = self.guard.root.as_ref() else {
            return Ok(());
        };
        let Ok(file) = beneath::open(root, path, rustix::fs::OFlags::PATH, rustix::fs::Mode::empty()) else {
            // Missing (about to be created) or changed: the open itself will tell.
            return Ok(());
        };
        // Asked of the descriptor itself (`faccessat2` with `AT_EMPTY_PATH`), or, on a kernel
        // without it (before 5.8), through its `/proc/self/fd` link.
        let asked = match rustix::fs::accessat(&file, "", rustix::fs::Access::WRITE_OK, rustix::fs::AtFlags::EMPTY_PATH) {
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::INVAL) => {
                let path_of_fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
                rustix::fs::access(path_of_fd.as_str(), rustix::fs::Access::WRITE_OK)
            }
            asked => asked,
        };
        match asked {
            Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM | rustix::io::Errno::ROFS) => {
                Err(self.refused_by_filesystem(operation, path, Access::Write))
            }
            _ => Ok(()),
        }
    }

    /// The refusal for an operation on `path` that the policy allowed and the filesystem did
    /// not (permission denied): said as such, with the file's mode, and recorded.
    pub(super) fn refused_by_filesystem(&mut self, operation: &'static str, path: &str, access: Access) -> FsError {
        let mode = self
            .guard
            .root
            .as_ref()
            .and_then(|root| root.symlink_metadata(path).ok())
            .map(|metadata| format!(" (its mode is {:04o})", cap_std::fs::PermissionsExt::mode(&metadata.permissions()) & 0o7777))
            .unwrap_or_default();
        let message = format!(
            "{access} of `{}` was refused by the filesystem: permission denied{mode}. The policy allows it, but the file's permissions do not let toolcell's user {}; change them, or work on another file",
            escape_control(path),
            if access == Access::Write { "write it" } else { "read it" }
        );
        self.guard.refuse_rule(operation, path, access, "filesystem-permission", message, ToolErrorKind::Denied)
    }

    /// The refusal for an operation that met a symlink on the canonical `path`, which had none
    /// when it was judged: something replaced a directory on the way (or the file) since.
    pub(super) fn changed_underfoot(&mut self, operation: &'static str, path: &str, access: Access) -> FsError {
        let message = format!(
            "`{}` changed while it was being used (something replaced it, or a directory on its way, at that moment), so nothing was done to it; try again",
            escape_control(path)
        );
        self.guard.refuse_rule(operation, path, access, "changed-underfoot", message, ToolErrorKind::Conflict)
    }

    /// Run `operation` on the last component of the canonical `path`, relative to a descriptor
    /// for its directory opened from the workspace root following no symlink (with `like`'s
    /// permissions), so wasmtime-wasi's own implementation acts on exactly the judged entry: a
    /// directory on the way swapped for a symlink since cannot send it elsewhere.
    pub(super) fn in_parent<T>(
        &mut self,
        like: &Resource<Descriptor>,
        path: &str,
        (name, access): (&'static str, Access),
        operation: impl FnOnce(&mut Self, Resource<Descriptor>, String) -> FsResult<T>,
    ) -> FsResult<T> {
        let last = path.rsplit_once('/').map_or(path, |(_, last)| last).to_owned();
        if !path.contains('/') && self.guard.descriptors.get(&like.rep()).is_some_and(|base| base == ".") {
            // A name in the workspace root, through a descriptor of the root itself: opening
            // the root again would give the same directory (no path to swap on the way).
            let result = operation(self, Resource::new_borrow(like.rep()), last);
            // What the operation left at the paths it journaled, noted at once.
            self.guard.note_left();
            return result;
        }
        let parent = self.parent_descriptor(like, path, name, access)?;
        let result = operation(self, Resource::new_borrow(parent.rep()), last);
        self.guard.note_left();
        self.inner.table.delete(parent)?;
        result
    }

    /// A descriptor for the directory holding the canonical `path` (see [`in_parent`]). The
    /// caller deletes it from the table.
    pub(super) fn parent_descriptor(
        &mut self,
        like: &Resource<Descriptor>,
        path: &str,
        operation: &'static str,
        access: Access,
    ) -> FsResult<Resource<Descriptor>> {
        let perms = match self.inner.table.get(like)? {
            Descriptor::Dir(directory) => directory.perms,
            Descriptor::File(_) => return Err(ErrorCode::NotDirectory.into()),
        };
        let Some(root) = self.guard.root.as_ref() else {
            return Err(ErrorCode::Access.into());
        };
        let parent = path.rsplit_once('/').map_or(".", |(parent, _)| parent);
        match beneath::open(root, parent, rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty()) {
            Ok(fd) => {
                let directory = wasmtime_wasi::filesystem::Dir::new(std::fs::File::from(fd), perms, OpenMode::READ, BLOCKING_IN_PLACE);
                Ok(self.inner.table.push(Descriptor::Dir(directory))?)
            }
            Err(error) if beneath::is_symlink_on_path(&error) => Err(self.changed_underfoot(operation, path, access)),
            Err(error) => Err(error.into()),
        }
    }
}

/// The OS open flags for a WASI `open-at`, and the mode wasmtime-wasi records for the
/// descriptor (as its own `open-at` computes them).
pub(super) fn os_open_flags(open_flags: OpenFlags, flags: DescriptorFlags) -> (rustix::fs::OFlags, OpenMode) {
    use rustix::fs::OFlags;
    let mut os = OFlags::empty();
    let mut write = false;
    if open_flags.contains(OpenFlags::CREATE) {
        os |= if open_flags.contains(OpenFlags::EXCLUSIVE) { OFlags::CREATE | OFlags::EXCL } else { OFlags::CREATE };
        write = true;
    }
    if open_flags.contains(OpenFlags::TRUNCATE) {
        os |= OFlags::TRUNC;
        write = true;
    }
    if open_flags.contains(OpenFlags::DIRECTORY) {
        os |= OFlags::DIRECTORY;
    }
    // Not opened for writing: opened for reading (wasmtime-wasi's rule).
    let read = flags.contains(DescriptorFlags::READ) || !flags.contains(DescriptorFlags::WRITE);
    write |= flags.contains(DescriptorFlags::WRITE);
    let mut mode = OpenMode::empty();
    if read {
        mode |= OpenMode::READ;
    }
    if write {
        mode |= OpenMode::WRITE;
    }
    os |= match (read, write) {
        (true, true) => OFlags::RDWR,
        (false, true) => OFlags::WRONLY,
        _ => OFlags::RDONLY,
    };
    (os, mode)
}

/// The flag combinations wasmtime-wasi refuses before opening anything.
pub(super) fn check_open_flags(open_flags: OpenFlags, flags: DescriptorFlags, mode: OpenMode, perms: FsPerms) -> FsResult<()> {
    if flags.intersects(DescriptorFlags::FILE_INTEGRITY_SYNC | DescriptorFlags::DATA_INTEGRITY_SYNC | DescriptorFlags::REQUESTED_WRITE_SYNC)
    {
        return Err(ErrorCode::Unsupported.into());
    }
    if open_flags.contains(OpenFlags::DIRECTORY) && open_flags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE) {
        return Err(ErrorCode::Invalid.into());
    }
    if perms.write_not_permitted() && mode.contains(OpenMode::WRITE) {
        return Err(ErrorCode::NotPermitted.into());
    }
    Ok(())
}

/// The access an `open-at` needs.
pub(super) fn open_access(open_flags: OpenFlags, flags: DescriptorFlags) -> Access {
    if open_flags.intersects(OpenFlags::CREATE | OpenFlags::TRUNCATE)
        || flags.intersects(DescriptorFlags::WRITE | DescriptorFlags::MUTATE_DIRECTORY)
    {
        Access::Write
    } else {
        Access::Read
    }
}

pub(super) fn follows(flags: PathFlags) -> bool {
    flags.contains(PathFlags::SYMLINK_FOLLOW)
}

//! `open-at` in its steps: the arguments decoded ([`Open`]), the common case of a plain read
//! that meets no symlink, the full judgment (resolve, decide, transaction), and the open of
//! what was judged. The `wasi:filesystem` trait method only calls them in turn.

use toolcell_policy::{Access, Effect};
use wasmtime::component::Resource;
use wasmtime_wasi::p2::FsResult;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{Descriptor, DescriptorFlags, OpenFlags, PathFlags};
use wasmtime_wasi::{FsPerms, OpenMode};

use super::BLOCKING_IN_PLACE;
use super::operate::{GuardedFilesystem, check_open_flags, follows, open_access, os_open_flags};
use toolcell_state::NamespaceLock;
use toolcell_state::beneath;

/// The flags an open of the call's own new content keeps: its access, and truncation.
const SHADOW_FLAGS: rustix::fs::OFlags =
    rustix::fs::OFlags::RDONLY.union(rustix::fs::OFlags::WRONLY).union(rustix::fs::OFlags::RDWR).union(rustix::fs::OFlags::TRUNC);

/// An `open-at` as the component asked for it, decoded once.
pub(super) struct Open {
    path_flags: PathFlags,
    open_flags: OpenFlags,
    flags: DescriptorFlags,
    perms: FsPerms,
    /// What the open does to the path.
    access: Access,
    /// A directory opened to reach its children: judged when it is listed, not here.
    is_directory_read: bool,
    /// An open for writing that also grants reading (judged for the read too).
    grants_read: bool,
}

impl Open {
    pub(super) fn decode(path_flags: PathFlags, open_flags: OpenFlags, flags: DescriptorFlags, perms: FsPerms) -> FsResult<Open> {
        let mode = os_open_flags(open_flags, flags).1;
        check_open_flags(open_flags, flags, mode, perms)?;
        let access = open_access(open_flags, flags);
        Ok(Open {
            path_flags,
            open_flags,
            flags,
            perms,
            access,
            is_directory_read: open_flags.contains(OpenFlags::DIRECTORY) && access == Access::Read,
            grants_read: mode.contains(OpenMode::READ),
        })
    }

    fn creates(&self) -> bool {
        self.open_flags.contains(OpenFlags::CREATE)
    }

    /// Whether this open of a file whose new content the call is writing opens that content:
    /// any open of a file but one that must create it.
    fn reaches_shadow(&self) -> bool {
        !self.open_flags.contains(OpenFlags::DIRECTORY) && !self.open_flags.contains(OpenFlags::EXCLUSIVE)
    }
}

impl GuardedFilesystem<'_> {
    /// The common case: a read of a path without `..` that the policy allows. Opened as it is
    /// written; if the open meets no symlink, that path is the canonical one and the judgment
    /// stands. `None` sends the open through the full judgment ([`judge_open`](Self::judge_open)),
    /// which judges where a symlink leads instead.
    pub(super) fn open_plain(&mut self, fd: &Resource<Descriptor>, path: &str, open: &Open) -> FsResult<Option<Resource<Descriptor>>> {
        if open.access != Access::Read {
            return Ok(None);
        }
        let Some(plain) = self.guard.plain_path(fd, path)? else {
            return Ok(None);
        };
        // Judged as written (a directory is not judged until it is listed); a refusal is left
        // to the full resolution, which judges where a symlink leads instead.
        let judged = (!open.is_directory_read).then(|| self.guard.judge(Access::Read, &plain));
        let allowed = match &judged {
            Some((effect, _)) => *effect == Effect::Allow,
            None => !self.guard.is_hidden(&plain),
        };
        if !allowed || self.guard.shadow_of(&plain).is_some() {
            return Ok(None);
        }
        if !open.is_directory_read {
            self.guard.land(&plain)?;
        }
        self.guard.check_open_files("open-at", &plain)?;
        match self.open_beneath(&plain, open.open_flags, open.flags) {
            Err(error) if beneath::is_symlink_on_path(&error) => Ok(None),
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(self.refused_by_filesystem("open-at", &plain, open.access))
            }
            opened => {
                if let Some((_, decision)) = judged {
                    self.guard.record_allowed("open-at", &plain, Access::Read, decision);
                }
                match opened? {
                    Some(file) => self.admit_opened(file, plain, open.access, open.open_flags, open.flags, open.perms).map(Some),
                    None => Ok(None),
                }
            }
        }
    }

    /// Resolve and judge the open, and begin its part of the transaction: the canonical path,
    /// and the namespace lock a creating open holds until it is done.
    pub(super) fn judge_open(&mut self, fd: &Resource<Descriptor>, path: &str, open: &Open) -> FsResult<(String, Option<NamespaceLock>)> {
        let follow = follows(open.path_flags);
        // Creating a name is a namespace change: judged and made under the namespace lock.
        if open.creates() {
            if open.access == Access::Write && open.grants_read && !open.open_flags.contains(OpenFlags::DIRECTORY) {
                self.guard.approve_before_lock("open-at", fd, path, follow, Access::Read)?;
            }
            self.guard.approve_before_lock("open-at", fd, path, follow, open.access)?;
        }
        let namespace = if open.creates() { self.guard.lock_namespace()? } else { None };
        let canonical = self.guard.resolve_at("open-at", fd, path, follow, open.access)?;
        // An open for writing that also grants reading (`read` with `write` or
        // `mutate-directory`) is judged for the read too, first: reads through the descriptor
        // are not judged again, so a role that may write a file but not read it must not get
        // it open for reading. A directory's reading is its listing, judged when it is listed.
        if open.access == Access::Write
            && open.grants_read
            && !open.open_flags.contains(OpenFlags::DIRECTORY)
            && !self.guard.is_directory(&canonical)
        {
            self.guard.check("open-at", &canonical, Access::Read)?;
        }
        if !open.is_directory_read {
            self.guard.check("open-at", &canonical, open.access)?;
        } else if self.guard.is_hidden(&canonical) {
            // What the open would answer (not a directory, not found) tells what is there.
            self.guard.check("open-at", &canonical, Access::Read)?;
        }
        // A directory opened puts nothing in place (a listing shows the names of the files the
        // call is creating), and the call's own new content of a file is opened again.
        let reopens = open.reaches_shadow() && self.guard.shadow_of(&canonical).is_some();
        if !open.open_flags.contains(OpenFlags::DIRECTORY) && !reopens {
            self.guard.land(&canonical)?;
        }
        self.guard.check_openable("open-at", &canonical, open.access)?;
        self.guard.check_open_files("open-at", &canonical)?;
        Ok((canonical, namespace))
    }

    /// Open what was judged. A write first enters the transaction (journal, or a shadow file
    /// for a whole rewrite); then the canonical path is opened from the workspace root,
    /// following no symlink, so a directory on the way swapped for a symlink since cannot
    /// redirect it.
    pub(super) fn open_judged(&mut self, canonical: String, open: &Open) -> FsResult<Resource<Descriptor>> {
        if open.reaches_shadow()
            && self.guard.shadow_of(&canonical).is_some()
            && let Some(file) = self.guard.reopen_shadow(&canonical, os_open_flags(open.open_flags, open.flags).0 & SHADOW_FLAGS)?
        {
            // Not tracked as read: the call reads what it wrote itself.
            let (_, mode) = os_open_flags(open.open_flags, open.flags);
            let descriptor = Descriptor::File(wasmtime_wasi::filesystem::File::new(file, open.perms, mode, BLOCKING_IN_PLACE));
            let opened = self.inner.table.push(descriptor)?;
            self.guard.descriptors.insert(opened.rep(), canonical);
            return Ok(opened);
        }
        if open.access == Access::Write {
            if open.creates() && !self.guard.exists(&canonical) {
                self.guard.check_new_name("open-at", &canonical)?;
            }
            self.guard.check_single_link("open-at", &canonical)?;
            self.check_writable("open-at", &canonical)?;
            let access = os_open_flags(open.open_flags, open.flags).0;
            if let Some(kind) = self.guard.shadow_kind(&canonical, open.open_flags, access) {
                self.guard.before_rewrite("open-at", &canonical)?;
                // Written to a new file with no name, which replaces the file at once.
                let file = match self.guard.shadow(&canonical, access, kind) {
                    // The file system's own refusal (a directory the host may not write in),
                    // recorded as one.
                    Err(error) if matches!(error.downcast_ref(), Some(ErrorCode::Access | ErrorCode::NotPermitted)) => {
                        return Err(self.refused_by_filesystem("open-at", &canonical, open.access));
                    }
                    shadowed => shadowed?,
                };
                return self.admit_opened(file, canonical, open.access, open.open_flags, open.flags, open.perms);
            }
            self.guard.before_mutation("open-at", &canonical, true)?;
        }
        match self.open_beneath(&canonical, open.open_flags, open.flags) {
            Ok(Some(file)) => self.admit_opened(file, canonical, open.access, open.open_flags, open.flags, open.perms),
            Ok(None) => Err(ErrorCode::Access.into()),
            Err(error) if beneath::is_symlink_on_path(&error) => {
                let names_a_symlink = !follows(open.path_flags)
                    && self
                        .guard
                        .root
                        .as_ref()
                        .and_then(|root| root.symlink_metadata(&canonical).ok())
                        .is_some_and(|metadata| metadata.is_symlink());
                if names_a_symlink {
                    // `O_NOFOLLOW` on a symlink, as the component asked.
                    Err(ErrorCode::Loop.into())
                } else {
                    Err(self.changed_underfoot("open-at", &canonical, open.access))
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(self.refused_by_filesystem("open-at", &canonical, open.access))
            }
            Err(error) => Err(error.into()),
        }
    }
}

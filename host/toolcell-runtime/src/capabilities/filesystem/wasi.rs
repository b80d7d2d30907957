//! The `wasi:filesystem` host traits, thin: each method decodes its arguments, has the guard
//! judge the paths, acts through [`operate`](super::operate), and records.

use std::sync::Arc;

use toolcell_policy::Access;
use toolcell_types::{ToolErrorKind, escape_control};

use wasmtime::component::Resource;
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{
    self as fs, Descriptor, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry, DirectoryEntryStream, Filesize,
    MetadataHashValue, NewTimestamp, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::bindings::sync::io::streams;
use wasmtime_wasi::p2::{FsError, FsResult};
use wasmtime_wasi::{FsPerms, OpenMode};

use super::open::Open;
use super::streams::{FileReader, FileWriter, Place};
use super::*;

impl GuardedFilesystem<'_> {
    /// Before `operation` makes the file `fd` (which is `path`) reach `end` without writing up
    /// to it (`set-size` to `end`, a write starting at `end`): the hole it may leave is the
    /// guard's to count (see `FsGuard::extend`). Nothing to count from the start of a file.
    fn extending(&mut self, fd: &Resource<Descriptor>, operation: &'static str, path: &str, end: Filesize) -> FsResult<()> {
        if end == 0 {
            return Ok(());
        }
        let Descriptor::File(file) = self.inner.table.get(fd)? else {
            return Ok(());
        };
        let file = Arc::clone(&file.file);
        self.guard.extend(operation, path, &*file, end)
    }

    /// Before a write through `fd` (which is `path`): the file it writes has one name. The call
    /// itself may have given it another since it opened it (a hard link, then a rename):
    /// written under two names, it would be judged, journaled and landed under one only.
    fn through_one_name(&mut self, fd: &Resource<Descriptor>, operation: &'static str, path: &str) -> FsResult<()> {
        let Descriptor::File(file) = self.inner.table.get(fd)? else {
            return Ok(());
        };
        let links = rustix::fs::fstat(&*file.file).map_err(std::io::Error::from)?.st_nlink;
        if links > 1 {
            return Err(self.guard.refuse_linked(operation, path, Access::Write, links));
        }
        Ok(())
    }

    /// An output stream writing to the file `fd`, which is `path`, at `place` on the calling
    /// thread (see [`streams`](super::streams)), refused as wasmtime-wasi refuses one.
    fn file_writer(&mut self, fd: &Resource<Descriptor>, path: &str, place: Place) -> FsResult<Resource<streams::OutputStream>> {
        let file = match self.inner.table.get(fd)? {
            Descriptor::File(file) if file.perms.write_not_permitted() => return Err(ErrorCode::NotPermitted.into()),
            Descriptor::File(file) => Arc::clone(&file.file),
            Descriptor::Dir(_) => return Err(ErrorCode::BadDescriptor.into()),
        };
        // A file this call rewrites whole (the descriptor is its new content: `current_path`
        // checked it) and syncs before placing it.
        let synced = self.guard.transaction.as_ref().is_some_and(|transaction| transaction.durability.syncs());
        let writer = FileWriter::new(file, place).starting_writeback(synced && self.guard.shadow_of(path).is_some());
        if let Some(transaction) = self.guard.transaction.as_mut() {
            transaction.streaming_to(Arc::downgrade(writer.file()), writer.alive());
        }
        let writer: streams::OutputStream = Box::new(writer);
        Ok(self.inner.table.push(writer)?)
    }
}

impl preopens::Host for GuardedFilesystem<'_> {
    /// The workspace, as `.`: a descriptor of the very directory the guard resolves and judges
    /// every path against (the workspace's, made once), not the workspace's path opened again
    /// (which walked the whole path on every call, and would give the component another
    /// directory than the guard's if the path were replaced meanwhile). None for a call without
    /// a workspace (`describe`).
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        // Each answer is a descriptor in the call's table: counted as any filesystem call.
        self.guard.spend_capability("get-directories").map_err(wasmtime::Error::msg)?;
        let Some(preopen) = self.guard.preopen.clone() else {
            return Ok(Vec::new());
        };
        let descriptor = self.inner.table.push(Descriptor::Dir(preopen))?;
        self.guard.descriptors.insert(descriptor.rep(), ".".to_owned());
        Ok(vec![(descriptor, ".".to_owned())])
    }
}

impl fs::Host for GuardedFilesystem<'_> {
    fn convert_error_code(&mut self, error: FsError) -> wasmtime::Result<fs::ErrorCode> {
        fs::Host::convert_error_code(&mut self.inner, error)
    }

    fn filesystem_error_code(&mut self, error: Resource<streams::Error>) -> wasmtime::Result<Option<fs::ErrorCode>> {
        fs::Host::filesystem_error_code(&mut self.inner, error)
    }
}

impl fs::HostDescriptor for GuardedFilesystem<'_> {
    // Calls that judge no path still count against the call's budget of host calls: a loop of
    // them (a `sync` each time) is stopped like any other.
    fn advise(&mut self, fd: Resource<Descriptor>, offset: Filesize, len: Filesize, advice: fs::Advice) -> FsResult<()> {
        self.guard.spend("advise")?;
        fs::HostDescriptor::advise(&mut self.inner, fd, offset, len, advice)
    }

    fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        self.guard.spend("sync-data")?;
        fs::HostDescriptor::sync_data(&mut self.inner, fd)
    }

    fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorFlags> {
        self.guard.spend("get-flags")?;
        fs::HostDescriptor::get_flags(&mut self.inner, fd)
    }

    fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorType> {
        self.guard.spend("get-type")?;
        fs::HostDescriptor::get_type(&mut self.inner, fd)
    }

    fn set_size(&mut self, fd: Resource<Descriptor>, size: Filesize) -> FsResult<()> {
        self.guard.spend("set-size")?;
        let path = self.current_path(&fd, "set-size", Access::Write)?;
        self.guard.check("set-size", &path, Access::Write)?;
        self.guard.check_single_link("set-size", &path)?;
        self.guard.before_mutation("set-size", &path, true)?;
        self.guard.shadow_written(&path);
        self.extending(&fd, "set-size", &path, size)?;
        let resized = fs::HostDescriptor::set_size(&mut self.inner, fd, size);
        self.guard.note_left();
        resized
    }

    fn set_times(&mut self, fd: Resource<Descriptor>, atim: NewTimestamp, mtim: NewTimestamp) -> FsResult<()> {
        self.guard.spend("set-times")?;
        let path = self.current_path(&fd, "set-times", Access::Write)?;
        self.guard.check("set-times", &path, Access::Write)?;
        self.guard.check_single_link("set-times", &path)?;
        // A file or directory itself (not the call's own new content of a file): its times
        // are journaled first.
        self.guard.before_times("set-times", &path)?;
        self.guard.shadow_written(&path);
        let set = fs::HostDescriptor::set_times(&mut self.inner, fd, atim, mtim);
        self.guard.note_left();
        set?;
        self.guard.relanded(&path);
        Ok(())
    }

    fn read(&mut self, fd: Resource<Descriptor>, len: Filesize, offset: Filesize) -> FsResult<(Vec<u8>, bool)> {
        self.guard.spend("read")?;
        // Checked when the descriptor was opened for reading. Read here rather than by
        // wasmtime-wasi, whose buffer is zeroed first: scans read tens of thousands of files.
        let Descriptor::File(file) = self.inner.table.get(&fd)? else {
            return Err(ErrorCode::BadDescriptor.into());
        };
        let wanted = usize::try_from(len).unwrap_or(usize::MAX).min(MAX_READ_BYTES);
        let buffer = &mut self.guard.read_buffer;
        buffer.clear();
        buffer.reserve(wanted);
        let spare = &mut buffer.spare_capacity_mut()[..wanted];
        let bytes = loop {
            match rustix::io::pread(&*file.file, &mut *spare, offset) {
                Err(rustix::io::Errno::INTR) => {}
                Err(errno) => return Err(std::io::Error::from(errno).into()),
                // Copied out at the size read: the buffer stays for the next read.
                Ok((read, _)) => break read.to_vec(),
            }
        };
        // As wasmtime-wasi: the end is reported by a read that returns nothing.
        let end = bytes.is_empty();
        Ok((bytes, end))
    }

    fn write(&mut self, fd: Resource<Descriptor>, buffer: Vec<u8>, offset: Filesize) -> FsResult<Filesize> {
        self.guard.spend("write")?;
        let path = self.current_path(&fd, "write", Access::Write)?;
        self.guard.check("write", &path, Access::Write)?;
        self.through_one_name(&fd, "write", &path)?;
        self.guard.writing_again(&path);
        self.extending(&fd, "write", &path, offset)?;
        fs::HostDescriptor::write(&mut self.inner, fd, buffer, offset)
    }

    fn read_directory(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<DirectoryEntryStream>> {
        self.guard.spend("read-directory")?;
        let path = self.current_path(&fd, "read-directory", Access::List)?;
        self.guard.check("read-directory", &path, Access::List)?;
        let Descriptor::Dir(directory) = self.inner.table.get(&fd)? else {
            return Err(ErrorCode::NotDirectory.into());
        };
        let directory = Arc::clone(&directory.dir);
        let listing = self.guard.list(&directory, &path)?;
        // The stream is the guard's own listing; only this guard reads or drops it.
        let listing = self.inner.table.push(listing)?;
        Ok(Resource::new_own(listing.rep()))
    }

    fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        self.guard.spend("sync")?;
        fs::HostDescriptor::sync(&mut self.inner, fd)
    }

    fn create_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        self.guard.spend("create-directory-at")?;
        self.guard.approve_before_lock("create-directory-at", &fd, &path, false, Access::Write)?;
        let _namespace = self.guard.lock_namespace()?;
        let canonical = self.guard.resolve_at("create-directory-at", &fd, &path, false, Access::Write)?;
        self.guard.land(&canonical)?;
        if self.guard.is_visible_directory(&canonical) {
            return Err(FsError::from(ErrorCode::Exist));
        }
        self.guard.check("create-directory-at", &canonical, Access::Write)?;
        self.guard.check_new_name("create-directory-at", &canonical)?;
        self.guard.before_mutation("create-directory-at", &canonical, false)?;
        self.in_parent(&fd, &canonical, ("create-directory-at", Access::Write), |this, parent, name| {
            fs::HostDescriptor::create_directory_at(&mut this.inner, parent, name)
        })
    }

    fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorStat> {
        self.guard.spend("stat")?;
        // One `fstat`, where wasmtime-wasi makes two.
        let metadata = match self.inner.table.get(&fd)? {
            Descriptor::File(file) => file.file.metadata()?,
            Descriptor::Dir(directory) => directory.dir.metadata()?,
        };
        Ok(descriptor_stat(&metadata))
    }

    fn stat_at(&mut self, fd: Resource<Descriptor>, path_flags: PathFlags, path: String) -> FsResult<DescriptorStat> {
        self.guard.spend("stat-at")?;
        let canonical = self.guard.resolve_at("stat-at", &fd, &path, follows(path_flags), Access::Read)?;
        // The call's own new content of a file answers for it, not put in place.
        if let Some(file) = self.guard.shadow_file(&canonical)? {
            self.guard.check_lookup("stat-at", &canonical, Some(false))?;
            return Ok(descriptor_stat(&file.metadata()?));
        }
        self.guard.land(&canonical)?;
        // The canonical path is resolved already (its last component too, if asked).
        let stat = match self.in_parent(&fd, &canonical, ("stat-at", Access::Read), |this, parent, name| {
            fs::HostDescriptor::stat_at(&mut this.inner, parent, PathFlags::empty(), name)
        }) {
            Ok(stat) => stat,
            Err(error) => {
                if matches!(error.downcast_ref(), Some(ErrorCode::NoEntry | ErrorCode::NotDirectory)) {
                    self.guard.check_missing("stat-at", &canonical)?;
                }
                return Err(error);
            }
        };
        // Judged once the type is known: a directory needs `list`, anything else `read`.
        self.guard.check_lookup("stat-at", &canonical, Some(stat.type_ == DescriptorType::Directory))?;
        Ok(stat)
    }

    fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        atim: NewTimestamp,
        mtim: NewTimestamp,
    ) -> FsResult<()> {
        self.guard.spend("set-times-at")?;
        let canonical = self.guard.check_at("set-times-at", &fd, &path, follows(path_flags), Access::Write)?;
        self.guard.land(&canonical)?;
        // The times of a file with other names are theirs too (some perhaps outside), and a
        // rollback could put them back only on a copy.
        self.guard.check_single_link("set-times-at", &canonical)?;
        self.guard.before_times("set-times-at", &canonical)?;
        self.in_parent(&fd, &canonical, ("set-times-at", Access::Write), |this, parent, name| {
            fs::HostDescriptor::set_times_at(&mut this.inner, parent, PathFlags::empty(), name, atim, mtim)
        })?;
        self.guard.relanded(&canonical);
        Ok(())
    }

    fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path_flags: PathFlags,
        old_path: String,
        new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.guard.spend("link-at")?;
        self.guard.approve_before_lock("link-at", &fd, &old_path, follows(old_path_flags), Access::Write)?;
        self.guard.approve_before_lock("link-at", &new_descriptor, &new_path, false, Access::Write)?;
        let _namespace = self.guard.lock_namespace()?;
        let source = self.guard.check_at("link-at", &fd, &old_path, follows(old_path_flags), Access::Write)?;
        self.guard.land(&source)?;
        let link = self.guard.check_at("link-at", &new_descriptor, &new_path, false, Access::Write)?;
        self.guard.land(&link)?;
        self.guard.check_new_name("link-at", &link)?;
        self.guard.check_hidden_stays_hidden("link-at", &source, &link, false)?;
        self.guard.check_link_judged_alike("link-at", &source, &link)?;
        if self.guard.is_symlink(&source) {
            // A hard link to a symlink is the same relative target read from another place.
            self.guard.check_link_stays_inside("link-at", (&source, &link), &source, &link)?;
            self.guard.check_symlink_not_on_the_way("link-at", &link)?;
        }
        // Whether the session knows the file's content: a new name for it shows nothing.
        let known = self.guard.known_before_move(&source);
        self.guard.before_mutation("link-at", &link, false)?;
        let source_parent = self.parent_descriptor(&fd, &source, "link-at", Access::Write)?;
        let source_name = source.rsplit_once('/').map_or(source.as_str(), |(_, name)| name).to_owned();
        let result = self.in_parent(&new_descriptor, &link, ("link-at", Access::Write), |this, parent, name| {
            // The source is resolved already (through a final symlink, if asked).
            fs::HostDescriptor::link_at(
                &mut this.inner,
                Resource::new_borrow(source_parent.rep()),
                PathFlags::empty(),
                source_name,
                parent,
                name,
            )
        });
        self.inner.table.delete(source_parent)?;
        if result.is_ok() {
            // The source's change time moved with its link count.
            self.guard.relanded(&source);
            self.guard.linked(&link, known);
        }
        result
    }

    fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        self.guard.spend("open-at")?;
        let perms = match self.inner.table.get(&fd)? {
            Descriptor::Dir(directory) => directory.perms,
            Descriptor::File(_) => return Err(ErrorCode::NotDirectory.into()),
        };
        if self.guard.root.is_none() {
            // No workspace: nothing to guard (and nothing to open).
            return fs::HostDescriptor::open_at(&mut self.inner, fd, path_flags, path, open_flags, flags);
        }
        let open = Open::decode(path_flags, open_flags, flags, perms)?;
        if let Some(opened) = self.open_plain(&fd, &path, &open)? {
            return Ok(opened);
        }
        let (canonical, _namespace) = self.judge_open(&fd, &path, &open)?;
        self.open_judged(canonical, &open)
    }

    fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        self.guard.descriptors.remove(&fd.rep());
        // A stream of the file keeps it open: it still counts as an open file.
        if let Ok(Descriptor::File(file)) = self.inner.table.get(&fd)
            && Arc::strong_count(&file.file) > 1
        {
            self.guard.orphans.push(Arc::downgrade(&file.file));
        }
        fs::HostDescriptor::drop(&mut self.inner, fd)
    }

    fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        self.guard.spend("readlink-at")?;
        let canonical = self.guard.check_at("readlink-at", &fd, &path, false, Access::Read)?;
        self.guard.land(&canonical)?;
        let target = match self.in_parent(&fd, &canonical, ("readlink-at", Access::Read), |this, parent, name| {
            fs::HostDescriptor::readlink_at(&mut this.inner, parent, name)
        }) {
            Ok(target) => target,
            // wasmtime-wasi refuses an absolute target itself: refused and recorded here as
            // every target that leads outside is.
            Err(error) if matches!(error.downcast_ref(), Some(ErrorCode::NotPermitted)) => "/".to_owned(),
            Err(error) => return Err(error),
        };
        self.guard.shown_link_target("readlink-at", &canonical, target)
    }

    fn remove_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        self.guard.spend("remove-directory-at")?;
        self.guard.approve_before_lock("remove-directory-at", &fd, &path, false, Access::Delete)?;
        let _namespace = self.guard.lock_namespace()?;
        let canonical = self.guard.check_at("remove-directory-at", &fd, &path, false, Access::Delete)?;
        self.guard.land(&canonical)?;
        self.guard.before_mutation("remove-directory-at", &canonical, false)?;
        let removed = self.in_parent(&fd, &canonical, ("remove-directory-at", Access::Delete), |this, parent, name| {
            fs::HostDescriptor::remove_directory_at(&mut this.inner, parent, name)
        });
        match removed {
            Err(error) if matches!(error.downcast_ref(), Some(ErrorCode::NotEmpty)) => {
                Err(self.guard.not_empty("remove-directory-at", &canonical, error))
            }
            other => other,
        }
    }

    fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.guard.spend("rename-at")?;
        self.guard.approve_rename_before_lock((&fd, &old_path), (&new_descriptor, &new_path))?;
        let _namespace = self.guard.lock_namespace()?;
        let source = self.guard.check_at("rename-at", &fd, &old_path, false, Access::Delete)?;
        let destination = self.guard.check_at("rename-at", &new_descriptor, &new_path, false, Access::Write)?;
        self.guard.land(&source)?;
        self.guard.land(&destination)?;
        self.guard.check_single_link("rename-at", &destination)?;
        self.guard.check_new_name("rename-at", &destination)?;
        let source_is_directory = self.guard.is_directory(&source);
        self.guard.check_hidden_stays_hidden("rename-at", &source, &destination, source_is_directory)?;
        if self.guard.is_symlink(&source) {
            self.guard.check_link_stays_inside("rename-at", (&source, &destination), &source, &destination)?;
            self.guard.check_symlink_not_on_the_way("rename-at", &destination)?;
        }
        // Whether the session knows the file's content, asked before the move changes it.
        let known = !source_is_directory && self.guard.known_before_move(&source);
        if source_is_directory {
            self.guard.check_subtree_move("rename-at", &source, &destination)?;
            self.guard.before_move("rename-at", &source, &destination)?;
        } else {
            self.guard.before_mutation("rename-at", &destination, true)?;
            self.guard.before_mutation("rename-at", &source, false)?;
        }
        let source_parent = self.parent_descriptor(&fd, &source, "rename-at", Access::Delete)?;
        let source_name = source.rsplit_once('/').map_or(source.as_str(), |(_, name)| name).to_owned();
        // A file renamed over is freed after the call, not in the rename (see `release`).
        let replaced = if source_is_directory { None } else { self.guard.hold(&destination) };
        let result = self.in_parent(&new_descriptor, &destination, ("rename-at", Access::Write), |this, parent, name| {
            fs::HostDescriptor::rename_at(&mut this.inner, Resource::new_borrow(source_parent.rep()), source_name, parent, name)
        });
        self.inner.table.delete(source_parent)?;
        if result.is_ok() {
            release::later(replaced);
            // Descriptors opened at or under the source are judged where they are now.
            self.guard.moved(&source, &destination);
            if !source_is_directory {
                self.guard.renamed(&source, &destination, known);
            }
        }
        result
    }

    fn symlink_at(&mut self, fd: Resource<Descriptor>, target: String, link_path: String) -> FsResult<()> {
        self.guard.spend("symlink-at")?;
        self.guard.approve_before_lock("symlink-at", &fd, &link_path, false, Access::Write)?;
        let _namespace = self.guard.lock_namespace()?;
        let link = self.guard.check_at("symlink-at", &fd, &link_path, false, Access::Write)?;
        self.guard.land(&link)?;
        self.guard.check_new_name("symlink-at", &link)?;
        self.guard.check_symlink_not_on_the_way("symlink-at", &link)?;
        // The target is resolved from the link's directory; it must stay inside the workspace.
        let directory = link.rsplit_once('/').map_or(".", |(parent, _)| parent).to_owned();
        if let Some(reason) = self.guard.link_target_escape(&directory, &target) {
            // An absolute target may name something on the host: it is not repeated.
            let shown = if target.starts_with('/') { "an absolute path".to_owned() } else { format!("`{}`", escape_control(&target)) };
            let message = format!(
                "a symlink to {shown} is refused: its target leaves, or may come to leave, the workspace ({reason}). Link only to paths inside it."
            );
            return Err(self.guard.refuse_rule("symlink-at", &link, Access::Write, "symlink-target", message, ToolErrorKind::Denied));
        }
        self.guard.before_mutation("symlink-at", &link, false)?;
        self.in_parent(&fd, &link, ("symlink-at", Access::Write), |this, parent, name| {
            let made_in = parent.rep();
            fs::HostDescriptor::symlink_at(&mut this.inner, parent, target, name.clone())?;
            // Judged from `directory`: the link stays only if it was made there.
            this.made_where_judged(made_in, &directory, &name, ("symlink-at", &link))
        })
    }

    fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        self.guard.spend("unlink-file-at")?;
        self.guard.approve_before_lock("unlink-file-at", &fd, &path, false, Access::Delete)?;
        let _namespace = self.guard.lock_namespace()?;
        let canonical = self.guard.check_at("unlink-file-at", &fd, &path, false, Access::Delete)?;
        self.guard.land(&canonical)?;
        self.guard.check_single_link("unlink-file-at", &canonical)?;
        self.guard.before_mutation("unlink-file-at", &canonical, false)?;
        // Freed after the call, not in the unlink (see `release`).
        let removed = self.guard.hold(&canonical);
        self.in_parent(&fd, &canonical, ("unlink-file-at", Access::Delete), |this, parent, name| {
            fs::HostDescriptor::unlink_file_at(&mut this.inner, parent, name)
        })?;
        release::later(removed);
        Ok(())
    }

    fn read_via_stream(&mut self, fd: Resource<Descriptor>, offset: Filesize) -> FsResult<Resource<streams::InputStream>> {
        self.guard.spend("read-via-stream")?;
        // Checked when the descriptor was opened for reading. A directory is is-directory, as
        // wasmtime-wasi answers.
        let file = match self.inner.table.get(&fd)? {
            Descriptor::File(file) => Arc::clone(&file.file),
            Descriptor::Dir(_) => return Err(ErrorCode::IsDirectory.into()),
        };
        let reader: streams::InputStream = Box::new(FileReader::new(file, offset));
        Ok(self.inner.table.push(reader)?)
    }

    fn write_via_stream(&mut self, fd: Resource<Descriptor>, offset: Filesize) -> FsResult<Resource<streams::OutputStream>> {
        self.guard.spend("write-via-stream")?;
        let path = self.current_path(&fd, "write-via-stream", Access::Write)?;
        self.guard.check("write-via-stream", &path, Access::Write)?;
        self.through_one_name(&fd, "write-via-stream", &path)?;
        self.guard.writing_again(&path);
        self.extending(&fd, "write-via-stream", &path, offset)?;
        self.file_writer(&fd, &path, Place::At(offset))
    }

    fn append_via_stream(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<streams::OutputStream>> {
        self.guard.spend("append-via-stream")?;
        let path = self.current_path(&fd, "append-via-stream", Access::Write)?;
        self.guard.check("append-via-stream", &path, Access::Write)?;
        self.through_one_name(&fd, "append-via-stream", &path)?;
        self.guard.writing_again(&path);
        self.file_writer(&fd, &path, Place::End)
    }

    fn is_same_object(&mut self, a: Resource<Descriptor>, b: Resource<Descriptor>) -> wasmtime::Result<bool> {
        // No error to answer with: past the budget the component is stopped.
        self.guard.spend_capability("is-same-object").map_err(wasmtime::Error::msg)?;
        fs::HostDescriptor::is_same_object(&mut self.inner, a, b)
    }

    fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<MetadataHashValue> {
        self.guard.spend("metadata-hash")?;
        fs::HostDescriptor::metadata_hash(&mut self.inner, fd)
    }

    fn metadata_hash_at(&mut self, fd: Resource<Descriptor>, path_flags: PathFlags, path: String) -> FsResult<MetadataHashValue> {
        self.guard.spend("metadata-hash-at")?;
        let canonical = self.guard.resolve_at("metadata-hash-at", &fd, &path, follows(path_flags), Access::Read)?;
        if let Some(file) = self.guard.shadow_file(&canonical)? {
            self.guard.check_lookup("metadata-hash-at", &canonical, Some(false))?;
            // Hashed as wasmtime-wasi hashes any descriptor's, through one of its own.
            let descriptor = self.inner.table.push(Descriptor::File(wasmtime_wasi::filesystem::File::new(
                file,
                FsPerms::ReadOnly,
                OpenMode::READ,
                BLOCKING_IN_PLACE,
            )))?;
            let hash = fs::HostDescriptor::metadata_hash(&mut self.inner, Resource::new_borrow(descriptor.rep()));
            self.inner.table.delete(descriptor)?;
            return hash;
        }
        self.guard.land(&canonical)?;
        // The canonical path is resolved already (its last component too, if asked).
        let hash = self.in_parent(&fd, &canonical, ("metadata-hash-at", Access::Read), |this, parent, name| {
            fs::HostDescriptor::metadata_hash_at(&mut this.inner, parent, PathFlags::empty(), name)
        });
        // Judged as a `stat` is, once it is known what is there: a file the role may not read
        // and a missing path are refused alike, so the answer tells nothing about which
        // hidden paths exist.
        let is_directory = match &hash {
            Ok(_) => Some(self.guard.is_directory(&canonical)),
            Err(error) if matches!(error.downcast_ref(), Some(ErrorCode::NoEntry | ErrorCode::NotDirectory)) => None,
            Err(_) => return hash,
        };
        self.guard.check_lookup("metadata-hash-at", &canonical, is_directory)?;
        hash
    }
}

impl fs::HostDirectoryEntryStream for GuardedFilesystem<'_> {
    fn read_directory_entry(&mut self, stream: Resource<DirectoryEntryStream>) -> FsResult<Option<DirectoryEntry>> {
        self.guard.spend("read-directory-entry")?;
        let listing = self.inner.table.get_mut(&Resource::<Listing>::new_borrow(stream.rep()))?;
        match listing.entries.next() {
            None => Ok(None),
            Some(Ok(entry)) => Ok(Some(entry)),
            Some(Err(code)) => Err(code.into()),
        }
    }

    fn drop(&mut self, stream: Resource<DirectoryEntryStream>) -> wasmtime::Result<()> {
        self.inner.table.delete(Resource::<Listing>::new_own(stream.rep()))?;
        Ok(())
    }
}

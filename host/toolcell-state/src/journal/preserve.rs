//! Saving a path's state before a call changes it: one journal step per change.

use cap_std::fs::PermissionsExt as _;

use super::*;

impl Journal {
    /// Save the current state of `path` (canonical, in `root`) before it is mutated. Read in
    /// its directory opened without following a symlink, so a directory on the way swapped for
    /// one cannot put another file's content in the journal (a rollback would write it here).
    ///
    /// # Errors
    ///
    /// Whatever reading `path` or saving its prior state fails with; the mutation must not go ahead then.
    pub fn preserve(&mut self, root: &Dir, path: &str) -> std::io::Result<()> {
        self.preserve_step(root, path, false)
    }

    /// [`preserve`](Self::preserve) before `path` is written through a new file that replaces
    /// it whole (see [`Step::rewrite`]).
    ///
    /// # Errors
    ///
    /// As [`preserve`](Self::preserve).
    pub fn preserve_before_rewrite(&mut self, root: &Dir, path: &str) -> std::io::Result<()> {
        self.preserve_step(root, path, true)
    }

    fn preserve_step(&mut self, root: &Dir, path: &str, rewrite: bool) -> std::io::Result<()> {
        let (directory, name) = match crate::beneath::parent(root, path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return self.append(Step {
                    path: path.to_owned(),
                    prior: Prior::Absent,
                    identity: None,
                    rewrite: rewrite.then(Rewrite::default),
                    times: None,
                });
            }
            result => result?,
        };
        let mut identity = None;
        let mut times = None;
        let mut rewrite = rewrite.then(Rewrite::default);
        let prior = match directory.symlink_metadata(name) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Prior::Absent,
            Err(error) => return Err(error),
            Ok(metadata) if metadata.is_dir() => Prior::Directory { mode: metadata.permissions().mode() },
            Ok(metadata) if metadata.is_symlink() => Prior::Symlink {
                target: directory
                    .read_link_contents(name)?
                    .to_str()
                    .ok_or_else(|| std::io::Error::other("the symlink's target is not UTF-8"))?
                    .to_owned(),
            },
            Ok(metadata) if metadata.is_file() => {
                let mut source = crate::beneath::open_in(&directory, name, rustix::fs::OFlags::RDONLY)?;
                let metadata = source.metadata()?;
                if !metadata.is_file() {
                    return Err(std::io::Error::other("the file was replaced while it was being saved"));
                }
                let mode = std::os::unix::fs::PermissionsExt::mode(&metadata.permissions());
                identity = Some((std::os::unix::fs::MetadataExt::dev(&metadata), std::os::unix::fs::MetadataExt::ino(&metadata)));
                times = Some(Times::of(&metadata));
                if let Some(rewrite) = rewrite.as_mut() {
                    rewrite.born = crate::storage::birth_of(&source);
                }
                if metadata.len() <= INLINE_BYTES {
                    let mut content = Vec::new();
                    std::io::Read::read_to_end(&mut source, &mut content)?;
                    Prior::Inline { hex: crate::storage::hex(&content), mode }
                } else {
                    if self.blobs == 0 {
                        crate::storage::create_private_dirs(&self.blob_dir)?;
                    }
                    self.blobs += 1;
                    let blob = self.blobs.to_string();
                    let copy = crate::storage::private_file().write(true).create_new(true).open(self.blob_dir.join(&blob))?;
                    crate::storage::copy_sparse_until(&source, &copy, self.deadline)?;
                    self.unsynced_blobs.push(copy);
                    Prior::File { blob, mode }
                }
            }
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "only files, directories and symlinks can be changed by a tool call",
                ));
            }
        };
        self.append(Step { path: path.to_owned(), prior, identity, rewrite, times })
    }
}

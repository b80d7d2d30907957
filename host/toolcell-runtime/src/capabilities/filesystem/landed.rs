//! What a file a call put in place (rewritten whole, or renamed there) is known by, so that
//! the call's end can tell whether what stands at its path is still that file with the
//! content the call gave it, or another session's since.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use sha2::Digest as _;

use toolcell_state::beneath;

/// A file a call put in place, as it stood just after it landed.
///
/// Its device and inode tell it from another file, because the call holds the inode open
/// until it ends: ext4 hands a freed inode number to the next file made, so a file another
/// host's session makes where it removed this call's would otherwise often have the same one.
/// Its change time is the fast answer: unchanged, nothing touched the file. A change time that
/// moved is no evidence of another writer on its own (a `chmod` to the same mode, a hard link
/// made and removed, a move away and back, a `touch`, an indexer's extended attribute all move
/// it), so then the content decides: still the content the call landed, it is the call's.
pub(crate) struct Landed {
    device: u64,
    inode: u64,
    changed: (i64, i64),
    /// SHA-256 of the content it landed with; `None` if it could not be read then (its mode
    /// forbids it), when only an unchanged change time counts.
    content: Option<[u8; 32]>,
    /// The inode itself, held so that its number goes to no other file while the call runs.
    held: Option<OwnedFd>,
}

impl Landed {
    /// What the file open as `file` (just put in place) is known by now, `content` being
    /// what it holds ([`content_of`]). The inode is held through a duplicate of `file`, if the
    /// process may open one more descriptor (without it, only an unchanged change time counts).
    pub(crate) fn of(file: &OwnedFd, content: Option<[u8; 32]>) -> std::io::Result<Self> {
        let stat = rustix::fs::fstat(file)?;
        Ok(Landed {
            device: stat.st_dev,
            inode: stat.st_ino,
            changed: (stat.st_ctime, i64::try_from(stat.st_ctime_nsec).unwrap_or_default()),
            content,
            held: file.try_clone().ok(),
        })
    }

    /// What `path` beneath `root` (just put in place by a rename) is known by; `None` if it
    /// is gone already.
    pub(crate) fn at(root: &cap_std::fs::Dir, path: &str) -> Option<Self> {
        let readable = beneath::open(root, path, OFlags::RDONLY, Mode::empty());
        let metadata = root.symlink_metadata(path).ok()?;
        if let Ok(readable) = readable
            && let Ok(landed) = Landed::of(&readable, content_of(&readable, &readable))
            && same_inode(&metadata, &landed)
        {
            return Some(landed);
        }
        // Not a file this host may read (a symlink, or a mode without read): only its change
        // time tells.
        use cap_std::fs::MetadataExt as _;
        Some(Landed {
            device: metadata.dev(),
            inode: metadata.ino(),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
            content: None,
            held: None,
        })
    }

    /// The device and inode it landed as.
    /// What the file is now, with the content it landed with, if the inode it landed as
    /// (held since) has not changed since it was put in place: its change time is still the
    /// one the placing gave it. `None` otherwise, or if its content was not read as it landed.
    pub(crate) fn version(&self) -> Option<toolcell_state::reads::Version> {
        let (held, content) = (self.held.as_ref()?, self.content.as_ref()?);
        let stat = rustix::fs::fstat(held).ok()?;
        let changed = (stat.st_ctime, i64::try_from(stat.st_ctime_nsec).unwrap_or_default());
        if (stat.st_dev, stat.st_ino, changed) != (self.device, self.inode, self.changed) {
            return None;
        }
        toolcell_state::reads::Version::hashed(&stat, content)
    }

    pub(crate) fn inode(&self) -> (u64, u64) {
        (self.device, self.inode)
    }

    /// Let go of the inode (its descriptor goes back); only an unchanged change time then
    /// counts.
    pub(crate) fn release(&mut self) {
        self.held = None;
    }

    /// Take its change time again, after the call itself changed only the file's metadata
    /// (its times, or a hard link to it): that change is the call's own. Only while the file
    /// is still what the call landed: a change made by another before it stays another's.
    pub(crate) fn retake(&mut self, root: &cap_std::fs::Dir, path: &str) {
        use cap_std::fs::MetadataExt as _;
        if self.still_at(root, path) == Some(true)
            && let Ok(metadata) = root.symlink_metadata(path)
            && same_inode(&metadata, self)
        {
            self.changed = (metadata.ctime(), metadata.ctime_nsec());
        }
    }

    /// Whether `path` beneath `root` is still this file, with the content it landed with;
    /// `None` if nothing is there.
    pub(crate) fn still_at(&self, root: &cap_std::fs::Dir, path: &str) -> Option<bool> {
        use cap_std::fs::MetadataExt as _;
        let metadata = root.symlink_metadata(path).ok()?;
        if !same_inode(&metadata, self) {
            return Some(false);
        }
        if (metadata.ctime(), metadata.ctime_nsec()) == self.changed {
            return Some(true);
        }
        // Without the inode held, the same number may be another file's since.
        if self.held.is_none() || !metadata.is_file() {
            return Some(false);
        }
        let Some(content) = self.content else {
            return Some(false);
        };
        let now = beneath::open(root, path, OFlags::RDONLY, Mode::empty()).ok().and_then(|readable| {
            let stat = rustix::fs::fstat(&readable).ok()?;
            ((stat.st_dev, stat.st_ino) == (self.device, self.inode)).then(|| digest(&readable).ok()).flatten()
        });
        Some(now == Some(content))
    }
}

/// SHA-256 of what the file open as `file` holds, read through `readable` (the same inode,
/// opened for reading: `file` may be write-only); `None` if it cannot be read.
pub(crate) fn content_of(file: &impl AsFd, readable: &impl AsFd) -> Option<[u8; 32]> {
    let (stat, read) = (rustix::fs::fstat(file).ok()?, rustix::fs::fstat(readable).ok()?);
    ((read.st_dev, read.st_ino) == (stat.st_dev, stat.st_ino)).then(|| digest(readable).ok()).flatten()
}

fn same_inode(metadata: &cap_std::fs::Metadata, landed: &Landed) -> bool {
    use cap_std::fs::MetadataExt as _;
    (metadata.dev(), metadata.ino()) == (landed.device, landed.inode)
}

/// SHA-256 of everything `file` holds, read from its start (its offset is left alone). Not of
/// a file whose holes hold more than a call may make ([`MAX_HOLE_BYTES`](super::budget::MAX_HOLE_BYTES)):
/// its length is not what it costs to make, and hashing it could outlast any deadline. Without
/// the hash, only an unchanged change time tells the file is as it landed.
fn digest(file: impl AsFd) -> std::io::Result<[u8; 32]> {
    if toolcell_state::storage::hole_bytes(&file)? > super::budget::MAX_HOLE_BYTES {
        return Err(std::io::Error::other("a sparse file is not hashed"));
    }
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut offset = 0u64;
    loop {
        match rustix::io::pread(&file, &mut buffer, offset) {
            Ok(0) => return Ok(hasher.finalize().into()),
            Ok(read) => {
                hasher.update(&buffer[..read]);
                offset += read as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::fs::MetadataExt as _;
    use std::os::unix::fs::PermissionsExt as _;

    fn workspace() -> (tempfile::TempDir, cap_std::fs::Dir) {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = cap_std::fs::Dir::open_ambient_dir(temp.path(), cap_std::ambient_authority()).expect("open");
        (temp, root)
    }

    /// Later than the kernel's coarse clock tick, as another host's calls always are.
    fn a_tick() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    /// A file another session removed and made again where a call's file landed is told apart
    /// whether or not it got the freed inode number (ext4 often gives it; the held inode stops
    /// that); so is the very file changed in place (same inode) since.
    #[test]
    fn a_landed_file_made_again_or_changed_since_is_not_taken_for_the_one_that_landed() {
        let (_temp, root) = workspace();
        root.write("n.txt", "the call's").expect("write");
        let landed = Landed::at(&root, "n.txt").expect("landed");
        assert_eq!(landed.still_at(&root, "n.txt"), Some(true));
        a_tick();
        for round in 0..20 {
            root.remove_file("n.txt").expect("rm");
            root.write("n.txt", format!("another session's {round}")).expect("write");
            assert_eq!(landed.still_at(&root, "n.txt"), Some(false), "round {round}");
        }
        // Made again with the very same content: still another session's file.
        root.remove_file("n.txt").expect("rm");
        root.write("n.txt", "the call's").expect("write");
        assert_eq!(landed.still_at(&root, "n.txt"), Some(false));
        // The same inode, changed in place.
        root.write("m.txt", "the call's").expect("write");
        let landed = Landed::at(&root, "m.txt").expect("landed");
        a_tick();
        std::fs::OpenOptions::new()
            .write(true)
            .open(_temp.path().join("m.txt"))
            .and_then(|mut file| std::io::Write::write_all(&mut file, b"THE"))
            .expect("write in place");
        assert_eq!(root.symlink_metadata("m.txt").expect("lstat").ino(), landed.inode);
        assert_eq!(landed.still_at(&root, "m.txt"), Some(false));
        root.remove_file("m.txt").expect("rm");
        assert_eq!(landed.still_at(&root, "m.txt"), None);
    }

    /// A change made by another process to the file at a path, and what it is.
    type Touch = (&'static str, fn(&std::path::Path));

    /// What moves only the change time (a `chmod` to the same mode, or another, a hard link
    /// made and removed, a move away and back, a `touch`) leaves the file the call's.
    #[test]
    fn a_change_of_metadata_alone_leaves_a_landed_file_the_calls() {
        let (temp, root) = workspace();
        let touches: [Touch; 5] = [
            ("chmod to its own mode", |path| {
                let mode = std::fs::metadata(path).expect("stat").permissions().mode();
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            }),
            ("chmod to another mode", |path| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod")),
            ("link and unlink", |path| {
                let other = path.with_extension("link");
                std::fs::hard_link(path, &other).expect("link");
                std::fs::remove_file(&other).expect("unlink");
            }),
            ("move away and back", |path| {
                let other = path.with_extension("away");
                std::fs::rename(path, &other).expect("away");
                std::fs::rename(&other, path).expect("back");
            }),
            ("touch", |path| {
                let file = std::fs::File::options().write(true).open(path).expect("open");
                file.set_modified(std::time::SystemTime::UNIX_EPOCH).expect("touch");
            }),
        ];
        for (touch, how) in touches {
            root.write("f.txt", "the call's").expect("write");
            let landed = Landed::at(&root, "f.txt").expect("landed");
            a_tick();
            how(&temp.path().join("f.txt"));
            let now = root.symlink_metadata("f.txt").expect("lstat");
            assert_ne!((now.ctime(), now.ctime_nsec()), landed.changed, "{touch}: the change time moved");
            assert_eq!(landed.still_at(&root, "f.txt"), Some(true), "{touch}");
            root.remove_file("f.txt").expect("rm");
        }
    }

    /// N7: the call's own metadata change (its times, a link) takes the change time again only
    /// while the content is still the call's: another's change in place before it stays
    /// another's.
    #[test]
    fn a_retake_after_anothers_change_in_place_does_not_make_it_the_calls() {
        let (temp, root) = workspace();
        root.write("f.txt", "the call's").expect("write");
        let mut landed = Landed::at(&root, "f.txt").expect("landed");
        a_tick();
        // Another writes in place (same inode), then the call sets the file's times.
        std::fs::write(temp.path().join("f.txt"), "another's").expect("write in place");
        landed.retake(&root, "f.txt");
        assert_eq!(landed.still_at(&root, "f.txt"), Some(false), "the other's content is not the call's");
        // A file still the call's is the call's after its own change of metadata.
        root.write("g.txt", "the call's").expect("write");
        let mut landed = Landed::at(&root, "g.txt").expect("landed");
        a_tick();
        let file = std::fs::File::options().write(true).open(temp.path().join("g.txt")).expect("open");
        file.set_modified(std::time::SystemTime::UNIX_EPOCH).expect("touch");
        landed.retake(&root, "g.txt");
        let now = root.symlink_metadata("g.txt").expect("lstat");
        assert_eq!(landed.changed, (now.ctime(), now.ctime_nsec()), "taken again");
    }

    #[test]
    fn a_landed_file_has_a_version_with_its_content_only_while_it_is_as_it_landed() {
        let (temp, root) = workspace();
        root.write("v.txt", "as it landed").expect("write");
        let mut landed = Landed::at(&root, "v.txt").expect("landed");
        let stat = rustix::fs::stat(temp.path().join("v.txt")).expect("stat");
        let sha256: [u8; 32] = sha2::Sha256::digest(b"as it landed").into();
        assert_eq!(landed.version(), toolcell_state::reads::Version::hashed(&stat, &sha256));
        assert!(landed.version().is_some());
        // Its metadata changed (and so, for all the host knows, its content): no version.
        a_tick();
        std::fs::set_permissions(temp.path().join("v.txt"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(landed.version(), None);
        // Let go of: no version either.
        root.write("w.txt", "as it landed").expect("write");
        let mut other = Landed::at(&root, "w.txt").expect("landed");
        assert!(other.version().is_some());
        other.release();
        assert_eq!(other.version(), None);
        landed.release();
    }
}

//! Finding and reading what the index holds: the walk of a workspace's text files with their
//! stamps, which stamps can be trusted, and the build of an index file from them.

use super::*;

/// A file `search_files` would consider, as a walk found it.
#[derive(Debug)]
pub(super) struct Found {
    pub(super) path: String,
    pub(super) stamp: Stamp,
    /// Its hard links: a file with more than one may change through a path the host does not see.
    pub(super) links: u64,
}

/// How long after its last change a file's stamp is not trusted: a change within the same tick
/// of the file system's clock may leave size and time as they were ("racy" entries, as git
/// calls them). Such a file is read again until it is older than this.
pub(super) const RACY_NS: u64 = 1_000_000_000;

pub(super) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
}

impl Found {
    /// Whether the stamp identifies the content: changed long enough ago, and one link only.
    pub(super) fn is_stable(&self, now_ns: u64) -> bool {
        self.links <= 1 && self.stamp.changed_ns.saturating_add(RACY_NS) < now_ns
    }
}

/// Whether `path` is never searched: inside a `.git` directory, or one of the host's own paths
/// (or below one).
pub(super) fn is_excluded(path: &str, skip: &[String]) -> bool {
    path.split('/').any(|part| part == ".git")
        || skip.iter().any(|owned| path.strip_prefix(owned.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/')))
}

/// The regular files under `start` (`""` for the whole workspace) that `search_files` would
/// consider (under 16 MiB, outside `.git`, not through symlinks, none of the paths in `skip`),
/// with their stamps, sorted. Binary files are told apart by their content, later. With a
/// watcher, each directory is watched before it is listed, so that nothing created in it after
/// the listing is missed; a watch that cannot be added drops the watcher.
pub(super) fn walk(root: &cap_std::fs::Dir, start: &str, skip: &[String], mut watcher: Option<&mut Option<Watcher>>) -> Vec<Found> {
    if watcher.as_deref().is_none_or(Option::is_none) {
        return walk_unwatched(root, start, skip);
    }
    let mut files = Vec::new();
    let mut pending = vec![start.to_owned()];
    while let Some(directory) = pending.pop() {
        if let Some(slot) = watcher.as_deref_mut()
            && let Some(active) = slot.as_mut()
            && !directory.is_empty()
            && !active.watches(&directory)
            && active.watch(directory.clone()).is_err()
        {
            *slot = None;
        }
        list(root, &directory, skip, &mut pending, &mut files);
    }
    files.sort_by(|left, right| left.path.cmp(&right.path));
    files
}

/// [`walk`] without a watcher, on every core: a file's stamp takes a system call, and a large
/// workspace has tens of thousands. Directories go to whichever thread is free.
fn walk_unwatched(root: &cap_std::fs::Dir, start: &str, skip: &[String]) -> Vec<Found> {
    struct Work {
        pending: Vec<String>,
        /// Threads listing a directory (which may add more).
        busy: usize,
    }
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get).min(4);
    let work = Mutex::new(Work { pending: vec![start.to_owned()], busy: 0 });
    let changed = std::sync::Condvar::new();
    let worker = || {
        let mut files = Vec::new();
        let mut found_directories = Vec::new();
        loop {
            let mut state = work.lock().unwrap_or_else(PoisonError::into_inner);
            let directory = loop {
                if let Some(directory) = state.pending.pop() {
                    state.busy += 1;
                    break directory;
                }
                if state.busy == 0 {
                    changed.notify_all();
                    return files;
                }
                state = changed.wait(state).unwrap_or_else(PoisonError::into_inner);
            };
            drop(state);
            list(root, &directory, skip, &mut found_directories, &mut files);
            let mut state = work.lock().unwrap_or_else(PoisonError::into_inner);
            state.pending.append(&mut found_directories);
            state.busy -= 1;
            changed.notify_all();
        }
    };
    let mut files: Vec<Found> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(worker)).collect();
        let mut files = worker();
        for helper in helpers {
            // A helper that panicked (a host bug) lost its share: walk again alone.
            match helper.join() {
                Ok(more) => files.extend(more),
                Err(_) => return None,
            }
        }
        Some(files)
    })
    .unwrap_or_else(|| {
        let (mut pending, mut files) = (vec![start.to_owned()], Vec::new());
        while let Some(directory) = pending.pop() {
            list(root, &directory, skip, &mut pending, &mut files);
        }
        files
    });
    files.sort_by(|left, right| left.path.cmp(&right.path));
    files
}

/// List `directory`: its subdirectories onto `directories`, its files onto `files`.
fn list(root: &cap_std::fs::Dir, directory: &str, skip: &[String], directories: &mut Vec<String>, files: &mut Vec<Found>) {
    let listing = if directory.is_empty() { root.entries() } else { root.read_dir(directory) };
    let Ok(listing) = listing else {
        return;
    };
    for entry in listing.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let path = if directory.is_empty() { name.clone() } else { format!("{directory}/{name}") };
        if is_excluded(&path, skip) {
            continue;
        }
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        if file_type.is_dir() {
            directories.push(path);
            continue;
        }
        if !file_type.is_file() {
            continue;
        }
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        if let Some(found) = found(path, &metadata) {
            files.push(found);
        }
    }
}

/// `path` as a [`Found`] from its metadata, unless it is too large to be searched.
pub(super) fn found(path: String, metadata: &cap_std::fs::Metadata) -> Option<Found> {
    if metadata.len() > MAX_FILE_BYTES {
        return None;
    }
    // The status-change time, not the modification time, which a writer can set back.
    let changed_ns =
        u64::try_from(metadata.ctime()).unwrap_or(0).saturating_mul(1_000_000_000) + u64::try_from(metadata.ctime_nsec()).unwrap_or(0);
    Some(Found { path, stamp: Stamp { size: metadata.len(), changed_ns, inode: metadata.ino() }, links: metadata.nlink() })
}

/// Whether `content` is binary to a search: a NUL byte among its first 8 KiB.
pub(super) fn looks_binary(content: &[u8]) -> bool {
    content[..content.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// A stamp no file has: what the index records for a file whose stamp it could not trust when
/// it read it, so that the file always counts as changed.
pub(super) const UNTRUSTED: Stamp = Stamp { size: u64::MAX, changed_ns: 0, inode: 0 };

/// Build the index of the workspace at `root` and write it to `path`; the index and its size.
pub(super) fn build_into(root: &cap_std::fs::Dir, skip: &[String], path: &std::path::Path) -> std::io::Result<(Index, usize)> {
    let mut builder = IndexBuilder::new();
    let now = now_ns();
    for file in walk(root, "", skip, None) {
        if let Ok(content) = root.read(&file.path)
            && !looks_binary(&content)
        {
            let stamp = if file.is_stable(now) { file.stamp } else { UNTRUSTED };
            builder.add_stamped(&file.path, &content, stamp);
        }
    }
    let index = builder.build();
    let bytes = index.to_bytes();
    if let Some(directory) = path.parent() {
        crate::storage::create_private_dirs(directory)?;
    }
    crate::storage::replace_bytes(path, &bytes, false)?;
    Ok((index, bytes.len()))
}

pub(super) fn is_binary(root: &cap_std::fs::Dir, path: &str) -> bool {
    use std::io::Read as _;
    let Ok(file) = root.open(path) else {
        return true;
    };
    let mut head = Vec::with_capacity(BINARY_SNIFF_BYTES);
    if file.take(BINARY_SNIFF_BYTES as u64).read_to_end(&mut head).is_err() {
        return true;
    }
    looks_binary(&head)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk on every core finds what one thread listing directory after directory finds:
    /// nested directories, `.git` and the host's paths left out, symlinks not followed.
    #[test]
    fn the_walk_on_every_core_finds_what_one_thread_finds() {
        let temp = tempfile::tempdir().expect("temporary directory");
        for number in 0..400 {
            let directory = temp.path().join(format!("d{}/e{}/f{}", number % 7, number % 5, number % 3));
            std::fs::create_dir_all(&directory).expect("create directory");
            std::fs::write(directory.join(format!("file{number}.txt")), format!("{number}\n")).expect("write file");
        }
        std::fs::create_dir_all(temp.path().join(".git/objects")).expect("create .git");
        std::fs::write(temp.path().join(".git/objects/x"), "object").expect("write object");
        std::fs::create_dir_all(temp.path().join("state")).expect("create state");
        std::fs::write(temp.path().join("state/audit.jsonl"), "{}").expect("write state");
        std::os::unix::fs::symlink(temp.path().join("d0"), temp.path().join("link")).expect("symlink");
        let root = cap_std::fs::Dir::open_ambient_dir(temp.path(), cap_std::ambient_authority()).expect("open root");
        let skip = ["state".to_owned()];
        let paths = |files: Vec<Found>| files.into_iter().map(|found| found.path).collect::<Vec<String>>();
        let (mut pending, mut alone) = (vec![String::new()], Vec::new());
        while let Some(directory) = pending.pop() {
            list(&root, &directory, &skip, &mut pending, &mut alone);
        }
        alone.sort_by(|left, right| left.path.cmp(&right.path));
        let everywhere = paths(walk(&root, "", &skip, None));
        assert_eq!(everywhere.len(), 400);
        assert_eq!(everywhere, paths(alone));
        assert!(everywhere.iter().all(|path| !path.starts_with(".git/") && !path.starts_with("state/") && !path.starts_with("link")));
        assert_eq!(paths(walk(&root, "d3", &skip, None)).len(), everywhere.iter().filter(|path| path.starts_with("d3/")).count());
    }
}

//! The content index of a workspace, kept in the state directory (never in the workspace,
//! where tools could change it): built by the host from the workspace's text files, checked
//! whole when read back, and compared with the workspace to say how much changed since.
//!
//! Which files are indexed is what `search_files` searches: regular files under 16 MiB with
//! no NUL byte in their first 8 KiB, outside `.git`, not through symlinks, and none of the
//! host's own paths. The index holds every such file whatever the roles may read: who may
//! learn what from it is decided when it is asked, not here.

use cap_std::fs::MetadataExt as _;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::Digest as _;
use toolcell_index::{Index, IndexBuilder, Stamp};

use crate::index_watch::{Drained, Watcher};
use crate::{Error, Runtime, Workspace};

/// Files larger than this are not indexed (nor searched).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Leading bytes in which a NUL makes a file binary.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// What building an index did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexReport {
    /// Files indexed.
    pub files: usize,
    /// Distinct trigrams.
    pub trigrams: usize,
    /// Bytes of text indexed.
    pub text_bytes: u64,
    /// Bytes of the index file.
    pub index_bytes: u64,
    /// How long building and writing took.
    pub took: Duration,
}

impl IndexReport {
    fn of(index: &Index, index_bytes: usize, took: Duration) -> Self {
        IndexReport {
            files: index.len(),
            trigrams: index.trigrams(),
            text_bytes: index.text_bytes(),
            index_bytes: index_bytes as u64,
            took,
        }
    }
}

/// What the state directory holds for a workspace's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexStatus {
    /// No index (never built, or dropped).
    Absent,
    /// An index file that failed its checks; it is not used, and building replaces it.
    Damaged(String),
    /// A usable index.
    Present {
        /// Its numbers, as built.
        report: IndexReport,
        /// Files added, removed or changed in the workspace since it was built.
        changed: usize,
    },
}

impl Runtime {
    /// Where the index of `workspace` is kept: a file in the state directory.
    pub fn index_path(&self, workspace: &Workspace) -> PathBuf {
        self.indexes.path_for(workspace.root())
    }

    /// The host's own paths inside `workspace`, which are never indexed.
    pub(crate) fn never_indexed(&self, workspace: &Workspace) -> Result<Vec<String>, Error> {
        self.host_paths_inside(workspace)
    }

    /// Build the content index of `workspace` from its text files and keep it in the state
    /// directory, replacing any earlier one.
    ///
    /// # Errors
    ///
    /// [`Error::State`] if the index cannot be written.
    pub fn build_index(&self, workspace: &Workspace) -> Result<IndexReport, Error> {
        let started = Instant::now();
        let path = self.index_path(workspace);
        let (index, bytes) = build_into(&workspace.directory, &self.never_indexed(workspace)?, &path)
            .map_err(|source| Error::State { path: path.clone(), source })?;
        Ok(IndexReport::of(&index, bytes, started.elapsed()))
    }

    /// The index of `workspace` as the state directory holds it, checked whole, and how many
    /// files changed since it was built.
    ///
    /// # Errors
    ///
    /// [`Error::State`] if the index file exists but cannot be read.
    pub fn index_status(&self, workspace: &Workspace) -> Result<IndexStatus, Error> {
        let path = self.index_path(workspace);
        let bytes = match crate::storage::read_host_file(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(IndexStatus::Absent),
            Err(source) => return Err(Error::State { path, source }),
        };
        let index = match Index::from_bytes(&bytes) {
            Ok(index) => index,
            Err(reason) => return Ok(IndexStatus::Damaged(reason.to_string())),
        };
        let now: HashMap<String, Stamp> =
            walk(&workspace.directory, "", &self.never_indexed(workspace)?, None).into_iter().map(|file| (file.path, file.stamp)).collect();
        let indexed: HashSet<&str> = index.files().map(|(file, _)| file).collect();
        // Changed or gone since; then text files that are new.
        let mut changed = index.files().filter(|(file, stamp)| now.get(*file) != Some(stamp)).count();
        changed += now.keys().filter(|file| !indexed.contains(file.as_str()) && !is_binary(&workspace.directory, file)).count();
        Ok(IndexStatus::Present { report: IndexReport::of(&index, bytes.len(), Duration::ZERO), changed })
    }

    /// Remove the index of `workspace`; whether there was one.
    ///
    /// # Errors
    ///
    /// [`Error::State`] if it exists and cannot be removed.
    pub fn drop_index(&self, workspace: &Workspace) -> Result<bool, Error> {
        let path = self.index_path(workspace);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(Error::State { path, source }),
        }
    }
}

/// A file `search_files` would consider, as a walk found it.
#[derive(Debug)]
struct Found {
    path: String,
    stamp: Stamp,
    /// Its hard links: a file with more than one may change through a path the host does not see.
    links: u64,
}

/// How long after its last change a file's stamp is not trusted: a change within the same tick
/// of the file system's clock may leave size and time as they were ("racy" entries, as git
/// calls them). Such a file is read again until it is older than this.
const RACY_NS: u64 = 1_000_000_000;

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
}

impl Found {
    /// Whether the stamp identifies the content: changed long enough ago, and one link only.
    fn is_stable(&self, now_ns: u64) -> bool {
        self.links <= 1 && self.stamp.changed_ns.saturating_add(RACY_NS) < now_ns
    }
}

/// Whether `path` is never searched: inside a `.git` directory, or one of the host's own paths
/// (or below one).
fn is_excluded(path: &str, skip: &[String]) -> bool {
    path.split('/').any(|part| part == ".git")
        || skip.iter().any(|owned| path.strip_prefix(owned.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/')))
}

/// The regular files under `start` (`""` for the whole workspace) that `search_files` would
/// consider (under 16 MiB, outside `.git`, not through symlinks, none of the paths in `skip`),
/// with their stamps, sorted. Binary files are told apart by their content, later. With a
/// watcher, each directory is watched before it is listed, so that nothing created in it after
/// the listing is missed; a watch that cannot be added drops the watcher.
fn walk(root: &cap_std::fs::Dir, start: &str, skip: &[String], mut watcher: Option<&mut Option<Watcher>>) -> Vec<Found> {
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
        let listing = if directory.is_empty() { root.entries() } else { root.read_dir(&directory) };
        let Ok(listing) = listing else {
            continue;
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
                pending.push(path);
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
    files.sort_by(|left, right| left.path.cmp(&right.path));
    files
}

/// `path` as a [`Found`] from its metadata, unless it is too large to be searched.
fn found(path: String, metadata: &cap_std::fs::Metadata) -> Option<Found> {
    if metadata.len() > MAX_FILE_BYTES {
        return None;
    }
    // The status-change time, not the modification time, which a writer can set back.
    let changed_ns =
        u64::try_from(metadata.ctime()).unwrap_or(0).saturating_mul(1_000_000_000) + u64::try_from(metadata.ctime_nsec()).unwrap_or(0);
    Some(Found { path, stamp: Stamp { size: metadata.len(), changed_ns, inode: metadata.ino() }, links: metadata.nlink() })
}

/// Whether `content` is binary to a search: a NUL byte among its first 8 KiB.
fn looks_binary(content: &[u8]) -> bool {
    content[..content.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// A stamp no file has: what the index records for a file whose stamp it could not trust when
/// it read it, so that the file always counts as changed.
const UNTRUSTED: Stamp = Stamp { size: u64::MAX, changed_ns: 0, inode: 0 };

/// Build the index of the workspace at `root` and write it to `path`; the index and its size.
fn build_into(root: &cap_std::fs::Dir, skip: &[String], path: &std::path::Path) -> std::io::Result<(Index, usize)> {
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

fn is_binary(root: &cap_std::fs::Dir, path: &str) -> bool {
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

/// How a long-running host learns what changed in a workspace since its index was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexFreshness {
    /// The kernel's change notifications (inotify), drained before each search; every file is
    /// compared only when the index is loaded or the notifications were lost. The default.
    #[default]
    Watch,
    /// Every file's size, modification time and inode compared before each search: slower on
    /// large trees, and it also sees what notifications cannot (see the README).
    Walk,
}

/// The indexes in the state directory, each kept loaded while its file is unchanged together
/// with what changed in its workspace since it was built; shared with the calls, whose tools
/// ask it for search candidates.
#[derive(Debug)]
pub(crate) struct IndexStore {
    directory: PathBuf,
    freshness: IndexFreshness,
    build_on_first_search: bool,
    live: Mutex<HashMap<PathBuf, Arc<Mutex<Option<Live>>>>>,
    /// Workspaces whose index is being built in the background.
    building: Running,
    /// Workspaces whose notifications a thread takes in between searches.
    absorbing: Running,
}

/// What a call needs to ask for search candidates: the store and the workspace.
#[derive(Debug, Clone)]
pub(crate) struct IndexScope {
    pub(crate) store: Arc<IndexStore>,
    pub(crate) workspace: PathBuf,
}

/// A file that differs from what the index holds.
#[derive(Debug)]
enum Change {
    /// Removed (or no longer searched) since the index was built.
    Gone,
    /// Added or changed: its stamp now, and what is known of its content.
    File { stamp: Stamp, content: Content },
}

impl Change {
    /// `file` changed, its content not read yet (never to be trusted if it has other links).
    fn unread(file: &Found) -> Change {
        Change::File { stamp: file.stamp, content: if file.links > 1 { Content::Unknown } else { Content::Unread } }
    }
}

#[derive(Debug)]
enum Content {
    /// Not read yet: read (once) when a search needs it.
    Unread,
    /// Always a candidate: binary, unreadable, or with a stamp that cannot be trusted.
    Unknown,
    /// Its trigrams, as of its stamp, and whether that stamp could be trusted when it was read
    /// (older than the file system's clock can blur): content read while notifications are
    /// watched needs no such trust, since any later change is notified, but once they are lost
    /// only a trusted stamp vouches for it.
    Trigrams(Vec<toolcell_index::Trigram>, bool),
}

/// An index in use: what it holds, and how the workspace differs from it.
#[derive(Debug)]
struct Live {
    /// The index file's modification time and size when it was read.
    file: (std::time::SystemTime, u64),
    index: Arc<Index>,
    /// The index's file ids, sorted by path.
    by_path: Vec<u32>,
    /// Every file that differs from the index, by path.
    changed: HashMap<String, Change>,
    /// The kernel's notifications, while they can be trusted.
    watcher: Option<Watcher>,
}

impl Live {
    fn new(file: (std::time::SystemTime, u64), index: Arc<Index>) -> Live {
        let mut by_path: Vec<u32> = (0..u32::try_from(index.len()).unwrap_or(u32::MAX)).collect();
        by_path.sort_by(|left, right| index.path(*left).cmp(index.path(*right)));
        Live { file, index, by_path, changed: HashMap::new(), watcher: None }
    }

    /// The stamp the index holds for `path`.
    fn indexed(&self, path: &str) -> Option<Stamp> {
        let at = self.by_path.binary_search_by(|id| self.index.path(*id).cmp(path)).ok()?;
        Some(self.index.stamp(self.by_path[at]))
    }

    /// The index's paths below the directory `directory`.
    fn indexed_below<'a>(&'a self, directory: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let prefix = format!("{directory}/");
        let start = self.by_path.partition_point(|id| self.index.path(*id) < prefix.as_str());
        self.by_path[start..].iter().map(|id| self.index.path(*id)).take_while(move |path| path.starts_with(&prefix))
    }

    /// Bring `changed` up to date with the workspace: from the notifications queued since the
    /// last look, or by comparing every file when there are no notifications to trust.
    fn refresh(&mut self, root_path: &std::path::Path, root: &cap_std::fs::Dir, skip: &[String], freshness: IndexFreshness) {
        if !self.take_notified(root, skip, &[]) {
            self.compare_all(root_path, root, skip, freshness);
        }
    }

    /// Look again at what the queued notifications name, and at `written` (paths the host
    /// itself just changed); `false` if the notifications were lost (or never watched), when
    /// only comparing every file tells what changed.
    fn take_notified(&mut self, root: &cap_std::fs::Dir, skip: &[String], written: &[String]) -> bool {
        let Drained::Changed(mut paths) = self.watcher.as_mut().map_or(Drained::Lost, Watcher::drain) else {
            return false;
        };
        // A host commit is notified too: each path once.
        paths.extend(written.iter().cloned());
        paths.sort_unstable();
        paths.dedup();
        for path in paths {
            self.recheck(&path, root, skip);
        }
        // A directory that could not be watched dropped the watcher: this answer is exact (the
        // directory was walked), the next one compares every file.
        true
    }

    /// Compare every file with the index (the notifications, when wanted, start first, so that
    /// nothing changed during the walk is missed).
    fn compare_all(&mut self, root_path: &std::path::Path, root: &cap_std::fs::Dir, skip: &[String], freshness: IndexFreshness) {
        let mut watcher = match freshness {
            IndexFreshness::Watch => Watcher::start(root_path, []).ok(),
            IndexFreshness::Walk => None,
        };
        let files = walk(root, "", skip, Some(&mut watcher));
        let mut previous = std::mem::take(&mut self.changed);
        let now = now_ns();
        let present: HashSet<&str> = files.iter().map(|file| file.path.as_str()).collect();
        let mut changed: HashMap<String, Change> =
            self.index.files().filter(|(path, _)| !present.contains(path)).map(|(path, _)| (path.to_owned(), Change::Gone)).collect();
        for file in &files {
            if let Some(change) = self.change_of(file, now, previous.remove(&file.path)) {
                changed.insert(file.path.clone(), change);
            }
        }
        self.changed = changed;
        self.watcher = watcher;
    }

    /// What `file` is relative to the index (`None`: as indexed), keeping what `before` knew of
    /// its content if its stamp is the same and was trusted when it was read.
    fn change_of(&self, file: &Found, now: u64, before: Option<Change>) -> Option<Change> {
        let stable = file.is_stable(now);
        if stable && self.indexed(&file.path) == Some(file.stamp) {
            return None;
        }
        Some(match before {
            Some(Change::File { stamp, content: content @ Content::Trigrams(_, true) })
                if file.links <= 1 && stamp == file.stamp && stable =>
            {
                Change::File { stamp, content }
            }
            _ => Change::unread(file),
        })
    }

    /// Look again at `path`, which a notification named: a file, a directory (walked, and
    /// watched), or gone.
    fn recheck(&mut self, path: &str, root: &cap_std::fs::Dir, skip: &[String]) {
        if is_excluded(path, skip) {
            return;
        }
        let metadata = root.symlink_metadata(path);
        let mut present: Vec<Found> = Vec::new();
        match metadata {
            Ok(metadata) if metadata.is_dir() => present = walk(root, path, skip, Some(&mut self.watcher)),
            Ok(metadata) if metadata.is_file() => present.extend(found(path.to_owned(), &metadata)),
            _ => {}
        }
        // Whatever was at `path` or below it and is not there now is gone.
        let here: HashSet<&str> = present.iter().map(|file| file.path.as_str()).collect();
        let prefix = format!("{path}/");
        let mut gone: Vec<String> =
            self.indexed_below(path).chain(self.indexed(path).map(|_| path)).filter(|old| !here.contains(old)).map(str::to_owned).collect();
        gone.extend(self.changed.keys().filter(|old| (*old == path || old.starts_with(&prefix)) && !here.contains(old.as_str())).cloned());
        for old in gone {
            if self.indexed(&old).is_some() {
                self.changed.insert(old, Change::Gone);
            } else {
                self.changed.remove(&old);
            }
        }
        // Changed whatever its stamp says (a write that puts the old modification time back is
        // still a write): read again.
        for file in present {
            let change = Change::unread(&file);
            self.changed.insert(file.path, change);
        }
    }

    /// Read the files changed since the index that were never read (those `wanted` picks), on
    /// every core, as a burst of edits leaves many: once per version.
    fn read_changed(&mut self, root: &cap_std::fs::Dir, wanted: &dyn Fn(&str) -> bool) {
        let now = now_ns();
        let watching = self.watcher.is_some();
        let mut unread: Vec<(&String, &mut Content, Stamp)> = self
            .changed
            .iter_mut()
            .filter_map(|(path, change)| match change {
                Change::File { stamp, content: content @ Content::Unread } if wanted(path) => Some((path, content, *stamp)),
                _ => None,
            })
            .collect();
        let workers = std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(4);
        if unread.len() >= 16 && workers > 1 {
            let chunk = unread.len().div_ceil(workers);
            std::thread::scope(|scope| {
                for share in unread.chunks_mut(chunk) {
                    scope.spawn(move || {
                        for (path, content, stamp) in share {
                            **content = read_trigrams(root, path, *stamp, now, watching);
                        }
                    });
                }
            });
        } else {
            for (path, content, stamp) in unread {
                *content = read_trigrams(root, path, stamp, now, watching);
            }
        }
    }

    /// The changed files not read yet.
    fn unread(&self) -> Vec<String> {
        self.changed
            .iter()
            .filter(|(_, change)| matches!(change, Change::File { content: Content::Unread, .. }))
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// Read `path` if it changed and was not read yet.
    fn read_one(&mut self, root: &cap_std::fs::Dir, path: &str) {
        let watching = self.watcher.is_some();
        if let Some(Change::File { stamp, content: content @ Content::Unread }) = self.changed.get_mut(path) {
            *content = read_trigrams(root, path, *stamp, now_ns(), watching);
        }
    }

    /// The files that may match `query`, in walk order, below `under`.
    fn candidates(&mut self, root: &cap_std::fs::Dir, query: &toolcell_index::Query, under: &str) -> Vec<String> {
        let is_under = |path: &str| {
            under == "." || under.is_empty() || path == under || path.strip_prefix(under).is_some_and(|rest| rest.starts_with('/'))
        };
        let mut candidates: Vec<String> = self
            .index
            .candidates(query)
            .into_iter()
            .map(|id| self.index.path(id))
            .filter(|path| is_under(path) && !self.changed.contains_key(*path))
            .map(str::to_owned)
            .collect();
        self.read_changed(root, &is_under);
        for (path, change) in &self.changed {
            let Change::File { content, .. } = change else {
                continue;
            };
            if !is_under(path) {
                continue;
            }
            let may_match = match content {
                Content::Trigrams(trigrams, _) => query.may_match(trigrams),
                Content::Unread | Content::Unknown => true,
            };
            if may_match {
                candidates.push(path.clone());
            }
        }
        // Walk order: component by component.
        candidates.sort_by(|left, right| left.split('/').cmp(right.split('/')));
        candidates.dedup();
        candidates
    }
}

/// The trigrams of `path` if it is still the version `stamp` names; else [`Content::Unread`]
/// (look again next time) or [`Content::Unknown`] (binary). Without notifications (`watching`
/// false) a stamp from the last second cannot vouch for what was read: such a file is left
/// unread, a candidate, until it is older.
fn read_trigrams(root: &cap_std::fs::Dir, path: &str, stamp: Stamp, now: u64, watching: bool) -> Content {
    use std::io::Read as _;
    let Ok(mut file) = root.open(path) else {
        return Content::Unread;
    };
    let Some(opened) = file.metadata().ok().and_then(|metadata| found(path.to_owned(), &metadata)) else {
        return Content::Unread;
    };
    let stable = opened.is_stable(now);
    if opened.stamp != stamp || !(stable || watching) {
        // Changed since it was looked at, or too recently to tell: a candidate this time.
        return Content::Unread;
    }
    let mut content = Vec::with_capacity(usize::try_from(stamp.size).unwrap_or(0));
    if file.read_to_end(&mut content).is_err() {
        return Content::Unread;
    }
    if looks_binary(&content) {
        return Content::Unknown;
    }
    Content::Trigrams(toolcell_index::trigrams_of(&content), stable)
}

impl IndexStore {
    pub(crate) fn new(state_dir: &std::path::Path, freshness: IndexFreshness, build_on_first_search: bool) -> Self {
        IndexStore {
            directory: state_dir.join("index"),
            freshness,
            build_on_first_search,
            live: Mutex::default(),
            building: Arc::default(),
            absorbing: Arc::default(),
        }
    }

    /// Where the index of the workspace at `root` is kept.
    fn path_for(&self, root: &std::path::Path) -> PathBuf {
        let key = crate::hex(&sha2::Sha256::digest(root.as_os_str().as_encoded_bytes()));
        self.directory.join(format!("{}.idx", &key[..32]))
    }

    /// The slot of the workspace at `root`.
    fn slot(&self, root: &std::path::Path) -> Arc<Mutex<Option<Live>>> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(live.entry(root.to_path_buf()).or_default())
    }

    /// The host changed `paths` in the workspace at `root_path` (a committed call): taken in
    /// now, with the notifications queued so far, and the files read, so that the next search
    /// finds the host's own writes indexed. Work moved ahead of the search only: the commit's
    /// own notifications name the same paths, so when a search holds the index (the commit
    /// does not wait for it) they are left to the next one.
    pub(crate) fn note_written(&self, root_path: &std::path::Path, root: &cap_std::fs::Dir, skip: &[String], paths: &[String]) {
        if paths.is_empty() {
            return;
        }
        let Some(slot) = self.live.lock().unwrap_or_else(PoisonError::into_inner).get(root_path).cloned() else {
            return;
        };
        let mut live = match slot.try_lock() {
            Ok(live) => live,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if let Some(live) = live.as_mut()
            // Without notifications the next search compares every file anyway.
            && live.watcher.is_some()
        {
            if !live.take_notified(root, skip, paths) {
                // Lost: the next search compares every file.
                live.watcher = None;
                return;
            }
            for path in paths {
                live.read_one(root, path);
            }
        }
    }

    /// Build the index of the workspace at `root` in the background, unless one is being built;
    /// a build asked for while one finishes runs after it, unless that one left a usable index.
    fn build_in_background(&self, root_path: &std::path::Path, root: &cap_std::fs::Dir, skip: &[String]) {
        let Ok(root) = root.try_clone() else {
            return;
        };
        let (skip, path) = (skip.to_vec(), self.path_for(root_path));
        spawn_once(&self.building, root_path, "toolcell-index", move || {
            if read_index(&path).is_some() {
                return;
            }
            // Behind the calls it serves: on Linux a thread's nice value is its own (who = 0
            // names the calling thread), so only this build yields.
            let _ = rustix::process::setpriority_process(None, BUILD_NICENESS);
            // A failed build leaves no index: searches scan, and the next one tries again.
            let _ = build_into(&root, &skip, &path);
        });
    }
}

/// The index file at `path`, if it is there and passes its checks.
fn read_index(path: &std::path::Path) -> Option<Index> {
    Index::from_bytes(&crate::storage::read_host_file(path).ok()?).ok()
}

/// Workspaces with a background thread at work, each with whether it was asked for again
/// while it ran.
type Running = Arc<Mutex<HashMap<PathBuf, bool>>>;

/// Run `work` on a thread named `name`, unless one runs for `workspace` in `running` already;
/// then that thread runs `work` once more when it is done, since what it did may already be
/// out of date for whoever asked (an index damaged after it was written, a watcher replaced
/// after the thread saw it go).
fn spawn_once(running: &Running, workspace: &std::path::Path, name: &str, mut work: impl FnMut() + Send + 'static) {
    {
        let mut running = running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(again) = running.get_mut(workspace) {
            *again = true;
            return;
        }
        running.insert(workspace.to_path_buf(), false);
    }
    let (done, key) = (Arc::clone(running), workspace.to_path_buf());
    let spawned = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
        loop {
            work();
            let mut running = done.lock().unwrap_or_else(PoisonError::into_inner);
            match running.get_mut(&key) {
                Some(again) if *again => *again = false,
                _ => {
                    running.remove(&key);
                    break;
                }
            }
        }
    });
    if spawned.is_err() {
        running.lock().unwrap_or_else(PoisonError::into_inner).remove(workspace);
    }
}

/// The nice value of a background index build.
const BUILD_NICENESS: i32 = 10;

/// How long the thread taking in a workspace's notifications waits for one before it checks
/// that its index is still wanted.
const ABSORB_IDLE: Duration = Duration::from_secs(1);
/// How long it lets a burst of notifications gather before taking them in.
const ABSORB_GATHER: Duration = Duration::from_millis(2);

impl IndexStore {
    /// Take in the notifications of the workspace at `root_path` as they come, between
    /// searches (a thread per watched workspace, waiting on the queue, ending with the store or
    /// when the index stops watching): a search after a burst of edits then finds them read
    /// already. Searches still drain the queue themselves before answering; this only moves
    /// work ahead of them.
    fn absorb_in_background(&self, slot: &Arc<Mutex<Option<Live>>>, root_path: &std::path::Path, root: &cap_std::fs::Dir, skip: &[String]) {
        let Ok(root) = root.try_clone() else {
            return;
        };
        let (slot, workspace, skip, freshness) = (Arc::downgrade(slot), root_path.to_path_buf(), skip.to_vec(), self.freshness);
        spawn_once(&self.absorbing, root_path, "toolcell-index-watch", move || {
            loop {
                // The queue as it is now (a rebuilt index watches with a new one).
                let queue = {
                    let Some(slot) = slot.upgrade() else {
                        break;
                    };
                    let live = slot.lock().unwrap_or_else(PoisonError::into_inner);
                    match live.as_ref().and_then(|current| current.watcher.as_ref()).map(Watcher::queue) {
                        Some(Ok(queue)) => queue,
                        _ => break,
                    }
                };
                let mut waiting = [rustix::event::PollFd::new(&queue, rustix::event::PollFlags::IN)];
                let timeout = rustix::event::Timespec::try_from(ABSORB_IDLE).ok();
                match rustix::event::poll(&mut waiting, timeout.as_ref()) {
                    Ok(0) => continue,
                    Ok(_) => {}
                    Err(_) => {
                        std::thread::sleep(ABSORB_GATHER * 50);
                        continue;
                    }
                }
                std::thread::sleep(ABSORB_GATHER);
                let Some(slot) = slot.upgrade() else {
                    break;
                };
                let unread = {
                    let mut live = slot.lock().unwrap_or_else(PoisonError::into_inner);
                    let Some(current) = live.as_mut().filter(|current| current.watcher.is_some()) else {
                        break;
                    };
                    current.refresh(&workspace, &root, &skip, freshness);
                    current.unread()
                };
                // One file at a time, so that a search waits for one read at most.
                for path in unread {
                    let mut live = slot.lock().unwrap_or_else(PoisonError::into_inner);
                    match live.as_mut() {
                        Some(current) => current.read_one(&root, &path),
                        None => break,
                    }
                }
            }
        });
    }
}

impl IndexScope {
    /// The files under `under` that may hold a match of `pattern`, in walk order: the index's
    /// candidates among the files as they were indexed, and the files added or changed since
    /// that may match (read by the host once per version). `None` without a usable index or
    /// for a pattern the index cannot read. Who may see which file is the caller's to filter.
    pub(crate) fn candidates(
        &self,
        root: &cap_std::fs::Dir,
        host_paths: &[String],
        pattern: &str,
        case_insensitive: bool,
        under: &str,
    ) -> Option<Vec<String>> {
        let store = &self.store;
        let query = toolcell_index::plan(pattern, case_insensitive).ok()?;
        if query == toolcell_index::Query::All {
            // Nothing to look up: every file is a candidate, and the tool scans (on every core).
            return None;
        }
        let slot = store.slot(&self.workspace);
        let mut live = slot.lock().unwrap_or_else(PoisonError::into_inner);
        let path = store.path_for(&self.workspace);
        let file = std::fs::symlink_metadata(&path).ok().and_then(|metadata| Some((metadata.modified().ok()?, metadata.len())));
        let usable = match (file, live.as_ref()) {
            (Some(file), Some(current)) if current.file == file => true,
            (Some(file), _) => match read_index(&path) {
                Some(index) => {
                    *live = Some(Live::new(file, Arc::new(index)));
                    true
                }
                None => false,
            },
            (None, _) => false,
        };
        if !usable {
            // No index, or a damaged one (never used): a host that builds on first search
            // (re)builds it for the searches after this one.
            *live = None;
            if store.build_on_first_search {
                store.build_in_background(&self.workspace, root, host_paths);
            }
            return None;
        }
        let current = live.as_mut()?;
        current.refresh(&self.workspace, root, host_paths, store.freshness);
        if current.watcher.is_some() {
            store.absorb_in_background(&slot, &self.workspace, root, host_paths);
        }
        Some(current.candidates(root, &query, under))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// A build asked for while one is finishing (the index it wrote was damaged before the
    /// thread ended) is not lost: the running thread works once more. Asked for any number of
    /// times meanwhile, it runs once more.
    #[test]
    fn asking_while_the_work_runs_runs_it_once_more() {
        let running = Running::default();
        let workspace = std::path::Path::new("/w");
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (started_sender, started_receiver) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let counted = Arc::clone(&runs);
        spawn_once(&running, workspace, "test-work", move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            started_sender.send(()).expect("tell");
            released.recv().expect("released");
        });
        started_receiver.recv().expect("the first run started");
        for _ in 0..3 {
            spawn_once(&running, workspace, "test-work", || panic!("a second thread ran"));
        }
        release.send(()).expect("release the first run");
        started_receiver.recv().expect("the second run started");
        release.send(()).expect("release the second run");
        while running.lock().expect("lock").contains_key(workspace) {
            std::thread::yield_now();
        }
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}

//! The content index of a workspace, kept in the state directory (never in the workspace,
//! where tools could change it): built by the host from the workspace's text files, checked
//! whole when read back, and compared with the workspace to say how much changed since.
//!
//! Which files are indexed is what `search_files` searches: regular files under 16 MiB with
//! no NUL byte in their first 8 KiB, outside `.git`, not through symlinks, and none of the
//! host's own paths. The index holds every such file whatever the roles may read: who may
//! learn what from it is decided when it is asked, not here.

use cap_std::fs::MetadataExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sha2::Digest as _;
use toolcell_index::{Index, IndexBuilder, Stamp};

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
    /// Where the index of `workspace` is kept.
    fn index_path(&self, workspace: &Workspace) -> PathBuf {
        self.indexes.path_for(workspace.root())
    }

    /// The host's own paths inside `workspace`, which are never indexed.
    fn never_indexed(&self, workspace: &Workspace) -> Result<Vec<String>, Error> {
        Ok(self.host_paths_inside(workspace)?.into_iter().map(|(path, _)| path).collect())
    }

    /// Build the content index of `workspace` from its text files and keep it in the state
    /// directory, replacing any earlier one.
    ///
    /// # Errors
    ///
    /// [`Error::State`] if the index cannot be written.
    pub fn build_index(&self, workspace: &Workspace) -> Result<IndexReport, Error> {
        let started = Instant::now();
        let mut builder = IndexBuilder::new();
        for (path, stamp) in regular_files(&workspace.directory, &self.never_indexed(workspace)?) {
            if let Ok(content) = workspace.directory.read(&path)
                && !content[..content.len().min(BINARY_SNIFF_BYTES)].contains(&0)
            {
                builder.add_stamped(&path, &content, stamp);
            }
        }
        let index = builder.build();
        let bytes = index.to_bytes();
        let path = self.index_path(workspace);
        let state = |source: std::io::Error| Error::State { path: path.clone(), source };
        std::fs::create_dir_all(path.parent().unwrap_or(self._work.path())).map_err(state)?;
        crate::storage::replace_bytes(&path, &bytes, false).map_err(state)?;
        Ok(IndexReport::of(&index, bytes.len(), started.elapsed()))
    }

    /// The index of `workspace` as the state directory holds it, checked whole, and how many
    /// files changed since it was built.
    ///
    /// # Errors
    ///
    /// [`Error::State`] if the index file exists but cannot be read.
    pub fn index_status(&self, workspace: &Workspace) -> Result<IndexStatus, Error> {
        let path = self.index_path(workspace);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(IndexStatus::Absent),
            Err(source) => return Err(Error::State { path, source }),
        };
        let index = match Index::from_bytes(&bytes) {
            Ok(index) => index,
            Err(reason) => return Ok(IndexStatus::Damaged(reason.to_string())),
        };
        let now: std::collections::HashMap<String, Stamp> =
            regular_files(&workspace.directory, &self.never_indexed(workspace)?).into_iter().collect();
        let indexed: std::collections::HashSet<&str> = index.files().map(|(file, _)| file).collect();
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

/// The workspace's regular files that `search_files` would consider (under 16 MiB, outside
/// `.git`, not through symlinks), with their stamps, sorted; the paths in `skip` (the host's
/// own, and what lies below them) are left out. Binary files are told apart by their content.
fn regular_files(root: &cap_std::fs::Dir, skip: &[String]) -> Vec<(String, Stamp)> {
    let mut files = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(directory) = pending.pop() {
        let listing = if directory.is_empty() { root.entries() } else { root.read_dir(&directory) };
        let Ok(listing) = listing else {
            continue;
        };
        for entry in listing.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let path = if directory.is_empty() { name.clone() } else { format!("{directory}/{name}") };
            if skip.iter().any(|owned| path == *owned || path.starts_with(&format!("{owned}/"))) {
                continue;
            }
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            if file_type.is_dir() {
                if name != ".git" {
                    pending.push(path);
                }
                continue;
            }
            if !file_type.is_file() {
                continue;
            }
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            if metadata.len() > MAX_FILE_BYTES {
                continue;
            }
            let modified_ns = metadata
                .modified()
                .ok()
                .and_then(|time| time.into_std().duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |since| u64::try_from(since.as_nanos()).unwrap_or(u64::MAX));
            files.push((path, Stamp { size: metadata.len(), modified_ns, inode: metadata.ino() }));
        }
    }
    files.sort_by(|left, right| left.0.cmp(&right.0));
    files
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
    head.contains(&0)
}

/// The indexes in the state directory, read back and kept while their file is unchanged;
/// shared with the calls, whose tools ask it for search candidates.
#[derive(Debug)]
pub(crate) struct IndexStore {
    directory: PathBuf,
    loaded: std::sync::Mutex<std::collections::HashMap<PathBuf, Loaded>>,
}

/// An index read back, with its file's modification time and size when it was read.
type Loaded = (std::time::SystemTime, u64, std::sync::Arc<Index>);

/// What a call needs to ask for search candidates: the store and the workspace.
#[derive(Debug, Clone)]
pub(crate) struct IndexScope {
    pub(crate) store: std::sync::Arc<IndexStore>,
    pub(crate) workspace: PathBuf,
}

impl IndexStore {
    pub(crate) fn new(state_dir: &std::path::Path) -> Self {
        IndexStore { directory: state_dir.join("index"), loaded: std::sync::Mutex::default() }
    }

    /// Where the index of the workspace at `root` is kept.
    fn path_for(&self, root: &std::path::Path) -> PathBuf {
        let key = crate::hex(&sha2::Sha256::digest(root.as_os_str().as_encoded_bytes()));
        self.directory.join(format!("{}.idx", &key[..32]))
    }

    /// The index of the workspace at `root` if it is there and intact.
    fn load(&self, root: &std::path::Path) -> Option<std::sync::Arc<Index>> {
        let path = self.path_for(root);
        let metadata = std::fs::metadata(&path).ok()?;
        let (modified, size) = (metadata.modified().ok()?, metadata.len());
        let mut loaded = self.loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, bytes, index)) = loaded.get(&path)
            && *at == modified
            && *bytes == size
        {
            return Some(std::sync::Arc::clone(index));
        }
        let index = std::sync::Arc::new(Index::from_bytes(&std::fs::read(&path).ok()?).ok()?);
        loaded.insert(path, (modified, size, std::sync::Arc::clone(&index)));
        Some(index)
    }
}

impl IndexScope {
    /// The files under `under` that may hold a match of `pattern`, in walk order: the index's
    /// candidates among the files unchanged since it was built, and every file added or
    /// changed since (their content is unknown to it). `None` without a usable index or for a
    /// pattern the index cannot read. Who may see which file is the caller's to filter.
    pub(crate) fn candidates(
        &self,
        root: &cap_std::fs::Dir,
        host_paths: &[String],
        pattern: &str,
        case_insensitive: bool,
        under: &str,
    ) -> Option<Vec<String>> {
        let index = self.store.load(&self.workspace)?;
        let query = toolcell_index::plan(pattern, case_insensitive).ok()?;
        let now: std::collections::HashMap<String, Stamp> = regular_files(root, host_paths).into_iter().collect();
        let unchanged: std::collections::HashSet<&str> =
            index.files().filter(|(path, stamp)| now.get(*path) == Some(stamp)).map(|(path, _)| path).collect();
        let is_under = |path: &str| under == "." || path == under || path.strip_prefix(under).is_some_and(|rest| rest.starts_with('/'));
        let mut candidates: Vec<String> = index
            .candidates(&query)
            .into_iter()
            .map(|id| index.path(id))
            .filter(|path| unchanged.contains(path))
            .map(str::to_owned)
            .chain(now.keys().filter(|path| !unchanged.contains(path.as_str())).cloned())
            .filter(|path| is_under(path))
            .collect();
        // Walk order: component by component.
        candidates.sort_by(|left, right| left.split('/').cmp(right.split('/')));
        candidates.dedup();
        Some(candidates)
    }
}

//! An index kept loaded with what changed in its workspace since it was built: what a search
//! asks it for, and how it is kept fresh (notifications, or comparing every file).

use super::*;
use std::time::Instant;

/// A file that differs from what the index holds.
#[derive(Debug)]
pub(super) enum Change {
    /// Removed (or no longer searched) since the index was built.
    Gone,
    /// Added or changed: its stamp now, and what is known of its content.
    File { stamp: Stamp, content: Content },
}

impl Change {
    /// `file` changed, its content not read yet (never to be trusted if it has other links).
    pub(super) fn unread(file: &Found) -> Change {
        Change::File { stamp: file.stamp, content: if file.links > 1 { Content::Unknown } else { Content::Unread } }
    }
}

#[derive(Debug)]
pub(super) enum Content {
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
pub(super) struct Live {
    /// The index file's modification time and size when it was read.
    pub(super) file: (std::time::SystemTime, u64),
    pub(super) index: Arc<Index>,
    /// The index's file ids, sorted by path.
    pub(super) by_path: Vec<u32>,
    /// Every file that differs from the index, by path.
    pub(super) changed: HashMap<String, Change>,
    /// The kernel's notifications, while they can be trusted.
    pub(super) watcher: Option<Watcher>,
}

impl Live {
    pub(super) fn new(file: (std::time::SystemTime, u64), index: Arc<Index>) -> Live {
        let mut by_path: Vec<u32> = (0..u32::try_from(index.len()).unwrap_or(u32::MAX)).collect();
        by_path.sort_by(|left, right| index.path(*left).cmp(index.path(*right)));
        Live { file, index, by_path, changed: HashMap::new(), watcher: None }
    }

    /// The stamp the index holds for `path`.
    pub(super) fn indexed(&self, path: &str) -> Option<Stamp> {
        let at = self.by_path.binary_search_by(|id| self.index.path(*id).cmp(path)).ok()?;
        Some(self.index.stamp(self.by_path[at]))
    }

    /// The index's paths below the directory `directory`.
    pub(super) fn indexed_below<'a>(&'a self, directory: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let prefix = format!("{directory}/");
        let start = self.by_path.partition_point(|id| self.index.path(*id) < prefix.as_str());
        self.by_path[start..].iter().map(|id| self.index.path(*id)).take_while(move |path| path.starts_with(&prefix))
    }

    /// Bring `changed` up to date with the workspace: from the notifications queued since the
    /// last look, or by comparing every file when there are no notifications to trust.
    pub(super) fn refresh(&mut self, root_path: &std::path::Path, root: &cap_std::fs::Dir, skip: &[String], freshness: IndexFreshness) {
        if !self.take_notified(root, skip, &[]) {
            self.compare_all(root_path, root, skip, freshness);
        }
    }

    /// Look again at what the queued notifications name, and at `written` (paths the host
    /// itself just changed); `false` if the notifications were lost (or never watched), when
    /// only comparing every file tells what changed.
    pub(super) fn take_notified(&mut self, root: &cap_std::fs::Dir, skip: &[String], written: &[String]) -> bool {
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
    pub(super) fn compare_all(&mut self, root_path: &std::path::Path, root: &cap_std::fs::Dir, skip: &[String], freshness: IndexFreshness) {
        let (files, watcher) = look(root_path, root, skip, freshness);
        self.compare(&files, watcher);
    }

    /// Compare what [`look`] found with the index.
    pub(super) fn compare(&mut self, files: &[Found], watcher: Option<Watcher>) {
        let mut previous = std::mem::take(&mut self.changed);
        let now = now_ns();
        let present: HashSet<&str> = files.iter().map(|file| file.path.as_str()).collect();
        let mut changed: HashMap<String, Change> =
            self.index.files().filter(|(path, _)| !present.contains(path)).map(|(path, _)| (path.to_owned(), Change::Gone)).collect();
        for file in files {
            if let Some(change) = self.change_of(file, now, previous.remove(&file.path)) {
                changed.insert(file.path.clone(), change);
            }
        }
        self.changed = changed;
        self.watcher = watcher;
    }

    /// What `file` is relative to the index (`None`: as indexed), keeping what `before` knew of
    /// its content if its stamp is the same and was trusted when it was read.
    pub(super) fn change_of(&self, file: &Found, now: u64, before: Option<Change>) -> Option<Change> {
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
    pub(super) fn recheck(&mut self, path: &str, root: &cap_std::fs::Dir, skip: &[String]) {
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
    /// every core, as a burst of edits leaves many: once per version. None is started past
    /// `deadline` (the call's): a file left unread is a candidate, which the tool scans within
    /// its own deadline.
    pub(super) fn read_changed(&mut self, root: &cap_std::fs::Dir, wanted: &dyn Fn(&str) -> bool, deadline: Option<Instant>) {
        let past = || deadline.is_some_and(|deadline| Instant::now() >= deadline);
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
                            if past() {
                                break;
                            }
                            **content = read_trigrams(root, path, *stamp, now, watching);
                        }
                    });
                }
            });
        } else {
            for (path, content, stamp) in unread {
                if past() {
                    break;
                }
                *content = read_trigrams(root, path, stamp, now, watching);
            }
        }
    }

    /// The changed files not read yet.
    pub(super) fn unread(&self) -> Vec<String> {
        self.changed
            .iter()
            .filter(|(_, change)| matches!(change, Change::File { content: Content::Unread, .. }))
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// Read `path` if it changed and was not read yet.
    pub(super) fn read_one(&mut self, root: &cap_std::fs::Dir, path: &str) {
        let watching = self.watcher.is_some();
        if let Some(Change::File { stamp, content: content @ Content::Unread }) = self.changed.get_mut(path) {
            *content = read_trigrams(root, path, *stamp, now_ns(), watching);
        }
    }

    /// The files that may match `query`, in walk order, below `under`.
    pub(super) fn candidates(
        &mut self,
        root: &cap_std::fs::Dir,
        query: &toolcell_index::Query,
        under: &str,
        deadline: Option<Instant>,
    ) -> Vec<String> {
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
        self.read_changed(root, &is_under, deadline);
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
/// Every file of the workspace as it is now, and (when wanted) the notifications started
/// before the walk, so that nothing changed during it is missed.
pub(super) fn look(
    root_path: &std::path::Path,
    root: &cap_std::fs::Dir,
    skip: &[String],
    freshness: IndexFreshness,
) -> (Vec<Found>, Option<Watcher>) {
    let mut watcher = match freshness {
        IndexFreshness::Watch => Watcher::start(root_path, []).ok(),
        IndexFreshness::Walk => None,
    };
    let files = walk(root, "", skip, Some(&mut watcher));
    (files, watcher)
}

pub(super) fn read_trigrams(root: &cap_std::fs::Dir, path: &str, stamp: Stamp, now: u64, watching: bool) -> Content {
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

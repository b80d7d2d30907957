//! A scan split into parts that run side by side (`context.split`), and the assembly of their
//! results.
//!
//! Each part walks only its share of the tree. Directories are listed by every part until one
//! has at least [`DEAL_FROM`] times as many subdirectories as there are parts; those
//! subdirectories are then dealt out in turn, and each is walked whole by the part it falls
//! to, so no directory below them is listed twice and no two parts work in one directory. The
//! files of the directories every part lists are dealt out in turn too.
//!
//! The deal depends only on what the commonly listed directories hold. Each part reports a
//! fingerprint of every listing it dealt from; if the tree changed under the parts so that
//! they dealt from different listings (a file could then fall to no part), the assembly does
//! not trust the parts and scans alone.

use std::collections::HashSet;
use std::ops::ControlFlow;

use toolcell_sdk::walk::EntryKind;
use toolcell_sdk::{Output, ToolError, WorkspacePath};

use crate::matching::Search;
use crate::{Mode, searchable};

/// A directory with at least this many subdirectories per part deals them out.
const DEAL_FROM: usize = 4;

/// How one part takes its share of the tree, as the walk lists directories.
pub(crate) struct Share {
    index: usize,
    count: usize,
    /// Directories dealt to this part, walked whole.
    dealt: HashSet<String>,
    /// The dealt directory whose subtree the walk is in, if any.
    inside: Option<WorkspacePath>,
    /// A fingerprint of each listing dealt from, in walk order.
    listings: Vec<u64>,
    /// Directories every part tries to list, and those listed: the difference is those that
    /// could not be listed, which every part counts.
    common_met: u64,
    common_listed: u64,
}

impl Share {
    pub(crate) fn new((index, count): (u32, u32)) -> Share {
        Share {
            index: index as usize,
            count: count.max(1) as usize,
            dealt: HashSet::new(),
            inside: None,
            listings: Vec::new(),
            // The root is listed by every part (or the walk fails), and never met as an entry.
            common_met: 1,
            common_listed: 0,
        }
    }

    /// The walk listed `directory`: keep only this part's share of `children`.
    pub(crate) fn enter(&mut self, directory: &WorkspacePath, children: &mut Vec<(String, EntryKind)>) {
        let path = directory.as_str();
        // Walked whole: dealt to this part, or below one that was.
        if self.dealt.contains(path) {
            self.inside = Some(directory.clone());
            return;
        }
        if self.inside.as_ref().is_some_and(|inside| directory.strip_prefix(inside).is_some()) {
            return;
        }
        self.inside = None;
        self.common_listed += 1;
        self.listings.push(fingerprint(path, children));
        let directories = children.iter().filter(|(_, kind)| *kind == EntryKind::Directory).count();
        let deal_directories = directories >= DEAL_FROM * self.count;
        let (mut directory_turn, mut file_turn) = (0, 0);
        children.retain(|(name, kind)| {
            let turn = if *kind == EntryKind::Directory {
                if !deal_directories {
                    return true;
                }
                &mut directory_turn
            } else {
                &mut file_turn
            };
            let mine = *turn % self.count == self.index;
            *turn += 1;
            if mine && *kind == EntryKind::Directory {
                self.dealt.insert(directory.join(name).as_str().to_owned());
            }
            mine
        });
        if !deal_directories {
            // Every part tries to list these (the walk never enters `.git`).
            self.common_met += children.iter().filter(|(name, kind)| *kind == EntryKind::Directory && name != ".git").count() as u64;
        }
    }
}

/// FNV-1a over a directory's path and its children's names and kinds.
fn fingerprint(directory: &str, children: &[(String, EntryKind)]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    feed(directory.as_bytes());
    for (name, kind) in children {
        feed(&[0]);
        feed(name.as_bytes());
        feed(&[*kind as u8]);
    }
    hash
}

/// Walk order: component by component. Byte by byte with `/` below every other byte is the
/// same order (a name never holds a `/`, and a component that is a prefix of another, ended
/// by `/` or by the path, comes first), without splitting either path.
fn walk_order(left: &str, right: &str) -> std::cmp::Ordering {
    let (left, right) = (left.as_bytes(), right.as_bytes());
    let key = |byte: u8| if byte == b'/' { 0 } else { u16::from(byte) + 1 };
    match left.iter().zip(right).position(|(l, r)| l != r) {
        Some(at) => key(left[at]).cmp(&key(right[at])),
        None => left.len().cmp(&right.len()),
    }
}

/// What one part of a split scan found: the files with a match among its share, and what it
/// searched and skipped. A part stops once the parts together hold more matching files than
/// the page can show ([`Board`]), or it alone does: every file up to where the first part
/// stopped is then known, and that many are among them.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Part {
    files: Vec<String>,
    /// In `count` mode, each file's count, in the order of `files`: the assembly shows them
    /// without reading the files again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    counts: Vec<u64>,
    /// The last file searched, when the part stopped early.
    stopped_at: Option<String>,
    files_searched: u64,
    skipped_binary: u64,
    skipped_large: u64,
    /// Directories that could not be listed: among those every part lists, and in its share.
    unreadable_common: u64,
    unreadable_own: u64,
    /// The fingerprints of the listings it dealt from.
    listings: Vec<u64>,
    /// Which part this is.
    #[serde(skip)]
    index: usize,
    #[serde(skip)]
    board: Board,
}

/// What the parts of a split scan tell one another (`context.shard-progress`), so that they
/// stop once together they have filled the page.
///
/// Every so often (more often as the page nears full, and at least every [`READ_EVERY`]
/// files), a part posts checkpoints: how many it had found by a file with a match, for every
/// so many of them and for its last. All those matches are at or
/// before that file in walk order, since a part searches its share in walk order. Once the
/// posted counts add up to more than the page, the stop line is the first checkpoint by which
/// they already do: every part then searches its share up to the line and stops there, so that
/// every file up to the line is known, and more than a page of them match. A part still short
/// of the line keeps reading the posts, and moves the line closer when they show the page full
/// by an earlier file: a part that ran ahead set it where it stood, past where the page fills.
#[derive(Default)]
struct Board {
    /// The stop line, once the parts have filled the page together.
    line: Option<String>,
    /// Files searched since the part last read the board.
    since_read: u32,
    /// This part's count of matches at which it next posts and reads the board.
    exchange_at: u64,
    /// This part's checkpoints, every `step`-th match: (matches so far, the file).
    checkpoints: Vec<(u64, String)>,
    step: u64,
    /// The other parts' posts, as last read.
    others: Vec<Vec<u8>>,
}

/// A part that finds no match reads the board after this many files: the others may have
/// filled the page.
const READ_EVERY: u32 = 64;
/// Checkpoints kept before every other one is dropped (and the step doubled).
const MOST_CHECKPOINTS: usize = 64;
/// What the host keeps of one post.
const MOST_POST_BYTES: usize = 4 * 1024;

/// A post: each checkpoint as its count (8 bytes), its path's length (4) and the path.
fn encode(checkpoints: &[(u64, String)], last: Option<(u64, &str)>) -> Vec<u8> {
    let mut post = Vec::new();
    for (count, path) in checkpoints.iter().map(|(count, path)| (*count, path.as_str())).chain(last) {
        post.extend_from_slice(&count.to_le_bytes());
        post.extend_from_slice(&(path.len() as u32).to_le_bytes());
        post.extend_from_slice(path.as_bytes());
    }
    post
}

/// A post's checkpoints, in the order posted; an unreadable one ends it.
fn decode(mut post: &[u8]) -> Vec<(u64, &str)> {
    let mut checkpoints = Vec::new();
    while let Some((count, rest)) = post.split_first_chunk::<8>()
        && let Some((length, rest)) = rest.split_first_chunk::<4>()
        && let Some(path) = rest.get(..u32::from_le_bytes(*length) as usize)
        && let Ok(path) = std::str::from_utf8(path)
    {
        checkpoints.push((u64::from_le_bytes(*count), path));
        post = &rest[path.len()..];
    }
    checkpoints
}

impl Board {
    /// This part searched `path` (its match, if any, noted): post and read the board
    /// (`board`, which takes this part's post and gives every part's) when due. Whether the
    /// page is full by `path`.
    ///
    /// Once there is a line, a part short of it reads the board only every [`READ_EVERY`]
    /// files (see [`Board::past_line`]).
    fn searched(&mut self, index: usize, files: &[String], enough: u64, path: &str, board: impl FnOnce(&[u8]) -> Vec<Vec<u8>>) -> bool {
        self.since_read += 1;
        if files.len() as u64 >= self.exchange_at || self.since_read >= READ_EVERY {
            self.exchange(index, files, enough, board);
        }
        self.line.as_deref().is_some_and(|line| walk_order(path, line).is_ge())
    }

    /// Whether `path`, this part's next file, is past the line. A part that ran ahead set the
    /// line where it stood, past where the page fills; a part behind it checks before each
    /// file whether this part's matches and the others' posts as last read fill the page
    /// before it, and if so brings the line back to where they do.
    fn past_line(&mut self, files: &[String], path: &str, enough: u64) -> bool {
        if self.line.is_none() {
            return false;
        }
        if self.count_by(files, path) > enough {
            self.settle(files, enough);
        }
        self.line.as_deref().is_some_and(|line| walk_order(path, line).is_gt())
    }

    /// How many files match before `path`, this part's next file, as far as this part knows:
    /// all of its own `files` (it searches in walk order) and each other part's last
    /// checkpoint before `path`.
    fn count_by(&self, files: &[String], path: &str) -> u64 {
        files.len() as u64 + self.others.iter().map(|post| posted_by(&decode(post), path)).sum::<u64>()
    }

    /// Note this part's `matches`-th match, `path`.
    fn matched(&mut self, matches: u64, path: &str) {
        self.step = self.step.max(1);
        if matches.is_multiple_of(self.step) {
            self.checkpoints.push((matches, path.to_owned()));
            if self.checkpoints.len() > MOST_CHECKPOINTS {
                self.step *= 2;
                let step = self.step;
                self.checkpoints.retain(|(count, _)| count.is_multiple_of(step));
            }
        }
    }

    /// Post this part's checkpoints and `files` (its matches, in walk order) and read the
    /// other parts' posts: the stop line, if they now add up to more than `enough`.
    fn exchange(&mut self, index: usize, files: &[String], enough: u64, board: impl FnOnce(&[u8]) -> Vec<Vec<u8>>) {
        self.since_read = 0;
        let last = files.last().map(|last| (files.len() as u64, last.as_str()));
        let mut post = encode(&self.checkpoints, last);
        // Fewer checkpoints until the host keeps the post (the last match at least).
        let mut kept = self.checkpoints.len();
        while post.len() > MOST_POST_BYTES && kept > 0 {
            kept /= 2;
            post = encode(&self.checkpoints[self.checkpoints.len() - kept..], last);
        }
        if post.len() > MOST_POST_BYTES {
            post.clear();
        }
        let posts = board(&post);
        let parts = posts.len().max(1) as u64;
        self.others = posts.into_iter().enumerate().filter(|(part, _)| *part != index).map(|(_, post)| post).collect();
        let known = self.settle(files, enough);
        // Far from a full page, the board changes little between two matches: the parts
        // still need `gap` matches between them, so this one posts again once it has found
        // half of its share of those (at once when they are few). Posting after every match
        // cost more than searching the files, in a page of 10,000. Once there is a line, only
        // every `READ_EVERY` files (see `searched`).
        let gap = enough.saturating_sub(known);
        self.exchange_at = if self.line.is_some() { u64::MAX } else { files.len() as u64 + (gap / (2 * parts)).max(1) };
    }

    /// The line by the posts as last read, if it is earlier than the one there is (every line
    /// found holds, since the counts by it only grow). Returns how many matches the posts and
    /// this part's `files` add up to.
    fn settle(&mut self, files: &[String], enough: u64) -> u64 {
        let others: Vec<Vec<(u64, &str)>> = self.others.iter().map(|post| decode(post)).collect();
        let line = stop_line(files, &self.checkpoints, &others, enough);
        self.line = match (self.line.take(), line) {
            (Some(old), Some(new)) => Some(if walk_order(&new, &old).is_lt() { new } else { old }),
            (old, new) => old.or(new),
        };
        posted_in_all(files, &others)
    }
}

/// How many matches one part posted by `line`: its last checkpoint at or before it.
fn posted_by(post: &[(u64, &str)], line: &str) -> u64 {
    let before = post.partition_point(|(_, path)| walk_order(path, line).is_le());
    before.checked_sub(1).map_or(0, |at| post[at].0)
}

/// This part's matches, `files`, and the last count each other part posted.
fn posted_in_all(files: &[String], others: &[Vec<(u64, &str)>]) -> u64 {
    files.len() as u64 + others.iter().filter_map(|post| post.last()).map(|(count, _)| count).sum::<u64>()
}

/// The first file by which more than `enough` files match: this part's `files` (its matches,
/// in walk order) up to it, and each other part's last checkpoint at or before it. `None`
/// while the parts' posts do not add up to that many.
fn stop_line(files: &[String], checkpoints: &[(u64, String)], others: &[Vec<(u64, &str)>], enough: u64) -> Option<String> {
    if posted_in_all(files, others) <= enough {
        return None;
    }
    let by = |line: &str| {
        let own = files.partition_point(|file| walk_order(file, line).is_le()) as u64;
        own + others.iter().map(|post| posted_by(post, line)).sum::<u64>()
    };
    let mut lines: Vec<&str> = others.iter().flatten().map(|(_, path)| *path).chain(files.last().map(String::as_str)).collect();
    lines.extend(checkpoints.iter().map(|(_, path)| path.as_str()));
    lines.sort_unstable_by(|left, right| walk_order(left, right));
    lines.into_iter().find(|line| by(line) > enough).map(str::to_owned)
}

impl Part {
    /// Part `index` of a split call.
    pub(crate) fn new(index: usize) -> Part {
        Part { index, ..Part::default() }
    }

    /// Search one file of the share: only whether it has a match.
    pub(crate) fn file(&mut self, search: &mut Search, path: &WorkspacePath) -> ControlFlow<()> {
        let enough = search.offset.saturating_add(search.max_results);
        // Past the stop line: every file of the share up to it is searched. The last post
        // tells the parts still short of the line everything this one found before it.
        if self.board.past_line(&self.files, path.as_str(), enough) {
            self.board.exchange(self.index, &self.files, enough, toolcell_sdk::shard_progress);
            self.stopped_at = self.board.line.clone();
            return ControlFlow::Break(());
        }
        let found = self.files.len();
        let flow = self.search(search, path);
        if self.files.len() > found {
            self.board.matched(self.files.len() as u64, path.as_str());
        }
        let full = self.board.searched(self.index, &self.files, enough, path.as_str(), toolcell_sdk::shard_progress);
        if flow.is_continue() && full {
            self.stopped_at = Some(path.as_str().to_owned());
            return ControlFlow::Break(());
        }
        flow
    }

    fn search(&mut self, search: &mut Search, path: &WorkspacePath) -> ControlFlow<()> {
        let Some(bytes) = searchable(path, &mut self.files_searched, &mut self.skipped_binary, &mut self.skipped_large) else {
            return ControlFlow::Continue(());
        };
        let count = match search.mode {
            Mode::Count => search.matcher.count(&bytes),
            Mode::Files | Mode::Content => usize::from(search.matcher.has_match(&bytes)),
        };
        if count > 0 {
            self.files.push(path.as_str().to_owned());
            if search.mode == Mode::Count {
                self.counts.push(count as u64);
            }
            // Each file shows at least one result: this many fill the page and tell whether
            // more follow.
            if self.files.len() as u64 > search.offset.saturating_add(search.max_results) {
                self.stopped_at = Some(path.as_str().to_owned());
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    /// The part's result: of a share of the walk (what it listed, and could not), or of a
    /// share of the content index's candidates (`None`: nothing listed).
    pub(crate) fn output(mut self, share: Option<Share>, unreadable_directories: usize) -> Output {
        if let Some(share) = share {
            self.unreadable_common = share.common_met.saturating_sub(share.common_listed);
            self.unreadable_own = (unreadable_directories as u64).saturating_sub(self.unreadable_common);
            self.listings = share.listings;
        }
        Output::text(format!("part: {} files with a match", self.files.len())).with_structured(&self)
    }
}

/// The parts of a split scan, put together.
pub(crate) struct Merged {
    /// The files with a match, in walk order, up to where every part is known, with their
    /// counts in `count` mode (else 0).
    pub(crate) files: Vec<(WorkspacePath, u64)>,
    pub(crate) files_searched: u64,
    pub(crate) skipped_binary: u64,
    pub(crate) skipped_large: u64,
    pub(crate) unreadable_directories: usize,
}

impl Merged {
    /// The parts' results put together; `None` if they dealt the tree from different listings
    /// (it changed while they ran), when only a scan of its own answers exactly.
    pub(crate) fn of(parts: Vec<Result<Output, ToolError>>) -> Result<Option<Merged>, ToolError> {
        let parts = parts
            .into_iter()
            .map(|part| {
                part?
                    .into_parts()
                    .1
                    .and_then(|value| serde_json::from_value::<Part>(value).ok())
                    .ok_or_else(|| ToolError::Failed("a part of the split search returned no result it could read".to_owned()))
            })
            .collect::<Result<Vec<Part>, ToolError>>()?;
        // A part that stopped early dealt from fewer listings: each must be where the longest
        // one starts.
        let longest = parts.iter().map(|part| part.listings.as_slice()).max_by_key(|listings| listings.len()).unwrap_or_default();
        if parts.iter().any(|part| !longest.starts_with(&part.listings)) {
            return Ok(None);
        }
        let known_until = parts.iter().filter_map(|part| part.stopped_at.as_deref()).min_by(|left, right| walk_order(left, right));
        let mut merged = Merged { files: Vec::new(), files_searched: 0, skipped_binary: 0, skipped_large: 0, unreadable_directories: 0 };
        let mut found: Vec<(&str, u64)> = Vec::new();
        let mut unreadable_common = 0;
        for part in &parts {
            let counts = part.counts.iter().copied().chain(std::iter::repeat(0));
            found.extend(part.files.iter().map(String::as_str).zip(counts));
            merged.files_searched += part.files_searched;
            merged.skipped_binary += part.skipped_binary;
            merged.skipped_large += part.skipped_large;
            merged.unreadable_directories += usize::try_from(part.unreadable_own).unwrap_or(0);
            unreadable_common = unreadable_common.max(usize::try_from(part.unreadable_common).unwrap_or(0));
        }
        merged.unreadable_directories += unreadable_common;
        // Each part's files are in walk order already: a stable sort merges the runs.
        found.sort_by(|left, right| walk_order(left.0, right.0));
        merged.files = found
            .into_iter()
            .take_while(|(path, _)| known_until.is_none_or(|until| walk_order(path, until).is_le()))
            .filter_map(|(path, count)| Some((WorkspacePath::parse(path).ok()?, count)))
            .collect();
        Ok(Some(merged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn children(names: &[(&str, EntryKind)]) -> Vec<(String, EntryKind)> {
        names.iter().map(|(name, kind)| ((*name).to_owned(), *kind)).collect()
    }

    /// Every part's share of one directory listing, after `enter`.
    fn shares(count: u32, directory: &str, listing: &[(String, EntryKind)]) -> Vec<Vec<String>> {
        (0..count)
            .map(|index| {
                let mut share = Share::new((index, count));
                let mut kept = listing.to_vec();
                share.enter(&WorkspacePath::parse(directory).unwrap(), &mut kept);
                kept.into_iter().map(|(name, _)| name).collect()
            })
            .collect()
    }

    #[test]
    fn files_are_dealt_in_turn_and_few_directories_are_listed_by_every_part() {
        let listing =
            children(&[("a.rs", EntryKind::File), ("b", EntryKind::Directory), ("c.rs", EntryKind::File), ("d.rs", EntryKind::File)]);
        assert_eq!(shares(2, ".", &listing), [vec!["a.rs", "b", "d.rs"], vec!["b", "c.rs"]]);
    }

    #[test]
    fn many_directories_are_dealt_out_and_walked_whole() {
        let names: Vec<String> = (0..8).map(|number| format!("d{number}")).collect();
        let listing: Vec<(String, EntryKind)> = names.iter().map(|name| (name.clone(), EntryKind::Directory)).collect();
        assert_eq!(shares(2, "src", &listing), [vec!["d0", "d2", "d4", "d6"], vec!["d1", "d3", "d5", "d7"]]);
        // Below a dealt directory, nothing is dealt again.
        let mut share = Share::new((1, 2));
        share.enter(&WorkspacePath::parse("src").unwrap(), &mut listing.clone());
        let mut below = children(&[("x.rs", EntryKind::File), ("y.rs", EntryKind::File)]);
        share.enter(&WorkspacePath::parse("src/d3").unwrap(), &mut below);
        assert_eq!(below.len(), 2);
        let mut deeper = below.clone();
        share.enter(&WorkspacePath::parse("src/d3/x").unwrap(), &mut deeper);
        assert_eq!(deeper.len(), 2);
        assert_eq!(share.listings.len(), 1, "only the common listing is fingerprinted");
    }

    fn part(files: &[&str], stopped_at: Option<&str>, listings: &[u64]) -> Result<Output, ToolError> {
        let part = Part {
            files: files.iter().map(|file| (*file).to_owned()).collect(),
            stopped_at: stopped_at.map(str::to_owned),
            files_searched: 10,
            listings: listings.to_vec(),
            ..Part::default()
        };
        Ok(Output::text("part").with_structured(&part))
    }

    #[test]
    fn parts_merge_in_walk_order_up_to_where_every_part_is_known() {
        let merged =
            Merged::of(vec![part(&["a/b.rs", "a/z.rs", "c.rs"], Some("c.rs"), &[1]), part(&["a-b.rs", "a/c/d.rs", "d.rs"], None, &[1, 2])])
                .unwrap()
                .expect("the listings agree");
        let files: Vec<&str> = merged.files.iter().map(|(path, _)| path.as_str()).collect();
        assert_eq!(files, ["a/b.rs", "a/c/d.rs", "a/z.rs", "a-b.rs", "c.rs"]);
        assert_eq!(merged.files_searched, 20);
    }

    #[test]
    fn the_stop_line_is_the_first_checkpoint_by_which_the_parts_fill_the_page() {
        let files: Vec<String> = ["a/1", "a/3", "c/1"].map(str::to_owned).to_vec();
        let other = encode(&[(2, "b/2".to_owned()), (4, "d/4".to_owned())], Some((5, "e/5")));
        let others = vec![decode(&other)];
        assert_eq!(others[0], [(2, "b/2"), (4, "d/4"), (5, "e/5")]);
        // Three of ours and five of theirs: more than 7 only by the end.
        assert_eq!(stop_line(&files, &[], &others, 7).as_deref(), Some("e/5"));
        // More than 4: two of ours by `a/3` are not enough with none of theirs, two of ours
        // and two of theirs by `b/2` are not, three and two by `c/1` are.
        assert_eq!(stop_line(&files, &[], &others, 4).as_deref(), Some("c/1"));
        assert_eq!(stop_line(&files, &[], &others, 8), None);
        assert_eq!(stop_line(&files, &[], &[], 2).as_deref(), Some("c/1"));
    }

    #[test]
    fn walk_order_is_component_by_component() {
        let paths = ["a", "a/b", "a-b", "a b/c", "a.b/c", "a/b/c", "a/b-c", "a/b.c/d", "a0", "a0/b", "ab", "b", "é/a", "z/é"];
        for left in paths {
            for right in paths {
                assert_eq!(walk_order(left, right), left.split('/').cmp(right.split('/')), "{left} against {right}");
            }
        }
    }

    /// Part 0 ran ahead (its matches at even positions, part 1's at odd ones) and set the line
    /// where it stood; part 1, behind, moves the line back to where the page fills as it goes.
    #[test]
    fn a_part_behind_moves_the_line_back_to_where_the_page_fills() {
        let posts = std::cell::RefCell::new(vec![Vec::new(); 2]);
        let board = |index: usize| {
            let posts = &posts;
            move |post: &[u8]| {
                posts.borrow_mut()[index] = post.to_vec();
                posts.borrow().clone()
            }
        };
        let path = |position: usize| format!("a/{position:02}");
        let (mut ahead, mut behind) = (Board::default(), Board::default());
        let (mut ahead_files, mut behind_files) = (Vec::new(), Vec::new());
        behind_files.push(path(1));
        behind.matched(1, &path(1));
        assert!(!behind.searched(1, &behind_files, 10, &path(1), board(1)));
        for position in (0..20).step_by(2) {
            ahead_files.push(path(position));
            ahead.matched(ahead_files.len() as u64, &path(position));
            ahead.searched(0, &ahead_files, 10, &path(position), board(0));
        }
        // Its ten and the one posted: eleven by `a/18`.
        assert_eq!(ahead.line.as_deref(), Some("a/18"));
        // Part 1 goes on: the page holds eleven by `a/10`, so part 1 stops before `a/11`,
        // though the line part 0 set is further on.
        let mut stopped = None;
        for position in (3..=17).step_by(2) {
            if behind.past_line(&behind_files, &path(position), 10) {
                stopped = Some(path(position));
                break;
            }
            behind_files.push(path(position));
            behind.matched(behind_files.len() as u64, &path(position));
            assert!(!behind.searched(1, &behind_files, 10, &path(position), board(1)));
        }
        assert_eq!(stopped.as_deref(), Some("a/11"));
        assert_eq!(behind.line.as_deref(), Some("a/10"));
        assert_eq!(behind_files.len(), 5);
    }

    #[test]
    fn parts_that_dealt_from_different_listings_are_not_merged() {
        assert!(Merged::of(vec![part(&[], None, &[1, 2]), part(&[], None, &[1, 3])]).unwrap().is_none());
        assert!(Merged::of(vec![part(&[], Some("x"), &[2]), part(&[], None, &[1, 2])]).unwrap().is_none());
    }
}

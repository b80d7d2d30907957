//! toolcell's content index: which files may match a regular expression, from trigram posting
//! lists, so that a search reads those files instead of every file.
//!
//! A pure crate: it indexes bytes it is given and answers with file ids; where the index lives,
//! how it is kept fresh and who may see which file are the host's business. Its one promise:
//! **a file that matches is always a candidate** ([`Index::candidates`] may answer more files,
//! never fewer), for case-sensitive and case-insensitive, line and multiline searches alike,
//! because trigrams are indexed case-folded (ASCII) and a query asks only for substrings every
//! match must contain. The component still matches every candidate itself.
//!
//! ```
//! use toolcell_index::{IndexBuilder, plan};
//!
//! let mut builder = IndexBuilder::new();
//! builder.add("src/main.rs", b"fn main() { println!(\"hello\"); }");
//! builder.add("src/lib.rs", b"pub fn add(a: u32) -> u32 { a }");
//! let index = builder.build();
//! let query = plan(r"println!\(.*hello", false).expect("a valid pattern");
//! let candidates = index.candidates(&query);
//! let paths: Vec<&str> = candidates.iter().map(|id| index.path(*id)).collect();
//! assert_eq!(paths, ["src/main.rs"]);
//! ```

mod encode;
mod plan;

pub use encode::DecodeError;
pub use plan::{Query, plan};

use std::collections::HashMap;

/// A trigram: three bytes, ASCII-lowercased, packed big-endian into the low 24 bits.
pub type Trigram = u32;

/// The trigram of `bytes[0..3]`, folded.
fn trigram(bytes: &[u8]) -> Trigram {
    let fold = |byte: u8| u32::from(byte.to_ascii_lowercase());
    (fold(bytes[0]) << 16) | (fold(bytes[1]) << 8) | fold(bytes[2])
}

/// Every distinct trigram of `bytes`, sorted. The vector holds only those: one trigram per
/// byte is collected first, and kept changed files would otherwise hold four bytes of memory
/// per byte of text for as long as their index is loaded.
pub fn trigrams_of(bytes: &[u8]) -> Vec<Trigram> {
    let mut trigrams: Vec<Trigram> = bytes.windows(3).map(trigram).collect();
    trigrams.sort_unstable();
    trigrams.dedup();
    trigrams.shrink_to_fit();
    trigrams
}

/// What identifies the version of a file that was indexed: its size, modification time
/// (nanoseconds since the epoch) and inode. A file whose stamp differs was changed since.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Stamp {
    /// The size in bytes.
    pub size: u64,
    /// The status-change time (`ctime`), nanoseconds since the Unix epoch: it moves with every
    /// write, and also when the modification time is set back (which anyone who can write the
    /// file can do, while `ctime` nobody can set), so a same-size edit with its modification
    /// time restored still changes the stamp.
    pub changed_ns: u64,
    /// The inode number.
    pub inode: u64,
}

/// Bytes that make up the trigrams of most text (tab, line feed, carriage return and printable
/// ASCII), each numbered in byte order, so that the trigrams of three such bytes have dense
/// numbers in trigram order; [`NOT_DENSE`] for any other byte.
const DENSE_CODES: [u8; 256] = {
    let mut codes = [NOT_DENSE; 256];
    let mut next = 0;
    let mut byte = 0;
    while byte < 256 {
        if byte == b'\t' as usize || byte == b'\n' as usize || byte == b'\r' as usize || (byte >= 0x20 && byte < 0x7f) {
            codes[byte] = next;
            next += 1;
        }
        byte += 1;
    }
    codes
};
const NOT_DENSE: u8 = u8::MAX;
/// How many bytes have a dense code.
const DENSE_BYTES: usize = 3 + (0x7f - 0x20);
/// The byte with each dense code.
const DENSE_BYTE_OF: [u8; DENSE_BYTES] = {
    let mut bytes = [0; DENSE_BYTES];
    let mut byte = 0;
    while byte < 256 {
        if DENSE_CODES[byte] != NOT_DENSE {
            bytes[DENSE_CODES[byte] as usize] = byte as u8;
        }
        byte += 1;
    }
    bytes
};

/// Files after which the builder keeps common trigrams in its table (a million list heads,
/// 22 MiB), not worth it for fewer.
const DENSE_FROM_FILES: usize = 256;

/// The dense number of the trigram of the folded bytes `first`, `second`, `third`, if all
/// three have dense codes.
#[inline]
fn dense_number(first: u8, second: u8, third: u8) -> Option<usize> {
    let (first, second, third) = (DENSE_CODES[usize::from(first)], DENSE_CODES[usize::from(second)], DENSE_CODES[usize::from(third)]);
    (first != NOT_DENSE && second != NOT_DENSE && third != NOT_DENSE)
        .then(|| (usize::from(first) * DENSE_BYTES + usize::from(second)) * DENSE_BYTES + usize::from(third))
}

/// Gathers files into an [`Index`].
///
/// Postings are appended as each file's text is scanned once, with no per-file sorting: a
/// file's id is added to a trigram's list unless it is that list's last id already. Once the
/// builder holds [`DENSE_FROM_FILES`] files, trigrams of common text bytes live in a table
/// indexed by their dense number; the rest, and all of them before that, in a map.
#[derive(Debug, Default)]
pub struct IndexBuilder {
    paths: Vec<String>,
    stamps: Vec<Stamp>,
    text_bytes: u64,
    dense: Vec<Vec<u32>>,
    sparse: HashMap<Trigram, Vec<u32>>,
}

impl IndexBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Index `content` as the file `path`; returns its id (ids count from 0 in the order added).
    pub fn add(&mut self, path: &str, content: &[u8]) -> u32 {
        self.add_stamped(path, content, Stamp::default())
    }

    /// [`add`](Self::add), recording the version of the file that was read.
    pub fn add_stamped(&mut self, path: &str, content: &[u8], stamp: Stamp) -> u32 {
        if self.paths.len() == DENSE_FROM_FILES {
            self.dense = vec![Vec::new(); DENSE_BYTES * DENSE_BYTES * DENSE_BYTES];
            let sparse = std::mem::take(&mut self.sparse);
            for (trigram, ids) in sparse {
                let [_, first, second, third] = trigram.to_be_bytes();
                match dense_number(first, second, third) {
                    Some(at) => self.dense[at] = ids,
                    None => {
                        self.sparse.insert(trigram, ids);
                    }
                }
            }
        }
        let id = u32::try_from(self.paths.len()).unwrap_or(u32::MAX);
        self.paths.push(path.to_owned());
        self.stamps.push(stamp);
        self.text_bytes += content.len() as u64;
        let dense = !self.dense.is_empty();
        for window in content.windows(3) {
            let at = if dense {
                dense_number(window[0].to_ascii_lowercase(), window[1].to_ascii_lowercase(), window[2].to_ascii_lowercase())
            } else {
                None
            };
            let list = match at {
                Some(at) => &mut self.dense[at],
                None => self.sparse.entry(trigram(window)).or_default(),
            };
            if list.last() != Some(&id) {
                list.push(id);
            }
        }
        id
    }

    /// The finished index: trigrams sorted, each with its files' ids in order.
    pub fn build(self) -> Index {
        let dense_trigram = |at: usize| {
            trigram(&[
                DENSE_BYTE_OF[at / (DENSE_BYTES * DENSE_BYTES)],
                DENSE_BYTE_OF[at / DENSE_BYTES % DENSE_BYTES],
                DENSE_BYTE_OF[at % DENSE_BYTES],
            ])
        };
        let mut trigrams: Vec<(Trigram, Vec<u32>)> = self.sparse.into_iter().collect();
        trigrams.extend(self.dense.into_iter().enumerate().filter(|(_, ids)| !ids.is_empty()).map(|(at, ids)| (dense_trigram(at), ids)));
        trigrams.sort_unstable_by_key(|(trigram, _)| *trigram);
        let mut keys = Vec::with_capacity(trigrams.len());
        let mut lengths = Vec::with_capacity(trigrams.len());
        let mut starts = Vec::with_capacity(trigrams.len() + 1);
        let mut postings = Vec::new();
        for (trigram, ids) in trigrams {
            keys.push(trigram);
            lengths.push(u32::try_from(ids.len()).unwrap_or(u32::MAX));
            starts.push(postings.len());
            let mut previous = 0;
            for id in ids {
                encode::put_varint(&mut postings, u64::from(id - previous));
                previous = id;
            }
        }
        starts.push(postings.len());
        Index { paths: self.paths, stamps: self.stamps, text_bytes: self.text_bytes, keys, lengths, starts, postings }
    }
}

/// Trigram posting lists over a set of files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    paths: Vec<String>,
    stamps: Vec<Stamp>,
    /// The bytes of text indexed.
    text_bytes: u64,
    /// The trigrams present, sorted.
    keys: Vec<Trigram>,
    /// How many files hold `keys[k]`.
    lengths: Vec<u32>,
    /// `postings[starts[k]..starts[k + 1]]`: the ids of the files holding `keys[k]`, sorted,
    /// as varint deltas (as the index is stored: a search decodes only the lists it needs).
    starts: Vec<usize>,
    postings: Vec<u8>,
}

impl Index {
    /// How many files the index holds.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether it holds no file.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// How many distinct trigrams it holds.
    pub fn trigrams(&self) -> usize {
        self.keys.len()
    }

    /// The bytes of text it indexed.
    pub fn text_bytes(&self) -> u64 {
        self.text_bytes
    }

    /// Every file's path and stamp, by id.
    pub fn files(&self) -> impl Iterator<Item = (&str, Stamp)> {
        self.paths.iter().map(String::as_str).zip(self.stamps.iter().copied())
    }

    /// The path of file `id`.
    ///
    /// # Panics
    ///
    /// If `id` is not one of this index's ids.
    pub fn path(&self, id: u32) -> &str {
        &self.paths[id as usize]
    }

    /// The stamp of file `id`, as it was indexed.
    ///
    /// # Panics
    ///
    /// If `id` is not one of this index's ids.
    pub fn stamp(&self, id: u32) -> Stamp {
        self.stamps[id as usize]
    }

    /// How many files hold `trigram`.
    fn posting_len(&self, trigram: Trigram) -> usize {
        self.keys.binary_search(&trigram).map_or(0, |at| self.lengths[at] as usize)
    }

    /// The ids of the files holding `trigram`, sorted. A list whose ids are out of order or
    /// name no file (only a forged file with a matching checksum has one) reads as every file:
    /// more candidates than needed, never fewer.
    fn posting(&self, trigram: Trigram) -> Vec<u32> {
        let Ok(at) = self.keys.binary_search(&trigram) else {
            return Vec::new();
        };
        let files = u64::try_from(self.paths.len()).unwrap_or(u64::MAX);
        let mut ids = Vec::with_capacity(self.lengths[at] as usize);
        let mut reader = encode::Reader::new(&self.postings[self.starts[at]..self.starts[at + 1]]);
        let mut previous: Option<u64> = None;
        for _ in 0..self.lengths[at] {
            let id = reader.varint().ok().and_then(|delta| match previous {
                None => Some(delta),
                Some(previous) if delta > 0 => previous.checked_add(delta),
                Some(_) => None,
            });
            match id.filter(|id| *id < files) {
                Some(id) => {
                    ids.push(id as u32);
                    previous = Some(id);
                }
                None => return self.candidates(&Query::All),
            }
        }
        ids
    }

    /// The ids (sorted) of the files that may match `query`: every file that matches is among
    /// them.
    pub fn candidates(&self, query: &Query) -> Vec<u32> {
        match query {
            Query::All => (0..u32::try_from(self.paths.len()).unwrap_or(u32::MAX)).collect(),
            Query::Trigram(trigram) => self.posting(*trigram),
            Query::And(parts) => {
                // The rarest first: the intersection only shrinks.
                let mut parts: Vec<&Query> = parts.iter().collect();
                parts.sort_by_key(|part| match part {
                    Query::Trigram(trigram) => self.posting_len(*trigram),
                    Query::All => usize::MAX,
                    _ => self.paths.len(),
                });
                let mut result: Option<Vec<u32>> = None;
                for part in parts {
                    if matches!(part, Query::All) {
                        continue;
                    }
                    let ids = self.candidates(part);
                    result = Some(match result {
                        None => ids,
                        Some(so_far) => intersect(&so_far, &ids),
                    });
                    if result.as_ref().is_some_and(Vec::is_empty) {
                        break;
                    }
                }
                result.unwrap_or_else(|| self.candidates(&Query::All))
            }
            Query::Or(parts) => {
                let mut ids: Vec<u32> = parts.iter().flat_map(|part| self.candidates(part)).collect();
                ids.sort_unstable();
                ids.dedup();
                ids
            }
        }
    }
}

impl Query {
    /// Whether a file holding exactly the (sorted) `trigrams` may match: the test
    /// [`Index::candidates`] makes of an indexed file, for one that is not in the index.
    pub fn may_match(&self, trigrams: &[Trigram]) -> bool {
        match self {
            Query::All => true,
            Query::Trigram(trigram) => trigrams.binary_search(trigram).is_ok(),
            Query::And(parts) => parts.iter().all(|part| part.may_match(trigrams)),
            Query::Or(parts) => parts.iter().any(|part| part.may_match(trigrams)),
        }
    }
}

fn intersect(left: &[u32], right: &[u32]) -> Vec<u32> {
    let (mut i, mut j) = (0, 0);
    let mut both = Vec::with_capacity(left.len().min(right.len()));
    while i < left.len() && j < right.len() {
        match left[i].cmp(&right[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                both.push(left[i]);
                i += 1;
                j += 1;
            }
        }
    }
    both
}

#[cfg(test)]
mod tests;

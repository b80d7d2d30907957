//! The line index `read_file` remembers for a large file: where every `stride`-th line
//! starts, for one version of the file, so that a window deep in it is read without counting
//! from the top.

use crate::WorkspacePath;

/// Files smaller than this are counted from the top on every read (a few milliseconds); a
/// larger one gets a line index that later reads of the session recall, so that reading it
/// window by window costs each window, not the whole file.
pub(super) const INDEX_MIN_BYTES: u64 = 1024 * 1024;
/// Lines between two recorded line starts, at first; doubled whenever the index would grow
/// past [`MAX_INDEX_STARTS`].
const INDEX_STRIDE: u64 = 1024;
/// Line starts an index holds at most (it must fit in what the host remembers, 64 KiB).
pub(super) const MAX_INDEX_STARTS: usize = 7000;

/// What identifies one version of a file: its size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fingerprint {
    pub(super) size: u64,
    pub(super) modified_seconds: u64,
    pub(super) modified_nanos: u32,
}

impl Fingerprint {
    /// The file's fingerprint, if it is large enough to be worth an index and has a time.
    pub(super) fn of(metadata: &crate::scan::FileStat) -> Option<Fingerprint> {
        if metadata.size < INDEX_MIN_BYTES {
            return None;
        }
        let modified = metadata.modified?;
        Some(Fingerprint { size: metadata.size, modified_seconds: modified.as_secs(), modified_nanos: modified.subsec_nanos() })
    }
}

/// Where every `stride`-th line of one version of a file starts, and how many lines it has.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct LineIndex {
    pub(super) fingerprint: Fingerprint,
    pub(super) total_lines: u64,
    pub(super) stride: u64,
    /// `starts[k]`: the byte offset of line `k * stride + 1`; never empty (`starts[0]` is 0).
    pub(super) starts: Vec<u64>,
}

const INDEX_MAGIC: &[u8; 8] = b"tclines1";

impl LineIndex {
    pub(super) fn key(path: &WorkspacePath) -> String {
        format!("read.line-index:{}", path.as_str())
    }

    /// The index this tool remembered for `path`, if it describes the file as it is now.
    pub(super) fn recall(path: &WorkspacePath, fingerprint: &Fingerprint) -> Option<LineIndex> {
        LineIndex::decode(&crate::recall(&Self::key(path))?).filter(|index| index.fingerprint == *fingerprint)
    }

    pub(super) fn remember(&self, path: &WorkspacePath) {
        crate::remember(&Self::key(path), &self.encode());
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(INDEX_MAGIC.len() + 36 + self.starts.len() * 8);
        bytes.extend_from_slice(INDEX_MAGIC);
        bytes.extend_from_slice(&self.fingerprint.size.to_le_bytes());
        bytes.extend_from_slice(&self.fingerprint.modified_seconds.to_le_bytes());
        bytes.extend_from_slice(&self.fingerprint.modified_nanos.to_le_bytes());
        bytes.extend_from_slice(&self.total_lines.to_le_bytes());
        bytes.extend_from_slice(&self.stride.to_le_bytes());
        for start in &self.starts {
            bytes.extend_from_slice(&start.to_le_bytes());
        }
        bytes
    }

    /// The index in `bytes`, or `None` if they are not one (a value of another version, or
    /// damaged): then the file is counted from the top again.
    pub(super) fn decode(bytes: &[u8]) -> Option<LineIndex> {
        let rest = bytes.strip_prefix(INDEX_MAGIC.as_slice())?;
        let u64_at = |at: usize| rest.get(at..at + 8).and_then(|slice| slice.try_into().ok()).map(u64::from_le_bytes);
        let size = u64_at(0)?;
        let modified_seconds = u64_at(8)?;
        let modified_nanos = u32::from_le_bytes(rest.get(16..20)?.try_into().ok()?);
        let total_lines = u64_at(20)?;
        let stride = u64_at(28)?;
        let starts_bytes = rest.get(36..)?;
        if stride == 0 || starts_bytes.is_empty() || starts_bytes.len() % 8 != 0 {
            return None;
        }
        let starts: Vec<u64> = starts_bytes.chunks_exact(8).map(|chunk| u64::from_le_bytes(chunk.try_into().unwrap_or_default())).collect();
        let ordered = starts.first() == Some(&0) && starts.windows(2).all(|pair| pair[0] < pair[1]) && starts.last() <= Some(&size);
        ordered.then_some(LineIndex { fingerprint: Fingerprint { size, modified_seconds, modified_nanos }, total_lines, stride, starts })
    }
}

/// Gathers a [`LineIndex`] while a file is read from the top.
pub(super) struct IndexBuilder {
    pub(super) fingerprint: Fingerprint,
    pub(super) stride: u64,
    pub(super) starts: Vec<u64>,
}

impl IndexBuilder {
    pub(super) fn new(fingerprint: Fingerprint) -> Self {
        IndexBuilder { fingerprint, stride: INDEX_STRIDE, starts: vec![0] }
    }

    /// Line `line` (1-based) starts at byte `offset`; lines come in order.
    pub(super) fn line_starts(&mut self, line: u64, offset: u64) {
        if !(line - 1).is_multiple_of(self.stride) {
            return;
        }
        self.starts.push(offset);
        if self.starts.len() > MAX_INDEX_STARTS {
            // Twice the stride: every other start is kept.
            self.starts = self.starts.iter().copied().step_by(2).collect();
            self.stride *= 2;
        }
    }

    pub(super) fn finish(self, total_lines: u64) -> LineIndex {
        LineIndex { fingerprint: self.fingerprint, total_lines, stride: self.stride, starts: self.starts }
    }
}

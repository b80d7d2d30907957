//! The index as bytes, and back: checked whole before anything is believed, so that a damaged
//! or truncated file is refused (and rebuilt by its owner), never half-read.
//!
//! Layout, little-endian: the magic `tcidx\0\0\1`; the text bytes; the file count, then each
//! file's path (length, UTF-8) and stamp (size, mtime, inode); the trigram count, then each
//! trigram and its posting list's length; then every posting list, its ids as varint deltas
//! (the first from 0); last, a SHA-256 of everything before it. Delta-coded ids keep a
//! posting list to about a byte an entry.

use sha2::{Digest, Sha256};

use crate::{Index, Stamp, Trigram};

const MAGIC: &[u8; 8] = b"tcidx\0\0\x02";

/// Why bytes are not an index this version can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not an index of this format or version.
    #[error("not a toolcell index of this version")]
    Format,
    /// The checksum does not match: the file is damaged or cut short.
    #[error("the index is damaged or cut short (its checksum does not match)")]
    Checksum,
    /// The checksum matches but the content is inconsistent.
    #[error("the index is inconsistent: {0}")]
    Inconsistent(&'static str),
}

impl Index {
    /// The index as bytes (see the module docs for the layout).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.postings.len() + self.keys.len() * 8 + self.paths.len() * 48 + 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.text_bytes.to_le_bytes());
        put_varint(&mut out, self.paths.len() as u64);
        for (path, stamp) in self.paths.iter().zip(&self.stamps) {
            put_varint(&mut out, path.len() as u64);
            out.extend_from_slice(path.as_bytes());
            for value in [stamp.size, stamp.changed_ns, stamp.inode] {
                out.extend_from_slice(&value.to_le_bytes());
            }
        }
        put_varint(&mut out, self.keys.len() as u64);
        for (key, length) in self.keys.iter().zip(&self.lengths) {
            out.extend_from_slice(&key.to_le_bytes()[..3]);
            put_varint(&mut out, u64::from(*length));
        }
        // Kept as they are stored.
        out.extend_from_slice(&self.postings);
        let checksum = Sha256::digest(&out);
        out.extend_from_slice(&checksum);
        out
    }

    /// The index in `bytes`, checked whole: the checksum first, then every count, length,
    /// order and id against what is there.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] saying which check failed; nothing is trusted otherwise.
    pub fn from_bytes(bytes: &[u8]) -> Result<Index, DecodeError> {
        if bytes.len() < MAGIC.len() + 32 || !bytes.starts_with(MAGIC) {
            return Err(DecodeError::Format);
        }
        let (body, checksum) = bytes.split_at(bytes.len() - 32);
        if Sha256::digest(body).as_slice() != checksum {
            return Err(DecodeError::Checksum);
        }
        let mut reader = Reader { bytes: body, at: MAGIC.len() };
        let text_bytes = reader.u64()?;
        let files = reader.count(body.len())?;
        let mut paths = Vec::with_capacity(files);
        let mut stamps = Vec::with_capacity(files);
        for _ in 0..files {
            let length = reader.count(body.len())?;
            let path = std::str::from_utf8(reader.take(length)?).map_err(|_| DecodeError::Inconsistent("a path is not UTF-8"))?;
            paths.push(path.to_owned());
            stamps.push(Stamp { size: reader.u64()?, changed_ns: reader.u64()?, inode: reader.u64()? });
        }
        let trigrams = reader.count(body.len())?;
        let mut keys: Vec<Trigram> = Vec::with_capacity(trigrams);
        let mut lengths = Vec::with_capacity(trigrams);
        for _ in 0..trigrams {
            let raw = reader.take(3)?;
            let key = u32::from_le_bytes([raw[0], raw[1], raw[2], 0]);
            if keys.last().is_some_and(|last| *last >= key) {
                return Err(DecodeError::Inconsistent("trigrams out of order"));
            }
            keys.push(key);
            lengths.push(reader.count(files)?);
        }
        // The lists stay encoded: each is found here (its ids end where its count of numbers
        // does), and decoded when a search asks for its trigram.
        let postings = &body[reader.at..];
        let mut starts = Vec::with_capacity(trigrams + 1);
        let mut at = 0;
        for length in &lengths {
            starts.push(at);
            at = skip_varints(postings, at, *length)?;
        }
        starts.push(at);
        if at != postings.len() {
            return Err(DecodeError::Inconsistent("bytes after the postings"));
        }
        let lengths = lengths.into_iter().map(|length| u32::try_from(length).unwrap_or(u32::MAX)).collect();
        Ok(Index { paths, stamps, text_bytes, keys, lengths, starts, postings: postings.to_vec() })
    }
}

/// Where the `count` varints from `at` end (a byte below 0x80 ends one). What each holds is
/// checked when its list is decoded.
fn skip_varints(bytes: &[u8], mut at: usize, mut count: usize) -> Result<usize, DecodeError> {
    const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
    // Eight bytes at a time while more numbers than the chunk ends remain (the bytes after its
    // last end then belong to this list's next number).
    while count > 8 {
        let Some(chunk) = bytes.get(at..at + 8).and_then(|chunk| <[u8; 8]>::try_from(chunk).ok()) else {
            break;
        };
        let ends = (!u64::from_le_bytes(chunk) & HIGH_BITS).count_ones() as usize;
        if ends >= count {
            break;
        }
        count -= ends;
        at += 8;
    }
    while count > 0 {
        let byte = *bytes.get(at).ok_or(DecodeError::Inconsistent("a posting list is cut short"))?;
        at += 1;
        if byte & 0x80 == 0 {
            count -= 1;
        }
    }
    Ok(at)
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    fn take(&mut self, length: usize) -> Result<&[u8], DecodeError> {
        let end = self.at.checked_add(length).filter(|end| *end <= self.bytes.len()).ok_or(DecodeError::Inconsistent("cut short"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let raw = self.take(8)?;
        Ok(u64::from_le_bytes(raw.try_into().map_err(|_| DecodeError::Inconsistent("cut short"))?))
    }

    pub(crate) fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::Inconsistent("a number runs on"))
    }

    /// A count that cannot exceed `bound` (what the rest could hold), so that a forged count
    /// cannot make an allocation of its choosing.
    fn count(&mut self, bound: usize) -> Result<usize, DecodeError> {
        let value = self.varint()?;
        usize::try_from(value)
            .ok()
            .filter(|value| *value <= bound)
            .ok_or(DecodeError::Inconsistent("a count exceeds what the index can hold"))
    }
}

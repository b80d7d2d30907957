//! Checkpoints: the chain's head tagged with an HMAC under a key kept apart from the log, so
//! that a chain re-sealed or cut short by someone without the key is found.

use crate::{Link, Tamper, Verified, hex, unhex, verify_with_head};
use sha2::Sha256;

type CheckpointMac = hmac::Hmac<Sha256>;

fn checkpoint_mac(key: &[u8], link: &Link) -> CheckpointMac {
    use hmac::{KeyInit as _, Mac as _};
    let mut mac = CheckpointMac::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(b"toolcell audit checkpoint\0");
    mac.update(link.seq.to_string().as_bytes());
    mac.update(b"\0");
    mac.update(link.prev_hash().as_bytes());
    mac
}

/// Width of the `seq` in a checkpoint line, so that every rewrite is the same length.
pub const CHECKPOINT_SEQ_WIDTH: usize = 20;

/// The checkpoint line of `link` under `key`: `seq hash tag`, then a newline, always the same
/// length.
pub fn checkpoint(link: &Link, key: &[u8]) -> String {
    use hmac::Mac as _;
    let tag = hex(&checkpoint_mac(key, link).finalize().into_bytes());
    format!("{:0width$} {} {tag}\n", link.seq, link.prev_hash(), width = CHECKPOINT_SEQ_WIDTH)
}

/// The head a checkpoint line names, once its tag verifies under `key`.
///
/// # Errors
///
/// Why it is not a checkpoint made with `key`: damaged, without a tag (written before
/// checkpoints were keyed, or stripped), or forged.
pub fn read_checkpoint(text: &str, key: &[u8]) -> Result<Link, String> {
    use hmac::Mac as _;
    let mut fields = text.trim_end().split(' ');
    let (Some(seq), Some(hash)) = (fields.next(), fields.next()) else {
        return Err("it is damaged".to_owned());
    };
    let seq: u64 = seq.parse().map_err(|_| "it is damaged".to_owned())?;
    if hash.len() != 64 || !hash.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err("it is damaged".to_owned());
    }
    let link = Link { seq, hash: if seq == 0 { String::new() } else { hash.to_owned() } };
    let tag = fields.next().ok_or("it carries no authentication tag (it was written by an older version, or the tag was removed)")?;
    let tag = unhex(tag).ok_or("its tag is damaged")?;
    checkpoint_mac(key, &link)
        .verify_slice(&tag)
        .map_err(|_| "its tag does not verify under the state key: it was forged, or the key was replaced".to_owned())?;
    Ok(link)
}

/// Check every line of a log, as [`verify`] does, and that it still holds the record a
/// checkpoint made with `key` names, with the hash it names ([`checkpoint`]): a log that was
/// cut short, emptied, or rewritten and re-sealed from any record up to the checkpoint fails,
/// whoever could write it, unless they also hold the key. Records after the checkpoint (a
/// crash between the append and the checkpoint's rewrite, or other hosts' appends to a shared
/// store) are checked by the chain alone.
///
/// # Errors
///
/// The first [`Tamper`] of [`verify`], or one saying why the checkpoint does not verify or is
/// no longer reached.
pub fn verify_checkpoint<'a>(lines: impl IntoIterator<Item = &'a str>, checkpoint: &str, key: &[u8]) -> Result<Verified, Tamper> {
    let head = read_checkpoint(checkpoint, key).map_err(|reason| Tamper { line: 0, reason: format!("the checkpoint: {reason}") })?;
    verify_with_head(lines, &head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Record, seal};

    #[test]
    fn a_checkpoint_catches_a_shortened_or_resealed_chain() {
        let key = [3u8; 32];
        let mut link = Link::GENESIS;
        let mut lines = Vec::new();
        for call in ["c-1", "c-2", "c-3"] {
            let record = Record::call("2026-11-25T00:00:00.000Z", "s", "impl", "read_file", call, "ok");
            let (line, next) = seal(&record, &link);
            lines.push(line);
            link = next;
        }
        let made = checkpoint(&link, &key);
        assert_eq!(verify_checkpoint(lines.iter().map(String::as_str), &made, &key).map(|verified| verified.records), Ok(3));
        let shortened = verify_checkpoint(lines[..1].iter().map(String::as_str), &made, &key);
        assert!(shortened.is_err_and(|tamper| tamper.reason.contains("removed")));
        // A chain sealed again with a record changed no longer has the checkpointed hash.
        let mut relink = Link::GENESIS;
        let mut resealed = Vec::new();
        for line in &lines {
            let mut record: Record = serde_json::from_str(line).expect("record");
            record.role = "root".to_owned();
            let (line, next) = seal(&record, &relink);
            resealed.push(line);
            relink = next;
        }
        assert!(verify_checkpoint(resealed.iter().map(String::as_str), &made, &key).is_err());
        // Nor can a checkpoint be made for it without the key.
        for forged in [checkpoint(&relink, &[0u8; 32]), format!("{:020} {}\n", relink.seq, relink.hash)] {
            let tamper = verify_checkpoint(resealed.iter().map(String::as_str), &forged, &key).expect_err("forged");
            assert!(tamper.reason.starts_with("the checkpoint"), "{tamper}");
        }
    }
}

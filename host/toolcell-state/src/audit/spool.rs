//! The audit spool (`audit.spool.jsonl`): records a shared store could not take when they were
//! made (refusals, and the reads of calls that change nothing), kept in the state directory
//! until the next append that reaches the store forwards them, in order, ahead of its own.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::Path;

use toolcell_audit::{Link, Record};

use super::AuditBackend;

/// At most this many waiting records go to the store in one append: each batch is one round
/// trip under the store's deadline, so a spool any outage left drains, however large.
const BATCH: usize = 500;

/// Keep `records` in the spool at `path` (locked while written).
pub(super) fn defer(path: &Path, records: &[Record]) -> std::io::Result<()> {
    let mut lines = String::new();
    for record in records {
        lines.push_str(&serde_json::to_string(record).map_err(std::io::Error::other)?);
        lines.push('\n');
    }
    let spool = crate::storage::private_file().create(true).append(true).read(true).open(path)?;
    spool.lock()?;
    let written = drop_torn_end(&spool).and_then(|()| (&spool).write_all(lines.as_bytes())).and_then(|()| spool.sync_data());
    let unlocked = spool.unlock();
    written.and(unlocked)
}

/// Send what waits in `spool` (locked by the caller) to `shared`, in batches of [`BATCH`],
/// telling `checkpoint` where each ended; the spool is then empty. If a batch fails, the spool
/// keeps exactly what was not sent.
pub(super) fn forward(
    mut spool: &File,
    shared: &dyn AuditBackend,
    checkpoint: &dyn Fn(&Link) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut text = String::new();
    spool.read_to_string(&mut text)?;
    // A last line without its newline was cut short while it was written: that append
    // failed (and was refused), so the piece is no record.
    let complete = text.rfind('\n').map_or(0, |end| end + 1);
    let mut waiting = Vec::new();
    for line in text[..complete].lines().filter(|line| !line.trim().is_empty()) {
        waiting.push(serde_json::from_str::<Record>(line).map_err(|error| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("`{}` holds a damaged record ({error})", crate::AUDIT_SPOOL_FILE))
        })?);
    }
    let mut sent = 0;
    for batch in waiting.chunks(BATCH) {
        match shared.append(batch).and_then(|link| checkpoint(&link)) {
            Ok(()) => sent += batch.len(),
            Err(error) => {
                if sent > 0 {
                    keep(spool, &waiting[sent..])?;
                }
                return Err(error);
            }
        }
    }
    if !text.is_empty() {
        spool.set_len(0)?;
        spool.sync_data()?;
    }
    Ok(())
}

/// Replace what `spool` holds with `records` (what is left to send).
fn keep(mut spool: &File, records: &[Record]) -> std::io::Result<()> {
    let mut lines = String::new();
    for record in records {
        lines.push_str(&serde_json::to_string(record).map_err(std::io::Error::other)?);
        lines.push('\n');
    }
    spool.set_len(0)?;
    spool.seek(SeekFrom::Start(0))?;
    spool.write_all(lines.as_bytes())?;
    spool.sync_data()
}

/// Cut a last line left without its newline (a write cut short), so that the next record
/// begins a line of its own.
fn drop_torn_end(mut spool: &File) -> std::io::Result<()> {
    let length = spool.metadata()?.len();
    if length == 0 {
        return Ok(());
    }
    let mut last = [0_u8];
    spool.seek(SeekFrom::Start(length - 1))?;
    spool.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    let mut text = Vec::new();
    spool.seek(SeekFrom::Start(0))?;
    spool.read_to_end(&mut text)?;
    let complete = text.iter().rposition(|byte| *byte == b'\n').map_or(0, |end| end + 1);
    spool.set_len(complete as u64)
}

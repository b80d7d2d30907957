//! The audit spool (`audit.spool.jsonl`): records a shared store could not take when they were
//! made (refusals, and the reads of calls that change nothing), kept in the state directory
//! until the next append that reaches the store forwards them, in order, ahead of its own.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use toolcell_audit::{Link, Record};

use super::AuditBackend;

/// At most this many waiting records go to the store in one append: each batch is one round
/// trip under the store's deadline, so a spool any outage left drains, however large.
const BATCH: usize = 500;

/// The batch size that last went through: a batch the store does not take in time is halved
/// (down to one record), and the size grows back as batches go through.
static FITS: AtomicUsize = AtomicUsize::new(BATCH);

/// A line saying that the spool's first bytes, up to the offset it names, are in the store.
/// Appended (never rewritten in place), so that a host stopped at any moment loses no record.
const SENT: &str = "#sent ";

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

/// Send what waits in `spool` (locked by the caller, opened for appending) to `shared`, in
/// batches, telling `checkpoint` where each ended; the spool is then empty. After each batch
/// the store took, the spool says so (one small synced append), so that a host stopped
/// mid-drain sends again at most the batch it was sending. A batch the store does not take is
/// tried again half as large (a store slow per record takes it), down to the one record it
/// refuses; but if the first batch got no answer in time, the smaller one waits for the next
/// append (a store that is away costs each append one wait, not one per halving).
pub(super) fn forward(
    mut spool: &File,
    shared: &dyn AuditBackend,
    checkpoint: &dyn Fn(&Link) -> std::io::Result<()>,
) -> std::io::Result<()> {
    // A last line without its newline was cut short while it was written: that append
    // failed (and was refused), so the piece is no record.
    drop_torn_end(spool)?;
    let mut text = String::new();
    spool.seek(SeekFrom::Start(0))?;
    spool.read_to_string(&mut text)?;
    if text.is_empty() {
        return Ok(());
    }
    let (waiting, ends) = waiting(&text).inspect_err(warn_damaged)?;
    let mut sent = 0;
    while sent < waiting.len() {
        let size = FITS.load(Ordering::Relaxed).clamp(1, BATCH).min(waiting.len() - sent);
        match shared.append(&waiting[sent..sent + size]) {
            Ok(link) => {
                sent += size;
                FITS.store((size * 2).min(BATCH), Ordering::Relaxed);
                let checkpointed = checkpoint(&link);
                // After the last batch, emptying the spool says it.
                if sent < waiting.len() || checkpointed.is_err() {
                    mark_sent(spool, ends[sent - 1])?;
                }
                checkpointed?;
            }
            Err(error) => {
                FITS.store((size / 2).max(1), Ordering::Relaxed);
                // A first batch not answered in time may meet a store that is away or whose
                // chain another host holds, not one slow per record: the next append tries the
                // smaller batch. A batch the store refused is narrowed down now, to the record
                // it refuses.
                let away = sent == 0 && matches!(error.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::NotConnected);
                if size == 1 || away {
                    return Err(error);
                }
            }
        }
    }
    spool.set_len(0)?;
    spool.sync_data()
}

/// Say, at most once a minute, that the spool holds a damaged record: every record behind it
/// waits (the host's own appends go on), until an operator mends or moves the file.
fn warn_damaged(error: &std::io::Error) {
    static WARNED: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if warned.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(60)) {
        *warned = Some(std::time::Instant::now());
        tracing::warn!(
            "{error}: the audit records spooled after it do not reach the shared store; move `{}` out of the state directory and send its records by hand, or mend the line",
            crate::AUDIT_SPOOL_FILE
        );
    }
}

/// The records of `text` (whole lines) not yet sent, each with the offset where its line ends.
pub(super) fn waiting(text: &str) -> std::io::Result<(Vec<Record>, Vec<usize>)> {
    let sent_through = text.lines().filter_map(|line| line.strip_prefix(SENT)?.trim().parse::<usize>().ok()).max().unwrap_or(0);
    let (mut records, mut ends) = (Vec::new(), Vec::new());
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let end = start + line.len();
        let body = line.trim();
        if start >= sent_through && !body.is_empty() && !body.starts_with(SENT) {
            let mut record = serde_json::from_str::<Record>(body).map_err(|error| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("`{}` holds a damaged record ({error})", crate::AUDIT_SPOOL_FILE),
                )
            })?;
            if record.id.is_none() {
                // Spooled before records had ids: one made from the line itself is the same
                // each time it is sent, so the store keeps it once however often it comes.
                use sha2::Digest as _;
                record.id = Some(toolcell_audit::hex(&sha2::Sha256::digest(body.as_bytes())[..16]));
            }
            records.push(record);
            ends.push(end);
        }
        start = end;
    }
    Ok((records, ends))
}

/// Say in `spool` that its first `through` bytes are in the store.
fn mark_sent(mut spool: &File, through: usize) -> std::io::Result<()> {
    spool.write_all(format!("{SENT}{through}\n").as_bytes())?;
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

//! The audit trail on disk: `audit.jsonl` in the state directory, appended under an exclusive
//! file lock so that several toolcell processes can share one chain; or in a shared store
//! ([`AuditBackend`], PostgreSQL in `toolcell-store-postgres`) that several hosts append to.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

use toolcell_audit::{Link, Prepared, Record};

use crate::error::Error;

use crate::{AUDIT_FILE, AUDIT_HEAD_FILE, AUDIT_SPOOL_FILE};
/// How long an append waits for another's write by spinning before it sleeps.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);
/// How much of the log's end is read to find the last record (grown if a record is longer).
const TAIL_CHUNK: u64 = 16 * 1024;

/// An audit trail kept outside the state directory and shared by several hosts: one chain,
/// appended to alone among all of them.
pub trait AuditBackend: Send + Sync + std::fmt::Debug {
    /// Seal `records` after the chain's last record and keep them, as one, alone among every
    /// host sharing the store: all of them or none. Returns the chain's link after them.
    ///
    /// # Errors
    ///
    /// Why they could not be kept (nothing was).
    fn append(&self, records: &[Record]) -> std::io::Result<Link>;

    /// The sealed records after the first `position` (0: all), one line each, in order, and
    /// the position after them.
    ///
    /// # Errors
    ///
    /// Why they could not be read.
    fn read_from(&self, position: u64) -> std::io::Result<(String, u64)>;

    /// The chain's head: the last record's `seq` and hash.
    ///
    /// # Errors
    ///
    /// Why it could not be read.
    fn head(&self) -> std::io::Result<Option<Link>>;

    /// What the store is, for messages (no password).
    fn name(&self) -> String;
}

/// An append-only, hash-chained audit log.
#[derive(Debug)]
pub struct AuditLog {
    directory: PathBuf,
    path: PathBuf,
    /// The open log and the chain's end as this process last wrote it; only the append that
    /// leads a group commit takes it.
    appender: Mutex<Option<Appender>>,
    /// Appends waiting to be written, and whether one is writing (see [`append`](Self::append)).
    commit: Mutex<Commit>,
    /// Signalled whenever a group of appends is settled.
    settled: Condvar,
    /// Where the records go instead of `path`, if a shared store keeps them.
    shared: Option<std::sync::Arc<dyn AuditBackend>>,
    /// The state key, which tags the checkpoint (`None`: an existing log without one).
    key: Option<crate::StateKey>,
    /// The checkpoint file, open for rewriting in place, and the `seq` it names, for appends
    /// to a shared store (a local log keeps its own in its appender).
    checkpoint: Mutex<Option<(File, u64)>>,
}

/// The appends of this process's threads, written in groups: while one append writes (it
/// leads), those that arrive queue their prepared records, and the next to lead writes all of
/// them at once, under one lock and in one write.
#[derive(Debug, Default)]
struct Commit {
    /// Each waiting append's ticket and records, in the order they came.
    queue: Vec<(u64, Vec<Prepared>)>,
    /// Whether an append is writing now.
    writing: bool,
    /// The next append's ticket.
    next: u64,
    /// Every ticket below this one is settled: written, or failed.
    settled: u64,
    /// Why settled appends failed, until each one's caller takes its own.
    failed: std::collections::HashMap<u64, (std::io::ErrorKind, String)>,
    /// Appends asleep on `settled`: a group is settled without a wake-up (a system call) when
    /// none is, as with one append at a time.
    sleeping: usize,
}

/// Settles the group an append led, even if writing it panicked: its tickets are marked done
/// (failed, if it did not finish) and the appends waiting on them are woken.
struct Settle<'a> {
    log: &'a AuditLog,
    /// The tickets of the group, but for the leader's own.
    others: Vec<u64>,
    /// The ticket after the group's last.
    end: u64,
    /// Why the group's write failed (`None` once it is written).
    failure: Option<(std::io::ErrorKind, String)>,
}

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        let mut commit = self.log.commit.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(failure) = &self.failure {
            for ticket in &self.others {
                commit.failed.insert(*ticket, failure.clone());
            }
        }
        commit.settled = self.end;
        commit.writing = false;
        let sleeping = commit.sleeping > 0;
        drop(commit);
        if sleeping {
            self.log.settled.notify_all();
        }
    }
}

#[derive(Debug)]
struct Appender {
    file: File,
    head: File,
    link: Link,
    /// The file's length after our last append: if it is still that, nobody else appended
    /// and `link` is current.
    length: u64,
}

impl AuditLog {
    /// Use `state_dir/audit.jsonl`, creating the directory if needed.
    ///
    /// # Errors
    ///
    /// [`Error::Audit`] if the directory cannot be created.
    pub fn open(state_dir: &Path) -> Result<Self, Error> {
        Ok(AuditLog::in_state(&crate::StateDir::open(state_dir)?))
    }

    /// The log of the opened state directory `state`.
    pub fn in_state(state: &crate::StateDir) -> Self {
        AuditLog::new(state.path().to_path_buf(), state.key().copied())
    }

    /// A log kept by `backend`, with what is not shared (the checkpoint, the spool) in the
    /// opened state directory `state`.
    pub fn shared_in(backend: std::sync::Arc<dyn AuditBackend>, state: &crate::StateDir) -> Self {
        let mut log = AuditLog::in_state(state);
        log.path = PathBuf::from(backend.name());
        log.shared = Some(backend);
        log
    }

    /// A log kept by `backend`; `state_dir` (created if needed) is the host's state directory
    /// all the same, for what is not shared.
    ///
    /// # Errors
    ///
    /// [`Error::Audit`] if the directory cannot be created.
    pub fn shared(backend: std::sync::Arc<dyn AuditBackend>, state_dir: &Path) -> Result<Self, Error> {
        Ok(AuditLog::shared_in(backend, &crate::StateDir::open(state_dir)?))
    }

    /// The log of an existing state directory, for reading and verifying: nothing is created.
    ///
    /// # Errors
    ///
    /// [`Error::Audit`] (`NotFound`) if the directory, or the log in it, does not exist.
    pub fn existing(state_dir: &Path) -> Result<Self, Error> {
        let state = crate::StateDir::existing(state_dir)?;
        let path = state.join(AUDIT_FILE);
        std::fs::symlink_metadata(&path).map_err(|source| Error::Audit { path: path.clone(), source })?;
        Ok(AuditLog::new(state.path().to_path_buf(), state.key().copied()))
    }

    /// The log in the canonical state directory `directory`, nothing opened yet.
    fn new(directory: PathBuf, key: Option<crate::StateKey>) -> Self {
        let path = directory.join(AUDIT_FILE);
        AuditLog {
            directory,
            path,
            appender: Mutex::new(None),
            commit: Mutex::default(),
            settled: Condvar::new(),
            shared: None,
            key,
            checkpoint: Mutex::new(None),
        }
    }

    /// What the log is, for messages: its file, or the shared store's name.
    pub fn name(&self) -> String {
        self.path.display().to_string()
    }

    /// Verify `text`, the whole log as [`read`](Self::read) gives it: the chain, the shared
    /// store's own head, and the checkpoint tagged under the state key beside it.
    ///
    /// # Errors
    ///
    /// The first [`Tamper`](toolcell_audit::Tamper): a broken chain, a log that no longer
    /// reaches a head, a checkpoint that does not verify (forged, or its tag removed), or a
    /// non-empty log without a checkpoint or a state key to check it with.
    pub fn verify(&self, text: &str) -> Result<toolcell_audit::Verified, toolcell_audit::Tamper> {
        let tamper = |reason: String| toolcell_audit::Tamper { line: 0, reason };
        if let Some(shared) = &self.shared {
            let head = shared.head().map_err(|error| tamper(error.to_string()))?;
            if let Some(head) = head {
                toolcell_audit::verify_with_head(text.lines(), &head)?;
            }
        }
        let checkpoint = match std::fs::read_to_string(self.directory.join(AUDIT_HEAD_FILE)) {
            Ok(checkpoint) => checkpoint,
            // A host that never appended to the shared store (an auditor's) has no checkpoint
            // of its own: the chain and the store's head are all it can check.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && self.shared.is_some() => {
                return toolcell_audit::verify(text.lines());
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && text.is_empty() => {
                return Err(tamper("the log is empty and has no head file: nothing was ever recorded here".to_owned()));
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(tamper(format!(
                    "`{AUDIT_HEAD_FILE}`, the checkpoint of the chain, is missing: it was removed, or this log was written elsewhere"
                )));
            }
            Err(error) => return Err(tamper(format!("`{AUDIT_HEAD_FILE}` cannot be read: {error}"))),
        };
        let Some(key) = &self.key else {
            return Err(tamper(format!("the state key (`{}`) is missing, so the checkpoint cannot be checked", crate::STATE_KEY_FILE)));
        };
        toolcell_audit::verify_checkpoint(text.lines(), &checkpoint, key)
    }

    /// The state directory's key, if the log has it (the journals are authenticated with it
    /// too).
    pub fn key(&self) -> Option<&crate::StateKey> {
        self.key.as_ref()
    }

    /// Rewrite the checkpoint (the head file) to name `link`, in place.
    fn write_checkpoint(&self, file: &File, link: &Link) -> std::io::Result<()> {
        let Some(key) = &self.key else {
            return Ok(());
        };
        std::os::unix::fs::FileExt::write_all_at(file, toolcell_audit::checkpoint(link, key).as_bytes(), 0)
    }

    /// The checkpoint file, opened for rewriting in place.
    fn open_checkpoint(&self) -> std::io::Result<File> {
        crate::storage::private_file().write(true).create(true).truncate(false).open(self.directory.join(AUDIT_HEAD_FILE))
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The canonical state directory.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// Seal and append `records` as one write, after the log's last record.
    ///
    /// # Errors
    ///
    /// The I/O error, or `InvalidData` if the log's last line is not a sealed record (run
    /// `toolcell audit verify`). Nothing is appended then.
    pub fn append(&self, records: &[Record]) -> std::io::Result<()> {
        self.append_draining(records, Drain::Spool)
    }

    /// [`append`](Self::append) for a caller that holds a lock other hosts wait on (the
    /// workspace's namespace lock, held while a call's record of a change is written): with a
    /// shared store, what waits in the spool is left for the next append made without it (a
    /// long spool, after an outage, would otherwise hold every host's namespace changes for
    /// as long as it takes to send).
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append).
    pub fn append_in_lock(&self, records: &[Record]) -> std::io::Result<()> {
        self.append_draining(records, Drain::Later)
    }

    /// [`append_deferrable`](Self::append_deferrable) for a caller that holds a lock other
    /// hosts wait on (see [`append_in_lock`](Self::append_in_lock)).
    ///
    /// # Errors
    ///
    /// As [`append_deferrable`](Self::append_deferrable).
    pub fn append_deferrable_in_lock(&self, records: &[Record]) -> std::io::Result<()> {
        self.append_deferrable_draining(records, Drain::Later)
    }

    /// [`append`](Self::append), sending what waits in the spool first or not (`drain`).
    fn append_draining(&self, records: &[Record], drain: Drain) -> std::io::Result<()> {
        match &self.shared {
            Some(shared) => self.append_shared(shared.as_ref(), &identified(records), drain),
            None => self.append_local(records),
        }
    }

    /// [`append_deferrable`](Self::append_deferrable), sending what waits in the spool first or
    /// not (`drain`).
    fn append_deferrable_draining(&self, records: &[Record], drain: Drain) -> std::io::Result<()> {
        let Some(shared) = &self.shared else {
            return self.append_local(records);
        };
        // The same ids in the spool: if the append did land (its answer was lost), the store
        // keeps them once when they are sent again.
        let records = identified(records);
        self.append_shared(shared.as_ref(), &records, drain).or_else(|_| spool::defer(&self.directory.join(AUDIT_SPOOL_FILE), &records))
    }

    /// Append `records` to the log file in the state directory.
    fn append_local(&self, records: &[Record]) -> std::io::Result<()> {
        // Serialize before queueing: under the lock only sealing (a hash each) remains.
        let prepared: Vec<Prepared> = records.iter().map(Prepared::new).collect();
        let mut commit = self.commit.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let ticket = commit.next;
        commit.next += 1;
        commit.queue.push((ticket, prepared));
        // When this append began to wait (read only if another is writing).
        let mut waited = None;
        loop {
            if commit.settled > ticket {
                // Another append led a group with ours in it.
                return match commit.failed.remove(&ticket) {
                    Some((kind, message)) => Err(std::io::Error::new(kind, message)),
                    None => Ok(()),
                };
            }
            if !commit.writing {
                break;
            }
            // A group takes microseconds to write: spin that long before sleeping, as waking
            // a sleeper costs more than the wait (and two threads that sleep on each other
            // fall into step, one always behind the other).
            if waited.get_or_insert_with(std::time::Instant::now).elapsed() < SPIN {
                drop(commit);
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                commit = self.commit.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            commit.sleeping += 1;
            commit = self.settled.wait(commit).unwrap_or_else(std::sync::PoisonError::into_inner);
            commit.sleeping -= 1;
        }
        // Lead: write every queued append, ours among them, as one.
        commit.writing = true;
        let group = std::mem::take(&mut commit.queue);
        let end = commit.next;
        drop(commit);
        let others = group.iter().map(|(queued, _)| *queued).filter(|queued| *queued != ticket).collect();
        let mut settle = Settle {
            log: self,
            others,
            end,
            failure: Some((std::io::ErrorKind::Other, "the audit trail's writer stopped half-way".to_owned())),
        };
        let mut appender = self.appender.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let result = self.append_locked(&mut appender, group.iter().flat_map(|(_, records)| records));
        if result.is_err() {
            // Start afresh next time: reopen the file and reread its end.
            *appender = None;
        }
        drop(appender);
        settle.failure = result.as_ref().err().map(|error| (error.kind(), error.to_string()));
        drop(settle);
        result
    }

    /// [`append`](Self::append), except that with a shared store that cannot take them now the
    /// records wait in the state directory (`audit.spool.jsonl`) and go first, in order, into
    /// the shared chain with the next append that succeeds. For what may be recorded late: the
    /// refusals and the reads of calls that change nothing (an allowed modification is never
    /// deferred: it is recorded before it happens, or refused).
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append); with a shared store, only if the spool cannot be written.
    pub fn append_deferrable(&self, records: &[Record]) -> std::io::Result<()> {
        self.append_deferrable_draining(records, Drain::Spool)
    }

    /// Append to the shared store: first what waits in the spool (as much as the store takes),
    /// then `records`. Only one append at a time drains the spool (under its file lock); the
    /// others, and this one's own records, do not wait for it: a store that hangs (another
    /// host holds the chain's lock) then costs each call one wait, not one per call queued
    /// before it. So the chain's order is not the order of events: `ts` says when each was.
    fn append_shared(&self, shared: &dyn AuditBackend, records: &[Record], drain: Drain) -> std::io::Result<()> {
        let path = self.directory.join(AUDIT_SPOOL_FILE);
        let spool = match drain {
            Drain::Spool => OpenOptions::new().read(true).append(true).open(&path),
            Drain::Later => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        let forwarded = match spool {
            Ok(spool) => match spool.try_lock() {
                Ok(()) => {
                    let forwarded = spool::forward(&spool, shared, &|link| self.checkpoint_shared(link));
                    spool.unlock().and(forwarded)
                }
                // Another append drains it (or defers records to it) now.
                Err(std::fs::TryLockError::WouldBlock) => Ok(()),
                Err(std::fs::TryLockError::Error(error)) => Err(error),
            },
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        };
        // A spool that cannot drain now (a slow database, a damaged record) does not hold back
        // this append: its records follow in the chain once it drains. A failed append of
        // `records` is the caller's to defer (to the spool, once this one is unlocked).
        if records.is_empty() { forwarded } else { shared.append(records).and_then(|link| self.checkpoint_shared(&link)) }
    }

    /// After an append to the shared store that ended at `link`: this host's checkpoint of the
    /// shared chain, kept in its own state directory where the store's owner cannot reach it.
    /// Appends race between threads here, so an older link never replaces a newer one.
    fn checkpoint_shared(&self, link: &Link) -> std::io::Result<()> {
        let mut checkpoint = self.checkpoint.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if checkpoint.is_none() {
            *checkpoint = Some((self.open_checkpoint()?, 0));
        }
        let Some((file, written)) = checkpoint.as_mut() else {
            return Ok(());
        };
        if link.seq > *written {
            self.write_checkpoint(file, link)?;
            *written = link.seq;
        }
        Ok(())
    }

    fn append_locked<'a>(&self, appender: &mut Option<Appender>, records: impl Iterator<Item = &'a Prepared>) -> std::io::Result<()> {
        if appender.is_none() {
            let file = crate::storage::private_file().read(true).append(true).create(true).open(&self.path)?;
            let head = self.open_checkpoint()?;
            *appender = Some(Appender { file, head, link: Link::GENESIS, length: u64::MAX });
        }
        let Some(appender) = appender.as_mut() else {
            return Ok(());
        };
        // The file lock orders appends across processes; the chain continues from whatever
        // another process appended since our last write.
        appender.file.lock()?;
        let written = (|| {
            let length = appender.file.metadata()?.len();
            if length != appender.length {
                appender.link = last_link(&mut appender.file)?;
            }
            let mut buffer = String::new();
            let mut link = appender.link.clone();
            for record in records {
                let (line, next) = record.seal(&link);
                buffer.push_str(&line);
                buffer.push('\n');
                link = next;
            }
            appender.file.write_all(buffer.as_bytes())?;
            // The head follows the log; both under the lock, so they agree but for a crash
            // between the two writes (the head then lags, which verification accepts).
            self.write_checkpoint(&appender.head, &link)?;
            appender.link = link;
            appender.length = length + buffer.len() as u64;
            Ok(())
        })();
        let unlocked = appender.file.unlock();
        written.and(unlocked)
    }

    /// The whole log, as text (empty if it does not exist yet).
    ///
    /// # Errors
    ///
    /// The I/O error.
    pub fn read(&self) -> std::io::Result<String> {
        if let Some(shared) = &self.shared {
            return shared.read_from(0).map(|(text, _)| text);
        }
        match std::fs::read_to_string(&self.path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            other => other,
        }
    }

    /// The log from `offset` on (a byte offset in the file; a position in a shared store), and
    /// the offset of its end: for following it (0: from the start).
    ///
    /// # Errors
    ///
    /// The I/O error.
    pub fn read_from(&self, offset: u64) -> std::io::Result<(String, u64)> {
        if let Some(shared) = &self.shared {
            return shared.read_from(offset);
        }
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok((String::new(), 0)),
            Err(error) => return Err(error),
        };
        let length = file.metadata()?.len();
        if length <= offset {
            return Ok((String::new(), length));
        }
        file.seek(SeekFrom::Start(offset))?;
        let mut text = String::new();
        file.take(length - offset).read_to_string(&mut text)?;
        // Only whole lines: a writer may be half-way through one.
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        text.truncate(complete);
        Ok((text, offset + complete as u64))
    }
}

/// `records`, each with an id ([`Record::id`]) if it had none: 128 random bits, in hex.
fn identified(records: &[Record]) -> Vec<Record> {
    records
        .iter()
        .map(|record| {
            let mut record = record.clone();
            if record.id.is_none() {
                let mut bytes = [0_u8; 16];
                // Without randomness (never on Linux), the record goes without an id: sent
                // again, it may be kept twice.
                if rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).is_ok_and(|filled| filled == bytes.len()) {
                    record.id = Some(toolcell_audit::hex(&bytes));
                }
            }
            record
        })
        .collect()
}

/// The link after the log's last record.
fn last_link(file: &mut File) -> std::io::Result<Link> {
    let length = file.metadata()?.len();
    if length == 0 {
        return Ok(Link::GENESIS);
    }
    let mut chunk = TAIL_CHUNK;
    loop {
        let start = length.saturating_sub(chunk);
        file.seek(SeekFrom::Start(start))?;
        // Read in one go (a growing buffer would read it in a dozen pieces).
        let mut tail = Vec::with_capacity(usize::try_from(length - start).unwrap_or(0).saturating_add(1));
        (&mut *file).take(length - start).read_to_end(&mut tail)?;
        let text = String::from_utf8_lossy(&tail);
        let body = text.strip_suffix('\n').ok_or_else(|| corrupt("the log does not end with a complete line"))?;
        match body.rfind('\n') {
            Some(newline) => return Link::of_line(&body[newline + 1..]).map_err(|reason| corrupt(&reason)),
            None if start == 0 => return Link::of_line(body).map_err(|reason| corrupt(&reason)),
            None => chunk *= 4,
        }
    }
}

fn corrupt(reason: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("the audit log's last record is damaged ({reason}); run `toolcell audit verify`"),
    )
}

mod spool;

#[cfg(test)]
mod tests;

/// Whether an append to the shared store sends what waits in the spool first.
#[derive(Clone, Copy)]
enum Drain {
    Spool,
    /// Not now: the caller holds a lock other hosts wait on.
    Later,
}

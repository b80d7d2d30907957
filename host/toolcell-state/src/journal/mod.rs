//! Write-ahead journal of tool calls: the prior state of every path a call mutates, saved
//! before the mutation happens, so that the call can be undone byte for byte.
//!
//! Each runtime appends the journals of all its calls to one file of its own,
//! `journal/<pid>-<nonce>.jsonl` in the state directory, which it holds locked while it runs.
//! The file is made, and entered in the [`ledger`], when the runtime's first call begins to
//! change something: a runtime that only reads never touches the journal directory. A file holds
//! a call's first line (its workspace and session), one line per mutated path in order, and a
//! last line when it committed or was rolled back. Only a file too big to keep in its line
//! goes to a file of its own, under `journal/<pid>-<nonce>.blobs/<call-id>/`. So starting,
//! journaling and ending a call costs appends to an open file, no file created or removed.
//! Lines are synced together, only when durability asks for it and only before a change made
//! in place ([`Journal::make_durable`]): a whole-file rewrite goes to a temporary sibling
//! renamed over the file, so a call whose only change is one such rewrite never waits for its
//! journal to reach the disk.
//!
//! Every line carries an HMAC under the state directory's key (`state.key`, mode 0600), chained
//! to the file's name and to the line before, so a journal that this installation did not
//! write, or whose lines were moved, dropped or reordered, is never replayed; and only a file
//! the [`ledger`] lists is, so one is never replayed twice.
//!
//! A journal file that nobody holds locked belongs to a runtime that died; a runtime that
//! opens a workspace rolls back every call of that workspace in it that has no last line
//! ([`recovery`](crate::recovery)), then removes what it replayed. Rolling back replays a call's steps in reverse, each
//! restoring its path to the state it had just before its mutation: a removed file is rewritten
//! (temporary file, sync, rename, mode and times kept), a created file or directory is removed,
//! a moved directory is moved back, times a call set are set back. Replaying is idempotent, so a rollback interrupted by a crash is
//! simply replayed again.

mod landing;
pub(crate) mod ledger;
mod preserve;
mod replay;
mod times;

pub(crate) use landing::mark_landing;
pub use landing::{Landed, Rewrite};
pub use replay::{Replayed, restore};
pub(crate) use replay::{replay, unhex};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
pub use times::Times;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cap_std::fs::{Dir, PermissionsExt};
use hmac::Mac as _;
use serde::{Deserialize, Serialize};

pub(crate) use crate::dir::{BLOBS_EXTENSION, JOURNAL_EXTENSION};
/// A journal file with no call open is emptied once it is this big.
const COMPACT_BYTES: u64 = 1 << 20;
/// How often a call's rollback is tried before the call is left to recovery.
const ROLLBACK_ATTEMPTS: u32 = 12;
/// Tries of a rollback that fails for want of descriptors: about five more seconds.
const ROLLBACK_ATTEMPTS_SHORT: u32 = ROLLBACK_ATTEMPTS + 100;

/// Whether a step failed because the process (or the system) has no descriptor to spare:
/// `EMFILE` or `ENFILE`, as the replay's message gives the I/O error.
fn short_of_descriptors(failure: &str) -> bool {
    [rustix::io::Errno::MFILE, rustix::io::Errno::NFILE]
        .iter()
        .any(|errno| failure.contains(&std::io::Error::from_raw_os_error(errno.raw_os_error()).to_string()))
}
/// Files up to this size are saved inside their step.
const INLINE_BYTES: u64 = 16 * 1024;
/// Names the host reserves in a workspace for what a call has in flight: the name a whole-file
/// rewrite lands under (a rollback removes the ones its call left) and a rollback's own
/// temporary files. The guard refuses every call every access to a name starting with it.
pub const IN_FLIGHT_PREFIX: &str = ".toolcell-";
/// Prefix of the temporary files a rollback writes next to the file it restores.
pub const RESTORE_PREFIX: &str = ".toolcell-restore-";

/// What a path was before a mutation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Prior {
    /// Nothing was there.
    Absent,
    /// A small regular file, its content in the step itself (hex), so that saving it costs
    /// no file and no sync of its own.
    Inline {
        /// The content, hex-encoded.
        hex: String,
        /// The permission bits.
        mode: u32,
    },
    /// A regular file; its content is in the journal's blob `blob`.
    File {
        /// The blob's file name in the journal directory.
        blob: String,
        /// The permission bits.
        mode: u32,
    },
    /// A directory (necessarily empty when it is removed).
    Directory {
        /// The permission bits.
        mode: u32,
    },
    /// A symbolic link.
    Symlink {
        /// Its target, verbatim.
        target: String,
    },
    /// A directory that was renamed to `to` (undone by renaming it back).
    Moved {
        /// Where it went.
        to: String,
    },
    /// Only the times of what stands there (the object `identity` names) were about to change
    /// (`set-times`): they are in the step's `times`, put back on that object alone.
    Times {
        /// The object's birth time, where the file system keeps one: another object given the
        /// freed inode number since is not taken for it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        born: Option<(i64, u32)>,
    },
}

/// One mutated path and its prior state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The canonical workspace-relative path.
    pub path: String,
    /// What it was.
    pub prior: Prior,
    /// The device and inode of the file saved in `prior` (or, for [`Prior::Times`], of the
    /// object whose times are saved): a rollback leaves a file that is still that inode, with
    /// that mode and content, exactly as it is (the call journaled it but never changed it),
    /// instead of rewriting it as a new file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<(u64, u64)>,
    /// Taken before the path was written through a new file that replaces it whole (renamed
    /// over it): until that file is put in place, the call has not changed the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Rewrite>,
    /// The access and modification times of the file saved in `prior` (its copy a rollback
    /// makes gets them back), or, for [`Prior::Times`], of the object whose times changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<Times>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Header {
    pub(crate) version: u32,
    /// The workspace's canonical host path (the state directory is the operator's).
    pub(crate) workspace: PathBuf,
    pub(crate) call_id: String,
    pub(crate) session: String,
}

/// The key journal lines are authenticated with.
pub type JournalKey = [u8; crate::storage::KEY_BYTES];

type LineMac = hmac::Hmac<sha2::Sha256>;

/// One line of a journal file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Line {
    /// A call's first line.
    Begin(Header),
    /// The prior state of one path the call is about to mutate.
    Step { call: String, step: Step },
    /// The call is about to put the new content of these paths in place, as these files (their
    /// rewrite steps are then to be replayed).
    Landing { call: String, files: Vec<(String, Landed)> },
    /// The call committed or was rolled back: nothing of it is to be replayed.
    End { call: String },
}

/// What each line's tag is bound to besides its own content: the journal file's name, and the
/// tag of the line before it in the file (none for the first).
#[derive(Debug, Clone)]
pub(crate) struct Chain {
    stem: String,
    previous: Option<Vec<u8>>,
}

impl Chain {
    /// The chain of a new (or emptied) file named `<stem>.jsonl`.
    pub fn new(stem: &str) -> Chain {
        Chain { stem: stem.to_owned(), previous: None }
    }

    /// The line with tag `tag` was written: the next one follows it.
    pub fn previous_is(&mut self, tag: Vec<u8>) {
        self.previous = Some(tag);
    }
}

impl Line {
    /// The line as written next in `chain`'s file: JSON, a tab, the HMAC (hex) under `key` of
    /// the JSON, the file's name and the line before, a newline; with the tag, which the
    /// caller puts in `chain` once the line is written. (Compact JSON never holds a raw tab.)
    pub(crate) fn encode(&self, key: &JournalKey, chain: &Chain) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
        let mut bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        let tag = line_mac(key, chain, &bytes).finalize().into_bytes().to_vec();
        bytes.push(b'\t');
        bytes.extend_from_slice(crate::storage::hex(&tag).as_bytes());
        bytes.push(b'\n');
        Ok((bytes, tag))
    }

    /// The next line of `chain`'s file as [`encode`](Self::encode) wrote it (without its
    /// newline). `Ok(None)` for a line cut short (a crash while it was written: its mutation
    /// never started); an error for a line whose tag does not match: the file was not written
    /// by this installation, or was changed since.
    pub(crate) fn decode(key: &JournalKey, chain: &mut Chain, text: &str) -> Result<Option<Line>, ()> {
        let Some((json, tag)) = text.rsplit_once('\t') else {
            return Ok(None);
        };
        let Ok(tag) = unhex(tag) else {
            return Ok(None);
        };
        if tag.len() != 32 {
            return Ok(None);
        }
        line_mac(key, chain, json.as_bytes()).verify_slice(&tag).map_err(|_| ())?;
        chain.previous = Some(tag);
        serde_json::from_str(json).map(Some).map_err(|_| ())
    }
}

fn line_mac(key: &JournalKey, chain: &Chain, json: &[u8]) -> LineMac {
    use hmac::KeyInit as _;
    let mut mac = LineMac::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(b"toolcell journal line\0");
    mac.update(chain.stem.as_bytes());
    mac.update(b"\0");
    match &chain.previous {
        Some(previous) => {
            mac.update(&[1]);
            mac.update(previous);
        }
        None => mac.update(&[0]),
    }
    mac.update(json);
    mac
}

/// The journal file as its writers share it.
#[derive(Debug)]
struct OpenJournal {
    /// Append-only, locked while the [`JournalFile`] lives; made when the first call begins.
    file: Option<File>,
    /// Calls that began and have not ended in it.
    open_calls: usize,
    /// The chain its next line continues.
    chain: Chain,
}

/// The journal file of one runtime, shared by its calls.
#[derive(Debug)]
pub struct JournalFile {
    /// `<stem>.jsonl` in the journal directory.
    path: PathBuf,
    /// `<stem>.blobs`: one directory per call that saved blobs.
    blobs: PathBuf,
    /// The file, the calls open in it, and the chain its next line continues.
    file: Mutex<OpenJournal>,
    /// Whether the file's directory entry has been synced.
    listed: AtomicBool,
    /// What its lines are authenticated with.
    key: JournalKey,
}

impl JournalFile {
    /// This runtime's journal file in `journals`, its lines authenticated with `key`. Nothing is
    /// written yet: the file is made, locked and entered in the ledger when the first call
    /// begins ([`Journal::begin`]), so a runtime that only reads costs no file and no sync.
    ///
    /// # Errors
    ///
    /// Whatever creating the journal directory (private) or drawing the file's random name
    /// fails with.
    pub fn create(journals: &Path, key: JournalKey) -> std::io::Result<Arc<JournalFile>> {
        crate::storage::create_private_dirs(journals)?;
        let mut nonce = [0u8; 8];
        rustix::rand::getrandom(&mut nonce, rustix::rand::GetRandomFlags::empty())?;
        let stem = format!("{}-{}", std::process::id(), crate::storage::hex(&nonce));
        Ok(Arc::new(JournalFile {
            path: journals.join(format!("{stem}.{JOURNAL_EXTENSION}")),
            blobs: journals.join(format!("{stem}.{BLOBS_EXTENSION}")),
            file: Mutex::new(OpenJournal { file: None, open_calls: 0, chain: Chain::new(&stem) }),
            listed: AtomicBool::new(false),
            key,
        }))
    }

    /// Make the file, lock it and enter it in the ledger. The ledger's new directory entry is
    /// synced with the file's own, by the first [`sync`](Self::sync): that is before any line
    /// of it is relied on (a call that never syncs its journal is one a crash leaves whole
    /// without it).
    fn open(&self, stem: &str) -> std::io::Result<File> {
        let journals = self.path.parent().unwrap_or(Path::new("."));
        let file = crate::storage::private_file().create_new(true).read(true).append(true).open(&self.path)?;
        // Recovery in another process takes an unlocked journal file for a dead runtime's;
        // this one is empty until locked, so that recovery would find nothing to undo in it.
        file.lock()?;
        // Only a file the ledger lists is ever replayed.
        let entered = ledger::Entry::of(stem, &file)
            .and_then(|entry| ledger::update(journals, &self.key, ledger::Sync::File, |open| open.push(entry)));
        if let Err(error) = entered {
            let _ = std::fs::remove_file(&self.path);
            return Err(error);
        }
        Ok(file)
    }

    fn append(&self, line: &Line, opens: bool) -> std::io::Result<()> {
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (bytes, tag) = line.encode(&self.key, &file.chain)?;
        let open = match &mut file.file {
            Some(open) => open,
            None => {
                let stem = file.chain.stem.clone();
                file.file.insert(self.open(&stem)?)
            }
        };
        open.write_all(&bytes)?;
        file.chain.previous_is(tag);
        if opens {
            file.open_calls += 1;
        }
        Ok(())
    }

    /// Append a call's last line; once no call is open, a big file is emptied.
    fn end(&self, call: &str) {
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Ok((bytes, tag)) = (Line::End { call: call.to_owned() }).encode(&self.key, &file.chain) else {
            return;
        };
        let file = &mut *file;
        let Some(open) = file.file.as_mut() else {
            return;
        };
        // Best effort, as the commit it records: the call's changes stand either way; without
        // this line a crash before the file is emptied would roll the call back at restart.
        if open.write_all(&bytes).is_ok() {
            file.chain.previous_is(tag);
        }
        file.open_calls = file.open_calls.saturating_sub(1);
        if file.open_calls == 0 && open.metadata().is_ok_and(|metadata| metadata.len() > COMPACT_BYTES) && open.set_len(0).is_ok() {
            file.chain.previous = None;
        }
    }

    fn sync(&self) -> std::io::Result<()> {
        if let Some(file) = &self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner).file {
            file.sync_data()?;
        }
        // The file's directory entry, and the ledger's rename that entered it (same directory).
        if !self.listed.load(Ordering::Acquire) {
            if let Some(journals) = self.path.parent() {
                File::open(journals)?.sync_all()?;
            }
            self.listed.store(true, Ordering::Release);
        }
        Ok(())
    }
}

impl Drop for JournalFile {
    fn drop(&mut self) {
        // Every call has ended (the runtime is gone): nothing in it is to be replayed.
        let Ok(file) = self.file.get_mut() else {
            return;
        };
        // A runtime whose calls never changed anything made no file.
        if file.open_calls == 0 && file.file.is_some() {
            let stem = file.chain.stem.clone();
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_dir_all(&self.blobs);
            // A copy of the file put back later is not replayed. Not synced to the directory: a
            // power loss that loses this rename leaves the entry of a file whose calls all ended
            // (nothing to replay), or of one removed (only that very inode would be replayed).
            if let Some(journals) = self.path.parent() {
                let _ = ledger::update(journals, &self.key, ledger::Sync::File, |entries| entries.retain(|entry| entry.stem != stem));
            }
        }
    }
}

/// The journal of one running call.
#[derive(Debug)]
pub struct Journal {
    file: Arc<JournalFile>,
    call_id: String,
    /// `<journal file stem>.blobs/<call-id>`, made when the first blob is saved.
    blob_dir: PathBuf,
    steps: Vec<Step>,
    blobs: u64,
    /// Whether steps must reach the disk before the changes they guard (`durability = "full"`).
    syncs: bool,
    /// Lines written since the last sync, and the blobs they saved, not yet synced.
    unsynced: bool,
    unsynced_blobs: Vec<File>,
    /// When saving a file is given up: the call's deadline.
    deadline: Option<std::time::Instant>,
    /// The objects (path, device and inode) whose times are saved already.
    times_saved: std::collections::HashSet<(String, (u64, u64))>,
}

impl Journal {
    /// Start the journal of `call_id` in `file`. With `syncs`, its steps are synced by
    /// [`make_durable`](Self::make_durable).
    ///
    /// # Errors
    ///
    /// Whatever appending the call's first line fails with.
    pub fn begin(file: &Arc<JournalFile>, call_id: &str, session: &str, workspace: &Path, syncs: bool) -> std::io::Result<Journal> {
        let header = Header { version: 2, workspace: workspace.to_path_buf(), call_id: call_id.to_owned(), session: session.to_owned() };
        file.append(&Line::Begin(header), true)?;
        Ok(Journal {
            file: Arc::clone(file),
            call_id: call_id.to_owned(),
            blob_dir: file.blobs.join(call_id),
            steps: Vec::new(),
            blobs: 0,
            syncs,
            unsynced: true,
            unsynced_blobs: Vec::new(),
            deadline: None,
            times_saved: std::collections::HashSet::new(),
        })
    }

    /// Give up saving a file's content once `deadline` passes (the save fails `TimedOut`, and
    /// the change it guards is not made).
    pub fn until(&mut self, deadline: Option<std::time::Instant>) {
        self.deadline = deadline;
    }

    /// Put every step written so far on the disk (blobs, the journal file, and once their
    /// directory entries), if durability asks for it: called before a change made in place,
    /// which a crash could leave half done without the journal to roll it back.
    ///
    /// # Errors
    ///
    /// Whatever syncing the journal (and its blobs) fails with.
    pub fn make_durable(&mut self) -> std::io::Result<()> {
        if !self.syncs || !self.unsynced {
            return Ok(());
        }
        if !self.unsynced_blobs.is_empty() {
            for blob in self.unsynced_blobs.drain(..) {
                blob.sync_data()?;
            }
            File::open(&self.blob_dir)?.sync_all()?;
            File::open(&self.file.blobs)?.sync_all()?;
        }
        self.file.sync()?;
        self.unsynced = false;
        Ok(())
    }

    /// How many steps the journal holds.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether the journal holds no step yet.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Record that the directory `from` is about to be renamed to `to`.
    ///
    /// # Errors
    ///
    /// Whatever appending the step fails with; the move must not go ahead then.
    pub fn preserve_move(&mut self, from: &str, to: &str) -> std::io::Result<()> {
        self.append(Step { path: from.to_owned(), prior: Prior::Moved { to: to.to_owned() }, identity: None, rewrite: None, times: None })
    }

    fn append(&mut self, step: Step) -> std::io::Result<()> {
        let line = Line::Step { call: self.call_id.clone(), step };
        self.file.append(&line, false)?;
        self.unsynced = true;
        if let Line::Step { step, .. } = line {
            self.steps.push(step);
        }
        Ok(())
    }

    /// Undo every step, newest first: [`rollback_leaving`](Self::rollback_leaving), the number
    /// of steps undone.
    ///
    /// # Errors
    ///
    /// The first step that could not be restored (the call is then left to recovery).
    pub fn rollback(self, root: &Dir) -> Result<usize, String> {
        self.rollback_leaving(root).map(|(count, _)| count)
    }

    /// Undo every step, newest first, leaving what others made meanwhile ([`Replayed`]). On
    /// success the call's journal is ended; on failure it stays open in the runtime's journal
    /// file, for the next start to replay once this runtime is gone, and the error names the
    /// path that could not be restored.
    ///
    /// # Errors
    ///
    /// The first step that could not be restored (the call is then left to recovery).
    pub fn rollback_leaving(self, root: &Dir) -> Result<(usize, Replayed), String> {
        // A restore refuses to act through a symlink; another program that swaps a directory on
        // the way for one does so for a moment. The replay is idempotent, so it is tried again
        // a little later, a few times, before the call is left to recovery.
        // Out of descriptors (the process's limit met by connections or other calls) passes
        // too, but not that fast: a few more seconds for it, before writes stop.
        let mut pause = std::time::Duration::from_millis(1);
        let mut attempts = 1;
        let replayed = loop {
            match replay(root, &self.blob_dir, &self.call_id, &self.steps) {
                Ok(replayed) => break replayed,
                Err(failure)
                    if attempts >= ROLLBACK_ATTEMPTS && !(short_of_descriptors(&failure) && attempts < ROLLBACK_ATTEMPTS_SHORT) =>
                {
                    return Err(failure);
                }
                Err(_) => {}
            }
            attempts += 1;
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(50));
        };
        let count = self.steps.len();
        self.file.end(&self.call_id);
        if self.blobs > 0 {
            let _ = std::fs::remove_dir_all(&self.blob_dir);
        }
        Ok((count, replayed))
    }

    /// Leave `paths` as they are at a rollback: another session changed them since this call
    /// put them in place (or made them again since this call removed them), and what it made
    /// must not be undone with this call.
    pub fn leave_as_they_are(&mut self, paths: &[String]) {
        self.steps.retain(|step| !paths.contains(&step.path));
    }

    /// The steps saved so far, oldest first.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The directory of the blobs the call saved, if it saved any.
    pub fn blob_dir(&self) -> Option<&Path> {
        (self.blobs > 0).then_some(self.blob_dir.as_path())
    }

    /// Keep the call's changes: end its journal (so that a crash from here on leaves nothing
    /// of it to replay). Returns the steps and the blob directory, if the call saved blobs,
    /// which the caller removes when it has taken what it wants from it.
    pub fn commit(self) -> (Vec<Step>, Option<PathBuf>) {
        self.file.end(&self.call_id);
        (self.steps, (self.blobs > 0).then_some(self.blob_dir))
    }
}

#[cfg(test)]
mod tests;

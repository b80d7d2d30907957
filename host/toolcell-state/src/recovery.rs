//! Rolling back the calls a runtime that died left open, one workspace at a time.
//!
//! A journal file nobody holds locked belongs to a runtime that died. A runtime replays the
//! open calls in it only for a workspace it is opening itself, and only lines whose HMAC
//! verifies under the state directory's key: a journal planted by someone else (naming any
//! directory as its workspace and any file as its path) is never replayed, and the calls of
//! other workspaces wait for a runtime that opens those.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};

use cap_std::fs::Dir;

use crate::journal::ledger::{self, Ledger};
use crate::journal::{BLOBS_EXTENSION, Chain, Header, JOURNAL_EXTENSION, JournalKey, Line, Step, replay};

/// What the recovery of one journal found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The interrupted call (empty when the journal could not be trusted to say).
    pub call_id: String,
    /// Its session.
    pub session: String,
    /// The workspace's canonical directory (empty when the journal did not say).
    pub workspace: PathBuf,
    /// Steps undone.
    pub steps: usize,
    /// What happened.
    pub kind: RecoveryKind,
    /// Why it was not rolled back, for the operator (host paths included), or `None`.
    pub error: Option<String>,
    /// Directories the call made that another session (or program) put something in since:
    /// left in place by the rollback, with what is in them (workspace-relative).
    pub left: Vec<String>,
    /// Paths the call removed that were not put back: another session (or program) put a file
    /// or symlink where a directory on their way was, and that is left as it is.
    pub unrestored: Vec<String>,
}

/// What recovery did with one interrupted call, or one journal file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryKind {
    /// The call was rolled back.
    RolledBack,
    /// It could not be: the journal is kept to try again at the next start, and writes to the
    /// workspace stop until then.
    Failed,
    /// The journal file does not verify (planted, forged, truncated in the middle, moved, or
    /// put in place of the one this installation wrote): nothing in it was replayed, and writes
    /// to the workspace stop until the operator has inspected and removed it.
    Unverified,
    /// A journal this installation wrote that was already replayed or ended (a copy put back):
    /// not replayed again, only reported.
    Replayed,
}

impl RecoveryKind {
    /// Whether a workspace with this recovery may be written no more: something in it may be
    /// half done, and only the operator can tell.
    pub fn stops_writes(self) -> bool {
        matches!(self, RecoveryKind::Failed | RecoveryKind::Unverified)
    }
}

/// Roll back every call in `workspace` (canonical) that a runtime which died left open, in
/// each journal file of `journals` nobody holds locked and the ledger lists. Journals of
/// runtimes still running, here or in other processes, and calls in other workspaces are left
/// alone; a journal file that does not verify under `key`, or that the ledger does not list
/// (a copy of one already replayed), is left alone and reported when it names this workspace
/// (or names none that can be read).
pub fn recover(journals: &Path, key: &JournalKey, workspace: &Path) -> Vec<Recovery> {
    let Ok(entries) = std::fs::read_dir(journals) else {
        return Vec::new();
    };
    let ledger = ledger::read(journals, key);
    let mut recovered = Vec::new();
    let mut blob_dirs = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(&format!(".{BLOBS_EXTENSION}")) {
            blob_dirs.push(path);
            continue;
        }
        let Some(stem) = name.strip_suffix(&format!(".{JOURNAL_EXTENSION}")) else {
            continue;
        };
        // A regular file of this user's only, never through a link.
        let Ok(file) = OpenOptions::new().read(true).write(true).custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32).open(&path)
        else {
            continue;
        };
        if !file.metadata().is_ok_and(|metadata| {
            metadata.is_file() && std::os::unix::fs::MetadataExt::uid(&metadata) == rustix::process::geteuid().as_raw()
        }) {
            continue;
        }
        if file.try_lock().is_err() {
            continue;
        }
        recovered.extend(recover_file(journals, &path, stem, &file, key, &ledger, workspace));
    }
    // Blobs whose journal file is gone belong to ended calls.
    for blob_dir in blob_dirs {
        if !blob_dir.with_extension(JOURNAL_EXTENSION).exists() {
            let _ = std::fs::remove_dir_all(&blob_dir);
        }
    }
    recovered
}

use std::os::unix::fs::OpenOptionsExt as _;

/// The calls of a journal file, read and checked.
enum Read {
    /// Every line verifies: the calls left open, in order.
    Verified(Vec<(Header, Vec<Step>)>),
    /// Some line does not: what its lines claim as workspaces, for telling whom to stop.
    Unverified(Vec<PathBuf>),
}

/// Read the journal file `file` named `<stem>.jsonl`.
fn read(file: &File, stem: &str, key: &JournalKey) -> Read {
    let mut chain = Chain::new(stem);
    let mut open: Vec<(Header, Vec<Step>)> = Vec::new();
    let lines: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    let claimed = || {
        lines
            .iter()
            .filter_map(|line| line.rsplit_once('\t').map_or(Some(line.as_str()), |(json, _)| Some(json)))
            .filter_map(|json| match serde_json::from_str::<Line>(json) {
                Ok(Line::Begin(header)) => Some(header.workspace),
                _ => None,
            })
            .collect()
    };
    for (index, text) in lines.iter().enumerate() {
        let line = match Line::decode(key, &mut chain, text) {
            Ok(Some(line)) => line,
            // A torn last line is a step whose mutation never started (each line is written
            // first); a torn line with lines after it is no crash's.
            Ok(None) if index + 1 == lines.len() => break,
            Ok(None) | Err(()) => return Read::Unverified(claimed()),
        };
        match line {
            Line::Begin(header) => open.push((header, Vec::new())),
            Line::Step { call, step } => {
                if let Some((_, steps)) = open.iter_mut().rev().find(|(header, _)| header.call_id == call) {
                    steps.push(step);
                }
            }
            Line::Landing { call, files } => {
                if let Some((_, steps)) = open.iter_mut().rev().find(|(header, _)| header.call_id == call) {
                    crate::journal::mark_landing(steps, &files);
                }
            }
            Line::End { call } => open.retain(|(header, _)| header.call_id != call),
        }
    }
    Read::Verified(open)
}

/// Roll back the calls in `workspace` left open in the journal file `path` (locked by this
/// process through `file`), if the ledger lists it. The file is removed, and taken out of the
/// ledger, when nothing in it is left to roll back; else the calls still to be rolled back
/// (failed ones, and other workspaces') go to a new file, entered in the ledger in its place,
/// so that none is ever replayed twice.
fn recover_file(
    journals: &Path,
    path: &Path,
    stem: &str,
    file: &File,
    key: &JournalKey,
    ledger: &Ledger,
    workspace: &Path,
) -> Vec<Recovery> {
    let blobs = path.with_extension(BLOBS_EXTENSION);
    let report = |kind, error: String| Recovery {
        call_id: String::new(),
        session: String::new(),
        workspace: workspace.to_path_buf(),
        steps: 0,
        kind,
        error: Some(error),
        left: Vec::new(),
        unrestored: Vec::new(),
    };
    let unverified = |why: &str| {
        report(
            RecoveryKind::Unverified,
            format!(
                "the journal `{}` {why}, so nothing in it was replayed; writes to this workspace stop until the operator has inspected the workspace and removed that file",
                path.display()
            ),
        )
    };
    let listed = ledger.entry(stem);
    let open = match read(file, stem, key) {
        Read::Unverified(claimed) => {
            if claimed.is_empty() || claimed.iter().any(|claimed| claimed == workspace) {
                return vec![unverified(
                    "does not verify under this state directory's key (it was not written by this installation, or was changed, cut or moved since)",
                )];
            }
            return Vec::new();
        }
        Read::Verified(open) => open,
    };
    if open.is_empty() {
        // Every call in it ended (a runtime that exited without dropping its journal): nothing
        // in it is to be replayed, whoever lists it.
        if ledger::update(journals, key, ledger::Sync::Directory, |entries| entries.retain(|entry| entry.stem != stem)).is_ok() {
            let _ = std::fs::remove_file(path);
            let _ = std::fs::remove_dir_all(&blobs);
        }
        return Vec::new();
    }
    if !open.iter().any(|(header, _)| header.workspace == workspace) {
        return Vec::new();
    }
    match (ledger, listed) {
        (Ledger::Unverified, _) => {
            return vec![unverified(
                "cannot be checked against the journal ledger, which does not verify under this state directory's key",
            )];
        }
        (_, None) if Ledger::was_set_aside(journals) => {
            return vec![unverified(
                "is not in the journal ledger, and a ledger that did not verify was set aside beside it (`ledger.unverified`; remove that too once inspected)",
            )];
        }
        (_, None) => {
            return vec![report(
                RecoveryKind::Replayed,
                format!(
                    "the journal `{}` was already rolled back or ended, and a copy of it was put back: it was not replayed again. Remove that file",
                    path.display()
                ),
            )];
        }
        (_, Some(entry)) if ledger::Entry::of(stem, file).ok().as_ref() != Some(entry) => {
            return vec![unverified("is not the file this installation wrote under that name (it was replaced)")];
        }
        _ => {}
    }
    let mut recovered = Vec::new();
    let mut kept = Vec::new();
    for (header, steps) in open {
        if header.workspace != workspace {
            kept.push((header, steps));
            continue;
        }
        let blob_dir = blobs.join(&header.call_id);
        let recovery = roll_back(&header, &steps, &blob_dir);
        if recovery.error.is_some() {
            kept.push((header, steps));
        } else {
            let _ = std::fs::remove_dir_all(&blob_dir);
        }
        recovered.push(recovery);
    }
    if kept.is_empty() {
        // Out of the ledger first: a crash in between leaves a file that is reported, never
        // one replayed again.
        if ledger::update(journals, key, ledger::Sync::Directory, |entries| entries.retain(|entry| entry.stem != stem)).is_ok() {
            let _ = std::fs::remove_file(path);
            let _ = std::fs::remove_dir_all(&blobs);
        }
    } else {
        keep(journals, path, stem, key, kept);
    }
    recovered
}

/// Put the calls `kept` of the journal file `path` in a new journal file, which takes the old
/// one's place in the ledger (their blobs move with them); the old file is then removed. If
/// that cannot be done, the old file stays as it is (and its calls are tried again).
fn keep(journals: &Path, path: &Path, stem: &str, key: &JournalKey, kept: Vec<(Header, Vec<Step>)>) {
    let mut nonce = [0u8; 8];
    if rustix::rand::getrandom(&mut nonce, rustix::rand::GetRandomFlags::empty()).is_err() {
        return;
    }
    let new_stem = format!("{}-{}", std::process::id(), crate::storage::hex(&nonce));
    let mut chain = Chain::new(&new_stem);
    let mut bytes = Vec::new();
    for (header, steps) in kept {
        let call = header.call_id.clone();
        let lines = std::iter::once(Line::Begin(header)).chain(steps.into_iter().map(|step| Line::Step { call: call.clone(), step }));
        for line in lines {
            let Ok((encoded, tag)) = line.encode(key, &chain) else {
                return;
            };
            bytes.extend_from_slice(&encoded);
            chain.previous_is(tag);
        }
    }
    let new_path = journals.join(format!("{new_stem}.{JOURNAL_EXTENSION}"));
    let written = crate::storage::private_file()
        .write(true)
        .create_new(true)
        .open(&new_path)
        .and_then(|mut rewrite| rewrite.write_all(&bytes).and_then(|()| rewrite.sync_all()).map(|()| rewrite))
        .and_then(|rewrite| ledger::Entry::of(&new_stem, &rewrite));
    let Ok(entry) = written else {
        let _ = std::fs::remove_file(&new_path);
        return;
    };
    let old_blobs = path.with_extension(BLOBS_EXTENSION);
    let new_blobs = new_path.with_extension(BLOBS_EXTENSION);
    if old_blobs.exists() && std::fs::rename(&old_blobs, &new_blobs).is_err() {
        let _ = std::fs::remove_file(&new_path);
        return;
    }
    let swapped = ledger::update(journals, key, ledger::Sync::Directory, |entries| {
        entries.retain(|entry| entry.stem != stem);
        entries.push(entry);
    });
    if swapped.is_ok() {
        let _ = std::fs::remove_file(path);
    } else {
        let _ = std::fs::rename(&new_blobs, &old_blobs);
        let _ = std::fs::remove_file(&new_path);
    }
}

/// Replay one open call's steps in its workspace.
fn roll_back(header: &Header, steps: &[Step], blob_dir: &Path) -> Recovery {
    let mut recovery = Recovery {
        call_id: header.call_id.clone(),
        session: header.session.clone(),
        workspace: header.workspace.clone(),
        steps: steps.len(),
        kind: RecoveryKind::RolledBack,
        error: None,
        left: Vec::new(),
        unrestored: Vec::new(),
    };
    match Dir::open_ambient_dir(&header.workspace, cap_std::ambient_authority()) {
        Ok(root) => {
            // Putting names back is a namespace change like any other: judged against by no
            // other call (of any process) while it is half done.
            let namespace = crate::NamespaceLock::acquire(&root);
            match replay(&root, blob_dir, &recovery.call_id, steps) {
                Ok(replayed) => (recovery.left, recovery.unrestored) = (replayed.left, replayed.unrestored),
                Err(error) => {
                    recovery.kind = RecoveryKind::Failed;
                    recovery.error = Some(format!(
                        "the call `{}` could not be rolled back ({error}); writes to this workspace stop until it is: the next start tries again, or the operator restores the workspace and removes the journal",
                        recovery.call_id
                    ));
                }
            }
            drop(namespace);
        }
        Err(error) => {
            recovery.kind = RecoveryKind::Failed;
            recovery.error = Some(format!("the workspace `{}` cannot be opened: {error}", header.workspace.display()));
        }
    }
    recovery
}

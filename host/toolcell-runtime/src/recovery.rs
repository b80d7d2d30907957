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

use crate::journal::{BLOBS_EXTENSION, Header, JOURNAL_EXTENSION, JournalKey, Line, Step, replay};

/// What the recovery of one journal found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The interrupted call.
    pub call_id: String,
    /// Its session.
    pub session: String,
    /// The workspace's canonical directory (empty when the journal did not say).
    pub workspace: PathBuf,
    /// Steps undone.
    pub steps: usize,
    /// Why it could not be rolled back (the journal is kept to try again), or `None`.
    pub error: Option<String>,
}

/// Roll back every call in `workspace` (canonical) that a runtime which died left open, in
/// each journal file of `journals` nobody holds locked. Journals of runtimes still running,
/// here or in other processes, and calls in other workspaces are left alone; a journal file
/// whose lines do not verify under `key` is left alone and reported.
pub(crate) fn recover(journals: &Path, key: &JournalKey, workspace: &Path) -> Vec<Recovery> {
    let Ok(entries) = std::fs::read_dir(journals) else {
        return Vec::new();
    };
    let mut recovered = Vec::new();
    let mut blob_dirs = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(&format!(".{BLOBS_EXTENSION}")) {
            blob_dirs.push(path);
            continue;
        }
        if !name.ends_with(&format!(".{JOURNAL_EXTENSION}")) {
            continue;
        }
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
        recovered.extend(recover_file(&path, &file, key, workspace));
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

/// Roll back the calls in `workspace` left open in the journal file `path` (locked by this
/// process through `file`). The file is removed when nothing in it is left to roll back; else
/// it is rewritten to hold only the calls still to be rolled back (failed ones, and other
/// workspaces'), so that none is ever replayed twice.
fn recover_file(path: &Path, file: &File, key: &JournalKey, workspace: &Path) -> Vec<Recovery> {
    let blobs = path.with_extension(BLOBS_EXTENSION);
    let mut open: Vec<(Header, Vec<Step>)> = Vec::new();
    for line in BufReader::new(file).lines().map_while(Result::ok) {
        let line = match Line::decode(key, &line) {
            Ok(Some(line)) => line,
            // A torn last line is a step whose mutation never started (each line is written
            // first).
            Ok(None) => break,
            Err(()) => {
                let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
                return vec![Recovery {
                    call_id: String::new(),
                    session: String::new(),
                    workspace: PathBuf::new(),
                    steps: 0,
                    error: Some(format!(
                        "the journal `{name}` does not verify under this state directory's key (it was not written by this installation, or was changed since), so nothing in it was replayed; remove it"
                    )),
                }];
            }
        };
        match line {
            Line::Begin(header) => open.push((header, Vec::new())),
            Line::Step { call, step } => {
                if let Some((_, steps)) = open.iter_mut().rev().find(|(header, _)| header.call_id == call) {
                    steps.push(step);
                }
            }
            Line::End { call } => open.retain(|(header, _)| header.call_id != call),
        }
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
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_dir_all(&blobs);
    } else {
        let mut bytes = Vec::new();
        for (header, steps) in kept {
            let call = header.call_id.clone();
            let lines = std::iter::once(Line::Begin(header)).chain(steps.into_iter().map(|step| Line::Step { call: call.clone(), step }));
            for line in lines {
                if let Ok(encoded) = line.encode(key) {
                    bytes.extend_from_slice(&encoded);
                }
            }
        }
        let temporary = path.with_extension("rewrite");
        let rewritten = crate::storage::private_file()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)
            .and_then(|mut rewrite| rewrite.write_all(&bytes).and_then(|()| rewrite.sync_all()))
            .and_then(|()| std::fs::rename(&temporary, path));
        if rewritten.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
    }
    recovered
}

/// Replay one open call's steps in its workspace.
fn roll_back(header: &Header, steps: &[Step], blob_dir: &Path) -> Recovery {
    let mut recovery = Recovery {
        call_id: header.call_id.clone(),
        session: header.session.clone(),
        workspace: header.workspace.clone(),
        steps: steps.len(),
        error: None,
    };
    match Dir::open_ambient_dir(&header.workspace, cap_std::ambient_authority()) {
        Ok(root) => {
            // Putting names back is a namespace change like any other: judged against by no
            // other call (of any process) while it is half done.
            let namespace = crate::guard::NamespaceLock::acquire(&root);
            if let Err(error) = replay(&root, blob_dir, &recovery.call_id, steps) {
                recovery.error = Some(error);
            }
            drop(namespace);
        }
        Err(error) => recovery.error = Some(format!("the workspace `{}` cannot be opened: {error}", header.workspace.display())),
    }
    recovery
}

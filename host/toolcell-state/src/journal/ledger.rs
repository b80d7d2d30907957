//! Which journal files may be replayed: the ledger `journal/ledger`, authenticated under the
//! state key, lists the journal files of runtimes that are running or that died with calls
//! open, each with its device and inode.
//!
//! A runtime enters its journal file when it creates it and takes it out when it ends with no
//! call open; recovery takes a file out once it replayed it (the calls it keeps for other
//! workspaces go to a new file, entered in the same update). Recovery replays only a file the
//! ledger lists, as that very inode: a journal copied back after it was replayed or ended (by
//! anyone: a component that reached the state directory, a backup, another program) is not in
//! the ledger, and a file put in place of a listed one is another inode. Every line of a
//! journal file is chained to the line before and to the file's name ([`Chain`](super::Chain)),
//! so lines cannot be moved between files, dropped from the middle or reordered either.

use std::fs::File;
use std::io::Write as _;
use std::path::Path;

use hmac::Mac as _;
use serde::{Deserialize, Serialize};

use super::JournalKey;

use crate::dir::{LEDGER_FILE as LEDGER, LEDGER_LOCK_FILE as LEDGER_LOCK, LEDGER_SET_ASIDE_FILE as SET_ASIDE};

/// One journal file that may be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The file's name without its extension (`<pid>-<nonce>`).
    pub(crate) stem: String,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

impl Entry {
    /// The entry of the open journal file `file` named `<stem>.jsonl`.
    pub(crate) fn of(stem: &str, file: &File) -> std::io::Result<Entry> {
        use std::os::unix::fs::MetadataExt as _;
        let metadata = file.metadata()?;
        Ok(Entry { stem: stem.to_owned(), dev: metadata.dev(), ino: metadata.ino() })
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Content {
    open: Vec<Entry>,
}

/// What the ledger holds.
#[derive(Debug)]
pub(crate) enum Ledger {
    /// It verifies: these files may be replayed.
    Verified(Vec<Entry>),
    /// There is none (a new state directory): no file may be replayed.
    Missing,
    /// It does not verify under the state key: no file may be replayed, and every journal is
    /// reported as one that does not verify.
    Unverified,
}

impl Ledger {
    /// Whether a ledger that did not verify was set aside in `journals` and is still there
    /// (the operator removes it after inspecting the journals).
    pub(crate) fn was_set_aside(journals: &Path) -> bool {
        journals.join(SET_ASIDE).exists()
    }

    /// The entry for `stem`, if the ledger verifies and lists it.
    pub(crate) fn entry(&self, stem: &str) -> Option<&Entry> {
        match self {
            Ledger::Verified(entries) => entries.iter().find(|entry| entry.stem == stem),
            Ledger::Missing | Ledger::Unverified => None,
        }
    }
}

fn mac(key: &JournalKey, json: &[u8]) -> hmac::Hmac<sha2::Sha256> {
    use hmac::KeyInit as _;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(b"toolcell journal ledger\0");
    mac.update(json);
    mac
}

/// Read the ledger of the journal directory `journals`.
pub(crate) fn read(journals: &Path, key: &JournalKey) -> Ledger {
    let text = match std::fs::read_to_string(journals.join(LEDGER)) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ledger::Missing,
        Err(_) => return Ledger::Unverified,
        Ok(text) => text,
    };
    let Some((json, tag)) = text.trim_end_matches('\n').rsplit_once('\t') else {
        return Ledger::Unverified;
    };
    let verified = super::unhex(tag).is_ok_and(|tag| mac(key, json.as_bytes()).verify_slice(&tag).is_ok());
    match serde_json::from_str::<Content>(json) {
        Ok(content) if verified => Ledger::Verified(content.open),
        _ => Ledger::Unverified,
    }
}

/// How far [`update`] syncs the ledger before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sync {
    /// The new content only, so that the ledger is never found torn (one that does not
    /// verify stops writes); its rename reaches the disk with the next sync of the journal
    /// directory. A runtime enters its file so (its journal's first sync, before any line is
    /// relied on, syncs that directory), and takes it out so on exit.
    File,
    /// The content and the rename: recovery, which removes or replaces files the ledger lists.
    Directory,
}

/// Change the ledger under its lock: `change` gets the files it lists (none if it is missing
/// or does not verify; it is then written anew) and edits them.
pub(crate) fn update(journals: &Path, key: &JournalKey, sync: Sync, change: impl FnOnce(&mut Vec<Entry>)) -> std::io::Result<()> {
    crate::storage::create_private_dirs(journals)?;
    let lock = crate::storage::private_file().read(true).write(true).create(true).truncate(false).open(journals.join(LEDGER_LOCK))?;
    lock.lock()?;
    let mut open = match read(journals, key) {
        Ledger::Verified(entries) => entries,
        Ledger::Missing => Vec::new(),
        Ledger::Unverified => {
            // Kept for the operator, and as a sign for recovery (see `SET_ASIDE`).
            std::fs::rename(journals.join(LEDGER), journals.join(SET_ASIDE))?;
            Vec::new()
        }
    };
    change(&mut open);
    let mut bytes = serde_json::to_vec(&Content { open }).map_err(std::io::Error::other)?;
    let tag = mac(key, &bytes).finalize().into_bytes();
    bytes.push(b'\t');
    bytes.extend_from_slice(crate::storage::hex(&tag).as_bytes());
    bytes.push(b'\n');
    let temporary = journals.join(format!("{LEDGER}.rewrite"));
    let written = crate::storage::private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temporary)
        .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_data()))
        .and_then(|()| std::fs::rename(&temporary, journals.join(LEDGER)))
        .and_then(|()| if sync == Sync::Directory { File::open(journals)?.sync_all() } else { Ok(()) });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

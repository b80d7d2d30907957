//! The journal and recovery, at the level of their files.
use super::*;
use crate::recovery::recover;

const KEY: JournalKey = [7; crate::storage::KEY_BYTES];

use std::os::unix::fs::PermissionsExt as _;

fn tree(root: &Path) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).expect("read_dir").flatten() {
            let path = entry.path();
            let relative = path.strip_prefix(root).expect("inside").to_string_lossy().into_owned();
            let metadata = std::fs::symlink_metadata(&path).expect("lstat");
            let mode = metadata.permissions().mode();
            let description = if metadata.is_symlink() {
                format!("link {}", std::fs::read_link(&path).expect("readlink").display())
            } else if metadata.is_dir() {
                pending.push(path);
                format!("dir {mode:o}")
            } else {
                format!("file {mode:o} {:?}", std::fs::read(&path).expect("read"))
            };
            entries.push((relative, description));
        }
    }
    entries.sort();
    entries
}

#[test]
fn rollback_restores_every_kind_of_change_exactly() {
    let temp = tempfile::tempdir().expect("tempdir");
    let workspace = temp.path().join("ws");
    std::fs::create_dir_all(workspace.join("src/old")).expect("mkdir");
    std::fs::write(workspace.join("src/a.rs"), "fn a() {}\n").expect("write");
    std::fs::write(workspace.join("src/b.rs"), "fn b() {}\n").expect("write");
    std::fs::set_permissions(workspace.join("src/b.rs"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink("/etc/hostname", workspace.join("outside-link")).expect("symlink");
    let before = tree(&workspace);
    let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");

    let file = JournalFile::create(&temp.path().join("journal"), KEY).expect("journal file");
    let mut journal = Journal::begin(&file, "c-1", "s-1", &workspace, true).expect("begin");
    journal.preserve(&root, "src/a.rs").expect("preserve");
    std::fs::write(workspace.join("src/a.rs"), "changed").expect("write");
    journal.preserve(&root, "src/b.rs").expect("preserve");
    std::fs::remove_file(workspace.join("src/b.rs")).expect("rm");
    journal.preserve(&root, "src/new").expect("preserve");
    std::fs::create_dir(workspace.join("src/new")).expect("mkdir");
    journal.preserve(&root, "src/new/c.rs").expect("preserve");
    std::fs::write(workspace.join("src/new/c.rs"), "new").expect("write");
    journal.preserve(&root, "src/moved").expect("preserve");
    journal.preserve_move("src/old", "src/moved").expect("preserve");
    std::fs::rename(workspace.join("src/old"), workspace.join("src/moved")).expect("mv");
    journal.preserve(&root, "outside-link").expect("preserve");
    std::fs::remove_file(workspace.join("outside-link")).expect("rm");
    // The same path again: the first state wins.
    journal.preserve(&root, "src/a.rs").expect("preserve");
    std::fs::write(workspace.join("src/a.rs"), "changed twice").expect("write");
    assert_ne!(tree(&workspace), before);

    let steps = journal.rollback(&root).expect("rollback");
    assert_eq!(steps, 8);
    assert_eq!(tree(&workspace), before);
    drop(file);
    assert_eq!(journal_files(&temp.path().join("journal")), Vec::<PathBuf>::new());
}

#[test]
fn recovery_replays_unlocked_journals_and_leaves_live_ones() {
    let temp = tempfile::tempdir().expect("tempdir");
    let workspace = temp.path().join("ws");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::write(workspace.join("a.txt"), "original").expect("write");
    let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");
    let journals = temp.path().join("journal");

    let live_file = JournalFile::create(&journals, KEY).expect("journal file");
    let mut live = Journal::begin(&live_file, "c-live", "s-1", &workspace, true).expect("begin");
    live.preserve(&root, "b.txt").expect("preserve");
    std::fs::write(workspace.join("b.txt"), "in progress").expect("write");

    // A runtime that died: one call committed (not to be replayed), one open, whose last
    // line is torn; its file is unlocked once the runtime is gone.
    let dead_file = JournalFile::create(&journals, KEY).expect("journal file");
    let mut committed = Journal::begin(&dead_file, "c-done", "s-2", &workspace, true).expect("begin");
    committed.preserve(&root, "c.txt").expect("preserve");
    std::fs::write(workspace.join("c.txt"), "kept").expect("write");
    let _ = committed.commit();
    let mut crashed = Journal::begin(&dead_file, "c-dead", "s-2", &workspace, true).expect("begin");
    crashed.preserve(&root, "a.txt").expect("preserve");
    std::fs::write(workspace.join("a.txt"), "half-writ").expect("write");
    let path = dead_file.path.clone();
    drop(crashed);
    drop(dead_file);
    assert!(path.exists(), "a journal file with an open call outlives its runtime");
    std::fs::OpenOptions::new().append(true).open(&path).expect("open").write_all(b"{\"step\":{\"call\":\"c-dead\",\"st").expect("tear");

    let recovered = recover(&journals, &KEY, &workspace);
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0].call_id, "c-dead");
    assert_eq!((recovered[0].steps, recovered[0].error.as_deref()), (1, None));
    assert_eq!(std::fs::read_to_string(workspace.join("a.txt")).expect("read"), "original");
    assert_eq!(std::fs::read_to_string(workspace.join("b.txt")).expect("read"), "in progress");
    assert_eq!(std::fs::read_to_string(workspace.join("c.txt")).expect("read"), "kept");
    assert!(!path.exists());
    assert_eq!(live.rollback(&root), Ok(1));
    assert!(!workspace.join("b.txt").exists());
    assert!(recover(&journals, &KEY, &workspace).is_empty(), "the live runtime's journal is not touched");
}

/// A dead runtime's journal with one open call that wrote `a.txt` in `workspace`.
fn dead_journal(journals: &Path, workspace: &Path, key: JournalKey) -> PathBuf {
    let root = Dir::open_ambient_dir(workspace, cap_std::ambient_authority()).expect("open");
    let file = JournalFile::create(journals, key).expect("journal file");
    let mut crashed = Journal::begin(&file, "c-dead", "s", workspace, true).expect("begin");
    crashed.preserve(&root, "a.txt").expect("preserve");
    std::fs::write(workspace.join("a.txt"), "half-writ").expect("write");
    let path = file.path.clone();
    drop(crashed);
    drop(file);
    path
}

#[test]
fn recovery_replays_only_the_opened_workspace_and_only_what_verifies() {
    let temp = tempfile::tempdir().expect("tempdir");
    let journals = temp.path().join("journal");
    let [one, two] = ["one", "two"].map(|name| {
        let workspace = temp.path().join(name);
        std::fs::create_dir_all(&workspace).expect("mkdir");
        std::fs::write(workspace.join("a.txt"), "original").expect("write");
        workspace
    });
    let path = dead_journal(&journals, &one, KEY);
    // Opening another workspace replays nothing and keeps the call for its own.
    assert!(recover(&journals, &KEY, &two).is_empty());
    assert_eq!(std::fs::read_to_string(one.join("a.txt")).expect("read"), "half-writ");
    assert!(path.exists(), "the other workspace's call is kept");
    let recovered = recover(&journals, &KEY, &one);
    assert_eq!((recovered.len(), recovered[0].error.as_deref()), (1, None), "{recovered:?}");
    assert_eq!(std::fs::read_to_string(one.join("a.txt")).expect("read"), "original");

    // A journal written under another key (planted, or forged by editing a line) is never
    // replayed, and says why.
    let planted = dead_journal(&journals, &two, [9; crate::storage::KEY_BYTES]);
    let refused = recover(&journals, &KEY, &two);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].error.as_deref().is_some_and(|error| error.contains("does not verify")), "{refused:?}");
    assert_eq!(std::fs::read_to_string(two.join("a.txt")).expect("read"), "half-writ");
    std::fs::remove_file(&planted).expect("remove");
    let genuine = dead_journal(&journals, &two, KEY);
    let text = std::fs::read_to_string(&genuine).expect("read");
    std::fs::write(&genuine, text.replace("a.txt", "b.txt")).expect("forge");
    let refused = recover(&journals, &KEY, &two);
    assert!(refused[0].error.as_deref().is_some_and(|error| error.contains("does not verify")), "{refused:?}");
    assert!(!two.join("b.txt").exists());
}

#[test]
fn journal_and_blob_files_are_private() {
    use std::os::unix::fs::MetadataExt as _;
    let temp = tempfile::tempdir().expect("tempdir");
    let workspace = temp.path().join("ws");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::write(workspace.join("big.txt"), "x".repeat(INLINE_BYTES as usize + 1)).expect("write");
    let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");
    let journals = temp.path().join("journal");
    let file = JournalFile::create(&journals, KEY).expect("journal file");
    let mut journal = Journal::begin(&file, "c-1", "s", &workspace, true).expect("begin");
    journal.preserve(&root, "big.txt").expect("preserve");
    let blob = std::fs::read_dir(file.blobs.join("c-1")).expect("blobs").next().expect("a blob").expect("entry").path();
    for (path, mode) in [(&journals, 0o700), (&file.path, 0o600), (&file.blobs.join("c-1"), 0o700), (&blob, 0o600)] {
        assert_eq!(std::fs::metadata(path).expect("stat").mode() & 0o777, mode, "{}", path.display());
    }
    drop(journal);
}

/// The journal files in `journals`.
fn journal_files(journals: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(journals)
        .expect("journals")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|extension| extension == JOURNAL_EXTENSION))
        .collect();
    files.sort();
    files
}

#[test]
fn a_journal_copied_back_after_its_replay_is_not_replayed_again() {
    let temp = tempfile::tempdir().expect("tempdir");
    let journals = temp.path().join("journal");
    let workspace = temp.path().join("ws");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::write(workspace.join("a.txt"), "original").expect("write");
    let path = dead_journal(&journals, &workspace, KEY);
    let copy = std::fs::read(&path).expect("copy");
    let recovered = recover(&journals, &KEY, &workspace);
    assert_eq!((recovered.len(), recovered[0].kind), (1, crate::RecoveryKind::RolledBack), "{recovered:?}");
    assert_eq!(std::fs::read_to_string(workspace.join("a.txt")).expect("read"), "original");
    // The workspace moves on; then the old journal is put back, under its own name.
    std::fs::write(workspace.join("a.txt"), "later work").expect("write");
    std::fs::write(&path, &copy).expect("copy back");
    let again = recover(&journals, &KEY, &workspace);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].kind, crate::RecoveryKind::Replayed, "{again:?}");
    assert!(!again[0].kind.stops_writes());
    assert_eq!(std::fs::read_to_string(workspace.join("a.txt")).expect("read"), "later work", "replayed a second time");
}

#[test]
fn a_journal_cut_in_the_middle_or_put_in_place_of_another_is_not_replayed() {
    let temp = tempfile::tempdir().expect("tempdir");
    let journals = temp.path().join("journal");
    let workspace = temp.path().join("ws");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::write(workspace.join("a.txt"), "original").expect("write");
    // A line dropped from the middle (the commit of a call): the chain breaks.
    let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");
    let file = JournalFile::create(&journals, KEY).expect("journal file");
    let mut done = Journal::begin(&file, "c-done", "s", &workspace, true).expect("begin");
    done.preserve(&root, "a.txt").expect("preserve");
    std::fs::write(workspace.join("a.txt"), "committed").expect("write");
    let _ = done.commit();
    let mut open = Journal::begin(&file, "c-open", "s", &workspace, true).expect("begin");
    open.preserve(&root, "b.txt").expect("preserve");
    let path = file.path.clone();
    drop(open);
    drop(file);
    let text = std::fs::read_to_string(&path).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    std::fs::write(&path, format!("{}\n{}\n{}\n{}\n", lines[0], lines[1], lines[3], lines[4])).expect("cut");
    let refused = recover(&journals, &KEY, &workspace);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].kind, crate::RecoveryKind::Unverified, "{refused:?}");
    assert!(refused[0].kind.stops_writes());
    assert_eq!(std::fs::read_to_string(workspace.join("a.txt")).expect("read"), "committed");
    // A running runtime's genuine lines, in a new file put in place of the one it holds (a
    // snapshot taken mid-call, put back once the call has ended).
    let live = JournalFile::create(&journals, KEY).expect("journal file");
    let mut running = Journal::begin(&live, "c-running", "s", &workspace, true).expect("begin");
    running.preserve(&root, "a.txt").expect("preserve");
    let snapshot = std::fs::read(&live.path).expect("snapshot");
    let _ = running.commit();
    std::fs::remove_file(&live.path).expect("remove");
    std::fs::write(&live.path, &snapshot).expect("replace");
    let refused = recover(&journals, &KEY, &workspace);
    let replaced: Vec<_> =
        refused.iter().filter(|recovery| recovery.error.as_deref().is_some_and(|error| error.contains("replaced"))).collect();
    assert_eq!(replaced.len(), 1, "{refused:?}");
    assert_eq!(replaced[0].kind, crate::RecoveryKind::Unverified, "{refused:?}");
    assert_eq!(std::fs::read_to_string(workspace.join("a.txt")).expect("read"), "committed");
    std::fs::remove_file(&live.path).expect("remove");
    drop(live);
    // A torn line followed by more lines is no crash's.
    std::fs::write(&path, format!("{}\n{{\"step\n{}\n", lines[0], lines[1])).expect("tear");
    assert_eq!(recover(&journals, &KEY, &workspace)[0].kind, crate::RecoveryKind::Unverified);
    assert_eq!(std::fs::read_to_string(workspace.join("a.txt")).expect("read"), "committed");
}

#[test]
fn a_ledger_that_does_not_verify_is_set_aside_and_its_journals_stop_writes() {
    let temp = tempfile::tempdir().expect("tempdir");
    let journals = temp.path().join("journal");
    let workspace = temp.path().join("ws");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::write(workspace.join("a.txt"), "original").expect("write");
    let path = dead_journal(&journals, &workspace, KEY);
    // The ledger is forged; the next runtime to start writes a new one, without the dead
    // runtime's file.
    let ledger = journals.join("ledger");
    let text = std::fs::read_to_string(&ledger).expect("ledger");
    std::fs::write(&ledger, text.replace("\"open\"", "\"open\" ")).expect("forge");
    let next = JournalFile::create(&journals, KEY).expect("a new runtime");
    let _ = Journal::begin(&next, "c-next", "s", &workspace, true).expect("its first call").commit();
    drop(next);
    assert!(journals.join("ledger.unverified").exists());
    let refused = recover(&journals, &KEY, &workspace);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].kind, crate::RecoveryKind::Unverified, "{refused:?}");
    assert_eq!(std::fs::read_to_string(workspace.join("a.txt")).expect("read"), "half-writ", "nothing replayed");
    assert!(path.exists());
}

#[test]
fn a_runtime_that_only_reads_makes_no_journal_file_and_leaves_the_ledger_alone() {
    let temp = tempfile::tempdir().expect("tempdir");
    let journals = temp.path().join("journal");
    let workspace = temp.path().join("ws");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::write(workspace.join("a.txt"), "original").expect("write");
    let path = dead_journal(&journals, &workspace, KEY);
    let ledger = std::fs::read(journals.join("ledger")).expect("the dead runtime's ledger");
    let reader = JournalFile::create(&journals, KEY).expect("journal file");
    assert!(!reader.path.exists(), "made before any call began");
    drop(reader);
    assert_eq!(journal_files(&journals), vec![path], "only the dead runtime's file");
    assert_eq!(std::fs::read(journals.join("ledger")).expect("ledger"), ledger, "rewritten by a runtime that wrote nothing");
}

#[test]
fn a_runtime_killed_in_its_first_call_right_after_the_file_was_entered_is_rolled_back_whole() {
    let temp = tempfile::tempdir().expect("tempdir");
    let journals = temp.path().join("journal");
    let workspace = temp.path().join("ws");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    for name in ["a.txt", "b.txt"] {
        std::fs::write(workspace.join(name), "original").expect("write");
    }
    let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");
    // The boundary the lazy file adds: the first call's `begin` makes the file and enters it in
    // the ledger; the process dies after its first synced step and change, before the second.
    let file = JournalFile::create(&journals, KEY).expect("journal file");
    let mut first = Journal::begin(&file, "c-first", "s", &workspace, true).expect("begin");
    assert!(matches!(ledger::read(&journals, &KEY), ledger::Ledger::Verified(ref open) if open.len() == 1), "entered at begin");
    first.preserve(&root, "a.txt").expect("preserve");
    first.make_durable().expect("sync");
    std::fs::write(workspace.join("a.txt"), "half-writ").expect("write");
    first.preserve(&root, "b.txt").expect("preserve");
    let path = file.path.clone();
    drop(first);
    drop(file);
    assert!(path.exists());
    let recovered = recover(&journals, &KEY, &workspace);
    assert_eq!((recovered.len(), recovered[0].error.as_deref(), recovered[0].steps), (1, None, 2), "{recovered:?}");
    for name in ["a.txt", "b.txt"] {
        assert_eq!(std::fs::read_to_string(workspace.join(name)).expect("read"), "original", "{name}");
    }
    assert!(!path.exists());
    assert!(matches!(ledger::read(&journals, &KEY), ledger::Ledger::Verified(ref open) if open.is_empty()));

    // Died between making the file and entering it: an empty file nobody lists, removed.
    let orphan = journals.join(format!("1-0000000000000000.{JOURNAL_EXTENSION}"));
    std::fs::write(&orphan, "").expect("an empty journal file");
    assert!(recover(&journals, &KEY, &workspace).is_empty());
    assert!(!orphan.exists());
    assert!(std::fs::read_to_string(workspace.join("a.txt")).is_ok_and(|content| content == "original"));
}

/// Another session puts a file in a directory a call made, and moves away the directory of a
/// file the call removed, before the call is rolled back: the directory it filled stays, with
/// what it put there; the removed file is put back in its directory made again; the call's
/// own paths are undone. Recovery after a crash does the same, so it never fails on them.
#[test]
fn a_rollback_leaves_what_another_session_made_and_puts_a_removed_file_back_in_its_directory_made_again() {
    for crash in [false, true] {
        let temp = tempfile::tempdir().expect("tempdir");
        let workspace = temp.path().join("ws");
        std::fs::create_dir_all(workspace.join("old")).expect("mkdir");
        std::fs::write(workspace.join("old/kept.txt"), "only copy").expect("write");
        let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");
        let journals = temp.path().join("journal");
        let file = JournalFile::create(&journals, KEY).expect("journal file");
        let mut journal = Journal::begin(&file, "c-1", "s-1", &workspace, true).expect("begin");
        journal.preserve(&root, "new").expect("preserve");
        std::fs::create_dir(workspace.join("new")).expect("mkdir");
        journal.preserve(&root, "new/deep").expect("preserve");
        std::fs::create_dir(workspace.join("new/deep")).expect("mkdir");
        journal.preserve(&root, "new/deep/mine.txt").expect("preserve");
        std::fs::write(workspace.join("new/deep/mine.txt"), "the call's").expect("write");
        journal.preserve(&root, "old/kept.txt").expect("preserve");
        std::fs::remove_file(workspace.join("old/kept.txt")).expect("rm");
        // Another session, meanwhile.
        std::fs::write(workspace.join("new/deep/theirs.txt"), "another session's").expect("write");
        std::fs::rename(workspace.join("old"), workspace.join("elsewhere")).expect("mv");

        let left = if crash {
            let path = file.path.clone();
            drop(journal);
            drop(file);
            assert!(path.exists());
            let recovered = recover(&journals, &KEY, &workspace);
            assert_eq!(recovered.len(), 1, "{recovered:?}");
            assert_eq!((recovered[0].kind, recovered[0].error.as_deref()), (crate::recovery::RecoveryKind::RolledBack, None));
            recovered[0].left.clone()
        } else {
            let (steps, replayed) = journal.rollback_leaving(&root).expect("rollback");
            assert_eq!(steps, 4);
            assert_eq!(replayed.remade, vec!["old".to_owned()]);
            replayed.left
        };
        assert_eq!(left, vec!["new/deep".to_owned(), "new".to_owned()]);
        assert_eq!(std::fs::read_to_string(workspace.join("new/deep/theirs.txt")).expect("read"), "another session's");
        assert!(!workspace.join("new/deep/mine.txt").exists());
        assert_eq!(std::fs::read_to_string(workspace.join("old/kept.txt")).expect("read"), "only copy");
        assert!(workspace.join("elsewhere").is_dir());
        assert!(recover(&journals, &KEY, &workspace).is_empty(), "nothing is left to replay");
    }
}

/// A removed file whose directory another session replaced with a file, or with a symlink
/// (to outside the workspace), is not put back: what stands there is left as it is (never
/// followed), the file is named as not put back, and the rest of the call is rolled back.
/// Recovery after a crash does the same, so it never fails on it (and never stops writes).
#[test]
fn a_removed_file_whose_directory_is_now_a_file_or_symlink_stays_removed_and_the_rest_is_rolled_back() {
    for (symlink, crash) in [(false, false), (false, true), (true, false), (true, true)] {
        let temp = tempfile::tempdir().expect("tempdir");
        let workspace = temp.path().join("ws");
        let outside = temp.path().join("outside");
        std::fs::create_dir_all(workspace.join("d")).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(workspace.join("d/f.txt"), "content").expect("write");
        std::fs::write(workspace.join("other.txt"), "original").expect("write");
        let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");
        let journals = temp.path().join("journal");
        let file = JournalFile::create(&journals, KEY).expect("journal file");
        let mut journal = Journal::begin(&file, "c-1", "s-1", &workspace, true).expect("begin");
        journal.preserve(&root, "other.txt").expect("preserve");
        std::fs::write(workspace.join("other.txt"), "the call's").expect("write");
        journal.preserve(&root, "d/e/f.txt").expect("preserve");
        journal.preserve(&root, "d/f.txt").expect("preserve");
        std::fs::remove_file(workspace.join("d/f.txt")).expect("rm");
        // Another session moves `d` away and puts its own file (or a symlink) at its name.
        std::fs::rename(workspace.join("d"), workspace.join("moved")).expect("mv");
        if symlink {
            std::os::unix::fs::symlink(&outside, workspace.join("d")).expect("symlink");
        } else {
            std::fs::write(workspace.join("d"), "another session's").expect("write");
        }
        let unrestored = if crash {
            let path = file.path.clone();
            drop(journal);
            drop(file);
            let recovered = recover(&journals, &KEY, &workspace);
            assert_eq!(recovered.len(), 1, "{recovered:?}");
            assert_eq!((recovered[0].kind, recovered[0].error.as_deref()), (crate::recovery::RecoveryKind::RolledBack, None));
            assert!(!path.exists());
            recovered[0].unrestored.clone()
        } else {
            let (steps, replayed) = journal.rollback_leaving(&root).expect("rolled back, not wedged");
            assert_eq!(steps, 3);
            replayed.unrestored
        };
        assert_eq!(unrestored, vec!["d/f.txt".to_owned()], "symlink {symlink}, crash {crash}");
        assert_eq!(std::fs::read_to_string(workspace.join("other.txt")).expect("read"), "original", "the rest is rolled back");
        assert_eq!(std::fs::read_dir(&outside).expect("read_dir").count(), 0, "written through the symlink");
        if symlink {
            assert_eq!(std::fs::read_link(workspace.join("d")).expect("the symlink stays"), outside);
        } else {
            assert_eq!(std::fs::read_to_string(workspace.join("d")).expect("read"), "another session's");
        }
        assert!(workspace.join("moved").is_dir() && !workspace.join("moved/f.txt").exists());
        assert!(recover(&journals, &KEY, &workspace).is_empty(), "nothing is left to replay");
    }
}

/// A rollback step that fails for want of descriptors is tried again for seconds, not the
/// half second of other failures: the shortage passes once connections or calls let go.
#[test]
fn a_step_short_of_descriptors_is_told_from_other_failures() {
    for errno in [24, 23] {
        let failure = format!("`t84/f.txt`: {}", std::io::Error::from_raw_os_error(errno));
        assert!(short_of_descriptors(&failure), "{failure}");
    }
    let other = format!("`t84/f.txt`: {}", std::io::Error::from_raw_os_error(2));
    assert!(!short_of_descriptors(&other), "{other}");
}

/// The modification time of `path`, to the nanosecond.
fn modified(path: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt as _;
    let metadata = std::fs::symlink_metadata(path).expect("lstat");
    (metadata.mtime(), metadata.mtime_nsec())
}

/// Times a call set in place (on a file it leaves, a directory, a file it then rewrites or
/// removes) are put back by its rollback and by the recovery after a crash; times set on a file
/// another program replaced since are the other's, left as they are.
#[test]
fn times_set_by_a_call_are_put_back() {
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_000_000_000, 123_456_789);
    let new = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(7);
    for crash in [false, true] {
        let temp = tempfile::tempdir().expect("tempdir");
        let workspace = temp.path().join("ws");
        std::fs::create_dir_all(workspace.join("d")).expect("mkdir");
        for name in ["kept.txt", "rewritten.txt", "removed.txt", "replaced.txt"] {
            std::fs::write(workspace.join(name), name).expect("write");
        }
        for name in ["kept.txt", "rewritten.txt", "removed.txt", "replaced.txt", "d"] {
            File::open(workspace.join(name)).and_then(|file| file.set_modified(old)).expect("set the old time");
        }
        let before = modified(&workspace.join("kept.txt"));
        let root = Dir::open_ambient_dir(&workspace, cap_std::ambient_authority()).expect("open");
        let journals = temp.path().join("journal");
        let file = JournalFile::create(&journals, KEY).expect("journal file");
        let mut journal = Journal::begin(&file, "c-1", "s-1", &workspace, true).expect("begin");
        let touch = |journal: &mut Journal, name: &str| {
            journal.preserve_times(&root, name).expect("preserve the times");
            File::open(workspace.join(name)).and_then(|file| file.set_modified(new)).expect("set the times");
        };
        for name in ["kept.txt", "rewritten.txt", "removed.txt", "replaced.txt", "d"] {
            touch(&mut journal, name);
        }
        // Once per object: a second change of its times saves nothing.
        let steps = journal.steps().len();
        touch(&mut journal, "kept.txt");
        assert_eq!(journal.steps().len(), steps);
        journal.preserve(&root, "rewritten.txt").expect("preserve");
        std::fs::write(workspace.join("rewritten.txt"), "the call's").expect("write");
        journal.preserve(&root, "removed.txt").expect("preserve");
        std::fs::remove_file(workspace.join("removed.txt")).expect("rm");
        // Another program replaces a file whose times the call set.
        std::fs::remove_file(workspace.join("replaced.txt")).expect("rm");
        std::fs::write(workspace.join("replaced.txt"), "another's").expect("write");
        let theirs = modified(&workspace.join("replaced.txt"));
        if crash {
            drop(journal);
            drop(file);
            let recovered = recover(&journals, &KEY, &workspace);
            assert_eq!(recovered.len(), 1, "{recovered:?}");
            assert_eq!(recovered[0].error, None);
        } else {
            let (_, replayed) = journal.rollback_leaving(&root).expect("rollback");
            assert_eq!(replayed, Replayed::default());
        }
        for name in ["kept.txt", "rewritten.txt", "removed.txt", "d"] {
            assert_eq!(modified(&workspace.join(name)), before, "{name}, crash {crash}");
        }
        assert_eq!(std::fs::read_to_string(workspace.join("rewritten.txt")).expect("read"), "rewritten.txt");
        assert_eq!(std::fs::read_to_string(workspace.join("removed.txt")).expect("read"), "removed.txt");
        assert_eq!(std::fs::read_to_string(workspace.join("replaced.txt")).expect("read"), "another's");
        assert_eq!(modified(&workspace.join("replaced.txt")), theirs, "crash {crash}");
    }
}

/// A journal line written before steps had times (or `Prior::Times`) still reads, and is
/// replayed as it was.
#[test]
fn a_step_without_times_reads_as_before() {
    let line = r#"{"path":"a.txt","prior":{"kind":"inline","hex":"6869","mode":420},"identity":[1,2]}"#;
    let step: Step = serde_json::from_str(line).expect("an older step");
    assert_eq!(step.times, None);
    assert_eq!(step.prior, Prior::Inline { hex: "6869".to_owned(), mode: 420 });
}

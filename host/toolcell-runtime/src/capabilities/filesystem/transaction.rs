//! The call as a transaction: locks, read-before-write, and the journal every mutation is
//! saved in first.

use std::sync::Arc;

use toolcell_policy::{Access, Durability, ReadBeforeWrite};
use toolcell_types::{ToolErrorKind, escape_control};

use toolcell_state::LockStore;
use toolcell_state::journal::Journal;
use toolcell_state::reads::{MAX_TRACKED_READS, SessionReads, Version};
use wasmtime_wasi::p2::FsResult;

pub(crate) use super::landed::Landed;
use super::*;

/// What a governed call needs besides the policy: the lock table, what its session has read,
/// and the journal that makes it undoable.
pub(crate) struct Transaction {
    pub(crate) locks: Arc<LockStore>,
    /// Who the call writes for (lock owner).
    pub(crate) owner: String,
    /// The lock tokens the caller presents.
    pub(crate) fences: Vec<u64>,
    /// What the session has read before this call.
    pub(crate) seen: Arc<SessionReads>,
    pub(crate) read_before_write: ReadBeforeWrite,
    /// Whether the journal and new content are synced before they count.
    pub(crate) durability: Durability,
    /// The runtime's journal file, and what a call's journal needs to be replayed after a crash.
    pub(crate) journals: Arc<toolcell_state::journal::JournalFile>,
    pub(crate) workspace: std::path::PathBuf,
    pub(crate) session: String,
    pub(crate) call_id: String,
    /// Started at the call's first mutation.
    pub(crate) journal: Option<Journal>,
    /// Files this call opened for reading, with their versions then.
    pub(crate) reads: Vec<(String, Version)>,
    /// More files were opened for reading than are tracked: the call is a scan, not a read.
    pub(crate) reads_overflowed: bool,
    /// Paths this call mutated, in order, each once.
    pub(crate) modified: Vec<String>,
    /// Paths whose read-before-write check already ran in this call.
    checked: std::collections::HashSet<String>,
    /// Files being written (rewritten whole, or a copy written in place). The component writes
    /// the new content to a file with no name; it replaces the path (synced, then renamed over
    /// it) when the call commits, or as soon as something acts on the path's name, so that no
    /// other call ever sees what this one has in flight.
    pub(crate) shadows: Vec<rewrite::Shadow>,
    /// The files put in place (rewritten whole, or renamed there), with what each landed as.
    pub(crate) landed: Vec<(String, Landed)>,
    /// The files output streams of this call write to, each with what tells whether its
    /// stream still exists: a stream alive when its file is put in place may write to it
    /// after, so what the file landed as is not what the call leaves there (see
    /// [`Transaction::landed_mid_call`]). Neither keeps the file open.
    streamed: Vec<(std::sync::Weak<std::fs::File>, std::sync::Weak<()>)>,
    /// The files and directories this call renamed: source, destination.
    pub(crate) moves: Vec<(String, String)>,
    /// Paths whose content the session may take as known, from this call alone: what it wrote
    /// there, or moved there from such a path or from a file the session had seen as it is.
    known_in_call: std::collections::HashSet<String>,
    /// Files this call moved (or linked) where they are from a path whose content the session
    /// had not seen: a move shows nothing, so they are not recorded as seen (see
    /// [`Transaction::seen_changed`]).
    moved_unseen: std::collections::HashSet<String>,
    /// Why writes to the workspace are stopped (a journal that does not verify, a call that
    /// could not be rolled back), if they are: every write and delete is refused with it.
    pub(crate) stopped: Option<String>,
    /// The paths this call journaled, which no other call may change until this one ends.
    pub(crate) in_flight: toolcell_state::inflight::InFlight,
    /// What this call left at each path it changed in place: its rollback leaves a path that
    /// holds something else now (another process or program changed it since).
    pub(crate) left: left::LeftBehind,
}

impl Transaction {
    /// Let go of the inodes the landed files are held by (one descriptor each): what they are
    /// known by stays, but a file made since may then take one of their numbers.
    pub(crate) fn release_landed(&mut self) {
        for (_, landed) in &mut self.landed {
            landed.release();
        }
    }

    /// A file put in place while the call runs (before its end): kept as landed, unless an
    /// output stream of the call that writes to it still exists and may write again after
    /// this (a write through a descriptor says so each time, a stream only when it is made).
    /// Such a file counts as one the call changed again, as after [`FsGuard::writing_again`].
    pub(crate) fn landed_mid_call(&mut self, path: String, landed: Landed) {
        self.streamed.retain(|(_, alive)| alive.strong_count() > 0);
        // A stream alive holds its file, so the file is there to be asked its inode.
        let written_by_a_stream = self.streamed.iter().any(|(file, _)| {
            file.upgrade().and_then(|file| rustix::fs::fstat(&*file).ok()).is_some_and(|stat| (stat.st_dev, stat.st_ino) == landed.inode())
        });
        if !written_by_a_stream {
            self.landed.push((path, landed));
        }
    }

    /// An output stream of this call writes to `file` while `alive` can be upgraded. Which
    /// file that is (its inode) is asked only when a file lands mid-call, which is rare.
    pub(crate) fn streaming_to(&mut self, file: std::sync::Weak<std::fs::File>, alive: std::sync::Weak<()>) {
        self.streamed.retain(|(_, alive)| alive.strong_count() > 0);
        self.streamed.push((file, alive));
    }

    #[expect(clippy::too_many_arguments, reason = "one constructor for one struct; every field is needed")]
    pub(crate) fn new(
        locks: Arc<LockStore>,
        owner: String,
        fences: Vec<u64>,
        seen: Arc<SessionReads>,
        read_before_write: ReadBeforeWrite,
        durability: Durability,
        journals: Arc<toolcell_state::journal::JournalFile>,
        workspace: std::path::PathBuf,
        session: String,
        call_id: String,
    ) -> Self {
        let in_flight = toolcell_state::inflight::InFlight::new(workspace.clone(), call_id.clone());
        Transaction {
            in_flight,
            locks,
            owner,
            fences,
            seen,
            read_before_write,
            durability,
            journals,
            workspace,
            session,
            call_id,
            journal: None,
            reads: Vec::new(),
            reads_overflowed: false,
            known_in_call: std::collections::HashSet::new(),
            moved_unseen: std::collections::HashSet::new(),
            modified: Vec::new(),
            checked: std::collections::HashSet::new(),
            shadows: Vec::new(),
            landed: Vec::new(),
            streamed: Vec::new(),
            moves: Vec::new(),
            stopped: None,
            left: left::LeftBehind::default(),
        }
    }

    /// The versions of the files this call put in place that are as they landed, with the
    /// content they landed with (see [`Landed::version`]): what the session's record of what
    /// it saw and the undo record take instead of reading those files again.
    pub(crate) fn written_versions(&self) -> Vec<(String, Version)> {
        self.landed.iter().filter_map(|(path, landed)| Some((path.clone(), landed.version()?))).collect()
    }

    /// The files this call put in place, and did not change again, that another call (of
    /// another host, which does not see this one's in-flight paths) has replaced since: what
    /// stands there now is not what this call wrote, so it is neither read by the session nor
    /// undoable by it. (One removed since is judged as a removal is, by its absence.)
    pub(crate) fn replaced_since(&self, root: &cap_std::fs::Dir) -> Vec<String> {
        self.landed_changed(root, false)
    }

    /// [`replaced_since`](Self::replaced_since), and the paths another changed between two
    /// changes of this call (see [`left`]): what the call's last change there acted on is not
    /// content the session saw, nor content its undo may put back.
    pub(crate) fn replaced_or_changed_between(&self, root: &cap_std::fs::Dir) -> Vec<String> {
        let mut replaced = self.replaced_since(root);
        replaced.extend(self.left.between().iter().filter(|path| !replaced.contains(path)).cloned().collect::<Vec<_>>());
        replaced
    }

    /// [`replaced_since`](Self::replaced_since), and the files this call put in place that are
    /// gone since (removed or moved away by another host): what a rollback leaves as it is.
    pub(crate) fn changed_since(&self, root: &cap_std::fs::Dir) -> Vec<String> {
        self.landed_changed(root, true)
    }

    /// The paths this call's journal holds that are absent now, as the call ends (it removed
    /// them, or made them and removed them again), except the directories it moved away (their
    /// rollback is one rename, not a path to leave).
    pub(crate) fn absent_at_end(root: &cap_std::fs::Dir, steps: &[toolcell_state::journal::Step]) -> Vec<String> {
        let mut absent: Vec<String> = Vec::new();
        for step in steps {
            if !matches!(step.prior, toolcell_state::journal::Prior::Moved { .. })
                && !absent.contains(&step.path)
                && root.symlink_metadata(&step.path).is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound)
            {
                absent.push(step.path.clone());
            }
        }
        absent
    }

    /// Of the paths [`absent_at_end`](Self::absent_at_end) found, those that are there again
    /// now: another host's session (which does not see this call's in-flight paths) made them
    /// meanwhile, and a rollback must not put back over them what was there before this call.
    pub(crate) fn recreated_since(root: &cap_std::fs::Dir, absent: &[String]) -> Vec<String> {
        absent.iter().filter(|path| root.symlink_metadata(path).is_ok()).cloned().collect()
    }

    /// The directories this call made (paths its journal holds as absent before it) as they
    /// stand at its end, each with its device and inode.
    pub(crate) fn made_directories(root: &cap_std::fs::Dir, steps: &[toolcell_state::journal::Step]) -> Vec<(String, (u64, u64))> {
        use cap_std::fs::MetadataExt as _;
        let mut made: Vec<(String, (u64, u64))> = Vec::new();
        for step in steps.iter().filter(|step| step.prior == toolcell_state::journal::Prior::Absent) {
            if let Ok(metadata) = root.symlink_metadata(&step.path)
                && metadata.is_dir()
                && !made.iter().any(|(path, _)| *path == step.path)
            {
                made.push((step.path.clone(), (metadata.dev(), metadata.ino())));
            }
        }
        made
    }

    /// Of the directories [`made_directories`](Self::made_directories) found, those where
    /// something else stands now (a file, a symlink, another directory): another host's
    /// session moved the call's away and put its own there, which a rollback must not remove.
    pub(crate) fn directories_replaced_since(root: &cap_std::fs::Dir, made: &[(String, (u64, u64))]) -> Vec<String> {
        use cap_std::fs::MetadataExt as _;
        made.iter()
            .filter(|(path, made)| {
                root.symlink_metadata(path).is_ok_and(|metadata| !metadata.is_dir() || (metadata.dev(), metadata.ino()) != *made)
            })
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// The files this call put in place that stand there as another file now (or were
    /// changed since), and, if `gone`, those no longer there.
    fn landed_changed(&self, root: &cap_std::fs::Dir, gone: bool) -> Vec<String> {
        self.landed
            .iter()
            .filter(|(path, landed)| landed.still_at(root, path).map_or(gone, |same| !same))
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// The files read by this call that count as read (none if it was a scan).
    pub(crate) fn tracked_reads(&self) -> &[(String, Version)] {
        if self.reads_overflowed { &[] } else { &self.reads }
    }

    /// Of the paths this call `modified`, those the session saw change, to be recorded as seen:
    /// not `replaced` by another host since it put them in place, nor a file it moved there
    /// from a path whose content the session had not seen.
    pub(crate) fn seen_changed(&self, modified: &[String], replaced: &[String]) -> Vec<String> {
        modified.iter().filter(|path| !replaced.contains(path) && !self.moved_unseen.contains(*path)).cloned().collect()
    }

    /// A file now also (or only) at `path`, whose content the session knows (`known`: this
    /// call writes it, or it came from a known path) or not.
    fn named_again(&mut self, path: &str, known: bool) {
        if known {
            self.moved_unseen.remove(path);
            self.known_in_call.insert(path.to_owned());
        } else {
            self.known_in_call.remove(path);
            self.moved_unseen.insert(path.to_owned());
            // What was checked under this name is not what stands there now: the next write
            // to it is checked again.
            self.checked.remove(path);
        }
    }

    /// Whether the session may take the content of the file at `path` (now `current`) as
    /// known: this call wrote it, or moved it there from a known path, or the call read it,
    /// or the session saw it as it is.
    fn known(&self, root: &cap_std::fs::Dir, path: &str, current: &Version) -> bool {
        if self.known_in_call.contains(path) {
            return true;
        }
        if self.moved_unseen.contains(path) {
            return false;
        }
        let read = |version: &Version| version.unchanged(root, path, current);
        self.seen.get(path).is_some_and(read) || self.tracked_reads().iter().any(|(read_path, version)| read_path == path && read(version))
    }
}

impl FsGuard {
    /// Before `path` is mutated in place: check that the session read the current content (when
    /// the mutation replaces content), then journal its state, on the disk before the mutation
    /// if durability asks for it. Call after [`check`](Self::check).
    pub(super) fn before_mutation(&mut self, operation: &'static str, path: &str, replaces_content: bool) -> FsResult<()> {
        self.before_change(operation, path, replaces_content, true)
    }

    /// [`before_mutation`](Self::before_mutation) of a file about to be rewritten whole through
    /// a temporary sibling: nothing changes in place until it lands, so its journal step is
    /// not synced now.
    pub(super) fn before_rewrite(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        self.before_change(operation, path, true, false)
    }

    fn before_change(&mut self, operation: &'static str, path: &str, replaces_content: bool, in_place: bool) -> FsResult<()> {
        // A change through the descriptor of a file's new content (resizing it) changes nothing
        // in place: the path was journaled when that content was made.
        if self.shadow_of(path).is_some() {
            return Ok(());
        }
        let Some(root) = self.root.as_deref() else {
            return Ok(());
        };
        let Some(transaction) = self.transaction.as_mut() else {
            return Ok(());
        };
        if replaces_content
            && transaction.read_before_write != ReadBeforeWrite::Off
            && transaction.checked.insert(path.to_owned())
            && let Some(current) = Version::stat(root, path)
        {
            // What the agent has seen: the results of the session's earlier calls. A read by
            // the writing call itself does not count (the agent never saw it).
            let seen = transaction.seen.get(path);
            let shown = escape_control(path);
            match seen {
                Some(version) if version.unchanged(root, path, &current) => {}
                Some(_) => {
                    let message = format!(
                        "`{shown}` was modified since this session read it (by another session or outside toolcell): read it again, then make the change"
                    );
                    return Err(self.refuse_rule(operation, path, Access::Write, "modified-since-read", message, ToolErrorKind::Conflict));
                }
                None if transaction.read_before_write == ReadBeforeWrite::Refuse => {
                    let message = format!(
                        "`{shown}` exists and this session has not read it, and the policy requires reading a file before changing it: read it first, then make the change"
                    );
                    return Err(self.refuse_rule(operation, path, Access::Write, "read-before-write", message, ToolErrorKind::Conflict));
                }
                None => self
                    .warnings
                    .push(format!("Warning: overwriting existing file `{shown}` that was not read first. Consider reading it first.")),
            }
        }
        self.journal(operation, path, in_place, |journal, root| {
            if in_place { journal.preserve(root, path) } else { journal.preserve_before_rewrite(root, path) }
        })?;
        self.changing_again(path);
        if replaces_content && let Some(transaction) = self.transaction.as_mut() {
            // Its content is the call's from here on (a rename over it says otherwise after).
            transaction.named_again(path, true);
        }
        Ok(())
    }

    /// Whether the session may take the content of the file `path` as known before this call
    /// moves it (see [`Transaction::known`]): asked before the move, carried by it.
    pub(super) fn known_before_move(&self, path: &str) -> bool {
        let (Some(root), Some(transaction)) = (self.root.as_deref(), self.transaction.as_ref()) else {
            return false;
        };
        Version::stat(root, path).is_some_and(|current| transaction.known(root, path, &current))
    }

    /// After the file `from` was renamed to `to`: what stands at `to` is a file this call put
    /// in place (another host that replaces it meanwhile has it left as it made it), and the
    /// two are one move (a rollback that cannot move it back leaves it where it is). The
    /// session knows its content at `to` only if it knew it at `from` (`known`, asked before
    /// the move): a move shows nothing.
    pub(super) fn renamed(&mut self, from: &str, to: &str, known: bool) {
        let (Some(root), Some(transaction)) = (self.root.as_deref(), self.transaction.as_mut()) else {
            return;
        };
        if let Some(landed) = Landed::at(root, to) {
            transaction.landed_mid_call(to.to_owned(), landed);
        }
        transaction.known_in_call.remove(from);
        transaction.named_again(to, known);
    }

    /// After the file `source` got a second name, `link`: the session knows the content under
    /// it only if it knew it under `source` (`known`, asked before the link was made).
    pub(super) fn linked(&mut self, link: &str, known: bool) {
        if let Some(transaction) = self.transaction.as_mut() {
            transaction.named_again(link, known);
        }
    }

    /// Before `undo_edit` puts back at `path` what was there before the undone call: content
    /// the session knows only if it has a version of the path (a file it never read, moved
    /// away or removed, is still unread when it comes back).
    pub(crate) fn restoring(&mut self, path: &str) {
        if let Some(transaction) = self.transaction.as_mut()
            && !transaction.seen.contains_key(path)
        {
            transaction.named_again(path, false);
        }
    }

    /// After this call changed only the metadata of `path` (its times, or a hard link to it):
    /// if it is a file this call put in place, the change is the call's own, not another
    /// session's.
    pub(super) fn relanded(&mut self, path: &str) {
        let (Some(root), Some(transaction)) = (self.root.as_deref(), self.transaction.as_mut()) else {
            return;
        };
        for (_, landed) in transaction.landed.iter_mut().filter(|(landed, _)| landed == path) {
            landed.retake(root, path);
        }
    }

    /// Before this call writes again, through a descriptor, to `path`: if it is a file this
    /// call put in place, it is no longer what it landed as (its journal step, taken before
    /// the rewrite, puts back what was there before the call).
    pub(super) fn writing_again(&mut self, path: &str) {
        self.shadow_written(path);
        if let Some(transaction) = self.transaction.as_mut() {
            transaction.landed.retain(|(landed, _)| landed != path);
        }
    }

    /// The operation the paths journaled last were journaled for has run (or failed): note
    /// what each holds now, which is what this call left there (see [`super::left`]).
    pub(super) fn note_left(&mut self) {
        if let (Some(root), Some(transaction)) = (self.root.as_deref(), self.transaction.as_mut()) {
            transaction.left.noted(root);
        }
    }

    /// Before the times of `path` are set in place (not through the call's own new content of a
    /// file): journal them, so that a rollback puts them back. Not a change of the path's
    /// content: the path does not count as one the call wrote.
    pub(super) fn before_times(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        if self.shadow_of(path).is_some() {
            return Ok(());
        }
        let Some(transaction) = self.transaction.as_ref() else {
            return Ok(());
        };
        let written = transaction.modified.iter().any(|modified| modified == path);
        self.journal(operation, path, true, |journal, root| journal.preserve_times(root, path))?;
        if !written && let Some(transaction) = self.transaction.as_mut() {
            transaction.modified.retain(|modified| modified != path);
        }
        Ok(())
    }

    /// Journal the rename of the directory `from` to `to` (its content moves with it).
    pub(super) fn before_move(&mut self, operation: &'static str, from: &str, to: &str) -> FsResult<()> {
        self.journal(operation, to, true, |journal, root| journal.preserve(root, to))?;
        self.journal(operation, from, true, |journal, _| journal.preserve_move(from, to))?;
        self.changing_again(to);
        self.changing_again(from);
        Ok(())
    }

    /// Before `path` changes again (its name or content, or a directory's under it): a file
    /// this call put in place there is no longer what it landed.
    fn changing_again(&mut self, path: &str) {
        if let Some(transaction) = self.transaction.as_mut() {
            transaction.landed.retain(|(landed, _)| landed != path && !landed.strip_prefix(path).is_some_and(|rest| rest.starts_with('/')));
        }
    }

    pub(super) fn journal(
        &mut self,
        operation: &'static str,
        path: &str,
        in_place: bool,
        write: impl FnOnce(&mut Journal, &cap_std::fs::Dir) -> std::io::Result<()>,
    ) -> FsResult<()> {
        let deadline = self.deadline;
        let (Some(root), Some(transaction)) = (self.root.as_deref(), self.transaction.as_mut()) else {
            return Ok(());
        };
        if !transaction.in_flight.claim(path) {
            // Its rollback, or the other call's, would find another tree and stop half done.
            let message = format!(
                "change of `{}` was refused: another call that has not ended yet is changing it, something inside it, or a directory it lies in; try again once that call has ended",
                escape_control(path)
            );
            return Err(self.refuse_rule(operation, path, Access::Write, "in-flight", message, ToolErrorKind::Conflict));
        }
        let journaled = (|| {
            if transaction.journal.is_none() {
                let mut journal = Journal::begin(
                    &transaction.journals,
                    &transaction.call_id,
                    &transaction.session,
                    &transaction.workspace,
                    transaction.durability.syncs(),
                )?;
                journal.until(deadline);
                transaction.journal = Some(journal);
            }
            match transaction.journal.as_mut() {
                Some(journal) => {
                    // Another changed the path since this call last did (replaced or removed
                    // what the call left there, or wrote in a file the call put there): what
                    // the call did before is not to be undone over what the other made.
                    let landed_changed =
                        transaction.landed.iter().any(|(landed, file)| landed == path && file.still_at(root, path) != Some(true));
                    if transaction.left.changed_before_journaling(root, path, in_place) || landed_changed {
                        transaction.left.changed_between(path);
                        journal.leave_as_they_are(&[path.to_owned()]);
                        transaction.landed.retain(|(landed, _)| landed != path);
                    }
                    write(journal, root)?;
                    if in_place { journal.make_durable() } else { Ok(()) }
                }
                None => Ok(()),
            }
        })();
        match journaled {
            Ok(()) => {
                if !transaction.modified.iter().any(|modified| modified == path) {
                    transaction.modified.push(path.to_owned());
                }
                Ok(())
            }
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => self.within_deadline(),
            Err(error) => {
                let message = format!(
                    "change of `{}` was refused because its prior state cannot be saved for rollback ({}); tell the operator",
                    escape_control(path),
                    error.kind()
                );
                Err(self.refuse_rule(operation, path, Access::Write, "journal-unavailable", message, ToolErrorKind::Failed))
            }
        }
    }

    /// Note that the file `path`, whose descriptor's status is `stat`, was opened for reading.
    pub(super) fn track_read(&mut self, path: &str, stat: &rustix::fs::Stat) {
        let Some(transaction) = self.transaction.as_mut() else {
            return;
        };
        if transaction.reads_overflowed || transaction.reads.iter().any(|(read, _)| read == path) {
            return;
        }
        if transaction.reads.len() >= MAX_TRACKED_READS {
            transaction.reads_overflowed = true;
            return;
        }
        if let Some(version) = Version::of(stat) {
            transaction.reads.push((path.to_owned(), version));
        }
    }
}

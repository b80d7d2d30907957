//! The policy guard on every `wasi:filesystem` call a component makes.
//!
//! [`GuardedFilesystem`] implements wasmtime-wasi's own generated host traits for
//! `wasi:filesystem/types` and `wasi:filesystem/preopens`: each method resolves the paths it
//! touches to canonical workspace-relative paths (`.`, `..`, duplicate slashes and symlinks
//! resolved against the real workspace), asks the policy about the caller's role, and only then
//! delegates to wasmtime-wasi's implementation. Because it implements the upstream traits, a
//! method added by a wasmtime upgrade breaks the build instead of slipping through unchecked.
//!
//! A refusal reaches the component as a WASI error code (`access`), and is recorded with a
//! human-readable reason that the host puts in the call's result whatever the component does
//! with the error. Directory entries the role may not see are left out of listings.

use std::collections::HashMap;
use std::sync::Arc;

use toolcell_audit::Record;
use toolcell_types::{ToolErrorKind, escape_control};
use toolcell_policy::{Access, Decision, Effect, Policy, ReadBeforeWrite, Verdict};

use crate::audit::AuditLog;
use crate::journal::Journal;
use crate::locks::LockStore;
use crate::reads::{MAX_TRACKED_READS, SessionReads, Version};
use wasmtime::component::Resource;
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{
    self as fs, Descriptor, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry, DirectoryEntryStream,
    Filesize, MetadataHashValue, NewTimestamp, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::bindings::sync::io::streams;
use wasmtime_wasi::p2::{FsError, FsResult};
use wasmtime_wasi::p2::bindings::sync::clocks::wall_clock::Datetime;
use wasmtime_wasi::{FsPerms, OpenMode};

use crate::beneath;

/// Blocking filesystem calls run on the calling thread (the host runs calls on plain threads),
/// for wasmtime-wasi's descriptors and for the ones the guard opens itself.
pub(crate) const BLOCKING_IN_PLACE: bool = true;

/// Symlinks followed while resolving one path before it counts as a loop.
const MAX_SYMLINK_HOPS: usize = 40;

/// Entries a directory rename may carry with it (each is checked like a move of its own).
const MAX_MOVED_ENTRIES: usize = 100_000;
/// Allowed reads and listings remembered per call; the rest are counted.
const MAX_RECORDED_EVENTS: usize = 10_000;

/// Asked about every `ask` decision. Returns whether to allow the access.
pub trait Approver: Send + Sync {
    /// Approve or refuse `access` to the workspace-relative `path` for `role`, as the rule `rule`
    /// asks.
    fn approve(&self, role: &str, access: Access, path: &str, rule: &str) -> bool;
}

/// One decision the guard made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsEvent {
    /// The WASI operation (`open-at`, `unlink-file-at`, ...).
    pub operation: &'static str,
    /// The canonical workspace-relative path, or the path as the component wrote it if it
    /// leads outside the workspace.
    pub path: String,
    /// What the operation does to the path.
    pub access: Access,
    /// What was decided (an approved `ask` is `allow`).
    pub effect: Effect,
    /// The deciding rule, `default-deny`, `protected:...`, `workspace-boundary`, `hard-link`
    /// or `symlink-target`.
    pub rule: String,
    /// Whether the policy asked and the approver answered.
    pub asked: bool,
}

/// A refusal, with the message the agent sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The decision.
    pub event: FsEvent,
    /// Why, and what to do: names the path and the rule, never a host path.
    pub message: String,
    /// `denied` (the policy or the sandbox) or `conflict` (a lock, or a file changed since the
    /// session read it).
    pub kind: ToolErrorKind,
}

/// What [`FsGuard::inspect`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inspected {
    pub(crate) mode: u32,
    pub(crate) read: Effect,
    pub(crate) write: Effect,
    pub(crate) delete: Effect,
}

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
    /// Where journals go, and what they need to be replayed after a crash.
    pub(crate) journals: std::path::PathBuf,
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
    /// Files being rewritten whole: `(path, temporary sibling)`. The component writes the
    /// temporary file; it replaces the path (synced, then renamed over it) when the call
    /// commits, or as soon as anything else touches the path, so that no reader ever sees a
    /// half-written file.
    pub(crate) shadows: Vec<(String, String)>,
}

impl Transaction {
    #[expect(clippy::too_many_arguments, reason = "one constructor for one struct; every field is needed")]
    pub(crate) fn new(
        locks: Arc<LockStore>,
        owner: String,
        fences: Vec<u64>,
        seen: Arc<SessionReads>,
        read_before_write: ReadBeforeWrite,
        journals: std::path::PathBuf,
        workspace: std::path::PathBuf,
        session: String,
        call_id: String,
    ) -> Self {
        Transaction {
            locks,
            owner,
            fences,
            seen,
            read_before_write,
            journals,
            workspace,
            session,
            call_id,
            journal: None,
            reads: Vec::new(),
            reads_overflowed: false,
            modified: Vec::new(),
            checked: std::collections::HashSet::new(),
            shadows: Vec::new(),
        }
    }

    /// The files read by this call that count as read (none if it was a scan).
    pub(crate) fn tracked_reads(&self) -> &[(String, Version)] {
        if self.reads_overflowed { &[] } else { &self.reads }
    }
}

/// Where the guard writes its records, and who the call is for.
pub(crate) struct AuditSink {
    pub(crate) log: Arc<AuditLog>,
    pub(crate) session: String,
    pub(crate) tool: String,
    pub(crate) call_id: String,
}

/// What the guard knows for one call.
pub(crate) struct FsGuard {
    audit: Option<AuditSink>,
    /// Workspace-relative host-owned paths (state directory, policy file, compiled-component
    /// cache, plugin directory, when they sit inside the workspace) that no call may modify,
    /// each with whether no call may even read it (the cache key).
    state_paths: Vec<(String, bool)>,
    /// Records the guard could not write (the refusals stand regardless).
    pub(crate) audit_failures: u64,
    /// Allowed modifications already recorded in this call: a write through a stream of a
    /// descriptor opened for writing is the same decision again.
    audited: std::collections::HashSet<(Access, String)>,
    /// `None`: no policy, only the workspace boundary applies.
    policy: Option<Arc<Policy>>,
    role: String,
    approver: Option<Arc<dyn Approver>>,
    /// The workspace, for resolving symlinks; `None` when the call has no workspace (`describe`).
    root: Option<cap_std::fs::Dir>,
    /// Workspace-relative path of each open descriptor, by resource index.
    descriptors: HashMap<u32, String>,
    pub(crate) events: Vec<FsEvent>,
    pub(crate) unrecorded_events: u64,
    pub(crate) denials: Vec<Denial>,
    /// Locks, read tracking and the journal; `None` for calls that must not mutate anything
    /// (`describe`, validators), which are then refused every write and delete.
    pub(crate) transaction: Option<Transaction>,
    /// Warnings for the agent (modifying a file it has not read).
    pub(crate) warnings: Vec<String>,
    /// Filesystem calls left, and the most descriptors open at once; `None`: unbounded.
    budget: Option<Budget>,
    /// Refusals already recorded in this call, each with how often it was repeated since (the
    /// repeats are recorded once, at the end of the call).
    repeats: HashMap<(&'static str, Access, String, String), u64>,
    /// Why the call was stopped for flooding the audit trail, once it was.
    flood: Option<String>,
    /// Where `read` reads before copying what it got: allocated once per call, not once per
    /// read (a scan reads thousands of small files in chunks of 64 KiB).
    read_buffer: Vec<u8>,
}

struct Budget {
    tool: String,
    calls_left: u64,
    calls: u64,
    open_files: usize,
    exhausted: bool,
    /// Distinct refusals the call may record.
    audit_records: u64,
}

impl FsGuard {
    pub(crate) fn new(
        policy: Option<Arc<Policy>>,
        role: &str,
        approver: Option<Arc<dyn Approver>>,
        root: Option<cap_std::fs::Dir>,
    ) -> Self {
        FsGuard {
            audit: None,
            state_paths: Vec::new(),
            audit_failures: 0,
            audited: std::collections::HashSet::new(),
            policy,
            role: role.to_owned(),
            approver,
            root,
            descriptors: HashMap::new(),
            events: Vec::new(),
            unrecorded_events: 0,
            denials: Vec::new(),
            transaction: None,
            warnings: Vec::new(),
            budget: None,
            repeats: HashMap::new(),
            flood: None,
            read_buffer: Vec::new(),
        }
    }

    /// Bound the call's filesystem calls and open descriptors.
    pub(crate) fn set_budget(&mut self, tool: &str, calls: u64, open_files: usize, audit_records: u64) {
        self.budget = Some(Budget {
            tool: tool.to_owned(),
            calls_left: calls,
            calls,
            open_files,
            exhausted: false,
            audit_records,
        });
    }

    /// Why the call was stopped for making more distinct refusals than its budget of audit
    /// records, if it was.
    pub(crate) fn flooded(&self) -> Option<String> {
        self.flood.clone()
    }

    /// Write one record for each refusal the call repeated, with how often: the trail stays
    /// complete without a record per repetition.
    pub(crate) fn record_repeats(&mut self) {
        let Some(sink) = &self.audit else {
            return;
        };
        let now = now();
        let mut records: Vec<Record> = self
            .repeats
            .iter()
            .filter(|(_, count)| **count > 0)
            .map(|((operation, access, rule, path), count)| {
                let mut record = Record::filesystem(&now, &sink.session, &self.role, &sink.tool, &sink.call_id, operation, path, access.as_str(), "deny", rule);
                record.repeated = Some(*count);
                record
            })
            .collect();
        if records.is_empty() {
            return;
        }
        records.sort_by(|a, b| (&a.path, &a.operation).cmp(&(&b.path, &b.operation)));
        if sink.log.append(&records).is_err() {
            self.audit_failures += 1;
        }
        self.repeats.clear();
    }

    /// Count one filesystem call against the budget; past it, every call fails (and the first
    /// refusal is recorded, naming the limit).
    fn spend(&mut self, operation: &'static str) -> FsResult<()> {
        if let Some(message) = &self.flood {
            // Stopped: the component gets no further answer from the host.
            return Err(FsError::trap(wasmtime::format_err!("{message}")));
        }
        let Some(budget) = self.budget.as_mut() else {
            return Ok(());
        };
        if budget.calls_left > 0 {
            budget.calls_left -= 1;
            return Ok(());
        }
        if !budget.exhausted {
            budget.exhausted = true;
            let message = format!(
                "`{}` made more than {} filesystem calls, its budget for one call, and was refused the rest; do less in one call (the operator can raise `host_calls` under `[limits]` or `[limits.tools.{}]` in the policy)",
                budget.tool, budget.calls, budget.tool
            );
            self.refuse_budget(operation, "host-call-budget", message);
        }
        Err(FsError::from(ErrorCode::Quota))
    }

    /// Refuse an open past the budget of open descriptors.
    fn check_open_files(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        let Some(budget) = self.budget.as_ref() else {
            return Ok(());
        };
        if self.descriptors.len() < budget.open_files {
            return Ok(());
        }
        let message = format!(
            "`{}` tried to hold more than {} files open at once (opening `{}`); close files before opening more (the operator can raise `open_files` under `[limits]` or `[limits.tools.{}]` in the policy)",
            budget.tool,
            budget.open_files,
            escape_control(path),
            budget.tool
        );
        self.refuse_budget(operation, "open-files", message);
        Err(FsError::from(ErrorCode::Quota))
    }

    fn refuse_budget(&mut self, operation: &'static str, rule: &str, message: String) {
        self.refuse_rule(operation, ".", Access::Read, rule, message, ToolErrorKind::TooLarge);
    }

    /// The workspace directory, if the call has one.
    pub(crate) fn root(&self) -> Option<&cap_std::fs::Dir> {
        self.root.as_ref()
    }

    /// Resolve a path an agent gave a host-implemented tool (relative to the workspace root) to
    /// its canonical form; a path outside is refused and recorded like a component's.
    pub(crate) fn resolve_path(&mut self, operation: &'static str, path: &str, access: Access) -> Option<String> {
        match resolve(self.root.as_ref(), ".", path, false) {
            Resolved::Inside(canonical) => Some(canonical),
            Resolved::Outside => {
                self.refuse_outside(operation, path, access);
                None
            }
            Resolved::Loop => None,
        }
    }

    /// The host side of `context.inspect`: the permission bits of `path` (relative to the
    /// workspace root, a final symlink not followed) and what the policy says about reading,
    /// writing and deleting it. Judged like a `stat`: a path outside, or one the role may not
    /// read, is refused and recorded.
    pub(crate) fn inspect(&mut self, path: &str) -> Result<Inspected, (ToolErrorKind, String)> {
        let shown = escape_control(path);
        if self.spend("inspect").is_err() {
            return Err(self.last_refusal(ToolErrorKind::TooLarge));
        }
        let canonical = match resolve(self.root.as_ref(), ".", path, false) {
            Resolved::Inside(canonical) => canonical,
            Resolved::Outside => {
                self.refuse_outside("inspect", path, Access::Read);
                return Err(self.last_refusal(ToolErrorKind::Denied));
            }
            Resolved::Loop => {
                return Err((ToolErrorKind::InvalidArgs, format!("`{shown}` goes through more than {MAX_SYMLINK_HOPS} symlinks")));
            }
        };
        if self.land(&canonical).is_err() {
            return Err((ToolErrorKind::Failed, format!("`{shown}` could not be looked up")));
        }
        let Some(root) = self.root.as_ref() else {
            return Err((ToolErrorKind::Failed, "the call has no workspace".to_owned()));
        };
        let metadata = match root.symlink_metadata(&canonical) {
            Ok(metadata) => metadata,
            Err(error) if matches!(error.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
                if self.check_missing("inspect", &canonical).is_err() {
                    return Err(self.last_refusal(ToolErrorKind::Denied));
                }
                return Err((ToolErrorKind::NotFound, format!("`{shown}` does not exist: check the path with `list_files`")));
            }
            Err(error) => return Err((ToolErrorKind::Failed, format!("`{shown}` could not be looked up ({})", error.kind()))),
        };
        let read = if metadata.is_dir() { Access::List } else { Access::Read };
        if self.check_lookup("inspect", &canonical, Some(metadata.is_dir())).is_err() {
            return Err(self.last_refusal(ToolErrorKind::Denied));
        }
        use cap_std::fs::PermissionsExt as _;
        Ok(Inspected {
            mode: metadata.permissions().mode(),
            read: self.decide(read, &canonical).effect,
            write: self.decide(Access::Write, &canonical).effect,
            delete: self.decide(Access::Delete, &canonical).effect,
        })
    }

    /// Judge a lookup of the canonical `path`, which does not exist: refused (and recorded) as
    /// it would be if something were there that the role may not see — a file it may not read
    /// or a directory it may not list — so that "not found" and "denied" do not tell a
    /// component which hidden paths exist.
    fn check_missing(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        self.check_lookup(operation, path, None)
    }

    /// Judge a lookup (`stat`, `inspect`) of the canonical `path`: a directory needs `list`,
    /// anything else `read`, and a missing path is refused if either would be ([`check_missing`]).
    /// Where the role may neither read nor list, every lookup is refused the same way, as a
    /// read, whatever is there: the answer tells nothing about what exists.
    fn check_lookup(&mut self, operation: &'static str, path: &str, is_directory: Option<bool>) -> FsResult<()> {
        let hidden = self.effect(Access::Read, path) == Effect::Deny;
        if hidden && self.effect(Access::List, path) == Effect::Deny {
            return self.check(operation, path, Access::Read);
        }
        match is_directory {
            Some(true) => self.check(operation, path, Access::List),
            Some(false) => self.check(operation, path, Access::Read),
            None if hidden => self.check(operation, path, Access::Read),
            None if self.effect(Access::List, path) == Effect::Deny => self.check(operation, path, Access::List),
            None => Ok(()),
        }
    }

    /// The kind and message of the refusal just recorded.
    fn last_refusal(&self, fallback: ToolErrorKind) -> (ToolErrorKind, String) {
        match self.denials.last() {
            Some(denial) => (denial.kind, denial.message.clone()),
            None => (fallback, "the host refused the lookup".to_owned()),
        }
    }

    /// Check `access` to the canonical `path` for a host-implemented tool, and prepare its
    /// mutation (locks, journal). `false` if refused (the denial is recorded).
    pub(crate) fn admit(&mut self, operation: &'static str, path: &str, access: Access) -> bool {
        if self.check(operation, path, access).is_err() {
            return false;
        }
        !matches!(access, Access::Write | Access::Delete) || self.before_mutation(operation, path, false).is_ok()
    }

    /// Whether the policy lets the role `access` the path or pattern (no recording).
    pub(crate) fn allows(&self, access: Access, path: &str) -> bool {
        self.effect(access, path) == Effect::Allow
    }

    /// Run the call as a transaction: mutations pass the lock table and the read-before-write
    /// check, and are journaled first. Without one, every mutation is refused.
    pub(crate) fn with_transaction(mut self, transaction: Transaction) -> Self {
        self.transaction = Some(transaction);
        self
    }

    /// Write decisions to `sink`, and refuse modifications of `state_paths`.
    pub(crate) fn with_audit(mut self, sink: Option<AuditSink>, state_paths: Vec<(String, bool)>) -> Self {
        self.audit = sink;
        self.state_paths = state_paths;
        self
    }

    /// Write one decision to the audit trail before the operation proceeds.
    fn audit(&self, event: &FsEvent) -> std::io::Result<()> {
        let Some(sink) = &self.audit else {
            return Ok(());
        };
        let decision = match (event.asked, event.effect) {
            (true, Effect::Allow) => "approved",
            (true, _) => "refused",
            (false, effect) => effect.as_str(),
        };
        let record = Record::filesystem(
            &now(),
            &sink.session,
            &self.role,
            &sink.tool,
            &sink.call_id,
            event.operation,
            &event.path,
            event.access.as_str(),
            decision,
            &event.rule,
        );
        sink.log.append(&[record])
    }

    fn base(&self, descriptor: &Resource<Descriptor>) -> FsResult<String> {
        self.descriptors
            .get(&descriptor.rep())
            .cloned()
            .ok_or_else(|| FsError::from(ErrorCode::BadDescriptor))
    }

    /// Resolve `path` against the descriptor's directory, then decide `access` to it.
    fn check_at(
        &mut self,
        operation: &'static str,
        descriptor: &Resource<Descriptor>,
        path: &str,
        follow_final: bool,
        access: Access,
    ) -> FsResult<String> {
        let canonical = self.resolve_at(operation, descriptor, path, follow_final, access)?;
        self.check(operation, &canonical, access)?;
        Ok(canonical)
    }

    /// Resolve `path` against the descriptor's directory to a canonical workspace path; a path
    /// outside the workspace is refused (and recorded) as an `access` to it.
    fn resolve_at(
        &mut self,
        operation: &'static str,
        descriptor: &Resource<Descriptor>,
        path: &str,
        follow_final: bool,
        access: Access,
    ) -> FsResult<String> {
        let base = self.base(descriptor)?;
        match resolve(self.root.as_ref(), &base, path, follow_final) {
            Resolved::Inside(canonical) => Ok(canonical),
            Resolved::Outside => Err(self.refuse_outside(operation, path, access)),
            Resolved::Loop => Err(FsError::from(ErrorCode::Loop)),
        }
    }

    /// Decide `access` to the canonical `path`.
    fn check(&mut self, operation: &'static str, path: &str, access: Access) -> FsResult<()> {
        let decision = self.decide(access, path);
        let mut event = FsEvent {
            operation,
            path: path.to_owned(),
            access,
            effect: decision.effect,
            rule: decision.rule.clone(),
            asked: false,
        };
        if decision.effect == Effect::Ask {
            event.asked = true;
            let approved = self
                .approver
                .as_ref()
                .is_some_and(|approver| approver.approve(&self.role, access, path, &decision.rule));
            if approved {
                event.effect = Effect::Allow;
            } else {
                event.effect = Effect::Deny;
                let message = format!(
                    "{access} of `{}` needs approval (rule `{}`{}) and was not approved: ask the operator to approve it (the CLI takes `--approve`)",
                    escape_control(path),
                    decision.rule,
                    self.rule_location(&decision)
                );
                return Err(self.refuse(event, message));
            }
        }
        if event.effect == Effect::Deny {
            let message = self.denial_message(access, path, &decision);
            return Err(self.refuse(event, message));
        }
        if matches!(access, Access::Write | Access::Delete) {
            let key = (access, path.to_owned());
            if !self.audited.contains(&key) {
                self.check_lock(operation, path, access)?;
                if self.audit(&event).is_err() {
                    // No record, no modification.
                    let message = format!(
                        "{access} of `{}` was refused because the audit trail cannot be written; tell the operator",
                        escape_control(path)
                    );
                    event.effect = Effect::Deny;
                    event.rule = "audit-unavailable".to_owned();
                    return Err(self.refuse(event, message));
                }
                self.audited.insert(key);
            }
        }
        self.remember(event);
        Ok(())
    }

    /// Refuse a modification of `path` that the lock table does not allow.
    fn check_lock(&mut self, operation: &'static str, path: &str, access: Access) -> FsResult<()> {
        let Some(transaction) = &self.transaction else {
            return Ok(());
        };
        let refusal = match transaction.locks.check_write(&transaction.workspace, path, &transaction.owner, &transaction.fences) {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(refusal)) => (refusal.rule(), refusal.message(&escape_control(path)), ToolErrorKind::Conflict),
            Err(_) => (
                "locks-unavailable".to_owned(),
                format!("{access} of `{}` was refused because the lock table cannot be read; tell the operator", escape_control(path)),
                ToolErrorKind::Failed,
            ),
        };
        let (rule, message, kind) = refusal;
        Err(self.refuse_rule(operation, path, access, &rule, message, kind))
    }

    /// Before `path` is mutated: check that the session read the current content (when the
    /// mutation replaces content), then journal its state. Call after [`check`](Self::check).
    fn before_mutation(&mut self, operation: &'static str, path: &str, replaces_content: bool) -> FsResult<()> {
        let Some(root) = self.root.as_ref() else {
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
                None => self.warnings.push(format!(
                    "Warning: overwriting existing file `{shown}` that was not read first. Consider reading it first."
                )),
            }
        }
        self.journal(operation, path, |journal, root| journal.preserve(root, path))
    }

    /// Journal the rename of the directory `from` to `to` (its content moves with it).
    fn before_move(&mut self, operation: &'static str, from: &str, to: &str) -> FsResult<()> {
        self.journal(operation, to, |journal, root| journal.preserve(root, to))?;
        self.journal(operation, from, |journal, _| journal.preserve_move(from, to))
    }

    fn journal(
        &mut self,
        operation: &'static str,
        path: &str,
        write: impl FnOnce(&mut Journal, &cap_std::fs::Dir) -> std::io::Result<()>,
    ) -> FsResult<()> {
        let (Some(root), Some(transaction)) = (self.root.as_ref(), self.transaction.as_mut()) else {
            return Ok(());
        };
        let journaled = (|| {
            if transaction.journal.is_none() {
                transaction.journal = Some(Journal::begin(
                    &transaction.journals,
                    &transaction.call_id,
                    &transaction.session,
                    &transaction.workspace,
                )?);
            }
            match transaction.journal.as_mut() {
                Some(journal) => write(journal, root),
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

    /// Whether opening `path` with these flags rewrites it whole (or creates it), so that the
    /// write can go to a temporary sibling that replaces it at once.
    fn rewrites_whole(&self, path: &str, open_flags: OpenFlags) -> bool {
        let (Some(root), Some(transaction)) = (self.root.as_ref(), self.transaction.as_ref()) else {
            return false;
        };
        if path == "." || open_flags.contains(OpenFlags::DIRECTORY) || transaction.shadows.iter().any(|(shadowed, _)| shadowed == path) {
            return false;
        }
        match root.symlink_metadata(path) {
            Ok(metadata) => metadata.is_file() && open_flags.contains(OpenFlags::TRUNCATE) && !open_flags.contains(OpenFlags::EXCLUSIVE),
            Err(error) => error.kind() == std::io::ErrorKind::NotFound && open_flags.contains(OpenFlags::CREATE),
        }
    }

    /// Create the temporary sibling that will replace `path` (already journaled), with the
    /// mode `path` has. Returns its workspace path.
    fn shadow(&mut self, path: &str) -> FsResult<String> {
        let (parent, name) = path.rsplit_once('/').map_or((None, path), |(parent, name)| (Some(parent), name));
        let Some(transaction) = self.transaction.as_ref() else {
            return Err(FsError::from(ErrorCode::Access));
        };
        let temporary_name = format!("{SHADOW_PREFIX}{}-{}-{name}", transaction.call_id, transaction.shadows.len());
        let temporary = match parent {
            Some(parent) => format!("{parent}/{temporary_name}"),
            None => temporary_name,
        };
        // Not journaled: a rollback removes every `SHADOW_PREFIX<call id>-*` file beside the
        // journaled paths.
        let Some(root) = self.root.as_ref() else {
            return Err(FsError::from(ErrorCode::Access));
        };
        let created = (|| {
            // Created where the judged path is, not where a symlink swapped in since leads.
            let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::EXCL;
            let file = std::fs::File::from(beneath::open(root, &temporary, flags, rustix::fs::Mode::from_raw_mode(0o600))?);
            if let Ok(metadata) = root.symlink_metadata(path) {
                file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(cap_std::fs::PermissionsExt::mode(&metadata.permissions())))?;
            }
            Ok::<_, std::io::Error>(())
        })();
        created.map_err(|error| FsError::from(ErrorCode::from(error)))?;
        if let Some(transaction) = self.transaction.as_mut() {
            transaction.shadows.push((path.to_owned(), temporary.clone()));
        }
        Ok(temporary)
    }

    /// If `path`, or a file under it, is being rewritten through a temporary sibling, put the
    /// new content in place now: another operation (on the file, or renaming or removing its
    /// directory) is about to touch it.
    fn land(&mut self, path: &str) -> FsResult<()> {
        let Some(transaction) = self.transaction.as_mut() else {
            return Ok(());
        };
        let under = |shadowed: &str| {
            path == "." || shadowed == path || shadowed.strip_prefix(path).is_some_and(|rest| rest.starts_with('/'))
        };
        if !transaction.shadows.iter().any(|(shadowed, _)| under(shadowed)) {
            return Ok(());
        }
        let (landing, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut transaction.shadows).into_iter().partition(|(shadowed, _)| under(shadowed));
        transaction.shadows = kept;
        let Some(root) = self.root.as_ref() else {
            return Ok(());
        };
        for (path, temporary) in landing {
            land(root, &path, &temporary).map_err(|error| FsError::from(ErrorCode::from(error)))?;
        }
        Ok(())
    }

    /// Put the rewritten files directly inside `directory` in place.
    fn land_in(&mut self, directory: &str) -> FsResult<()> {
        let inside: Vec<String> = self
            .transaction
            .as_ref()
            .map(|transaction| {
                transaction
                    .shadows
                    .iter()
                    .filter(|(path, _)| path.rsplit_once('/').map_or(".", |(parent, _)| parent) == directory)
                    .map(|(path, _)| path.clone())
                    .collect()
            })
            .unwrap_or_default();
        for path in inside {
            self.land(&path)?;
        }
        Ok(())
    }

    /// Put every rewritten file in place: the call is about to commit.
    pub(crate) fn land_all(&mut self) -> Result<(), String> {
        let Some(transaction) = self.transaction.as_mut() else {
            return Ok(());
        };
        let shadows = std::mem::take(&mut transaction.shadows);
        let Some(root) = self.root.as_ref() else {
            return Ok(());
        };
        for (path, temporary) in shadows {
            land(root, &path, &temporary).map_err(|error| format!("`{}`: {error}", escape_control(&path)))?;
        }
        Ok(())
    }

    /// Whether `name` in `directory` is a temporary sibling of this call's rewrites (hidden
    /// from listings).
    fn is_shadow(&self, child: &str) -> bool {
        self.transaction
            .as_ref()
            .is_some_and(|transaction| transaction.shadows.iter().any(|(_, temporary)| temporary == child))
    }

    /// Note that the file `path`, whose descriptor's metadata is `metadata`, was opened for
    /// reading.
    fn track_read(&mut self, path: &str, metadata: &std::fs::Metadata) {
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
        if let Some(version) = Version::of(metadata) {
            transaction.reads.push((path.to_owned(), version));
        }
    }

    /// Refuse `access` to `path` by the host's own `rule` (not the policy's), recorded like
    /// every refusal.
    fn refuse_rule(
        &mut self,
        operation: &'static str,
        path: &str,
        access: Access,
        rule: &str,
        message: String,
        kind: ToolErrorKind,
    ) -> FsError {
        let event = FsEvent {
            operation,
            path: path.to_owned(),
            access,
            effect: Effect::Deny,
            rule: rule.to_owned(),
            asked: false,
        };
        self.refuse_as(event, message, kind)
    }

    /// Refuse a path that leads outside the workspace (as the component wrote it).
    fn refuse_outside(&mut self, operation: &'static str, path: &str, access: Access) -> FsError {
        let message = format!("`{}` is outside the workspace: tools can only reach paths inside it", escape_control(path));
        self.refuse_rule(operation, path, access, "workspace-boundary", message, ToolErrorKind::Denied)
    }

    fn decide(&self, access: Access, path: &str) -> Decision {
        self.judgment(access, path).to_decision()
    }

    /// The effect [`decide`](Self::decide) would give, without allocating: visibility checks
    /// run for every entry a scan lists.
    fn effect(&self, access: Access, path: &str) -> Effect {
        self.judgment(access, path).effect()
    }

    /// What decides `access` to `path`: the call's own limits first, then the policy.
    fn judgment(&self, access: Access, path: &str) -> Judgment<'_> {
        if self.is_read_only_refusal(access) {
            return Judgment::ReadOnlyCall;
        }
        if let Some(state) = self.state_path_of(access, path) {
            return Judgment::StatePath(state);
        }
        let Some(policy) = &self.policy else {
            return Judgment::NoPolicy;
        };
        match policy.role(&self.role) {
            Some(role) => Judgment::Policy(policy.verdict(role, access, path)),
            // The runtime refuses unknown roles before a call starts; stay closed regardless.
            None => Judgment::UnknownRole,
        }
    }

    /// Whether `access` is a modification in a call that may not modify anything.
    fn is_read_only_refusal(&self, access: Access) -> bool {
        matches!(access, Access::Write | Access::Delete) && self.transaction.is_none() && self.root.is_some()
    }

    /// The host-owned path that `path` is or lies under, if `access` modifies it (or, for a
    /// hidden one, touches it at all).
    fn state_path_of(&self, access: Access, path: &str) -> Option<&str> {
        let modifies = matches!(access, Access::Write | Access::Delete);
        self.state_paths
            .iter()
            .find(|(state, hidden)| {
                (modifies || *hidden)
                    && (state == "." || path == state.as_str() || path.strip_prefix(state.as_str()).is_some_and(|rest| rest.starts_with('/')))
            })
            .map(|(state, _)| state.as_str())
    }

    /// Judge `access` to `path`: its effect, and the whole decision while the call still
    /// records what it was allowed (the first [`MAX_RECORDED_EVENTS`] accesses; past them
    /// nothing is allocated).
    fn judge(&self, access: Access, path: &str) -> (Effect, Option<Decision>) {
        if self.events.len() < MAX_RECORDED_EVENTS {
            let decision = self.decide(access, path);
            (decision.effect, Some(decision))
        } else {
            (self.effect(access, path), None)
        }
    }

    /// Allow a metadata-only access (`metadata-hash-at`, which wasi-libc makes for every
    /// directory entry it lists) if the role may read or list the path.
    fn check_visible(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        if self.effect(Access::List, path) == Effect::Allow {
            return Ok(());
        }
        self.check(operation, path, Access::Read)
    }

    /// Whether an existing directory the role may see is at `path`: creating it again is then
    /// answered `exist` without a refusal, as `mkdir -p` (and std's `create_dir_all`) expect.
    fn is_visible_directory(&self, path: &str) -> bool {
        self.is_directory(path) && self.is_visible(path, true)
    }

    /// Before the directory `from` is renamed to `to`: everything under it moves too, so each
    /// entry must be deletable where it is and writable where it lands (policy, protected
    /// paths and locks), hidden entries included. A rule on a file deep inside cannot be
    /// bypassed by moving its directory.
    fn check_subtree_move(&mut self, operation: &'static str, from: &str, to: &str) -> FsResult<()> {
        let Some(root) = self.root.as_ref() else {
            return Ok(());
        };
        // Each entry with whether it is a directory and whether a symlink, as the listing says
        // (no link followed).
        let mut entries: Vec<(String, bool, bool)> = Vec::new();
        let mut pending = vec![from.to_owned()];
        while let Some(directory) = pending.pop() {
            let listing = root.read_dir(&directory).map_err(|error| FsError::from(ErrorCode::from(error)))?;
            for entry in listing {
                let entry = entry.map_err(|error| FsError::from(ErrorCode::from(error)))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let path = format!("{directory}/{name}");
                let file_type = entry.file_type().map_err(|error| FsError::from(ErrorCode::from(error)))?;
                let is_directory = file_type.is_dir();
                if is_directory {
                    pending.push(path.clone());
                }
                entries.push((path, is_directory, file_type.is_symlink()));
                if entries.len() > MAX_MOVED_ENTRIES {
                    let message = format!(
                        "moving the directory `{}` is refused: it holds more than {MAX_MOVED_ENTRIES} entries, each of which would have to be checked; move its contents in parts",
                        escape_control(from)
                    );
                    return Err(self.refuse_rule(operation, from, Access::Delete, "move-too-large", message, ToolErrorKind::TooLarge));
                }
            }
        }
        for (path, is_directory, is_symlink) in entries {
            let Some(rest) = path.strip_prefix(from) else {
                continue;
            };
            let landing = format!("{to}{rest}");
            if is_symlink {
                self.check_link_stays_inside(operation, (from, to), &path, &landing)?;
            }
            if !self.is_visible(&path, is_directory) {
                // An entry the role may not see moves only if it may be deleted where it is,
                // written where it lands, and stays hidden there (what `check_hidden_stays_hidden`
                // requires of a single move); the refusal names the directory, not the entry
                // (the audit record has the entry).
                let movable = self.decide(Access::Delete, &path).effect == Effect::Allow
                    && self.decide(Access::Write, &landing).effect == Effect::Allow
                    && !self.is_visible(&landing, is_directory);
                if !movable {
                    let message = format!(
                        "moving the directory `{}` is refused: it holds entries your role may not see, and they may not be moved with it; move the entries you can see instead",
                        escape_control(from)
                    );
                    return Err(self.refuse_rule(operation, &path, Access::Delete, "hidden-entry", message, ToolErrorKind::Denied));
                }
            }
            self.check(operation, &path, Access::Delete)?;
            self.check(operation, &landing, Access::Write)?;
        }
        Ok(())
    }

    /// Refuse to move the symlink `link` to `landing` (as part of moving `moved`) if its
    /// relative target, read from where it would land, leaves the workspace: toolcell never
    /// follows it there, but people, CI and other programs would. An absolute target is left
    /// alone (moving it changes nothing of where it points).
    fn check_link_stays_inside(&mut self, operation: &'static str, (moved, moved_to): (&str, &str), link: &str, landing: &str) -> FsResult<()> {
        let Some(root) = self.root.as_ref() else {
            return Ok(());
        };
        let Ok(target) = root.read_link_contents(link) else {
            // Gone since it was listed: the move itself will say so.
            return Ok(());
        };
        let target = target.to_string_lossy().into_owned();
        if target.starts_with('/') {
            return Ok(());
        }
        let landing_directory = landing.rsplit_once('/').map_or(".", |(parent, _)| parent);
        if toolcell_policy::join_lexically(landing_directory, &target).is_some() {
            return Ok(());
        }
        let message = if moved == link {
            format!(
                "moving the symlink `{}` to `{}` is refused: its target `{}` would then lead outside the workspace. Move it where its target stays inside, or recreate it there with a target that does",
                escape_control(link),
                escape_control(landing),
                escape_control(&target)
            )
        } else {
            format!(
                "moving `{}` to `{}` is refused: the symlink `{}` in it (target `{}`) would then lead outside the workspace. Move it where the link's target stays inside, or change the link first",
                escape_control(moved),
                escape_control(moved_to),
                escape_control(link),
                escape_control(&target)
            )
        };
        Err(self.refuse_rule(operation, link, Access::Write, "symlink-target", message, ToolErrorKind::Denied))
    }

    /// Refuse to move or link `from`, which the role may not read, to `to`, where it could:
    /// that would hand it the content the policy hides. (Moving a hidden entry to a place
    /// where it stays hidden is allowed.)
    fn check_hidden_stays_hidden(&mut self, operation: &'static str, from: &str, to: &str, is_directory: bool) -> FsResult<()> {
        if self.is_visible(from, is_directory) || !self.is_visible(to, is_directory) {
            return Ok(());
        }
        let message = format!(
            "moving or linking `{}` to `{}` is refused: your role may not read it where it is, and could where it would go",
            escape_control(from),
            escape_control(to)
        );
        Err(self.refuse_rule(operation, from, Access::Read, "hidden-stays-hidden", message, ToolErrorKind::Denied))
    }

    /// Whether `path` is a symlink (not followed).
    fn is_symlink(&self, path: &str) -> bool {
        self.root
            .as_ref()
            .and_then(|root| root.symlink_metadata(path).ok())
            .is_some_and(|metadata| metadata.is_symlink())
    }

    /// After `from` was renamed to `to`: every descriptor opened at or under `from` now
    /// refers to the same object under `to`.
    fn moved(&mut self, from: &str, to: &str) {
        for path in self.descriptors.values_mut() {
            if path == from {
                *path = to.to_owned();
            } else if let Some(rest) = path.strip_prefix(from).filter(|rest| rest.starts_with('/')) {
                *path = format!("{to}{rest}");
            }
        }
    }

    /// Whether `path` is a directory (not a symlink to one).
    fn is_directory(&self, path: &str) -> bool {
        self.root
            .as_ref()
            .and_then(|root| root.symlink_metadata(path).ok())
            .is_some_and(|metadata| metadata.is_dir())
    }

    /// Whether the role may see `path` in a listing: read it (a file) or list it (a directory).
    fn is_visible(&self, path: &str, is_directory: bool) -> bool {
        let access = if is_directory { Access::List } else { Access::Read };
        self.effect(access, path) != Effect::Deny
    }

    fn rule_location(&self, decision: &Decision) -> String {
        match (&self.policy, decision.line) {
            (Some(policy), Some(line)) => format!(", {} line {line}", policy.file()),
            _ => String::new(),
        }
    }

    fn denial_message(&self, access: Access, path: &str, decision: &Decision) -> String {
        let path = escape_control(path);
        let role = &self.role;
        match decision.rule.as_str() {
            "default-deny" => format!(
                "{access} of `{path}` is denied for role `{role}`: no rule of the policy allows it (default deny). Work on another path, or ask the operator for a role or policy that allows it."
            ),
            "read-only-call" => format!(
                "{access} of `{path}` is refused: this call may only read (validators and descriptions cannot change files)."
            ),
            rule if rule.strip_prefix("protected:").is_some_and(|protected| self.state_paths.iter().any(|(state, _)| state == protected)) => format!(
                "{access} of `{path}` is refused: it is toolcell's own state (`{}`: its audit trail, cache, plugins or policy), which no tool may change. Leave it alone.",
                &rule["protected:".len()..]
            ),
            rule if rule.starts_with("protected:") => format!(
                "{access} of `{path}` is denied for role `{role}`: the path is protected (`{}`), and no rule names it explicitly. Leave it unchanged.",
                &rule["protected:".len()..]
            ),
            rule => format!(
                "{access} of `{path}` is denied for role `{role}` by rule `{rule}`{}. Work on another path, or ask the operator to change the policy.",
                self.rule_location(decision)
            ),
        }
    }

    /// Record a refusal (in the audit trail and for the call's result) and return the WASI
    /// error the component sees.
    fn refuse(&mut self, event: FsEvent, message: String) -> FsError {
        self.refuse_as(event, message, ToolErrorKind::Denied)
    }

    fn refuse_as(&mut self, event: FsEvent, message: String, kind: ToolErrorKind) -> FsError {
        let key = (event.operation, event.access, event.rule.clone(), event.path.clone());
        if let Some(count) = self.repeats.get_mut(&key) {
            // The same refusal again: counted, and recorded once when the call ends.
            *count += 1;
            return FsError::from(ErrorCode::Access);
        }
        if let Some(budget) = self.budget.as_ref()
            && self.repeats.len() as u64 >= budget.audit_records
        {
            let message = format!(
                "`{}` was stopped: it made more than {} distinct refused filesystem accesses, its budget of audit records for one call; nothing it did is kept. Do less in one call (the operator can raise `audit_records` under `[limits]` or `[limits.tools.{}]` in the policy)",
                budget.tool, budget.audit_records, budget.tool
            );
            let stop = FsEvent {
                rule: "audit-record-budget".to_owned(),
                ..event
            };
            if self.audit(&stop).is_err() {
                self.audit_failures += 1;
            }
            self.denials.push(Denial {
                event: stop,
                message: message.clone(),
                kind: ToolErrorKind::TooLarge,
            });
            self.flood = Some(message.clone());
            return FsError::trap(wasmtime::format_err!("{message}"));
        }
        if event.rule != "audit-unavailable" && self.audit(&event).is_err() {
            self.audit_failures += 1;
        }
        self.repeats.insert(key, 0);
        self.denials.push(Denial { event, message, kind });
        FsError::from(ErrorCode::Access)
    }

    /// Record an allowed access the caller judged already with [`judge`](Self::judge).
    fn record_allowed(&mut self, operation: &'static str, path: &str, access: Access, decision: Option<Decision>) {
        match decision {
            Some(decision) => self.remember(FsEvent {
                operation,
                path: path.to_owned(),
                access,
                effect: decision.effect,
                rule: decision.rule,
                asked: false,
            }),
            None => self.unrecorded_events += 1,
        }
    }

    /// The entries of `directory` (the workspace path `path`) the role may see, read at once:
    /// entries it may not read or list, and this call's temporary rewrites, are left out. An
    /// entry's type comes from the listing itself (`d_type`), so no entry is stat'ed unless the
    /// filesystem does not say.
    fn list(&self, directory: &std::fs::File, path: &str) -> FsResult<Listing> {
        use rustix::fs::{AtFlags, FileType};
        let mut entries = Vec::new();
        let mut child = String::new();
        for entry in rustix::fs::Dir::read_from(directory).map_err(std::io::Error::from)? {
            let entry = entry.map_err(std::io::Error::from)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(name) else {
                // As wasmtime-wasi: the entry is an error, the listing goes on.
                entries.push(Err(ErrorCode::IllegalByteSequence));
                continue;
            };
            let file_type = match entry.file_type() {
                FileType::Unknown => match rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    // Gone since it was listed.
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(errno) => {
                        entries.push(Err(ErrorCode::from(std::io::Error::from(errno))));
                        continue;
                    }
                },
                file_type => file_type,
            };
            let type_ = descriptor_type(file_type);
            child.clear();
            if path != "." {
                child.push_str(path);
                child.push('/');
            }
            child.push_str(name);
            if self.is_visible(&child, type_ == DescriptorType::Directory) && !self.is_shadow(&child) {
                entries.push(Ok(DirectoryEntry { type_, name: name.to_owned() }));
            }
        }
        Ok(Listing {
            entries: entries.into_iter(),
        })
    }

    fn remember(&mut self, event: FsEvent) {
        if self.events.len() < MAX_RECORDED_EVENTS {
            self.events.push(event);
        } else {
            self.unrecorded_events += 1;
        }
    }

    /// Refuse to open a FIFO, socket or device: opening or reading one can block the host
    /// beyond any deadline, and no file tool needs one.
    fn check_openable(&mut self, operation: &'static str, path: &str, access: Access) -> FsResult<()> {
        let Some(root) = self.root.as_ref() else {
            return Ok(());
        };
        let Ok(metadata) = root.metadata(path) else {
            return Ok(());
        };
        match special_kind(cap_std::fs::MetadataExt::mode(&metadata)) {
            Some(kind) => Err(self.refuse_special(operation, path, access, kind)),
            None => Ok(()),
        }
    }

    /// Refuse `access` to the special file `path` (`kind` says what it is).
    fn refuse_special(&mut self, operation: &'static str, path: &str, access: Access, kind: &str) -> FsError {
        let message = format!(
            "`{}` is {kind}, which tools may not open (it could block the host): only regular files and directories can be opened",
            escape_control(path)
        );
        self.refuse_rule(operation, path, access, "special-file", message, ToolErrorKind::Denied)
    }

    /// `path` joined to `descriptor`'s directory when that needs no resolution: relative, and
    /// without `..`. When none of its components is a symlink it is then the canonical path,
    /// which an open through [`beneath`] proves (it fails on any symlink on the way).
    fn plain_path(&self, descriptor: &Resource<Descriptor>, path: &str) -> FsResult<Option<String>> {
        let base = self.descriptors.get(&descriptor.rep()).ok_or_else(|| FsError::from(ErrorCode::BadDescriptor))?;
        if path.is_empty() || path.starts_with('/') || path.contains('\0') {
            return Ok(None);
        }
        let mut joined = String::with_capacity(base.len() + 1 + path.len());
        if base != "." {
            joined.push_str(base);
        }
        for component in path.split('/') {
            match component {
                "" | "." => {}
                ".." => return Ok(None),
                name => {
                    if !joined.is_empty() {
                        joined.push('/');
                    }
                    joined.push_str(name);
                }
            }
        }
        if joined.is_empty() {
            joined.push('.');
        }
        Ok(Some(joined))
    }

    /// Refuse a write through a file with several hard links: the other names may lie where the
    /// role may not write.
    fn check_single_link(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        let Some(root) = self.root.as_ref().filter(|_| path != ".") else {
            return Ok(());
        };
        match root.symlink_metadata(path) {
            Ok(metadata) if metadata.is_file() && cap_std::fs::MetadataExt::nlink(&metadata) > 1 => {
                let message = format!(
                    "write to `{}` is refused: the file has other hard links, which may lie where this role may not write. Write a new file instead.",
                    escape_control(path)
                );
                Err(self.refuse_rule(operation, path, Access::Write, "hard-link", message, ToolErrorKind::Denied))
            }
            _ => Ok(()),
        }
    }
}

/// The canonical workspace path `path` (relative to the root) leads to, following symlinks;
/// `None` if it leads outside or loops.
pub(crate) fn canonical(root: &cap_std::fs::Dir, path: &str) -> Option<String> {
    match resolve(Some(root), ".", path, true) {
        Resolved::Inside(canonical) => Some(canonical),
        Resolved::Outside | Resolved::Loop => None,
    }
}

/// Prefix of the temporary siblings whole-file rewrites go to.
pub(crate) const SHADOW_PREFIX: &str = ".toolcell-";

/// Replace `path` with its rewritten temporary sibling: synced first, then renamed over it,
/// both names taken in one directory opened without following a symlink (so a directory on
/// the way swapped for one cannot send the content elsewhere).
fn land(root: &cap_std::fs::Dir, path: &str, temporary: &str) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let (parent, name) = path.rsplit_once('/').unwrap_or((".", path));
    let temporary_name = temporary.rsplit_once('/').map_or(temporary, |(_, name)| name);
    let directory = beneath::open(root, parent, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())?;
    let file = rustix::fs::openat(&directory, temporary_name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    rustix::fs::fdatasync(&file)?;
    rustix::fs::renameat(&directory, temporary_name, &directory, name)?;
    Ok(())
}

/// Where a path leads.
enum Resolved {
    /// The canonical workspace-relative path (`.` for the root).
    Inside(String),
    /// Outside the workspace (through `..`, an absolute path, or a symlink).
    Outside,
    /// Too many symlinks.
    Loop,
}

/// Resolve `path` relative to the workspace directory `base`, following symlinks in every
/// component (and in the last one if `follow_final`), without ever leaving the workspace.
fn resolve(root: Option<&cap_std::fs::Dir>, base: &str, path: &str, follow_final: bool) -> Resolved {
    let Some(root) = root else {
        return Resolved::Outside;
    };
    if path.starts_with('/') {
        return Resolved::Outside;
    }
    let mut resolved: Vec<String> = if base == "." {
        Vec::new()
    } else {
        base.split('/').map(str::to_owned).collect()
    };
    let mut pending: std::collections::VecDeque<String> = path.split('/').map(str::to_owned).collect();
    let mut hops = 0;
    while let Some(component) = pending.pop_front() {
        match component.as_str() {
            "" | "." => continue,
            ".." => {
                if resolved.pop().is_none() {
                    return Resolved::Outside;
                }
                continue;
            }
            _ => {}
        }
        resolved.push(component);
        let is_last = pending.iter().all(|rest| rest.is_empty() || rest == ".");
        if is_last && !follow_final {
            continue;
        }
        let joined = resolved.join("/");
        let Ok(metadata) = root.symlink_metadata(&joined) else {
            // Missing (about to be created) or unreadable: nothing to follow.
            continue;
        };
        if !metadata.file_type().is_symlink() {
            continue;
        }
        hops += 1;
        if hops > MAX_SYMLINK_HOPS {
            return Resolved::Loop;
        }
        let Ok(target) = root.read_link(&joined) else {
            // cap-std refuses to read a link that points outside (an absolute target).
            return Resolved::Outside;
        };
        let Some(target) = target.to_str() else {
            return Resolved::Outside;
        };
        if target.starts_with('/') {
            return Resolved::Outside;
        }
        resolved.pop();
        for (index, part) in target.split('/').enumerate() {
            pending.insert(index, part.to_owned());
        }
    }
    if resolved.is_empty() {
        Resolved::Inside(".".to_owned())
    } else {
        Resolved::Inside(resolved.join("/"))
    }
}

/// What decides an access ([`FsGuard::judgment`]), borrowed from the guard and its policy.
enum Judgment<'a> {
    /// A modification in a call that may not modify anything.
    ReadOnlyCall,
    /// A modification of the state directory or policy file under this workspace path.
    StatePath(&'a str),
    /// No policy: the workspace boundary is the only rule.
    NoPolicy,
    /// A role the policy does not know.
    UnknownRole,
    /// The policy's verdict for the role.
    Policy(Verdict<'a>),
}

impl Judgment<'_> {
    fn effect(&self) -> Effect {
        match self {
            Judgment::ReadOnlyCall | Judgment::StatePath(_) | Judgment::UnknownRole => Effect::Deny,
            Judgment::NoPolicy => Effect::Allow,
            Judgment::Policy(verdict) => verdict.effect(),
        }
    }

    fn to_decision(&self) -> Decision {
        let rule = match self {
            Judgment::ReadOnlyCall => "read-only-call".to_owned(),
            Judgment::StatePath(state) => format!("protected:{state}"),
            Judgment::NoPolicy => "no-policy".to_owned(),
            Judgment::UnknownRole => "unknown-role".to_owned(),
            Judgment::Policy(verdict) => return verdict.to_decision(),
        };
        Decision {
            effect: self.effect(),
            rule,
            line: None,
        }
    }
}

/// The most bytes one `read` returns (a larger request gets this much).
const MAX_READ_BYTES: usize = 1 << 20;

/// A directory listing made by the guard: the entries the role may see.
pub(crate) struct Listing {
    entries: std::vec::IntoIter<Result<DirectoryEntry, ErrorCode>>,
}

/// What WASI calls a file of type `file_type`.
fn descriptor_type(file_type: rustix::fs::FileType) -> DescriptorType {
    use rustix::fs::FileType;
    match file_type {
        FileType::RegularFile => DescriptorType::RegularFile,
        FileType::Directory => DescriptorType::Directory,
        FileType::Symlink => DescriptorType::SymbolicLink,
        FileType::Fifo => DescriptorType::Fifo,
        FileType::Socket => DescriptorType::Socket,
        FileType::CharacterDevice => DescriptorType::CharacterDevice,
        FileType::BlockDevice => DescriptorType::BlockDevice,
        FileType::Unknown => DescriptorType::Unknown,
    }
}

/// A descriptor's stat as WASI gives it, made the way wasmtime-wasi makes it (the birth time
/// stands for the status-change time, and a time before 1970 is left out).
fn descriptor_stat(metadata: &std::fs::Metadata) -> DescriptorStat {
    use std::os::unix::fs::MetadataExt as _;
    let datetime = |time: std::io::Result<std::time::SystemTime>| {
        let since_epoch = time.ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(Datetime {
            seconds: since_epoch.as_secs(),
            nanoseconds: since_epoch.subsec_nanos(),
        })
    };
    DescriptorStat {
        type_: descriptor_type(rustix::fs::FileType::from_raw_mode(metadata.mode())),
        link_count: metadata.nlink(),
        size: metadata.len(),
        data_access_timestamp: datetime(metadata.accessed()),
        data_modification_timestamp: datetime(metadata.modified()),
        status_change_timestamp: datetime(metadata.created()),
    }
}

/// What a special file is (`a FIFO`, ...) by its `st_mode`; `None` for a regular file,
/// directory or symlink.
fn special_kind(mode: u32) -> Option<&'static str> {
    use rustix::fs::FileType;
    match FileType::from_raw_mode(mode) {
        FileType::Fifo => Some("a FIFO"),
        FileType::Socket => Some("a socket"),
        FileType::CharacterDevice | FileType::BlockDevice | FileType::Unknown => Some("a device"),
        FileType::RegularFile | FileType::Directory | FileType::Symlink => None,
    }
}

/// The OS open flags for a WASI `open-at`, and the mode wasmtime-wasi records for the
/// descriptor (as its own `open-at` computes them).
fn os_open_flags(open_flags: OpenFlags, flags: DescriptorFlags) -> (rustix::fs::OFlags, OpenMode) {
    use rustix::fs::OFlags;
    let mut os = OFlags::empty();
    let mut write = false;
    if open_flags.contains(OpenFlags::CREATE) {
        os |= if open_flags.contains(OpenFlags::EXCLUSIVE) { OFlags::CREATE | OFlags::EXCL } else { OFlags::CREATE };
        write = true;
    }
    if open_flags.contains(OpenFlags::TRUNCATE) {
        os |= OFlags::TRUNC;
        write = true;
    }
    if open_flags.contains(OpenFlags::DIRECTORY) {
        os |= OFlags::DIRECTORY;
    }
    // Not opened for writing: opened for reading (wasmtime-wasi's rule).
    let read = flags.contains(DescriptorFlags::READ) || !flags.contains(DescriptorFlags::WRITE);
    write |= flags.contains(DescriptorFlags::WRITE);
    let mut mode = OpenMode::empty();
    if read {
        mode |= OpenMode::READ;
    }
    if write {
        mode |= OpenMode::WRITE;
    }
    os |= match (read, write) {
        (true, true) => OFlags::RDWR,
        (false, true) => OFlags::WRONLY,
        _ => OFlags::RDONLY,
    };
    (os, mode)
}

/// The flag combinations wasmtime-wasi refuses before opening anything.
fn check_open_flags(open_flags: OpenFlags, flags: DescriptorFlags, mode: OpenMode, perms: FsPerms) -> FsResult<()> {
    if flags.intersects(DescriptorFlags::FILE_INTEGRITY_SYNC | DescriptorFlags::DATA_INTEGRITY_SYNC | DescriptorFlags::REQUESTED_WRITE_SYNC) {
        return Err(ErrorCode::Unsupported.into());
    }
    if open_flags.contains(OpenFlags::DIRECTORY) && open_flags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE) {
        return Err(ErrorCode::Invalid.into());
    }
    if perms.write_not_permitted() && mode.contains(OpenMode::WRITE) {
        return Err(ErrorCode::NotPermitted.into());
    }
    Ok(())
}

/// The current time as RFC 3339 UTC with milliseconds.
pub(crate) fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The access an `open-at` needs.
fn open_access(open_flags: OpenFlags, flags: DescriptorFlags) -> Access {
    if open_flags.intersects(OpenFlags::CREATE | OpenFlags::TRUNCATE)
        || flags.intersects(DescriptorFlags::WRITE | DescriptorFlags::MUTATE_DIRECTORY)
    {
        Access::Write
    } else {
        Access::Read
    }
}

fn follows(flags: PathFlags) -> bool {
    flags.contains(PathFlags::SYMLINK_FOLLOW)
}

/// wasmtime-wasi's filesystem view plus the guard: the host side of `wasi:filesystem` for a
/// governed call.
pub(crate) struct GuardedFilesystem<'a> {
    pub(crate) inner: WasiFilesystemCtxView<'a>,
    pub(crate) guard: &'a mut FsGuard,
}

impl GuardedFilesystem<'_> {
    /// Open the canonical `path` for the guest, following no symlink on the way (see
    /// [`beneath`]). `Ok(None)` if there is no workspace root to open it from.
    fn open_beneath(&self, path: &str, open_flags: OpenFlags, flags: DescriptorFlags) -> std::io::Result<Option<std::fs::File>> {
        let Some(root) = self.guard.root.as_ref() else {
            return Ok(None);
        };
        let (os_flags, _) = os_open_flags(open_flags, flags);
        // Files are created `rw-rw-rw-` less the umask, as cap-std (and so wasmtime-wasi) does.
        let fd = beneath::open(root, path, os_flags, rustix::fs::Mode::from_raw_mode(0o666))?;
        Ok(Some(std::fs::File::from(fd)))
    }

    /// Give the guest the descriptor `file`, opened at the canonical `path` for `access`: a
    /// special file is refused now that it is known what it is (opened without blocking, never
    /// read), a file opened for reading counts as read.
    fn admit_opened(
        &mut self,
        file: std::fs::File,
        path: String,
        access: Access,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
        perms: FsPerms,
    ) -> FsResult<Resource<Descriptor>> {
        let metadata = file.metadata()?;
        if let Some(kind) = special_kind(std::os::unix::fs::MetadataExt::mode(&metadata)) {
            drop(file);
            return Err(self.guard.refuse_special("open-at", &path, access, kind));
        }
        let (_, mode) = os_open_flags(open_flags, flags);
        let descriptor = if metadata.is_dir() {
            Descriptor::Dir(wasmtime_wasi::filesystem::Dir::new(file, perms, mode, BLOCKING_IN_PLACE))
        } else {
            if access == Access::Read {
                self.guard.track_read(&path, &metadata);
            }
            Descriptor::File(wasmtime_wasi::filesystem::File::new(file, perms, mode, BLOCKING_IN_PLACE))
        };
        let opened = self.inner.table.push(descriptor)?;
        self.guard.descriptors.insert(opened.rep(), path);
        Ok(opened)
    }

    /// The workspace path of the object `fd` refers to, for an operation that acts through the
    /// descriptor itself (listing it, writing or resizing through it): the path recorded when
    /// it was opened, provided that path still names that very object. Something moved since
    /// (by another call, or outside toolcell) is refused as a conflict rather than judged by a
    /// name it no longer has. Operations relative to a descriptor (`open-at`, `stat-at`, ...)
    /// need no such check: they act on the path they judge, opened from the workspace root.
    fn current_path(&mut self, fd: &Resource<Descriptor>, operation: &'static str, access: Access) -> FsResult<String> {
        let path = self.guard.base(fd)?;
        let Some(root) = self.guard.root.as_ref().filter(|_| path != ".") else {
            return Ok(path);
        };
        let held = match self.inner.table.get(fd)? {
            Descriptor::File(file) => rustix::fs::fstat(&*file.file),
            Descriptor::Dir(directory) => rustix::fs::fstat(&*directory.dir),
        }
        .map_err(std::io::Error::from)?;
        // A file being rewritten whole is written through its temporary sibling.
        let named = self
            .guard
            .transaction
            .as_ref()
            .and_then(|transaction| transaction.shadows.iter().find(|(shadowed, _)| *shadowed == path))
            .map_or(path.as_str(), |(_, temporary)| temporary.as_str());
        let same = beneath::open(root, named, rustix::fs::OFlags::PATH, rustix::fs::Mode::empty())
            .and_then(|now| rustix::fs::fstat(&now).map_err(std::io::Error::from))
            .is_ok_and(|now| now.st_dev == held.st_dev && now.st_ino == held.st_ino);
        if same {
            return Ok(path);
        }
        let message = format!(
            "`{}` was moved or replaced since it was opened, so nothing was done through the old handle; open it again where it is now",
            escape_control(&path)
        );
        Err(self.guard.refuse_rule(operation, &path, access, "descriptor-moved", message, ToolErrorKind::Conflict))
    }

    /// Refuse a write to the existing file `path` that the filesystem would refuse (its mode,
    /// or its owner, does not let this user write it), before anything is journaled or a
    /// temporary copy is made.
    fn check_writable(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        let Some(root) = self.guard.root.as_ref() else {
            return Ok(());
        };
        let Ok(file) = beneath::open(root, path, rustix::fs::OFlags::PATH, rustix::fs::Mode::empty()) else {
            // Missing (about to be created) or changed: the open itself will tell.
            return Ok(());
        };
        let path_of_fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
        match rustix::fs::access(path_of_fd.as_str(), rustix::fs::Access::WRITE_OK) {
            Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM | rustix::io::Errno::ROFS) => {
                Err(self.refused_by_filesystem(operation, path, Access::Write))
            }
            _ => Ok(()),
        }
    }

    /// The refusal for an operation on `path` that the policy allowed and the filesystem did
    /// not (permission denied): said as such, with the file's mode, and recorded.
    fn refused_by_filesystem(&mut self, operation: &'static str, path: &str, access: Access) -> FsError {
        let mode = self
            .guard
            .root
            .as_ref()
            .and_then(|root| root.symlink_metadata(path).ok())
            .map(|metadata| format!(" (its mode is {:04o})", cap_std::fs::PermissionsExt::mode(&metadata.permissions()) & 0o7777))
            .unwrap_or_default();
        let message = format!(
            "{access} of `{}` was refused by the filesystem: permission denied{mode}. The policy allows it, but the file's permissions do not let toolcell's user {}; change them, or work on another file",
            escape_control(path),
            if access == Access::Write { "write it" } else { "read it" }
        );
        self.guard.refuse_rule(operation, path, access, "filesystem-permission", message, ToolErrorKind::Denied)
    }

    /// The refusal for an operation that met a symlink on the canonical `path`, which had none
    /// when it was judged: something replaced a directory on the way (or the file) since.
    fn changed_underfoot(&mut self, operation: &'static str, path: &str, access: Access) -> FsError {
        let message = format!(
            "`{}` changed while it was being used (something replaced it, or a directory on its way, at that moment), so nothing was done to it; try again",
            escape_control(path)
        );
        self.guard.refuse_rule(operation, path, access, "changed-underfoot", message, ToolErrorKind::Conflict)
    }

    /// Run `operation` on the last component of the canonical `path`, relative to a descriptor
    /// for its directory opened from the workspace root following no symlink (with `like`'s
    /// permissions), so wasmtime-wasi's own implementation acts on exactly the judged entry: a
    /// directory on the way swapped for a symlink since cannot send it elsewhere.
    fn in_parent<T>(
        &mut self,
        like: &Resource<Descriptor>,
        path: &str,
        (name, access): (&'static str, Access),
        operation: impl FnOnce(&mut Self, Resource<Descriptor>, String) -> FsResult<T>,
    ) -> FsResult<T> {
        let parent = self.parent_descriptor(like, path, name, access)?;
        let last = path.rsplit_once('/').map_or(path, |(_, last)| last).to_owned();
        let result = operation(self, Resource::new_borrow(parent.rep()), last);
        self.inner.table.delete(parent)?;
        result
    }

    /// A descriptor for the directory holding the canonical `path` (see [`in_parent`]). The
    /// caller deletes it from the table.
    fn parent_descriptor(&mut self, like: &Resource<Descriptor>, path: &str, operation: &'static str, access: Access) -> FsResult<Resource<Descriptor>> {
        let perms = match self.inner.table.get(like)? {
            Descriptor::Dir(directory) => directory.perms,
            Descriptor::File(_) => return Err(ErrorCode::NotDirectory.into()),
        };
        let Some(root) = self.guard.root.as_ref() else {
            return Err(ErrorCode::Access.into());
        };
        let parent = path.rsplit_once('/').map_or(".", |(parent, _)| parent);
        match beneath::open(root, parent, rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty()) {
            Ok(fd) => {
                let directory = wasmtime_wasi::filesystem::Dir::new(std::fs::File::from(fd), perms, OpenMode::READ, BLOCKING_IN_PLACE);
                Ok(self.inner.table.push(Descriptor::Dir(directory))?)
            }
            Err(error) if beneath::is_symlink_on_path(&error) => Err(self.changed_underfoot(operation, path, access)),
            Err(error) => Err(error.into()),
        }
    }
}

impl preopens::Host for GuardedFilesystem<'_> {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        let directories = preopens::Host::get_directories(&mut self.inner)?;
        for (descriptor, _) in &directories {
            self.guard.descriptors.insert(descriptor.rep(), ".".to_owned());
        }
        Ok(directories)
    }
}

impl fs::Host for GuardedFilesystem<'_> {
    fn convert_error_code(&mut self, error: FsError) -> wasmtime::Result<fs::ErrorCode> {
        fs::Host::convert_error_code(&mut self.inner, error)
    }

    fn filesystem_error_code(&mut self, error: Resource<streams::Error>) -> wasmtime::Result<Option<fs::ErrorCode>> {
        fs::Host::filesystem_error_code(&mut self.inner, error)
    }
}

impl fs::HostDescriptor for GuardedFilesystem<'_> {
    fn advise(&mut self, fd: Resource<Descriptor>, offset: Filesize, len: Filesize, advice: fs::Advice) -> FsResult<()> {
        fs::HostDescriptor::advise(&mut self.inner, fd, offset, len, advice)
    }

    fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        fs::HostDescriptor::sync_data(&mut self.inner, fd)
    }

    fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorFlags> {
        fs::HostDescriptor::get_flags(&mut self.inner, fd)
    }

    fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorType> {
        fs::HostDescriptor::get_type(&mut self.inner, fd)
    }

    fn set_size(&mut self, fd: Resource<Descriptor>, size: Filesize) -> FsResult<()> {
        self.guard.spend("set-size")?;
        let path = self.current_path(&fd, "set-size", Access::Write)?;
        self.guard.check("set-size", &path, Access::Write)?;
        self.guard.check_single_link("set-size", &path)?;
        self.guard.before_mutation("set-size", &path, true)?;
        fs::HostDescriptor::set_size(&mut self.inner, fd, size)
    }

    fn set_times(&mut self, fd: Resource<Descriptor>, atim: NewTimestamp, mtim: NewTimestamp) -> FsResult<()> {
        self.guard.spend("set-times")?;
        let path = self.current_path(&fd, "set-times", Access::Write)?;
        self.guard.check("set-times", &path, Access::Write)?;
        fs::HostDescriptor::set_times(&mut self.inner, fd, atim, mtim)
    }

    fn read(&mut self, fd: Resource<Descriptor>, len: Filesize, offset: Filesize) -> FsResult<(Vec<u8>, bool)> {
        self.guard.spend("read")?;
        // Checked when the descriptor was opened for reading. Read here rather than by
        // wasmtime-wasi, whose buffer is zeroed first: scans read tens of thousands of files.
        let Descriptor::File(file) = self.inner.table.get(&fd)? else {
            return Err(ErrorCode::BadDescriptor.into());
        };
        let wanted = usize::try_from(len).unwrap_or(usize::MAX).min(MAX_READ_BYTES);
        let buffer = &mut self.guard.read_buffer;
        buffer.clear();
        buffer.reserve(wanted);
        let spare = &mut buffer.spare_capacity_mut()[..wanted];
        let bytes = loop {
            match rustix::io::pread(&*file.file, &mut *spare, offset) {
                Err(rustix::io::Errno::INTR) => {}
                Err(errno) => return Err(std::io::Error::from(errno).into()),
                // Copied out at the size read: the buffer stays for the next read.
                Ok((read, _)) => break read.to_vec(),
            }
        };
        // As wasmtime-wasi: the end is reported by a read that returns nothing.
        let end = bytes.is_empty();
        Ok((bytes, end))
    }

    fn write(&mut self, fd: Resource<Descriptor>, buffer: Vec<u8>, offset: Filesize) -> FsResult<Filesize> {
        self.guard.spend("write")?;
        let path = self.current_path(&fd, "write", Access::Write)?;
        self.guard.check("write", &path, Access::Write)?;
        fs::HostDescriptor::write(&mut self.inner, fd, buffer, offset)
    }

    fn read_directory(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<DirectoryEntryStream>> {
        self.guard.spend("read-directory")?;
        let path = self.current_path(&fd, "read-directory", Access::List)?;
        self.guard.check("read-directory", &path, Access::List)?;
        // A listing shows what the call wrote: its rewrites in this directory go in place.
        self.guard.land_in(&path)?;
        let Descriptor::Dir(directory) = self.inner.table.get(&fd)? else {
            return Err(ErrorCode::NotDirectory.into());
        };
        let directory = Arc::clone(&directory.dir);
        let listing = self.guard.list(&directory, &path)?;
        // The stream is the guard's own listing; only this guard reads or drops it.
        let listing = self.inner.table.push(listing)?;
        Ok(Resource::new_own(listing.rep()))
    }

    fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        fs::HostDescriptor::sync(&mut self.inner, fd)
    }

    fn create_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        self.guard.spend("create-directory-at")?;
        let canonical = self.guard.resolve_at("create-directory-at", &fd, &path, false, Access::Write)?;
        self.guard.land(&canonical)?;
        if self.guard.is_visible_directory(&canonical) {
            return Err(FsError::from(ErrorCode::Exist));
        }
        self.guard.check("create-directory-at", &canonical, Access::Write)?;
        self.guard.before_mutation("create-directory-at", &canonical, false)?;
        self.in_parent(&fd, &canonical, ("create-directory-at", Access::Write), |this, parent, name| {
            fs::HostDescriptor::create_directory_at(&mut this.inner, parent, name)
        })
    }

    fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorStat> {
        self.guard.spend("stat")?;
        // One `fstat`, where wasmtime-wasi makes two.
        let metadata = match self.inner.table.get(&fd)? {
            Descriptor::File(file) => file.file.metadata()?,
            Descriptor::Dir(directory) => directory.dir.metadata()?,
        };
        Ok(descriptor_stat(&metadata))
    }

    fn stat_at(&mut self, fd: Resource<Descriptor>, path_flags: PathFlags, path: String) -> FsResult<DescriptorStat> {
        self.guard.spend("stat-at")?;
        let canonical = self.guard.resolve_at("stat-at", &fd, &path, follows(path_flags), Access::Read)?;
        self.guard.land(&canonical)?;
        // The canonical path is resolved already (its last component too, if asked).
        let stat = match self.in_parent(&fd, &canonical, ("stat-at", Access::Read), |this, parent, name| {
            fs::HostDescriptor::stat_at(&mut this.inner, parent, PathFlags::empty(), name)
        }) {
            Ok(stat) => stat,
            Err(error) => {
                if matches!(error.downcast_ref(), Some(ErrorCode::NoEntry | ErrorCode::NotDirectory)) {
                    self.guard.check_missing("stat-at", &canonical)?;
                }
                return Err(error);
            }
        };
        // Judged once the type is known: a directory needs `list`, anything else `read`.
        self.guard.check_lookup("stat-at", &canonical, Some(stat.type_ == DescriptorType::Directory))?;
        Ok(stat)
    }

    fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        atim: NewTimestamp,
        mtim: NewTimestamp,
    ) -> FsResult<()> {
        self.guard.spend("set-times-at")?;
        let canonical = self.guard.check_at("set-times-at", &fd, &path, follows(path_flags), Access::Write)?;
        self.guard.land(&canonical)?;
        self.in_parent(&fd, &canonical, ("set-times-at", Access::Write), |this, parent, name| {
            fs::HostDescriptor::set_times_at(&mut this.inner, parent, PathFlags::empty(), name, atim, mtim)
        })
    }

    fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path_flags: PathFlags,
        old_path: String,
        new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.guard.spend("link-at")?;
        let source = self.guard.check_at("link-at", &fd, &old_path, follows(old_path_flags), Access::Write)?;
        self.guard.land(&source)?;
        let link = self.guard.check_at("link-at", &new_descriptor, &new_path, false, Access::Write)?;
        self.guard.land(&link)?;
        self.guard.check_hidden_stays_hidden("link-at", &source, &link, false)?;
        if self.guard.is_symlink(&source) {
            // A hard link to a symlink is the same relative target read from another place.
            self.guard.check_link_stays_inside("link-at", (&source, &link), &source, &link)?;
        }
        self.guard.before_mutation("link-at", &link, false)?;
        let source_parent = self.parent_descriptor(&fd, &source, "link-at", Access::Write)?;
        let source_name = source.rsplit_once('/').map_or(source.as_str(), |(_, name)| name).to_owned();
        let result = self.in_parent(&new_descriptor, &link, ("link-at", Access::Write), |this, parent, name| {
            // The source is resolved already (through a final symlink, if asked).
            fs::HostDescriptor::link_at(&mut this.inner, Resource::new_borrow(source_parent.rep()), PathFlags::empty(), source_name, parent, name)
        });
        self.inner.table.delete(source_parent)?;
        result
    }

    fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        self.guard.spend("open-at")?;
        let perms = match self.inner.table.get(&fd)? {
            Descriptor::Dir(directory) => directory.perms,
            Descriptor::File(_) => return Err(ErrorCode::NotDirectory.into()),
        };
        if self.guard.root.is_none() {
            // No workspace: nothing to guard (and nothing to open).
            return fs::HostDescriptor::open_at(&mut self.inner, fd, path_flags, path, open_flags, flags);
        }
        check_open_flags(open_flags, flags, os_open_flags(open_flags, flags).1, perms)?;
        let access = open_access(open_flags, flags);
        // A directory is judged when it is listed, not when it is opened to reach its children.
        let directory = open_flags.contains(OpenFlags::DIRECTORY) && access == Access::Read;

        // The common case: a read of a path without `..` that the policy allows. Opened as it
        // is written; if the open meets no symlink, that path is the canonical one and the
        // judgment stands. A symlink on the way sends it through resolution below.
        if access == Access::Read
            && let Some(plain) = self.guard.plain_path(&fd, &path)?
        {
            // Judged as written (a directory is not judged until it is listed); a refusal is
            // left to the full resolution below, which judges where a symlink leads instead.
            let judged = (!directory).then(|| self.guard.judge(Access::Read, &plain));
            if judged.as_ref().is_none_or(|(effect, _)| *effect == Effect::Allow) {
                self.guard.land(&plain)?;
                self.guard.check_open_files("open-at", &plain)?;
                match self.open_beneath(&plain, open_flags, flags) {
                    Err(error) if beneath::is_symlink_on_path(&error) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
                        return Err(self.refused_by_filesystem("open-at", &plain, access));
                    }
                    opened => {
                        if let Some((_, decision)) = judged {
                            self.guard.record_allowed("open-at", &plain, Access::Read, decision);
                        }
                        if let Some(file) = opened? {
                            return self.admit_opened(file, plain, access, open_flags, flags, perms);
                        }
                    }
                }
            }
        }

        let canonical = if directory {
            self.guard.resolve_at("open-at", &fd, &path, follows(path_flags), access)?
        } else {
            self.guard.check_at("open-at", &fd, &path, follows(path_flags), access)?
        };
        self.guard.land(&canonical)?;
        self.guard.check_openable("open-at", &canonical, access)?;
        self.guard.check_open_files("open-at", &canonical)?;
        let mut target = canonical.clone();
        let mut target_flags = open_flags;
        if access == Access::Write {
            self.guard.check_single_link("open-at", &canonical)?;
            self.check_writable("open-at", &canonical)?;
            self.guard.before_mutation("open-at", &canonical, true)?;
            if self.guard.rewrites_whole(&canonical, open_flags) {
                // Written to a temporary sibling that replaces the file at once; the
                // temporary file exists already.
                target = self.guard.shadow(&canonical)?;
                target_flags = open_flags & !(OpenFlags::CREATE | OpenFlags::EXCLUSIVE);
            }
        }
        // Open what was judged: the canonical path, from the workspace root, following no
        // symlink, so a directory on the way swapped for a symlink since cannot redirect it.
        match self.open_beneath(&target, target_flags, flags) {
            Ok(Some(file)) => self.admit_opened(file, canonical, access, open_flags, flags, perms),
            Ok(None) => Err(ErrorCode::Access.into()),
            Err(error) if beneath::is_symlink_on_path(&error) => {
                let names_a_symlink = !follows(path_flags)
                    && target == canonical
                    && self.guard.root.as_ref().and_then(|root| root.symlink_metadata(&canonical).ok()).is_some_and(|metadata| metadata.is_symlink());
                if names_a_symlink {
                    // `O_NOFOLLOW` on a symlink, as the component asked.
                    Err(ErrorCode::Loop.into())
                } else {
                    Err(self.changed_underfoot("open-at", &canonical, access))
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => Err(self.refused_by_filesystem("open-at", &canonical, access)),
            Err(error) => Err(error.into()),
        }
    }

    fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        self.guard.descriptors.remove(&fd.rep());
        fs::HostDescriptor::drop(&mut self.inner, fd)
    }

    fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        self.guard.spend("readlink-at")?;
        let canonical = self.guard.check_at("readlink-at", &fd, &path, false, Access::Read)?;
        self.guard.land(&canonical)?;
        self.in_parent(&fd, &canonical, ("readlink-at", Access::Read), |this, parent, name| fs::HostDescriptor::readlink_at(&mut this.inner, parent, name))
    }

    fn remove_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        self.guard.spend("remove-directory-at")?;
        let canonical = self.guard.check_at("remove-directory-at", &fd, &path, false, Access::Delete)?;
        self.guard.land(&canonical)?;
        self.guard.before_mutation("remove-directory-at", &canonical, false)?;
        self.in_parent(&fd, &canonical, ("remove-directory-at", Access::Delete), |this, parent, name| {
            fs::HostDescriptor::remove_directory_at(&mut this.inner, parent, name)
        })
    }

    fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.guard.spend("rename-at")?;
        let source = self.guard.check_at("rename-at", &fd, &old_path, false, Access::Delete)?;
        let destination = self.guard.check_at("rename-at", &new_descriptor, &new_path, false, Access::Write)?;
        self.guard.land(&source)?;
        self.guard.land(&destination)?;
        self.guard.check_single_link("rename-at", &destination)?;
        let source_is_directory = self.guard.is_directory(&source);
        self.guard.check_hidden_stays_hidden("rename-at", &source, &destination, source_is_directory)?;
        if self.guard.is_symlink(&source) {
            self.guard.check_link_stays_inside("rename-at", (&source, &destination), &source, &destination)?;
        }
        if source_is_directory {
            self.guard.check_subtree_move("rename-at", &source, &destination)?;
            self.guard.before_move("rename-at", &source, &destination)?;
        } else {
            self.guard.before_mutation("rename-at", &destination, true)?;
            self.guard.before_mutation("rename-at", &source, false)?;
        }
        let source_parent = self.parent_descriptor(&fd, &source, "rename-at", Access::Delete)?;
        let source_name = source.rsplit_once('/').map_or(source.as_str(), |(_, name)| name).to_owned();
        let result = self.in_parent(&new_descriptor, &destination, ("rename-at", Access::Write), |this, parent, name| {
            fs::HostDescriptor::rename_at(&mut this.inner, Resource::new_borrow(source_parent.rep()), source_name, parent, name)
        });
        self.inner.table.delete(source_parent)?;
        if result.is_ok() {
            // Descriptors opened at or under the source are judged where they are now.
            self.guard.moved(&source, &destination);
        }
        result
    }

    fn symlink_at(&mut self, fd: Resource<Descriptor>, target: String, link_path: String) -> FsResult<()> {
        self.guard.spend("symlink-at")?;
        let link = self.guard.check_at("symlink-at", &fd, &link_path, false, Access::Write)?;
        self.guard.land(&link)?;
        // The target is resolved from the link's directory; it must stay inside the workspace.
        let directory = link.rsplit_once('/').map_or(".", |(parent, _)| parent).to_owned();
        if toolcell_policy::join_lexically(&directory, &target).is_none() {
            // An absolute target may name something on the host: it is not repeated.
            let shown = if target.starts_with('/') { "an absolute path".to_owned() } else { format!("`{}`", escape_control(&target)) };
            let message = format!("a symlink to {shown} is refused: its target leaves the workspace. Link only to paths inside it.");
            return Err(self.guard.refuse_rule("symlink-at", &link, Access::Write, "symlink-target", message, ToolErrorKind::Denied));
        }
        self.guard.before_mutation("symlink-at", &link, false)?;
        self.in_parent(&fd, &link, ("symlink-at", Access::Write), |this, parent, name| fs::HostDescriptor::symlink_at(&mut this.inner, parent, target, name))
    }

    fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        self.guard.spend("unlink-file-at")?;
        let canonical = self.guard.check_at("unlink-file-at", &fd, &path, false, Access::Delete)?;
        self.guard.land(&canonical)?;
        self.guard.before_mutation("unlink-file-at", &canonical, false)?;
        self.in_parent(&fd, &canonical, ("unlink-file-at", Access::Delete), |this, parent, name| {
            fs::HostDescriptor::unlink_file_at(&mut this.inner, parent, name)
        })
    }

    fn read_via_stream(&mut self, fd: Resource<Descriptor>, offset: Filesize) -> FsResult<Resource<streams::InputStream>> {
        self.guard.spend("read-via-stream")?;
        // Checked when the descriptor was opened for reading.
        fs::HostDescriptor::read_via_stream(&mut self.inner, fd, offset)
    }

    fn write_via_stream(&mut self, fd: Resource<Descriptor>, offset: Filesize) -> FsResult<Resource<streams::OutputStream>> {
        self.guard.spend("write-via-stream")?;
        let path = self.current_path(&fd, "write-via-stream", Access::Write)?;
        self.guard.check("write-via-stream", &path, Access::Write)?;
        fs::HostDescriptor::write_via_stream(&mut self.inner, fd, offset)
    }

    fn append_via_stream(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<streams::OutputStream>> {
        self.guard.spend("append-via-stream")?;
        let path = self.current_path(&fd, "append-via-stream", Access::Write)?;
        self.guard.check("append-via-stream", &path, Access::Write)?;
        fs::HostDescriptor::append_via_stream(&mut self.inner, fd)
    }

    fn is_same_object(&mut self, a: Resource<Descriptor>, b: Resource<Descriptor>) -> wasmtime::Result<bool> {
        fs::HostDescriptor::is_same_object(&mut self.inner, a, b)
    }

    fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<MetadataHashValue> {
        fs::HostDescriptor::metadata_hash(&mut self.inner, fd)
    }

    fn metadata_hash_at(&mut self, fd: Resource<Descriptor>, path_flags: PathFlags, path: String) -> FsResult<MetadataHashValue> {
        self.guard.spend("metadata-hash-at")?;
        let canonical = self.guard.resolve_at("metadata-hash-at", &fd, &path, follows(path_flags), Access::Read)?;
        self.guard.land(&canonical)?;
        self.guard.check_visible("metadata-hash-at", &canonical)?;
        // The canonical path is resolved already (its last component too, if asked).
        self.in_parent(&fd, &canonical, ("metadata-hash-at", Access::Read), |this, parent, name| {
            fs::HostDescriptor::metadata_hash_at(&mut this.inner, parent, PathFlags::empty(), name)
        })
    }
}

impl fs::HostDirectoryEntryStream for GuardedFilesystem<'_> {
    fn read_directory_entry(&mut self, stream: Resource<DirectoryEntryStream>) -> FsResult<Option<DirectoryEntry>> {
        self.guard.spend("read-directory-entry")?;
        let listing = self.inner.table.get_mut(&Resource::<Listing>::new_borrow(stream.rep()))?;
        match listing.entries.next() {
            None => Ok(None),
            Some(Ok(entry)) => Ok(Some(entry)),
            Some(Err(code)) => Err(code.into()),
        }
    }

    fn drop(&mut self, stream: Resource<DirectoryEntryStream>) -> wasmtime::Result<()> {
        self.inner.table.delete(Resource::<Listing>::new_own(stream.rep()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_follows_symlinks_inside_the_workspace() {
        let temp = tempfile::tempdir().expect("temporary directory");
        let root_path = temp.path().join("ws");
        std::fs::create_dir_all(root_path.join("src")).expect("mkdir");
        std::fs::create_dir_all(root_path.join("docs")).expect("mkdir");
        std::os::unix::fs::symlink("../docs", root_path.join("src/link")).expect("symlink");
        std::os::unix::fs::symlink(temp.path(), root_path.join("out")).expect("symlink");
        std::os::unix::fs::symlink("loop2", root_path.join("loop1")).expect("symlink");
        std::os::unix::fs::symlink("loop1", root_path.join("loop2")).expect("symlink");
        let root = cap_std::fs::Dir::open_ambient_dir(&root_path, cap_std::ambient_authority()).expect("open");
        let inside = |base: &str, path: &str, follow: bool| match resolve(Some(&root), base, path, follow) {
            Resolved::Inside(path) => path,
            Resolved::Outside => "OUTSIDE".to_owned(),
            Resolved::Loop => "LOOP".to_owned(),
        };
        assert_eq!(inside(".", "src/../docs/x", true), "docs/x");
        assert_eq!(inside(".", "./docs//x", true), "docs/x");
        assert_eq!(inside(".", "src/link/x", true), "docs/x");
        assert_eq!(inside("src", "link/x", true), "docs/x");
        assert_eq!(inside(".", "src/link", true), "docs");
        assert_eq!(inside(".", "src/link", false), "src/link");
        assert_eq!(inside(".", "out/secret", true), "OUTSIDE");
        assert_eq!(inside(".", "out", false), "out");
        assert_eq!(inside(".", "../x", true), "OUTSIDE");
        assert_eq!(inside(".", "/etc/passwd", true), "OUTSIDE");
        assert_eq!(inside(".", "loop1/x", true), "LOOP");
        assert_eq!(inside(".", "new/file.txt", true), "new/file.txt");
    }
}

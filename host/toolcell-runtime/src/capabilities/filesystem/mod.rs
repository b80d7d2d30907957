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

mod budget;
mod decide;
mod landed;
mod left;
mod linking;
mod listing;
mod lookup;
mod moves;
mod open;
mod operate;
mod record;
mod release;
mod resolve;
mod rewrite;
mod streams;
mod transaction;
mod wasi;

pub(crate) use linking::add_to_linker;
pub(crate) use lookup::Listing;
pub(crate) use operate::GuardedFilesystem;

use budget::Budget;
use lookup::{descriptor_stat, special_kind};
use operate::{MAX_READ_BYTES, follows};
use resolve::{MAX_SYMLINK_HOPS, Resolved, resolve};
pub(crate) use toolcell_state::NamespaceLock;
pub(crate) use transaction::Transaction;

use std::collections::HashMap;
use std::sync::Arc;

use toolcell_policy::{Access, Effect, Policy};
use toolcell_types::{ToolErrorKind, escape_control};

use toolcell_state::AuditLog;
use wasmtime::component::Resource;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::Descriptor;
use wasmtime_wasi::p2::{FsError, FsResult};

/// Blocking filesystem calls run on the calling thread (the host runs calls on plain threads),
/// for wasmtime-wasi's descriptors and for the ones the guard opens itself.
pub(crate) const BLOCKING_IN_PLACE: bool = true;

/// Allowed reads and listings remembered per call; the rest are counted.
const MAX_RECORDED_EVENTS: usize = 10_000;

/// Asked about every `ask` decision. Returns whether to allow the access.
pub trait Approver: Send + Sync {
    /// Approve or refuse `access` to the workspace-relative `path` for `role`, as the rule `rule`
    /// asks.
    fn approve(&self, role: &str, access: Access, path: &str, rule: &str) -> bool;
}

pub use toolcell_outcome::{DESCRIPTOR_MOVED, Denial, FsEvent};

/// Where the guard writes its records, and who the call is for.
pub(crate) struct AuditSink {
    pub(crate) log: Arc<AuditLog>,
    pub(crate) session: String,
    pub(crate) tool: String,
    pub(crate) call_id: String,
    /// The workspace's canonical directory, as the records name it.
    pub(crate) workspace: String,
    /// Who the caller authenticated as.
    pub(crate) principal: Option<String>,
}

/// What the guard knows for one call.
pub(crate) struct FsGuard {
    audit: Option<AuditSink>,
    /// Workspace-relative host-owned paths (state directory, policy file, compiled-component
    /// cache, plugin directory, when they sit inside the workspace), which no call may touch:
    /// they hold copies of guarded data (undo records, indexes) and the host's secrets.
    state_paths: Vec<String>,
    /// Records the guard could not write (the refusals stand regardless).
    pub(crate) audit_failures: u64,
    /// Allowed modifications already recorded in this call: a write through a stream of a
    /// descriptor opened for writing is the same decision again.
    audited: std::collections::HashSet<(Access, String)>,
    /// Accesses the approver allowed in this call: asked once, not again for each write
    /// through the descriptor it opened.
    approved: std::collections::HashSet<(Access, String)>,
    /// `None`: no policy, only the workspace boundary applies.
    policy: Option<Arc<Policy>>,
    /// Which reload of the policy `policy` is (0: the one loaded at start).
    policy_generation: u64,
    role: String,
    /// The role as bound for this call (the rules naming its tool, the session's task);
    /// `None`: the policy's role by name.
    bound: Option<Arc<toolcell_policy::Role>>,
    approver: Option<Arc<dyn Approver>>,
    /// The workspace, for resolving symlinks; `None` when the call has no workspace (`describe`).
    root: Option<Arc<cap_std::fs::Dir>>,
    /// Workspace-relative path of each open descriptor, by resource index.
    descriptors: HashMap<u32, String>,
    /// The component's preopen: the workspace's, made once for every call of the workspace
    /// (see [`crate::workspace::Held`]), so asking for it costs the host no descriptor.
    preopen: Option<wasmtime_wasi::filesystem::Dir>,
    /// Files whose descriptor was dropped while a stream of them still holds them open: they
    /// count against the budget of open files until their last stream goes.
    orphans: Vec<std::sync::Weak<std::fs::File>>,
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
    /// When the call's deadline passes: the host's own work for the call (each filesystem
    /// call, each entry a walk judges, each rewrite landed) stops there, not only the
    /// component's code.
    deadline: Option<std::time::Instant>,
    /// The host stopped the call at its deadline.
    timed_out: bool,
}

impl FsGuard {
    pub(crate) fn new(
        policy: Option<Arc<Policy>>,
        role: &str,
        approver: Option<Arc<dyn Approver>>,
        workspace: Option<crate::workspace::Held>,
    ) -> Self {
        let (root, preopen) = workspace.map(|held| (held.directory, held.preopen)).unzip();
        FsGuard {
            audit: None,
            state_paths: Vec::new(),
            audit_failures: 0,
            audited: std::collections::HashSet::new(),
            approved: std::collections::HashSet::new(),
            policy,
            policy_generation: 0,
            role: role.to_owned(),
            bound: None,
            approver,
            root,
            descriptors: HashMap::new(),
            preopen,
            orphans: Vec::new(),
            events: Vec::new(),
            unrecorded_events: 0,
            denials: Vec::new(),
            transaction: None,
            warnings: Vec::new(),
            budget: None,
            repeats: HashMap::new(),
            flood: None,
            read_buffer: Vec::new(),
            deadline: None,
            timed_out: false,
        }
    }

    /// The workspace directory, if the call has one.
    pub(crate) fn root(&self) -> Option<&cap_std::fs::Dir> {
        self.root.as_deref()
    }

    /// Run the call as a transaction: mutations pass the lock table and the read-before-write
    /// check, and are journaled first. Without one, every mutation is refused.
    /// Judge this call's accesses by `role`, the caller's role bound for the call.
    pub(crate) fn with_role(mut self, role: Option<Arc<toolcell_policy::Role>>) -> Self {
        self.bound = role;
        self
    }

    /// Judge by the policy `in_force` (what the call took when it started).
    pub(crate) fn with_policy(mut self, in_force: &crate::reload::InForce) -> Self {
        self.policy.clone_from(&in_force.policy);
        self.policy_generation = in_force.generation;
        self
    }

    /// The policy this call goes by, as it took it when it started.
    pub(crate) fn in_force(&self) -> crate::reload::InForce {
        crate::reload::InForce { generation: self.policy_generation, policy: self.policy.clone() }
    }

    /// The policy this call goes by (see [`in_force`](Self::in_force)).
    pub(crate) fn policy(&self) -> Option<&Policy> {
        self.policy.as_deref()
    }

    /// The role as bound for this call, if one was given.
    pub(crate) fn bound_role(&self) -> Option<Arc<toolcell_policy::Role>> {
        self.bound.clone()
    }

    pub(crate) fn with_transaction(mut self, transaction: Transaction) -> Self {
        self.transaction = Some(transaction);
        self
    }

    /// Write decisions to `sink`, and hide `state_paths`.
    pub(crate) fn with_audit(mut self, sink: Option<AuditSink>, state_paths: Vec<String>) -> Self {
        self.audit = sink;
        self.state_paths = state_paths;
        self
    }

    /// The host's own paths inside the workspace (workspace-relative), as the call was given
    /// them.
    pub(crate) fn state_paths(&self) -> &[String] {
        &self.state_paths
    }

    /// Wait for the workspace's namespace lock ([`NamespaceLock`]): a change of names is judged
    /// and made while it is held. `None` when the call has no workspace.
    pub(crate) fn lock_namespace(&self) -> FsResult<Option<NamespaceLock>> {
        self.root.as_deref().map(NamespaceLock::acquire).transpose().map_err(|error| FsError::from(ErrorCode::from(error)))
    }

    /// Ask the approver now, before the namespace lock is taken, about an access to `path`
    /// (from `descriptor`) that the policy puts to it: the lock is the whole workspace's, and
    /// no other call waits on it while a person decides. Everything is judged again under the
    /// lock; the answer is remembered for the call, so nobody is asked twice.
    pub(crate) fn approve_before_lock(
        &mut self,
        operation: &'static str,
        descriptor: &Resource<Descriptor>,
        path: &str,
        follow_final: bool,
        access: Access,
    ) -> FsResult<()> {
        let Ok(base) = self.base(descriptor) else {
            return Ok(());
        };
        let Resolved::Inside(canonical) = resolve(self.root.as_deref(), &base, path, follow_final) else {
            return Ok(());
        };
        let unanswered = self.effect(access, &canonical) == Effect::Ask && !self.approved.contains(&(access, canonical.clone()));
        let existing_directory = operation == "create-directory-at" && self.is_visible_directory(&canonical);
        if unanswered && !existing_directory {
            self.check(operation, &canonical, access)?;
        }
        Ok(())
    }

    /// [`approve_before_lock`](Self::approve_before_lock) for a rename: both names, and every
    /// entry a directory carries with it.
    pub(crate) fn approve_rename_before_lock(
        &mut self,
        (from_descriptor, from): (&Resource<Descriptor>, &str),
        (to_descriptor, to): (&Resource<Descriptor>, &str),
    ) -> FsResult<()> {
        const OPERATION: &str = "rename-at";
        self.approve_before_lock(OPERATION, from_descriptor, from, false, Access::Delete)?;
        self.approve_before_lock(OPERATION, to_descriptor, to, false, Access::Write)?;
        let (Ok(from_base), Ok(to_base)) = (self.base(from_descriptor), self.base(to_descriptor)) else {
            return Ok(());
        };
        let (Resolved::Inside(source), Resolved::Inside(destination)) =
            (resolve(self.root.as_deref(), &from_base, from, false), resolve(self.root.as_deref(), &to_base, to, false))
        else {
            return Ok(());
        };
        self.approve_moved_entries(OPERATION, &source, &destination)
    }

    fn base(&self, descriptor: &Resource<Descriptor>) -> FsResult<String> {
        self.descriptors.get(&descriptor.rep()).cloned().ok_or_else(|| FsError::from(ErrorCode::BadDescriptor))
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

    /// Refuse a lock on the canonical `path`, which the role may not write without asking (a
    /// role may lock only what it may change): recorded like a refused write (operation
    /// `lock`, the deciding rule), worded from what decided it. The message.
    pub(crate) fn refuse_lock(&mut self, path: &str) -> String {
        let (decision, reason) = {
            let judgment = self.judgment(Access::Write, path);
            let decision = judgment.to_decision();
            let reason = if decision.effect == Effect::Ask {
                format!("a write of it needs approval (rule `{}`{})", decision.rule, self.rule_location(&decision))
            } else if decision.effect == Effect::Allow {
                // Allowed to this call only by a rule naming the tools it is for: a tool's narrow
                // right is not the role's to lock.
                format!(
                    "only rule `{}`{} lets it write there, and that rule is for the tools it names",
                    decision.rule,
                    self.rule_location(&decision)
                )
            } else {
                self.denial_message(Access::Write, path, &judgment)
            };
            (decision, reason)
        };
        let message =
            format!("role `{}` may not write `{}`, so it may not lock it: {reason}", escape_control(&self.role), escape_control(path));
        let event = FsEvent {
            operation: "lock",
            path: path.to_owned(),
            access: Access::Write,
            effect: Effect::Deny,
            rule: decision.rule,
            asked: false,
        };
        let _ = self.refuse(event, message.clone());
        message
    }

    /// Resolve a path an agent gave a host-implemented tool (relative to the workspace root) to
    /// its canonical form; a path outside is refused and recorded like a component's.
    pub(crate) fn resolve_path(&mut self, operation: &'static str, path: &str, access: Access) -> Option<String> {
        match resolve(self.root.as_deref(), ".", path, false) {
            Resolved::Inside(canonical) => Some(canonical),
            Resolved::Outside => {
                self.refuse_outside(operation, path, access);
                None
            }
            Resolved::Loop => None,
        }
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
        match resolve(self.root.as_deref(), &base, path, follow_final) {
            Resolved::Inside(canonical) => Ok(canonical),
            Resolved::Outside => Err(self.refuse_outside(operation, path, access)),
            Resolved::Loop => Err(FsError::from(ErrorCode::Loop)),
        }
    }

    /// Decide `access` to the canonical `path`.
    fn check(&mut self, operation: &'static str, path: &str, access: Access) -> FsResult<()> {
        self.within_deadline()?;
        // The refusal is worded from the typed judgment, while it is at hand.
        let (decision, denial) = {
            let judgment = self.judgment(access, path);
            let decision = judgment.to_decision();
            let denial = (decision.effect == Effect::Deny).then(|| self.denial_message(access, path, &judgment));
            (decision, denial)
        };
        let mut event =
            FsEvent { operation, path: path.to_owned(), access, effect: decision.effect, rule: decision.rule.clone(), asked: false };
        if decision.effect == Effect::Ask {
            event.asked = true;
            let key = (access, path.to_owned());
            let approved = self.approved.contains(&key)
                || self.approver.as_ref().is_some_and(|approver| approver.approve(&self.role, access, path, &decision.rule));
            if approved {
                self.approved.insert(key);
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
        if let Some(message) = denial {
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
        if let Some(stopped) = &transaction.stopped {
            let message = format!("{access} of `{}` was refused: {stopped}", escape_control(path));
            return Err(self.refuse_rule(operation, path, access, "writes-stopped", message, ToolErrorKind::Failed));
        }
        // A lock keeps this write from `path` only if its holder's role may make it itself.
        let policy = self.policy.as_deref();
        let refusal =
            match transaction.locks.check_modify(&transaction.workspace, path, access, &transaction.owner, &transaction.fences, policy) {
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
}

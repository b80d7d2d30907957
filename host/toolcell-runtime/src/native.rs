//! Tools the host implements itself, because they act on host state no component can reach:
//! `undo_edit` (the session's undo records) and `lock_files` / `unlock_files` (the lock table).
//! They are listed, gated by the policy, validated and audited like component tools, and every
//! file they change passes the same guard and journal. What each tool does is `toolcell-state`'s
//! (`undo_tool`, `lock_tools`); this module gives them the call's guard and stores.

pub(crate) use toolcell_args::host_tools::{Native, UNDO_EDIT};
use toolcell_locks::Holder;
use toolcell_policy::Access;
use toolcell_types::{ToolError, ToolErrorKind, ToolOutput};

use crate::capabilities::filesystem::FsGuard;
use crate::outcome::CallRequest;
use toolcell_state::AuditLog;
use toolcell_state::LockStore;
use toolcell_state::lock_tools::{self, LockCall};
use toolcell_state::undo::UndoStore;
use toolcell_state::undo_tool::{self, UndoCall, UndoGuard};

/// What a native tool works with.
pub(crate) struct NativeCall<'a> {
    pub(crate) request: &'a CallRequest<'a>,
    pub(crate) guard: &'a mut FsGuard,
    pub(crate) locks: &'a LockStore,
    pub(crate) undo: &'a UndoStore,
    pub(crate) audit: Option<&'a AuditLog>,
}

/// Run the host tool `native`.
pub(crate) fn run(native: Native, call: &mut NativeCall<'_>) -> Result<ToolOutput, ToolError> {
    match native {
        Native::UndoEdit => undo_edit(call),
        Native::LockFiles => lock_files(call),
        Native::UnlockFiles => unlock_files(call),
    }
}

impl UndoGuard for FsGuard {
    fn root(&self) -> Option<&cap_std::fs::Dir> {
        FsGuard::root(self)
    }

    fn lock_namespace(&self) -> Option<Option<toolcell_state::NamespaceLock>> {
        FsGuard::lock_namespace(self).ok()
    }

    fn resolve(&mut self, path: &str) -> Option<String> {
        self.resolve_path("undo", path, Access::Write)
    }

    fn allows(&self, access: Access, path: &str) -> bool {
        FsGuard::allows(self, access, path)
    }

    fn admit(&mut self, path: &str, access: Access) -> bool {
        let admitted = FsGuard::admit(self, "undo", path, access);
        if admitted {
            // What undo puts back is what was there before the undone call: the session knows
            // it only if it still has a version of the path (it read or wrote it before).
            self.restoring(path);
        }
        admitted
    }
}

fn undo_edit(call: &mut NativeCall<'_>) -> Result<ToolOutput, ToolError> {
    let mut undo =
        UndoCall { guard: call.guard, undo: call.undo, workspace: call.request.workspace.root(), session: call.request.session_id };
    undo_tool::undo_edit(&mut undo, call.request.args)
}

fn lock_call<'a>(request: &'a CallRequest<'a>, locks: &'a LockStore, audit: Option<&'a AuditLog>) -> LockCall<'a> {
    LockCall {
        locks,
        root: &request.workspace.directory,
        workspace: request.workspace.root(),
        owner: request.lock_owner(),
        session: request.session_id,
        role: request.role,
        principal: request.principal,
        audit,
    }
}

/// A role may lock only what it may change: a literal path it may not change itself (judged
/// as [`Holder::may`] judges what a lock covers) is refused and audited like a refused write;
/// a glob is taken for the role and covers only what the role may write, judged at every
/// write of another session. Without a policy the lock records no role and covers its whole
/// pattern (what a role may change cannot be judged).
fn lock_files(call: &mut NativeCall<'_>) -> Result<ToolOutput, ToolError> {
    let locking = lock_call(call.request, call.locks, call.audit);
    let plan = lock_tools::lock_request(&locking, call.request.args)?;
    let holder = call.guard.policy().map(|_| Holder::role(call.request.role, call.request.task));
    let refused: Vec<&str> = match &holder {
        Some(holder) => plan.literal_paths().filter(|path| !holder.may(call.guard.policy(), Access::Write, path)).collect(),
        None => Vec::new(),
    };
    if !refused.is_empty() {
        let messages: Vec<String> = refused.into_iter().map(|path| call.guard.refuse_lock(path)).collect();
        return Err(ToolError::new(ToolErrorKind::Denied, format!("{}. No lock was taken.", messages.join("\n"))));
    }
    lock_tools::lock_files(&locking, &plan, holder.as_ref(), call.guard.policy())
}

fn unlock_files(call: &NativeCall<'_>) -> Result<ToolOutput, ToolError> {
    lock_tools::unlock_files(&lock_call(call.request, call.locks, call.audit), call.request.args)
}

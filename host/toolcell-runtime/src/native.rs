//! Tools the host implements itself, because they act on host state no component can reach:
//! `undo_edit` (the session's undo records) and `lock_files` / `unlock_files` (the lock table).
//! They are listed, gated by the policy, validated and audited like component tools, and every
//! file they change passes the same guard and journal. What each tool does is `toolcell-state`'s
//! (`undo_tool`, `lock_tools`); this module gives them the call's guard and stores.

pub(crate) use toolcell_args::host_tools::{Native, UNDO_EDIT};
use toolcell_policy::Access;
use toolcell_types::{ToolError, ToolOutput};

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

fn lock_call<'a>(call: &'a NativeCall<'_>) -> LockCall<'a> {
    LockCall {
        locks: call.locks,
        root: &call.request.workspace.directory,
        workspace: call.request.workspace.root(),
        owner: call.request.lock_owner(),
        session: call.request.session_id,
        role: call.request.role,
        principal: call.request.principal,
        audit: call.audit,
    }
}

fn lock_files(call: &NativeCall<'_>) -> Result<ToolOutput, ToolError> {
    let guard = &*call.guard;
    lock_tools::lock_files(&lock_call(call), call.request.args, |pattern| guard.allows(Access::Write, pattern))
}

fn unlock_files(call: &NativeCall<'_>) -> Result<ToolOutput, ToolError> {
    lock_tools::unlock_files(&lock_call(call), call.request.args)
}

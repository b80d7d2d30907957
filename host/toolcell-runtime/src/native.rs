//! Tools the host implements itself, because they act on host state no component can reach:
//! `undo_edit` (the session's undo records) and `lock_files` / `unlock_files` (the lock table).
//! They are listed, gated by the policy, validated and audited like component tools, and every
//! file they change passes the same guard and journal.

use serde::Deserialize;
pub(crate) use toolcell_args::host_tools::{Native, UNDO_EDIT};
use toolcell_policy::Access;
use toolcell_types::{ToolError, ToolErrorKind, ToolOutput, escape_control};

use crate::capabilities::filesystem::FsGuard;
use crate::outcome::CallRequest;
use toolcell_state::AuditLog;
use toolcell_state::LockStore;
use toolcell_state::journal::{Prior, Step};
use toolcell_state::lock_tools::{self, LockCall};
use toolcell_state::reads::hash_of;
use toolcell_state::undo::UndoStore;

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

fn parse<T: for<'de> Deserialize<'de>>(args: &str) -> Result<T, ToolError> {
    // The schema was checked first; this only fails on a host bug.
    serde_json::from_str(args).map_err(|error| ToolError::new(ToolErrorKind::InvalidArgs, format!("bad arguments: {error}")))
}

/// Remove the directories the call of `entry` created above its path, deepest first, while
/// they are empty and the policy lets the role delete them (the guard records each removal in
/// the call's journal); returns those removed.
fn remove_created_directories(call: &mut NativeCall<'_>, entry: &toolcell_state::undo::UndoEntry) -> Vec<String> {
    let workspace = call.request.workspace.root();
    let session = call.request.session_id;
    let mut removed = Vec::new();
    for directory in call.undo.created_directories(session, workspace, entry) {
        let is_removable = call.guard.root().is_some_and(|root| is_empty_directory(root, &directory.path))
            && call.guard.allows(Access::Delete, &directory.path);
        if !is_removable || !call.guard.admit("undo", &directory.path, Access::Delete) {
            break;
        }
        let Some(root) = call.guard.root() else {
            break;
        };
        let step = Step { path: directory.path.clone(), prior: Prior::Absent, identity: None };
        if toolcell_state::journal::restore(root, &call.undo.session_dir(session, workspace), &step).is_err() {
            break;
        }
        let _ = call.undo.forget(session, workspace, &directory);
        removed.push(directory.path);
    }
    removed
}

/// Whether `path` is a directory (not a symlink to one) with nothing in it.
fn is_empty_directory(root: &cap_std::fs::Dir, path: &str) -> bool {
    root.symlink_metadata(path).is_ok_and(|metadata| metadata.is_dir())
        && root.read_dir(path).is_ok_and(|mut entries| entries.next().is_none())
}

fn denied() -> ToolError {
    // The guard's recorded refusal replaces this message in the result.
    ToolError::new(ToolErrorKind::Denied, "refused")
}

fn undo_edit(call: &mut NativeCall<'_>) -> Result<ToolOutput, ToolError> {
    #[derive(Deserialize)]
    struct Args {
        path: String,
    }
    let args: Args = parse(call.request.args)?;
    // Restoring (or removing) a name is a namespace change, judged and made as one step.
    let _namespace =
        call.guard.lock_namespace().map_err(|_| ToolError::new(ToolErrorKind::Failed, "the workspace's namespace lock cannot be taken"))?;
    let Some(path) = call.guard.resolve_path("undo", &args.path, Access::Write) else {
        return Err(denied());
    };
    let shown = escape_control(&path);
    let workspace = call.request.workspace.root();
    let session = call.request.session_id;
    let last = call.undo.last(session, workspace, &path).map_err(|error| ToolError::new(ToolErrorKind::Failed, error.writes_refused()))?;
    let Some(entry) = last else {
        return Err(ToolError::new(
            ToolErrorKind::NotFound,
            format!("this session has no change of `{shown}` to undo (only a session's own successful changes to files can be undone)"),
        ));
    };
    let Some(root) = call.guard.root() else {
        return Err(ToolError::new(ToolErrorKind::Failed, "the call has no workspace"));
    };
    let current = match root.symlink_metadata(&path) {
        Err(_) => None,
        Ok(metadata) if metadata.is_file() => hash_of(root, &path),
        Ok(_) => Some(String::new()),
    };
    if current != entry.after {
        return Err(ToolError::new(
            ToolErrorKind::Conflict,
            format!(
                "`{shown}` changed after this session's last change to it, so undoing would lose that change: read it and edit it instead"
            ),
        ));
    }
    if entry.directory && !is_empty_directory(root, &path) {
        return Err(ToolError::new(
            ToolErrorKind::Conflict,
            format!(
                "`{shown}` is a directory this session created, and it is no longer empty: undo or remove what is in it first (list it with list_files)"
            ),
        ));
    }
    let access = if entry.prior == Prior::Absent { Access::Delete } else { Access::Write };
    if !call.guard.admit("undo", &path, access) {
        return Err(denied());
    }
    let Some(root) = call.guard.root() else {
        return Err(ToolError::new(ToolErrorKind::Failed, "the call has no workspace"));
    };
    let step = Step { path: path.clone(), prior: entry.prior.clone(), identity: None };
    toolcell_state::journal::restore(root, &call.undo.session_dir(session, workspace), &step)
        .map_err(|error| ToolError::new(ToolErrorKind::Failed, format!("cannot restore `{shown}`: {error}; nothing was changed")))?;
    // The change is undone whatever happens to the record; a stale record is refused later
    // because the file no longer matches it.
    let _ = call.undo.forget(session, workspace, &entry);
    let removed_directories = if entry.prior == Prior::Absent { remove_created_directories(call, &entry) } else { Vec::new() };
    let Some(root) = call.guard.root() else {
        return Err(ToolError::new(ToolErrorKind::Failed, "the call has no workspace"));
    };
    let text = match entry.prior {
        Prior::Absent => {
            let mut text = format!("Removed `{shown}`, which this session had created (call {})", entry.call_id);
            if !removed_directories.is_empty() {
                let names: Vec<String> = removed_directories.iter().map(|directory| format!("`{}`", escape_control(directory))).collect();
                text.push_str(&format!(", and the directories that call had created for it: {}", names.join(", ")));
            }
            text
        }
        _ => {
            let lines = root.read(&path).map(|bytes| bytes.iter().filter(|byte| **byte == b'\n').count()).unwrap_or(0);
            format!(
                "Restored `{shown}` to its content before this session's call {} ({})",
                entry.call_id,
                toolcell_types::counted(u64::try_from(lines).unwrap_or(u64::MAX), "line", "lines")
            )
        }
    };
    Ok(ToolOutput {
        structured: Some(serde_json::json!({
            "path": path,
            "restored_from_call": entry.call_id,
            "removed": entry.prior == Prior::Absent,
            "removed_directories": removed_directories,
        })),
        text,
    })
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

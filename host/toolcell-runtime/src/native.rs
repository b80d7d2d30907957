//! Tools the host implements itself, because they act on host state no component can reach:
//! `undo_edit` (the session's undo records) and `lock_files` / `unlock_files` (the lock table).
//! They are listed, gated by the policy, validated and audited like component tools, and every
//! file they change passes the same guard and journal.

use std::time::Duration;

use serde::Deserialize;
use toolcell_args::host_tools::lock_json;
pub(crate) use toolcell_args::host_tools::{Native, UNDO_EDIT};
use toolcell_audit::Record;
use toolcell_locks::{Lock, LockRequest, Mode};
use toolcell_policy::Access;
use toolcell_types::{ToolError, ToolErrorKind, ToolOutput, escape_control};

use crate::capabilities::filesystem::FsGuard;
use crate::outcome::CallRequest;
use toolcell_state::AuditLog;
use toolcell_state::journal::{Prior, Step};
use toolcell_state::reads::hash_of;
use toolcell_state::undo::UndoStore;
use toolcell_state::{LockStore, LockStoreError};

/// Default lease of `lock_files`.
const DEFAULT_TTL_SECONDS: u64 = 300;

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

fn lock_files(call: &mut NativeCall<'_>) -> Result<ToolOutput, ToolError> {
    #[derive(Deserialize)]
    struct Args {
        paths: Vec<String>,
        mode: Option<String>,
        ttl_seconds: Option<u64>,
    }
    let args: Args = parse(call.request.args)?;
    let mode = match args.mode.as_deref() {
        None => Mode::Exclusive,
        Some(mode) => {
            Mode::from_name(mode).ok_or_else(|| ToolError::new(ToolErrorKind::InvalidArgs, "`mode` is `exclusive` or `shared`"))?
        }
    };
    let ttl = Duration::from_secs(args.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS));
    let mut patterns = Vec::new();
    for path in &args.paths {
        let pattern =
            call.request.workspace.lock_pattern(path).map_err(|error| ToolError::new(ToolErrorKind::InvalidArgs, error.to_string()))?;
        // Locking is a claim to write: a role may lock only what it may change.
        if !call.guard.allows(Access::Write, &pattern) {
            return Err(ToolError::new(
                ToolErrorKind::Denied,
                format!("role `{}` may not write `{}`, so it may not lock it", call.request.role, escape_control(&pattern)),
            ));
        }
        patterns.push(pattern);
    }
    let owner = call.request.lock_owner();
    let mut acquired: Vec<Lock> = Vec::new();
    for pattern in &patterns {
        let request =
            LockRequest { pattern: pattern.clone(), owner: owner.to_owned(), session: call.request.session_id.to_owned(), mode, ttl };
        match call.locks.acquire(call.request.workspace.root(), &request) {
            Ok(lock) => acquired.push(lock),
            Err(error) => {
                for lock in &acquired {
                    let _ = call.locks.release(call.request.workspace.root(), lock.fence, owner);
                }
                let kind = match error {
                    LockStoreError::Lock(toolcell_locks::LockError::Conflict(_)) => ToolErrorKind::Conflict,
                    LockStoreError::Lock(_) => ToolErrorKind::InvalidArgs,
                    LockStoreError::Io { .. } | LockStoreError::Store { .. } => ToolErrorKind::Failed,
                };
                let message = match error {
                    LockStoreError::Io { .. } | LockStoreError::Store { .. } => {
                        "the lock table cannot be used; tell the operator".to_owned()
                    }
                    error => error.to_string(),
                };
                return Err(ToolError::new(kind, format!("{message}. No lock was taken.")));
            }
        }
    }
    audit_locks(call, "acquired", &acquired);
    let lines: Vec<String> = acquired
        .iter()
        .map(|lock| {
            format!("Locked `{}` ({}, token {}) until {}", escape_control(&lock.pattern), lock.mode.as_str(), lock.fence, lock.expires_at())
        })
        .collect();
    Ok(ToolOutput {
        text: lines.join("\n"),
        structured: Some(serde_json::json!({ "locks": acquired.iter().map(lock_json).collect::<Vec<_>>() })),
    })
}

fn unlock_files(call: &mut NativeCall<'_>) -> Result<ToolOutput, ToolError> {
    #[derive(Deserialize)]
    struct Args {
        paths: Option<Vec<String>>,
    }
    let args: Args = parse(call.request.args)?;
    let owner = call.request.lock_owner();
    let workspace = call.request.workspace.root();
    let unavailable = |_| ToolError::new(ToolErrorKind::Failed, "the lock table cannot be used; tell the operator");
    let released = match args.paths {
        None => call.locks.release_all(workspace, owner).map_err(unavailable)?,
        Some(paths) => {
            let held: Vec<Lock> = call.locks.live(workspace).map_err(unavailable)?.into_iter().filter(|lock| lock.owner == owner).collect();
            let mut released = Vec::new();
            for path in &paths {
                let pattern = toolcell_policy::join_lexically(".", path).unwrap_or_else(|| path.clone());
                let matching: Vec<&Lock> = held.iter().filter(|lock| lock.pattern == pattern).collect();
                if matching.is_empty() {
                    return Err(ToolError::new(
                        ToolErrorKind::NotFound,
                        format!(
                            "you hold no lock on `{}`; give the paths exactly as you locked them, or omit `paths` to release all your locks",
                            escape_control(path)
                        ),
                    ));
                }
                for lock in matching {
                    released.push(
                        call.locks
                            .release(workspace, lock.fence, owner)
                            .map_err(|error| ToolError::new(ToolErrorKind::Failed, error.to_string()))?,
                    );
                }
            }
            released
        }
    };
    audit_locks(call, "released", &released);
    let text = if released.is_empty() {
        "You held no locks.".to_owned()
    } else {
        released
            .iter()
            .map(|lock| format!("Unlocked `{}` (token {})", escape_control(&lock.pattern), lock.fence))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(ToolOutput { text, structured: Some(serde_json::json!({ "released": released.iter().map(lock_json).collect::<Vec<_>>() })) })
}

fn audit_locks(call: &NativeCall<'_>, event: &str, locks: &[Lock]) {
    let Some(log) = call.audit else {
        return;
    };
    let workspace = call.request.workspace.root().display().to_string();
    let records: Vec<Record> =
        locks.iter().map(|lock| toolcell_state::lock_record(lock, event, &workspace, call.request.principal)).collect();
    // The call's own record says whether the trail could be written.
    let _ = log.append(&records);
}

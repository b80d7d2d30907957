//! The host tool `undo_edit`: put a file back as it was before the session's last change to
//! it, from the session's undo records. The caller's guard judges every path (the policy, the
//! call's limits, what the host owns) and records each access; this module knows no policy.

use std::path::Path;

use serde::Deserialize;
use toolcell_policy::Access;
use toolcell_types::{ToolError, ToolErrorKind, ToolOutput, escape_control};

use crate::NamespaceLock;
use crate::journal::{Prior, Step};
use crate::reads::hash_of;
use crate::undo::{UndoEntry, UndoStore};

/// The largest restored file whose lines `undo_edit` counts.
const COUNTED_BYTES: u64 = 16 << 20;

/// What judges and records the accesses of `undo_edit`: the call's filesystem guard.
pub trait UndoGuard {
    /// The workspace directory; `None` when the call has none.
    fn root(&self) -> Option<&cap_std::fs::Dir>;
    /// Wait for the workspace's namespace lock; `None` when it cannot be taken.
    fn lock_namespace(&self) -> Option<Option<NamespaceLock>>;
    /// The canonical workspace-relative form of `path` if the role may write it (a refusal is
    /// recorded).
    fn resolve(&mut self, path: &str) -> Option<String>;
    /// Whether the role may have `access` to `path` (nothing recorded).
    fn allows(&self, access: Access, path: &str) -> bool;
    /// Judge `access` to `path` and record it; whether it is allowed.
    fn admit(&mut self, path: &str, access: Access) -> bool;
}

/// What `undo_edit` works with.
pub struct UndoCall<'a> {
    /// The call's guard.
    pub guard: &'a mut dyn UndoGuard,
    /// The undo records.
    pub undo: &'a UndoStore,
    /// The workspace's path on the host, which names its records.
    pub workspace: &'a Path,
    /// The session whose changes are undone.
    pub session: &'a str,
}

fn parse<T: for<'de> Deserialize<'de>>(args: &str) -> Result<T, ToolError> {
    // The schema was checked first; this only fails on a host bug.
    serde_json::from_str(args).map_err(|error| ToolError::new(ToolErrorKind::InvalidArgs, format!("bad arguments: {error}")))
}

/// Remove the directories the call of `entry` created above its path, deepest first, while
/// they are empty and the policy lets the role delete them (the guard records each removal in
/// the call's journal); returns those removed.
fn remove_created_directories(call: &mut UndoCall<'_>, entry: &UndoEntry) -> Vec<String> {
    let (workspace, session) = (call.workspace, call.session);
    let mut removed = Vec::new();
    for directory in call.undo.created_directories(session, workspace, entry) {
        let is_removable = call.guard.root().is_some_and(|root| is_empty_directory(root, &directory.path))
            && call.guard.allows(Access::Delete, &directory.path);
        if !is_removable || !call.guard.admit(&directory.path, Access::Delete) {
            break;
        }
        let Some(root) = call.guard.root() else {
            break;
        };
        let step = Step { path: directory.path.clone(), prior: Prior::Absent, identity: None, rewrite: None, times: None };
        if crate::journal::restore(root, &call.undo.session_dir(session, workspace), &step).is_err() {
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

/// `undo_edit`: put back the file `args` names as it was before this session's last change to
/// it, through `call.guard`, or say why not.
///
/// # Errors
///
/// A [`ToolError`] the agent reads: nothing to undo, a file changed since, a directory no
/// longer empty, a refusal (the guard recorded it), or a restore that failed.
pub fn undo_edit(call: &mut UndoCall<'_>, args: &str) -> Result<ToolOutput, ToolError> {
    #[derive(Deserialize)]
    struct Args {
        path: String,
    }
    let args: Args = parse(args)?;
    // Restoring (or removing) a name is a namespace change, judged and made as one step.
    let _namespace = call
        .guard
        .lock_namespace()
        .ok_or_else(|| ToolError::new(ToolErrorKind::Failed, "the workspace's namespace lock cannot be taken"))?;
    let Some(path) = call.guard.resolve(&args.path) else {
        return Err(denied());
    };
    let shown = escape_control(&path);
    let (workspace, session) = (call.workspace, call.session);
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
    if !call.guard.admit(&path, access) {
        return Err(denied());
    }
    let Some(root) = call.guard.root() else {
        return Err(ToolError::new(ToolErrorKind::Failed, "the call has no workspace"));
    };
    let step = Step { path: path.clone(), prior: entry.prior.clone(), identity: None, rewrite: None, times: None };
    crate::journal::restore(root, &call.undo.session_dir(session, workspace), &step)
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
            // Lines counted in a file of up to 16 MiB; a larger one (or a sparse one, of any
            // length) is not read again just to say so.
            let size = root.metadata(&path).map(|metadata| metadata.len()).unwrap_or(0);
            let counted = if size <= COUNTED_BYTES {
                let lines = root.read(&path).map(|bytes| bytes.iter().filter(|byte| **byte == b'\n').count()).unwrap_or(0);
                toolcell_types::counted(u64::try_from(lines).unwrap_or(u64::MAX), "line", "lines")
            } else {
                toolcell_types::counted(size, "byte", "bytes")
            };
            format!("Restored `{shown}` to its content before this session's call {} ({counted})", entry.call_id)
        }
    };
    Ok(ToolOutput {
        structured: Some(
            serde_json::json!({
                "path": path,
                "restored_from_call": entry.call_id,
                "removed": entry.prior == Prior::Absent,
                "removed_directories": removed_directories,
            })
            .into(),
        ),
        text,
    })
}

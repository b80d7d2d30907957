//! The host tools on the lock table, `lock_files` and `unlock_files`: the arguments (already
//! checked against their schema), the locks taken or released all or nothing, their audit
//! records, and the result the agent reads. The caller judges which patterns the role may
//! lock; this module knows no policy.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toolcell_args::host_tools::lock_json;
use toolcell_locks::{Lock, LockRequest, Mode};
use toolcell_types::{ToolError, ToolErrorKind, ToolOutput, escape_control};

use crate::{AuditLog, LockStore, LockStoreError, lock_record};

/// Default lease of `lock_files`.
const DEFAULT_TTL_SECONDS: u64 = 300;

/// Who asks, and where: what a lock tool works with.
#[derive(Debug)]
pub struct LockCall<'a> {
    /// The lock tables.
    pub locks: &'a LockStore,
    /// The workspace directory, opened: literal paths are resolved through its symlinks.
    pub root: &'a cap_std::fs::Dir,
    /// The workspace's path on the host, which names its lock table.
    pub workspace: &'a Path,
    /// The lock owner (the caller's owner, or its session).
    pub owner: &'a str,
    /// The session the locks are held for.
    pub session: &'a str,
    /// The caller's role, named in a refusal.
    pub role: &'a str,
    /// The authenticated principal, if any, for the audit records.
    pub principal: Option<&'a str>,
    /// Where lock events are recorded.
    pub audit: Option<&'a AuditLog>,
}

fn parse<T: for<'de> Deserialize<'de>>(args: &str) -> Result<T, ToolError> {
    // The schema was checked first; this only fails on a host bug.
    serde_json::from_str(args).map_err(|error| ToolError::new(ToolErrorKind::InvalidArgs, format!("bad arguments: {error}")))
}

fn unavailable() -> ToolError {
    ToolError::new(ToolErrorKind::Failed, "the lock table cannot be used; tell the operator")
}

/// `lock_files`: lock every path of `args` (canonical patterns; each one the role `may_write`)
/// for the caller, or none of them.
///
/// # Errors
///
/// A [`ToolError`] the agent reads: bad arguments, a pattern outside the workspace or one the
/// role may not write (`denied`), a conflicting lock, or a lock table that cannot be used.
pub fn lock_files(call: &LockCall<'_>, args: &str, mut may_write: impl FnMut(&str) -> bool) -> Result<ToolOutput, ToolError> {
    #[derive(Deserialize)]
    struct Args {
        paths: Vec<String>,
        mode: Option<String>,
        ttl_seconds: Option<u64>,
    }
    let args: Args = parse(args)?;
    let mode = match args.mode.as_deref() {
        None => Mode::Exclusive,
        Some(mode) => {
            Mode::from_name(mode).ok_or_else(|| ToolError::new(ToolErrorKind::InvalidArgs, "`mode` is `exclusive` or `shared`"))?
        }
    };
    let ttl = Duration::from_secs(args.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS));
    let mut patterns = Vec::new();
    for path in &args.paths {
        let pattern = crate::workflow::lock_pattern(call.root, path)
            .map_err(|error| ToolError::new(ToolErrorKind::InvalidArgs, LockStoreError::Lock(error).to_string()))?;
        // Locking is a claim to write: a role may lock only what it may change.
        if !may_write(&pattern) {
            return Err(ToolError::new(
                ToolErrorKind::Denied,
                format!("role `{}` may not write `{}`, so it may not lock it", call.role, escape_control(&pattern)),
            ));
        }
        patterns.push(pattern);
    }
    let mut acquired: Vec<Lock> = Vec::new();
    for pattern in &patterns {
        let request = LockRequest { pattern: pattern.clone(), owner: call.owner.to_owned(), session: call.session.to_owned(), mode, ttl };
        match call.locks.acquire(call.workspace, &request) {
            Ok(lock) => acquired.push(lock),
            Err(error) => {
                for lock in &acquired {
                    let _ = call.locks.release(call.workspace, lock.fence, call.owner);
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
    record(call, "acquired", &acquired);
    let lines: Vec<String> = acquired
        .iter()
        .map(|lock| {
            format!("Locked `{}` ({}, token {}) until {}", escape_control(&lock.pattern), lock.mode.as_str(), lock.fence, lock.expires_at())
        })
        .collect();
    Ok(ToolOutput {
        text: lines.join("\n"),
        structured: Some(serde_json::json!({ "locks": acquired.iter().map(lock_json).collect::<Vec<_>>() }).into()),
    })
}

/// `unlock_files`: release the caller's locks on the paths of `args`, or all of them.
///
/// # Errors
///
/// A [`ToolError`] the agent reads: a path the caller holds no lock on, or a lock table that
/// cannot be used.
pub fn unlock_files(call: &LockCall<'_>, args: &str) -> Result<ToolOutput, ToolError> {
    #[derive(Deserialize)]
    struct Args {
        paths: Option<Vec<String>>,
    }
    let args: Args = parse(args)?;
    let released = match args.paths {
        None => call.locks.release_all(call.workspace, call.owner).map_err(|_| unavailable())?,
        Some(paths) => {
            let held: Vec<Lock> =
                call.locks.live(call.workspace).map_err(|_| unavailable())?.into_iter().filter(|lock| lock.owner == call.owner).collect();
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
                            .release(call.workspace, lock.fence, call.owner)
                            .map_err(|error| ToolError::new(ToolErrorKind::Failed, error.to_string()))?,
                    );
                }
            }
            released
        }
    };
    record(call, "released", &released);
    let text = if released.is_empty() {
        "You held no locks.".to_owned()
    } else {
        released
            .iter()
            .map(|lock| format!("Unlocked `{}` (token {})", escape_control(&lock.pattern), lock.fence))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(ToolOutput { text, structured: Some(serde_json::json!({ "released": released.iter().map(lock_json).collect::<Vec<_>>() }).into()) })
}

fn record(call: &LockCall<'_>, event: &str, locks: &[Lock]) {
    let Some(log) = call.audit else {
        return;
    };
    let workspace = call.workspace.display().to_string();
    let records: Vec<_> = locks.iter().map(|lock| lock_record(lock, event, &workspace, call.principal)).collect();
    // The call's own record says whether the trail could be written.
    let _ = log.append(&records);
}

//! The host tools on the lock table, `lock_files` and `unlock_files`: the arguments (already
//! checked against their schema), the locks taken or released all or nothing, their audit
//! records, and the result the agent reads. The caller judges the literal paths (the role
//! must be able to write each); a glob is taken for the role ([`Holder`]) and covers only what
//! the role may write, which the result says.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toolcell_args::host_tools::lock_json;
use toolcell_locks::{Held, Holder, Lock, LockRequest, Mode};
use toolcell_policy::{Access, Policy, TaskBinding, is_glob};
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

/// What `lock_files` was asked, checked and canonical ([`lock_request`]).
#[derive(Debug)]
pub struct LockPlan {
    /// Canonical patterns, in the order given.
    pub patterns: Vec<String>,
    mode: Mode,
    ttl: Duration,
}

impl LockPlan {
    /// The patterns that name one path (no wildcard): the caller refuses those the role may
    /// not write, before anything is locked.
    pub fn literal_paths(&self) -> impl Iterator<Item = &str> {
        self.patterns.iter().map(String::as_str).filter(|pattern| !is_glob(pattern))
    }
}

fn parse<T: for<'de> Deserialize<'de>>(args: &str) -> Result<T, ToolError> {
    // The schema was checked first; this only fails on a host bug.
    serde_json::from_str(args).map_err(|error| ToolError::new(ToolErrorKind::InvalidArgs, format!("bad arguments: {error}")))
}

fn unavailable() -> ToolError {
    ToolError::new(ToolErrorKind::Failed, "the lock table cannot be used; tell the operator")
}

/// `lock_files`, first half: the arguments of `args`, with every path canonical.
///
/// # Errors
///
/// A [`ToolError`] the agent reads: bad arguments, or a pattern outside the workspace.
pub fn lock_request(call: &LockCall<'_>, args: &str) -> Result<LockPlan, ToolError> {
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
        patterns.push(pattern);
    }
    Ok(LockPlan { patterns, mode, ttl })
}

/// `lock_files`, second half: lock every pattern of `plan` for `holder` (the caller's role,
/// `None` without a policy; the caller checked that it may write each literal path), or none
/// of them. A glob covers only what the holder may write under `policy`; the result names
/// what may keep it from covering part of it.
///
/// # Errors
///
/// A [`ToolError`] the agent reads: a conflicting lock, or a lock table that cannot be used.
pub fn lock_files(call: &LockCall<'_>, plan: &LockPlan, holder: Option<&Holder>, policy: Option<&Policy>) -> Result<ToolOutput, ToolError> {
    let (patterns, mode, ttl) = (&plan.patterns, plan.mode, plan.ttl);
    let held = Held { holder, policy };
    let mut acquired: Vec<Lock> = Vec::new();
    for pattern in patterns {
        let request = LockRequest { pattern: pattern.clone(), owner: call.owner.to_owned(), session: call.session.to_owned(), mode, ttl };
        match call.locks.acquire_held(call.workspace, &request, held) {
            Ok(lock) => acquired.push(lock),
            Err(error) => {
                for lock in &acquired {
                    let _ = call.locks.release(call.workspace, lock.fence, call.owner);
                }
                let kind = match error {
                    LockStoreError::Lock(toolcell_locks::LockError::Conflict(_)) => ToolErrorKind::Conflict,
                    LockStoreError::Lock(toolcell_locks::LockError::TooMany { .. }) => ToolErrorKind::TooLarge,
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
    let mut lines = Vec::new();
    let mut locks = Vec::new();
    for lock in &acquired {
        let mut line = format!(
            "Locked `{}` ({}, token {}) until {}",
            escape_control(&lock.pattern),
            lock.mode.as_str(),
            lock.fence,
            lock.expires_at()
        );
        let mut json = lock_json(lock);
        if let (true, Some(policy), Some(holder)) = (is_glob(&lock.pattern), policy, holder) {
            // What the glob matches but the role may not write stays unlocked: say so, and how.
            let task = holder.task.as_deref().and_then(|task| TaskBinding::parse(task).ok());
            let limits = policy.limits_within(call.role, Access::Write, &lock.pattern, task.as_ref());
            if !limits.is_empty() {
                line.push_str(&format!(
                    "; it covers only the paths role `{}` may write itself, not those kept from it by {} (lock narrower paths to be exact)",
                    escape_control(call.role),
                    escape_control(&limits.join(", "))
                ));
            }
            json["covers"] = "writable".into();
            json["not_covered"] = limits.into();
        }
        lines.push(line);
        locks.push(json);
    }
    Ok(ToolOutput { text: lines.join("\n"), structured: Some(serde_json::json!({ "locks": locks }).into()) })
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

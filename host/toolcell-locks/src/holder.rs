//! Whose claim a lock is, and so what it may cover: a role may lock only what it may change.

use serde::{Deserialize, Serialize};
use toolcell_policy::{Access, Policy, TaskBinding};

/// The roles a lock was taken for, and the task they were bound to. A lock keeps another
/// owner from a write or delete of a path only if one of these roles may make that change
/// itself ([`Policy::may_change`]), judged on the canonical path when the change is asked:
/// a pattern wider than what the roles may write covers only what they may write.
///
/// Judging fails closed: a lock covers its whole pattern when the host judging it has no
/// policy, when the holder names no role, or when one of its roles is unknown to the policy
/// in force (a host sharing the lock table with another policy, or a reload that renamed the
/// role). A lock without a holder was taken by the operator or the embedding platform
/// (`toolcell lock acquire`, `Runtime::acquire_lock`), without a policy, or before locks
/// recorded one: it covers its whole pattern too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Holder {
    /// The roles: the caller's for `lock_files`; for a chain's locks (`lock-for-task`), the
    /// control role's and the roles it may spawn.
    pub roles: Vec<String>,
    /// The task (`CHAIN/TASK`) the roles' `{chain}` / `{task}` rules are bound to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

impl Holder {
    /// A holder of one role, bound to `task`.
    pub fn role(role: &str, task: Option<&TaskBinding>) -> Holder {
        Holder { roles: vec![role.to_owned()], task: task.map(ToString::to_string) }
    }

    /// Whether the lock keeps others from `access` to the canonical `path` under `policy`: one
    /// of the roles may itself make it. `true` without a policy, without roles, or with a role
    /// the policy does not know (what such a role may change cannot be judged: fail closed).
    pub fn may(&self, policy: Option<&Policy>, access: Access, path: &str) -> bool {
        let Some(policy) = policy else {
            return true;
        };
        if self.roles.is_empty() || self.roles.iter().any(|role| policy.role(role).is_none()) {
            return true;
        }
        // A task that no longer parses binds nothing: its rules do not apply.
        let task = self.task.as_deref().and_then(|task| TaskBinding::parse(task).ok());
        self.roles.iter().any(|role| policy.may_change(role, access, path, task.as_ref()))
    }

    /// The roles, for messages: `impl`, or `control`, `impl`.
    pub fn named(&self) -> String {
        self.roles.iter().map(|role| format!("`{}`", role.escape_default())).collect::<Vec<_>>().join(", ")
    }
}

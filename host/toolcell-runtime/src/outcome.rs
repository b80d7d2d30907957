//! What a call is ([`CallRequest`]) and what it produced ([`CallOutcome`]), and how a
//! component's answer, or the guard's refusals, become the result an agent sees.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::capabilities::filesystem::Approver;
use crate::workspace::Workspace;
use toolcell_policy::TaskBinding;

/// One tool call.
#[derive(Clone, Copy)]
pub struct CallRequest<'a> {
    /// The workspace the call may touch.
    pub workspace: &'a Workspace,
    /// The caller's role.
    pub role: &'a str,
    /// The caller's session id.
    pub session_id: &'a str,
    /// The tool's name.
    pub tool: &'a str,
    /// The arguments, a JSON object as text.
    pub args: &'a str,
    /// Asked about accesses the policy marks `ask`; without one they are refused.
    pub approver: Option<&'a Arc<dyn Approver>>,
    /// Who the call writes for, as the lock table knows it (a chain or task id); `None` is
    /// the session itself.
    pub owner: Option<&'a str>,
    /// The fencing tokens of the locks the caller holds: a token whose lease lapsed refuses
    /// the writes it covers.
    pub fences: &'a [u64],
    /// The task the session is bound to: the policy's `{chain}` and `{task}` rules are bound
    /// to it, and the component can read it but not change it.
    pub task: Option<&'a TaskBinding>,
    /// Who the caller authenticated as, when a service authenticated it (recorded on every
    /// audit record of the call).
    pub principal: Option<&'a str>,
    /// Set by the caller to stop the call (a client's cancellation): the component is stopped
    /// at its next epoch check (within a few milliseconds) and the call is rolled back.
    pub cancel: Option<&'a Arc<AtomicBool>>,
}

impl<'a> CallRequest<'a> {
    /// A call of `tool` with `args` (a JSON object as text) by `role` in session `session_id`,
    /// and nothing more: no approver, the session as lock owner, no fencing tokens, task,
    /// principal or cancellation. Set those with struct update syntax:
    /// `CallRequest { task: Some(&task), ..CallRequest::new(...) }`.
    pub fn new(workspace: &'a Workspace, role: &'a str, session_id: &'a str, tool: &'a str, args: &'a str) -> Self {
        CallRequest {
            workspace,
            role,
            session_id,
            tool,
            args,
            approver: None,
            owner: None,
            fences: &[],
            task: None,
            principal: None,
            cancel: None,
        }
    }

    /// The lock owner: [`owner`](Self::owner), or the session id.
    pub fn lock_owner(&self) -> &str {
        self.owner.unwrap_or(self.session_id)
    }
}

pub use toolcell_outcome::CallOutcome;
pub(crate) use toolcell_outcome::{denied_result, new_call_id, only_reads_refused, refusal_warnings};

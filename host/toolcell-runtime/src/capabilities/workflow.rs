//! `toolcell:tool/workflow`: the task-chain capabilities (locks for a chain, spawned
//! sessions), adapted to the WIT types. What each decides is `toolcell_state::workflow`'s;
//! the per-call state is the context's ([`CallContext::workflow`](super::context::CallContext)).

use std::sync::Arc;

use wasmtime::component::Linker;

use super::CallState;
use super::context::{ContextView, HasContext, WitError, context_view, link_error};
use crate::bindings;
use crate::bindings::to_wit_error;

impl bindings::toolcell::tool::workflow::Host for ContextView<'_> {
    fn locks(&mut self) -> Vec<bindings::toolcell::tool::workflow::LockInfo> {
        let Some(workflow) = self.context.workflow.clone() else {
            return Vec::new();
        };
        if self.guard.spend_capability("locks").is_err() {
            return Vec::new();
        }
        let own = self.context.session_id.clone();
        workflow.locks().iter().map(|lock| lock_info(lock, &own)).collect()
    }

    fn lock_for_task(
        &mut self,
        task: String,
        patterns: Vec<String>,
        ttl_seconds: u32,
    ) -> wasmtime::Result<Result<Vec<bindings::toolcell::tool::workflow::LockInfo>, WitError>> {
        let workflow = match self.workflow("lock-for-task", &task)? {
            Ok(workflow) => workflow,
            Err(error) => return Ok(Err(error)),
        };
        // The files this call is writing and has not put in place yet: `task_start` moves the
        // task to `in-progress` and locks its paths in one call.
        let pending: Vec<String> = self
            .guard
            .transaction
            .as_ref()
            .map(|transaction| transaction.shadows.iter().map(|shadow| shadow.path.clone()).collect())
            .unwrap_or_default();
        let granted =
            self.settle("lock-for-task", &task, workflow.lock_for_task(&self.caller(), &task, &patterns, ttl_seconds, &pending))?;
        let own = self.context.session_id.clone();
        Ok(granted.map(|locks| locks.iter().map(|lock| lock_info(lock, &own)).collect()))
    }

    fn release_task(&mut self, task: String) -> wasmtime::Result<Result<u32, WitError>> {
        let workflow = match self.workflow("release-task", &task)? {
            Ok(workflow) => workflow,
            Err(error) => return Ok(Err(error)),
        };
        self.settle("release-task", &task, workflow.release_task(&self.caller(), &task))
    }

    fn spawn_session(
        &mut self,
        role: String,
        task: String,
    ) -> wasmtime::Result<Result<bindings::toolcell::tool::workflow::Handoff, WitError>> {
        let workflow = match self.workflow("spawn-session", &task)? {
            Ok(workflow) => workflow,
            Err(error) => return Ok(Err(error)),
        };
        let spawned = self.settle("spawn-session", &task, workflow.spawn_session(&self.caller(), &role, &task))?;
        Ok(spawned.map(|(session_id, connect)| bindings::toolcell::tool::workflow::Handoff { session_id, connect }))
    }
}

impl ContextView<'_> {
    /// The call's workflow view; the refusal (audited) where the call has none or its budget
    /// of host calls is spent; a trap once the call was stopped for flooding the audit trail.
    fn workflow(
        &mut self,
        operation: &'static str,
        subject: &str,
    ) -> wasmtime::Result<Result<Arc<toolcell_state::workflow::WorkflowCall>, WitError>> {
        if let Err(reason) = self.guard.spend_capability(operation) {
            if self.guard.flooded().is_some() {
                return Err(wasmtime::format_err!("{reason}"));
            }
            return Ok(Err(WitError::TooLarge(reason)));
        }
        match &self.context.workflow {
            Some(workflow) => Ok(Ok(Arc::clone(workflow))),
            None => {
                let message = "the task-chain workflow is not available in this call".to_owned();
                self.guard.refuse_capability(operation, subject, "no-workflow", message.clone());
                self.stop_if_flooded()?;
                Ok(Err(WitError::Denied(message)))
            }
        }
    }

    /// Record what a capability decided: a refusal is audited and fails the call (a flood of
    /// them stops the component); a grant is recorded; the capability's own error goes back to
    /// the component.
    fn settle<T>(
        &mut self,
        operation: &'static str,
        subject: &str,
        decided: Result<Result<T, toolcell_types::ToolError>, toolcell_state::workflow::Refusal>,
    ) -> wasmtime::Result<Result<T, WitError>> {
        match decided {
            Err(refusal) => {
                self.guard.refuse_capability(refusal.operation, &refusal.subject, &refusal.rule, refusal.message.clone());
                self.stop_if_flooded()?;
                Ok(Err(WitError::Denied(refusal.message)))
            }
            Ok(Err(error)) => Ok(Err(to_wit_error(error.kind, error.message))),
            Ok(Ok(value)) => {
                self.guard.record_capability(operation, subject, toolcell_state::workflow::grant_of(operation));
                Ok(Ok(value))
            }
        }
    }

    fn caller(&self) -> toolcell_state::workflow::Caller<'_> {
        toolcell_state::workflow::Caller { role: &self.context.role, session_id: &self.context.session_id, call_id: &self.context.call_id }
    }

    fn stop_if_flooded(&self) -> wasmtime::Result<()> {
        match self.guard.flooded() {
            Some(message) => Err(wasmtime::format_err!("{message}")),
            None => Ok(()),
        }
    }
}

/// A lock as the session `own` sees it: another session's id (which lets whoever knows it act
/// in that session, over MCP) is never told; a task's session (`task:...`) names no secret.
fn lock_info(lock: &toolcell_locks::Lock, own: &str) -> bindings::toolcell::tool::workflow::LockInfo {
    let toolcell_state::workflow::LockInfo { pattern, mut owner, mut session, mode, expires } = lock.into();
    if session != own && !session.starts_with("task:") {
        if owner == session {
            "another session".clone_into(&mut owner);
        }
        "another session".clone_into(&mut session);
    }
    bindings::toolcell::tool::workflow::LockInfo { pattern, owner, session, mode, expires }
}

/// Link `toolcell:tool/workflow`.
pub(super) fn add_to_linker(linker: &mut Linker<CallState>) -> Result<(), crate::error::Error> {
    bindings::toolcell::tool::workflow::add_to_linker::<CallState, HasContext>(linker, context_view).map_err(link_error)
}

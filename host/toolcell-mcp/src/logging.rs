//! MCP log notifications (`logging/setLevel`, `notifications/message`): refusals and warnings
//! of a call, sent to a client that asked for them. MCP logging is deprecated by SEP-2577
//! (and so in rmcp), but clients and the conformance suite still use it.
#![expect(deprecated, reason = "MCP logging is deprecated by SEP-2577, but clients still ask for it")]

use std::sync::{Mutex, PoisonError};

use rmcp::RoleServer;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, SetLevelRequestParams};
use rmcp::service::RequestContext;
use serde_json::Value;

/// The severities toolcell logs at.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Severity {
    /// A refused access.
    Notice,
    /// A warning of a call that did not fail.
    Warning,
}

impl Severity {
    fn level(self) -> LoggingLevel {
        match self {
            Severity::Notice => LoggingLevel::Notice,
            Severity::Warning => LoggingLevel::Warning,
        }
    }
}

/// The least severe level a client wants (`None`: it has not asked, so nothing is sent).
#[derive(Default)]
pub(crate) struct LogLevel(Mutex<Option<u8>>);

impl LogLevel {
    /// The client's `logging/setLevel`.
    pub(crate) fn set(&self, request: &SetLevelRequestParams) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(rank(request.level));
    }

    /// Send `data` at `severity` if the client wants that level.
    /// Tell `data` to the client of `context` if it asked for messages this severe (a call
    /// without `context` has no client that asked).
    pub(crate) async fn send(&self, context: Option<&RequestContext<RoleServer>>, severity: Severity, data: Value) {
        let Some(context) = context else { return };
        let wanted = *self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if wanted.is_some_and(|wanted| rank(severity.level()) >= wanted) {
            let message = LoggingMessageNotificationParam::new(severity.level(), data).with_logger("toolcell");
            let _ = context.peer.notify_logging_message(message).await;
        }
    }
}

/// Levels from the least severe, as RFC 5424 orders them.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The server's capabilities: tools, and logging.
pub(crate) fn capabilities() -> rmcp::model::ServerCapabilities {
    rmcp::model::ServerCapabilities::builder().enable_tools().enable_logging().build()
}

/// A call's line in the service's log (`toolcell::call`): who called which tool, and how it
/// ended. Never its arguments: they may hold what a caller keeps private.
pub(crate) struct CallLine {
    session: String,
    principal: String,
    role: String,
    tool: String,
}

/// What a call's line says of how it ended.
pub(crate) struct Said {
    call_id: String,
    outcome: String,
    denials: usize,
}

impl CallLine {
    /// The line of a call of `tool` in `session`.
    pub(crate) fn of(session: &toolcell_host::Session, tool: &str) -> CallLine {
        CallLine {
            session: session.id().to_owned(),
            principal: session.principal().unwrap_or_default().to_owned(),
            role: session.role().to_owned(),
            tool: tool.to_owned(),
        }
    }

    /// What the line says of `call`: `ok`, or its error's kind.
    pub(crate) fn said(&self, call: &toolcell_host::CallResult) -> Said {
        let outcome = match &call.output {
            Ok(_) => "ok".to_owned(),
            Err(error) => serde_json::json!(error)["kind"].as_str().unwrap_or("failed").to_owned(),
        };
        Said { call_id: call.call_id.clone(), outcome, denials: call.denials.len() }
    }

    /// Write the line, for a call that took `took`.
    pub(crate) fn write(&self, said: &Said, took: std::time::Duration) {
        tracing::info!(
            target: "toolcell::call",
            call_id = %said.call_id,
            session = %self.session,
            principal = %self.principal,
            role = %self.role,
            tool = %self.tool,
            outcome = %said.outcome,
            denials = said.denials,
            duration_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            "call"
        );
    }
}

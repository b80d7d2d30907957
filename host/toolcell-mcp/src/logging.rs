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
    pub(crate) async fn send(&self, context: &RequestContext<RoleServer>, severity: Severity, data: Value) {
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

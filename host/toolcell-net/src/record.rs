//! The record of one request, for the call's audit chain. It never holds a header's value.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Whether the policy let a request go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// A rule allowed it and its address was checked (it may still have failed: see `reason`).
    Allowed,
    /// A rule, an address check or a limit refused it; nothing was sent.
    Refused,
}

/// One request of a call: where it went, what came back, how much each way, and who decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// `GET`, `POST`, …
    pub method: String,
    /// `http` or `https` (as written, when unsupported).
    pub scheme: String,
    /// The host, normalised (empty when the URI had none).
    pub host: String,
    /// The port (the scheme's own when the URI names none).
    pub port: u16,
    /// The checked address connected to; `None` when nothing was connected.
    pub address: Option<IpAddr>,
    /// The response status; `None` without a response.
    pub status: Option<u16>,
    /// Bytes sent: request line, headers and body.
    pub bytes_sent: u64,
    /// Bytes received: status line, headers and body (as far as it was read).
    pub bytes_received: u64,
    /// From the request to the end of its response body (or its failure).
    pub elapsed_ms: u64,
    /// Allowed or refused.
    pub decision: Decision,
    /// The rule that decided; `None` when no rule allowed it (default deny).
    pub rule: Option<String>,
    /// Why it was refused or how it ended early; `None` for a complete exchange.
    pub reason: Option<String>,
}

/// One line per request: method, the URL's origin, address, status, bytes each way, time, and
/// how it ended.
impl std::fmt::Display for RequestRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}://{}:{}", self.method, self.scheme, self.host, self.port)?;
        if let Some(address) = self.address {
            write!(f, " address={address}")?;
        }
        if let Some(status) = self.status {
            write!(f, " status={status}")?;
        }
        write!(f, " sent={} received={} ms={}", self.bytes_sent, self.bytes_received, self.elapsed_ms)?;
        if self.decision == Decision::Allowed
            && let Some(reason) = &self.reason
        {
            write!(f, " ended: {reason}")?;
        }
        Ok(())
    }
}

//! What can go wrong with a request, each error naming the value at fault and what to do.

use std::net::IpAddr;

/// Which per-call bound a request ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Limit {
    /// Requests a call may send (`[network] requests`).
    Requests,
    /// Bytes a call may send (`[network] sent_kib`).
    SentBytes,
    /// Bytes a call may receive (`[network] received_kib`).
    ReceivedBytes,
    /// Time to open one connection (`[network] connect_timeout_ms`).
    ConnectTime,
    /// Time all of a call's requests may take (`[network] total_ms`).
    TotalTime,
    /// Connections open at once (`[network] connections`).
    Connections,
}

impl Limit {
    /// The `[network]` key that sets it.
    pub fn policy_key(self) -> &'static str {
        match self {
            Limit::Requests => "requests",
            Limit::SentBytes => "sent_kib",
            Limit::ReceivedBytes => "received_kib",
            Limit::ConnectTime => "connect_timeout_ms",
            Limit::TotalTime => "total_ms",
            Limit::Connections => "connections",
        }
    }
}

/// Why a request was refused or failed. No message holds a secret header's value or a host
/// path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The request cannot be sent as written (no host, a relative URI, a bad header).
    #[error("the request to `{uri}` cannot be sent: {reason}")]
    InvalidRequest {
        /// The URI as the caller gave it.
        uri: String,
        /// What is wrong, and what to write instead.
        reason: String,
    },
    /// A scheme other than `http` or `https`.
    #[error("the scheme `{scheme}` is not supported: send `http://` or `https://` requests")]
    UnsupportedScheme {
        /// The scheme as written.
        scheme: String,
    },
    /// The role's network rules refuse the destination.
    #[error("{message}")]
    Refused {
        /// The deny rule that refused it; `None` when no rule allows it (default deny).
        rule: Option<String>,
        /// Which rule, and the policy lines that would grant it.
        message: String,
    },
    /// The host resolves to an address the allowing rule does not let it reach.
    #[error("{message}")]
    AddressRefused {
        /// The rule that allowed the host.
        rule: String,
        /// The address refused.
        address: IpAddr,
        /// The address, its range, and the `cidrs` line that would allow it.
        message: String,
    },
    /// An extra root bundle the operator configured is not PEM certificates.
    #[error("the certificate authorities in `{bundle}` cannot be used: {reason}; give PEM `CERTIFICATE` blocks in `[network] roots`")]
    Roots {
        /// The bundle's name (as the policy writes it).
        bundle: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An extra root bundle the operator configured cannot be read.
    #[error("the certificate authorities `{bundle}` of `[network] roots` cannot be read: {reason}")]
    RootsUnreadable {
        /// The bundle's name (as the policy writes it).
        bundle: String,
        /// Why not.
        reason: String,
    },
    /// The host name could not be resolved.
    #[error("`{host}` could not be resolved: {reason}; check the name, or ask the operator for a `--resolve {host}=ADDRESS`")]
    Resolve {
        /// The host.
        host: String,
        /// What the resolver said.
        reason: String,
    },
    /// A per-call bound was reached.
    #[error("the request to `{host}` stopped: {detail}; the operator can raise `[network] {key}` in the policy", key = limit.policy_key())]
    LimitReached {
        /// The bound.
        limit: Limit,
        /// The host of the request.
        host: String,
        /// The bound's value and what went over it.
        detail: String,
    },
    /// No connection could be opened to the checked addresses.
    #[error("could not connect to `{host}` at {address} port {port}: {reason}; check that the server is up")]
    Connect {
        /// The host.
        host: String,
        /// The (checked) address tried last.
        address: IpAddr,
        /// The port.
        port: u16,
        /// What the system said.
        reason: String,
    },
    /// The TLS handshake failed, for instance a certificate not valid for the host's name.
    #[error(
        "TLS with `{host}` failed: {reason}; the server's certificate must be valid for `{host}` and issued by a trusted authority (the operator adds internal ones with `[network] roots`)"
    )]
    Tls {
        /// The host the certificate was checked against.
        host: String,
        /// What rustls said.
        reason: String,
    },
    /// A secret header of the allowing rule could not be read on the host.
    #[error("the network rule `{rule}` adds the header `{header}`, but {reason}; the operator must provide it")]
    Secret {
        /// The rule.
        rule: String,
        /// The header's name.
        header: String,
        /// Where its value should have come from (an environment variable's name, never a path or value).
        reason: String,
    },
    /// The exchange failed at the HTTP level (the server closed early, sent a malformed response, …).
    #[error("the exchange with `{host}` failed: {reason}")]
    Http {
        /// The host.
        host: String,
        /// What hyper said.
        reason: String,
    },
    /// The request's body failed while it was sent.
    #[error("the request body for `{host}` failed: {reason}")]
    RequestBody {
        /// The host.
        host: String,
        /// What the body said.
        reason: String,
    },
}

impl NetError {
    /// Whether the policy refused the request (a rule, an address, or a limit), as opposed to
    /// a network or server failure.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            NetError::Refused { .. } | NetError::AddressRefused { .. } | NetError::LimitReached { .. } | NetError::UnsupportedScheme { .. }
        )
    }
}

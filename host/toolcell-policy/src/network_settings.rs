//! `[network]`: the bounds on a call's outbound HTTP, and the extra certificate authorities
//! HTTPS trusts. A key left out is the host's default (`toolcell_net::NetLimits::default`).
//!
//! ```toml
//! [network]
//! requests = 16                 # requests a call may send
//! sent_kib = 1024               # request bytes (headers and bodies) a call may send
//! received_kib = 8192           # response bytes a call may receive
//! connect_timeout_ms = 5000     # to open one connection (TCP and TLS)
//! total_ms = 30000              # all of a call's requests, first byte to last
//! connections = 4               # connections open at once
//! roots = ["certs/internal-ca.pem"] # PEM certificate authorities, relative to the policy file
//! ```

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::PolicyError;
use crate::parse::{located, toml_message};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetworkSettings {
    requests: Option<Spanned<i64>>,
    sent_kib: Option<Spanned<i64>>,
    received_kib: Option<Spanned<i64>>,
    connect_timeout_ms: Option<Spanned<i64>>,
    total_ms: Option<Spanned<i64>>,
    connections: Option<Spanned<i64>>,
    #[serde(default)]
    roots: Vec<Spanned<String>>,
}

/// Only the `[network]` table.
#[derive(Deserialize)]
struct RawNetworkOnly {
    #[serde(default)]
    network: Option<RawNetworkSettings>,
}

/// What `[network]` says, checked; `None` is the host's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkSettings {
    /// Requests a call may send (`requests`).
    pub requests: Option<u64>,
    /// Bytes a call may send, headers and bodies (`sent_kib`).
    pub sent_bytes: Option<u64>,
    /// Bytes a call may receive, headers and bodies (`received_kib`).
    pub received_bytes: Option<u64>,
    /// Time to open one connection, TCP and TLS (`connect_timeout_ms`).
    pub connect_timeout: Option<Duration>,
    /// Time all of a call's requests may take together (`total_ms`).
    pub total_time: Option<Duration>,
    /// Connections a call may hold open at once (`connections`).
    pub connections: Option<usize>,
    /// PEM files of extra certificate authorities, as written (relative to the policy file).
    pub roots: Vec<String>,
}

impl RawNetworkSettings {
    /// Check the table; errors carry the line of the value at fault.
    pub(crate) fn compile(&self, file: &str, text: &str) -> Result<NetworkSettings, PolicyError> {
        let error = located(file, text);
        let positive = |value: &Option<Spanned<i64>>, key: &str, max: i64| -> Result<Option<u64>, PolicyError> {
            match value {
                None => Ok(None),
                Some(value) if (1..=max).contains(value.get_ref()) => Ok(u64::try_from(*value.get_ref()).ok()),
                Some(value) => {
                    Err(error(Some(value.span()), format!("`{key}` in [network] must be between 1 and {max}, not {}", value.get_ref())))
                }
            }
        };
        for root in &self.roots {
            if root.get_ref().trim().is_empty() {
                return Err(error(Some(root.span()), "`[network] roots` has an empty file name; name a PEM certificate file".to_owned()));
            }
        }
        Ok(NetworkSettings {
            requests: positive(&self.requests, "requests", 1_000_000)?,
            sent_bytes: positive(&self.sent_kib, "sent_kib", 16 * 1024 * 1024)?.map(|kib| kib << 10),
            received_bytes: positive(&self.received_kib, "received_kib", 16 * 1024 * 1024)?.map(|kib| kib << 10),
            connect_timeout: positive(&self.connect_timeout_ms, "connect_timeout_ms", 600_000)?.map(Duration::from_millis),
            total_time: positive(&self.total_ms, "total_ms", 24 * 3600 * 1000)?.map(Duration::from_millis),
            connections: positive(&self.connections, "connections", 1024)?.and_then(|count| usize::try_from(count).ok()),
            roots: self.roots.iter().map(|root| root.get_ref().clone()).collect(),
        })
    }
}

/// What the `[network]` table of a policy says (defaults without one); every other table is
/// left to [`Policy::parse`](crate::Policy::parse), which checks this one too.
///
/// # Errors
///
/// [`PolicyError`] with the line, for TOML that does not parse, an unknown key in the table,
/// a bound out of range, or an empty root file name.
pub fn network_settings(file: &str, text: &str) -> Result<NetworkSettings, PolicyError> {
    let error = located(file, text);
    let raw: RawNetworkOnly = toml::from_str(text).map_err(|parse_error| error(parse_error.span(), toml_message(text, &parse_error)))?;
    raw.network.unwrap_or_default().compile(file, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_table_is_read_and_its_mistakes_are_named_with_their_line() {
        let settings = network_settings(
            "p.toml",
            "version = 1\n[network]\nrequests = 3\nsent_kib = 2\nreceived_kib = 4\nconnect_timeout_ms = 250\ntotal_ms = 1000\nconnections = 2\nroots = [\"ca.pem\"]\n",
        )
        .expect("reads");
        assert_eq!(
            settings,
            NetworkSettings {
                requests: Some(3),
                sent_bytes: Some(2048),
                received_bytes: Some(4096),
                connect_timeout: Some(Duration::from_millis(250)),
                total_time: Some(Duration::from_secs(1)),
                connections: Some(2),
                roots: vec!["ca.pem".to_owned()],
            }
        );
        assert_eq!(network_settings("p.toml", "version = 1\n").expect("reads"), NetworkSettings::default());
        for (text, line, needle) in [
            ("[network]\nrequests = 0\n", 2, "`requests` in [network] must be between 1 and 1000000, not 0"),
            ("[network]\n\nreceived_kib = -1\n", 3, "`received_kib` in [network] must be between 1"),
            ("[network]\nconnections = 5000\n", 2, "`connections` in [network] must be between 1 and 1024"),
            ("[network]\nroots = [\" \"]\n", 2, "empty file name"),
            ("[network]\nproxy = \"x\"\n", 2, "unknown field `proxy`"),
        ] {
            let refused = network_settings("p.toml", text).expect_err(text);
            assert_eq!(refused.line, Some(line), "{text}: {}", refused.reason);
            assert!(refused.reason.contains(needle), "{text}: {}", refused.reason);
        }
        let whole = "version = 1\n[network]\nrequests = 0\n[roles.r]\ntools = [\"read_file\"]\n";
        let refused = crate::Policy::parse("p.toml", whole, &["read_file"]).expect_err("the whole policy is checked too");
        assert_eq!(refused.line, Some(3), "{}", refused.reason);
    }
}

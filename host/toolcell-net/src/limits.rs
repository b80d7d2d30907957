//! The bounds on one call's outbound HTTP.

use std::time::Duration;

use toolcell_policy::NetworkSettings;

/// Per-call bounds: every request of a call counts against them together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetLimits {
    /// Requests a call may send, refused ones included.
    pub requests: u64,
    /// Bytes a call may send: request lines, headers (secret ones included) and bodies.
    pub sent_bytes: u64,
    /// Bytes a call may receive: status lines, headers and bodies.
    pub received_bytes: u64,
    /// Time to open one connection, TCP and TLS.
    pub connect_timeout: Duration,
    /// Time from a call's first request until the last byte of its last response.
    pub total_time: Duration,
    /// Connections a call may hold open at once (a response whose body is not finished or
    /// dropped holds one).
    pub connections: usize,
}

impl Default for NetLimits {
    fn default() -> NetLimits {
        NetLimits {
            requests: 32,
            sent_bytes: 1 << 20,
            received_bytes: 16 << 20,
            connect_timeout: Duration::from_secs(10),
            total_time: Duration::from_secs(60),
            connections: 4,
        }
    }
}

impl NetLimits {
    /// The defaults, with what the policy's `[network]` table sets.
    pub fn from_settings(settings: &NetworkSettings) -> NetLimits {
        let defaults = NetLimits::default();
        NetLimits {
            requests: settings.requests.unwrap_or(defaults.requests),
            sent_bytes: settings.sent_bytes.unwrap_or(defaults.sent_bytes),
            received_bytes: settings.received_bytes.unwrap_or(defaults.received_bytes),
            connect_timeout: settings.connect_timeout.unwrap_or(defaults.connect_timeout),
            total_time: settings.total_time.unwrap_or(defaults.total_time),
            connections: settings.connections.unwrap_or(defaults.connections),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_overrides_only_what_it_sets() {
        assert_eq!(NetLimits::from_settings(&NetworkSettings::default()), NetLimits::default());
        let settings = NetworkSettings { requests: Some(2), total_time: Some(Duration::from_millis(5)), ..NetworkSettings::default() };
        let limits = NetLimits::from_settings(&settings);
        assert_eq!((limits.requests, limits.total_time), (2, Duration::from_millis(5)));
        assert_eq!(limits.sent_bytes, NetLimits::default().sent_bytes);
    }

    #[test]
    fn the_book_states_the_defaults() {
        let book = include_str!("../../../docs/src/network.md");
        let defaults = NetLimits::default();
        for (key, value) in [
            ("requests", defaults.requests),
            ("sent_kib", defaults.sent_bytes >> 10),
            ("received_kib", defaults.received_bytes >> 10),
            ("connect_timeout_ms", u64::try_from(defaults.connect_timeout.as_millis()).unwrap_or(u64::MAX)),
            ("total_ms", u64::try_from(defaults.total_time.as_millis()).unwrap_or(u64::MAX)),
            ("connections", defaults.connections as u64),
        ] {
            let row = format!("| `{key}` | {value} |");
            assert!(book.contains(&row), "docs/src/network.md has the row `{row}`");
        }
    }
}

//! The service configuration of `toolcell serve`: where it listens, the workspaces it serves,
//! and the principals its bearer tokens stand for. A token is stored only as its SHA-256; the
//! role, workspace, owner and task of a caller come from its principal, never from the client.
//!
//! ```toml
//! listen = "127.0.0.1:8750"
//!
//! [workspaces]
//! app = "/srv/repos/app"
//!
//! [[principals]]
//! name = "alice"
//! token_sha256 = "…64 hex digits, from `toolcell token`…"
//! workspace = "app"
//! role = "impl"
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

pub use oauth::{OauthConfig, ScopedRole, check_fetchable};

mod oauth;

/// Requests larger than this are refused unless the configuration says otherwise.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// An MCP session idle this long ends (its locks then expire on their own leases).
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);
/// How long a client has to send a request's whole body, unless the configuration says.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// On SIGTERM, calls in flight get this long to finish, unless the configuration says.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// The bounds of what one principal, and the whole service, may hold at once, unless the
/// configuration says otherwise.
pub const DEFAULT_BOUNDS: Bounds = Bounds {
    max_connections: 1024,
    max_connections_per_principal: 256,
    max_requests_per_principal: 64,
    max_streams_per_principal: 32,
    max_sessions_per_principal: 64,
    max_calls: 64,
    max_calls_per_principal: 16,
};

/// A validated service configuration.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The configuration file's name, for messages.
    pub file: String,
    /// Where to listen, unless `--listen` says otherwise.
    pub listen: Option<SocketAddr>,
    /// `Host` header values accepted besides the loopback names (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// `Origin` header values accepted; a request carrying any other `Origin` is refused.
    pub allowed_origins: Vec<String>,
    /// The largest request body accepted.
    pub max_request_bytes: usize,
    /// How long an MCP session may stay idle before it ends.
    pub session_idle: Duration,
    /// How long a client has to send a request's whole body (`request_body_timeout`): a body
    /// trickled in a byte at a time holds a connection no longer than this.
    pub request_body_timeout: Duration,
    /// What one principal, and the whole service, may hold at once.
    pub bounds: Bounds,
    /// The workspaces served, by name.
    pub workspaces: BTreeMap<String, PathBuf>,
    /// Who may call, by token.
    pub principals: Vec<Principal>,
    /// The principal a request without an `Authorization` header acts as; `None` (the
    /// default) answers such requests 401.
    pub anonymous: Option<String>,
    /// `[store] url`: the PostgreSQL store of locks and the audit trail shared with other
    /// hosts, unless `--store` says otherwise.
    pub store: Option<String>,
    /// `[store] answer_timeout`: how long a use of the store waits for the database before it
    /// fails (writes are refused, reads go on) and the connection is dropped (`None`: the
    /// store's default, 5s).
    pub store_answer_timeout: Option<Duration>,
    /// `[oauth]`: JWT access tokens of one issuer, beside the static tokens.
    pub oauth: Option<OauthConfig>,
    /// The SHA-256 of the token `GET /metrics` needs (`None`: no `/metrics`).
    pub metrics_token_sha256: Option<[u8; 32]>,
    /// On SIGTERM, how long calls in flight get to finish before the process exits anyway.
    pub shutdown_grace: Duration,
}

/// The bounds `serve` keeps, each held for the life of what it counts (see
/// [`crate::http`]). Where a bound is shared by the whole service (connections, calls), each
/// principal is guaranteed its share, `min(per principal, service-wide / principals)`: what the
/// others hold never takes that from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Connections served at once, authenticated or not (`max_connections`).
    pub max_connections: usize,
    /// Connections one principal may hold, counted from its first authenticated request on the
    /// connection until it closes (`max_connections_per_principal`).
    pub max_connections_per_principal: usize,
    /// Requests one principal may have in flight, each until its answer (streamed or not) is
    /// sent or dropped (`max_requests_per_principal`).
    pub max_requests_per_principal: usize,
    /// Event streams one principal may hold open: `GET` streams and streamed answers to
    /// requests (`max_streams_per_principal`).
    pub max_streams_per_principal: usize,
    /// MCP sessions one principal may have, each until it ends or stays idle for
    /// `session_idle` (`max_sessions_per_principal`).
    pub max_sessions_per_principal: usize,
    /// Tool calls running at once in the service (`max_calls`), each until its instance is
    /// released: at most the instances the runtime holds at once.
    pub max_calls: usize,
    /// Tool calls one principal may have running (`max_calls_per_principal`).
    pub max_calls_per_principal: usize,
}

/// Who a bearer token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Its name, recorded on every audit record of its calls.
    pub name: String,
    /// The SHA-256 of its token (`None` only for the anonymous principal).
    pub token_sha256: Option<[u8; 32]>,
    /// The workspace it works in (a key of [`ServiceConfig::workspaces`]).
    pub workspace: String,
    /// The policy role it acts as.
    pub role: String,
    /// Who its work belongs to for the lock table (a chain id, say); its session otherwise.
    pub owner: Option<String>,
    /// The task it is bound to (`CHAIN-ID/NNN-slug`).
    pub task: Option<String>,
    /// The line of the configuration that defines it.
    pub line: usize,
}

/// What is wrong with a service configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {reason}", line.map(|line| format!(" line {line}")).unwrap_or_default())]
pub struct ConfigError {
    /// The file's name.
    pub file: String,
    /// The 1-based line of the offending text.
    pub line: Option<usize>,
    /// What is wrong and how to fix it.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<Spanned<String>>,
    #[serde(default)]
    allowed_hosts: Vec<Spanned<String>>,
    #[serde(default)]
    allowed_origins: Vec<Spanned<String>>,
    max_request_bytes: Option<Spanned<i64>>,
    session_idle: Option<Spanned<String>>,
    request_body_timeout: Option<Spanned<String>>,
    max_connections: Option<Spanned<i64>>,
    max_connections_per_principal: Option<Spanned<i64>>,
    max_requests_per_principal: Option<Spanned<i64>>,
    max_streams_per_principal: Option<Spanned<i64>>,
    max_sessions_per_principal: Option<Spanned<i64>>,
    max_calls: Option<Spanned<i64>>,
    max_calls_per_principal: Option<Spanned<i64>>,
    anonymous: Option<Spanned<String>>,
    workspaces: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    principals: Vec<Spanned<RawPrincipal>>,
    store: Option<RawStore>,
    oauth: Option<oauth::RawOauth>,
    metrics_token_sha256: Option<Spanned<String>>,
    shutdown_grace: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    url: Option<String>,
    answer_timeout: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    name: Spanned<String>,
    token_sha256: Option<Spanned<String>>,
    workspace: Spanned<String>,
    role: Spanned<String>,
    owner: Option<Spanned<String>>,
    task: Option<Spanned<String>>,
}

impl ServiceConfig {
    /// Read and validate the configuration file at `path`; relative workspace paths are taken
    /// from the file's directory.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file, the line and what to change.
    pub fn load(path: &Path) -> Result<ServiceConfig, ConfigError> {
        let file = path.file_name().map_or_else(|| path.display().to_string(), |name| name.to_string_lossy().into_owned());
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError {
            file: file.clone(),
            line: None,
            reason: format!("cannot be read: {error}"),
        })?;
        ServiceConfig::parse(&file, &text, path.parent().unwrap_or(Path::new(".")))
    }

    /// Validate `text`, the configuration named `file`, resolving relative workspace paths
    /// against `base`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the line and what to change.
    pub fn parse(file: &str, text: &str, base: &Path) -> Result<ServiceConfig, ConfigError> {
        let error = |span: Option<std::ops::Range<usize>>, reason: String| ConfigError {
            file: file.to_owned(),
            line: span.map(|span| line_of(text, span.start)),
            reason,
        };
        let raw: RawConfig =
            toml::from_str(text).map_err(|parse_error| error(parse_error.span(), parse_error.message().trim().to_owned()))?;
        let listen = match &raw.listen {
            Some(listen) => Some(listen.get_ref().parse::<SocketAddr>().map_err(|_| {
                error(
                    Some(listen.span()),
                    format!("`listen = {:?}` is not an address: write IP:PORT, e.g. \"127.0.0.1:8750\"", listen.get_ref()),
                )
            })?),
            None => None,
        };
        let max_request_bytes = match &raw.max_request_bytes {
            Some(bytes) => match usize::try_from(*bytes.get_ref()) {
                Ok(value) if (1024..=256 * 1024 * 1024).contains(&value) => value,
                _ => {
                    return Err(error(
                        Some(bytes.span()),
                        format!("`max_request_bytes = {}` is out of range: give between 1024 and 268435456", bytes.get_ref()),
                    ));
                }
            },
            None => DEFAULT_MAX_REQUEST_BYTES,
        };
        // A duration setting: `key`'s value within `range` (shown as `bounds`), else `default`.
        let duration = |key: &str,
                        value: &Option<Spanned<String>>,
                        range: std::ops::RangeInclusive<Duration>,
                        bounds: &str,
                        example: &str,
                        default| {
            let Some(value) = value else {
                return Ok(default);
            };
            match humantime::parse_duration(value.get_ref()) {
                Ok(parsed) if range.contains(&parsed) => Ok(parsed),
                _ => Err(error(
                    Some(value.span()),
                    format!("`{key} = {:?}` is not a duration between {bounds}: write e.g. \"{example}\"", value.get_ref()),
                )),
            }
        };
        let session_idle = duration(
            "session_idle",
            &raw.session_idle,
            Duration::from_secs(1)..=Duration::from_secs(7 * 24 * 3600),
            "1s and 7d",
            "30m",
            DEFAULT_SESSION_IDLE,
        )?;
        let request_body_timeout = duration(
            "request_body_timeout",
            &raw.request_body_timeout,
            Duration::from_secs(1)..=Duration::from_secs(3600),
            "1s and 1h",
            "30s",
            DEFAULT_BODY_TIMEOUT,
        )?;
        let shutdown_grace = duration(
            "shutdown_grace",
            &raw.shutdown_grace,
            Duration::ZERO..=Duration::from_secs(3600),
            "0s and 1h",
            "30s",
            DEFAULT_SHUTDOWN_GRACE,
        )?;
        let store_answer_timeout = match raw.store.as_ref().and_then(|store| store.answer_timeout.as_ref()) {
            Some(value) => Some(duration(
                "answer_timeout",
                &Some(value.clone()),
                Duration::from_millis(100)..=Duration::from_secs(600),
                "100ms and 10m",
                "5s",
                Duration::ZERO,
            )?),
            None => None,
        };
        let bounds = parse_bounds(&raw, raw.principals.len(), &error)?;
        for origin in &raw.allowed_origins {
            let value = origin.get_ref();
            if value != "null" && !(value.starts_with("http://") || value.starts_with("https://")) {
                return Err(error(
                    Some(origin.span()),
                    format!("allowed origin {value:?} has no scheme: write e.g. \"https://app.example.com:443\" or \"http://localhost:*\""),
                ));
            }
        }
        let mut workspaces = BTreeMap::new();
        for (name, directory) in &raw.workspaces {
            check_name(name.get_ref()).map_err(|reason| error(Some(name.span()), format!("workspace name: {reason}")))?;
            if directory.get_ref().is_empty() {
                return Err(error(Some(directory.span()), format!("workspace `{}` has an empty path: give its directory", name.get_ref())));
            }
            workspaces.insert(name.get_ref().clone(), base.join(directory.get_ref()));
        }
        let mut principals: Vec<Principal> = Vec::new();
        for raw_principal in &raw.principals {
            let line = line_of(text, raw_principal.span().start);
            let raw_principal = raw_principal.get_ref();
            let name = raw_principal.name.get_ref();
            check_name(name).map_err(|reason| error(Some(raw_principal.name.span()), format!("principal name: {reason}")))?;
            if principals.iter().any(|known| &known.name == name) {
                return Err(error(Some(raw_principal.name.span()), format!("principal `{name}` is defined twice: give each its own name")));
            }
            let token_sha256 = match &raw_principal.token_sha256 {
                Some(hash) => Some(parse_hash(hash.get_ref()).ok_or_else(|| {
                    error(
                        Some(hash.span()),
                        format!(
                            "principal `{name}`: `token_sha256` must be 64 lowercase hex digits (the SHA-256 of the token; `toolcell token` prints one)"
                        ),
                    )
                })?),
                None => None,
            };
            if let Some(hash) = token_sha256
                && let Some(twin) = principals.iter().find(|known| known.token_sha256 == Some(hash))
            {
                return Err(error(
                    raw_principal.token_sha256.as_ref().map(Spanned::span),
                    format!("principal `{name}` has the same token as `{}`: give each principal its own token", twin.name),
                ));
            }
            let workspace = raw_principal.workspace.get_ref();
            if !workspaces.contains_key(workspace) {
                return Err(error(
                    Some(raw_principal.workspace.span()),
                    format!(
                        "principal `{name}`: there is no workspace `{workspace}`; the [workspaces] table has {}",
                        names(workspaces.keys().map(String::as_str))
                    ),
                ));
            }
            let role = raw_principal.role.get_ref();
            if role.is_empty() {
                return Err(error(
                    Some(raw_principal.role.span()),
                    format!("principal `{name}` has an empty role: name a role of the policy"),
                ));
            }
            principals.push(Principal {
                name: name.clone(),
                token_sha256,
                workspace: workspace.clone(),
                role: role.clone(),
                owner: raw_principal.owner.as_ref().map(|owner| owner.get_ref().clone()),
                task: raw_principal.task.as_ref().map(|task| task.get_ref().clone()),
                line,
            });
        }
        let anonymous = match &raw.anonymous {
            Some(anonymous) => {
                let principal = principals.iter().find(|principal| &principal.name == anonymous.get_ref()).ok_or_else(|| {
                    error(
                        Some(anonymous.span()),
                        format!("`anonymous = {:?}` names no principal: name one defined below", anonymous.get_ref()),
                    )
                })?;
                Some(principal.name.clone())
            }
            None => None,
        };
        for principal in &principals {
            if principal.token_sha256.is_none() && anonymous.as_deref() != Some(principal.name.as_str()) {
                return Err(error(
                    Some(line_span(text, principal.line)),
                    format!(
                        "principal `{}` has no `token_sha256`: give it one (`toolcell token` prints a token and its hash), or make it the `anonymous` principal",
                        principal.name
                    ),
                ));
            }
        }
        let metrics_token_sha256 = match &raw.metrics_token_sha256 {
            Some(hash) => {
                let parsed = parse_hash(hash.get_ref()).ok_or_else(|| {
                    error(
                        Some(hash.span()),
                        "`metrics_token_sha256` must be 64 lowercase hex digits: `toolcell token` prints a token and its hash".to_owned(),
                    )
                })?;
                if let Some(twin) = principals.iter().find(|principal| principal.token_sha256 == Some(parsed)) {
                    return Err(error(
                        Some(hash.span()),
                        format!("`metrics_token_sha256` is the token of principal `{}`: give /metrics a token of its own", twin.name),
                    ));
                }
                Some(parsed)
            }
            None => None,
        };
        let oauth = raw.oauth.as_ref().map(|oauth| oauth::parse_oauth(oauth, &workspaces, &error)).transpose()?;
        if principals.is_empty() && oauth.is_none() {
            return Err(error(
                None,
                "no [[principals]] and no [oauth]: define a principal, with a `token_sha256` from `toolcell token`, or an [oauth] issuer"
                    .to_owned(),
            ));
        }
        Ok(ServiceConfig {
            file: file.to_owned(),
            listen,
            allowed_hosts: raw.allowed_hosts.iter().map(|host| host.get_ref().clone()).collect(),
            allowed_origins: raw.allowed_origins.iter().map(|origin| origin.get_ref().clone()).collect(),
            max_request_bytes,
            session_idle,
            request_body_timeout,
            bounds,
            workspaces,
            principals,
            anonymous,
            store: raw.store.and_then(|store| store.url),
            store_answer_timeout,
            oauth,
            metrics_token_sha256,
            shutdown_grace,
        })
    }

    /// The principal whose token hashes to `hash`.
    pub fn principal_for(&self, hash: &[u8; 32]) -> Option<&Principal> {
        self.principals.iter().find(|principal| principal.token_sha256.as_ref() == Some(hash))
    }
}

/// The bounds of `raw`, each within its range, the per-principal ones below the service-wide
/// ones; `error` makes the error of a value's span.
fn parse_bounds(
    raw: &RawConfig,
    principals: usize,
    error: &impl Fn(Option<std::ops::Range<usize>>, String) -> ConfigError,
) -> Result<Bounds, ConfigError> {
    // A count setting: `key`'s value within `range`, else `default`.
    let count = |key: &str, value: &Option<Spanned<i64>>, range: std::ops::RangeInclusive<usize>, why: &str, default: usize| {
        let Some(value) = value else {
            return Ok(default);
        };
        match usize::try_from(*value.get_ref()) {
            Ok(count) if range.contains(&count) => Ok(count),
            _ => Err(error(
                Some(value.span()),
                format!("`{key} = {}` is out of range: give between {} and {}{why}", value.get_ref(), range.start(), range.end()),
            )),
        }
    };
    let instances = toolcell_host::MAX_LIVE_INSTANCES;
    let strictly = principals > 1;
    // A per-principal bound left out is the default, kept below the shared bound it is part of.
    let below = |default: usize, large: usize, strict: bool| default.min(large - usize::from(strict)).max(1);
    let max_connections = count("max_connections", &raw.max_connections, 2..=65536, "", DEFAULT_BOUNDS.max_connections)?;
    let max_requests_per_principal =
        count("max_requests_per_principal", &raw.max_requests_per_principal, 1..=1024, "", DEFAULT_BOUNDS.max_requests_per_principal)?;
    let instances_why = " (the instances the runtime holds at once)";
    let max_calls = count("max_calls", &raw.max_calls, 1..=instances, instances_why, DEFAULT_BOUNDS.max_calls)?;
    let bounds = Bounds {
        max_connections,
        max_connections_per_principal: count(
            "max_connections_per_principal",
            &raw.max_connections_per_principal,
            1..=65536,
            "",
            below(DEFAULT_BOUNDS.max_connections_per_principal, max_connections, strictly),
        )?,
        max_requests_per_principal,
        max_streams_per_principal: count(
            "max_streams_per_principal",
            &raw.max_streams_per_principal,
            1..=1024,
            "",
            below(DEFAULT_BOUNDS.max_streams_per_principal, max_requests_per_principal, true),
        )?,
        max_sessions_per_principal: count(
            "max_sessions_per_principal",
            &raw.max_sessions_per_principal,
            1..=65536,
            "",
            DEFAULT_BOUNDS.max_sessions_per_principal,
        )?,
        max_calls,
        max_calls_per_principal: count(
            "max_calls_per_principal",
            &raw.max_calls_per_principal,
            1..=instances,
            instances_why,
            below(DEFAULT_BOUNDS.max_calls_per_principal, max_calls, strictly),
        )?,
    };
    // Each pair: the smaller must stay below the larger, or (for the shared bounds, with more
    // than one principal) one principal could take it all.
    let pairs = [
        (
            ("max_streams_per_principal", &raw.max_streams_per_principal, bounds.max_streams_per_principal),
            ("max_requests_per_principal", &raw.max_requests_per_principal, bounds.max_requests_per_principal),
            true,
            "a principal with every stream open must still be able to cancel a call or end a session",
        ),
        (
            ("max_connections_per_principal", &raw.max_connections_per_principal, bounds.max_connections_per_principal),
            ("max_connections", &raw.max_connections, bounds.max_connections),
            strictly,
            "one principal must not be able to hold every connection",
        ),
        (
            ("max_calls_per_principal", &raw.max_calls_per_principal, bounds.max_calls_per_principal),
            ("max_calls", &raw.max_calls, bounds.max_calls),
            strictly,
            "one principal must not be able to hold every call slot",
        ),
    ];
    for ((small, small_value, small_count), (large, large_value, large_count), strict, why) in pairs {
        let over = if strict { small_count >= large_count } else { small_count > large_count };
        if over {
            let span = small_value.as_ref().or(large_value.as_ref()).map(Spanned::span);
            let relation = if strict { "below" } else { "at most" };
            return Err(error(
                span,
                format!(
                    "`{small} = {small_count}` must be {relation} `{large} = {large_count}` ({why}): lower `{small}` or raise `{large}`"
                ),
            ));
        }
    }
    Ok(bounds)
}

/// SHA-256 of a bearer token, as the configuration stores it.
pub fn token_hash(token: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn parse_hash(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)) {
        return None;
    }
    let mut hash = [0u8; 32];
    for (index, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(hash)
}

fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
        && !name.starts_with('.');
    if valid { Ok(()) } else { Err(format!("{name:?} is not a name: use 1 to 64 of A-Z a-z 0-9 - _ . (not starting with a dot)")) }
}

fn names<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let listed: Vec<String> = names.map(|name| format!("`{name}`")).collect();
    if listed.is_empty() { "none".to_owned() } else { listed.join(", ") }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The byte range of 1-based `line` (for an error that points at a whole table).
fn line_span(text: &str, line: usize) -> std::ops::Range<usize> {
    let start = text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
    start..start
}

#[cfg(test)]
mod tests;

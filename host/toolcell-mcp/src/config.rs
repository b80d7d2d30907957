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

/// Requests larger than this are refused unless the configuration says otherwise.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// An MCP session idle this long ends (its locks then expire on their own leases).
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);
/// How long a client has to send a request's whole body, unless the configuration says.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests one principal may have in flight at once, unless the configuration says.
pub const DEFAULT_MAX_REQUESTS_PER_PRINCIPAL: usize = 64;

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
    /// Requests one principal may have in flight at once (`max_requests_per_principal`): one
    /// token cannot take every connection the service has.
    pub max_requests_per_principal: usize,
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
    max_requests_per_principal: Option<Spanned<i64>>,
    anonymous: Option<Spanned<String>>,
    workspaces: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    principals: Vec<Spanned<RawPrincipal>>,
    store: Option<RawStore>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    url: String,
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
        let max_requests_per_principal = match &raw.max_requests_per_principal {
            Some(count) => match usize::try_from(*count.get_ref()) {
                Ok(value) if (1..=1024).contains(&value) => value,
                _ => {
                    return Err(error(
                        Some(count.span()),
                        format!("`max_requests_per_principal = {}` is out of range: give between 1 and 1024", count.get_ref()),
                    ));
                }
            },
            None => DEFAULT_MAX_REQUESTS_PER_PRINCIPAL,
        };
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
        if principals.is_empty() {
            return Err(error(None, "no [[principals]]: define at least one, with a `token_sha256` from `toolcell token`".to_owned()));
        }
        Ok(ServiceConfig {
            file: file.to_owned(),
            listen,
            allowed_hosts: raw.allowed_hosts.iter().map(|host| host.get_ref().clone()).collect(),
            allowed_origins: raw.allowed_origins.iter().map(|origin| origin.get_ref().clone()).collect(),
            max_request_bytes,
            session_idle,
            request_body_timeout,
            max_requests_per_principal,
            workspaces,
            principals,
            anonymous,
            store: raw.store.map(|store| store.url),
        })
    }

    /// The principal whose token hashes to `hash`.
    pub fn principal_for(&self, hash: &[u8; 32]) -> Option<&Principal> {
        self.principals.iter().find(|principal| principal.token_sha256.as_ref() == Some(hash))
    }
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
mod tests {
    use super::*;

    const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    fn parse(text: &str) -> Result<ServiceConfig, ConfigError> {
        ServiceConfig::parse("service.toml", text, Path::new("/etc/toolcell"))
    }

    fn valid() -> String {
        format!(
            "listen = \"127.0.0.1:8750\"\nsession_idle = \"5m\"\n\n[workspaces]\napp = \"repos/app\"\n\n[[principals]]\nname = \"alice\"\ntoken_sha256 = \"{HASH}\"\nworkspace = \"app\"\nrole = \"impl\"\n"
        )
    }

    #[test]
    fn a_store_section_names_the_shared_store() {
        assert_eq!(parse(&valid()).expect("valid").store, None);
        let config = parse(&format!("{}\n[store]\nurl = \"postgres://toolcell@db/toolcell\"\n", valid())).expect("valid");
        assert_eq!(config.store.as_deref(), Some("postgres://toolcell@db/toolcell"));
        let error = parse(&format!("{}\n[store]\nuri = \"postgres://db\"\n", valid())).expect_err("unknown key");
        assert!(error.to_string().contains("uri"), "{error}");
    }

    #[test]
    fn a_valid_configuration_maps_token_hashes_to_principals() {
        let config = parse(&valid()).expect("valid");
        assert_eq!(config.listen, Some("127.0.0.1:8750".parse().expect("address")));
        assert_eq!(config.session_idle, Duration::from_secs(300));
        assert_eq!(config.workspaces["app"], Path::new("/etc/toolcell/repos/app"));
        let alice = config.principal_for(&token_hash("test")).expect("sha256(\"test\") is alice's");
        assert_eq!((alice.name.as_str(), alice.role.as_str(), alice.line), ("alice", "impl", 7));
        assert!(config.principal_for(&token_hash("other")).is_none());
        assert_eq!(config.max_request_bytes, DEFAULT_MAX_REQUEST_BYTES);
        assert_eq!(
            (config.request_body_timeout, config.max_requests_per_principal),
            (DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_REQUESTS_PER_PRINCIPAL)
        );
    }

    #[test]
    fn mistakes_are_reported_with_their_line_and_what_to_do() {
        let cases = [
            (valid().replace("8750\"", "x\""), 1, "not an address"),
            (valid().replace("5m", "soon"), 2, "not a duration"),
            (valid().replace(HASH, "ABC"), 9, "64 lowercase hex digits"),
            (
                valid().replace("workspace = \"app\"", "workspace = \"web\""),
                10,
                "there is no workspace `web`; the [workspaces] table has `app`",
            ),
            (valid().replace("name = \"alice\"", "name = \"a b\""), 8, "principal name"),
            (valid().replace("role = \"impl\"", "role = \"impl\"\nrank = 1"), 12, "unknown field `rank`"),
            (valid().replace(&format!("token_sha256 = \"{HASH}\"\n"), ""), 7, "has no `token_sha256`"),
            (
                format!("{}\n[[principals]]\nname = \"bob\"\ntoken_sha256 = \"{HASH}\"\nworkspace = \"app\"\nrole = \"impl\"\n", valid()),
                15,
                "same token as `alice`",
            ),
            (format!("anonymous = \"nobody\"\n{}", valid()), 1, "names no principal"),
            (format!("allowed_origins = [\"localhost\"]\n{}", valid()), 1, "has no scheme"),
            (
                format!("request_body_timeout = \"0s\"\n{}", valid()),
                1,
                "`request_body_timeout = \"0s\"` is not a duration between 1s and 1h",
            ),
            (format!("max_requests_per_principal = 0\n{}", valid()), 1, "`max_requests_per_principal = 0` is out of range"),
        ];
        for (text, line, reason) in cases {
            let error = parse(&text).expect_err(reason);
            assert_eq!(error.line, Some(line), "{reason}: {error}");
            assert!(error.reason.contains(reason), "{reason}: {error}");
            assert!(error.to_string().starts_with(&format!("service.toml line {line}: ")), "{error}");
        }
    }

    #[test]
    fn an_anonymous_principal_needs_no_token() {
        let text = valid().replace(&format!("token_sha256 = \"{HASH}\"\n"), "");
        let config = parse(&format!("anonymous = \"alice\"\n{text}")).expect("anonymous");
        assert_eq!(config.anonymous.as_deref(), Some("alice"));
        assert_eq!(config.principals[0].token_sha256, None);
    }
}

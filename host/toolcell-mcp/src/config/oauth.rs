//! `[oauth]` in the service configuration: `serve` as an OAuth 2.1 resource server, taking
//! JWT access tokens of one issuer beside (or instead of) the static tokens.
//!
//! ```toml
//! [oauth]
//! issuer = "https://id.example.com/realms/dev"   # its JWKS is found by discovery
//! # jwks_uri = "https://id.example.com/keys"     # or given
//! resource = "https://tools.example.com/mcp"     # this server: the `aud` tokens must carry
//! workspace = "app"                              # the workspace token holders work in
//! principal_claim = "sub"                        # the claim naming the principal (default)
//! # role_claim = "toolcell_role"                 # a claim naming the role (else: the scopes)
//! leeway = "30s"                                 # on `exp` and `nbf`
//! jwks_refresh = "5m"                            # keys older than this are fetched again
//! jwks_max_age = "1h"                            # and never used past this
//!
//! [[oauth.roles]]                                # in order: the first whose scope the token has
//! scope = "toolcell:write"
//! role = "impl"
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::ConfigError;

/// A validated `[oauth]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OauthConfig {
    /// The authorization server: the `iss` tokens must carry, and where its keys are found.
    pub issuer: String,
    /// Where the issuer's JWKS is (`None`: found by discovery from the issuer).
    pub jwks_uri: Option<String>,
    /// This server's resource URI (RFC 8707): the `aud` tokens must carry.
    pub resource: String,
    /// The workspace token holders work in.
    pub workspace: String,
    /// The claim naming the principal.
    pub principal_claim: String,
    /// The claim naming the role, if the role does not come from the scopes alone.
    pub role_claim: Option<String>,
    /// The roles, each with the scope that grants it, in order.
    pub roles: Vec<ScopedRole>,
    /// Leeway on `exp` and `nbf`.
    pub leeway: Duration,
    /// Keys older than this are fetched again (on the next token).
    pub jwks_refresh: Duration,
    /// Keys are never used longer than this after they were last fetched.
    pub jwks_max_age: Duration,
}

/// A role and the scope a token must have to act in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedRole {
    /// The scope.
    pub scope: String,
    /// The policy role.
    pub role: String,
}

impl OauthConfig {
    /// The scopes of the roles, space-separated (for `WWW-Authenticate`).
    #[must_use]
    pub fn scopes(&self) -> String {
        self.roles.iter().map(|role| role.scope.as_str()).collect::<Vec<_>>().join(" ")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOauth {
    issuer: Spanned<String>,
    jwks_uri: Option<Spanned<String>>,
    resource: Spanned<String>,
    workspace: Spanned<String>,
    principal_claim: Option<Spanned<String>>,
    role_claim: Option<Spanned<String>>,
    leeway: Option<Spanned<String>>,
    jwks_refresh: Option<Spanned<String>>,
    jwks_max_age: Option<Spanned<String>>,
    #[serde(default)]
    roles: Vec<RawRole>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRole {
    scope: Spanned<String>,
    role: Spanned<String>,
}

/// Whether `url` may be fetched from: `https`, or `http` to a loopback host only (a test's
/// identity provider, a sidecar); the reason if not.
pub fn check_fetchable(url: &str) -> Result<(), String> {
    // Parsed as the HTTP client parses it (WHATWG URL rules), so that the host judged here is
    // the host it connects to (`http://a\\@127.0.0.1/` is `a`, not loopback).
    let parsed = reqwest::Url::parse(url).map_err(|_| format!("`{url}` is not a URL: write e.g. \"https://id.example.com\""))?;
    // `https:///jwks` is read as the host `jwks`; as written it names none.
    if url.split_once("://").is_some_and(|(_, rest)| rest.starts_with(['/', '\\'])) {
        return Err(format!("`{url}` has no host"));
    }
    let loopback = match parsed.host() {
        None => return Err(format!("`{url}` has no host")),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(address)) => address.is_loopback(),
        Some(url::Host::Ipv6(address)) => address.is_loopback(),
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("`{url}` carries credentials in the URL: leave them out"));
    }
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(format!("`{url}` is plain http to a host that is not loopback: use https")),
        _ => Err(format!("`{url}` is not an http(s) URL: write e.g. \"https://id.example.com\"")),
    }
}

/// Validate `raw`; `error` makes the error of a value's span, `workspaces` are the served ones.
pub(super) fn parse_oauth(
    raw: &RawOauth,
    workspaces: &BTreeMap<String, PathBuf>,
    error: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
) -> Result<OauthConfig, ConfigError> {
    let url = |key: &str, value: &Spanned<String>| {
        check_fetchable(value.get_ref()).map_err(|reason| error(Some(value.span()), format!("`oauth.{key}`: {reason}")))?;
        Ok::<_, ConfigError>(value.get_ref().trim_end_matches('/').to_owned())
    };
    let issuer = url("issuer", &raw.issuer)?;
    let jwks_uri = raw.jwks_uri.as_ref().map(|value| url("jwks_uri", value)).transpose()?;
    let resource = raw.resource.get_ref();
    if !(resource.starts_with("https://") || resource.starts_with("http://")) || resource.contains('#') {
        return Err(error(
            Some(raw.resource.span()),
            format!(
                "`oauth.resource = {resource:?}` is not this server's URI: write its https URL without a fragment, e.g. \"https://tools.example.com/mcp\""
            ),
        ));
    }
    let workspace = raw.workspace.get_ref();
    if !workspaces.contains_key(workspace) {
        return Err(error(
            Some(raw.workspace.span()),
            format!("`oauth.workspace = {workspace:?}` is not a workspace of the [workspaces] table: name one of them"),
        ));
    }
    let claim = |key: &str, value: &Spanned<String>| {
        if value.get_ref().is_empty() {
            return Err(error(Some(value.span()), format!("`oauth.{key}` is empty: name a claim of the tokens, e.g. \"sub\"")));
        }
        Ok(value.get_ref().clone())
    };
    let principal_claim =
        raw.principal_claim.as_ref().map(|value| claim("principal_claim", value)).transpose()?.unwrap_or_else(|| "sub".to_owned());
    let role_claim = raw.role_claim.as_ref().map(|value| claim("role_claim", value)).transpose()?;
    let mut roles: Vec<ScopedRole> = Vec::new();
    for role in &raw.roles {
        let (scope, name) = (role.scope.get_ref(), role.role.get_ref());
        if scope.is_empty() || scope.chars().any(|character| character.is_whitespace() || character == '"' || character == '\\') {
            return Err(error(
                Some(role.scope.span()),
                format!("`scope = {scope:?}` is not a scope: give one word without spaces or quotes"),
            ));
        }
        if name.is_empty() {
            return Err(error(Some(role.role.span()), "`role` is empty: name a role of the policy".to_owned()));
        }
        if roles.iter().any(|known| &known.role == name) {
            return Err(error(Some(role.role.span()), format!("role `{name}` is listed twice in [[oauth.roles]]: list each role once")));
        }
        roles.push(ScopedRole { scope: scope.clone(), role: name.clone() });
    }
    if roles.is_empty() {
        return Err(error(
            Some(raw.issuer.span()),
            "[oauth] has no [[oauth.roles]]: list the roles token holders may act in, each with its scope (`scope = \"toolcell:write\"`, `role = \"impl\"`)"
                .to_owned(),
        ));
    }
    let duration = |key: &str, value: &Option<Spanned<String>>, range: std::ops::RangeInclusive<Duration>, bounds: &str, default| {
        let Some(value) = value else { return Ok(default) };
        match humantime::parse_duration(value.get_ref()) {
            Ok(parsed) if range.contains(&parsed) => Ok(parsed),
            _ => Err(error(
                Some(value.span()),
                format!("`oauth.{key} = {:?}` is not a duration between {bounds}: write e.g. \"30s\"", value.get_ref()),
            )),
        }
    };
    let leeway = duration("leeway", &raw.leeway, Duration::ZERO..=Duration::from_secs(300), "0s and 5m", Duration::from_secs(30))?;
    let day = Duration::from_secs(24 * 3600);
    let jwks_refresh = duration("jwks_refresh", &raw.jwks_refresh, Duration::from_secs(1)..=day, "1s and 1d", Duration::from_secs(300))?;
    let jwks_max_age =
        duration("jwks_max_age", &raw.jwks_max_age, Duration::from_secs(1)..=day * 7, "1s and 7d", Duration::from_secs(3600))?;
    if jwks_refresh > jwks_max_age {
        return Err(error(
            raw.jwks_refresh.as_ref().or(raw.jwks_max_age.as_ref()).map(Spanned::span),
            "`oauth.jwks_refresh` is longer than `oauth.jwks_max_age`: keys would expire before they are fetched again; lower `jwks_refresh`"
                .to_owned(),
        ));
    }
    Ok(OauthConfig {
        issuer,
        jwks_uri,
        resource: resource.clone(),
        workspace: workspace.clone(),
        principal_claim,
        role_claim,
        roles,
        leeway,
        jwks_refresh,
        jwks_max_age,
    })
}

#[cfg(test)]
mod tests {
    use super::check_fetchable;

    #[test]
    fn only_https_or_loopback_http_is_fetched() {
        for (url, fetchable) in [
            ("https://id.example.com/realms/x", true),
            ("http://127.0.0.1:8080/", true),
            ("http://localhost:9000/jwks", true),
            ("http://[::1]:80/", true),
            ("http://id.example.com/", false),
            ("http://127.0.0.1.example.com/", false),
            ("ftp://127.0.0.1/", false),
            ("id.example.com", false),
            ("https:///jwks", false),
            // What the HTTP client reads as the host is what is judged.
            ("http://192.0.2.2:18902\\@127.0.0.1/jwks", false),
            ("http://user:pass@127.0.0.1/jwks", false),
            ("http://127.1/jwks", true),
        ] {
            assert_eq!(check_fetchable(url).is_ok(), fetchable, "{url}");
        }
    }
}

//! `serve` as an OAuth 2.1 resource server (the MCP authorization spec): a JWT access token of
//! the configured issuer is checked against the issuer's keys, and its claims name the principal
//! and the role.
//!
//! The keys (the issuer's JWKS, found by discovery or at `jwks_uri`) are fetched once, kept, and
//! fetched again when older than `jwks_refresh` or when a token names a `kid` they do not have
//! (a key rotated in), at most once per [`REFETCH_EVERY`] (or `jwks_refresh`, if shorter) so
//! that tokens with made-up `kid`s cannot make the service hammer the issuer. While the issuer is
//! down, the keys fetched last serve until `jwks_max_age`; after that tokens are refused with
//! `503`. Symmetric keys in a JWKS are never used: a key is RSA, EC or Ed25519, and a token's
//! `alg` must be one of that key's own algorithms (no `none`, no HMAC keyed with a public key).
//!
//! A token is checked for its signature, `iss` (the issuer), `aud` (this server's resource URI,
//! RFC 8707), `exp` and `nbf` (with `leeway`). Nothing here logs or forwards a token.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};
use serde_json::{Map, Value, json};

use crate::config::{OauthConfig, check_fetchable};

/// Keys are fetched again for an unknown `kid` at most this often.
pub const REFETCH_EVERY: Duration = Duration::from_secs(10);
/// How long one fetch from the issuer may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest JWKS or discovery document read.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// Who a valid token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The principal, from the principal claim (as is when it is a name; else `sub-` and a
    /// hash of it).
    pub principal: String,
    /// The role, from the role claim or the token's scopes.
    pub role: String,
}

/// Why a token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// `401 invalid_token`: not a token of the issuer for this server, or no longer valid.
    #[error("{0}")]
    Invalid(String),
    /// `403 insufficient_scope`: a valid token without the scope of a role.
    #[error("{reason}")]
    InsufficientScope {
        /// What is missing.
        reason: String,
        /// The scopes that would do, space-separated.
        scope: String,
    },
    /// `503`: the issuer's keys cannot be fetched and none fetched before are still valid.
    #[error("{0}")]
    Unavailable(String),
}

/// One of the issuer's keys, with the algorithms it may verify.
struct Key {
    decoding: DecodingKey,
    algorithms: Vec<Algorithm>,
    /// `RSA`, `EC` or `OKP`, for messages.
    family: &'static str,
}

#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, Arc<Key>>,
    /// When the keys were last fetched.
    fetched: Option<Instant>,
    /// When a fetch was last tried.
    tried: Option<Instant>,
    /// The JWKS address found by discovery.
    discovered: Option<String>,
}

/// Checks access tokens against the configured issuer.
pub struct Verifier {
    config: OauthConfig,
    client: reqwest::Client,
    keys: tokio::sync::Mutex<Keys>,
    /// Held while the keys are fetched: a token whose key is not known yet waits for a fetch
    /// in flight; one whose key is known never does.
    fetching: tokio::sync::Mutex<()>,
    /// Where failed fetches are told (the operator's log).
    report: Box<dyn Fn(&str) + Send + Sync>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Verifier").field("issuer", &self.config.issuer).finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier for `config`, telling failed fetches to `report`.
    ///
    /// # Errors
    ///
    /// A message if the HTTP client cannot be built (no TLS backend).
    pub fn new(config: OauthConfig, report: impl Fn(&str) + Send + Sync + 'static) -> Result<Verifier, String> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|error| format!("no HTTP client for the OAuth issuer: {error}"))?;
        Ok(Verifier {
            config,
            client,
            keys: tokio::sync::Mutex::new(Keys::default()),
            fetching: tokio::sync::Mutex::new(()),
            report: Box::new(report),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OauthConfig {
        &self.config
    }

    /// RFC 9728 protected resource metadata.
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.config.resource,
            "authorization_servers": [self.config.issuer],
            "scopes_supported": self.config.roles.iter().map(|role| role.scope.as_str()).collect::<Vec<_>>(),
            "bearer_methods_supported": ["header"],
            "resource_name": "toolcell",
        })
    }

    /// Where the metadata is served: the resource's origin, the well-known path, then the
    /// resource's path (RFC 9728 section 3.1).
    pub fn metadata_url(&self) -> String {
        let resource = &self.config.resource;
        let after_scheme = resource.find("://").map_or(0, |at| at + 3);
        let (origin, path) = match resource[after_scheme..].find('/') {
            Some(slash) => resource.split_at(after_scheme + slash),
            None => (resource.as_str(), ""),
        };
        let path = path.split('?').next().unwrap_or_default().trim_end_matches('/');
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// Fetch the keys now (at start-up, so that the first token does not wait).
    pub async fn prefetch(&self) {
        let _ = self.key_for("").await;
    }

    /// Who `token` stands for.
    ///
    /// # Errors
    ///
    /// [`Rejection`] saying why the token is refused, never quoting it.
    pub async fn verify(&self, token: &str) -> Result<Grant, Rejection> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            Rejection::Invalid(match unaccepted_algorithm(token) {
                // A known algorithm: the header holds something else the library refuses.
                Some(algorithm) if algorithm.parse::<Algorithm>().is_ok() => {
                    "the token's header has a field this server does not accept (a duplicate, `crit`, or one it does not know)".to_owned()
                }
                // `none`, or one the library does not know: either way, nothing it could check.
                Some(algorithm) => format!("the token's `alg` {algorithm:?} is not a signature algorithm this server accepts"),
                None => "the bearer token is neither a token of this service nor a JWT".to_owned(),
            })
        })?;
        let kid = header
            .kid
            .as_deref()
            .ok_or_else(|| Rejection::Invalid("the token has no `kid`: its issuer must name the key that signed it".to_owned()))?;
        let key = self.key_for(kid).await?;
        if !key.algorithms.contains(&header.alg) {
            return Err(Rejection::Invalid(format!(
                "the token's `alg` {:?} does not fit key `{}` (an {} key)",
                header.alg,
                shown(kid),
                key.family
            )));
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims =
            jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation).map_err(|error| self.explain(error.kind()))?;
        let claims = claims.claims;
        let principal = match claims.get(&self.config.principal_claim) {
            Some(Value::String(name)) if !name.is_empty() => principal_name(name),
            _ => return Err(Rejection::Invalid(format!("the token has no `{}` claim to name its principal", self.config.principal_claim))),
        };
        let role = self.role(&claims)?;
        Ok(Grant { principal, role })
    }

    /// The role `claims` may act in.
    fn role(&self, claims: &Map<String, Value>) -> Result<String, Rejection> {
        let scopes = scopes(claims);
        match &self.config.role_claim {
            Some(claim) => {
                let Some(Value::String(wanted)) = claims.get(claim) else {
                    return Err(Rejection::Invalid(format!("the token has no `{claim}` claim to name its role")));
                };
                let Some(role) = self.config.roles.iter().find(|role| &role.role == wanted) else {
                    return Err(Rejection::InsufficientScope {
                        reason: format!("the token's role `{wanted}` is not one this server grants"),
                        scope: self.config.scopes(),
                    });
                };
                if !scopes.contains(&role.scope.as_str()) {
                    return Err(Rejection::InsufficientScope {
                        reason: format!("role `{wanted}` needs scope `{}`, which the token does not have", role.scope),
                        scope: role.scope.clone(),
                    });
                }
                Ok(role.role.clone())
            }
            None => {
                self.config.roles.iter().find(|role| scopes.contains(&role.scope.as_str())).map(|role| role.role.clone()).ok_or_else(|| {
                    Rejection::InsufficientScope {
                        reason: format!("the token has none of the scopes this server grants a role for: {}", self.config.scopes()),
                        scope: self.config.scopes(),
                    }
                })
            }
        }
    }

    fn explain(&self, kind: &ErrorKind) -> Rejection {
        let reason = match kind {
            ErrorKind::ExpiredSignature => "the token has expired: get a new one".to_owned(),
            ErrorKind::ImmatureSignature => "the token is not valid yet (`nbf`)".to_owned(),
            ErrorKind::InvalidAudience => format!("the token is not for this server: its `aud` must be `{}`", self.config.resource),
            ErrorKind::InvalidIssuer => format!("the token is not from this server's issuer `{}`", self.config.issuer),
            ErrorKind::InvalidSignature => "the token's signature does not verify".to_owned(),
            ErrorKind::MissingRequiredClaim(claim) => format!("the token has no `{claim}` claim"),
            ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => "the token's `alg` does not fit its key".to_owned(),
            _ => "the token is malformed".to_owned(),
        };
        Rejection::Invalid(reason)
    }

    /// The key `kid`, fetching the keys again if they are old or do not have it. The lock is
    /// not held while the issuer is asked: a slow issuer delays only the token that needed a
    /// fetch, never the tokens whose keys are known.
    async fn key_for(&self, kid: &str) -> Result<Arc<Key>, Rejection> {
        let now = Instant::now();
        let (discovered, wait) = {
            let mut keys = self.keys.lock().await;
            let stale = keys.fetched.is_none_or(|fetched| now.duration_since(fetched) >= self.config.jwks_refresh);
            let unknown = !keys.by_kid.contains_key(kid);
            let every = REFETCH_EVERY.min(self.config.jwks_refresh);
            let may_fetch = keys.tried.is_none_or(|tried| now.duration_since(tried) >= every);
            if (stale || unknown) && may_fetch {
                keys.tried = Some(now);
                (Some(keys.discovered.clone()), false)
            } else {
                (None, unknown)
            }
        };
        if wait {
            // Another request is fetching (or just did): its keys may hold this one.
            drop(self.fetching.lock().await);
        }
        if let Some(discovered) = discovered {
            let _fetching = self.fetching.lock().await;
            match self.fetch(discovered).await {
                Ok((fetched, discovered)) => {
                    let mut keys = self.keys.lock().await;
                    keys.by_kid = fetched;
                    keys.discovered = discovered;
                    keys.fetched = Some(Instant::now());
                }
                Err(reason) => (self.report)(&format!("the keys of OAuth issuer `{}` cannot be fetched: {reason}", self.config.issuer)),
            }
        }
        let keys = self.keys.lock().await;
        if keys.fetched.is_none_or(|fetched| now.duration_since(fetched) > self.config.jwks_max_age) {
            return Err(Rejection::Unavailable(format!(
                "the keys of issuer `{}` cannot be fetched (none fetched within `jwks_max_age`): try again later",
                self.config.issuer
            )));
        }
        keys.by_kid
            .get(kid)
            .cloned()
            .ok_or_else(|| Rejection::Invalid(format!("the token's key `{}` is not one of the issuer's keys", shown(kid))))
    }

    /// The issuer's keys, by `kid`.
    /// With the `jwks_uri` discovered before, if any; returns it (discovered now if need be).
    async fn fetch(&self, discovered: Option<String>) -> Result<(HashMap<String, Arc<Key>>, Option<String>), String> {
        let (jwks_uri, discovered) = match (&self.config.jwks_uri, discovered) {
            (Some(uri), discovered) => (uri.clone(), discovered),
            (None, Some(uri)) => (uri.clone(), Some(uri)),
            (None, None) => {
                let found = self.discover().await?;
                (found.clone(), Some(found))
            }
        };
        let set = self.get_json(&jwks_uri).await?;
        let listed = set.get("keys").and_then(Value::as_array).ok_or_else(|| format!("`{jwks_uri}` is not a JWKS (no `keys` array)"))?;
        let by_kid: HashMap<String, Arc<Key>> =
            listed.iter().filter_map(|jwk| serde_json::from_value::<Jwk>(jwk.clone()).ok()).filter_map(|jwk| key_of(&jwk)).collect();
        if by_kid.is_empty() {
            return Err(format!("`{jwks_uri}` has no signature key with a `kid` (RSA of 2048 bits or more, EC or Ed25519)"));
        }
        Ok((by_kid, discovered))
    }

    /// The issuer's `jwks_uri`, from its RFC 8414 metadata, else its OpenID configuration.
    async fn discover(&self) -> Result<String, String> {
        let issuer = self.config.issuer.trim_end_matches('/');
        let after_scheme = issuer.find("://").map_or(0, |at| at + 3);
        let (origin, path) = issuer[after_scheme..].find('/').map_or((issuer, ""), |slash| issuer.split_at(after_scheme + slash));
        let mut failures = Vec::new();
        for url in [format!("{origin}/.well-known/oauth-authorization-server{path}"), format!("{issuer}/.well-known/openid-configuration")]
        {
            match self.get_json(&url).await {
                Ok(document) => {
                    if document.get("issuer").and_then(Value::as_str) != Some(self.config.issuer.as_str()) {
                        failures.push(format!("`{url}` is the metadata of another issuer"));
                        continue;
                    }
                    let uri = document.get("jwks_uri").and_then(Value::as_str).ok_or_else(|| format!("`{url}` names no `jwks_uri`"))?;
                    check_fetchable(uri)?;
                    return Ok(uri.to_owned());
                }
                Err(reason) => failures.push(reason),
            }
        }
        Err(format!("{}; or set `oauth.jwks_uri`", failures.join("; ")))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let response = self.client.get(url).header("accept", "application/json").send().await.map_err(|error| {
            let kind = if error.is_timeout() {
                "timed out"
            } else if error.is_connect() {
                "cannot connect"
            } else {
                "failed"
            };
            format!("`{url}`: {kind}")
        })?;
        if !response.status().is_success() {
            return Err(format!("`{url}` answered {}", response.status()));
        }
        let over = || format!("`{url}` is over {MAX_DOCUMENT_BYTES} bytes");
        if response.content_length().is_some_and(|length| length > MAX_DOCUMENT_BYTES as u64) {
            return Err(over());
        }
        // Read as it arrives, and no further than the cap: a body that never ends costs no more.
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|_| format!("`{url}`: the body was cut off"))? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(over());
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|_| format!("`{url}` is not JSON"))
    }
}

/// A signature key of a JWKS with its `kid`; `None` for an encryption key, a symmetric key (a
/// JWKS is public: an HMAC key in it is no secret), a key without `kid` or one that does not
/// parse.
fn key_of(jwk: &Jwk) -> Option<(String, Arc<Key>)> {
    let kid = jwk.common.key_id.clone()?;
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))) {
        return None;
    }
    let (family, algorithms) = match &jwk.algorithm {
        AlgorithmParameters::RSA(parameters) => {
            // A modulus under 2048 bits can be factored: such a key vouches for nothing.
            if rsa_bits(&parameters.n)? < 2048 {
                return None;
            }
            ("RSA", vec![Algorithm::RS256, Algorithm::RS384, Algorithm::RS512, Algorithm::PS256, Algorithm::PS384, Algorithm::PS512])
        }
        AlgorithmParameters::EllipticCurve(parameters) => match parameters.curve {
            EllipticCurve::P256 => ("EC", vec![Algorithm::ES256]),
            EllipticCurve::P384 => ("EC", vec![Algorithm::ES384]),
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(parameters) if parameters.curve == EllipticCurve::Ed25519 => ("OKP", vec![Algorithm::EdDSA]),
        AlgorithmParameters::OctetKeyPair(_) | AlgorithmParameters::OctetKey(_) => return None,
    };
    // A key that names its algorithm verifies that one only.
    let algorithms = match jwk.common.key_algorithm {
        Some(named) => {
            let named: Algorithm = named.to_string().parse().ok()?;
            algorithms.into_iter().filter(|algorithm| *algorithm == named).collect()
        }
        None => algorithms,
    };
    if algorithms.is_empty() {
        return None;
    }
    let decoding = DecodingKey::from_jwk(jwk).ok()?;
    Some((kid, Arc::new(Key { decoding, algorithms, family })))
}

/// The bits of an RSA modulus given as base64url (its leading zero bytes not counted).
fn rsa_bits(modulus: &str) -> Option<usize> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(modulus.trim_end_matches('=')).ok()?;
    let significant = bytes.iter().skip_while(|byte| **byte == 0).count();
    let top = bytes.iter().find(|byte| **byte != 0).map_or(0, |byte| 8 - byte.leading_zeros() as usize);
    Some(significant.saturating_sub(1) * 8 + top)
}

/// A value a caller sent (a `kid`), as messages and logs show it: escaped, at most 64
/// characters.
fn shown(value: &str) -> String {
    let escaped: String = value.escape_default().take(64).collect();
    if value.escape_default().count() > 64 { format!("{escaped}…") } else { escaped }
}

/// The `alg` a JWT's header names, if it has one (for the message refusing it).
fn unaccepted_algorithm(token: &str) -> Option<String> {
    use base64::Engine as _;
    let header = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header.trim_end_matches('=')).ok()?;
    let header: Value = serde_json::from_slice(&bytes).ok()?;
    let algorithm: String = header.get("alg")?.as_str()?.chars().filter(char::is_ascii_graphic).take(16).collect();
    Some(algorithm)
}

/// The scopes of a token: `scope` (space-separated), or `scp` (a list or a string).
fn scopes(claims: &Map<String, Value>) -> Vec<&str> {
    match claims.get("scope").or_else(|| claims.get("scp")) {
        Some(Value::String(scopes)) => scopes.split_whitespace().collect(),
        Some(Value::Array(scopes)) => scopes.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The principal named `claim`, in a namespace of its own: `oauth:` and the claim if it is a
/// name (1 to 64 of `A-Z a-z 0-9 - _ . @`, not starting with a dot), else `oauth#` and the first
/// 16 hex digits of its SHA-256. No configured principal's name has a `:` or `#`, and no claim
/// can spell a hashed name, so a token can never stand for a configured principal (even one
/// removed at a reload, whose sessions may still be open) or for another subject.
fn principal_name(claim: &str) -> String {
    let is_name = claim.len() <= 64
        && !claim.starts_with('.')
        && claim.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'@'));
    if is_name { format!("oauth:{claim}") } else { format!("oauth#{}", &crate::config::hex(&crate::config::token_hash(claim))[..16]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_that_is_not_a_name_becomes_a_hash() {
        assert_eq!(principal_name("alice@example.com"), "oauth:alice@example.com");
        assert_eq!(principal_name("auth0|1234"), format!("oauth#{}", &crate::config::hex(&crate::config::token_hash("auth0|1234"))[..16]));
        assert!(principal_name(".hidden").starts_with("oauth#"));
        // A claim that spells a hashed name stays a name, in the other form.
        let hashed = principal_name("auth0|1234");
        assert_ne!(principal_name(&hashed), hashed);
        assert_eq!(principal_name("alice"), "oauth:alice");
        assert_eq!(rsa_bits("AQAB"), Some(17));
        assert_eq!(shown("a\nb"), "a\\nb");
        assert!(shown(&"k".repeat(100)).ends_with('…'));
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let claims = |value: Value| value.as_object().cloned().unwrap_or_default();
        assert_eq!(scopes(&claims(json!({"scope": "a b  c"}))), ["a", "b", "c"]);
        assert_eq!(scopes(&claims(json!({"scp": ["a", "b"]}))), ["a", "b"]);
        assert!(scopes(&claims(json!({"scope": 3}))).is_empty());
    }
}

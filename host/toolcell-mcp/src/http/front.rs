//! The front door's authentication: a static token (by its SHA-256), or an OAuth access token
//! of the configured issuer (see [`crate::oauth`]), or none for the anonymous principal; and
//! what a refused request is answered (`401` / `403` / `503` with `WWW-Authenticate`).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};

use super::{Answer, Service, plain};
use crate::config::{Principal, token_hash};
use crate::oauth::Rejection;
use crate::operator::Event;

/// Why the front door refused a request.
#[derive(Debug)]
pub(super) struct Denied {
    status: StatusCode,
    /// What the client is told (never the token).
    reason: String,
    /// The OAuth `error` of `WWW-Authenticate`, if any.
    error: Option<&'static str>,
    /// The scopes that would do, for `WWW-Authenticate`.
    scope: Option<String>,
}

impl Denied {
    fn unauthorized(reason: impl Into<String>) -> Denied {
        Denied { status: StatusCode::UNAUTHORIZED, reason: reason.into(), error: None, scope: None }
    }

    /// What the operator's log is told.
    pub(super) fn event(&self) -> Event {
        match self.status {
            StatusCode::FORBIDDEN => Event::Forbidden,
            StatusCode::SERVICE_UNAVAILABLE => Event::Unavailable,
            _ => Event::Unauthorized,
        }
    }

    pub(super) fn status(&self) -> StatusCode {
        self.status
    }

    pub(super) fn reason(&self) -> &str {
        &self.reason
    }
}

impl Service {
    /// Who presents `headers`' bearer token, or the anonymous principal without one.
    pub(super) async fn authorize(&self, headers: &http::HeaderMap) -> Result<Arc<Principal>, Denied> {
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return self.roster().anonymous.clone().ok_or_else(|| Denied::unauthorized("a bearer token this service knows is required"));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| Denied::unauthorized("the Authorization header is not `Bearer TOKEN`"))?;
        let roster = self.roster();
        if let Some(principal) = roster.by_token.get(&token_hash(token)) {
            return Ok(Arc::clone(principal));
        }
        let Some(verifier) = &self.oauth else {
            return Err(Denied::unauthorized("a bearer token this service knows is required"));
        };
        let grant = verifier.verify(token).await.map_err(|rejection| match rejection {
            Rejection::Invalid(reason) => Denied { status: StatusCode::UNAUTHORIZED, reason, error: Some("invalid_token"), scope: None },
            Rejection::InsufficientScope { reason, scope } => {
                Denied { status: StatusCode::FORBIDDEN, reason, error: Some("insufficient_scope"), scope: Some(scope) }
            }
            Rejection::Unavailable(reason) => Denied { status: StatusCode::SERVICE_UNAVAILABLE, reason, error: None, scope: None },
        })?;
        if roster.by_name.contains_key(&grant.principal) {
            // A token must not act as a principal of the configuration, whose sessions and
            // bounds are its own.
            return Err(Denied {
                status: StatusCode::FORBIDDEN,
                reason: format!(
                    "the token's principal `{}` is the name of a principal of the service's configuration; the operator must rename one",
                    grant.principal
                ),
                error: None,
                scope: None,
            });
        }
        let config = verifier.config();
        Ok(Arc::new(Principal {
            name: grant.principal,
            token_sha256: None,
            workspace: config.workspace.clone(),
            role: grant.role,
            owner: None,
            task: None,
            line: 0,
        }))
    }

    /// The answer to a refused request: its status, the reason, and `WWW-Authenticate` (with
    /// the resource metadata and the scopes when the service takes OAuth tokens).
    pub(super) fn denied(&self, denied: &Denied) -> Answer {
        let mut response = plain(denied.status, denied.reason.clone());
        let challenge = match &self.oauth {
            None => "Bearer realm=\"toolcell\"".to_owned(),
            Some(verifier) => {
                let mut challenge = String::from("Bearer");
                let mut parameters = Vec::new();
                if let Some(error) = denied.error {
                    parameters.push(format!("error=\"{error}\""));
                    parameters.push(format!("error_description=\"{}\"", quoted(&denied.reason)));
                }
                parameters.push(format!("resource_metadata=\"{}\"", quoted(&verifier.metadata_url())));
                parameters.push(format!("scope=\"{}\"", quoted(denied.scope.as_deref().unwrap_or(&verifier.config().scopes()))));
                challenge.push(' ');
                challenge.push_str(&parameters.join(", "));
                challenge
            }
        };
        if denied.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from_static("5"));
        } else if let Ok(value) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(http::header::WWW_AUTHENTICATE, value);
        }
        response
    }

    /// `GET /.well-known/oauth-protected-resource[/PATH]`: RFC 9728 metadata (404 without
    /// `[oauth]`).
    pub(super) fn resource_metadata(&self) -> Answer {
        match &self.oauth {
            Some(verifier) => {
                let mut response = Response::new(Full::new(Bytes::from(verifier.metadata().to_string())).boxed());
                response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                response
            }
            None => plain(StatusCode::NOT_FOUND, "Not Found: this service takes no OAuth tokens".to_owned()),
        }
    }
}

/// Whether the service can serve calls: `Err` with a reason that names no workspace or path.
pub type ReadinessCheck = dyn Fn() -> Result<(), String> + Send + Sync;

/// How long `/readyz` waits for the readiness check.
const READINESS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Service {
    /// `GET /healthz` (the process serves) and `GET /readyz` (the policy is loaded and the
    /// store can be reached), without authentication and without a word about workspaces;
    /// `None` for any other request.
    pub(super) async fn probe(&self, method: &http::Method, path: &str) -> Option<Answer> {
        if method != http::Method::GET {
            return None;
        }
        match path {
            "/healthz" => Some(probe_answer(StatusCode::OK, "ok\n".to_owned())),
            "/readyz" => {
                let check = self.readiness.clone();
                let checked = tokio::time::timeout(
                    READINESS_TIMEOUT,
                    tokio::task::spawn_blocking(move || check.as_deref().map_or(Ok(()), |check| check())),
                )
                .await;
                Some(match checked {
                    Ok(Ok(Ok(()))) => probe_answer(StatusCode::OK, "ready\n".to_owned()),
                    Ok(Ok(Err(reason))) => probe_answer(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}\n")),
                    Ok(Err(_)) => probe_answer(StatusCode::SERVICE_UNAVAILABLE, "not ready: the readiness check failed\n".to_owned()),
                    Err(_) => probe_answer(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not ready: the store did not answer within {} s\n", READINESS_TIMEOUT.as_secs()),
                    ),
                })
            }
            _ => None,
        }
    }
}

fn probe_answer(status: StatusCode, text: String) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response.headers_mut().insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The index states `/metrics` showed last (how many workspaces in each), and when they were found.
pub(super) type IndexStates = (std::time::Instant, Vec<(&'static str, usize)>);

/// How long the index states shown by `/metrics` are kept (finding them walks each workspace).
const INDEX_STATES_KEPT: std::time::Duration = std::time::Duration::from_secs(30);

impl Service {
    /// `GET /metrics` with the `metrics_token_sha256` token: the Prometheus text format (404
    /// when the configuration names no metrics token, 401 for any other token).
    pub(super) async fn serve_metrics(&self, headers: &http::HeaderMap) -> Answer {
        let Some(expected) = self.config.metrics_token_sha256 else {
            return plain(StatusCode::NOT_FOUND, "Not Found: set `metrics_token_sha256` in service.toml to serve /metrics".to_owned());
        };
        let presented = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token_hash(token.trim()));
        if presented != Some(expected) {
            self.log.note(Event::Unauthorized, "401 for /metrics: the metrics token is required");
            let mut response = plain(StatusCode::UNAUTHORIZED, "/metrics needs the metrics token (`metrics_token_sha256`)".to_owned());
            response.headers_mut().insert(http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"toolcell-metrics\""));
            return response;
        }
        let index = self.index_states().await;
        let text = self.metrics.render(self.owners.count(), &index);
        let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
        response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
        response
    }

    /// How many served workspaces have their content index in each state.
    async fn index_states(&self) -> Vec<(&'static str, usize)> {
        if let Some((at, states)) = &*self.index_states.lock().await
            && at.elapsed() < INDEX_STATES_KEPT
        {
            return states.clone();
        }
        let hosts: Vec<toolcell_host::Host> = self.hosts.values().cloned().collect();
        let states = tokio::task::spawn_blocking(move || {
            let mut counts = [("absent", 0), ("damaged", 0), ("current", 0), ("stale", 0)];
            for host in hosts {
                let index = match host.runtime().index_status(host.workspace()) {
                    Ok(toolcell_host::IndexStatus::Absent) => 0,
                    Ok(toolcell_host::IndexStatus::Present { changed: 0, .. }) => 2,
                    Ok(toolcell_host::IndexStatus::Present { .. }) => 3,
                    _ => 1,
                };
                counts[index].1 += 1;
            }
            counts.to_vec()
        })
        .await
        .unwrap_or_default();
        *self.index_states.lock().await = Some((std::time::Instant::now(), states.clone()));
        states
    }
}

/// `text` fit for a quoted string of a header: no quotes, backslashes or control characters.
fn quoted(text: &str) -> String {
    text.chars()
        .map(
            |character| {
                if character == '"' || character == '\\' || !(character.is_ascii_graphic() || character == ' ') { '\'' } else { character }
            },
        )
        .collect()
}

//! `toolcell serve`: the MCP server over Streamable HTTP (rmcp's server side on hyper), for
//! many workspaces and sessions in one process.
//!
//! Every request passes the front door first: its bearer token (compared by SHA-256 with the
//! [`ServiceConfig`]'s principals) names the principal, which fixes the workspace, the role,
//! the owner and the task; a request without a known token gets 401 before anything else runs.
//! An MCP session belongs to the principal that opened it: another principal presenting its
//! id gets 404, as does any id the service never issued. The body is then read whole (within
//! `request_body_timeout` and `max_request_bytes`: past the cap, `413` with a JSON-RPC error
//! SDKs show, the rest read and dropped so that the connection serves on), rmcp checks `Host`
//! and `Origin` (DNS rebinding), and runs the request. Every refusal (`401`, `403`, `413`,
//! `429`) is told on the [`OperatorLog`], rate-limited and without tokens.
//!
//! What a principal holds is bounded for as long as it holds it (see [`crate::bounds`]): its
//! connections from the first authenticated request until they close, its requests and event
//! streams until their answers are sent or dropped, its sessions until they end or expire, its
//! tool calls until their instances are released. Past a bound a request gets `429` (a tool
//! call, a JSON-RPC error) naming the bound, its value and the setting that raises it; nothing
//! else the principal holds is touched.
//!
//! The toolcell session of a request is `PRINCIPAL:MCP-SESSION-ID` (or `PRINCIPAL` for a
//! request without a session): the same MCP session id after a reconnect, or after the service
//! restarted (the session's initialization is kept in the state directory), finds the same read
//! versions and undo history. Ending the MCP session (HTTP `DELETE`) releases the locks taken
//! in it; so does its expiry, once it has been idle, with nothing in flight, for
//! `session_idle`.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::model::Tool;
use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;
use toolcell_host::{Host, Session, TaskBinding};

use crate::body::{Asks, Deadline, Holding, Unread};
use crate::bounds::{Kind, Ledger, Refusal, Slot};
use crate::config::{Principal, ServiceConfig};
use crate::metrics::Metrics;
use crate::oauth::Verifier;
use crate::operator::{Event, OperatorLog};
use crate::sessions::Owners;
use crate::{McpServer, ServeError, tools_of};

/// Origins always accepted: pages served from this machine (a browser sends an `Origin` with
/// every cross-origin request; DNS rebinding shows up as a foreign one).
const LOOPBACK_ORIGINS: [&str; 6] =
    ["http://localhost:*", "https://localhost:*", "http://127.0.0.1:*", "https://127.0.0.1:*", "http://[::1]:*", "https://[::1]:*"];
/// A client gets this long to send a request's headers (a connection not yet authenticated
/// holds one of `max_connections` no longer than this).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

mod answers;
mod direct;
mod drain;
mod ending;
mod front;
mod roster;

use answers::{plain, too_large, too_many};
pub(crate) use direct::Direct;
pub use front::ReadinessCheck;

type Mcp = StreamableHttpService<McpServer, LocalSessionManager>;
type Answer = Response<BoxBody<Bytes, Infallible>>;

/// What the service serves: the configuration, one host per workspace, and the sessions
/// seen so far.
pub struct Service {
    config: ServiceConfig,
    /// The principals of the static tokens (replaced on reload).
    roster: std::sync::RwLock<Arc<roster::Roster>>,
    hosts: BTreeMap<String, Host>,
    /// Toolcell sessions by id, with their tools.
    sessions: Mutex<HashMap<String, Served>>,
    /// The tools of each role, by `WORKSPACE/ROLE` (one list for all its sessions).
    tools: Mutex<HashMap<String, Arc<Vec<Tool>>>>,
    /// The MCP sessions: their owners, use, and state kept across restarts.
    owners: Arc<Owners>,
    /// What each principal holds, against the bounds.
    ledger: Arc<Ledger>,
    /// Where refusals are told to the operator.
    log: Arc<OperatorLog>,
    /// The checker of OAuth access tokens (with `[oauth]`; built when serving begins, with the
    /// operator's log).
    oauth: Option<Arc<Verifier>>,
    /// What `/readyz` checks besides the policy (the store); `None`: nothing more.
    readiness: Option<Arc<ReadinessCheck>>,
    /// What the service counts, for `/metrics`.
    metrics: Arc<Metrics>,
    /// The index states `/metrics` showed last, and when they were found.
    index_states: tokio::sync::Mutex<Option<front::IndexStates>>,
    /// The tool calls answered without rmcp's session worker.
    direct: Direct,
}

/// A session and the tools its role may call.
type Served = (Session, Arc<Vec<Tool>>);

/// The principal a request authenticated as (in the request's extensions).
#[derive(Debug, Clone)]
struct Authenticated(Arc<Principal>);

/// Where a request came from (in the request's extensions), for the operator's log.
#[derive(Debug, Clone, Copy)]
struct Peer(std::net::SocketAddr);

impl Service {
    /// A service over `hosts` (one per workspace of `config`, by name); MCP sessions are kept
    /// in `directory` (created 0700) so that they survive a restart.
    ///
    /// # Errors
    ///
    /// A message naming the principal (and its line) whose workspace has no host, whose role
    /// the policy does not define, or whose task is malformed; or the directory that cannot be
    /// created.
    pub fn new(config: ServiceConfig, hosts: BTreeMap<String, Host>, directory: Option<PathBuf>) -> Result<Service, String> {
        Service::check_principals(&config, &hosts)?;
        if let Some(oauth) = &config.oauth {
            let host = hosts
                .get(&oauth.workspace)
                .ok_or_else(|| format!("{}: [oauth] workspace `{}` is not served", config.file, oauth.workspace))?;
            for scoped in &oauth.roles {
                host.session(&scoped.role, "oauth")
                    .map_err(|error| format!("{}: [[oauth.roles]] role `{}`: {error}", config.file, scoped.role))?;
            }
        }
        let ledger = Ledger::new(config.bounds, config.principals.iter().map(|principal| principal.name.as_str()));
        let owners = Owners::load(directory, &ledger).map_err(|error| format!("the session directory cannot be created: {error}"))?;
        let roster = std::sync::RwLock::new(Arc::new(roster::Roster::of(&config)));
        Ok(Service {
            config,
            roster,
            hosts,
            sessions: Mutex::new(HashMap::new()),
            tools: Mutex::new(HashMap::new()),
            owners,
            ledger,
            log: Arc::new(OperatorLog::default()),
            oauth: None,
            readiness: None,
            metrics: Arc::new(Metrics::new()),
            index_states: tokio::sync::Mutex::new(None),
            direct: Direct::default(),
        })
    }

    /// Whether each principal of `config` has a served workspace, a role of the policy and a
    /// well-formed task.
    fn check_principals(config: &ServiceConfig, hosts: &BTreeMap<String, Host>) -> Result<(), String> {
        for principal in &config.principals {
            let at = format!("{} line {}: principal `{}`", config.file, principal.line, principal.name);
            let host = hosts.get(&principal.workspace).ok_or_else(|| format!("{at}: workspace `{}` is not served", principal.workspace))?;
            host.session(&principal.role, &principal.name).map_err(|error| format!("{at}: {error}"))?;
            if let Some(task) = &principal.task {
                TaskBinding::parse(task).map_err(|reason| format!("{at}: task: {reason}"))?;
            }
        }
        Ok(())
    }

    /// The service, telling refusals to `log` (by default, a log of its own on stderr).
    #[must_use]
    pub fn with_operator_log(mut self, log: Arc<OperatorLog>) -> Self {
        self.log = log;
        self
    }

    /// The service, answering `/readyz` with `check` (whether the store can be reached, say).
    #[must_use]
    pub fn with_readiness(mut self, check: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Self {
        self.readiness = Some(Arc::new(check));
        self
    }

    /// What the service counts.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A tool call of `parts`' principal refused at one of its bounds (a JSON-RPC error, the
    /// `429` of a call), told to the operator.
    pub(crate) fn log_call_refused(&self, parts: Option<&http::request::Parts>, refusal: &Refusal) {
        let from = parts.and_then(|parts| parts.extensions.get::<Peer>()).map(|Peer(address)| address.to_string());
        self.log.note(Event::TooMany, &format!("429 (a tool call) from {}: {refusal}", from.as_deref().unwrap_or("?")));
    }

    /// The toolcell session (and its tools) of a request whose HTTP parts are `parts`.
    pub(crate) fn session_for(&self, parts: Option<&http::request::Parts>) -> Result<(Session, Arc<Vec<Tool>>), String> {
        let principal = authenticated(parts)?;
        let id = match mcp_session_id(parts.and_then(|parts| parts.headers.get(MCP_SESSION_ID))) {
            Some(mcp) => session_key(principal, mcp),
            None => principal.name.clone(),
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((session, tools)) = sessions.get(&id) {
            if session.role() != principal.role {
                // An OAuth token of the same subject, with another role.
                return Err(format!(
                    "this session acts in role `{}`; a token for role `{}` needs a session of its own",
                    session.role(),
                    principal.role
                ));
            }
            return Ok((session.clone(), Arc::clone(tools)));
        }
        let host = self.hosts.get(&principal.workspace).ok_or("the principal's workspace is not served")?;
        let mut session = host.session(&principal.role, &id).map_err(|error| error.to_string())?.with_principal(principal.name.clone());
        if let Some(task) = &principal.task {
            session = session.with_task(TaskBinding::parse(task)?);
        }
        if let Some(owner) = &principal.owner {
            session = session.with_owner(owner.clone());
        }
        let tools = Arc::clone(
            self.tools
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(format!("{}/{}", principal.workspace, principal.role))
                .or_insert_with(|| Arc::new(tools_of(&session))),
        );
        sessions.insert(id, (session.clone(), Arc::clone(&tools)));
        Ok((session, tools))
    }

    /// A slot of `kind` (a call, held until its instance is released; a resource watcher) for
    /// the principal of the request whose HTTP parts are `parts`.
    pub(crate) fn take_slot(&self, parts: Option<&http::request::Parts>, kind: Kind) -> Result<Slot, CallRefused> {
        let principal = authenticated(parts).map_err(CallRefused::Unauthenticated)?;
        self.ledger.take(&principal.name, kind).map_err(CallRefused::Bound)
    }

    /// `connection` counts for `principal` from its first request on (again if another
    /// principal's request comes on it).
    fn seat(&self, connection: &Mutex<Option<Slot>>, principal: &Principal) -> Result<(), Refusal> {
        let mut seat = connection.lock().unwrap_or_else(PoisonError::into_inner);
        if seat.as_ref().is_some_and(|slot| slot.principal() == principal.name) {
            return Ok(());
        }
        *seat = None;
        *seat = Some(self.ledger.take(&principal.name, Kind::Connection)?);
        Ok(())
    }

    /// The front door: authenticate, count what the request holds against the bounds, check
    /// the session's owner, read the body, then let rmcp serve.
    async fn handle(
        self: Arc<Self>,
        mcp: Mcp,
        manager: Arc<LocalSessionManager>,
        (connection, peer): (Arc<Mutex<Option<Slot>>>, std::net::SocketAddr),
        request: Request<Incoming>,
    ) -> Answer {
        if let Some(answer) = self.probe(request.method(), request.uri().path()).await {
            return answer;
        }
        if request.uri().path() == "/metrics" {
            return self.serve_metrics(request.headers()).await;
        }
        if request.method() == Method::GET && request.uri().path().starts_with("/.well-known/oauth-protected-resource") {
            return self.resource_metadata();
        }
        let principal = match self.authorize(request.headers()).await {
            Ok(principal) => principal,
            Err(denied) => {
                self.log.note(denied.event(), &format!("{} from {peer}: {}", denied.status().as_u16(), denied.reason()));
                return self.denied(&denied);
            }
        };
        let refuse = |refusal: &Refusal| {
            self.log.note(Event::TooMany, &format!("429 from {peer}: {refusal}"));
            too_many(refusal)
        };
        if let Err(refusal) = self.seat(&connection, &principal) {
            return refuse(&refusal);
        }
        let request_slot = match self.ledger.take(&principal.name, Kind::Request) {
            Ok(slot) => slot,
            Err(refusal) => return refuse(&refusal),
        };
        let session_id = mcp_session_id(request.headers().get(MCP_SESSION_ID)).map(str::to_owned);
        // A session this service never created for this principal (or that expired) does not
        // exist for it (nothing is recorded for an id a client makes up).
        let activity = match &session_id {
            Some(id) => match self.owners.enter_anywhere(id, &principal.name).await {
                Ok(Some(activity)) => Some(activity),
                Ok(None) => return plain(StatusCode::NOT_FOUND, "Not Found: no such session".to_owned()),
                Err(error) => return self.store_unavailable(&error, peer),
            },
            None => None,
        };
        let (mut parts, body) = request.into_parts();
        // The whole body must arrive in time: a body trickled a byte at a time fails then.
        let body = if parts.method == Method::POST {
            match crate::body::collect(Deadline::new(body, self.config.request_body_timeout), self.config.max_request_bytes).await {
                Ok(body) => body,
                Err(Unread::TooLarge { max_bytes, drained }) => {
                    self.log.note(
                        Event::TooLarge,
                        &format!(
                            "413 from {peer}: a request of principal `{}` is over {max_bytes} bytes (`max_request_bytes`)",
                            principal.name
                        ),
                    );
                    return too_large(max_bytes, drained);
                }
                Err(Unread::Failed(status, text)) => return plain(status, text),
            }
        } else {
            Bytes::new()
        };
        let asks = if parts.method == Method::POST { Asks::of(&body) } else { Asks::default() };
        // A `GET` is an event stream; so is the answer to a JSON-RPC request.
        let stream_slot = if parts.method == Method::GET || asks.request {
            match self.ledger.take(&principal.name, Kind::Stream) {
                Ok(slot) => Some(slot),
                Err(refusal) => return refuse(&refusal),
            }
        } else {
            None
        };
        let mut session_slot = if asks.initialize && session_id.is_none() {
            match self.owners.session_slot(&self.ledger, &principal.name) {
                Ok(slot) => Some(slot),
                Err(refusal) => return refuse(&refusal),
            }
        } else {
            None
        };
        let ending = parts.method == Method::DELETE;
        // Ended for every host first: a session the store cannot end goes on there.
        if ending
            && let Some(id) = &session_id
            && let Err(error) = self.owners.close_anywhere(id).await
        {
            return self.store_unavailable(&error, peer);
        }
        parts.extensions.insert(Authenticated(Arc::clone(&principal)));
        parts.extensions.insert(Peer(peer));
        let direct = match &session_id {
            Some(id) if asks.request && parts.method == Method::POST => {
                match self.direct.call_of(id, &parts.headers, &body, &self.config.allowed_hosts) {
                    Some(call) if manager.has_session(&Arc::from(id.as_str())).await.unwrap_or(false) => Some((id, call)),
                    _ => None,
                }
            }
            _ => None,
        };
        let sent_json = parts.headers.get(http::header::CONTENT_TYPE).is_some_and(|kind| kind.as_bytes().starts_with(b"application/json"));
        let mut response = match direct {
            Some((id, call)) => self.call_directly(id, parts, call).await,
            None => mcp.handle(Request::from_parts(parts, Full::new(body.clone()))).await,
        };
        if response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE && sent_json {
            response = answers::unreadable(&body);
        }
        if asks.cancel
            && response.status() == StatusCode::ACCEPTED
            && let Some(id) = &session_id
        {
            // Accepted by rmcp (its checks passed): it cancels a call of the session it runs,
            // this a call the service runs itself.
            self.direct.cancel(id, &body);
        }
        if response.status() == StatusCode::FORBIDDEN {
            // rmcp's own refusal (a foreign `Host` or `Origin`): its text is one of its fixed
            // reasons, never a header's value.
            let (head, body) = response.into_parts();
            let text = body.collect().await.map(http_body_util::Collected::to_bytes).unwrap_or_default();
            let reason = String::from_utf8_lossy(&text).chars().filter(|character| !character.is_control()).take(200).collect::<String>();
            self.log.note(Event::Forbidden, &format!("403 from {peer} (principal `{}`): {reason}", principal.name));
            response = Response::from_parts(head, Full::new(text).boxed());
        }
        if response.status().is_client_error() {
            // rmcp refuses some requests (Host, Origin) without reading their body: close the
            // connection after the answer, as for the front door's own refusals.
            response.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        if ending && response.status() == StatusCode::ACCEPTED {
            // The session is gone once this answer is sent: that is done, not accepted for
            // later (clients log 202 as a failed termination).
            *response.status_mut() = StatusCode::NO_CONTENT;
            *response.body_mut() = Full::new(Bytes::new()).boxed();
        }
        match &session_id {
            Some(id) if ending && response.status().is_success() => self.end(id, &principal).await,
            // A new session: it belongs to whoever opened it, and counts for it.
            None => {
                if let Some(created) = mcp_session_id(response.headers().get(MCP_SESSION_ID)) {
                    match session_slot.take() {
                        Some(slot) => {
                            // Counted over every host of the deployment, in the shared store.
                            let max = self.config.bounds.max_sessions_per_principal;
                            match self.owners.claim_within(created, &principal.name, slot, max).await {
                                Ok(true) => {}
                                Ok(false) => {
                                    let _ = manager.close_session(&Arc::from(created)).await;
                                    return refuse(&Refusal {
                                        principal: principal.name.clone(),
                                        kind: Kind::Session,
                                        setting: "max_sessions_per_principal",
                                        value: max,
                                        share: None,
                                    });
                                }
                                Err(error) => {
                                    let _ = manager.close_session(&Arc::from(created)).await;
                                    return self.store_unavailable(&error, peer);
                                }
                            }
                        }
                        // Created by a request that did not say `initialize`: not kept.
                        None => {
                            let _ = manager.close_session(&Arc::from(created)).await;
                            self.owners.remove(created);
                            return plain(StatusCode::BAD_REQUEST, "Bad Request: a session begins with `initialize`".to_owned());
                        }
                    }
                }
            }
            Some(_) => {}
        }
        if asks.request
            && response.headers().get(http::header::CONTENT_TYPE).is_some_and(|kind| kind.as_bytes().starts_with(b"text/event-stream"))
        {
            let (head, body) = response.into_parts();
            response = Response::from_parts(head, crate::body::gathered(body).await);
        }
        // What the request holds, it holds until its answer is sent or dropped.
        response.map(|body| Holding::boxed(body, (request_slot, stream_slot, activity)))
    }
}

/// Why a tool call did not get a slot.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallRefused {
    /// The request came without its principal (a bug of the service).
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// The principal reached a bound.
    #[error(transparent)]
    Bound(Refusal),
}

/// The principal of the request whose HTTP parts are `parts`.
fn authenticated(parts: Option<&http::request::Parts>) -> Result<&Arc<Principal>, &'static str> {
    let parts = parts.ok_or("the request came without its HTTP parts")?;
    let Authenticated(principal) = parts.extensions.get::<Authenticated>().ok_or("the request is not authenticated")?;
    Ok(principal)
}

const MCP_SESSION_ID: &str = "mcp-session-id";

/// The toolcell session of `principal`'s MCP session `mcp`.
fn session_key(principal: &Principal, mcp: &str) -> String {
    format!("{}:{mcp}", principal.name)
}

fn mcp_session_id(value: Option<&HeaderValue>) -> Option<&str> {
    value.and_then(|value| value.to_str().ok()).filter(|id| !id.is_empty() && id.len() <= 256)
}

/// Serve `service` on `listener` until `shutdown` is cancelled, taking the principals of each
/// configuration `reloads` sends.
///
/// # Errors
///
/// [`ServeError`] if accepting connections fails.
pub async fn serve_http(
    mut service: Service,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
    mut reloads: tokio::sync::mpsc::UnboundedReceiver<ServiceConfig>,
) -> Result<(), ServeError> {
    if let Some(oauth) = service.config.oauth.clone() {
        let log = Arc::clone(&service.log);
        let verifier = Verifier::new(oauth, move |line| log.note(Event::IssuerDown, line)).map_err(|reason| ServeError { reason })?;
        let verifier = Arc::new(verifier);
        // The first token need not wait for the keys.
        let early = Arc::clone(&verifier);
        tokio::spawn(async move { early.prefetch().await });
        service.oauth = Some(verifier);
    }
    // rmcp's sessions and streams end once the calls in flight have drained, not when the
    // service stops accepting.
    let drained = CancellationToken::new();
    let metrics = Arc::clone(&service.metrics);
    service.log.count_with(move |event| metrics.event(event));
    let service = Arc::new(service);
    let config = &service.config;
    let mut hosts: Vec<String> = direct::LOOPBACK.map(str::to_owned).to_vec();
    hosts.extend(config.allowed_hosts.iter().cloned());
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(LOOPBACK_ORIGINS.iter().map(|origin| (*origin).to_owned()).chain(config.allowed_origins.iter().cloned()))
        .enforce_origin_validation()
        .with_max_request_body_bytes(config.max_request_bytes)
        .with_cancellation_token(drained.clone());
    if let Some(store) = service.owners.store() {
        mcp_config.session_store = Some(store);
    }
    let mut sessions = LocalSessionManager::default();
    let mut session_config = SessionConfig::default();
    // Sessions end when the service expires them (idle, with nothing in flight, not even an
    // open stream): rmcp's own timer counts only messages, and would end a session a client
    // is listening on.
    session_config.keep_alive = None;
    sessions.session_config = session_config;
    let manager = Arc::new(sessions);
    let for_factory = Arc::clone(&service);
    let mcp = StreamableHttpService::new(move || Ok(McpServer::for_service(Arc::clone(&for_factory))), Arc::clone(&manager), mcp_config);
    // Idle sessions end within a fraction of `session_idle` past it.
    let expiry = {
        let (service, manager, shutdown) = (Arc::clone(&service), Arc::clone(&manager), shutdown.clone());
        let every = (service.config.session_idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            // The operator hears how many refusals were left out of the log soon after.
            let mut flushes = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = ticks.tick() => service.expire(&manager).await,
                    _ = flushes.tick() => service.log.flush(),
                    Some(config) = reloads.recv() => {
                        let said = match service.reload(&config) {
                            Ok(count) => format!(
                                "toolcell serve: reloaded {}: {count} principals (sessions kept; workspaces, bounds and [oauth] take a restart)",
                                config.file
                            ),
                            Err(reason) => format!("toolcell serve: not reloaded, the principals in use are kept: {reason}"),
                        };
                        let _ = crate::writeln_stderr(&said);
                    }
                    () = shutdown.cancelled() => break,
                }
            }
        })
    };
    let connections = Arc::new(tokio::sync::Semaphore::new(config.bounds.max_connections));
    let served = loop {
        let permit = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(error) => break Err(ServeError { reason: error.to_string() }),
            },
            () = shutdown.cancelled() => break Ok(()),
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors, say: wait a little rather than spin or stop serving.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let (service, mcp, manager, shutdown) = (Arc::clone(&service), mcp.clone(), Arc::clone(&manager), shutdown.clone());
        tokio::spawn(async move {
            let _permit = permit;
            // The principal this connection counts for, once a request on it authenticates.
            let seat: Arc<Mutex<Option<Slot>>> = Arc::new(Mutex::new(None));
            let handler = hyper::service::service_fn(move |request| {
                let (service, mcp, manager, seat) = (Arc::clone(&service), mcp.clone(), Arc::clone(&manager), Arc::clone(&seat));
                async move { Ok::<_, Infallible>(service.handle(mcp, manager, (seat, peer), request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), handler);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = shutdown.cancelled() => {
                    // No new request on it; the one in flight is answered (its call drained).
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.as_mut().await;
                }
            }
        });
    };
    expiry.abort();
    drop(listener);
    drain::drain(&service, service.config.shutdown_grace).await;
    drained.cancel();
    served
}

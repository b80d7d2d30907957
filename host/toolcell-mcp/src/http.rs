//! `toolcell serve`: the MCP server over Streamable HTTP (rmcp's server side on hyper), for
//! many workspaces and sessions in one process.
//!
//! Every request passes the front door first: its bearer token (compared by SHA-256 with the
//! [`ServiceConfig`]'s principals) names the principal, which fixes the workspace, the role,
//! the owner and the task; a request without a known token gets 401 before anything else runs.
//! An MCP session belongs to the principal that opened it: another principal presenting its
//! id gets 404, as does any id the service never issued. rmcp then checks `Host` and `Origin` (DNS
//! rebinding) and the body size, and runs the request.
//!
//! The toolcell session of a request is `PRINCIPAL:MCP-SESSION-ID` (or `PRINCIPAL` for a
//! request without a session): the same MCP session id after a reconnect, or after the service
//! restarted (the session's initialization is kept in the state directory), finds the same read
//! versions and undo history. Ending the MCP session (HTTP `DELETE`) releases the locks taken
//! in it; a session left idle for `session_idle` ends on its own, and its locks run out with
//! their leases.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::model::Tool;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::session::{SessionState, SessionStore, SessionStoreError};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;
use toolcell_host::{Host, Session, TaskBinding};

use crate::config::{Principal, ServiceConfig, hex, token_hash};
use crate::{McpServer, ServeError, tools_of};

/// Origins always accepted: pages served from this machine (a browser sends an `Origin` with
/// every cross-origin request; DNS rebinding shows up as a foreign one).
const LOOPBACK_ORIGINS: [&str; 6] =
    ["http://localhost:*", "https://localhost:*", "http://127.0.0.1:*", "https://127.0.0.1:*", "http://[::1]:*", "https://[::1]:*"];
/// A client gets this long to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 1024;

/// What the service serves: the configuration, one host per workspace, and the sessions
/// seen so far.
pub struct Service {
    config: ServiceConfig,
    /// The principals by the SHA-256 of their token, shared with every request they make.
    by_token: HashMap<[u8; 32], Arc<Principal>>,
    /// The principal of requests without a token, if the configuration names one.
    anonymous: Option<Arc<Principal>>,
    hosts: BTreeMap<String, Host>,
    /// Toolcell sessions by id, with their tools.
    sessions: Mutex<HashMap<String, Served>>,
    /// The principal each MCP session id belongs to.
    owners: Mutex<HashMap<String, String>>,
    /// Where MCP sessions are kept across restarts (`None`: not kept).
    directory: Option<PathBuf>,
    /// Each principal's requests in flight, by name: at most `max_requests_per_principal`.
    in_flight: HashMap<String, Arc<tokio::sync::Semaphore>>,
}

/// A session and the tools its role may call.
type Served = (Session, Arc<Vec<Tool>>);

/// The principal a request authenticated as (in the request's extensions).
#[derive(Debug, Clone)]
struct Authenticated(Arc<Principal>);

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
        for principal in &config.principals {
            let at = format!("{} line {}: principal `{}`", config.file, principal.line, principal.name);
            let host = hosts.get(&principal.workspace).ok_or_else(|| format!("{at}: workspace `{}` is not served", principal.workspace))?;
            host.session(&principal.role, &principal.name).map_err(|error| format!("{at}: {error}"))?;
            if let Some(task) = &principal.task {
                TaskBinding::parse(task).map_err(|reason| format!("{at}: task: {reason}"))?;
            }
        }
        if let Some(directory) = &directory {
            create_private_dir(directory).map_err(|error| format!("the session directory cannot be created: {error}"))?;
        }
        let owners = directory.as_deref().map(load_owners).unwrap_or_default();
        let principals: Vec<Arc<Principal>> = config.principals.iter().cloned().map(Arc::new).collect();
        let by_token = principals.iter().filter_map(|principal| Some((principal.token_sha256?, Arc::clone(principal)))).collect();
        let anonymous = config.anonymous.as_ref().and_then(|name| principals.iter().find(|principal| &principal.name == name).cloned());
        let in_flight = principals
            .iter()
            .map(|principal| (principal.name.clone(), Arc::new(tokio::sync::Semaphore::new(config.max_requests_per_principal))))
            .collect();
        Ok(Service {
            config,
            by_token,
            anonymous,
            hosts,
            sessions: Mutex::new(HashMap::new()),
            owners: Mutex::new(owners),
            directory,
            in_flight,
        })
    }

    /// The toolcell session (and its tools) of a request whose HTTP parts are `parts`.
    pub(crate) fn session_for(&self, parts: Option<&http::request::Parts>) -> Result<(Session, Arc<Vec<Tool>>), String> {
        let parts = parts.ok_or("the request came without its HTTP parts")?;
        let Authenticated(principal) = parts.extensions.get::<Authenticated>().ok_or("the request is not authenticated")?;
        let id = match mcp_session_id(parts.headers.get(MCP_SESSION_ID)) {
            Some(mcp) => session_key(principal, mcp),
            None => principal.name.clone(),
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((session, tools)) = sessions.get(&id) {
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
        let tools = Arc::new(tools_of(&session));
        sessions.insert(id, (session.clone(), Arc::clone(&tools)));
        Ok((session, tools))
    }

    /// Who presents `headers`' bearer token, or the anonymous principal without one.
    fn authenticate(&self, headers: &http::HeaderMap) -> Result<Arc<Principal>, &'static str> {
        let principal = match headers.get(http::header::AUTHORIZATION) {
            None => self.anonymous.as_ref(),
            Some(value) => {
                let token = value
                    .to_str()
                    .ok()
                    .and_then(|value| value.split_once(' '))
                    .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                    .map(|(_, token)| token.trim())
                    .ok_or("the Authorization header is not `Bearer TOKEN`")?;
                self.by_token.get(&token_hash(token))
            }
        };
        principal.cloned().ok_or("a bearer token this service knows is required")
    }

    /// Whether the MCP session `id` exists and is `principal`'s.
    fn owns(&self, id: &str, principal: &Principal) -> bool {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner).get(id).is_some_and(|owner| owner == &principal.name)
    }

    /// Record that `principal` created the MCP session `id` (kept beside the session's state,
    /// so that it still holds after a restart).
    fn claim(&self, id: &str, principal: &Principal) {
        if let Some(directory) = &self.directory {
            let _ = std::fs::write(owner_file(directory, id), format!("{id}\n{}\n", principal.name));
        }
        self.owners.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), principal.name.clone());
    }

    /// The MCP session `id` of `principal` ended: release the locks taken in it.
    fn end(&self, id: &str, principal: &Principal) {
        let key = session_key(principal, id);
        let session = self.sessions.lock().unwrap_or_else(PoisonError::into_inner).remove(&key).map(|(session, _)| session);
        let session = match session {
            Some(session) => Some(session),
            // Never called since this process started: end it all the same.
            None => self.hosts.get(&principal.workspace).and_then(|host| host.session(&principal.role, &key).ok()),
        };
        if let Some(session) = session
            && let Err(error) = session.end()
        {
            let _ = crate::writeln_stderr(&format!("toolcell serve: the locks of session `{key}` could not be released: {error}"));
        }
        self.owners.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
        if let Some(directory) = &self.directory {
            let _ = std::fs::remove_file(owner_file(directory, id));
        }
    }

    /// The front door: authenticate, check the session's owner, then let rmcp serve.
    async fn handle(
        self: Arc<Self>,
        mcp: StreamableHttpService<McpServer, LocalSessionManager>,
        mut request: Request<Incoming>,
    ) -> Response<BoxBody<Bytes, Infallible>> {
        let principal = match self.authenticate(request.headers()) {
            Ok(principal) => principal,
            Err(reason) => return unauthorized(reason),
        };
        // One principal's requests share a bound, so that one token cannot hold every
        // connection the service accepts (the permit is held until the answer is made).
        let Some(_in_flight) = self.in_flight.get(&principal.name).and_then(|requests| Arc::clone(requests).try_acquire_owned().ok())
        else {
            return plain(
                StatusCode::TOO_MANY_REQUESTS,
                "Too Many Requests: this principal has as many requests in flight as it may (`max_requests_per_principal`); wait for them to finish",
            );
        };
        let session_id = mcp_session_id(request.headers().get(MCP_SESSION_ID)).map(str::to_owned);
        // A session this service never created for this principal does not exist for it
        // (nothing is recorded for an id a client makes up).
        if let Some(id) = &session_id
            && !self.owns(id, &principal)
        {
            return plain(StatusCode::NOT_FOUND, "Not Found: no such session");
        }
        let ending = request.method() == Method::DELETE;
        request.extensions_mut().insert(Authenticated(Arc::clone(&principal)));
        // The whole body must arrive in time: a body trickled a byte at a time fails then.
        let request = request.map(|body| Deadline::new(body, self.config.request_body_timeout));
        let mut response = mcp.handle(request).await;
        if response.status().is_client_error() {
            // rmcp refuses some requests (Host, Origin, size) without reading their body: close
            // the connection after the answer, as for the front door's own refusals.
            response.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        if ending && response.status() == StatusCode::ACCEPTED {
            // The session is gone once this answer is sent: that is done, not accepted for
            // later (clients log 202 as a failed termination).
            *response.status_mut() = StatusCode::NO_CONTENT;
            *response.body_mut() = Full::new(Bytes::new()).boxed();
        }
        match &session_id {
            Some(id) if ending && response.status().is_success() => self.end(id, &principal),
            // A new session: it belongs to whoever opened it.
            None => {
                if let Some(created) = mcp_session_id(response.headers().get(MCP_SESSION_ID)) {
                    self.claim(created, &principal);
                }
            }
            Some(_) => {}
        }
        response
    }
}

const MCP_SESSION_ID: &str = "mcp-session-id";

/// A request body that fails once its deadline passes before it has all arrived.
struct Deadline<B> {
    body: B,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl<B> Deadline<B> {
    fn new(body: B, timeout: Duration) -> Self {
        Deadline { body, deadline: Box::pin(tokio::time::sleep(timeout)), timeout }
    }
}

/// The error of a body that took too long.
#[derive(Debug)]
struct BodyTimeout(Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "the request body did not arrive within {} s (`request_body_timeout`)", self.0.as_secs())
    }
}

impl std::error::Error for BodyTimeout {}

impl<B> hyper::body::Body for Deadline<B>
where
    B: hyper::body::Body + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        if self.deadline.as_mut().poll(context).is_ready() && !self.body.is_end_stream() {
            return std::task::Poll::Ready(Some(Err(Box::new(BodyTimeout(self.timeout)))));
        }
        std::pin::Pin::new(&mut self.body).poll_frame(context).map(|frame| frame.map(|result| result.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The toolcell session of `principal`'s MCP session `mcp`.
fn session_key(principal: &Principal, mcp: &str) -> String {
    format!("{}:{mcp}", principal.name)
}

/// Where the owner of the MCP session `id` is recorded.
fn owner_file(directory: &Path, id: &str) -> PathBuf {
    directory.join(format!("{}.owner", file_key(id)))
}

fn mcp_session_id(value: Option<&HeaderValue>) -> Option<&str> {
    value.and_then(|value| value.to_str().ok()).filter(|id| !id.is_empty() && id.len() <= 256)
}

/// A refusal by the front door. The request's body is left unread, so the connection closes
/// after the answer: a client must not send its next request on it (it would race the close).
fn plain(status: StatusCode, text: &'static str) -> Response<BoxBody<Bytes, Infallible>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn unauthorized(reason: &'static str) -> Response<BoxBody<Bytes, Infallible>> {
    let mut response = plain(StatusCode::UNAUTHORIZED, reason);
    response.headers_mut().insert(http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"toolcell\""));
    response
}

/// Serve `service` on `listener` until `shutdown` is cancelled.
///
/// # Errors
///
/// [`ServeError`] if accepting connections fails.
pub async fn serve_http(service: Service, listener: tokio::net::TcpListener, shutdown: CancellationToken) -> Result<(), ServeError> {
    let service = Arc::new(service);
    let config = &service.config;
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(str::to_owned).to_vec();
    hosts.extend(config.allowed_hosts.iter().cloned());
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(LOOPBACK_ORIGINS.iter().map(|origin| (*origin).to_owned()).chain(config.allowed_origins.iter().cloned()))
        .enforce_origin_validation()
        .with_max_request_body_bytes(config.max_request_bytes)
        .with_cancellation_token(shutdown.child_token());
    if let Some(directory) = &service.directory {
        mcp_config.session_store = Some(Arc::new(FileSessionStore { directory: directory.clone() }));
    }
    let mut sessions = LocalSessionManager::default();
    let mut session_config = SessionConfig::default();
    session_config.keep_alive = Some(config.session_idle);
    sessions.session_config = session_config;
    let for_factory = Arc::clone(&service);
    let mcp = StreamableHttpService::new(move || Ok(McpServer::for_service(Arc::clone(&for_factory))), Arc::new(sessions), mcp_config);
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => permit.map_err(|error| ServeError { reason: error.to_string() })?,
            () = shutdown.cancelled() => return Ok(()),
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors, say: wait a little rather than spin or stop serving.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let service = Arc::clone(&service);
        let mcp = mcp.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let handler = hyper::service::service_fn(move |request| {
                let service = Arc::clone(&service);
                let mcp = mcp.clone();
                async move { Ok::<_, Infallible>(service.handle(mcp, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), handler);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = shutdown.cancelled() => connection.as_mut().graceful_shutdown(),
            }
        });
    }
}

/// MCP sessions' initialization kept in files, so that a client's session survives a restart
/// of the service.
struct FileSessionStore {
    directory: PathBuf,
}

impl FileSessionStore {
    fn path(&self, session_id: &str) -> PathBuf {
        self.directory.join(format!("{}.json", file_key(session_id)))
    }
}

#[async_trait::async_trait]
impl SessionStore for FileSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match std::fs::read(self.path(session_id)) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(Box::new(error)),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let path = self.path(session_id);
        let temporary = path.with_extension("json.tmp");
        std::fs::write(&temporary, serde_json::to_vec(state)?)?;
        std::fs::rename(&temporary, &path)?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        match std::fs::remove_file(self.path(session_id)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(Box::new(error)),
            _ => Ok(()),
        }
    }
}

/// A file name for a session id the client chose the bytes of.
fn file_key(session_id: &str) -> String {
    hex(&token_hash(session_id))
}

/// The owners recorded in `directory` (`<key>.owner`: the session id, then the principal) of
/// the sessions whose state is still kept there; the owner files of sessions that ended
/// (their state removed) are removed.
fn load_owners(directory: &Path) -> HashMap<String, String> {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return HashMap::new();
    };
    let mut owners = HashMap::new();
    for path in entries.filter_map(Result::ok).map(|entry| entry.path()) {
        if path.extension().is_none_or(|extension| extension != "owner") {
            continue;
        }
        if !path.with_extension("json").exists() {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let mut lines = text.lines();
        if let (Some(id), Some(principal)) = (lines.next(), lines.next()) {
            owners.insert(id.to_owned(), principal.to_owned());
        }
    }
    owners
}

fn create_private_dir(directory: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(directory)
}

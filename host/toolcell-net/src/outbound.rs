//! [`Outbound`], the network capability shared by every call, and [`CallNet`], one call's view
//! of it: its role's rules, its budget and its records.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, Uri};
use http_body::Body;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use toolcell_policy::{Destination, NetworkDecision, NetworkRule, NetworkRules, Scheme, SecretHeader, SecretSource};

use crate::body::{BoxError, CountedBody, Exchange, RecordSink, ResponseBody, ResponseParts, push_record};
use crate::error::{Limit, NetError};
use crate::record::{Decision, RequestRecord};
use crate::resolve::{Resolve, SystemResolver};
use crate::{NetLimits, tls};

/// Builds an [`Outbound`].
#[derive(Default)]
pub struct OutboundBuilder {
    resolver: Option<Arc<dyn Resolve>>,
    limits: NetLimits,
    roots: Vec<(String, Vec<u8>)>,
    secret_directory: Option<PathBuf>,
}

impl OutboundBuilder {
    /// Resolve names with `resolver` (the default: [`SystemResolver`]).
    pub fn resolver(mut self, resolver: Arc<dyn Resolve>) -> OutboundBuilder {
        self.resolver = Some(resolver);
        self
    }

    /// Bound every call by `limits` (the default: [`NetLimits::default`]).
    pub fn limits(mut self, limits: NetLimits) -> OutboundBuilder {
        self.limits = limits;
        self
    }

    /// Trust the certificate authorities in `pem` too (`name` says which bundle in errors).
    pub fn extra_roots_pem(mut self, name: &str, pem: &[u8]) -> OutboundBuilder {
        self.roots.push((name.to_owned(), pem.to_vec()));
        self
    }

    /// Read a secret header's relative `file` from `directory` (the policy file's).
    pub fn secret_directory(mut self, directory: &Path) -> OutboundBuilder {
        self.secret_directory = Some(directory.to_path_buf());
        self
    }

    /// Take the policy's `[network]` table: its limits, its extra certificate authorities
    /// (`roots`, relative to `directory`, the policy file's) and the directory secret files are
    /// read from.
    ///
    /// # Errors
    ///
    /// [`NetError::RootsUnreadable`] when a root bundle cannot be read, or the policy was not
    /// read from a file the bundle could be relative to.
    pub fn policy(mut self, settings: &toolcell_policy::NetworkSettings, directory: Option<&Path>) -> Result<OutboundBuilder, NetError> {
        self.limits = NetLimits::from_settings(settings);
        for root in &settings.roots {
            let unreadable = |reason: String| NetError::RootsUnreadable { bundle: root.clone(), reason };
            let directory =
                directory.ok_or_else(|| unreadable("the policy was not read from a file it could be relative to".to_owned()))?;
            let pem = std::fs::read(directory.join(root)).map_err(|error| unreadable(error.to_string()))?;
            self.roots.push((root.clone(), pem));
        }
        self.secret_directory = directory.map(Path::to_path_buf);
        Ok(self)
    }

    /// The capability.
    ///
    /// # Errors
    ///
    /// [`NetError::Roots`] when an extra root bundle is not PEM certificates.
    pub fn build(self) -> Result<Outbound, NetError> {
        let tls = tls::client_config(&self.roots)?;
        Ok(Outbound {
            shared: Arc::new(Shared {
                tls: tokio_rustls::TlsConnector::from(tls),
                resolver: self.resolver.unwrap_or_else(|| Arc::new(SystemResolver)),
                limits: self.limits,
                secret_directory: self.secret_directory,
            }),
        })
    }
}

struct Shared {
    tls: tokio_rustls::TlsConnector,
    resolver: Arc<dyn Resolve>,
    limits: NetLimits,
    secret_directory: Option<PathBuf>,
}

/// The outbound HTTP capability, built once and shared by every call: TLS configuration,
/// resolver and limits.
#[derive(Clone)]
pub struct Outbound {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Outbound").field("limits", &self.shared.limits).finish_non_exhaustive()
    }
}

impl Outbound {
    /// Start building one.
    pub fn builder() -> OutboundBuilder {
        OutboundBuilder::default()
    }

    /// The limits each call gets.
    pub fn limits(&self) -> NetLimits {
        self.shared.limits
    }

    /// One call's view: tool `tool` of role `role`, under `rules` (the role's
    /// [`Role::network`](toolcell_policy::Role::network)), with a fresh budget.
    pub fn call(&self, role: &str, tool: &str, rules: NetworkRules) -> CallNet {
        let limits = self.shared.limits;
        CallNet {
            shared: self.shared.clone(),
            role: role.to_owned(),
            tool: tool.to_owned(),
            rules,
            budget: Arc::new(Budget {
                limits,
                requests: AtomicU64::new(0),
                sent: AtomicU64::new(0),
                received: AtomicU64::new(0),
                first_request: OnceLock::new(),
                connections: Arc::new(Semaphore::new(limits.connections)),
            }),
            records: Arc::default(),
        }
    }
}

/// What one call has used of its limits.
#[derive(Debug)]
pub(crate) struct Budget {
    pub(crate) limits: NetLimits,
    requests: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    first_request: OnceLock<Instant>,
    connections: Arc<Semaphore>,
}

impl Budget {
    fn deadline(&self) -> Instant {
        *self.first_request.get_or_init(Instant::now) + self.limits.total_time
    }

    pub(crate) fn take_sent(&self, bytes: u64) -> Result<(), String> {
        let total = self.sent.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
        if total > self.limits.sent_bytes {
            return Err(format!("the call would send {total} bytes, over its {} byte bound", self.limits.sent_bytes));
        }
        Ok(())
    }

    pub(crate) fn take_received(&self, bytes: u64) -> Result<(), String> {
        let total = self.received.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
        if total > self.limits.received_bytes {
            return Err(format!("the call received {total} bytes, over its {} byte bound", self.limits.received_bytes));
        }
        Ok(())
    }
}

/// One call's outbound HTTP: the role's rules, the call's budget, and the records of its
/// requests. A clone is the same call (it shares the budget and the records), for a task
/// that sends a request while the call goes on.
#[derive(Clone)]
pub struct CallNet {
    shared: Arc<Shared>,
    role: String,
    tool: String,
    rules: NetworkRules,
    budget: Arc<Budget>,
    records: RecordSink,
}

impl std::fmt::Debug for CallNet {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("CallNet").field("role", &self.role).field("tool", &self.tool).finish_non_exhaustive()
    }
}

/// Headers the caller may not set: the host sets `Host`, frames the body, and opens one
/// connection per request without a proxy.
const STRIPPED: [HeaderName; 10] = [
    header::HOST,
    header::CONNECTION,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::CONTENT_LENGTH,
    header::EXPECT,
];

impl CallNet {
    /// Send `request` if the role's rules allow its destination and every address its host
    /// resolves to, within the call's limits; redirects are returned, not followed. Whatever
    /// happens, a [`RequestRecord`] is added to [`CallNet::records`] (for a response, when its
    /// body ends or is dropped).
    ///
    /// # Errors
    ///
    /// [`NetError`]: refused by a rule, an address or a limit, or failed to resolve, connect,
    /// verify TLS, or exchange.
    pub async fn send<B>(&self, request: Request<B>) -> Result<Response<ResponseBody>, NetError>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let started = Instant::now();
        let mut record = RequestRecord {
            method: request.method().as_str().to_owned(),
            scheme: request.uri().scheme_str().unwrap_or_default().to_owned(),
            host: String::new(),
            port: 0,
            address: None,
            status: None,
            bytes_sent: 0,
            bytes_received: 0,
            elapsed_ms: 0,
            decision: Decision::Refused,
            rule: None,
            reason: None,
        };
        let exchange = Arc::new(Exchange::default());
        match self.exchange(request, &mut record, &exchange, started).await {
            Ok(response) => Ok(response),
            Err(error) => {
                let error = exchange.stopped().unwrap_or(error);
                record.bytes_sent = exchange.sent.load(Ordering::Relaxed);
                record.bytes_received = exchange.received.load(Ordering::Relaxed);
                record.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                record.reason = Some(error.to_string());
                push_record(&self.records, record);
                Err(error)
            }
        }
    }

    /// The records of the call's requests so far, taken (a response whose body is still open
    /// adds its record when the body ends or is dropped).
    pub fn records(&self) -> Vec<RequestRecord> {
        self.records.lock().map(|mut records| std::mem::take(&mut *records)).unwrap_or_default()
    }

    async fn exchange<B>(
        &self,
        request: Request<B>,
        record: &mut RequestRecord,
        exchange: &Arc<Exchange>,
        started: Instant,
    ) -> Result<Response<ResponseBody>, NetError>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let (parts, body) = request.into_parts();
        let target = Target::parse(&parts.uri)?;
        if parts.method == http::Method::CONNECT {
            return Err(NetError::InvalidRequest {
                uri: target.display,
                reason: "`CONNECT` opens a tunnel, which the host does not; send the request itself".to_owned(),
            });
        }
        record.scheme = target.scheme.as_str().to_owned();
        record.host.clone_from(&target.host);
        record.port = target.port;
        let host = target.host.as_str();
        let limits = &self.budget.limits;
        let limit = |limit: Limit, detail: String| NetError::LimitReached { limit, host: host.to_owned(), detail };
        let count = self.budget.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if count > limits.requests {
            return Err(limit(Limit::Requests, format!("this is request {count} of the call, over its bound of {}", limits.requests)));
        }
        let deadline = self.budget.deadline();
        if Instant::now() >= deadline {
            return Err(limit(
                Limit::TotalTime,
                format!("the call's requests took longer than {} ms together", limits.total_time.as_millis()),
            ));
        }
        let destination = Destination { tool: &self.tool, scheme: target.scheme, host, port: target.port };
        let rule = match self.rules.decide(&self.role, &destination) {
            NetworkDecision::Allowed(rule) => rule,
            NetworkDecision::Refused { rule, message } => {
                record.rule = rule.map(|rule| rule.id.clone());
                return Err(NetError::Refused { rule: rule.map(|rule| rule.id.clone()), message });
            }
        };
        record.rule = Some(rule.id.clone());
        let addresses = match host.parse::<IpAddr>() {
            Ok(address) => vec![address],
            Err(_) => {
                let resolving = self.shared.resolver.resolve(host);
                let answer = tokio::time::timeout_at(deadline, resolving)
                    .await
                    .map_err(|_| limit(Limit::TotalTime, "the call's time ran out while the name was resolved".to_owned()))?;
                let addresses = answer.map_err(|error| NetError::Resolve { host: host.to_owned(), reason: error.to_string() })?;
                if addresses.is_empty() {
                    return Err(NetError::Resolve { host: host.to_owned(), reason: "the resolver gave no address".to_owned() });
                }
                addresses
            }
        };
        for address in &addresses {
            NetworkRules::check_address(rule, host, *address).map_err(|message| NetError::AddressRefused {
                rule: rule.id.clone(),
                address: *address,
                message,
            })?;
        }
        record.decision = Decision::Allowed;
        let headers = self.headers(&parts.headers, rule, &target).await?;
        let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
        let head_bytes = (parts.method.as_str().len() + path.len() + 12 + header_bytes(&headers)) as u64;
        self.budget.take_sent(head_bytes).map_err(|detail| limit(Limit::SentBytes, detail))?;
        let permit = self.budget.connections.clone().try_acquire_owned().map_err(|_| {
            limit(
                Limit::Connections,
                format!("the call holds {} connections open already; read or drop a response body first", limits.connections),
            )
        })?;
        let mut outgoing = Request::builder().method(parts.method).uri(path).version(http::Version::HTTP_11);
        if let Some(slot) = outgoing.headers_mut() {
            *slot = headers;
        }
        let outgoing = outgoing
            .body(CountedBody::new(body, self.budget.clone(), exchange.clone(), host.to_owned()))
            .map_err(|error| NetError::InvalidRequest { uri: target.display.clone(), reason: error.to_string() })?;
        let connect_deadline = deadline.min(Instant::now() + limits.connect_timeout);
        let mut last_error = None;
        let mut connected = None;
        for address in addresses {
            record.address = Some(address);
            match tokio::time::timeout_at(connect_deadline, TcpStream::connect(SocketAddr::new(address, target.port))).await {
                Ok(Ok(stream)) => {
                    connected = Some(stream);
                    break;
                }
                Ok(Err(error)) => {
                    last_error = Some(NetError::Connect { host: host.to_owned(), address, port: target.port, reason: error.to_string() })
                }
                Err(_) => break,
            }
        }
        let timed_out = || {
            if connect_deadline < deadline {
                limit(Limit::ConnectTime, format!("no connection within {} ms", limits.connect_timeout.as_millis()))
            } else {
                limit(Limit::TotalTime, format!("the call's requests took longer than {} ms together", limits.total_time.as_millis()))
            }
        };
        let Some(stream) = connected else {
            return Err(last_error.unwrap_or_else(timed_out));
        };
        let sent = match target.scheme {
            Scheme::Http => tokio::time::timeout_at(deadline, send_over(stream, outgoing)).await,
            Scheme::Https => {
                let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                    .map_err(|error| NetError::Tls { host: host.to_owned(), reason: error.to_string() })?;
                let tls = tokio::time::timeout_at(connect_deadline, self.shared.tls.connect(name, stream))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|error| NetError::Tls { host: host.to_owned(), reason: error_chain(&error) })?;
                tokio::time::timeout_at(deadline, send_over(tls, outgoing)).await
            }
        };
        let (response, connection) = sent
            .map_err(|_| {
                limit(Limit::TotalTime, format!("the call's requests took longer than {} ms together", limits.total_time.as_millis()))
            })?
            .map_err(|error| NetError::Http { host: host.to_owned(), reason: error_chain(&error) })?;
        // The head went out with the request (the budget took it before connecting).
        exchange.sent.fetch_add(head_bytes, Ordering::Relaxed);
        let (response_parts, incoming) = response.into_parts();
        record.status = Some(response_parts.status.as_u16());
        let head_bytes = (17 + response_parts.status.canonical_reason().map_or(0, str::len) + header_bytes(&response_parts.headers)) as u64;
        exchange.received.fetch_add(head_bytes, Ordering::Relaxed);
        if let Err(detail) = self.budget.take_received(head_bytes) {
            connection.abort();
            return Err(limit(Limit::ReceivedBytes, detail));
        }
        let body = ResponseBody::new(
            incoming,
            ResponseParts {
                budget: self.budget.clone(),
                exchange: exchange.clone(),
                deadline,
                host: host.to_owned(),
                started,
                record: record.clone(),
                sink: self.records.clone(),
                connection,
                permit,
            },
        );
        Ok(Response::from_parts(response_parts, body))
    }

    /// The headers sent: the caller's without the ones the host sets, then `Host` from the
    /// URI, the rule's secret headers (replacing the caller's of the same name), and
    /// `Connection: close`.
    async fn headers(&self, caller: &HeaderMap, rule: &NetworkRule, target: &Target) -> Result<HeaderMap, NetError> {
        let mut named_by_connection: Vec<HeaderName> = Vec::new();
        for value in caller.get_all(header::CONNECTION) {
            for name in value.to_str().unwrap_or_default().split(',') {
                if let Ok(name) = HeaderName::from_bytes(name.trim().as_bytes()) {
                    named_by_connection.push(name);
                }
            }
        }
        let mut headers = HeaderMap::new();
        for (name, value) in caller {
            let is_stripped = STRIPPED.contains(name)
                || named_by_connection.contains(name)
                || name.as_str() == "keep-alive"
                || name.as_str() == "proxy-connection";
            if !is_stripped {
                headers.append(name.clone(), value.clone());
            }
        }
        let host_value = HeaderValue::from_str(&target.authority)
            .map_err(|error| NetError::InvalidRequest { uri: target.display.clone(), reason: error.to_string() })?;
        headers.insert(header::HOST, host_value);
        for secret in &rule.headers {
            let name = HeaderName::from_bytes(secret.name.as_bytes()).map_err(|_| NetError::Secret {
                rule: rule.id.clone(),
                header: secret.name.clone(),
                reason: "its name is not a header name".to_owned(),
            })?;
            headers.insert(name, self.secret_value(rule, secret).await?);
        }
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        Ok(headers)
    }

    /// A secret header's value, read now from the host's environment or file; marked
    /// sensitive, and never put in an error.
    async fn secret_value(&self, rule: &NetworkRule, secret: &SecretHeader) -> Result<HeaderValue, NetError> {
        let failure = |reason: String| NetError::Secret { rule: rule.id.clone(), header: secret.name.clone(), reason };
        let value = match &secret.source {
            SecretSource::Env(variable) => std::env::var(variable)
                .map_err(|_| failure(format!("the host's environment variable `{variable}` is not set (or not UTF-8)")))?,
            SecretSource::File(file) => {
                let path = match &self.shared.secret_directory {
                    Some(directory) => directory.join(file),
                    None => PathBuf::from(file),
                };
                tokio::fs::read_to_string(&path)
                    .await
                    .map_err(|error| failure(format!("the file it names could not be read ({})", error.kind())))?
            }
        };
        let value = value.strip_suffix('\n').map_or(value.as_str(), |value| value.strip_suffix('\r').unwrap_or(value));
        let mut header = HeaderValue::from_str(&format!("{}{value}", secret.prefix))
            .map_err(|_| failure("its value has characters a header cannot carry".to_owned()))?;
        header.set_sensitive(true);
        Ok(header)
    }
}

/// Where a URI points: scheme, normalised host, port, and the `Host` header for it.
struct Target {
    scheme: Scheme,
    host: String,
    port: u16,
    authority: String,
    display: String,
}

impl Target {
    fn parse(uri: &Uri) -> Result<Target, NetError> {
        let display = uri.to_string();
        let invalid = |reason: &str| NetError::InvalidRequest { uri: display.clone(), reason: reason.to_owned() };
        let scheme_text =
            uri.scheme_str().ok_or_else(|| invalid("it names no scheme; write an absolute URI such as `https://example.com/`"))?;
        let scheme = Scheme::parse(scheme_text).ok_or_else(|| NetError::UnsupportedScheme { scheme: scheme_text.to_owned() })?;
        let authority = uri.authority().ok_or_else(|| invalid("it names no host; write `https://HOST/PATH`"))?;
        if authority.as_str().contains('@') {
            return Err(invalid("credentials in the URI are not sent; a network rule's `headers` can add them on the host"));
        }
        let host = toolcell_policy::normalize_host(authority.host()).map_err(|reason| invalid(&reason))?;
        let port = authority.port_u16().unwrap_or(scheme.default_port());
        Ok(Target { scheme, host, port, authority: authority.as_str().to_owned(), display })
    }
}

/// The size of `headers` on the wire (`name: value\r\n` each, and the blank line).
fn header_bytes(headers: &HeaderMap) -> usize {
    headers.iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum::<usize>() + 2
}

/// Send `request` over `io` with HTTP/1.1; the connection task ends with the response body.
async fn send_over<T, B>(
    io: T,
    request: Request<CountedBody<B>>,
) -> Result<(Response<hyper::body::Incoming>, tokio::task::JoinHandle<()>), hyper::Error>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    let task = tokio::spawn(async move {
        // Its errors reach the caller through the response or its body.
        let _ = connection.await;
    });
    let response = sender.send_request(request).await;
    match response {
        Ok(response) => Ok((response, task)),
        Err(error) => {
            task.abort();
            Err(error)
        }
    }
}

/// An error and its sources, `: `-joined.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

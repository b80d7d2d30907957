//! The commonest request of a session, answered without rmcp's session worker: a plain
//! `tools/call` of a session this process serves.
//!
//! rmcp routes every request of a session through the session's worker and answers it as an
//! event stream; for a tool call that reports nothing while it runs, that is most of the
//! service's own cost per call. A request takes this path only when rmcp would have served it
//! the same way, and everything about it is plain: a JSON-RPC request `tools/call` whose params
//! are `name` and `arguments` and nothing else (no `_meta`: no progress token, no per-request
//! protocol version), in a session of this process (one another host opened goes through rmcp,
//! which restores it) whose client has not asked for log messages, with the headers rmcp
//! checks in their plainest form (`Accept` naming both types, `Content-Type` JSON, a protocol
//! version from before 2026-07-28, a `Host` of the allowed list, no `Origin`). Anything else
//! goes to rmcp, which answers or refuses it as before.
//!
//! The answer is the JSON-RPC response as `application/json` (the transport lets a server
//! answer a request with JSON or with a stream; a whole answer needs no stream to resume).
//! `notifications/cancelled` for a call on this path cancels it, as rmcp's worker does for its
//! own, and its answer is then an event stream that ends empty (no response to a cancelled
//! request).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, JsonRpcMessage, ProtocolVersion, ServerJsonRpcMessage, ServerResult};
use tokio_util::sync::CancellationToken;

use super::{Answer, Service};
use crate::McpServer;
use crate::call::{PlainCall as Call, id_key};

/// The calls this path runs, by session, and the sessions whose clients asked for log
/// messages (their calls go through rmcp, which sends them).
#[derive(Default)]
pub(crate) struct Direct {
    /// By session, request id and a number of the call's own (a client may send two calls
    /// under one id: each is its own entry, and a cancellation of the id reaches both).
    running: Mutex<HashMap<(String, String, u64), CancellationToken>>,
    logging: Mutex<HashSet<String>>,
    /// The number the next call gets.
    next: std::sync::atomic::AtomicU64,
}

impl Direct {
    /// The client of MCP session `session` asked for log messages.
    pub(crate) fn logging(&self, session: &str) {
        self.logging.lock().unwrap_or_else(PoisonError::into_inner).insert(session.to_owned());
    }

    /// MCP session `session` ended (here or through another host): its calls are cancelled,
    /// as rmcp cancels those of the sessions it closes.
    pub(super) fn ended(&self, session: &str) {
        self.logging.lock().unwrap_or_else(PoisonError::into_inner).remove(session);
        for ((of, _, _), token) in self.running.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            if of == session {
                token.cancel();
            }
        }
    }

    /// If `body` (a `notifications/cancelled` rmcp accepted) cancels a call of `session` this
    /// path runs, cancel it.
    pub(super) fn cancel(&self, session: &str, body: &[u8]) {
        // Read as rmcp read it.
        let Ok(JsonRpcMessage::Notification(notification)) = serde_json::from_slice::<ClientJsonRpcMessage>(body) else { return };
        let ClientNotification::CancelledNotification(cancelled) = notification.notification else { return };
        let Some(id) = cancelled.params.request_id.as_ref().map(id_key) else { return };
        for ((of, call, _), token) in self.running.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            if of == session && *call == id {
                token.cancel();
            }
        }
    }

    /// The call `body` asks for, if this path may answer it (the request is a `POST` of
    /// `session`, which rmcp serves in this process).
    pub(super) fn call_of(&self, session: &str, headers: &HeaderMap, body: &[u8], allowed_hosts: &[String]) -> Option<Call> {
        if self.logging.lock().unwrap_or_else(PoisonError::into_inner).contains(session) || !plain_headers(headers, allowed_hosts) {
            return None;
        }
        Call::parse(body)
    }
}

impl Service {
    /// The client of the request whose HTTP parts are `parts` asked for log messages.
    pub(crate) fn asked_for_logs(&self, parts: Option<&http::request::Parts>) {
        if let Some(id) = super::mcp_session_id(parts.and_then(|parts| parts.headers.get(super::MCP_SESSION_ID))) {
            self.direct.logging(id);
        }
    }

    /// Run `call` in MCP session `session` for the request whose HTTP parts are `parts`, and
    /// answer it. The call runs on a task of its own, as a call of rmcp's session worker does:
    /// a client that goes away does not cut its bookkeeping short (its metrics, the check of
    /// its locks against the session's end), and it can still be cancelled.
    pub(super) async fn call_directly(self: &Arc<Self>, session: &str, parts: http::request::Parts, call: Call) -> Answer {
        let Call { id, params } = call;
        let ct = CancellationToken::new();
        let number = self.direct.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = (session.to_owned(), id_key(&id), number);
        self.direct.running.lock().unwrap_or_else(PoisonError::into_inner).insert(key.clone(), ct.clone());
        let (service, token) = (Arc::clone(self), ct.clone());
        let called = tokio::spawn(async move {
            // Out of the registry once the call ends, however its request ends.
            let _registered = Registered(Arc::clone(&service), key);
            McpServer::for_service(service).call_with(params, Some(&parts), &token, None).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(rmcp::ErrorData::internal_error("the host failed while running the call; the operator's log has the details", None))
        });
        if ct.is_cancelled() {
            // No answer to a request the client cancelled: its stream ends empty, as rmcp's do.
            let mut response = Response::new(Full::new(Bytes::new()).boxed());
            response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            return response;
        }
        let message = match called {
            Ok(result) => {
                let mut result = ServerResult::CallToolResult(result);
                result.strip_result_type_for_legacy_peer();
                ServerJsonRpcMessage::response(result, id)
            }
            Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
        };
        let body = serde_json::to_vec(&message).unwrap_or_default();
        let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
        *response.status_mut() = StatusCode::OK;
        response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// A call's place in the registry, left when it is dropped.
struct Registered(Arc<Service>, (String, String, u64));

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.direct.running.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.1);
    }
}

/// Whether `headers` are what rmcp accepts for a session's request, in their plainest form.
fn plain_headers(headers: &HeaderMap, allowed_hosts: &[String]) -> bool {
    if headers.contains_key(http::header::ORIGIN) || !host_allowed(headers, allowed_hosts) {
        return false;
    }
    let (mut json, mut stream) = (false, false);
    for value in headers.get_all(http::header::ACCEPT) {
        let Ok(value) = value.to_str() else { return false };
        for kind in value.split(',').map(str::trim) {
            if kind.contains([';', '"']) {
                return false;
            }
            json |= kind.eq_ignore_ascii_case("application/json");
            stream |= kind.eq_ignore_ascii_case("text/event-stream");
        }
    }
    let content_json = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(';').next().is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json")));
    let version_legacy = headers.get("mcp-protocol-version").is_none_or(|value| {
        ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .any(|known| *known < ProtocolVersion::V_2026_07_28 && value.as_bytes() == known.as_str().as_bytes())
    });
    json && stream && content_json && version_legacy
}

/// The hosts `serve` always accepts (rmcp is told the same).
pub(super) const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Whether the `Host` header names a loopback host or one of `allowed_hosts` (bare host names
/// or addresses: one with a port is left to rmcp), with any port.
fn host_allowed(headers: &HeaderMap, allowed_hosts: &[String]) -> bool {
    let Some(authority) = headers.get(http::header::HOST).and_then(|value| value.to_str().ok()) else { return false };
    let Ok(authority) = http::uri::Authority::try_from(authority) else { return false };
    let host = authority.host();
    let host = host.strip_prefix('[').and_then(|host| host.strip_suffix(']')).unwrap_or(host);
    LOOPBACK.into_iter().chain(allowed_hosts.iter().map(String::as_str)).any(|allowed| allowed.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::RequestId;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    const PLAIN: [(&str, &str); 4] = [
        ("host", "127.0.0.1:8080"),
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-protocol-version", "2025-06-18"),
    ];

    #[test]
    fn only_the_plainest_headers_take_the_direct_path() {
        let allowed = ["mcp.example".to_owned()];
        assert!(plain_headers(&headers(&PLAIN), &allowed));
        assert!(plain_headers(&headers(&[("host", "MCP.example"), PLAIN[1], PLAIN[2], PLAIN[3]]), &allowed));
        assert!(plain_headers(&headers(&[("host", "[::1]:1"), PLAIN[1], PLAIN[2]]), &allowed), "no version header: 2025-03-26");
        let unusual: [&[(&'static str, &'static str)]; 8] = [
            &[("host", "evil.example:8080"), PLAIN[1], PLAIN[2], PLAIN[3]],
            &[PLAIN[0], PLAIN[1], PLAIN[2], PLAIN[3], ("origin", "http://127.0.0.1:8080")],
            &[PLAIN[0], ("accept", "application/json"), PLAIN[2], PLAIN[3]],
            &[PLAIN[0], ("accept", "application/json;q=0, text/event-stream"), PLAIN[2], PLAIN[3]],
            &[PLAIN[0], ("accept", "*/*"), PLAIN[2], PLAIN[3]],
            &[PLAIN[0], PLAIN[1], ("content-type", "text/plain"), PLAIN[3]],
            &[PLAIN[0], PLAIN[1], PLAIN[2], ("mcp-protocol-version", "2026-07-28")],
            &[PLAIN[1], PLAIN[2], PLAIN[3]],
        ];
        for pairs in unusual {
            assert!(!plain_headers(&headers(pairs), &allowed), "{pairs:?}");
        }
    }

    #[test]
    fn only_a_plain_tools_call_takes_the_direct_path() {
        let direct = Direct::default();
        let allowed = [];
        let plain = headers(&PLAIN);
        let call = |body: &str| direct.call_of("s", &plain, body.as_bytes(), &allowed);
        let taken = call(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a"}}}"#);
        assert!(taken.is_some_and(|call| call.id == RequestId::Number(7) && call.params.name == "read_file"));
        for body in [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","_meta":{"progressToken":1}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"name":"read_file"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"read_file"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","arguments":[]}}"#,
            r#"[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file"}}]"#,
        ] {
            assert!(call(body).is_none(), "{body}");
        }
        direct.logging("s");
        assert!(
            call(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file"}}"#).is_none(),
            "a client asked for logs"
        );
    }
}

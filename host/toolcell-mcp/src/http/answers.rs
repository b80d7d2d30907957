//! The front door's own answers: refusals, each saying why.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};

use super::Answer;
use crate::bounds::Refusal;

/// A refusal by the front door. The request's body is left unread, so the connection closes
/// after the answer: a client must not send its next request on it (it would race the close).
pub(super) fn plain(status: StatusCode, text: String) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request over `max_bytes`: `413`, with the JSON-RPC error SDKs show their user. The
/// connection stays open if the rest of the body was `drained`.
pub(super) fn too_large(max_bytes: usize, drained: bool) -> Answer {
    let body = crate::body::too_large_message(max_bytes).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if !drained {
        response.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// rmcp's `415` to a body sent as JSON that it could not read as a JSON-RPC message (not JSON,
/// nested too deep, a batch, a repeated `id`): `400` with the JSON-RPC error a client shows,
/// `-32700` for text that is not JSON and `-32600` for JSON that is no message toolcell reads,
/// naming the request's id where it can be read.
pub(super) fn unreadable(body: &[u8]) -> Answer {
    let (code, message) = match crate::call::not_json(body) {
        Some(message) => (-32700, message),
        None => (
            -32600,
            "the request is JSON but no JSON-RPC message this server reads: send one message per request (no batch), each key once"
                .to_owned(),
        ),
    };
    let id = crate::call::leading_id(body).map_or(serde_json::Value::Null, |id| serde_json::to_value(id).unwrap_or_default());
    let text = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string();
    let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A request past one of its principal's bounds: `429`, naming the bound, with a hint to come
/// back in a second.
pub(super) fn too_many(refusal: &Refusal) -> Answer {
    let mut response = plain(StatusCode::TOO_MANY_REQUESTS, format!("Too Many Requests: {refusal}"));
    response.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

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

/// A request past one of its principal's bounds: `429`, naming the bound, with a hint to come
/// back in a second.
pub(super) fn too_many(refusal: &Refusal) -> Answer {
    let mut response = plain(StatusCode::TOO_MANY_REQUESTS, format!("Too Many Requests: {refusal}"));
    response.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

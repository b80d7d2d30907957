//! Request and answer bodies at `serve`'s front door: a request body is read whole within its
//! time and size before anything runs, and an answer body holds what its request holds (its
//! slots, its session's activity) until it is sent or dropped.

use std::any::Any;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use http::StatusCode;
use http_body_util::BodyExt as _;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame, SizeHint};

/// A request body that fails once its deadline passes before it has all arrived.
pub(crate) struct Deadline<B> {
    body: B,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl<B> Deadline<B> {
    pub(crate) fn new(body: B, timeout: Duration) -> Self {
        Deadline { body, deadline: Box::pin(tokio::time::sleep(timeout)), timeout }
    }
}

/// The error of a body that took too long.
#[derive(Debug)]
pub(crate) struct BodyTimeout(Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "the request body did not arrive within {} s (`request_body_timeout`)", self.0.as_secs())
    }
}

impl std::error::Error for BodyTimeout {}

impl<B> Body for Deadline<B>
where
    B: Body + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if self.deadline.as_mut().poll(context).is_ready() && !self.body.is_end_stream() {
            return Poll::Ready(Some(Err(Box::new(BodyTimeout(self.timeout)))));
        }
        Pin::new(&mut self.body).poll_frame(context).map(|frame| frame.map(|result| result.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Why a request body could not be read: the status and the text to answer with.
pub(crate) type Unread = (StatusCode, String);

/// The whole of `body`, at most `max_bytes` of it.
///
/// # Errors
///
/// `413` for a body larger than `max_bytes`, `408` for one that did not arrive in time, `400`
/// for one that could not be read.
pub(crate) async fn collect<B>(body: Deadline<B>, max_bytes: usize) -> Result<Bytes, Unread>
where
    B: Body + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let mut collected = BytesMut::new();
    let mut body = std::pin::pin!(body);
    while let Some(frame) = std::future::poll_fn(|context| body.as_mut().poll_frame(context)).await {
        let frame = frame.map_err(|error| {
            let status = if error.is::<BodyTimeout>() { StatusCode::REQUEST_TIMEOUT } else { StatusCode::BAD_REQUEST };
            (status, format!("{}: {error}", status.canonical_reason().unwrap_or("Bad Request")))
        })?;
        let Ok(mut data) = frame.into_data() else { continue };
        if data.remaining() > max_bytes.saturating_sub(collected.len()) {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("Payload Too Large: the request body is over {max_bytes} bytes (`max_request_bytes` in service.toml)"),
            ));
        }
        while data.has_remaining() {
            let chunk = data.chunk();
            let length = chunk.len();
            collected.extend_from_slice(chunk);
            data.advance(length);
        }
    }
    Ok(collected.freeze())
}

/// What a request body asks for, as far as the bounds care.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asks {
    /// A JSON-RPC request: its answer is an event stream.
    pub(crate) request: bool,
    /// `initialize`: a new session.
    pub(crate) initialize: bool,
}

impl Asks {
    /// What the JSON-RPC message `body` asks for (nothing, if it is not one: rmcp refuses it).
    pub(crate) fn of(body: &[u8]) -> Asks {
        #[derive(serde::Deserialize)]
        struct Message {
            method: Option<String>,
            id: Option<serde::de::IgnoredAny>,
        }
        match serde_json::from_slice::<Message>(body) {
            Ok(Message { method: Some(method), id: Some(_) }) => Asks { request: true, initialize: method == "initialize" },
            _ => Asks::default(),
        }
    }
}

/// An answer's body with what its request holds, released when the body is dropped: once it is
/// sent, or when the client goes away.
pub(crate) struct Holding {
    body: BoxBody<Bytes, Infallible>,
    _held: Box<dyn Any + Send + Sync>,
}

impl Holding {
    /// `body`, holding `held` until it is dropped.
    pub(crate) fn boxed(body: BoxBody<Bytes, Infallible>, held: impl Any + Send + Sync) -> BoxBody<Bytes, Infallible> {
        Holding { body, _held: Box::new(held) }.boxed()
    }
}

impl Body for Holding {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_told_from_notifications_and_initialize_from_the_rest() {
        let cases: [(&str, Asks); 5] = [
            (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#, Asks { request: true, initialize: false }),
            (r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#, Asks { request: true, initialize: true }),
            (r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#, Asks::default()),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, Asks::default()),
            ("not json", Asks::default()),
        ];
        for (body, asks) in cases {
            assert_eq!(Asks::of(body.as_bytes()), asks, "{body}");
        }
    }
}

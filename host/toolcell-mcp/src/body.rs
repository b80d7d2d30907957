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

/// Why a request body could not be read.
#[derive(Debug)]
pub(crate) enum Unread {
    /// Larger than `max_request_bytes` (the value); `drained` when the rest of it was read and
    /// discarded, so that the connection can carry the client's next request.
    TooLarge { max_bytes: usize, drained: bool },
    /// Not read: the status and the text to answer with.
    Failed(StatusCode, String),
}

/// How much of a body over the cap is read and discarded so that its connection stays usable
/// (a client still sending when the connection closes sees it reset, often without the answer):
/// past this, the connection is closed instead.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

/// The whole of `body`, at most `max_bytes` of it.
///
/// # Errors
///
/// [`Unread::TooLarge`] for a body larger than `max_bytes` (the rest of it read and discarded,
/// up to [`DRAIN_LIMIT`] and within the body's deadline), `408` for one that did not arrive in
/// time, `400` for one that could not be read.
pub(crate) async fn collect<B>(mut body: Deadline<B>, max_bytes: usize) -> Result<Bytes, Unread>
where
    B: Body + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let mut collected = BytesMut::new();
    let mut over = false;
    let mut discarded = 0usize;
    while let Some(frame) = std::future::poll_fn(|context| Pin::new(&mut body).poll_frame(context)).await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(_) if over => return Err(Unread::TooLarge { max_bytes, drained: false }),
            Err(error) => {
                let status = if error.is::<BodyTimeout>() { StatusCode::REQUEST_TIMEOUT } else { StatusCode::BAD_REQUEST };
                return Err(Unread::Failed(status, format!("{}: {error}", status.canonical_reason().unwrap_or("Bad Request"))));
            }
        };
        let Ok(mut data) = frame.into_data() else { continue };
        if over {
            discarded = discarded.saturating_add(data.remaining());
            if discarded > DRAIN_LIMIT {
                return Err(Unread::TooLarge { max_bytes, drained: false });
            }
            continue;
        }
        if data.remaining() > max_bytes.saturating_sub(collected.len()) {
            over = true;
            collected = BytesMut::new();
            continue;
        }
        while data.has_remaining() {
            let chunk = data.chunk();
            let length = chunk.len();
            collected.extend_from_slice(chunk);
            data.advance(length);
        }
    }
    if over {
        return Err(Unread::TooLarge { max_bytes, drained: true });
    }
    Ok(collected.freeze())
}

/// The JSON-RPC error answering a request whose body is over `max_bytes`: what SDKs show
/// their user (its `id` is null: the request's own was never read).
pub(crate) fn too_large_message(max_bytes: usize) -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": crate::REQUEST_TOO_LARGE.0,
            "message": format!(
                "the request is over {max_bytes} bytes, the most this service reads (`max_request_bytes` in its service.toml): \
                 send less at once (a large file in parts: `write_file` then `insert_text` or `edit_file`), or ask the operator \
                 to raise `max_request_bytes`"
            ),
            "data": {"max_request_bytes": max_bytes},
        },
    })
}

/// What a request body asks for, as far as the bounds care.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asks {
    /// A JSON-RPC request: its answer is an event stream.
    pub(crate) request: bool,
    /// `initialize`: a new session.
    pub(crate) initialize: bool,
    /// `notifications/cancelled`: a request of the session is cancelled.
    pub(crate) cancel: bool,
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
            Ok(Message { method: Some(method), id: Some(_) }) => Asks { request: true, initialize: method == "initialize", cancel: false },
            Ok(Message { method: Some(method), id: None }) => Asks { cancel: method == "notifications/cancelled", ..Asks::default() },
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

/// How long the answer to a JSON-RPC request waits for its first events before its head is
/// sent.
const GATHER_WITHIN: Duration = Duration::from_millis(5);

/// The event stream `body` answering a request, with the events it has ready within
/// [`GATHER_WITHIN`] (the stream's priming event, and the answer of a call that quick, with the
/// stream's end) gathered in front: the head and they then leave in one write and reach the
/// client in one read, where each would take a write and a wake-up of its own. A slower call's
/// stream goes on as it came, [`GATHER_WITHIN`] later.
pub(crate) async fn gathered(mut body: BoxBody<Bytes, Infallible>) -> BoxBody<Bytes, Infallible> {
    let deadline = tokio::time::Instant::now() + GATHER_WITHIN;
    let mut ready = BytesMut::new();
    let mut events = 0usize;
    let mut trailers = None;
    let ended = loop {
        // The priming event and one message are waited for; after them, only what is ready.
        let frame = if events < 2 {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(frame) => frame,
                Err(_) => break false,
            }
        } else {
            match std::future::poll_fn(|context| Poll::Ready(Pin::new(&mut body).poll_frame(context))).await {
                Poll::Ready(frame) => frame,
                Poll::Pending => break false,
            }
        };
        match frame {
            None => break true,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    ready.extend_from_slice(&data);
                    events += 1;
                }
                Err(frame) => {
                    trailers = Some(frame);
                    break false;
                }
            },
            Some(Err(never)) => match never {},
        }
    };
    Gathered { ready: Some(ready.freeze()).filter(|ready| !ready.is_empty()), trailers, rest: (!ended).then_some(body) }.boxed()
}

/// An answer's body: what was gathered, then the rest of the stream (if it had not ended).
struct Gathered {
    ready: Option<Bytes>,
    trailers: Option<Frame<Bytes>>,
    rest: Option<BoxBody<Bytes, Infallible>>,
}

impl Body for Gathered {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(ready) = self.ready.take() {
            return Poll::Ready(Some(Ok(Frame::data(ready))));
        }
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        match &mut self.rest {
            Some(rest) => Pin::new(rest).poll_frame(context),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ready.is_none() && self.trailers.is_none() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.rest, &self.trailers, &self.ready) {
            // All of it is here: its length is known.
            (None, None, ready) => SizeHint::with_exact(ready.as_ref().map_or(0, |ready| ready.len() as u64)),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_told_from_notifications_and_initialize_from_the_rest() {
        let cases: [(&str, Asks); 6] = [
            (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#, Asks { request: true, ..Asks::default() }),
            (r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#, Asks { request: true, initialize: true, cancel: false }),
            (r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#, Asks { cancel: true, ..Asks::default() }),
            (r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, Asks::default()),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, Asks::default()),
            ("not json", Asks::default()),
        ];
        for (body, asks) in cases {
            assert_eq!(Asks::of(body.as_bytes()), asks, "{body}");
        }
    }
}

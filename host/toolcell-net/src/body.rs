//! The bodies that count bytes as they stream: the request's (against the call's send budget)
//! and the response's (against the receive budget and the call's deadline). The response body
//! finishes the request's record when it ends, fails, or is dropped.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};

use crate::error::{Limit, NetError};
use crate::outbound::Budget;
use crate::record::RequestRecord;

pub(crate) type BoxError = Box<dyn StdError + Send + Sync>;

/// What one request has sent and received so far, and why it was stopped.
#[derive(Debug, Default)]
pub(crate) struct Exchange {
    pub(crate) sent: AtomicU64,
    pub(crate) received: AtomicU64,
    /// Set when a body hit a bound; a hyper error after it is reported as this.
    pub(crate) stopped: Mutex<Option<NetError>>,
}

impl Exchange {
    pub(crate) fn stop(&self, error: NetError) {
        if let Ok(mut stopped) = self.stopped.lock() {
            stopped.get_or_insert(error);
        }
    }

    pub(crate) fn stopped(&self) -> Option<NetError> {
        self.stopped.lock().ok().and_then(|stopped| stopped.clone())
    }
}

/// The caller's request body, counted against the call's send budget as it streams.
pub(crate) struct CountedBody<B> {
    inner: Pin<Box<B>>,
    budget: Arc<Budget>,
    exchange: Arc<Exchange>,
    host: String,
}

impl<B> CountedBody<B> {
    pub(crate) fn new(inner: B, budget: Arc<Budget>, exchange: Arc<Exchange>, host: String) -> CountedBody<B> {
        CountedBody { inner: Box::pin(inner), budget, exchange, host }
    }
}

impl<B> Body for CountedBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let frame = match ready!(self.inner.as_mut().poll_frame(context)) {
            None => return Poll::Ready(None),
            Some(Err(error)) => {
                let error: BoxError = error.into();
                self.exchange.stop(NetError::RequestBody { host: self.host.clone(), reason: error.to_string() });
                return Poll::Ready(Some(Err(error)));
            }
            Some(Ok(frame)) => frame,
        };
        if let Some(data) = frame.data_ref() {
            let length = data.remaining() as u64;
            self.exchange.sent.fetch_add(length, Ordering::Relaxed);
            if let Err(detail) = self.budget.take_sent(length) {
                let error = NetError::LimitReached { limit: Limit::SentBytes, host: self.host.clone(), detail };
                self.exchange.stop(error.clone());
                return Poll::Ready(Some(Err(Box::new(error))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Where a finished record goes: the call's list.
pub(crate) type RecordSink = Arc<Mutex<Vec<RequestRecord>>>;

pub(crate) fn push_record(sink: &RecordSink, record: RequestRecord) {
    if let Ok(mut records) = sink.lock() {
        records.push(record);
    }
}

/// A response body from the network: counted against the call's receive budget, stopped at
/// the call's deadline, and holding the connection (and its slot in the call's
/// connections-at-once bound) until it ends or is dropped.
pub struct ResponseBody {
    inner: Incoming,
    budget: Arc<Budget>,
    exchange: Arc<Exchange>,
    deadline: Pin<Box<Sleep>>,
    host: String,
    started: Instant,
    /// `None` once the record is finished.
    record: Option<RequestRecord>,
    sink: RecordSink,
    connection: JoinHandle<()>,
    _permit: OwnedSemaphorePermit,
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("ResponseBody").field("host", &self.host).field("finished", &self.record.is_none()).finish()
    }
}

pub(crate) struct ResponseParts {
    pub(crate) budget: Arc<Budget>,
    pub(crate) exchange: Arc<Exchange>,
    pub(crate) deadline: Instant,
    pub(crate) host: String,
    pub(crate) started: Instant,
    pub(crate) record: RequestRecord,
    pub(crate) sink: RecordSink,
    pub(crate) connection: JoinHandle<()>,
    pub(crate) permit: OwnedSemaphorePermit,
}

impl ResponseBody {
    pub(crate) fn new(inner: Incoming, parts: ResponseParts) -> ResponseBody {
        ResponseBody {
            inner,
            budget: parts.budget,
            exchange: parts.exchange,
            deadline: Box::pin(tokio::time::sleep_until(parts.deadline)),
            host: parts.host,
            started: parts.started,
            record: Some(parts.record),
            sink: parts.sink,
            connection: parts.connection,
            _permit: parts.permit,
        }
    }

    /// Put the record on the call's list, once, with `reason` (`None`: complete).
    fn finish(&mut self, reason: Option<String>) {
        if let Some(mut record) = self.record.take() {
            record.bytes_sent = self.exchange.sent.load(Ordering::Relaxed);
            record.bytes_received = self.exchange.received.load(Ordering::Relaxed);
            record.elapsed_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            record.reason = reason;
            push_record(&self.sink, record);
        }
    }

    fn fail(&mut self, error: NetError) -> Poll<Option<Result<Frame<Bytes>, NetError>>> {
        self.finish(Some(error.to_string()));
        self.connection.abort();
        Poll::Ready(Some(Err(error)))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = NetError;

    fn poll_frame(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, NetError>>> {
        let this = &mut *self;
        if this.record.is_none() {
            return Poll::Ready(None);
        }
        if this.deadline.as_mut().poll(context).is_ready() {
            let detail = format!("the call's requests took longer than {} ms together", this.budget.limits.total_time.as_millis());
            return this.fail(NetError::LimitReached { limit: Limit::TotalTime, host: this.host.clone(), detail });
        }
        match ready!(Pin::new(&mut this.inner).poll_frame(context)) {
            None => {
                this.finish(None);
                Poll::Ready(None)
            }
            Some(Err(error)) => {
                let error = NetError::Http { host: this.host.clone(), reason: crate::outbound::error_chain(&error) };
                this.fail(error)
            }
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let length = data.len() as u64;
                    this.exchange.received.fetch_add(length, Ordering::Relaxed);
                    if let Err(detail) = this.budget.take_received(length) {
                        return this.fail(NetError::LimitReached { limit: Limit::ReceivedBytes, host: this.host.clone(), detail });
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.record.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        if self.record.is_some() {
            if self.inner.is_end_stream() {
                self.finish(None);
            } else {
                self.finish(Some("the caller dropped the response body before its end".to_owned()));
            }
        }
        self.connection.abort();
    }
}

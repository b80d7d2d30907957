//! MCP over stdin and stdout, with the commonest request answered without rmcp's service loop:
//! a plain `tools/call` of an initialized client.
//!
//! rmcp reads each message on the async thread, hands a request to a task of its own, which
//! hands the call to the blocking pool and waits for it, and writes the answer back from the
//! service loop: for a call that reports nothing while it runs, those hand-offs are most of
//! what a call costs beyond the call itself. Here a thread of its own reads the client's
//! messages; a request takes the direct path only when rmcp would have served it the same way
//! and everything about it is plain: a JSON-RPC request `tools/call` whose params are `name`
//! and `arguments` and nothing else (no `_meta`: no progress token, no per-request protocol
//! version), after the client's `initialize` and `notifications/initialized` (so the protocol
//! version is one the handshake negotiated, before 2026-07-28), from a client that has not
//! asked for log messages (`logging/setLevel`: from then on every call goes through rmcp,
//! which sends them). The call then runs on the thread that read it (or, with many in flight, on
//! the blocking pool), which writes its answer to stdout itself, while another thread reads on
//! ([`Readers`]). Every other message goes to rmcp as it came, through an in-process pipe, and
//! rmcp's messages to stdout one whole line at a time, so the two never interleave.
//!
//! `notifications/cancelled` for a call on this path stops it, as rmcp stops its own, and no
//! answer is sent for it. When the client closes stdin, calls in flight have
//! [`DRAIN`] to finish and answer, as rmcp's have; the rest are then stopped and rolled back,
//! and the server returns once they have.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::ServiceExt as _;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;
use toolcell_host::Session;

use crate::call::{PlainCall, id_key};
use crate::{Binding, McpServer, ServeError, call, roots};

mod readers;
use readers::{Readers, Started};

/// How long calls in flight have to finish once the client closed stdin (rmcp's own drain).
const DRAIN: Duration = Duration::from_secs(5);

/// Serve `server` over stdin and stdout until the client closes stdin.
pub(crate) async fn serve(server: McpServer) -> Result<(), ServeError> {
    let sessions = match &server.binding {
        Binding::Session { session, .. } => Sessions::One(session.clone()),
        Binding::Roots(roots) => Sessions::Roots(Arc::clone(roots)),
        Binding::Service(_) => return served(server.serve(rmcp::transport::stdio_pipes()).await).await,
    };
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (their_read, their_write) = tokio::io::split(theirs);
    let (our_read, mut our_write) = tokio::io::split(ours);
    let calls = Arc::new(Calls::default());
    let handshake = Arc::new(Handshake::default());
    // Whole lines for rmcp, in the order they came. Bounded, as a line may be 16 MiB: a client
    // that outruns rmcp waits, and no more than a few lines are held at once.
    let (lines, mut to_rmcp) = tokio::sync::mpsc::channel::<Vec<u8>>(2);
    // stdout gone: rmcp stops too, as it did when it wrote to stdout itself, and no call starts.
    let stopped = CancellationToken::new();
    let reader = Reader {
        sessions,
        calls: Arc::clone(&calls),
        handshake: Arc::clone(&handshake),
        runtime: tokio::runtime::Handle::current(),
        stopped: stopped.clone(),
        lines,
        state: State::default(),
        input: std::io::BufReader::with_capacity(1 << 16, std::io::stdin()),
        line: Vec::new(),
    };
    Readers::start(reader).map_err(|error| ServeError { reason: format!("cannot start the thread that reads stdin: {error}") })?;
    let forward = tokio::spawn(async move {
        while let Some(line) = to_rmcp.recv().await {
            if our_write.write_all(&line).await.is_err() {
                break;
            }
        }
        // stdin ended: so does rmcp's input.
        let _ = our_write.shutdown().await;
    });
    let stop = stopped.clone();
    let pump_calls = Arc::clone(&calls);
    let pump = tokio::spawn(async move {
        let mut from_rmcp = tokio::io::BufReader::new(our_read);
        let mut line = Vec::new();
        loop {
            line.clear();
            match from_rmcp.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) if write_line(&line).is_err() => {
                    pump_calls.close();
                    stop.cancel();
                    break;
                }
                Ok(_) => handshake.saw(&line),
            }
        }
    });
    let result = served(server.serve_with_ct((their_read, their_write), stopped).await).await;
    // rmcp has ended and dropped its side of the pipe: what it wrote is on stdout once the pump
    // has copied it.
    let _ = pump.await;
    forward.abort();
    let waiting = Arc::clone(&calls);
    let _ = tokio::task::spawn_blocking(move || waiting.close_and_wait(DRAIN)).await;
    result
}

/// The end of rmcp's serving, as [`crate::serve_stdio`] reports it.
async fn served<S: rmcp::Service<rmcp::RoleServer>, E: std::fmt::Display>(
    running: Result<rmcp::service::RunningService<rmcp::RoleServer, S>, E>,
) -> Result<(), ServeError> {
    let running = running.map_err(|error| ServeError { reason: error.to_string() })?;
    running.waiting().await.map_err(|error| ServeError { reason: error.to_string() })?;
    Ok(())
}

/// Write one whole message line to stdout (the lock keeps lines whole across threads).
fn write_line(line: &[u8]) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(line)?;
    stdout.flush()
}

/// Whether rmcp has answered the client's `initialize`: until it has, every request goes to
/// rmcp, so that nothing is answered before the handshake (a client may send its first calls
/// without waiting for the answer).
#[derive(Default)]
struct Handshake {
    /// The id of the client's `initialize`, as [`id_key`] writes it.
    request: Mutex<Option<String>>,
    answered: AtomicBool,
}

impl Handshake {
    /// rmcp wrote `line`: is it the answer to `initialize`?
    fn saw(&self, line: &[u8]) {
        if self.answered.load(Ordering::Acquire) {
            return;
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            id: Option<RequestId>,
            result: Option<serde::de::IgnoredAny>,
        }
        let Ok(Answer { id: Some(id), result: Some(_) }) = serde_json::from_slice::<Answer>(line) else { return };
        if self.request.lock().unwrap_or_else(PoisonError::into_inner).as_deref() == Some(id_key(&id).as_str()) {
            self.answered.store(true, Ordering::Release);
        }
    }
}

/// Where a direct call's session comes from.
enum Sessions {
    One(Session),
    /// The client's first root: a call takes the direct path once it is known.
    Roots(Arc<roots::FromRoots>),
}

/// What the reader has seen of the connection.
#[derive(Default)]
struct State {
    /// The client sent `initialize`,
    initializing: bool,
    /// and then `notifications/initialized`.
    initialized: bool,
    /// The client asked for log messages, or sent what this path does not read (a batch):
    /// every call goes through rmcp from then on.
    through_rmcp: bool,
}

/// The thread that reads the client's messages.
struct Reader {
    sessions: Sessions,
    calls: Arc<Calls>,
    handshake: Arc<Handshake>,
    runtime: tokio::runtime::Handle,
    /// Cancelled when stdout is gone.
    stopped: CancellationToken,
    lines: tokio::sync::mpsc::Sender<Vec<u8>>,
    state: State,
    /// stdin (not its lock, which cannot pass between threads; reads larger than stdin's own
    /// buffer bypass it).
    input: std::io::BufReader<std::io::Stdin>,
    /// The line being read.
    line: Vec<u8>,
}

impl Reader {
    /// Read the client's messages until one is a call this path runs (returned, registered,
    /// to be run by the caller) or stdin ends (`None`; no call starts on this path any more,
    /// and dropping the reader ends rmcp's input).
    fn next_call(&mut self) -> Option<Started> {
        loop {
            let line = &mut self.line;
            match read_line(&mut self.input, line) {
                Line::Whole => {}
                // Dropped, as rmcp drops a line this long; but a request whose id comes before
                // the cut (`line` holds the line's start) is answered, so its client does not
                // wait for ever.
                Line::TooLong => {
                    tracing::error!(max_line_length = MAX_LINE_BYTES, "Incoming message exceeded the maximum line length, discarding it");
                    if let Some(id) = call::leading_id(line) {
                        let message = format!(
                            "the request is over {} MiB, the longest message toolcell mcp reads; send less in one request (a large file in parts, for example)",
                            MAX_LINE_BYTES >> 20
                        );
                        let error = ServerJsonRpcMessage::error(rmcp::ErrorData::invalid_request(message, None), Some(id));
                        if let Ok(mut text) = serde_json::to_vec(&error) {
                            text.push(b'\n');
                            if write_line(&text).is_err() {
                                break;
                            }
                        }
                    }
                    continue;
                }
                Line::End => break,
            }
            let line = std::mem::take(&mut self.line);
            if let Some((request, session)) = self.direct(&line) {
                self.line = line;
                match self.start(request, session) {
                    Some(started) => return Some(started),
                    None => continue,
                }
            }
            // A line that is not JSON is dropped, as rmcp drops it; but a request whose id can
            // be read is answered with the parse error, so its client does not wait for ever.
            if !self.observe(&line)
                && let Some(answer) = parse_error_answer(&line)
            {
                self.line = line;
                if write_line(&answer).is_err() {
                    break;
                }
                continue;
            }
            if self.lines.blocking_send(line).is_err() {
                break;
            }
        }
        self.calls.close();
        None
    }

    /// The request `line` holds and its session, if this path answers it.
    fn direct(&self, line: &[u8]) -> Option<(PlainCall, Session)> {
        if !self.state.initialized || self.state.through_rmcp || !self.handshake.answered.load(Ordering::Acquire) {
            return None;
        }
        let request = PlainCall::parse(line)?;
        let session = match &self.sessions {
            Sessions::One(session) => session.clone(),
            Sessions::Roots(roots) => roots.known()?,
        };
        Some((request, session))
    }

    /// Note what `line` (for rmcp) changes for this path, reading it as rmcp does (a leading
    /// byte-order mark is skipped, and a message rmcp cannot read changes nothing).
    /// Whether rmcp reads it as a message.
    fn observe(&mut self, line: &[u8]) -> bool {
        let line = line.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(line);
        if line.iter().find(|byte| !byte.is_ascii_whitespace()) == Some(&b'[') {
            self.state.through_rmcp = true;
            return true;
        }
        let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(line) else { return false };
        match message {
            JsonRpcMessage::Request(request) => match request.request {
                ClientRequest::InitializeRequest(_) => {
                    self.state.initializing = true;
                    *self.handshake.request.lock().unwrap_or_else(PoisonError::into_inner) = Some(id_key(&request.id));
                }
                ClientRequest::SetLevelRequest(_) => self.state.through_rmcp = true,
                _ => {}
            },
            JsonRpcMessage::Notification(notification) => match notification.notification {
                ClientNotification::InitializedNotification(_) if self.state.initializing => self.state.initialized = true,
                ClientNotification::CancelledNotification(cancelled) => {
                    if let Some(id) = cancelled.params.request_id {
                        self.calls.cancel(&id_key(&id));
                    }
                }
                _ => {}
            },
            _ => {}
        }
        true
    }

    /// Register `request` in `session` as a call of this path (`None` once stdin has ended).
    fn start(&self, request: PlainCall, session: Session) -> Option<Started> {
        let PlainCall { id, params } = request;
        let cancel = Arc::new(AtomicBool::new(false));
        let entry = self.calls.enter(id_key(&id), Arc::clone(&cancel))?;
        Some(Started { id, params, session, cancel, entry, calls: Arc::clone(&self.calls), stopped: self.stopped.clone() })
    }
}

/// The answer (a line) to `line` if it is not JSON but a request's id can be read from it: a
/// parse error naming what is wrong, so that the client is told instead of waiting.
fn parse_error_answer(line: &[u8]) -> Option<Vec<u8>> {
    let message = call::not_json(line.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(line))?;
    let id = call::leading_id(line)?;
    let answer = ServerJsonRpcMessage::error(rmcp::ErrorData::parse_error(message, None), Some(id));
    let mut text = serde_json::to_vec(&answer).ok()?;
    text.push(b'\n');
    Some(text)
}

/// How much of a line over [`MAX_LINE_BYTES`] is kept, to find its request's id.
const KEPT_OF_TOO_LONG: usize = 64 << 10;

/// The longest message line read, as rmcp's stdio transport bounds it: a longer one is dropped.
const MAX_LINE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// What [`read_line`] read.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A whole line, ending with `\n`.
    Whole,
    /// A line over [`MAX_LINE_BYTES`], skipped to its end without being kept.
    TooLong,
    /// The end of input (a last line without `\n` is no message, as for rmcp) or a read error.
    End,
}

/// Read the next line of `input` into `line` (cleared first), never holding more than
/// [`MAX_LINE_BYTES`] of it. Of a longer line, `line` keeps the first [`KEPT_OF_TOO_LONG`]
/// bytes.
fn read_line(input: &mut impl std::io::BufRead, line: &mut Vec<u8>) -> Line {
    line.clear();
    let mut too_long = false;
    loop {
        let (taken, ended) = {
            let available = match input.fill_buf() {
                Ok(available) => available,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Line::End,
            };
            if available.is_empty() {
                return Line::End;
            }
            let newline = available.iter().position(|byte| *byte == b'\n');
            let taken = newline.map_or(available.len(), |at| at + 1);
            if too_long || line.len().saturating_add(taken) > MAX_LINE_BYTES {
                if !too_long {
                    let kept = available[..taken].iter().take(KEPT_OF_TOO_LONG.saturating_sub(line.len()));
                    line.extend(kept);
                    line.truncate(KEPT_OF_TOO_LONG);
                }
                too_long = true;
            } else {
                line.extend_from_slice(&available[..taken]);
            }
            (taken, newline.is_some())
        };
        input.consume(taken);
        if ended {
            return if too_long { Line::TooLong } else { Line::Whole };
        }
    }
}

/// The calls this path runs.
#[derive(Default)]
struct Calls {
    running: Mutex<Running>,
    /// Told each time a call ends.
    ended: Condvar,
}

#[derive(Default)]
struct Running {
    /// By a number of the call's own: its request id and its cancel flag (a client may send
    /// two calls under one id; a cancellation of the id reaches both).
    calls: HashMap<u64, (String, Arc<AtomicBool>)>,
    next: u64,
    /// When stdin ended (or stdout went): no call starts any more.
    closed: Option<Instant>,
}

impl Calls {
    fn running(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Register a call of request `id`, unless stdin has ended.
    fn enter(self: &Arc<Self>, id: String, cancel: Arc<AtomicBool>) -> Option<Entry> {
        let mut running = self.running();
        if running.closed.is_some() {
            return None;
        }
        let number = running.next;
        running.next += 1;
        running.calls.insert(number, (id, cancel));
        Some(Entry(Arc::clone(self), number))
    }

    /// Stop the calls of request `id`.
    fn cancel(&self, id: &str) {
        for (of, cancel) in self.running().calls.values() {
            if of == id {
                cancel.store(true, Ordering::Relaxed);
            }
        }
    }

    fn close(&self) {
        self.running().closed.get_or_insert_with(Instant::now);
    }

    /// Once no call can start, wait until `drain` after stdin ended for the calls in flight
    /// (rmcp drains its own meanwhile); stop those still running then, and wait until they
    /// have ended (rolled back).
    fn close_and_wait(&self, drain: Duration) {
        let mut running = self.running();
        let deadline = *running.closed.get_or_insert_with(Instant::now) + drain;
        while !running.calls.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                for (_, cancel) in running.calls.values() {
                    cancel.store(true, Ordering::Relaxed);
                }
                drop(self.ended.wait_while(running, |running| !running.calls.is_empty()).unwrap_or_else(PoisonError::into_inner));
                return;
            }
            running = self.ended.wait_timeout(running, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

/// A call's place in [`Calls`], left when it is dropped.
struct Entry(Arc<Calls>, u64);

impl Drop for Entry {
    fn drop(&mut self) {
        let mut running = self.0.running();
        running.calls.remove(&self.1);
        // Only the end of the serving waits for calls to end, and only once it has closed.
        let waited_for = running.closed.is_some();
        drop(running);
        if waited_for {
            self.0.ended.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_whole_bounded_and_a_last_one_without_its_newline_is_no_message() {
        let mut text = b"{\"a\":1}\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 3 * MAX_LINE_BYTES));
        text.extend(b"\n{\"b\":2}\n{\"c\"");
        let mut input = std::io::BufReader::with_capacity(4096, text.as_slice());
        let mut line = Vec::new();
        assert_eq!(read_line(&mut input, &mut line), Line::Whole);
        assert_eq!(line, b"{\"a\":1}\n");
        assert_eq!(read_line(&mut input, &mut line), Line::TooLong);
        assert!(line.capacity() <= 2 * MAX_LINE_BYTES, "the long line was never held whole");
        assert_eq!(line.len(), KEPT_OF_TOO_LONG, "its start is kept");
        assert_eq!(read_line(&mut input, &mut line), Line::Whole);
        assert_eq!(line, b"{\"b\":2}\n");
        assert_eq!(read_line(&mut input, &mut line), Line::End);
    }
}

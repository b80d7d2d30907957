//! The operator's log of `serve`: one line on stderr for each request refused at the front
//! door (`401`, `403`, `413`, `429`) and for each outage and recovery of the shared store.
//!
//! A flood of refusals must not flood the log: of each [`Event`] kind, at most
//! [`LINES_PER_INTERVAL`] lines are written per [`INTERVAL`]; the rest are counted, and one
//! line says how many were left out once the interval is over. No line holds a token or an
//! `Authorization` header: what a line says comes from the service (its reasons and bounds),
//! never from the request's headers.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How many lines of one kind are written per [`INTERVAL`].
pub const LINES_PER_INTERVAL: usize = 5;
/// The interval over which [`LINES_PER_INTERVAL`] holds.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// What a line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// `401`: no token, or one the service does not know.
    Unauthorized,
    /// `403`: a foreign `Host` or `Origin`.
    Forbidden,
    /// `413`: a body over `max_request_bytes`.
    TooLarge,
    /// `429`: a principal past one of its bounds.
    TooMany,
    /// The shared store cannot be reached.
    StoreDown,
    /// The shared store is back.
    StoreBack,
    /// `503`: the OAuth issuer's keys cannot be fetched.
    Unavailable,
    /// A fetch of the OAuth issuer's keys failed.
    IssuerDown,
}

impl Event {
    /// How the summary line names lines of this kind.
    fn plural(self) -> &'static str {
        match self {
            Event::Unauthorized => "401 refusals",
            Event::Forbidden => "403 refusals",
            Event::TooLarge => "413 refusals",
            Event::TooMany => "429 refusals",
            Event::StoreDown => "store outage lines",
            Event::StoreBack => "store recovery lines",
            Event::Unavailable => "503 refusals",
            Event::IssuerDown => "issuer outage lines",
        }
    }
}

/// The lines of one kind in the current interval.
struct Window {
    started: Instant,
    written: usize,
    suppressed: usize,
}

/// Where the lines go, rate-limited per kind.
pub struct OperatorLog {
    windows: Mutex<HashMap<Event, Window>>,
    write: Box<dyn Fn(&str) + Send + Sync>,
    /// Told every event, before the rate limit (the metrics).
    count: std::sync::OnceLock<Box<dyn Fn(Event) + Send + Sync>>,
}

impl std::fmt::Debug for OperatorLog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("OperatorLog")
    }
}

impl Default for OperatorLog {
    fn default() -> Self {
        OperatorLog::new(|line| {
            let _ = crate::writeln_stderr(line);
        })
    }
}

impl OperatorLog {
    /// A log whose lines are `tracing` events (target `toolcell::operator`, level warn), for
    /// a subscriber that writes JSON, say.
    #[must_use]
    pub fn traced() -> Self {
        OperatorLog::new(|line| tracing::warn!(target: "toolcell::operator", "{line}"))
    }

    /// A log whose lines go to `write` (the default: stderr).
    pub fn new(write: impl Fn(&str) + Send + Sync + 'static) -> Self {
        OperatorLog { windows: Mutex::new(HashMap::new()), write: Box::new(write), count: std::sync::OnceLock::new() }
    }

    /// Write `text` as a line of kind `event`, unless this interval already had its lines of it.
    pub fn note(&self, event: Event, text: &str) {
        self.note_at(event, text, Instant::now());
    }

    /// Tell `count` every event from now on, before the rate limit (only the first one set is
    /// kept).
    pub fn count_with(&self, count: impl Fn(Event) + Send + Sync + 'static) {
        let _ = self.count.set(Box::new(count));
    }

    fn note_at(&self, event: Event, text: &str, now: Instant) {
        if let Some(count) = self.count.get() {
            count(event);
        }
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let window = windows.entry(event).or_insert(Window { started: now, written: 0, suppressed: 0 });
        if now.duration_since(window.started) >= INTERVAL {
            self.summarize(event, window);
            *window = Window { started: now, written: 0, suppressed: 0 };
        }
        if window.written < LINES_PER_INTERVAL {
            window.written += 1;
            (self.write)(&format!("toolcell serve: {text}"));
        } else {
            window.suppressed += 1;
        }
    }

    /// Say how many lines were left out in the intervals that are over (called now and then,
    /// so that the count of a flood that stopped is told too).
    pub fn flush(&self) {
        self.flush_at(Instant::now());
    }

    fn flush_at(&self, now: Instant) {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        for (event, window) in windows.iter_mut() {
            if now.duration_since(window.started) >= INTERVAL && window.suppressed > 0 {
                self.summarize(*event, window);
                window.suppressed = 0;
            }
        }
    }

    fn summarize(&self, event: Event, window: &Window) {
        if window.suppressed > 0 {
            (self.write)(&format!(
                "toolcell serve: {} more {} in {} s not shown (at most {LINES_PER_INTERVAL} of each kind per {} s)",
                window.suppressed,
                event.plural(),
                INTERVAL.as_secs(),
                INTERVAL.as_secs()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn each_kind_gets_its_lines_per_interval_and_the_rest_are_counted() {
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = Arc::clone(&lines);
        let log = OperatorLog::new(move |line| seen.lock().unwrap_or_else(PoisonError::into_inner).push(line.to_owned()));
        let start = Instant::now();
        for _ in 0..20 {
            log.note_at(Event::Unauthorized, "401 refused", start);
        }
        log.note_at(Event::TooMany, "429 refused", start);
        log.flush_at(start + Duration::from_secs(1));
        let taken = |lines: &Mutex<Vec<String>>| std::mem::take(&mut *lines.lock().unwrap_or_else(PoisonError::into_inner));
        let first = taken(&lines);
        assert_eq!(first.iter().filter(|line| line.ends_with("401 refused")).count(), LINES_PER_INTERVAL);
        assert_eq!(first.len(), LINES_PER_INTERVAL + 1, "{first:?}");
        // Once the interval is over, the count of what was left out is told, once.
        log.flush_at(start + INTERVAL);
        log.flush_at(start + INTERVAL + Duration::from_secs(1));
        assert_eq!(taken(&lines), ["toolcell serve: 15 more 401 refusals in 10 s not shown (at most 5 of each kind per 10 s)".to_owned()]);
        // A new interval has its lines again.
        log.note_at(Event::Unauthorized, "401 refused", start + INTERVAL * 2);
        assert_eq!(taken(&lines), ["toolcell serve: 401 refused".to_owned()]);
    }
}

//! The one connection of a store: opened on first use, checked before a use when it has been
//! idle (a database restarted since closed it), dropped when it fails or does not answer in
//! time, and opened again by the next use; each use tells the watcher whether the database was
//! reached.
//!
//! Every round trip runs on the store's own runtime under a deadline ([`PostgresStore::answer_timeout`]):
//! a database that hangs (stopped, not refusing) fails the use with [`Failure::NoAnswer`]
//! instead of holding the caller, and the connection is dropped as broken (its socket closed,
//! so a transaction it had open rolls back; the statement is cancelled). Only a database that
//! then does not answer a `SELECT 1` on a new connection counts as hung (the uses right after
//! fail at once): one slow statement fails alone.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

use crate::{Availability, PostgresStore, describe};

/// A connection idle this long is checked (one round trip) before it is used: otherwise the
/// first statement after a restart of the database fails, though the database is back.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(5);

/// How long that check may take before the connection is given up and opened again.
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// How long the database may take to answer `SELECT 1` on a new connection after a statement
/// did not answer in time (at most `answer_timeout`): one that does not is hung.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// An open connection: the client, the task that drives its socket, and when it was last used.
pub(crate) struct Connection {
    client: Client,
    driver: tokio::task::JoinHandle<()>,
    last_used: Instant,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // A connection whose database hangs must not be kept waiting on its socket.
        self.driver.abort();
    }
}

/// The store's one connection, used by one caller at a time; a caller waits for it at most
/// its deadline (a `std` mutex alone would queue callers for as long as a hung database holds
/// the one using it).
#[derive(Default)]
pub(crate) struct Slot {
    /// Whether a caller has the connection.
    busy: Mutex<bool>,
    /// Told when the caller that had it is done.
    freed: Condvar,
    connection: Mutex<Option<Connection>>,
}

/// The connection, had by one caller until dropped.
pub(crate) struct Held<'a> {
    slot: &'a Slot,
    connection: std::sync::MutexGuard<'a, Option<Connection>>,
}

impl Slot {
    /// The connection, once no other caller has it; `None` if that takes longer than `wait`.
    fn take(&self, wait: Duration) -> Option<Held<'_>> {
        let until = Instant::now() + wait;
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        while *busy {
            let left = until.checked_duration_since(Instant::now()).filter(|left| !left.is_zero())?;
            busy = self.freed.wait_timeout(busy, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        *busy = true;
        drop(busy);
        Some(Held { slot: self, connection: self.connection.lock().unwrap_or_else(PoisonError::into_inner) })
    }
}

impl std::ops::Deref for Held<'_> {
    type Target = Option<Connection>;
    fn deref(&self) -> &Self::Target {
        &self.connection
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.connection
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        *self.slot.busy.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.slot.freed.notify_one();
    }
}

/// Why a use of the store failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Failure {
    /// The database could not be reached, or refused the statement.
    #[error("{0}")]
    Database(String),
    /// The database did not answer within the deadline: the connection was dropped.
    #[error(
        "it did not answer within {} (stopped or overloaded?); the connection was dropped. Raise `[store] answer_timeout` if the database is only slow",
        humantime::format_duration(*.0)
    )]
    NoAnswer(Duration),
    /// Another use held the connection past the deadline (the database is slow or hangs).
    #[error(
        "its connection stayed busy with another use for {} (the database is slow or hangs?). Raise `[store] answer_timeout` if the database is only slow",
        humantime::format_duration(*.0)
    )]
    Busy(Duration),
    /// A use moments ago found the database unreachable, for this reason: not tried again yet.
    #[error("{0}")]
    Unreached(String),
}

/// Whether `error` ended the connection: a `FATAL` (or `PANIC`) from the server, or the
/// connection found closed.
fn is_fatal(error: &tokio_postgres::Error) -> bool {
    error.is_closed() || error.as_db_error().is_some_and(|database| matches!(database.severity(), "FATAL" | "PANIC"))
}

impl PostgresStore {
    /// A use found the database hanging (it did not answer in time): the uses right after
    /// fail at once (a database that refuses, or closed the connection, fails them fast anyway).
    fn hung(&self, failure: &Failure) {
        if matches!(failure, Failure::NoAnswer(_)) {
            *self.last_failure.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), failure.to_string()));
        }
    }

    /// After a statement did not answer in time: cancel it (`cancel`, so that it does not take
    /// effect later, its caller told it failed), then ask the database a cheap question on a
    /// connection of its own. Whether it answered: then only that statement was slow (a very
    /// large record), and the uses after it go on; otherwise the database hangs.
    async fn answers_after_slow(&self, cancel: Option<tokio_postgres::CancelToken>) -> bool {
        let deadline = PROBE_TIMEOUT.min(self.answer_timeout);
        // Both at once: a hung database answers neither, and is found so within one deadline.
        let cancelled = tokio::spawn(async move {
            if let Some(cancel) = cancel {
                let _ = tokio::time::timeout(deadline, cancel.cancel_query(NoTls)).await;
            }
        });
        let probe = async {
            let (client, connection) = self.config.connect(NoTls).await?;
            let driver = tokio::spawn(async move {
                let _ = connection.await;
            });
            let answered = client.simple_query("SELECT 1").await;
            driver.abort();
            answered
        };
        let answered = tokio::time::timeout(deadline, probe).await;
        let _ = cancelled.await;
        matches!(answered, Ok(Ok(_)))
    }

    /// A use reached the database (`Ok`) or found it unreachable (`Err`, the reason).
    fn reached(&self, outcome: Result<(), &str>) {
        if outcome.is_ok() {
            *self.last_failure.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
        let mut lost_since = self.lost_since.lock().unwrap_or_else(PoisonError::into_inner);
        let change = match (outcome, *lost_since) {
            (Err(reason), None) => {
                *lost_since = Some(Instant::now());
                Availability::Lost { reason: reason.to_owned() }
            }
            (Ok(()), Some(since)) => {
                *lost_since = None;
                Availability::Back { after: since.elapsed() }
            }
            _ => return,
        };
        if let Some(watcher) = self.watcher.get() {
            watcher(&change);
        }
    }

    /// Run `work` on the connection, connecting first if needed (or again, when it has been
    /// idle and no longer answers); a connection that failed, or did not answer within
    /// [`answer_timeout`](Self::answer_timeout), is dropped, to be opened again by the next use.
    pub(crate) fn with_client<T>(&self, work: impl AsyncFnOnce(&mut Client) -> Result<T, tokio_postgres::Error>) -> Result<T, Failure> {
        let deadline = self.answer_timeout;
        // Found unreachable moments ago: fail at once rather than queue for the connection;
        // the first use after that long tries the database again.
        if let Some((at, reason)) = &*self.last_failure.lock().unwrap_or_else(PoisonError::into_inner)
            && at.elapsed() < deadline
        {
            return Err(Failure::Unreached(reason.clone()));
        }
        // Waiting for the connection is part of the deadline: while the database hangs, the use
        // holding it fails within the deadline, and so does each use queued behind it.
        let Some(mut slot) = self.client.take(deadline) else {
            return Err(Failure::Busy(deadline));
        };
        let slot = &mut *slot;
        let Some(runtime) = &self.runtime else {
            return Err(Failure::Database("the store is closed".to_owned()));
        };
        runtime.block_on(async {
            let result = match Self::on_connection(slot, &self.config, deadline, work).await {
                Ok(result) => result,
                Err(unreached) => {
                    *slot = None;
                    self.hung(&unreached);
                    self.reached(Err(&unreached.to_string()));
                    return Err(unreached);
                }
            };
            match &result {
                Err(failure @ Failure::NoAnswer(_)) => {
                    // Dropped: its socket closes, and what it had open rolls back in the database.
                    let cancel = slot.take().map(|connection| connection.client.cancel_token());
                    if self.answers_after_slow(cancel).await {
                        // One slow statement (it failed, and is cancelled): the database answers.
                        self.reached(Ok(()));
                    } else {
                        self.hung(failure);
                        self.reached(Err(&failure.to_string()));
                    }
                }
                Err(failure) if slot.as_ref().is_none_or(|connection| connection.client.is_closed()) => {
                    *slot = None;
                    self.reached(Err(&failure.to_string()));
                }
                // Answered: an error of the statement's own is no outage.
                _ => self.reached(Ok(())),
            }
            result
        })
    }

    /// Run `work` on the connection in `slot`, connecting first if needed: `Err` if the
    /// database could not be reached, `Ok` with what the statement did otherwise.
    async fn on_connection<T>(
        slot: &mut Option<Connection>,
        config: &tokio_postgres::Config,
        deadline: Duration,
        work: impl AsyncFnOnce(&mut Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<Result<T, Failure>, Failure> {
        // The connection's task runs only inside `block_on`: let it read what came while the
        // store was idle (a server that closed the connection), so that a closed connection is
        // seen before a statement is sent on it.
        tokio::task::yield_now().await;
        if let Some(connection) = slot.as_mut()
            && (connection.client.is_closed()
                || (connection.last_used.elapsed() >= CHECK_AFTER_IDLE
                    && !matches!(tokio::time::timeout(CHECK_TIMEOUT.min(deadline), connection.client.simple_query("")).await, Ok(Ok(_)))))
        {
            *slot = None;
        }
        if slot.is_none() {
            match tokio::time::timeout(deadline, config.connect(NoTls)).await {
                Ok(Ok((client, connection))) => {
                    let driver = tokio::spawn(async move {
                        let _ = connection.await;
                    });
                    *slot = Some(Connection { client, driver, last_used: Instant::now() });
                }
                Ok(Err(error)) => return Err(Failure::Database(describe(&error))),
                Err(_) => return Err(Failure::NoAnswer(deadline)),
            }
        }
        let Some(connection) = slot.as_mut() else {
            return Err(Failure::Database("no connection".to_owned()));
        };
        let result = match tokio::time::timeout(deadline, work(&mut connection.client)).await {
            Ok(Err(error)) if is_fatal(&error) => {
                // The server ended the connection (shut down, or the session terminated): the
                // next use opens another.
                return Err(Failure::Database(describe(&error)));
            }
            Ok(result) => result.map_err(|error| Failure::Database(describe(&error))),
            Err(_) => Err(Failure::NoAnswer(deadline)),
        };
        connection.last_used = Instant::now();
        Ok(result)
    }
}

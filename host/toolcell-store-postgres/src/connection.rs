//! The one connection of a store: opened on first use, checked before a use when it has been
//! idle (a database restarted since closed it), dropped when it fails, and opened again by the
//! next use; each use tells the watcher whether the database was reached.

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use crate::{Availability, PostgresStore, describe};

/// A connection idle this long is checked (one round trip) before it is used: otherwise the
/// first statement after a restart of the database fails, though the database is back.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(5);

/// How long that check may take before the connection is given up and opened again.
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

impl PostgresStore {
    /// A use reached the database (`Ok`) or found it unreachable (`Err`, the reason).
    fn reached(&self, outcome: Result<(), &str>) {
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
    /// idle and no longer answers); a connection that failed is dropped, to be opened again by
    /// the next use.
    pub(crate) fn with_client<T>(&self, work: impl FnOnce(&mut Client) -> Result<T, postgres::Error>) -> Result<T, String> {
        let mut slot = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((client, last_used)) = slot.as_mut()
            && (client.is_closed() || (last_used.elapsed() >= CHECK_AFTER_IDLE && client.is_valid(CHECK_TIMEOUT).is_err()))
        {
            *slot = None;
        }
        if slot.is_none() {
            match self.config.connect(NoTls) {
                Ok(client) => *slot = Some((client, Instant::now())),
                Err(error) => {
                    let reason = describe(&error);
                    self.reached(Err(&reason));
                    return Err(reason);
                }
            }
        }
        let Some((client, last_used)) = slot.as_mut() else {
            return Err("no connection".to_owned());
        };
        let result = work(client).map_err(|error| describe(&error));
        *last_used = Instant::now();
        match &result {
            Err(reason) if client.is_closed() => {
                *slot = None;
                self.reached(Err(reason));
            }
            // Answered: an error of the statement's own is no outage.
            _ => self.reached(Ok(())),
        }
        result
    }
}

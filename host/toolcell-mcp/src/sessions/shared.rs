//! MCP sessions in the store every host of a deployment shares ([`SessionBackend`]): a session
//! opened on one host is found, owned by the same principal, on every other; its `initialize`
//! is replayed by rmcp on the host a request lands on; it expires for all of them at once, at
//! the database's clock.
//!
//! Each request of a session costs one round trip (found, owned and used now, in one
//! statement); a sweep costs one per tick for all of a host's sessions. The store's calls are
//! blocking, so they run on tokio's blocking threads.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::session::{SessionState, SessionStore, SessionStoreError as RmcpStoreError};
use toolcell_state::{SessionBackend, SessionStoreError};

use super::{Activity, Owned, Owners};
use crate::bounds::{Kind, Ledger};

/// The shared store, how long a session may stay idle, and the bounds its sessions count in.
#[derive(Clone)]
pub(crate) struct Shared {
    backend: Arc<dyn SessionBackend>,
    idle: Duration,
    ledger: Arc<Ledger>,
}

impl Shared {
    pub(crate) fn new(backend: Arc<dyn SessionBackend>, idle: Duration, ledger: Arc<Ledger>) -> Shared {
        Shared { backend, idle, ledger }
    }

    /// Where rmcp keeps each session's `initialize`.
    pub(super) fn initializations(&self) -> Initializations {
        Initializations { backend: Arc::clone(&self.backend), idle: self.idle }
    }

    /// The session `id` ended here: remove it for every host (in the background; the store
    /// may already have, for an HTTP `DELETE` or a sweep).
    pub(super) fn forget(&self, id: &str) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (backend, id) = (Arc::clone(&self.backend), id.to_owned());
            runtime.spawn_blocking(move || backend.close_mcp(&id));
        }
    }
}

/// Run `work` with the store on a blocking thread.
async fn blocking<T: Send + 'static>(
    backend: &Arc<dyn SessionBackend>,
    work: impl FnOnce(&dyn SessionBackend) -> Result<T, SessionStoreError> + Send + 'static,
) -> Result<T, SessionStoreError> {
    let backend = Arc::clone(backend);
    tokio::task::spawn_blocking(move || work(&*backend))
        .await
        .unwrap_or_else(|_| Err(SessionStoreError { store: String::new(), reason: "its call failed".to_owned() }))
}

impl Owners {
    /// Whether the MCP session `id` of `principal` has ended for every host (ended or expired
    /// through another host), as the shared store says; `false` without one, or when the store
    /// cannot tell.
    pub(crate) async fn ended_anywhere(&self, id: &str, principal: &str) -> bool {
        let Some(shared) = &self.shared else {
            return false;
        };
        let (key, name, idle) = (id.to_owned(), principal.to_owned(), shared.idle);
        matches!(blocking(&shared.backend, move |backend| backend.use_mcp(&key, Some(&name), idle)).await, Ok(None))
    }

    /// A slot for a new session of `principal`. With a shared store it is counted here but
    /// bound by the store, which counts every host's sessions and forgets one ended through
    /// another host at once (this host's ledger holds its slot until the next expiry sweep).
    ///
    /// # Errors
    ///
    /// [`Refusal`](crate::bounds::Refusal) past `max_sessions_per_principal` (without a shared store).
    pub(crate) fn session_slot(&self, ledger: &Arc<Ledger>, principal: &str) -> Result<crate::bounds::Slot, crate::bounds::Refusal> {
        if self.shared.is_some() { Ok(ledger.take_anyway(principal, Kind::Session)) } else { ledger.take(principal, Kind::Session) }
    }

    /// A request of `principal` in session `id` begins: `Ok(None)` if the session does not
    /// exist (or expired) for every host, or is another principal's. With the shared store
    /// unreachable, a session this host already serves goes on (its reads do; its writes are
    /// refused by the host), and any other is an error.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`] for a session this host does not know while the store cannot
    /// be used.
    pub(crate) async fn enter_anywhere(self: &Arc<Self>, id: &str, principal: &str) -> Result<Option<Activity>, SessionStoreError> {
        let Some(shared) = &self.shared else {
            return Ok(self.enter(id, principal));
        };
        let (key, name, idle) = (id.to_owned(), principal.to_owned(), shared.idle);
        match blocking(&shared.backend, move |backend| backend.use_mcp(&key, Some(&name), idle)).await {
            Ok(Some(_)) => {
                let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
                if records.get(id).is_none_or(|owned| owned.principal != principal) {
                    // Opened on another host: it counts here too while it is used here.
                    let slot = shared.ledger.take_anyway(principal, Kind::Session);
                    records.insert(
                        id.to_owned(),
                        Owned { principal: principal.to_owned(), _slot: slot, active: 0, last_used: Instant::now() },
                    );
                }
                drop(records);
                Ok(self.enter(id, principal))
            }
            Ok(None) => {
                self.records.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
                Ok(None)
            }
            Err(error) => match self.enter(id, principal) {
                Some(activity) => Ok(Some(activity)),
                None => Err(error),
            },
        }
    }

    /// Remove what the ended toolcell sessions `keys` kept in the shared store (read versions,
    /// undo history). Best effort: a session whose end cannot reach the store keeps its rows.
    pub(crate) async fn forget_state(&self, keys: Vec<String>) {
        if let Some(shared) = &self.shared {
            let _ = blocking(&shared.backend, move |backend| backend.forget_sessions(&keys)).await;
        }
    }

    /// `principal` created the session `id`, which holds `slot`: recorded for every host,
    /// unless the principal already has `max` sessions alive over every host (`Ok(false)`:
    /// nothing is recorded, and the session must not be used).
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`]: the session cannot be kept, and must not be used.
    pub(crate) async fn claim_within(
        &self,
        id: &str,
        principal: &str,
        slot: crate::bounds::Slot,
        max: usize,
    ) -> Result<bool, SessionStoreError> {
        if let Some(shared) = &self.shared {
            let (key, name, idle) = (id.to_owned(), principal.to_owned(), shared.idle);
            if !blocking(&shared.backend, move |backend| backend.open_mcp_within(&key, &name, max, idle)).await? {
                return Ok(false);
            }
        }
        self.claim(id, principal, slot);
        Ok(true)
    }

    /// End the session `id` for every host (its HTTP `DELETE`), before this host does.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`]: the store cannot end it, so it goes on for every host.
    pub(crate) async fn close_anywhere(&self, id: &str) -> Result<(), SessionStoreError> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let key = id.to_owned();
        blocking(&shared.backend, move |backend| backend.close_mcp(&key)).await
    }

    /// The sessions that ended for being idle (id, principal), for this host to end, and the
    /// ids of those this host held that another host ended or expired (only to be closed
    /// here). With the shared store, this host's sessions with requests in flight count as
    /// used now, for every host.
    pub(crate) async fn sweep(&self, idle: Duration) -> (Vec<(String, String)>, Vec<String>) {
        let Some(shared) = &self.shared else {
            return (self.take_expired(idle), Vec::new());
        };
        let (busy, known): (Vec<String>, Vec<String>) = {
            let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
            (records.iter().filter(|(_, owned)| owned.active > 0).map(|(id, _)| id.clone()).collect(), records.keys().cloned().collect())
        };
        let idle = shared.idle;
        let swept = blocking(&shared.backend, move |backend| backend.sweep_mcp(&busy, &known, idle)).await;
        let Ok(swept) = swept else {
            // Nothing expires while the store cannot say so for every host.
            return (Vec::new(), Vec::new());
        };
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let gone: Vec<String> = records.keys().filter(|id| !swept.alive.contains(id)).cloned().collect();
        for id in &gone {
            records.remove(id);
        }
        (swept.expired, gone)
    }
}

/// The sessions' `initialize`, in the shared store, for rmcp to replay on any host.
pub(crate) struct Initializations {
    backend: Arc<dyn SessionBackend>,
    idle: Duration,
}

#[async_trait::async_trait]
impl SessionStore for Initializations {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, RmcpStoreError> {
        let (id, idle) = (session_id.to_owned(), self.idle);
        let found = blocking(&self.backend, move |backend| backend.use_mcp(&id, None, idle)).await?;
        match found.and_then(|session| session.initialization) {
            Some(text) => Ok(Some(serde_json::from_str(&text)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), RmcpStoreError> {
        let (id, text) = (session_id.to_owned(), serde_json::to_string(state)?);
        blocking(&self.backend, move |backend| backend.open_mcp(&id, None, Some(&text))).await?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), RmcpStoreError> {
        let id = session_id.to_owned();
        blocking(&self.backend, move |backend| backend.close_mcp(&id)).await?;
        Ok(())
    }
}

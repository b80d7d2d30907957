//! The end of an MCP session of `serve` (HTTP `DELETE`, or expiry): the locks taken in it are
//! released and it is forgotten.

use std::sync::{Arc, PoisonError};

use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::{Answer, Service, plain, session_key};
use crate::config::Principal;
use crate::operator::Event;
use crate::sessions::{Owners, Shared};

impl Service {
    /// The MCP session `id` of `principal` ended (or expired): release the locks taken in it
    /// and forget it.
    pub(super) async fn end(&self, id: &str, principal: &Principal) {
        self.direct.ended(id);
        let key = session_key(principal, id);
        let session = self.sessions.lock().unwrap_or_else(PoisonError::into_inner).remove(&key).map(|(session, _)| session);
        let session = match session {
            Some(session) => Some(session),
            // Never called since this process started: end it all the same.
            None => self.hosts.get(&principal.workspace).and_then(|host| host.session(&principal.role, &key).ok()),
        };
        release(session, key.clone()).await;
        self.forget_state(&key).await;
        self.owners.remove(id);
    }

    /// The MCP session `id` of the principal named `name` ended (an OAuth principal, or one
    /// reloaded away): release the locks taken in it, on this host or another, in every
    /// workspace served (its own is not known), and forget it.
    async fn end_named(&self, id: &str, name: &str) {
        self.direct.ended(id);
        let key = format!("{name}:{id}");
        let session = self.sessions.lock().unwrap_or_else(PoisonError::into_inner).remove(&key).map(|(session, _)| session);
        match session {
            Some(session) => release(Some(session), key.clone()).await,
            None => {
                for host in self.hosts.values() {
                    let (host, session) = (host.clone(), key.clone());
                    let released = tokio::task::spawn_blocking(move || host.end_session(&session).map_err(|error| error.to_string())).await;
                    if let Ok(Err(error)) | Err(error) = released.map_err(|error| error.to_string()) {
                        let _ =
                            crate::writeln_stderr(&format!("toolcell serve: the locks of session `{key}` could not be released: {error}"));
                    }
                }
            }
        }
        self.forget_state(&key).await;
        self.owners.remove(id);
    }

    /// After a `lock_files` call of `session` (the request's HTTP `parts`): if its MCP session
    /// ended meanwhile through another host, which released the session's locks before this
    /// call's were in place, release them here. That host marks the end in the store before it
    /// releases, and this looks after the call's locks are in: one of the two sees the other.
    pub(crate) async fn after_lock(&self, parts: Option<&http::request::Parts>, session: toolcell_host::Session) {
        let (Ok(principal), Some(id)) =
            (super::authenticated(parts), super::mcp_session_id(parts.and_then(|parts| parts.headers.get(super::MCP_SESSION_ID))))
        else {
            return;
        };
        if self.owners.ended_anywhere(id, &principal.name).await {
            release(Some(session), session_key(principal, id)).await;
        }
    }

    /// With the shared store: remove the read versions and undo history the ended toolcell
    /// session `key` kept, in every workspace served (nothing reads them again).
    async fn forget_state(&self, key: &str) {
        let keys: Vec<String> =
            self.hosts.values().map(|host| toolcell_state::storage::session_key(key, host.workspace().root())).collect();
        self.owners.forget_state(keys).await;
    }

    /// End the sessions idle, with nothing in flight, for `session_idle`.
    pub(super) async fn expire(&self, manager: &LocalSessionManager) {
        let (expired, gone) = self.owners.sweep(self.config.session_idle).await;
        // Ended or expired by another host (which released its locks): only closed here.
        for id in gone {
            let _ = manager.close_session(&Arc::from(id.as_str())).await;
            self.direct.ended(&id);
            self.sessions.lock().unwrap_or_else(PoisonError::into_inner).retain(|key, _| !key.ends_with(&format!(":{id}")));
        }
        for (id, principal) in expired {
            let _ = manager.close_session(&Arc::from(id.as_str())).await;
            match self.roster().by_name.get(&principal) {
                Some(principal) => self.end(&id, principal).await,
                // An OAuth principal, or one reloaded away: its session ends all the same.
                None => self.end_named(&id, &principal).await,
            }
        }
    }
}

/// Release the locks taken in `session` (named `key`), on a blocking thread: a shared store's
/// client blocks.
async fn release(session: Option<toolcell_host::Session>, key: String) {
    let Some(session) = session else {
        return;
    };
    let released = tokio::task::spawn_blocking(move || session.end().map_err(|error| error.to_string())).await;
    if let Ok(Err(error)) | Err(error) = released.map_err(|error| error.to_string()) {
        let _ = crate::writeln_stderr(&format!("toolcell serve: the locks of session `{key}` could not be released: {error}"));
    }
}

impl Service {
    /// The service, keeping its MCP sessions (who opened each, its `initialize`, when it was
    /// last used) in `backend`, a store every host of the deployment shares, instead of the
    /// state directory: any host then serves any request of any session.
    #[must_use]
    pub fn with_shared_sessions(mut self, backend: Arc<dyn toolcell_state::SessionBackend>) -> Self {
        self.owners = Owners::shared(Shared::new(backend, self.config.session_idle, Arc::clone(&self.ledger)));
        self
    }

    /// A request of a session this host cannot check with the shared store: `503`, saying so.
    pub(super) fn store_unavailable(&self, error: &toolcell_state::SessionStoreError, peer: std::net::SocketAddr) -> Answer {
        self.log.note(Event::Unavailable, &format!("503 from {peer}: {error}"));
        let mut response = plain(
            http::StatusCode::SERVICE_UNAVAILABLE,
            format!("Service Unavailable: {error}; the session cannot be checked on this host. Retry shortly"),
        );
        response.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("2"));
        response
    }
}

//! The MCP sessions of `serve`: who owns each, what each has in flight and when it was last
//! used, and where they are kept across restarts.
//!
//! A session counts against its principal's `max_sessions_per_principal` from its creation
//! until it ends (HTTP `DELETE`) or expires: idle, with nothing in flight, for `session_idle`.
//! An expired session is gone as if it had ended (its id is no longer found, its state on disk
//! is removed), so that sessions a client abandons do not pile up.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::session::{SessionState, SessionStore, SessionStoreError};

use crate::bounds::{Kind, Ledger, Slot};
use crate::config::{hex, token_hash};

mod shared;

pub(crate) use shared::Shared;

/// The MCP sessions the service knows, by id.
pub(crate) struct Owners {
    records: Mutex<HashMap<String, Owned>>,
    /// Where sessions are kept across restarts (`None`: not kept).
    directory: Option<PathBuf>,
    /// The store every host of the deployment shares, which is the truth about sessions when
    /// there is one (this host's records then only count what it holds and has in flight).
    shared: Option<Shared>,
}

/// One session: its principal, the slot it holds, and its use.
struct Owned {
    principal: String,
    _slot: Slot,
    /// Requests of the session whose answers are still being sent.
    active: usize,
    /// When a request of the session last began or ended.
    last_used: Instant,
}

/// A request of a session, in flight until dropped (with its answer).
pub(crate) struct Activity {
    owners: Arc<Owners>,
    id: String,
}

impl Drop for Activity {
    fn drop(&mut self) {
        let mut records = self.owners.records.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(owned) = records.get_mut(&self.id) {
            owned.active = owned.active.saturating_sub(1);
            owned.last_used = Instant::now();
        }
    }
}

impl Owners {
    /// The sessions kept in `directory` (created 0700), each counted for its principal.
    pub(crate) fn load(directory: Option<PathBuf>, ledger: &Arc<Ledger>) -> std::io::Result<Arc<Owners>> {
        let mut records = HashMap::new();
        if let Some(directory) = &directory {
            create_private_dir(directory)?;
            let now = Instant::now();
            // A session of a principal no longer configured is never found again.
            for (id, principal) in load_owners(directory).into_iter().filter(|(_, principal)| ledger.knows(principal)) {
                let slot = ledger.take_anyway(&principal, Kind::Session);
                records.insert(id, Owned { principal, _slot: slot, active: 0, last_used: now });
            }
        }
        Ok(Arc::new(Owners { records: Mutex::new(records), directory, shared: None }))
    }

    /// Sessions kept in the store every host shares, each counted for its principal on the
    /// hosts it is used on.
    pub(crate) fn shared(shared: Shared) -> Arc<Owners> {
        Arc::new(Owners { records: Mutex::new(HashMap::new()), directory: None, shared: Some(shared) })
    }

    /// A request of `principal` in session `id` begins: `None` if the session does not exist
    /// or is another principal's.
    pub(crate) fn enter(self: &Arc<Self>, id: &str, principal: &str) -> Option<Activity> {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let owned = records.get_mut(id).filter(|owned| owned.principal == principal)?;
        owned.active += 1;
        owned.last_used = Instant::now();
        Some(Activity { owners: Arc::clone(self), id: id.to_owned() })
    }

    /// `principal` created the session `id`, which holds `slot` (recorded beside the
    /// session's state, so that it still holds after a restart).
    pub(crate) fn claim(&self, id: &str, principal: &str, slot: Slot) {
        if let Some(directory) = &self.directory {
            let _ = std::fs::write(owner_file(directory, id), format!("{id}\n{principal}\n"));
        }
        let owned = Owned { principal: principal.to_owned(), _slot: slot, active: 0, last_used: Instant::now() };
        self.records.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), owned);
    }

    /// How many sessions there are.
    pub(crate) fn count(&self) -> usize {
        self.records.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The session `id` ended: forget it, and its state on disk.
    pub(crate) fn remove(&self, id: &str) {
        self.records.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
        if let Some(shared) = &self.shared {
            shared.forget(id);
        }
        if let Some(directory) = &self.directory {
            let _ = std::fs::remove_file(owner_file(directory, id));
            let _ = std::fs::remove_file(state_file(directory, id));
        }
    }

    /// The sessions idle for `idle` with nothing in flight, as (id, principal), forgotten: no
    /// request finds them from now on.
    pub(crate) fn take_expired(&self, idle: Duration) -> Vec<(String, String)> {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let expired: Vec<String> =
            records.iter().filter(|(_, owned)| owned.active == 0 && owned.last_used.elapsed() >= idle).map(|(id, _)| id.clone()).collect();
        expired.into_iter().filter_map(|id| records.remove(&id).map(|owned| (id, owned.principal))).collect()
    }

    /// The store rmcp keeps the sessions' initialization in, beside the owners.
    pub(crate) fn store(&self) -> Option<Arc<dyn SessionStore>> {
        if let Some(shared) = &self.shared {
            return Some(Arc::new(shared.initializations()));
        }
        self.directory.clone().map(|directory| Arc::new(FileSessionStore { directory }) as Arc<dyn SessionStore>)
    }
}

/// Where the owner of the MCP session `id` is recorded.
fn owner_file(directory: &Path, id: &str) -> PathBuf {
    directory.join(format!("{}.owner", file_key(id)))
}

/// Where the initialization of the MCP session `id` is kept.
fn state_file(directory: &Path, id: &str) -> PathBuf {
    directory.join(format!("{}.json", file_key(id)))
}

/// MCP sessions' initialization kept in files, so that a client's session survives a restart
/// of the service.
pub(crate) struct FileSessionStore {
    directory: PathBuf,
}

#[async_trait::async_trait]
impl SessionStore for FileSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match std::fs::read(state_file(&self.directory, session_id)) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(Box::new(error)),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let path = state_file(&self.directory, session_id);
        let temporary = path.with_extension("json.tmp");
        std::fs::write(&temporary, serde_json::to_vec(state)?)?;
        std::fs::rename(&temporary, &path)?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        match std::fs::remove_file(state_file(&self.directory, session_id)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(Box::new(error)),
            _ => Ok(()),
        }
    }
}

/// A file name for a session id the client chose the bytes of.
fn file_key(session_id: &str) -> String {
    hex(&token_hash(session_id))
}

/// The owners recorded in `directory` (`<key>.owner`: the session id, then the principal) of
/// the sessions whose state is still kept there; the owner files of sessions that ended
/// (their state removed) are removed.
fn load_owners(directory: &Path) -> HashMap<String, String> {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return HashMap::new();
    };
    let mut owners = HashMap::new();
    for path in entries.filter_map(Result::ok).map(|entry| entry.path()) {
        if path.extension().is_none_or(|extension| extension != "owner") {
            continue;
        }
        if !path.with_extension("json").exists() {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let mut lines = text.lines();
        if let (Some(id), Some(principal)) = (lines.next(), lines.next()) {
            owners.insert(id.to_owned(), principal.to_owned());
        }
    }
    owners
}

fn create_private_dir(directory: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(directory)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_BOUNDS;

    #[test]
    fn a_session_expires_only_once_idle_with_nothing_in_flight_and_gives_its_slot_back() {
        let ledger = Ledger::new(DEFAULT_BOUNDS, ["alice", "rita"]);
        let directory = tempfile::tempdir().expect("temporary directory");
        let owners = Owners::load(Some(directory.path().join("sessions")), &ledger).expect("owners");
        for id in ["idle", "busy"] {
            owners.claim(id, "alice", ledger.take("alice", Kind::Session).expect("a session slot"));
        }
        assert!(owners.enter("idle", "rita").is_none(), "another principal's session does not exist for rita");
        let busy = owners.enter("busy", "alice").expect("alice's session");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(owners.take_expired(Duration::from_millis(10)), [("idle".to_owned(), "alice".to_owned())]);
        assert_eq!(ledger.held("alice", Kind::Session), 1, "the expired session's slot is given back");
        assert!(owners.enter("idle", "alice").is_none(), "an expired session is gone");
        // Once its request is answered, the busy session is idle from then on.
        drop(busy);
        assert!(owners.take_expired(Duration::from_secs(3600)).is_empty());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(owners.take_expired(Duration::from_millis(10)).len(), 1);
        assert_eq!(ledger.held("alice", Kind::Session), 0);
    }
}

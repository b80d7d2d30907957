//! Resource subscriptions of one MCP connection, and the watcher that tells it about changes:
//! `notifications/resources/updated` for a subscribed file that changed,
//! `notifications/resources/list_changed` when the set of files the role may read changed.
//!
//! The changes come from the kernel through the same inotify watcher the content index keeps
//! ([`toolcell_state::index_watch`]), on the directories `list_files` shows the role (never a
//! hidden host-owned one). Events are gathered until the workspace has been quiet for
//! [`QUIET`] (at most [`GATHER_AT_MOST`]), so one edit, however many writes it took, is one
//! notification. Whether a file counts is decided by the policy the tools run under: nothing
//! is sent about a file the role may not read.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use toolcell_host::Session;
use toolcell_state::index_watch::{Drained, Watcher};

use super::{Called, call, listing, not_found, path_of, uri_of};

/// The most resources one connection may be subscribed to.
pub const MAX_SUBSCRIPTIONS: usize = 256;
/// How long the workspace must be quiet before gathered changes are told,
const QUIET: Duration = Duration::from_millis(150);
/// and how long changes are gathered at most while it is not.
const GATHER_AT_MOST: Duration = Duration::from_secs(1);
/// How often the watcher's queue is drained.
const POLL: Duration = Duration::from_millis(50);
/// The most connections of this process watched at once: each watcher holds an inotify
/// instance, which the user's processes share a small number of.
pub const MAX_WATCHERS: usize = 32;

/// Connections of this process watched now.
static WATCHERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One of the [`MAX_WATCHERS`], given back when its watcher stops.
struct WatcherSlot;

impl WatcherSlot {
    fn take() -> Option<Self> {
        use std::sync::atomic::Ordering;
        WATCHERS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| (now < MAX_WATCHERS).then_some(now + 1)).ok().map(|_| WatcherSlot)
    }
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        WATCHERS.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The principal's slot of [`Kind::Watcher`](crate::bounds::Kind::Watcher), taken for a
/// watcher that may start (`None` where no principals are counted: over stdio; given back at
/// once if the connection is watched already), or why none was left.
pub(crate) type Seat = Result<Option<crate::bounds::Slot>, String>;

/// The subscriptions of one MCP connection.
#[derive(Default, Clone)]
pub(crate) struct Subscriptions {
    shared: Arc<Mutex<Shared>>,
}

#[derive(Default)]
struct Shared {
    /// Workspace-relative paths subscribed to.
    paths: BTreeSet<String>,
    /// Whether the watcher runs.
    watching: bool,
    /// Bumped when the workspace changes: a watcher of an earlier one stops.
    generation: u64,
}

impl Subscriptions {
    /// `resources/subscribe`: `uri` must name a file the role may read (else it answers as a
    /// missing one); at most [`MAX_SUBSCRIPTIONS`].
    pub(crate) fn subscribe(&self, session: &Session, uri: &str, peer: Peer<RoleServer>, seat: Seat) -> Result<(), McpError> {
        let path = path_of(uri).ok_or_else(|| not_found(uri))?;
        match call(session, "file_info", &serde_json::json!({ "path": path }))? {
            Called::Done(info) if info["type"] == "file" && info["access"]["read"] == "allow" => {}
            _ => return Err(not_found(uri)),
        }
        {
            let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
            if !shared.paths.contains(&path) && shared.paths.len() >= MAX_SUBSCRIPTIONS {
                return Err(McpError::invalid_request(
                    format!(
                        "this session is subscribed to {MAX_SUBSCRIPTIONS} resources, the most it may be: \
                         unsubscribe from one (`resources/unsubscribe`) before subscribing to `{uri}`"
                    ),
                    Some(serde_json::json!({ "uri": uri, "max_subscriptions": MAX_SUBSCRIPTIONS })),
                ));
            }
            shared.paths.insert(path.clone());
        }
        if let Err(refused) = self.watch(session, peer, seat) {
            self.shared.lock().unwrap_or_else(PoisonError::into_inner).paths.remove(&path);
            return Err(McpError::invalid_request(refused, Some(serde_json::json!({ "uri": uri, "max_watchers": MAX_WATCHERS }))));
        }
        Ok(())
    }

    /// `resources/unsubscribe` (a URI not subscribed to is no error).
    pub(crate) fn unsubscribe(&self, uri: &str) {
        if let Some(path) = path_of(uri) {
            self.shared.lock().unwrap_or_else(PoisonError::into_inner).paths.remove(&path);
        }
    }

    /// Forget every subscription and stop the watcher (the workspace changed).
    pub(crate) fn reset(&self) {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.paths.clear();
        shared.watching = false;
        shared.generation += 1;
    }

    /// Start telling `peer` about changes, once per connection (at its first listing or
    /// subscription); the watcher stops with the connection.
    ///
    /// # Errors
    ///
    /// Why no watcher runs: [`MAX_WATCHERS`] connections are watched already, or its thread
    /// could not start.
    pub(crate) fn watch(&self, session: &Session, peer: Peer<RoleServer>, seat: Seat) -> Result<(), String> {
        let busy = || {
            format!(
                "the server already watches {MAX_WATCHERS} connections for resource changes, the most it may: try again once one has closed"
            )
        };
        let slot = {
            let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
            if shared.watching {
                return Ok(());
            }
            // The principal's share of the watchers first (`serve`), then the process's.
            let principal = seat?;
            let slot = WatcherSlot::take().ok_or_else(busy)?;
            shared.watching = true;
            ((slot, principal), shared.generation)
        };
        let (slot, generation) = slot;
        let fail = |reason: String| {
            self.shared.lock().unwrap_or_else(PoisonError::into_inner).watching = false;
            let _ = crate::writeln_stderr(&format!("toolcell mcp: cannot watch the workspace for resource changes: {reason}"));
            "the server cannot watch the workspace for resource changes now; the operator's log says why".to_owned()
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return Err(fail("no async runtime".to_owned())) };
        let (shared, session) = (Arc::downgrade(&self.shared), session.clone());
        std::thread::Builder::new()
            .name("toolcell-resources".to_owned())
            .spawn(move || {
                let _slot = slot;
                let after = shared.clone();
                Telling { shared, generation, session, peer, runtime }.run();
                // Stopped (the connection closed, or the watcher failed): a later request of a
                // still-open connection may start another.
                if let Some(shared) = after.upgrade() {
                    let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    if shared.generation == generation {
                        shared.watching = false;
                    }
                }
            })
            .map(drop)
            .map_err(|error| fail(error.to_string()))
    }
}

/// The watcher of one connection.
struct Telling {
    shared: Weak<Mutex<Shared>>,
    generation: u64,
    session: Session,
    peer: Peer<RoleServer>,
    runtime: tokio::runtime::Handle,
}

impl Telling {
    fn run(self) {
        let Ok((files, directories)) = listing(&self.session) else { return };
        let root = self.session.host().workspace().root().to_path_buf();
        let mut watcher = match Watcher::start(&root, directories) {
            Ok(watcher) => watcher,
            Err(error) => {
                let _ = crate::writeln_stderr(&format!("toolcell mcp: cannot watch the workspace for resource changes: {error}"));
                return;
            }
        };
        let mut known = self.readable(files);
        let mut pending = BTreeSet::new();
        let mut lost = false;
        let (mut first, mut last) = (None::<Instant>, Instant::now());
        loop {
            std::thread::sleep(POLL);
            if !self.is_current() || self.peer.is_transport_closed() {
                return;
            }
            match watcher.drain() {
                Drained::Changed(paths) if paths.is_empty() => {}
                Drained::Changed(paths) => {
                    pending.extend(paths);
                    last = Instant::now();
                    first.get_or_insert(last);
                }
                Drained::Lost => {
                    lost = true;
                    last = Instant::now();
                    first.get_or_insert(last);
                }
            }
            let Some(started) = first else { continue };
            if last.elapsed() < QUIET && started.elapsed() < GATHER_AT_MOST {
                continue;
            }
            first = None;
            let Ok((files, directories)) = listing(&self.session) else { return };
            for directory in directories {
                if !watcher.watches(&directory) {
                    // A directory that went again before it could be watched has nothing to tell.
                    let _ = watcher.watch(directory);
                }
            }
            let now = self.readable(files);
            if now != known {
                known = now;
                let _ = self.runtime.block_on(self.peer.notify_resource_list_changed());
            }
            let subscribed = match self.shared.upgrade() {
                Some(shared) => {
                    let shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    if shared.generation != self.generation {
                        return;
                    }
                    shared.paths.clone()
                }
                None => return,
            };
            let changed: Vec<&String> = if lost { subscribed.iter().collect() } else { subscribed.intersection(&pending).collect() };
            for path in changed {
                let _ = self.runtime.block_on(self.peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri_of(path))));
            }
            pending.clear();
            lost = false;
        }
    }

    /// Whether this watcher's connection is open on the workspace it watches.
    fn is_current(&self) -> bool {
        self.shared.upgrade().is_some_and(|shared| shared.lock().unwrap_or_else(PoisonError::into_inner).generation == self.generation)
    }

    /// The files of `files` the role may read, as its tools are judged.
    fn readable(&self, files: Vec<String>) -> BTreeSet<String> {
        super::readable_files(&self.session, files).into_iter().collect()
    }
}

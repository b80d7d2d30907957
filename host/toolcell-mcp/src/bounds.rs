//! What each principal of `serve` holds, counted against the [`Bounds`] of the configuration.
//!
//! A [`Slot`] is one unit held: a connection, a request until its answer is sent or dropped, an
//! open event stream, an MCP session, a running tool call. It is taken before the thing it
//! counts begins and given back when the `Slot` is dropped, that is when the thing ends,
//! however it ends: a streamed answer holds its slots until the stream is finished or dropped,
//! a call until its instance is released.
//!
//! Connections and calls are also bounded for the whole service, and there each principal is
//! guaranteed a share: what is left of the service-wide bound once one principal holds all its
//! own bound allows, divided among the others (at least 1, at most its own bound; none when
//! there are more principals than slots). A principal may take a shared slot only while what is
//! left still covers the shares the others are not using, so that however many principals work
//! at once, each can always start its share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::Bounds;

/// What a slot counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A connection, from its first authenticated request until it closes.
    Connection,
    /// A request, until its answer is sent or dropped.
    Request,
    /// An event stream: a `GET` stream or a streamed answer.
    Stream,
    /// An MCP session, until it ends or expires.
    Session,
    /// A tool call, until its instance is released.
    Call,
    /// A connection watched for resource changes (its first resource listing or
    /// subscription on), until it closes: each watcher holds an inotify instance, which the
    /// user's processes share a small number of.
    Watcher,
}

/// Connections one principal may have watched for resource changes at once, of the
/// [`MAX_WATCHERS`](crate::resources::MAX_WATCHERS) the process watches (fixed, not configured).
pub const MAX_WATCHERS_PER_PRINCIPAL: usize = 8;

impl Kind {
    const ALL: [Kind; 6] = [Kind::Connection, Kind::Request, Kind::Stream, Kind::Session, Kind::Call, Kind::Watcher];

    fn index(self) -> usize {
        Kind::ALL.iter().position(|kind| *kind == self).unwrap_or(0)
    }

    /// The per-principal setting, and what it counts (plural), what to do when it is reached.
    fn describe(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Connection => ("max_connections_per_principal", "connections open", "close idle ones"),
            Kind::Request => ("max_requests_per_principal", "requests in flight", "wait for one to be answered"),
            Kind::Stream => ("max_streams_per_principal", "event streams open", "close one or let its call finish"),
            Kind::Session => {
                ("max_sessions_per_principal", "MCP sessions", "end one (HTTP `DELETE`) or let one stay idle for `session_idle`")
            }
            Kind::Call => ("max_calls_per_principal", "tool calls running", "wait for one to finish"),
            Kind::Watcher => (
                "MAX_WATCHERS_PER_PRINCIPAL",
                "connections watched for resource changes",
                "close a connection that listed or subscribed to resources",
            ),
        }
    }

    /// The service-wide setting of a shared kind, and what one of it is.
    fn shared(self) -> Option<(&'static str, &'static str)> {
        match self {
            Kind::Connection => Some(("max_connections", "connection")),
            Kind::Call => Some(("max_calls", "tool call")),
            Kind::Watcher => Some(("MAX_WATCHERS", "resource watcher")),
            Kind::Request | Kind::Stream | Kind::Session => None,
        }
    }
}

/// A bound a principal reached: what it was, its value, and the setting that raises it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Refusal {
    /// Whose request it refused.
    pub principal: String,
    /// What the bound counts.
    pub kind: Kind,
    /// The `service.toml` setting that raises it.
    pub setting: &'static str,
    /// Its value.
    pub value: usize,
    /// For a service-wide bound: the share every principal is guaranteed.
    pub share: Option<usize>,
}

impl Refusal {
    fn message(&self) -> String {
        let (_, counted, remedy) = self.kind.describe();
        let Refusal { principal, setting, value, .. } = self;
        // The watchers' bounds are the process's own, not settings.
        let raise = if self.kind == Kind::Watcher { String::new() } else { format!(", or raise `{setting}` in service.toml") };
        match self.share {
            None => format!("principal `{principal}` has {value} {counted}, as many as `{setting} = {value}` allows: {remedy}{raise}"),
            Some(share) => format!(
                "the service has no {} slot left for principal `{principal}`: of `{setting} = {value}`, the rest are in use or kept for \
                 other principals (each is guaranteed {share}): {remedy}{raise}",
                self.kind.shared().map_or("", |(_, one)| one)
            ),
        }
    }
}

/// Every principal's holdings.
pub(crate) struct Ledger {
    bounds: Bounds,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// What each principal holds, by kind: every configured principal, and each other one
    /// (an OAuth subject) while it holds anything.
    held: HashMap<String, [usize; Kind::ALL.len()]>,
    /// The configured principals, whose shares stay reserved whether they hold anything or not.
    configured: std::collections::HashSet<String>,
    /// What all hold, by kind.
    total: [usize; Kind::ALL.len()],
}

/// What each of `principals` is guaranteed of a service-wide bound of `total`, each bound to
/// `cap` of it.
fn share(cap: usize, total: usize, principals: usize) -> usize {
    match principals {
        0 | 1 => cap,
        _ if principals > total => 0,
        _ => (total.saturating_sub(cap) / (principals - 1)).clamp(1, cap),
    }
}

/// One unit a principal holds, given back when dropped.
pub(crate) struct Slot {
    ledger: Arc<Ledger>,
    principal: String,
    kind: Kind,
}

impl Slot {
    /// Whose slot it is.
    pub(crate) fn principal(&self) -> &str {
        &self.principal
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Slot({:?} of `{}`)", self.kind, self.principal)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.ledger.state.lock().unwrap_or_else(PoisonError::into_inner);
        let index = self.kind.index();
        if let Some(held) = state.held.get_mut(&self.principal) {
            held[index] = held[index].saturating_sub(1);
            // A principal not in the configuration counts only while it holds something:
            // subjects seen once must not keep a share from the ones who come after.
            if held.iter().all(|count| *count == 0) && !state.configured.contains(&self.principal) {
                state.held.remove(&self.principal);
            }
        }
        state.total[index] = state.total[index].saturating_sub(1);
    }
}

impl Ledger {
    /// A ledger of `principals` (by name), none holding anything.
    pub(crate) fn new<'a>(bounds: Bounds, principals: impl IntoIterator<Item = &'a str>) -> Arc<Ledger> {
        let configured: std::collections::HashSet<String> = principals.into_iter().map(str::to_owned).collect();
        let held = configured.iter().map(|name| (name.clone(), [0; Kind::ALL.len()])).collect();
        Arc::new(Ledger { bounds, state: Mutex::new(State { held, configured, total: [0; Kind::ALL.len()] }) })
    }

    fn limits(&self, kind: Kind) -> (usize, Option<usize>) {
        let bounds = &self.bounds;
        match kind {
            Kind::Connection => (bounds.max_connections_per_principal, Some(bounds.max_connections)),
            Kind::Request => (bounds.max_requests_per_principal, None),
            Kind::Stream => (bounds.max_streams_per_principal, None),
            Kind::Session => (bounds.max_sessions_per_principal, None),
            Kind::Call => (bounds.max_calls_per_principal, Some(bounds.max_calls)),
            Kind::Watcher => (MAX_WATCHERS_PER_PRINCIPAL, Some(crate::resources::MAX_WATCHERS)),
        }
    }

    /// One more `kind` for `principal`.
    ///
    /// # Errors
    ///
    /// [`Refusal`] naming the bound it reached.
    pub(crate) fn take(self: &Arc<Self>, principal: &str, kind: Kind) -> Result<Slot, Refusal> {
        let (cap, shared) = self.limits(kind);
        let index = kind.index();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // The requester counts, whether it holds anything yet or not.
        let principals = (state.held.len() + usize::from(!state.held.contains_key(principal))).max(1);
        let mine = state.held.get(principal).map_or(0, |held| held[index]);
        if mine >= cap {
            let (setting, _, _) = kind.describe();
            return Err(Refusal { principal: principal.to_owned(), kind, setting, value: cap, share: None });
        }
        if let (Some(total), Some((setting, _))) = (shared, kind.shared()) {
            // What the others are guaranteed and do not use yet stays free for them.
            let share = share(cap, total, principals);
            let kept: usize =
                state.held.iter().filter(|(name, _)| name.as_str() != principal).map(|(_, held)| share.saturating_sub(held[index])).sum();
            if state.total[index] + 1 + kept > total {
                return Err(Refusal { principal: principal.to_owned(), kind, setting, value: total, share: Some(share) });
            }
        }
        Ok(Self::hold(self, &mut state, principal, kind))
    }

    /// One more `kind` for `principal`, past its bounds if need be (a session found on disk
    /// after a restart, which counts whatever the bound is now).
    pub(crate) fn take_anyway(self: &Arc<Self>, principal: &str, kind: Kind) -> Slot {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Self::hold(self, &mut state, principal, kind)
    }

    fn hold(ledger: &Arc<Ledger>, state: &mut State, principal: &str, kind: Kind) -> Slot {
        let index = kind.index();
        state.held.entry(principal.to_owned()).or_default()[index] += 1;
        state.total[index] += 1;
        Slot { ledger: Arc::clone(ledger), principal: principal.to_owned(), kind }
    }

    /// Whether `principal` is one of the ledger's.
    pub(crate) fn knows(&self, principal: &str) -> bool {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).held.contains_key(principal)
    }

    /// What all principals hold of `kind`.
    pub(crate) fn total(&self, kind: Kind) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).total[kind.index()]
    }

    /// What `principal` holds of `kind`.
    #[cfg(test)]
    pub(crate) fn held(&self, principal: &str, kind: Kind) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).held.get(principal).map_or(0, |held| held[kind.index()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_BOUNDS;

    fn ledger(max_calls: usize, per_principal: usize, principals: &[&str]) -> Arc<Ledger> {
        Ledger::new(Bounds { max_calls, max_calls_per_principal: per_principal, ..DEFAULT_BOUNDS }, principals.iter().copied())
    }

    #[test]
    fn a_principal_stops_at_its_own_bound_and_gets_its_slot_back_when_a_call_ends() {
        let ledger = ledger(8, 3, &["alice", "rita"]);
        let held: Vec<Slot> = (0..3).map(|_| ledger.take("alice", Kind::Call).expect("within the bound")).collect();
        let refusal = ledger.take("alice", Kind::Call).expect_err("past the bound");
        assert_eq!((refusal.setting, refusal.value, refusal.share), ("max_calls_per_principal", 3, None));
        assert_eq!(
            refusal.to_string(),
            "principal `alice` has 3 tool calls running, as many as `max_calls_per_principal = 3` allows: wait for one to finish, \
             or raise `max_calls_per_principal` in service.toml"
        );
        drop(held);
        assert_eq!(ledger.held("alice", Kind::Call), 0);
        ledger.take("alice", Kind::Call).expect("free again");
    }

    #[test]
    fn principals_outside_the_configuration_keep_no_share_once_they_hold_nothing() {
        let ledger = Ledger::new(DEFAULT_BOUNDS, ["alice"]);
        // Many subjects, one after another, each holding a connection for a while.
        for index in 0..64 {
            let subject = format!("user-{index}");
            let slot = ledger.take(&subject, Kind::Connection).unwrap_or_else(|refusal| panic!("{subject}: {refusal}"));
            drop(slot);
            assert!(!ledger.knows(&subject), "{subject} kept an entry");
        }
        assert!(ledger.knows("alice"));
        // While they hold slots, they share the bound as configured principals do.
        let held: Vec<Slot> = (0..4).map(|index| ledger.take(&format!("busy-{index}"), Kind::Connection).expect("a share")).collect();
        assert!(ledger.take("newcomer", Kind::Connection).is_ok());
        drop(held);
    }

    #[test]
    fn shares_leave_what_one_full_principal_leaves_to_the_others() {
        let cases = [
            // (per principal, service-wide, principals, share)
            (16, 64, 1, 16),
            (16, 64, 2, 16),
            (16, 64, 8, 6),
            (16, 64, 64, 1),
            (16, 64, 65, 0),
            (5, 8, 3, 1),
            (3, 4, 2, 1),
        ];
        for (cap, total, principals, expected) in cases {
            assert_eq!(share(cap, total, principals), expected, "{cap} of {total} for {principals}");
        }
    }

    #[test]
    fn what_one_principal_takes_of_a_shared_bound_leaves_every_other_its_share() {
        // Three principals share 8 slots, each bound to 6: one at its bound leaves 2, so each
        // is guaranteed 1.
        let ledger = ledger(8, 6, &["alice", "bob", "rita"]);
        let alice: Vec<Slot> = (0..6).map(|_| ledger.take("alice", Kind::Call).expect("alice's bound")).collect();
        assert_eq!(ledger.take("alice", Kind::Call).expect_err("her own bound").setting, "max_calls_per_principal");
        let bob: Vec<Slot> = (0..1).map(|_| ledger.take("bob", Kind::Call).expect("bob's share")).collect();
        let refusal = ledger.take("bob", Kind::Call).expect_err("the last is kept for rita");
        assert_eq!((refusal.setting, refusal.value, refusal.share), ("max_calls", 8, Some(1)));
        assert_eq!(
            refusal.to_string(),
            "the service has no tool call slot left for principal `bob`: of `max_calls = 8`, the rest are in use or kept for \
             other principals (each is guaranteed 1): wait for one to finish, or raise `max_calls` in service.toml"
        );
        let rita = ledger.take("rita", Kind::Call).expect("rita's share is there");
        // Once alice is done, bob may use what she does not.
        drop(alice);
        let more: Vec<Slot> = (0..5).map(|_| ledger.take("bob", Kind::Call).expect("free, beyond the shares kept")).collect();
        assert!(ledger.take("alice", Kind::Call).is_ok(), "alice's share is kept for her");
        drop((bob, rita, more));
    }

    #[test]
    fn bounds_that_are_not_shared_count_only_the_principal() {
        let ledger = Ledger::new(Bounds { max_sessions_per_principal: 2, ..DEFAULT_BOUNDS }, ["alice", "rita"]);
        let _alice: Vec<Slot> = (0..2).map(|_| ledger.take("alice", Kind::Session).expect("within")).collect();
        let refusal = ledger.take("alice", Kind::Session).expect_err("past");
        assert!(refusal.to_string().contains("`max_sessions_per_principal = 2`"), "{refusal}");
        let _rita = ledger.take("rita", Kind::Session).expect("rita is not bound by alice's sessions");
        let _restored = ledger.take_anyway("alice", Kind::Session);
        assert_eq!(ledger.held("alice", Kind::Session), 3);
    }
}

//! toolcell's lock table: leases on workspace paths that the host enforces on every write,
//! delete, rename and truncate.
//!
//! A [`Lock`] covers a canonical workspace-relative path or a glob (`src/a.rs`, `src/**`), is
//! held by an owner (a chain or task id; a session's id when it names no owner) for a session,
//! is `shared` or `exclusive`, and lasts until its lease expires. Every acquisition gets a fresh
//! fencing token from a counter that never goes back: a holder presents its tokens with its
//! calls, and a token whose lease lapsed (expired, released or reclaimed) refuses the writes it
//! covers, so a holder that stalled past its lease cannot overwrite the work of the next one.
//!
//! While a lock is live, nobody but its owner may modify what it covers; two locks conflict
//! when their patterns may overlap and either is exclusive. Expired leases are reclaimed by the
//! next acquisition that needs them.
//!
//! A role may lock only what it may change: a lock taken for a role records it ([`Holder`]),
//! and keeps another owner from writing or deleting a path only if that role may make the
//! change itself under the policy ([`LockTable::check_modify`]). A glob wider than what the
//! role may write (`**`, `d?cs/**`) covers only the part it may write, judged on the canonical
//! path at each change.
//!
//! This crate does no I/O: the runtime keeps the [`LockTable`] as JSON in its state directory
//! and changes it under a file lock.
//!
//! ```
//! use std::time::Duration;
//! use toolcell_locks::{LockRequest, LockTable, Mode, Refusal};
//!
//! let mut table = LockTable::default();
//! let now = 1_000_000;
//! let lock = table.acquire(&LockRequest {
//!     pattern: "src/a.rs".into(),
//!     owner: "CHAIN-039".into(),
//!     session: "s-12".into(),
//!     mode: Mode::Exclusive,
//!     ttl: Duration::from_secs(60),
//! }, now).unwrap();
//! assert!(table.check_write("src/a.rs", "CHAIN-039", &[lock.fence], now).is_ok());
//! let refusal = table.check_write("src/a.rs", "CHAIN-040", &[], now).unwrap_err();
//! assert!(matches!(refusal, Refusal::Locked(_)));
//! // After the lease, the holder's token no longer lets it write.
//! let later = now + 61_000;
//! assert!(matches!(table.check_write("src/a.rs", "CHAIN-039", &[lock.fence], later), Err(Refusal::Fenced { .. })));
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use toolcell_policy::{Access, PathGlob, Policy, is_glob, may_overlap};
use toolcell_types::escape_control;

mod holder;

pub use holder::Holder;

/// The most live locks one owner may hold in a workspace: every write of another owner is
/// judged against each live lock whose pattern matches it.
pub const MAX_LOCKS_PER_OWNER: usize = 256;

/// Lapsed locks remembered, so that a stale token is refused with what it covered.
const MAX_LAPSED: usize = 1024;

/// Longest lease one acquisition may ask for.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Shared locks coexist; an exclusive lock excludes every other lock on what it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Others may hold shared locks too; nobody but the owners may write.
    Shared,
    /// Nobody else may hold a lock on what it covers.
    Exclusive,
}

impl Mode {
    /// `shared` or `exclusive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Exclusive => "exclusive",
        }
    }

    /// Parse `shared` or `exclusive`.
    pub fn from_name(name: &str) -> Option<Mode> {
        match name {
            "shared" => Some(Mode::Shared),
            "exclusive" => Some(Mode::Exclusive),
            _ => None,
        }
    }
}

/// One lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// A canonical workspace-relative path or glob.
    pub pattern: String,
    /// Who holds it.
    pub owner: String,
    /// The session that acquired it.
    pub session: String,
    /// Shared or exclusive.
    pub mode: Mode,
    /// When it was acquired (or last renewed), in milliseconds since the Unix epoch.
    pub acquired_at_ms: u64,
    /// When the lease ends, in milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
    /// The fencing token of this acquisition.
    pub fence: u64,
    /// The roles it was taken for; `None` for the operator's, or one taken without a policy
    /// (it covers its whole pattern).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_for: Option<Box<Holder>>,
}

impl Lock {
    /// Whether the lease still runs at `now_ms`.
    pub fn is_live(&self, now_ms: u64) -> bool {
        now_ms < self.expires_at_ms
    }

    /// Whether the lock's pattern matches the canonical path `path` (what its holder may not
    /// change included: see [`Lock::keeps_from`]).
    pub fn covers(&self, path: &str) -> bool {
        self.pattern == path || PathGlob::new(&self.pattern).is_ok_and(|glob| glob.is_match(path))
    }

    /// Whether the lock keeps other owners from `access` to the canonical `path` under
    /// `policy` (`None`: no policy): its pattern matches the path, and its holder may make that
    /// change itself.
    pub fn keeps_from(&self, policy: Option<&Policy>, access: Access, path: &str) -> bool {
        self.covers(path) && self.held_for.as_deref().is_none_or(|holder| holder.may(policy, access, path))
    }

    /// When the lease ends, as RFC 3339 UTC.
    pub fn expires_at(&self) -> String {
        format_ms(self.expires_at_ms)
    }

    /// Who holds it, as any caller may be told: the owner it was taken for (a chain, a task),
    /// or `another session` when that owner is the session's id, never the id itself (an MCP
    /// session id lets whoever knows it act in the session).
    pub fn holder(&self) -> String {
        if self.owner == self.session { "another session".to_owned() } else { format!("`{}`", escape_control(&self.owner)) }
    }

    /// What a caller that ran into it is told: the pattern, the holder as [`Lock::holder`]
    /// says (never a session id), the mode and when the lease ends.
    pub fn described(&self) -> String {
        format!("`{}` is locked by {} ({}) until {}", escape_control(&self.pattern), self.holder(), self.mode.as_str(), self.expires_at())
    }
}

/// For the operator (`toolcell lock list`): with the session that took it. A caller is told
/// [`Lock::described`] instead.
impl fmt::Display for Lock {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "`{}` is locked by `{}` (session {}, {}) until {}",
            escape_control(&self.pattern),
            escape_control(&self.owner),
            escape_control(&self.session),
            self.mode.as_str(),
            self.expires_at()
        )
    }
}

/// Why a lease is no longer live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lapse {
    /// Its holder released it.
    Released,
    /// It expired, and another acquisition reclaimed what it covered.
    Reclaimed,
    /// It expired.
    Expired,
}

/// A lock that is no longer live, kept so that its token is refused with a reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lapsed {
    /// The lock as it was.
    pub lock: Lock,
    /// Why it lapsed.
    pub lapse: Lapse,
}

/// What to acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRequest {
    /// A canonical workspace-relative path or glob.
    pub pattern: String,
    /// Who will hold it.
    pub owner: String,
    /// The session acquiring it.
    pub session: String,
    /// Shared or exclusive.
    pub mode: Mode,
    /// How long the lease lasts (at most [`MAX_TTL`]).
    pub ttl: Duration,
}

/// An acquisition for a role ([`LockTable::acquire_held`]): what it asks, whose claim it is,
/// and the policy both its holder and the holders of the locks it meets are judged by.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// The roles it is taken for; `None` for the operator's lock.
    pub holder: Option<&'a Holder>,
    /// The policy (`None`: no policy, every lock covers its whole pattern).
    pub policy: Option<&'a Policy>,
}

/// Why an acquisition or release failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// Another owner holds a conflicting live lock.
    #[error("{}: wait for it to be released or to expire, or work on another path", .0.described())]
    Conflict(Lock),
    /// The pattern is not a canonical workspace-relative path or glob.
    #[error("lock pattern `{pattern}` is not valid: {reason}")]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The owner is empty or has control characters.
    #[error("lock owner `{0}` is not valid: give a non-empty name without control characters (e.g. a chain or task id)")]
    Owner(String),
    /// The lease is zero or longer than [`MAX_TTL`].
    #[error("a lease of {0:?} is not allowed: ask for between 1 ms and 24 h")]
    Ttl(Duration),
    /// The owner already holds [`MAX_LOCKS_PER_OWNER`] live locks in the workspace.
    #[error(
        "`{owner}` already holds {cap} live locks here, the most one owner may hold: release some (`unlock_files`, `toolcell lock release`), or lock a glob that covers several paths"
    )]
    TooMany {
        /// The owner.
        owner: String,
        /// The cap, [`MAX_LOCKS_PER_OWNER`].
        cap: usize,
    },
    /// No live lock with this token is held by this owner.
    #[error("no lock with token {fence} is held by `{owner}`; `toolcell lock list` shows the live locks")]
    NotHeld {
        /// The token given.
        fence: u64,
        /// The owner given.
        owner: String,
    },
}

/// Why a write is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another owner holds a live lock covering the path.
    Locked(Lock),
    /// The caller presented a token whose lease lapsed, or holds an expired lock covering the
    /// path: it must acquire the lock again before writing.
    Fenced {
        /// The token.
        fence: u64,
        /// The lapsed lock, if the table still knows it.
        lapsed: Option<Box<Lapsed>>,
    },
}

impl Refusal {
    /// The agent-facing message for a write to `path`.
    pub fn message(&self, path: &str) -> String {
        match self {
            Refusal::Locked(lock) => format!(
                "`{path}` is locked by {} until {}: wait for the lock to be released or to expire, or work on another file",
                lock.holder(),
                lock.expires_at()
            ),
            Refusal::Fenced { fence, lapsed: Some(lapsed) } => format!(
                "`{path}` is covered by your lock `{}` (token {fence}), which {}: acquire the lock again before writing",
                escape_control(&lapsed.lock.pattern),
                // The table keeps when a lease was to end, not when it was released.
                match lapsed.lapse {
                    Lapse::Released => "was released".to_owned(),
                    Lapse::Reclaimed =>
                        format!("expired and was reclaimed by another holder (its lease ended at {})", lapsed.lock.expires_at()),
                    Lapse::Expired => format!("expired at {}", lapsed.lock.expires_at()),
                }
            ),
            Refusal::Fenced { fence, lapsed: None } => format!(
                "lock token {fence} is not live (it lapsed long ago or never existed), so this call may not write `{path}`: acquire the lock again"
            ),
        }
    }

    /// The rule recorded in the audit trail: `lock:<fence>` or `fenced:<fence>`.
    pub fn rule(&self) -> String {
        match self {
            Refusal::Locked(lock) => format!("lock:{}", lock.fence),
            Refusal::Fenced { fence, .. } => format!("fenced:{fence}"),
        }
    }
}

/// Every lock, live or expired-but-not-reclaimed, and the fencing counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockTable {
    /// The token the next acquisition gets (tokens start at 1).
    #[serde(default)]
    next_fence: u64,
    /// Held locks, in acquisition order; some may have expired.
    #[serde(default)]
    locks: Vec<Lock>,
    /// Recently lapsed locks, newest last.
    #[serde(default)]
    lapsed: VecDeque<Lapsed>,
}

impl LockTable {
    /// A table from its parts, for a store that keeps them as rows: the token the next
    /// acquisition gets, the held locks in acquisition order, the lapsed ones oldest first.
    pub fn from_parts(next_fence: u64, locks: Vec<Lock>, lapsed: Vec<Lapsed>) -> LockTable {
        let mut table = LockTable { next_fence, locks, lapsed: lapsed.into() };
        while table.lapsed.len() > MAX_LAPSED {
            table.lapsed.pop_front();
        }
        table
    }

    /// The token the next acquisition gets.
    pub fn next_fence(&self) -> u64 {
        self.next_fence
    }

    /// The locks that lapsed recently (released, reclaimed), oldest first: their tokens are
    /// refused with the reason.
    pub fn lapsed(&self) -> impl Iterator<Item = &Lapsed> {
        self.lapsed.iter()
    }

    /// Acquire (or, for the same owner, session, pattern and mode, renew) a lease at `now_ms`.
    /// A renewal keeps the token.
    ///
    /// # Errors
    ///
    /// [`LockError::Conflict`] naming the conflicting live lock; [`LockError::Pattern`],
    /// [`LockError::Owner`] or [`LockError::Ttl`] for a bad request.
    pub fn acquire(&mut self, request: &LockRequest, now_ms: u64) -> Result<Lock, LockError> {
        self.acquire_held(request, Held { holder: None, policy: None }, now_ms)
    }

    /// [`acquire`](Self::acquire) for `held`'s holder: the lock records it, and it conflicts
    /// with a lock of another owner on a literal path only if both holders may write that path
    /// (two globs conflict whenever they may overlap).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn acquire_held(&mut self, request: &LockRequest, held: Held<'_>, now_ms: u64) -> Result<Lock, LockError> {
        if request.owner.is_empty() || request.owner.chars().any(char::is_control) {
            return Err(LockError::Owner(request.owner.escape_default().to_string()));
        }
        if request.ttl.is_zero() || request.ttl > MAX_TTL {
            return Err(LockError::Ttl(request.ttl));
        }
        if request.pattern.chars().chain(request.session.chars()).any(char::is_control) {
            return Err(LockError::Pattern {
                pattern: request.pattern.escape_default().to_string(),
                reason: "a pattern or session with a control character (newline, escape) would forge lines wherever the lock is shown; name one without".to_owned(),
            });
        }
        if request.pattern != "." {
            PathGlob::new(&request.pattern)
                .map_err(|reason| LockError::Pattern { pattern: request.pattern.escape_default().to_string(), reason })?;
        }
        let expires_at_ms = now_ms.saturating_add(u64::try_from(request.ttl.as_millis()).unwrap_or(u64::MAX));
        if let Some(conflict) = self.locks.iter().find(|lock| {
            lock.is_live(now_ms)
                && lock.owner != request.owner
                && (lock.mode == Mode::Exclusive || request.mode == Mode::Exclusive)
                && contested(lock, &request.pattern, held)
        }) {
            return Err(LockError::Conflict(conflict.clone()));
        }
        // Reclaim the expired leases this acquisition overlaps.
        let mut index = 0;
        while index < self.locks.len() {
            let lock = &self.locks[index];
            if !lock.is_live(now_ms) && may_overlap(&lock.pattern, &request.pattern) && lock.owner != request.owner {
                let lock = self.locks.remove(index);
                self.remember(lock, Lapse::Reclaimed);
            } else {
                index += 1;
            }
        }
        if let Some(existing) = self.locks.iter_mut().find(|lock| {
            lock.is_live(now_ms)
                && lock.owner == request.owner
                && lock.session == request.session
                && lock.pattern == request.pattern
                && lock.mode == request.mode
                && lock.held_for.as_deref() == held.holder
        }) {
            existing.acquired_at_ms = now_ms;
            existing.expires_at_ms = expires_at_ms;
            return Ok(existing.clone());
        }
        if self.locks.iter().filter(|lock| lock.is_live(now_ms) && lock.owner == request.owner).count() >= MAX_LOCKS_PER_OWNER {
            return Err(LockError::TooMany { owner: request.owner.clone(), cap: MAX_LOCKS_PER_OWNER });
        }
        self.next_fence = self.next_fence.max(1);
        let lock = Lock {
            pattern: request.pattern.clone(),
            owner: request.owner.clone(),
            session: request.session.clone(),
            mode: request.mode,
            acquired_at_ms: now_ms,
            expires_at_ms,
            fence: self.next_fence,
            held_for: held.holder.cloned().map(Box::new),
        };
        self.next_fence += 1;
        self.locks.push(lock.clone());
        Ok(lock)
    }

    /// Release the lock with token `fence` held by `owner` (live or expired).
    ///
    /// # Errors
    ///
    /// [`LockError::NotHeld`] if `owner` holds no lock with that token.
    pub fn release(&mut self, fence: u64, owner: &str) -> Result<Lock, LockError> {
        let index = self
            .locks
            .iter()
            .position(|lock| lock.fence == fence && lock.owner == owner)
            .ok_or_else(|| LockError::NotHeld { fence, owner: owner.escape_default().to_string() })?;
        let lock = self.locks.remove(index);
        self.remember(lock.clone(), Lapse::Released);
        Ok(lock)
    }

    /// Release every lock `owner` holds; returns them.
    pub fn release_all(&mut self, owner: &str) -> Vec<Lock> {
        self.release_where(|lock| lock.owner == owner)
    }

    /// Release every lock taken in `session` (whoever it was taken for); returns them.
    pub fn release_session(&mut self, session: &str) -> Vec<Lock> {
        self.release_where(|lock| lock.session == session)
    }

    /// Release every lock `released` picks; returns them.
    fn release_where(&mut self, released: impl Fn(&Lock) -> bool) -> Vec<Lock> {
        let (released, kept): (Vec<Lock>, Vec<Lock>) = self.locks.drain(..).partition(released);
        self.locks = kept;
        for lock in &released {
            self.remember(lock.clone(), Lapse::Released);
        }
        released
    }

    /// Decide whether `owner`, presenting the tokens `fences`, may modify the canonical `path`
    /// at `now_ms`.
    ///
    /// # Errors
    ///
    /// [`Refusal::Locked`] if another owner holds a live lock covering `path`;
    /// [`Refusal::Fenced`] if a presented token covering `path` lapsed, a presented token is
    /// unknown, or `owner` holds only an expired lock covering `path`.
    pub fn check_write(&self, path: &str, owner: &str, fences: &[u64], now_ms: u64) -> Result<(), Refusal> {
        self.check_modify(path, Access::Write, owner, fences, now_ms, None)
    }

    /// Decide whether `owner`, presenting the tokens `fences`, may make `access` (a write or a
    /// delete) to the canonical `path` at `now_ms`, under `policy` (`None`: no policy). A lock
    /// of another owner refuses it only if the lock's holder may make that change itself
    /// ([`Lock::keeps_from`]).
    ///
    /// # Errors
    ///
    /// As [`check_write`](Self::check_write).
    pub fn check_modify(
        &self,
        path: &str,
        access: Access,
        owner: &str,
        fences: &[u64],
        now_ms: u64,
        policy: Option<&Policy>,
    ) -> Result<(), Refusal> {
        if let Some(lock) =
            self.locks.iter().find(|lock| lock.is_live(now_ms) && lock.owner != owner && lock.keeps_from(policy, access, path))
        {
            return Err(Refusal::Locked(lock.clone()));
        }
        for &fence in fences {
            match self.locks.iter().find(|lock| lock.fence == fence) {
                Some(lock) if lock.is_live(now_ms) => {}
                Some(lock) => {
                    if lock.covers(path) {
                        return Err(Refusal::Fenced {
                            fence,
                            lapsed: Some(Box::new(Lapsed { lock: lock.clone(), lapse: Lapse::Expired })),
                        });
                    }
                }
                None => match self.lapsed.iter().rev().find(|lapsed| lapsed.lock.fence == fence) {
                    Some(lapsed) if !lapsed.lock.covers(path) => {}
                    lapsed => {
                        return Err(Refusal::Fenced { fence, lapsed: lapsed.cloned().map(Box::new) });
                    }
                },
            }
        }
        // A holder whose lease ran out may not write what it covered until it acquires again.
        let own =
            |live: bool| self.locks.iter().filter(move |lock| lock.owner == owner && lock.is_live(now_ms) == live && lock.covers(path));
        if own(true).next().is_none()
            && let Some(expired) = own(false).next_back()
        {
            return Err(Refusal::Fenced {
                fence: expired.fence,
                lapsed: Some(Box::new(Lapsed { lock: expired.clone(), lapse: Lapse::Expired })),
            });
        }
        Ok(())
    }

    /// The locks whose leases still run at `now_ms`.
    pub fn live(&self, now_ms: u64) -> impl Iterator<Item = &Lock> {
        self.locks.iter().filter(move |lock| lock.is_live(now_ms))
    }

    /// Every held lock, expired ones included.
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    fn remember(&mut self, lock: Lock, lapse: Lapse) {
        self.lapsed.push_back(Lapsed { lock, lapse });
        while self.lapsed.len() > MAX_LAPSED {
            self.lapsed.pop_front();
        }
    }
}

/// Whether the live lock `lock` and a request for `pattern` contest a path: their patterns may
/// overlap and, where one is a literal path, both holders may write it.
fn contested(lock: &Lock, pattern: &str, held: Held<'_>) -> bool {
    if !may_overlap(&lock.pattern, pattern) {
        return false;
    }
    let literal = if !is_glob(pattern) && pattern != "." {
        pattern
    } else if !is_glob(&lock.pattern) && lock.pattern != "." {
        &lock.pattern
    } else {
        return true;
    };
    let may = |holder: Option<&Holder>| holder.is_none_or(|holder| holder.may(held.policy, Access::Write, literal));
    may(lock.held_for.as_deref()) && may(held.holder)
}

/// `ms` since the Unix epoch as RFC 3339 UTC, to the second.
pub fn format_ms(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests;

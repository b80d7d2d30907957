//! The lock tables on disk: one per workspace, `locks/<hash of the workspace path>.json` in
//! the state directory, read and replaced under an exclusive lock on its `.lock` sibling, so
//! that every toolcell process sharing the state directory sees one table per workspace.
//! Without a state directory the tables live in memory, shared by the calls of one runtime.
//! With a shared store ([`LockBackend`], PostgreSQL in `toolcell-store-postgres`) they live
//! there, and its clock says when leases end.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use toolcell_locks::{Held, Lock, LockError, LockRequest, LockTable, Refusal};
use toolcell_policy::{Access, Policy};

use crate::LOCKS_DIR;

/// Why the lock table could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LockStoreError {
    /// The request was refused.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The table could not be read or written.
    #[error("cannot use the lock table at `{}`: {source}", path.display())]
    Io {
        /// The table's file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The shared store could not be used (unreachable, refused, damaged).
    #[error("cannot use the lock table in {store}: {reason}")]
    Store {
        /// The store, as it names itself (no password).
        store: String,
        /// What went wrong.
        reason: String,
    },
}

/// Lock tables kept outside the state directory, shared by several hosts: each change is made
/// alone among all of them, at the store's own time.
pub trait LockBackend: Send + Sync + std::fmt::Debug {
    /// `workspace`'s table as it is now, and the store's clock (milliseconds since the epoch).
    ///
    /// # Errors
    ///
    /// [`LockStoreError::Store`] if the store cannot be used.
    fn read(&self, workspace: &Path) -> Result<(LockTable, u64), LockStoreError>;

    /// Apply `change` to `workspace`'s table at the store's time, alone among every host
    /// sharing the store, and keep the result; nothing is kept if `change` fails. Tokens come
    /// from a counter that never goes back, whatever the table says.
    ///
    /// # Errors
    ///
    /// `change`'s refusal, or [`LockStoreError::Store`].
    fn update(&self, workspace: &Path, change: &mut dyn FnMut(&mut LockTable, u64) -> Result<(), LockError>) -> Result<(), LockStoreError>;
}

/// The lock table, shared by every call of a runtime (and, with a state directory, by every
/// process using it).
#[derive(Debug)]
pub struct LockStore {
    backing: Backing,
}

#[derive(Debug)]
enum Backing {
    Memory(Mutex<std::collections::HashMap<PathBuf, LockTable>>),
    Directory(PathBuf),
    Shared(std::sync::Arc<dyn LockBackend>),
}

impl LockStore {
    /// Tables in memory.
    pub fn in_memory() -> Self {
        LockStore { backing: Backing::Memory(Mutex::new(std::collections::HashMap::new())) }
    }

    /// Tables in `state_dir/locks`.
    pub fn in_directory(state_dir: &Path) -> Self {
        LockStore { backing: Backing::Directory(state_dir.join(LOCKS_DIR)) }
    }

    /// Tables in a shared store.
    pub fn shared(backend: std::sync::Arc<dyn LockBackend>) -> Self {
        LockStore { backing: Backing::Shared(backend) }
    }

    /// The table file and its lock file for `workspace`.
    fn files(directory: &Path, workspace: &Path) -> (PathBuf, PathBuf) {
        use sha2::Digest;
        let name = crate::storage::hex(&sha2::Sha256::digest(workspace.as_os_str().as_encoded_bytes()));
        (directory.join(format!("{name}.json")), directory.join(format!("{name}.lock")))
    }

    /// Acquire or renew a lease now.
    ///
    /// # Errors
    ///
    /// [`LockStoreError::Lock`] with the conflicting lock or what is wrong with the request;
    /// [`LockStoreError::Io`].
    pub fn acquire(&self, workspace: &Path, request: &LockRequest) -> Result<Lock, LockStoreError> {
        self.update(workspace, |table, now| table.acquire(request, now))
    }

    /// Acquire or renew a lease now for `held`'s holder ([`LockTable::acquire_held`]).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn acquire_held(&self, workspace: &Path, request: &LockRequest, held: Held<'_>) -> Result<Lock, LockStoreError> {
        self.update(workspace, |table, now| table.acquire_held(request, held, now))
    }

    /// Release the lock with token `fence` held by `owner`.
    ///
    /// # Errors
    ///
    /// [`LockStoreError::Lock`] if `owner` holds no such lock; [`LockStoreError::Io`].
    pub fn release(&self, workspace: &Path, fence: u64, owner: &str) -> Result<Lock, LockStoreError> {
        self.update(workspace, |table, _| table.release(fence, owner))
    }

    /// Release every lock `owner` holds.
    ///
    /// # Errors
    ///
    /// [`LockStoreError::Io`].
    pub fn release_all(&self, workspace: &Path, owner: &str) -> Result<Vec<Lock>, LockStoreError> {
        self.update(workspace, |table, _| Ok(table.release_all(owner)))
    }

    /// Release every lock taken in `session`.
    ///
    /// # Errors
    ///
    /// [`LockStoreError::Io`].
    pub fn release_session(&self, workspace: &Path, session: &str) -> Result<Vec<Lock>, LockStoreError> {
        self.update(workspace, |table, _| Ok(table.release_session(session)))
    }

    /// The live locks now.
    ///
    /// # Errors
    ///
    /// [`LockStoreError::Io`].
    pub fn live(&self, workspace: &Path) -> Result<Vec<Lock>, LockStoreError> {
        self.read(workspace, |table, now| table.live(now).cloned().collect())
    }

    /// Whether `owner`, presenting `fences`, may modify `path` now; `Ok(Err(_))` is a refusal.
    ///
    /// # Errors
    ///
    /// [`LockStoreError::Io`] if the table cannot be read.
    pub fn check_write(&self, workspace: &Path, path: &str, owner: &str, fences: &[u64]) -> Result<Result<(), Refusal>, LockStoreError> {
        self.read(workspace, |table, now| table.check_write(path, owner, fences, now))
    }

    /// Whether `owner`, presenting `fences`, may make `access` to `path` now, the holders of
    /// other owners' locks judged by `policy` ([`LockTable::check_modify`]); `Ok(Err(_))` is a
    /// refusal.
    ///
    /// # Errors
    ///
    /// [`LockStoreError::Io`] if the table cannot be read.
    pub fn check_modify(
        &self,
        workspace: &Path,
        path: &str,
        access: Access,
        owner: &str,
        fences: &[u64],
        policy: Option<&Policy>,
    ) -> Result<Result<(), Refusal>, LockStoreError> {
        self.read(workspace, |table, now| table.check_modify(path, access, owner, fences, now, policy))
    }

    fn read<T>(&self, workspace: &Path, read: impl FnOnce(&LockTable, u64) -> T) -> Result<T, LockStoreError> {
        match &self.backing {
            Backing::Memory(tables) => {
                let tables = tables.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                Ok(read(tables.get(workspace).unwrap_or(&LockTable::default()), now_ms()))
            }
            Backing::Shared(backend) => {
                let (table, now) = backend.read(workspace)?;
                Ok(read(&table, now))
            }
            Backing::Directory(directory) => {
                let (table, lock) = Self::files(directory, workspace);
                let io = |source| LockStoreError::Io { path: table.clone(), source };
                if !table.exists() {
                    // Nothing was ever locked in this workspace.
                    return Ok(read(&LockTable::default(), now_ms()));
                }
                let guard = open_lock(&lock).map_err(io)?;
                guard.lock_shared().map_err(io)?;
                let loaded = load(&table).map_err(io);
                drop(guard);
                Ok(read(&loaded?, now_ms()))
            }
        }
    }

    fn update<T>(&self, workspace: &Path, change: impl FnOnce(&mut LockTable, u64) -> Result<T, LockError>) -> Result<T, LockStoreError> {
        match &self.backing {
            Backing::Memory(tables) => {
                let mut tables = tables.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                Ok(change(tables.entry(workspace.to_path_buf()).or_default(), now_ms())?)
            }
            Backing::Shared(backend) => {
                let mut change = Some(change);
                let mut result = None;
                backend.update(workspace, &mut |table, now| {
                    // Called once; a backend that called again would find nothing to do.
                    if let Some(change) = change.take() {
                        result = Some(change(table, now)?);
                    }
                    Ok(())
                })?;
                result
                    .ok_or_else(|| LockStoreError::Store { store: format!("{backend:?}"), reason: "the change was not applied".to_owned() })
            }
            Backing::Directory(directory) => {
                let (table, lock) = Self::files(directory, workspace);
                let io = |source| LockStoreError::Io { path: table.clone(), source };
                crate::storage::create_private_dirs(directory).map_err(io)?;
                let guard = open_lock(&lock).map_err(io)?;
                guard.lock().map_err(io)?;
                let mut loaded = load(&table).map_err(io)?;
                let result = change(&mut loaded, now_ms())?;
                crate::storage::replace_json(&table, &loaded, true).map_err(io)?;
                drop(guard);
                Ok(result)
            }
        }
    }
}

fn open_lock(path: &Path) -> std::io::Result<File> {
    crate::storage::private_file().read(true).write(true).create(true).truncate(false).open(path)
}

fn load(path: &Path) -> std::io::Result<LockTable> {
    match crate::storage::read_host_file(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the lock table is damaged ({error}); remove it to drop every lock"),
            )
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(LockTable::default()),
        Err(error) => Err(error),
    }
}

/// The audit record of `event` (`acquired`, `renewed`, `released`, …) on `lock`, in the
/// workspace `workspace` (its directory, as records name it), by `principal`.
pub fn lock_record(lock: &Lock, event: &str, workspace: &str, principal: Option<&str>) -> toolcell_audit::Record {
    toolcell_audit::Record::lock(&toolcell_audit::now(), &lock.session, &lock.owner, event, &lock.pattern, lock.mode.as_str(), lock.fence)
        .at(workspace, principal)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

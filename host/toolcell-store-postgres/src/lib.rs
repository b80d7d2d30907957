//! toolcell's shared store on PostgreSQL: the lock leases and the audit trail of hosts on
//! several machines working on one repository.
//!
//! - **Leases** (`toolcell_leases`): one row per lock (owner, session, mode, pattern, when it
//!   was acquired and when it ends, the roles it was taken for) and per recently lapsed lock. Every change runs in one
//!   transaction holding a transaction-scoped advisory lock on the workspace: the rows are read
//!   into toolcell's own [`LockTable`] (so overlaps are judged exactly as by the file backend),
//!   changed at the database's clock (`clock_timestamp()`, never a host's), expired leases
//!   reclaimed by the acquisition that needs them, and written back. Fencing tokens come from
//!   the sequence `toolcell_fence`, which never goes back.
//! - **Audit** (`toolcell_audit`): one table and one hash chain per deployment (every workspace,
//!   every host), each record sealed by [`toolcell_audit::seal`] after the table's last one while
//!   an advisory lock orders appends, so concurrent hosts cannot fork the chain. A trigger
//!   refuses updates and deletes; what a superuser changes anyway, `toolcell audit verify`
//!   finds.
//! - **Sessions** ([`toolcell_state::SessionBackend`], see `sessions.rs`): each session's read
//!   versions and undo history, and `serve`'s MCP sessions, so any host serves any session.
//! - **Migrations** are versioned ([`MIGRATIONS`]) and applied only by [`PostgresStore::migrate`]
//!   (`toolcell store migrate`); [`PostgresStore::connect`] refuses a database at another
//!   version.
//!
//! One connection per store, opened again after a failure. When the database cannot be
//! reached, lock checks fail and the host refuses every modification (reads go on), and audit
//! appends fail and withhold the call's result; both work again once it is back.
//! [`PostgresStore::watch`] is told once per outage and once per recovery (`serve` logs them).

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio_postgres::Config;
use toolcell_locks::{LockError, LockTable};
use toolcell_state::{LockBackend, LockStoreError};

mod audit;
mod connection;
mod leases;
mod sessions;

use connection::{Failure, Slot};
use leases::{LEASE_COLUMNS, table_of, write_back};

/// The schema version this build needs.
pub const SCHEMA_VERSION: i32 = 4;

/// Each version's statements, applied in order by [`PostgresStore::migrate`].
pub const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        r"
CREATE SEQUENCE toolcell_fence;
CREATE SEQUENCE toolcell_lapse_order;
CREATE TABLE toolcell_leases (
    workspace text NOT NULL,
    fence bigint NOT NULL CHECK (fence > 0),
    pattern text NOT NULL,
    owner text NOT NULL,
    session text NOT NULL,
    mode text NOT NULL CHECK (mode IN ('shared', 'exclusive')),
    acquired_at_ms bigint NOT NULL,
    expires_at_ms bigint NOT NULL,
    -- NULL while held; else why it lapsed, and when among the workspace's lapsed locks.
    lapse text CHECK (lapse IN ('released', 'reclaimed', 'expired')),
    lapse_order bigint
);
CREATE INDEX toolcell_leases_workspace ON toolcell_leases (workspace, fence);
CREATE TABLE toolcell_audit (
    seq bigint PRIMARY KEY CHECK (seq > 0),
    hash text NOT NULL,
    line text NOT NULL,
    appended_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION toolcell_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'toolcell_audit is append-only';
END
$$;
CREATE TRIGGER toolcell_audit_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON toolcell_audit
    FOR EACH STATEMENT EXECUTE FUNCTION toolcell_audit_append_only();
",
    ),
    (2, sessions::MIGRATION),
    (3, audit::MIGRATION),
    (4, leases::MIGRATION),
];

/// The advisory lock that orders migrations.
const MIGRATE_LOCK: i64 = 0x7463_6d69_6772_6101;
/// How long connecting may take before the store counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a use of the store may wait for the database's answer, unless configured
/// (`[store] answer_timeout`): past it, the use fails and the connection is dropped.
pub const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// The database's clock, in milliseconds since the Unix epoch.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// Why the store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The connection string does not parse.
    #[error(
        "`--store {url}` is not a PostgreSQL connection string ({reason}); use postgres://USER@HOST/DB or `host=/socket/dir dbname=DB`"
    )]
    Url {
        /// The string as given (any password replaced).
        url: String,
        /// The parser's reason.
        reason: String,
    },
    /// The database cannot be reached, refused a statement, or did not answer in time.
    #[error("PostgreSQL at {store}: {reason}")]
    Database {
        /// The store's name.
        store: String,
        /// What went wrong.
        reason: String,
    },
    /// The database's schema is not the one this toolcell needs.
    #[error(
        "PostgreSQL at {store} has toolcell schema version {found}, this toolcell needs {SCHEMA_VERSION}: run `toolcell store migrate --store URL` (once, as the database's owner)"
    )]
    Schema {
        /// The store's name.
        store: String,
        /// The version found (0: never migrated).
        found: i32,
    },
}

/// A change in whether the store can be reached, as its uses find it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Availability {
    /// A use found the database unreachable (the driver's reason, never a password).
    Lost {
        /// Why.
        reason: String,
    },
    /// A use reached it again, this long after it was found unreachable.
    Back {
        /// How long it was unreachable (at least).
        after: Duration,
    },
}

/// What is told of each [`Availability`] change.
type Watcher = Box<dyn Fn(&Availability) + Send + Sync>;

/// A connection to toolcell's tables in one PostgreSQL database.
pub struct PostgresStore {
    config: Config,
    name: String,
    /// The runtime every round trip runs on, under [`answer_timeout`](Self::answer_timeout)
    /// (`None` once the store is dropped).
    runtime: Option<tokio::runtime::Runtime>,
    /// How long a use waits for the database before it fails and the connection is dropped.
    answer_timeout: Duration,
    /// The connection, and when it was last used; waited for under the deadline (a use that
    /// hangs holds it, and the uses behind it must not queue past their own deadline).
    client: Slot,
    /// Since when the database has been unreachable (`None`: it was reached last time).
    lost_since: Mutex<Option<Instant>>,
    /// When a use last found the database hanging (no answer in time, then none to a
    /// `SELECT 1` on a new connection either), and why (`None`: a use reached it since): for
    /// [`answer_timeout`](Self::answer_timeout) after that, uses fail at once.
    last_failure: Mutex<Option<(Instant, String)>>,
    watcher: OnceLock<Watcher>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // The last holder may drop the store on a thread of another runtime (`serve`'s), where
        // waiting for this one's tasks to stop is not allowed: they are stopped without waiting.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.name)
    }
}

impl PostgresStore {
    /// The store at `url`, its schema checked.
    ///
    /// # Errors
    ///
    /// [`StoreError::Url`], [`StoreError::Database`] if it cannot be reached,
    /// [`StoreError::Schema`] if it needs `toolcell store migrate`.
    pub fn connect(url: &str) -> Result<Arc<PostgresStore>, StoreError> {
        PostgresStore::connect_with(url, DEFAULT_ANSWER_TIMEOUT)
    }

    /// The store at `url`, its schema checked, each use waiting at most `answer_timeout` for
    /// the database (see [`open_with`](Self::open_with)).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub fn connect_with(url: &str, answer_timeout: Duration) -> Result<Arc<PostgresStore>, StoreError> {
        let store = PostgresStore::open_with(url, answer_timeout)?;
        let found = store.schema_version()?;
        if found != SCHEMA_VERSION {
            return Err(StoreError::Schema { store: store.name.clone(), found });
        }
        Ok(Arc::new(store))
    }

    /// The store at `url`, not yet connected, its schema unchecked (for [`migrate`](Self::migrate)).
    ///
    /// # Errors
    ///
    /// [`StoreError::Url`].
    pub fn open(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::open_with(url, DEFAULT_ANSWER_TIMEOUT)
    }

    /// The store at `url`, not yet connected: each use (a statement, a transaction, connecting)
    /// waits at most `answer_timeout` for the database; past it the use fails, saying the
    /// database did not answer in time, and the connection is dropped as broken (a database that
    /// hangs, stopped rather than refusing, holds no caller longer than this).
    ///
    /// # Errors
    ///
    /// [`StoreError::Url`]; [`StoreError::Database`] if the store's runtime cannot start.
    pub fn open_with(url: &str, answer_timeout: Duration) -> Result<PostgresStore, StoreError> {
        let mut config: Config = url
            .parse()
            .map_err(|error: tokio_postgres::Error| StoreError::Url { url: without_password(url), reason: error.to_string() })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT.min(answer_timeout));
        }
        let name = name_of(&config);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| StoreError::Database { store: name.clone(), reason: format!("its runtime cannot start: {error}") })?;
        Ok(PostgresStore {
            config,
            name,
            runtime: Some(runtime),
            answer_timeout,
            client: Slot::default(),
            lost_since: Mutex::new(None),
            last_failure: Mutex::new(None),
            watcher: OnceLock::new(),
        })
    }

    /// How long a use waits for the database before it fails (and the connection is dropped).
    pub fn answer_timeout(&self) -> Duration {
        self.answer_timeout
    }

    /// Tell `watcher` each time a use finds the database unreachable after it was reached,
    /// and reached again after that: one call per outage and one per recovery (a service
    /// logs them). Only the first watcher set is kept.
    pub fn watch(&self, watcher: impl Fn(&Availability) + Send + Sync + 'static) {
        let _ = self.watcher.set(Box::new(watcher));
    }

    /// What the store is: `postgres://USER@HOST/DB`, without a password.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn database_error(&self, failure: Failure) -> StoreError {
        StoreError::Database { store: self.name.clone(), reason: failure.to_string() }
    }

    /// The toolcell schema version of the database (0 if it was never migrated).
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`].
    pub fn schema_version(&self) -> Result<i32, StoreError> {
        self.with_client(async |client| {
            let exists: bool = client.query_one("SELECT to_regclass('toolcell_schema') IS NOT NULL", &[]).await?.get(0);
            if !exists {
                return Ok(0);
            }
            client.query_one("SELECT coalesce(max(version), 0) FROM toolcell_schema", &[]).await.map(|row| row.get(0))
        })
        .map_err(|reason| self.database_error(reason))
    }

    /// Bring the database to [`SCHEMA_VERSION`], in one transaction; the versions applied.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] (nothing is applied then); [`StoreError::Schema`] if the
    /// database is at a later version than this toolcell knows.
    pub fn migrate(&self) -> Result<Vec<i32>, StoreError> {
        let outcome = self
            .with_client(async |client| {
                let transaction = client.transaction().await?;
                transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK]).await?;
                transaction.batch_execute(
                    "CREATE TABLE IF NOT EXISTS toolcell_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
                ).await?;
                let current: i32 = transaction.query_one("SELECT coalesce(max(version), 0) FROM toolcell_schema", &[]).await?.get(0);
                if current > SCHEMA_VERSION {
                    return Ok(Err(current));
                }
                let mut applied = Vec::new();
                for (version, statements) in MIGRATIONS.iter().filter(|(version, _)| *version > current) {
                    transaction.batch_execute(statements).await?;
                    transaction.execute("INSERT INTO toolcell_schema (version) VALUES ($1)", &[version]).await?;
                    applied.push(*version);
                }
                transaction.commit().await?;
                Ok(Ok(applied))
            })
            .map_err(|reason| self.database_error(reason))?;
        outcome.map_err(|found| StoreError::Schema { store: self.name.clone(), found })
    }

    fn lock_error(&self, reason: impl std::fmt::Display) -> LockStoreError {
        LockStoreError::Store { store: self.name.clone(), reason: reason.to_string() }
    }
}

impl LockBackend for PostgresStore {
    fn read(&self, workspace: &Path) -> Result<(LockTable, u64), LockStoreError> {
        let key = workspace.to_string_lossy();
        let rows = self
            .with_client(async |client| {
                client
                    .query(
                        &format!(
                            "SELECT {NOW_MS}, {LEASE_COLUMNS} FROM (SELECT 1) AS clock LEFT JOIN toolcell_leases ON workspace = $1 \
                         ORDER BY lapse_order NULLS FIRST, fence"
                        ),
                        &[&key],
                    )
                    .await
            })
            .map_err(|reason| self.lock_error(reason))?;
        let now = rows.first().map_or(0, |row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0));
        let table = table_of(&rows, 1, 0).map_err(|reason| self.lock_error(reason))?;
        Ok((table, now))
    }

    fn update(&self, workspace: &Path, change: &mut dyn FnMut(&mut LockTable, u64) -> Result<(), LockError>) -> Result<(), LockStoreError> {
        let key = workspace.to_string_lossy();
        let outcome = self
            .with_client(async |client| {
                let mut transaction = client.transaction().await?;
                // Alone among every host changing this workspace's leases.
                transaction.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&key]).await?;
                let clock = transaction.query_one(&format!("SELECT {NOW_MS}, nextval('toolcell_fence')"), &[]).await?;
                let (now, fence): (i64, i64) = (clock.get(0), clock.get(1));
                let rows = transaction
                    .query(
                        &format!(
                            "SELECT {LEASE_COLUMNS} FROM toolcell_leases WHERE workspace = $1 ORDER BY lapse_order NULLS FIRST, fence"
                        ),
                        &[&key],
                    )
                    .await?;
                let mut table = match table_of(&rows, 0, u64::try_from(fence).unwrap_or(1)) {
                    Ok(table) => table,
                    Err(reason) => return Ok(Err(Err(reason))),
                };
                let before = table.clone();
                if let Err(refused) = change(&mut table, u64::try_from(now).unwrap_or(0)) {
                    // Nothing is kept: the transaction rolls back as it is dropped.
                    return Ok(Err(Ok(refused)));
                }
                write_back(&mut transaction, &key, &before, &table).await?;
                transaction.commit().await?;
                Ok(Ok(()))
            })
            .map_err(|reason| self.lock_error(reason))?;
        match outcome {
            Ok(()) => Ok(()),
            Err(Ok(refused)) => Err(LockStoreError::Lock(refused)),
            Err(Err(damaged)) => Err(self.lock_error(damaged)),
        }
    }
}

/// `postgres://USER@HOST[:PORT]/DB` for messages (the port when it is not the default):
/// never the password.
fn name_of(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = match config.get_ports().first() {
        Some(port) if *port != 5432 => format!(":{port}"),
        _ => String::new(),
    };
    let user = config.get_user().unwrap_or("");
    let database = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{host}{port}/{database}")
}

/// `url` with any password replaced by `***`.
fn without_password(url: &str) -> String {
    let hidden = |text: &str| {
        text.split_whitespace()
            .map(|part| if part.starts_with("password=") { "password=***".to_owned() } else { part.to_owned() })
            .collect::<Vec<_>>()
            .join(" ")
    };
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((credentials, host)) => {
                let user = credentials.split_once(':').map_or(credentials, |(user, _)| user);
                format!("{scheme}://{user}@{host}")
            }
            None => url.to_owned(),
        },
        None => hidden(url),
    }
}

/// A driver error in one line: the server's message when there is one.
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(database) => format!("{} ({})", database.message(), database.code().code()),
        None => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(without_password("postgres://ops:s3cret@db.internal/toolcell"), "postgres://ops@db.internal/toolcell");
        assert_eq!(without_password("host=/run/pg user=ops password=s3cret"), "host=/run/pg user=ops password=***");
        let store = PostgresStore::open("postgres://ops:s3cret@db.internal:5433/toolcell").expect("parses");
        // The port is part of where the store is: a message names it (not the default one).
        assert_eq!(store.name(), "postgres://ops@db.internal:5433/toolcell");
        assert_eq!(
            PostgresStore::open("postgres://ops@db.internal:5432/toolcell").expect("parses").name(),
            "postgres://ops@db.internal/toolcell"
        );
        assert!(!format!("{store:?}").contains("s3cret"));
        let error = PostgresStore::open("postgres://ops:s3cret@db.internal:notaport/x").expect_err("bad port");
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }

    /// `serve` drops its store inside its own runtime when it stops: that must not panic.
    #[test]
    fn a_store_dropped_inside_another_runtime_stops_its_own_without_panicking() {
        let store = PostgresStore::open("postgres://ops@db.internal/toolcell").expect("parses");
        let serving = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        serving.block_on(async move { drop(store) });
    }
}

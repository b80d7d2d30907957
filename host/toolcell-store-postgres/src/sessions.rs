//! Session state on PostgreSQL ([`SessionBackend`]), so that any host of a deployment serves
//! any request of any session:
//!
//! - **Read versions** (`toolcell_session_reads`): one row per session and path. A call's
//!   changes are one statement (upserts and deletes together), so two hosts recording for one
//!   session at once resolve row by row in the database.
//! - **Undo history** (`toolcell_session_undo`, `toolcell_session_blobs`): the undo log's lines
//!   in order (`seq`), appended by one statement that holds the session's advisory lock, with
//!   the content of the larger files; the log keeps its last lines, as the file does.
//! - **MCP sessions** (`toolcell_mcp_sessions`): who opened each, the client's `initialize`,
//!   and when it was last used, at the database's clock: a session idle past `session_idle` is
//!   gone for every host at the same moment, whichever host sweeps it.
//!
//! Each method is one statement, sent with its parameters' types (`query_typed`: one round
//! trip, no separate prepare), never one per path; the sweep is one transaction.

use std::collections::HashMap;
use std::time::Duration;

use tokio_postgres::types::Type;
use toolcell_state::reads::Version;
use toolcell_state::{McpSession, McpSweep, SessionBackend, SessionStoreError};

use crate::PostgresStore;

/// The statements of schema version 2: the session state.
pub(crate) const MIGRATION: &str = r"
CREATE TABLE toolcell_session_reads (
    session_key text NOT NULL,
    path text NOT NULL,
    version text NOT NULL,
    PRIMARY KEY (session_key, path)
);
CREATE TABLE toolcell_session_undo (
    seq bigserial PRIMARY KEY,
    session_key text NOT NULL,
    line text NOT NULL
);
CREATE INDEX toolcell_session_undo_key ON toolcell_session_undo (session_key, seq);
CREATE TABLE toolcell_session_blobs (
    session_key text NOT NULL,
    name text NOT NULL,
    content bytea NOT NULL,
    PRIMARY KEY (session_key, name)
);
CREATE TABLE toolcell_mcp_sessions (
    id text PRIMARY KEY,
    principal text NOT NULL,
    initialization text,
    last_used timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX toolcell_mcp_sessions_last_used ON toolcell_mcp_sessions (last_used);
";

/// Append undo lines (`$2`) and blobs (`$3` names, `$4` contents) to the session `$1`'s log,
/// keeping its last `$5 + 1` lines before the append: CTEs, then the statement. The session's
/// advisory lock comes first, so that its lines stay in the order its calls committed whatever
/// host appends; the oldest lines past the cut go (as the statement's snapshot sees them: at
/// most one append late), and the blobs only they name go with them.
const APPEND_UNDO: &str = "locked AS MATERIALIZED (SELECT pg_advisory_xact_lock(hashtextextended($1, 1)) FROM mark), \
     blobs AS (INSERT INTO toolcell_session_blobs (session_key, name, content) \
         SELECT $1, name, content FROM locked, unnest($3::text[], $4::bytea[]) AS kept(name, content) ON CONFLICT DO NOTHING), \
     appended AS (INSERT INTO toolcell_session_undo (session_key, line) \
         SELECT $1, line FROM locked, unnest($2::text[]) WITH ORDINALITY AS appended(line, place) ORDER BY place), \
     cutoff AS (SELECT seq FROM toolcell_session_undo WHERE session_key = $1 ORDER BY seq DESC OFFSET $5 LIMIT 1), \
     dropped AS (DELETE FROM toolcell_session_blobs AS blob WHERE blob.session_key = $1 AND blob.name <> ALL($3::text[]) \
         AND EXISTS (SELECT 1 FROM toolcell_session_undo AS line, cutoff WHERE line.session_key = $1 \
             AND line.seq < cutoff.seq AND strpos(line.line, '\"' || blob.name || '\"') > 0) \
         AND NOT EXISTS (SELECT 1 FROM toolcell_session_undo AS line, cutoff WHERE line.session_key = $1 \
             AND line.seq >= cutoff.seq AND strpos(line.line, '\"' || blob.name || '\"') > 0) \
         AND NOT EXISTS (SELECT 1 FROM unnest($2::text[]) AS added(line) WHERE strpos(added.line, '\"' || blob.name || '\"') > 0)) \
     , cut AS (DELETE FROM toolcell_session_undo WHERE session_key = $1 AND seq < (SELECT seq FROM cutoff))";

/// The session `$1`'s mark (the row of path `''` in `toolcell_session_reads`): `live` while it
/// may record, `ended EPOCH` once [`SessionBackend::forget_sessions`] ended it (kept a day, for
/// calls still in flight, then swept). A CTE that yields one
/// row if the session may record, none if it ended; the upsert locks the mark, so a call
/// recording while its session is ended on another host either records first (and the end,
/// waiting for it, then removes what it recorded) or records nothing.
const MARK: &str = "mark AS MATERIALIZED (INSERT INTO toolcell_session_reads AS kept (session_key, path, version) VALUES ($1, '', 'live') \
     ON CONFLICT (session_key, path) DO UPDATE SET version = kept.version WHERE kept.version = 'live' RETURNING 1)";

/// What a recording statement ends with: how many marks allowed it (0: the session ended).
const ALLOWED: &str = " SELECT count(*) FROM mark";

/// How long the mark of an ended session is kept.
const ENDED_KEPT: Duration = Duration::from_secs(24 * 60 * 60);

/// Why a call of an ended session recorded nothing.
const ENDED: &str = "the session ended (on this host or another) while this call ran: nothing of it is kept. Open a new session";

/// Record read versions of the session `$1`: `PATHS` with `VERSIONS` (upserted), `REMOVED`
/// (deleted), as CTEs; one statement, so two hosts recording for one session at once resolve
/// row by row in the database.
const RECORD_READS: &str = "gone AS (DELETE FROM toolcell_session_reads WHERE session_key = $1 AND path <> '' AND path = ANY(REMOVED) \
         AND EXISTS (SELECT 1 FROM mark)), \
     recorded AS (INSERT INTO toolcell_session_reads (session_key, path, version) \
         SELECT $1, path, version FROM mark, unnest(PATHS::text[], VERSIONS::text[]) AS changed(path, version) WHERE path <> '' \
         ON CONFLICT (session_key, path) DO UPDATE SET version = EXCLUDED.version)";

/// [`RECORD_READS`] with its parameters at `$first` and the two after.
fn record_reads_at(first: usize) -> String {
    RECORD_READS
        .replace("PATHS", &format!("${first}"))
        .replace("VERSIONS", &format!("${}", first + 1))
        .replace("REMOVED", &format!("${}", first + 2))
}

/// Read versions as the statement's parameters: paths, their versions, removed paths.
type ReadColumns = (Vec<String>, Vec<String>, Vec<String>);

/// A call's read versions in the text form the table keeps.
fn read_columns(changes: &[(&str, Option<Version>)]) -> Result<ReadColumns, String> {
    let mut paths = Vec::new();
    let mut versions = Vec::new();
    let mut removed = Vec::new();
    // A path named twice (a call that saw it more than once) is upserted once, with what was
    // seen last: one statement cannot upsert a row twice.
    let mut seen = std::collections::HashSet::new();
    for (path, version) in changes.iter().rev().filter(|(path, _)| seen.insert(*path)) {
        match version {
            Some(version) => {
                paths.push((*path).to_owned());
                versions.push(serde_json::to_string(version).map_err(|error| error.to_string())?);
            }
            None => removed.push((*path).to_owned()),
        }
    }
    Ok((paths, versions, removed))
}

/// Whether a session last used at `last_used` is still alive after `$idle` seconds (`float8`).
const ALIVE: &str = "last_used > clock_timestamp() - make_interval(secs => $IDLE)";

/// What clients are told the store is.
const CLIENT_NAME: &str = "PostgreSQL";

impl PostgresStore {
    /// A failure as clients are told it: the store named only by its kind (no host, socket
    /// directory, user or database: those are for the operator, see [`PostgresStore::name`]).
    fn session_error(&self, reason: String) -> SessionStoreError {
        SessionStoreError { store: CLIENT_NAME.to_owned(), reason }
    }

    /// `Ok` if the recording statement that returned `row` was allowed (its session had not
    /// ended), else why it recorded nothing.
    fn allowed(&self, row: &tokio_postgres::Row) -> Result<(), SessionStoreError> {
        if row.get::<_, i64>(0) > 0 { Ok(()) } else { Err(self.session_error(ENDED.to_owned())) }
    }

    fn sessions<T>(
        &self,
        work: impl AsyncFnOnce(&mut tokio_postgres::Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, SessionStoreError> {
        self.with_client(work).map_err(|failure| self.session_error(failure.to_string()))
    }
}

fn alive(parameter: usize) -> String {
    ALIVE.replace("$IDLE", &format!("${parameter}"))
}

fn seconds(idle: Duration) -> f64 {
    idle.as_secs_f64()
}

impl SessionBackend for PostgresStore {
    fn reads(&self, key: &str) -> Result<HashMap<String, Version>, SessionStoreError> {
        let rows = self.sessions(async |client| {
            client
                .query_typed(
                    "SELECT path, version FROM toolcell_session_reads WHERE session_key = $1 AND path <> ''",
                    &[(&key, Type::TEXT)],
                )
                .await
        })?;
        let mut reads = HashMap::with_capacity(rows.len());
        for row in rows {
            let version: String = row.get(1);
            let version: Version =
                serde_json::from_str(&version).map_err(|error| self.session_error(format!("a read version does not parse: {error}")))?;
            reads.insert(row.get(0), version);
        }
        Ok(reads)
    }

    fn record_reads(&self, key: &str, changes: &[(&str, Option<Version>)]) -> Result<(), SessionStoreError> {
        let (paths, versions, removed) = read_columns(changes).map_err(|reason| self.session_error(reason))?;
        let allowed = self.sessions(async |client| {
            client
                .query_typed_one(
                    &format!("WITH {MARK}, {}{ALLOWED}", record_reads_at(2)),
                    &[(&key, Type::TEXT), (&paths, Type::TEXT_ARRAY), (&versions, Type::TEXT_ARRAY), (&removed, Type::TEXT_ARRAY)],
                )
                .await
        })?;
        self.allowed(&allowed)
    }

    fn undo_lines(&self, key: &str) -> Result<Vec<String>, SessionStoreError> {
        let rows = self.sessions(async |client| {
            client.query_typed("SELECT line FROM toolcell_session_undo WHERE session_key = $1 ORDER BY seq", &[(&key, Type::TEXT)]).await
        })?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    fn append_undo(&self, key: &str, lines: &[String], blobs: &[(String, Vec<u8>)], keep: usize) -> Result<(), SessionStoreError> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        let (names, contents): (Vec<&str>, Vec<&[u8]>) = blobs.iter().map(|(name, content)| (name.as_str(), content.as_slice())).unzip();
        // One statement (see `APPEND_UNDO`).
        let allowed = self.sessions(async |client| {
            client
                .query_typed_one(
                    &format!("WITH {MARK}, {APPEND_UNDO}{ALLOWED}"),
                    &[
                        (&key, Type::TEXT),
                        (&lines, Type::TEXT_ARRAY),
                        (&names, Type::TEXT_ARRAY),
                        (&contents, Type::BYTEA_ARRAY),
                        (&(keep - 1), Type::INT8),
                    ],
                )
                .await
        })?;
        self.allowed(&allowed)
    }

    fn record_call(
        &self,
        key: &str,
        reads: &[(&str, Option<Version>)],
        lines: &[String],
        blobs: &[(String, Vec<u8>)],
        keep: usize,
    ) -> Result<(), SessionStoreError> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        let (names, contents): (Vec<&str>, Vec<&[u8]>) = blobs.iter().map(|(name, content)| (name.as_str(), content.as_slice())).unzip();
        let (paths, versions, removed) = read_columns(reads).map_err(|reason| self.session_error(reason))?;
        // One statement, so all or nothing without a transaction's extra round trips.
        let allowed = self.sessions(async |client| {
            client
                .query_typed_one(
                    &format!("WITH {MARK}, {}, {APPEND_UNDO}{ALLOWED}", record_reads_at(6)),
                    &[
                        (&key, Type::TEXT),
                        (&lines, Type::TEXT_ARRAY),
                        (&names, Type::TEXT_ARRAY),
                        (&contents, Type::BYTEA_ARRAY),
                        (&(keep - 1), Type::INT8),
                        (&paths, Type::TEXT_ARRAY),
                        (&versions, Type::TEXT_ARRAY),
                        (&removed, Type::TEXT_ARRAY),
                    ],
                )
                .await
        })?;
        self.allowed(&allowed)
    }

    fn undo_blob(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>, SessionStoreError> {
        let row = self.sessions(async |client| {
            client
                .query_typed_opt(
                    "SELECT content FROM toolcell_session_blobs WHERE session_key = $1 AND name = $2",
                    &[(&key, Type::TEXT), (&name, Type::TEXT)],
                )
                .await
        })?;
        Ok(row.map(|row| row.get(0)))
    }

    fn open_mcp(&self, id: &str, principal: Option<&str>, initialization: Option<&str>) -> Result<(), SessionStoreError> {
        self.sessions(async |client| {
            client
                .execute_typed(
                    "INSERT INTO toolcell_mcp_sessions AS kept (id, principal, initialization) VALUES ($1, coalesce($2, ''), $3) \
                 ON CONFLICT (id) DO UPDATE SET principal = coalesce($2, kept.principal), \
                 initialization = coalesce($3, kept.initialization), last_used = clock_timestamp()",
                    &[(&id, Type::TEXT), (&principal, Type::TEXT), (&initialization, Type::TEXT)],
                )
                .await
        })?;
        Ok(())
    }

    fn open_mcp_within(&self, id: &str, principal: &str, max: usize, idle: Duration) -> Result<bool, SessionStoreError> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        self.sessions(async |client| {
            let transaction = client.transaction().await?;
            // Alone among this principal's openings on every host: the count cannot go stale
            // before the insert (each statement sees what committed before it began).
            transaction.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 2))", &[&principal]).await?;
            let recorded = transaction
                .query_opt(
                    &format!(
                        "INSERT INTO toolcell_mcp_sessions AS kept (id, principal) SELECT $1, $2 \
                         WHERE (SELECT count(*) FROM toolcell_mcp_sessions WHERE principal = $2 AND id <> $1 AND {}) < $3 \
                         ON CONFLICT (id) DO UPDATE SET principal = $2, last_used = clock_timestamp() RETURNING id",
                        alive(4)
                    ),
                    &[&id, &principal, &max, &seconds(idle)],
                )
                .await?;
            if recorded.is_none() {
                // rmcp kept its `initialize` already, under no principal: not a session.
                transaction.execute("DELETE FROM toolcell_mcp_sessions WHERE id = $1 AND principal = ''", &[&id]).await?;
            }
            transaction.commit().await?;
            Ok(recorded.is_some())
        })
    }

    fn forget_sessions(&self, keys: &[String]) -> Result<(), SessionStoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.sessions(async |client| {
            let transaction = client.transaction().await?;
            // Marked ended first (waiting for a call recording now, see `MARK`), then emptied:
            // the deletes see what such a call recorded, and no call records after.
            transaction
                .execute(
                    "INSERT INTO toolcell_session_reads (session_key, path, version) SELECT key, '', 'ended ' || extract(epoch FROM clock_timestamp()) \
                     FROM unnest($1::text[]) AS ended(key) ON CONFLICT (session_key, path) DO UPDATE SET version = EXCLUDED.version",
                    &[&keys],
                )
                .await?;
            transaction
                .execute(
                    "WITH reads AS (DELETE FROM toolcell_session_reads WHERE session_key = ANY($1) AND path <> ''), \
                     blobs AS (DELETE FROM toolcell_session_blobs WHERE session_key = ANY($1)) \
                     DELETE FROM toolcell_session_undo WHERE session_key = ANY($1)",
                    &[&keys],
                )
                .await?;
            transaction.commit().await
        })?;
        Ok(())
    }

    fn use_mcp(&self, id: &str, principal: Option<&str>, idle: Duration) -> Result<Option<McpSession>, SessionStoreError> {
        let row = self.sessions(async |client| match principal {
            Some(principal) => {
                client
                    .query_typed_opt(
                        &format!(
                            "UPDATE toolcell_mcp_sessions SET last_used = clock_timestamp() WHERE id = $1 AND principal = $2 AND {} \
                     RETURNING id, principal, initialization",
                            alive(3)
                        ),
                        &[(&id, Type::TEXT), (&principal, Type::TEXT), (&seconds(idle), Type::FLOAT8)],
                    )
                    .await
            }
            None => {
                client
                    .query_typed_opt(
                        &format!("SELECT id, principal, initialization FROM toolcell_mcp_sessions WHERE id = $1 AND {}", alive(2)),
                        &[(&id, Type::TEXT), (&seconds(idle), Type::FLOAT8)],
                    )
                    .await
            }
        })?;
        Ok(row.map(|row| McpSession { id: row.get(0), principal: row.get(1), initialization: row.get(2) }))
    }

    fn sweep_mcp(&self, busy: &[String], known: &[String], idle: Duration) -> Result<McpSweep, SessionStoreError> {
        self.sessions(async |client| {
            let transaction = client.transaction().await?;
            if !busy.is_empty() {
                transaction.execute("UPDATE toolcell_mcp_sessions SET last_used = clock_timestamp() WHERE id = ANY($1)", &[&busy]).await?;
            }
            let expired = transaction
                .query(&format!("DELETE FROM toolcell_mcp_sessions WHERE NOT ({}) RETURNING id, principal", alive(1)), &[&seconds(idle)])
                .await?;
            // The marks of sessions ended a day ago: no call of theirs is still in flight.
            transaction
                .execute(
                    "DELETE FROM toolcell_session_reads WHERE path = '' AND version LIKE 'ended %' \
                     AND split_part(version, ' ', 2)::float8 < extract(epoch FROM clock_timestamp()) - $1::float8",
                    &[&seconds(ENDED_KEPT)],
                )
                .await?;
            let alive = if known.is_empty() {
                Vec::new()
            } else {
                transaction.query("SELECT id FROM toolcell_mcp_sessions WHERE id = ANY($1)", &[&known]).await?
            };
            transaction.commit().await?;
            Ok(McpSweep {
                expired: expired.iter().map(|row| (row.get(0), row.get(1))).collect(),
                alive: alive.iter().map(|row| row.get(0)).collect(),
            })
        })
    }

    fn close_mcp(&self, id: &str) -> Result<(), SessionStoreError> {
        self.sessions(async |client| client.execute_typed("DELETE FROM toolcell_mcp_sessions WHERE id = $1", &[(&id, Type::TEXT)]).await)?;
        Ok(())
    }
}

//! The audit trail on PostgreSQL (`toolcell_audit`): one table and one hash chain for the
//! deployment, each append sealed after the table's last record under an advisory lock.

use toolcell_audit::{Link, Record, seal};
use toolcell_state::AuditBackend;

use crate::PostgresStore;
use crate::connection::Failure;

/// The statements of schema version 3: each record's own id ([`Record::id`]), so that one
/// sent again (its append landed, but its answer was lost) is kept once. The rows already
/// there have none (and may hold such duplicates): they are left as they are.
pub(crate) const MIGRATION: &str = r"
ALTER TABLE toolcell_audit ADD COLUMN record_id text;
CREATE UNIQUE INDEX toolcell_audit_record_id ON toolcell_audit (record_id) WHERE record_id IS NOT NULL;
";

/// The advisory lock that orders audit appends across hosts.
const AUDIT_LOCK: i64 = 0x7463_6175_6469_7401;

impl AuditBackend for PostgresStore {
    fn append(&self, records: &[Record]) -> std::io::Result<Link> {
        self.with_client(async |client| {
            let transaction = client.transaction().await?;
            // One appender at a time across every host: the chain cannot fork.
            transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&AUDIT_LOCK]).await?;
            let last = transaction.query_opt("SELECT seq, hash FROM toolcell_audit ORDER BY seq DESC LIMIT 1", &[]).await?;
            let mut link =
                last.map_or(Link::GENESIS, |row| Link { seq: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0), hash: row.get(1) });
            // Records sent before whose append landed although its answer was lost: kept once.
            let ids: Vec<&str> = records.iter().filter_map(|record| record.id.as_deref()).collect();
            let kept: std::collections::HashSet<String> = if ids.is_empty() {
                std::collections::HashSet::new()
            } else {
                transaction
                    .query("SELECT record_id FROM toolcell_audit WHERE record_id = ANY($1::text[])", &[&ids])
                    .await?
                    .iter()
                    .map(|row| row.get(0))
                    .collect()
            };
            // Every record in one statement: one round trip, however many there are.
            let (mut seqs, mut hashes, mut lines, mut record_ids) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for record in records.iter().filter(|record| record.id.as_ref().is_none_or(|id| !kept.contains(id))) {
                let (line, next) = seal(record, &link);
                seqs.push(i64::try_from(next.seq).unwrap_or(i64::MAX));
                hashes.push(next.hash.clone());
                lines.push(line);
                record_ids.push(record.id.clone());
                link = next;
            }
            if !seqs.is_empty() {
                transaction
                    .execute(
                        "INSERT INTO toolcell_audit (seq, hash, line, record_id) \
                         SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[])",
                        &[&seqs, &hashes, &lines, &record_ids],
                    )
                    .await?;
            }
            transaction.commit().await?;
            Ok(link)
        })
        .map_err(|reason| {
            // A store that did not answer may be away, or its chain held by another host: the
            // spool waits for the next append rather than try again at once.
            let kind = match reason {
                Failure::NoAnswer(_) | Failure::Busy(_) => std::io::ErrorKind::TimedOut,
                Failure::Unreached(_) => std::io::ErrorKind::NotConnected,
                Failure::Database(_) => std::io::ErrorKind::Other,
            };
            std::io::Error::new(kind, format!("the audit trail in {} cannot be written: {reason}", self.name))
        })
    }

    fn read_from(&self, position: u64) -> std::io::Result<(String, u64)> {
        let after = i64::try_from(position).unwrap_or(i64::MAX);
        let rows = self
            .with_client(async |client| client.query("SELECT seq, line FROM toolcell_audit WHERE seq > $1 ORDER BY seq", &[&after]).await)
            .map_err(|reason| std::io::Error::other(format!("the audit trail in {} cannot be read: {reason}", self.name)))?;
        let mut text = String::new();
        let mut end = position;
        for row in &rows {
            text.push_str(row.get::<_, &str>(1));
            text.push('\n');
            end = u64::try_from(row.get::<_, i64>(0)).unwrap_or(end);
        }
        Ok((text, end))
    }

    fn head(&self) -> std::io::Result<Option<Link>> {
        let row = self
            .with_client(async |client| client.query_opt("SELECT seq, hash FROM toolcell_audit ORDER BY seq DESC LIMIT 1", &[]).await)
            .map_err(|reason| std::io::Error::other(format!("the audit trail in {} cannot be read: {reason}", self.name)))?;
        Ok(row.map(|row| Link { seq: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0), hash: row.get(1) }))
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

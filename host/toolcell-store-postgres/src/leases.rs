//! The lease rows of `toolcell_leases`: read into a [`LockTable`], and what a change did to
//! the table written back. A lock taken for roles keeps them (`holder_roles`, `holder_task`),
//! so that every host judges what it covers as the host that took it does.

use toolcell_locks::{Holder, Lapse, Lapsed, Lock, LockTable, Mode};

/// Schema version 4: the roles a lock was taken for, and their task. A lease without roles
/// (the operator's, or one taken before) covers its whole pattern.
pub(crate) const MIGRATION: &str = r"
ALTER TABLE toolcell_leases ADD COLUMN holder_roles text[];
ALTER TABLE toolcell_leases ADD COLUMN holder_task text;
";

/// A lease row: the lock, and why it lapsed if it did.
fn lease(row: &tokio_postgres::Row, offset: usize) -> Result<(Lock, Option<Lapse>), String> {
    let fence: i64 = row.get(offset);
    let mode: String = row.get(offset + 4);
    let held_for = holder(row, offset + 8);
    let lock = Lock {
        fence: u64::try_from(fence).map_err(|_| format!("a lease has the token {fence}"))?,
        pattern: row.get(offset + 1),
        owner: row.get(offset + 2),
        session: row.get(offset + 3),
        mode: Mode::from_name(&mode).ok_or_else(|| format!("a lease has the mode `{mode}`"))?,
        acquired_at_ms: u64::try_from(row.get::<_, i64>(offset + 5)).unwrap_or(0),
        expires_at_ms: u64::try_from(row.get::<_, i64>(offset + 6)).unwrap_or(0),
        held_for,
    };
    let lapse = match row.get::<_, Option<String>>(offset + 7).as_deref() {
        None => None,
        Some("released") => Some(Lapse::Released),
        Some("reclaimed") => Some(Lapse::Reclaimed),
        Some("expired") => Some(Lapse::Expired),
        Some(other) => return Err(format!("a lease lapsed for the reason `{other}`")),
    };
    Ok((lock, lapse))
}

/// The holder of a lease row from its `holder_roles` (at `offset`) and `holder_task` columns.
/// No roles (the operator's lock, one taken without a policy or before leases recorded them),
/// an empty array, or one that cannot be read (a NULL element, another type): no holder, so
/// the lock covers its whole pattern. A lease never covers less than it would have because a
/// row was written by hand or by another program.
fn holder(row: &tokio_postgres::Row, offset: usize) -> Option<Box<Holder>> {
    let roles = row.try_get::<_, Option<Vec<String>>>(offset).ok().flatten().filter(|roles| !roles.is_empty())?;
    let task = row.try_get::<_, Option<String>>(offset + 1).ok().flatten();
    Some(Box::new(Holder { roles, task }))
}

fn lapse_name(lapse: Lapse) -> &'static str {
    match lapse {
        Lapse::Released => "released",
        Lapse::Reclaimed => "reclaimed",
        Lapse::Expired => "expired",
    }
}

pub(crate) const LEASE_COLUMNS: &str =
    "fence, pattern, owner, session, mode, acquired_at_ms, expires_at_ms, lapse, holder_roles, holder_task";

/// The table the rows make: held locks by token (acquisition order), lapsed ones in the order
/// they lapsed.
pub(crate) fn table_of(rows: &[tokio_postgres::Row], offset: usize, next_fence: u64) -> Result<LockTable, String> {
    let mut held = Vec::new();
    let mut lapsed = Vec::new();
    for row in rows {
        if row.get::<_, Option<i64>>(offset).is_none() {
            // The clock's row when the workspace has no lease.
            continue;
        }
        match lease(row, offset)? {
            (lock, None) => held.push(lock),
            (lock, Some(lapse)) => lapsed.push(Lapsed { lock, lapse }),
        }
    }
    held.sort_by_key(|lock| lock.fence);
    Ok(LockTable::from_parts(next_fence, held, lapsed))
}

/// Write what changed between `before` and `after` to the workspace's rows.
pub(crate) async fn write_back(
    transaction: &mut tokio_postgres::Transaction<'_>,
    key: &str,
    before: &LockTable,
    after: &LockTable,
) -> Result<(), tokio_postgres::Error> {
    let fence_of = |fence: u64| i64::try_from(fence).unwrap_or(i64::MAX);
    let ms = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX);
    let held_before: std::collections::HashMap<u64, &Lock> = before.locks().iter().map(|lock| (lock.fence, lock)).collect();
    let held_after: std::collections::HashSet<u64> = after.locks().iter().map(|lock| lock.fence).collect();
    let lapsed_before: std::collections::HashSet<u64> = before.lapsed().map(|lapsed| lapsed.lock.fence).collect();
    let lapsed_after: std::collections::HashMap<u64, &Lapsed> = after.lapsed().map(|lapsed| (lapsed.lock.fence, lapsed)).collect();
    for lock in after.locks() {
        match held_before.get(&lock.fence) {
            Some(old) if *old == lock => {}
            Some(_) => {
                transaction.execute(
                    "UPDATE toolcell_leases SET acquired_at_ms = $3, expires_at_ms = $4 WHERE workspace = $1 AND fence = $2 AND lapse IS NULL",
                    &[&key, &fence_of(lock.fence), &ms(lock.acquired_at_ms), &ms(lock.expires_at_ms)],
                ).await?;
            }
            None => {
                transaction
                    .execute(
                        "INSERT INTO toolcell_leases \
                         (workspace, fence, pattern, owner, session, mode, acquired_at_ms, expires_at_ms, holder_roles, holder_task) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                        &[
                            &key,
                            &fence_of(lock.fence),
                            &lock.pattern,
                            &lock.owner,
                            &lock.session,
                            &lock.mode.as_str(),
                            &ms(lock.acquired_at_ms),
                            &ms(lock.expires_at_ms),
                            &lock.held_for.as_ref().map(|holder| holder.roles.clone()),
                            &lock.held_for.as_ref().and_then(|holder| holder.task.clone()),
                        ],
                    )
                    .await?;
            }
        }
    }
    for fence in held_before.keys().filter(|fence| !held_after.contains(fence)) {
        match lapsed_after.get(fence) {
            Some(lapsed) => {
                transaction
                    .execute(
                        "UPDATE toolcell_leases SET lapse = $3, lapse_order = nextval('toolcell_lapse_order') \
                     WHERE workspace = $1 AND fence = $2 AND lapse IS NULL",
                        &[&key, &fence_of(*fence), &lapse_name(lapsed.lapse)],
                    )
                    .await?;
            }
            None => {
                transaction
                    .execute(
                        "DELETE FROM toolcell_leases WHERE workspace = $1 AND fence = $2 AND lapse IS NULL",
                        &[&key, &fence_of(*fence)],
                    )
                    .await?;
            }
        }
    }
    for fence in lapsed_before.iter().filter(|fence| !lapsed_after.contains_key(fence)) {
        // Forgotten: older than the most lapsed locks a table remembers.
        transaction
            .execute("DELETE FROM toolcell_leases WHERE workspace = $1 AND fence = $2 AND lapse IS NOT NULL", &[&key, &fence_of(*fence)])
            .await?;
    }
    Ok(())
}

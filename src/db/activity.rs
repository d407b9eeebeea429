//! What the rest of the server is doing, from `pg_stat_activity`, for evict's adaptive pace.

use anyhow::{Context as _, Result};

use crate::db::{Session, p};
use crate::report::db::Step;
use time::OffsetDateTime;

/// Whether the role may see other sessions' state, and its name for messages.
pub(crate) async fn visibility(client: &Session) -> Result<(String, bool)> {
    let row = client
        .query_one(include_str!("../../sql/pace_visibility.sql"), &[])
        .await
        .context(Step::CheckActivityAccess)?;
    Ok((row.get("role"), row.get("can_see")))
}

/// One sample of the other client sessions (see sql/pace_foreground.sql).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Foreground {
    /// Server time of the sample, passed back as `since` to the next one.
    pub sampled_at: OffsetDateTime,
    /// Sessions that ran anything since the previous sample.
    pub recent: u32,
    /// Sessions running a statement now.
    pub active: u32,
    /// Of those, sessions waiting on a lightweight lock, I/O or a heavyweight lock.
    pub waiting: u32,
    /// Mean time the running statements have run so far, in ms (0 when none runs).
    pub age_ms: f64,
    /// Rows inserted into the given relations (each with all its partitions) since the statistics
    /// were reset, when relations were given.
    pub inserted: Option<i64>,
}

/// Sample the other client sessions; `since` is the previous sample's `sampled_at`, and without
/// one the window reaches back `lookback`. With `tables` (oids: the key table, or the shards of a
/// distributed one on this worker), also read the rows inserted into them. On a Citus node, the
/// connections Citus opened for the global pids `left_out` are not counted.
pub(crate) async fn foreground(
    client: &Session,
    since: Option<OffsetDateTime>,
    lookback: std::time::Duration,
    tables: Option<&[i64]>,
    left_out: &[i64],
) -> Result<Foreground> {
    let lookback_ms = lookback.as_secs_f64() * 1000.0;
    let tables: Option<Vec<i64>> = tables.map(<[i64]>::to_vec);
    let left_out: Option<Vec<i64>> = (!left_out.is_empty()).then(|| left_out.to_vec());
    let row = client
        .query_one(
            include_str!("../../sql/pace_foreground.sql"),
            &[p(&since), p(&lookback_ms), p(&tables), p(&left_out)],
        )
        .await
        .context(Step::SampleActivity)?;
    let n = |c: &str| u32::try_from(row.get::<_, i32>(c)).unwrap_or(0);
    Ok(Foreground {
        sampled_at: row.get("sampled_at"),
        recent: n("recent"),
        active: n("active"),
        waiting: n("waiting"),
        age_ms: row.get("age_ms"),
        inserted: row.get("inserted"),
    })
}

/// The server's WAL insert position, in bytes from 0/0 (evict --max-wal-rate reads it around each
/// batch).
pub(crate) async fn wal_insert_position(client: &Session) -> Result<i64> {
    let row = client
        .query_one(include_str!("../../sql/wal_insert_position.sql"), &[])
        .await
        .context(Step::ReadWalPosition)?;
    Ok(row.try_get("position")?)
}

/// Another session of idemctl on this database (see sql/top_sessions.sql).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct IdemctlSession {
    pub pid: i32,
    /// pg_stat_activity's state (`active`, `idle`, ...), or `hidden` when this role may not see it.
    pub state: String,
    pub connected_seconds: f64,
    /// How long its transaction has run (None outside one).
    pub transaction_seconds: Option<f64>,
    pub wait_event: Option<String>,
    /// The first word of its current or last statement (`DELETE`, `SELECT`), when visible.
    pub statement: Option<String>,
    /// `evict` or `reclaim` when it holds that command's maintenance lock on the key table.
    pub holds_lock: Option<String>,
}

/// The other sessions that share this session's application_name, at most `limit`.
pub(crate) async fn idemctl_sessions(
    client: &Session,
    table: &crate::db::KeyTable,
    limit: i64,
) -> Result<Vec<IdemctlSession>> {
    use crate::db::lock::{LockClass, table_key};
    let rows = client
        .query(
            include_str!("../../sql/top_sessions.sql"),
            &[
                p(&LockClass::Evict.key()),
                p(&LockClass::Reclaim.key()),
                p(&table_key(table)),
                p(&limit),
            ],
        )
        .await
        .context(Step::ListOwnSessions)?;
    Ok(rows
        .iter()
        .map(|r| IdemctlSession {
            pid: r.get("pid"),
            state: r.get("state"),
            connected_seconds: r.get::<_, Option<f64>>("connected_seconds").unwrap_or(0.0),
            transaction_seconds: r.get("transaction_seconds"),
            wait_event: r.get("wait_event"),
            statement: r
                .get::<_, Option<String>>("statement")
                .filter(|s| !s.is_empty()),
            holds_lock: r.get("holds_lock"),
        })
        .collect())
}

/// A session waiting for a row of the key table, and the one it waits for (see
/// sql/top_row_waits.sql).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct RowWait {
    pub pid: i32,
    /// The relation (the table or a leaf partition) and the row's address in it.
    pub relation: String,
    pub row_address: String,
    pub application_name: Option<String>,
    pub waiting_seconds: Option<f64>,
    pub holder_pid: i32,
    pub holder_application_name: Option<String>,
    pub holder_state: Option<String>,
    pub holder_transaction_seconds: Option<f64>,
}

/// Sessions waiting for a row of `table`, at most `limit`.
pub(crate) async fn row_waits(
    client: &Session,
    table: &crate::db::KeyTable,
    limit: i64,
) -> Result<Vec<RowWait>> {
    let rows = client
        .query(
            include_str!("../../sql/top_row_waits.sql"),
            &[p(&table.oid), p(&limit)],
        )
        .await
        .context(Step::ListWaiters)?;
    Ok(rows
        .iter()
        .map(|r| RowWait {
            pid: r.get("pid"),
            relation: r.get("relation"),
            row_address: r.get("row_address"),
            application_name: r.get("application_name"),
            waiting_seconds: r.get("waiting_seconds"),
            holder_pid: r.get("holder_pid"),
            holder_application_name: r.get("holder_application_name"),
            holder_state: r.get("holder_state"),
            holder_transaction_seconds: r.get("holder_transaction_seconds"),
        })
        .collect())
}

//! The read-only figures that `stats`, `check` and `evict` share, one typed function per statement.

use crate::db::{Session, p};
use anyhow::{Context as _, Result};

use super::KeyTable;
use crate::ident::quote_ident;
use crate::report::db::Step;
pub(crate) use crate::report::rows::{
    Capped, DatabaseIdentity, KeyRef, ReferencingKey, Sizes, Stuck, Vacuum,
};

/// Sizes from the catalog (no count(*)).
pub(crate) async fn sizes(client: &Session, table: &KeyTable) -> Result<Sizes> {
    let r = client
        .query_one(include_str!("../../sql/stats_size.sql"), &[p(&table.oid)])
        .await
        .context(Step::ReadTableSizes)?;
    Ok(Sizes {
        estimated_rows: r.get("estimated_rows"),
        heap_bytes: r.get("heap_bytes"),
        toast_bytes: r.get("toast_bytes"),
        index_bytes: r.get("index_bytes"),
        total_bytes: r.get("total_bytes"),
        never_analyzed: r.get::<_, Option<bool>>("never_analyzed").unwrap_or(false),
    })
}

/// The entries of `index` of `table` as the planner last counted them (None: never counted), and
/// its size in bytes.
pub(crate) async fn index_entries(
    client: &Session,
    table: &KeyTable,
    index: &str,
) -> Result<(Option<i64>, i64)> {
    let r = client
        .query_one(
            include_str!("../../sql/walk_index_entries.sql"),
            &[p(&table.oid), p(&index)],
        )
        .await
        .context(Step::ReadWalkedIndexSize)?;
    Ok((r.try_get("entries")?, r.try_get("bytes")?))
}

/// Dead tuples and last (auto)vacuum / analyze.
pub(crate) async fn vacuum(client: &Session, table: &KeyTable) -> Result<Vacuum> {
    let r = client
        .query_one(include_str!("../../sql/stats_vacuum.sql"), &[p(&table.oid)])
        .await
        .context(Step::ReadVacuumStats)?;
    Ok(Vacuum {
        live_tuples: r.get("live_tuples"),
        dead_tuples: r.get("dead_tuples"),
        inserted_rows: r.get("inserted_rows"),
        deleted_rows: r.get("deleted_rows"),
        last_vacuum: r.get("last_vacuum"),
        last_analyze: r.get("last_analyze"),
    })
}

/// The live key that expires next, and its age since creation.
pub(crate) async fn oldest_live(client: &Session, table: &KeyTable) -> Result<Option<KeyRef>> {
    let r = client
        .query_opt(&table.sql(include_str!("../../sql/oldest_live.sql")), &[])
        .await
        .context(Step::FindOldestLive)?;
    // NaN (printed "-", null in JSON) when its created_at is NULL: a nullable column, as
    // Laravel's `timestamps()` writes it, leaves the age unknown.
    Ok(r.map(|r| {
        let age = r.get::<_, Option<f64>>("age_seconds").unwrap_or(f64::NAN);
        key_ref(table, &r, age)
    }))
}

/// The oldest expired completed key, and how long it has waited.
pub(crate) async fn oldest_expired(client: &Session, table: &KeyTable) -> Result<Option<KeyRef>> {
    let r = client
        .query_opt(
            &table.sql(include_str!("../../sql/oldest_expired.sql")),
            &[],
        )
        .await
        .context(Step::FindOldestExpired)?;
    Ok(r.map(|r| key_ref(table, &r, r.get("lag_seconds"))))
}

/// The key a stats query picked out of `r` (its scope, key and expiry), with `seconds`.
fn key_ref(table: &KeyTable, r: &tokio_postgres::Row, seconds: f64) -> KeyRef {
    let api_key_id = table
        .profile
        .has_scope()
        .then(|| r.get::<_, Option<String>>("api_key_id"))
        .flatten();
    KeyRef {
        scope: table.profile.scope_of(api_key_id.as_deref()),
        api_key_id,
        key: r.get("key"),
        expires_at: r.get("expires_at"),
        seconds,
    }
}

/// The eviction lag estimated from the planner's statistics of the expiry column (no expiry index
/// to find the oldest expired key through): the wait of the lowest value the last analyze sampled,
/// None when no statistics hold the column.
pub(crate) async fn lag_estimate(client: &Session, table: &KeyTable) -> Result<Option<f64>> {
    let column = table.profile.expiry_column();
    let r = client
        .query_one(
            &table.sql(include_str!("../../sql/stats_lag_estimate.sql")),
            &[p(&table.oid), p(&column)],
        )
        .await
        .context(Step::ReadExpiryStatistics)?;
    Ok(r.try_get("lag_seconds")?)
}

impl Capped {
    /// Interpret a count taken with `LIMIT cap + 1`.
    pub(crate) fn from_raw(n: i64, cap: i64) -> Capped {
        if n > cap {
            Capped {
                count: cap,
                at_least: true,
            }
        } else {
            Capped {
                count: n,
                at_least: false,
            }
        }
    }
}

async fn capped(client: &Session, sql: &str, cap: i64, what: Step) -> Result<Capped> {
    let r = client.query_one(sql, &[p(&cap)]).await.context(what)?;
    Ok(Capped::from_raw(r.get("n"), cap))
}

/// Expired completed keys, exact up to `cap`.
pub(crate) async fn expired_backlog(
    client: &Session,
    table: &KeyTable,
    cap: i64,
) -> Result<Capped> {
    let sql = table.sql(include_str!("../../sql/expired_backlog.sql"));
    capped(client, &sql, cap, Step::CountExpiredBacklog).await
}

/// Stuck in_progress keys, exact up to `cap`. The caller decides whether a scan is acceptable.
pub(crate) async fn stuck(
    client: &Session,
    table: &KeyTable,
    after_secs: f64,
    cap: i64,
) -> Result<Stuck> {
    if !table.profile.has_in_flight_marker() {
        // No key is ever in flight: none is stuck, and nothing need be read to say so.
        return Ok(Stuck {
            count: Capped::from_raw(0, cap),
            oldest_since: None,
        });
    }
    let r = client
        .query_one(
            &table.sql(include_str!("../../sql/stuck_count.sql")),
            &[p(&after_secs), p(&cap)],
        )
        .await
        .context(Step::CountStuck)?;
    Ok(Stuck {
        count: Capped::from_raw(r.get("n"), cap),
        oldest_since: r.get("oldest"),
    })
}

/// The in_progress key held longest, when held longer than `after_secs` (the oldest stuck key),
/// with how long it has been held. Like [`stuck`], it needs the optional in_progress index or the
/// caller's consent to a scan.
pub(crate) async fn oldest_stuck(
    client: &Session,
    table: &KeyTable,
    after_secs: f64,
) -> Result<Option<KeyRef>> {
    let r = client
        .query_opt(
            &table.sql(include_str!("../../sql/oldest_stuck.sql")),
            &[p(&after_secs)],
        )
        .await
        .context(Step::FindOldestStuck)?;
    Ok(r.map(|r| key_ref(table, &r, r.get("held_seconds"))))
}

/// Read the connected database's identity.
pub(crate) async fn database_identity(client: &Session) -> Result<DatabaseIdentity> {
    let row = client
        .query_one(include_str!("../../sql/database_identity.sql"), &[])
        .await
        .context(Step::ReadDatabase)?;
    Ok(DatabaseIdentity {
        system_identifier: row.try_get("system_identifier")?,
        name: row.try_get("name")?,
    })
}

impl ReferencingKey {
    /// NO ACTION or RESTRICT: a key still referenced cannot be deleted.
    pub(crate) fn blocks(&self) -> bool {
        matches!(self.on_delete.as_str(), "NO ACTION" | "RESTRICT")
    }
}

/// The foreign keys that reference the key table (none without asking when the catalog said none
/// does as the table was resolved).
pub(crate) async fn referencing_keys(
    client: &Session,
    table: &KeyTable,
) -> Result<Vec<ReferencingKey>> {
    if !table.referenced {
        return Ok(Vec::new());
    }
    let rows = client
        .query(
            include_str!("../../sql/referencing_keys.sql"),
            &[p(&table.oid)],
        )
        .await
        .context(Step::ReadReferences)?;
    rows.iter()
        .map(|r| {
            Ok(ReferencingKey {
                name: r.try_get("name")?,
                referencing_table: r.try_get("referencing_table")?,
                referencing_quoted: format!(
                    "{}.{}",
                    quote_ident(r.try_get("referencing_schema")?),
                    quote_ident(r.try_get("referencing_name")?)
                ),
                columns: r.try_get("columns")?,
                referenced: r.try_get("referenced")?,
                on_delete: r.try_get("on_delete")?,
                indexed: r.try_get("indexed")?,
                may_read: r.try_get("may_read")?,
                may_lock: r.try_get("may_lock")?,
            })
        })
        .collect()
}

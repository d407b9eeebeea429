//! One stored key as `inspect` reads it, with its state judged by the database clock.

use crate::db::{KeyTable, Session, p};
use crate::report::db::Step;
use crate::report::rows::RowValue;
pub(crate) use crate::report::rows::{KeyRecord, RowColumn, StoredBody, StoredFingerprint};
use crate::report::timestamp::Timestamp;
use anyhow::{Context as _, Result};
use time::OffsetDateTime;
use tokio_postgres::Row;
use tokio_postgres::types::Type;

impl StoredFingerprint {
    /// The SQL type of the column it came from, which decides the default canonical form.
    pub(crate) fn sql_type(&self) -> &'static str {
        match self {
            StoredFingerprint::Bytes(_) => "bytea",
            StoredFingerprint::Text(_) => "text",
        }
    }

    /// Whether a computed SHA-256 digest is the one stored (hex text compared without regard to
    /// case or surrounding blanks).
    pub(crate) fn matches(&self, digest: &[u8]) -> bool {
        match self {
            StoredFingerprint::Bytes(b) => b == digest,
            StoredFingerprint::Text(t) => t
                .trim()
                .eq_ignore_ascii_case(&crate::fingerprint::hex(digest)),
        }
    }
}

impl KeyRecord {
    /// Build a record from a row of the inspect statements (`held` is filled in by
    /// [`KeyRecord::check_holder`]).
    pub(crate) fn from_row(row: &Row, table: &KeyTable) -> Result<KeyRecord> {
        let has_tenant = table.profile.has_scope();
        let fingerprint = match row
            .columns()
            .iter()
            .find(|c| c.name() == "request_fingerprint")
            .map(|c| c.type_().clone())
        {
            Some(Type::BYTEA) => row
                .try_get::<_, Option<Vec<u8>>>("request_fingerprint")?
                .map(StoredFingerprint::Bytes),
            _ => row
                .try_get::<_, Option<String>>("request_fingerprint")?
                .map(StoredFingerprint::Text),
        };
        let expires_at: Option<Timestamp> = row.try_get("expires_at")?;
        let null_expiry = (expires_at.is_none() && !table.profile.lacks_ttl())
            .then(|| table.profile.expiry_column().to_owned());
        // NULL where a one-column scope holds NULL.
        let api_key_id: Option<String> = if has_tenant {
            row.try_get("api_key_id")?
        } else {
            None
        };
        Ok(KeyRecord {
            scope: table.profile.scope_of(api_key_id.as_deref()),
            api_key_id,
            key: row.try_get("key")?,
            request_method: row.try_get("request_method")?,
            request_path: row.try_get("request_path")?,
            request_fingerprint: fingerprint,
            state: row.try_get("state")?,
            response_status: row.try_get("response_status")?,
            response_body: body(row, table)?,
            response_column: table.profile.response_body.clone(),
            locked_at: row.try_get("locked_at")?,
            created_at: row.try_get("created_at")?,
            expires_at,
            null_expiry,
            row: whole_row(row, table)?,
            time_zone: table
                .profile
                .naive_times
                .then(|| table.profile.time_zone.clone())
                .flatten(),
            db_now: row.try_get("db_now")?,
            stuck: row.try_get::<_, Option<bool>>("stuck")?.unwrap_or(false),
            held: false,
            xmax: row.try_get("row_xmax")?,
            snapshot_xmax: row.try_get("snapshot_xmax")?,
        })
    }

    /// Decide whether a running transaction holds the row, without taking any lock: the row's xmax
    /// names the last transaction that locked or changed it; if that transaction is still in
    /// progress (pg_xact_status, which also sees subtransactions), the row is held. A lock shared
    /// by several sessions (a MultiXact) is not recognised.
    pub(crate) async fn check_holder(&mut self, client: &Session) -> Result<()> {
        let full = match locker(self.xmax, self.snapshot_xmax) {
            Locker::None => {
                self.held = false;
                return Ok(());
            }
            Locker::Running => {
                self.held = true;
                return Ok(());
            }
            Locker::Past(full) => full,
        };
        let row = client
            .query_one(
                include_str!("../../sql/inspect_row_holder.sql"),
                &[p(&full)],
            )
            .await
            .context(Step::CheckKeyHolder)?;
        let status: Option<String> = row.try_get("status")?;
        self.held = status.as_deref() == Some("in progress");
        Ok(())
    }

    /// Seconds from `ts` to the database's now (positive = in the past).
    /// Infinite for an infinity (`'-infinity'` lies infinitely far in the past).
    pub(crate) fn secs_since(&self, ts: Timestamp) -> f64 {
        ts.secs_until(Timestamp::At(self.db_now))
    }

    /// Whether the key has expired by the database clock (false when its expiry is unknown).
    pub(crate) fn expired(&self) -> bool {
        self.expires_at
            .is_some_and(|e| e <= Timestamp::At(self.db_now))
    }

    /// When the owner took the key: `locked_at`, or `created_at` where it was never set (None
    /// when neither holds a time).
    pub(crate) fn held_since(&self) -> Option<Timestamp> {
        self.locked_at.or(self.created_at)
    }
}

/// Every column of an inspect row (`row_columns`, `row_values`), each labelled with its role.
fn whole_row(row: &Row, table: &KeyTable) -> Result<Vec<RowColumn>> {
    let names: Option<Vec<String>> = row.try_get("row_columns")?;
    let values: Option<Vec<Option<String>>> = row.try_get("row_values")?;
    Ok(names
        .unwrap_or_default()
        .into_iter()
        .zip(values.unwrap_or_default())
        .map(|(column, value)| RowColumn {
            role: table.profile.role_of(&column),
            value: value.map(|v| row_value(table, &column, v)),
            column,
        })
        .collect())
}

/// A value of the whole row: a `timestamptz` column's as an instant in UTC (the server prints it in
/// the session's zone); any other value, or one that does not parse (infinity), as printed.
fn row_value(table: &KeyTable, column: &str, value: String) -> RowValue {
    use time::format_description::well_known::Rfc3339;
    let timestamptz = table
        .columns
        .iter()
        .any(|c| c.name == column && c.base_type == "timestamp with time zone");
    match OffsetDateTime::parse(&value, &Rfc3339) {
        Ok(t) if timestamptz => RowValue::Instant(t.to_offset(time::UtcOffset::UTC)),
        _ => RowValue::Text(value),
    }
}

/// The `response_body` of an inspect row, typed by its column.
fn body(row: &Row, table: &KeyTable) -> Result<Option<StoredBody>> {
    let bytes = row
        .columns()
        .iter()
        .any(|c| c.name() == "response_body" && *c.type_() == Type::BYTEA);
    if bytes {
        return Ok(row
            .try_get::<_, Option<Vec<u8>>>("response_body")?
            .map(StoredBody::Bytes));
    }
    let text: Option<String> = row.try_get("response_body")?;
    Ok(text.map(|t| {
        if table.profile.body_is_json() {
            StoredBody::Json(t)
        } else {
            StoredBody::Text(t)
        }
    }))
}

/// Where a row's 32-bit xmax stands relative to the snapshot's xmax (the first transaction id not
/// yet completed when the statement's snapshot was taken).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Locker {
    /// No xmax (or a reserved id, never a live locker).
    None,
    /// At or after the snapshot's xmax: still running when the row was read.
    Running,
    /// Before it: this 64-bit id (epoch and xid), whose status the commit log knows.
    Past(i64),
}

/// Place a 32-bit xmax by modular comparison with the snapshot's 64-bit xmax, as PostgreSQL
/// compares transaction ids.
pub(crate) fn locker(xmax: i64, snapshot_xmax: i64) -> Locker {
    const SPAN: i64 = 1 << 32;
    // 0 is InvalidTransactionId, 1 and 2 are bootstrap and frozen.
    if !(3..SPAN).contains(&xmax) || snapshot_xmax <= 0 {
        return Locker::None;
    }
    let ahead = (xmax - (snapshot_xmax & (SPAN - 1))).rem_euclid(SPAN);
    if ahead < SPAN / 2 {
        Locker::Running
    } else {
        let full = snapshot_xmax - (SPAN - ahead);
        if full < 3 {
            Locker::None
        } else {
            Locker::Past(full)
        }
    }
}

/// One scope's key (through an index on the scope's columns and the key, or led by the key):
/// `values` are the scope columns' values, None where `nulls` says the column is NULL.
pub(crate) async fn by_tenant(
    client: &Session,
    table: &KeyTable,
    values: &[Option<String>],
    nulls: &[bool],
    key: &str,
    stuck_secs: f64,
) -> Result<Vec<KeyRecord>> {
    let values: Vec<Option<&str>> = values.iter().map(Option::as_deref).collect();
    let tenant = super::profile::scope_text_of(&values);
    let sql = table.sql_with_nulls(include_str!("../../sql/inspect_by_tenant.sql"), nulls);
    let rows = client
        .query(&sql, &[p(&tenant), p(&key), p(&stuck_secs)])
        .await
        .context(Step::ReadKey)?;
    rows.iter().map(|r| KeyRecord::from_row(r, table)).collect()
}

/// The scope columns a lookup without the whole scope narrows to: each column's value in order
/// (None where not given, or given as NULL), and the columns given as NULL.
#[derive(Clone, Copy)]
pub(crate) struct Within<'a> {
    pub values: &'a [Option<String>],
    pub nulls: &'a [bool],
}

/// The records a lookup without a tenant found; `truncated` when it stopped at its tenant cap.
pub(crate) struct Found {
    pub records: Vec<KeyRecord>,
    pub truncated: bool,
}

/// A key under every scope (through an index led by the key), up to `listed` scopes; `within`
/// narrows them to the scope columns given.
pub(crate) async fn by_key(
    client: &Session,
    table: &KeyTable,
    key: &str,
    within: Option<Within<'_>>,
    stuck_secs: f64,
    listed: i64,
) -> Result<Found> {
    let (within, nulls) = within.map_or((None, &[][..]), |w| (Some(w.values.to_vec()), w.nulls));
    let sql = table.sql_with_nulls(include_str!("../../sql/inspect_by_key.sql"), nulls);
    let rows = client
        .query(&sql, &[p(&key), p(&stuck_secs), p(&listed), p(&within)])
        .await
        .context(Step::ReadKey)?;
    found(&rows, table)
}

/// A key under every scope when no index is led by the key but one lists only scope columns before
/// it ([`crate::db::profile::Profile::scope_walk`]): their distinct values are walked through it (a
/// skip scan), up to `probed` of them, and the key probed under each, narrowed to `within` (as
/// [`by_key`]), up to `listed` rows.
pub(crate) async fn by_key_through_tenants(
    client: &Session,
    table: &KeyTable,
    key: &str,
    within: Option<Within<'_>>,
    stuck_secs: f64,
    probed: i32,
    listed: i64,
) -> Result<Found> {
    let (within, nulls) = within.map_or((None, &[][..]), |w| (Some(w.values.to_vec()), w.nulls));
    let sql = table.sql_with_nulls(include_str!("../../sql/inspect_skip_scan.sql"), nulls);
    let rows = client
        .query(
            &sql,
            &[p(&key), p(&stuck_secs), p(&probed), p(&within), p(&listed)],
        )
        .await
        .context(Step::ReadKey)?;
    found(&rows, table)
}

fn found(rows: &[Row], table: &KeyTable) -> Result<Found> {
    let truncated = rows
        .first()
        .and_then(|r| r.try_get::<_, bool>("truncated").ok())
        .unwrap_or(false);
    Ok(Found {
        records: rows
            .iter()
            .map(|r| KeyRecord::from_row(r, table))
            .collect::<Result<_>>()?,
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xmax_is_placed_in_the_right_epoch() {
        assert_eq!(locker(0, 1000), Locker::None);
        assert_eq!(locker(900, 1000), Locker::Past(900));
        assert_eq!(locker(1000, 1000), Locker::Running);
        assert_eq!(locker(1005, 1000), Locker::Running);
        let snap = (3_i64 << 32) | 10;
        assert_eq!(locker(5, snap), Locker::Past((3 << 32) | 5));
        assert_eq!(locker(12, snap), Locker::Running);
        assert_eq!(
            locker(4_000_000_000, snap),
            Locker::Past((2 << 32) | 4_000_000_000)
        );
    }
}

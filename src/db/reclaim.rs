//! reclaim's statements and their typed rows: the preview of stuck keys (list and count in one
//! read-only snapshot), one sweep batch and one batch of a plan for each action. Every batch runs
//! with a client-side deadline and is tried again when it met a lock held past the session's
//! few-millisecond lock_timeout.

use std::time::Duration;

use anyhow::{Context as _, Result};
use time::OffsetDateTime;

use super::queries::{self, Capped};
use super::{KeyTable, Param, Session, p};
use crate::cli::ReclaimAction;
use crate::exit::{Exit, fail};

/// The preview: stuck keys, oldest first, up to a cap.
const PREVIEW_SQL: &str = include_str!("../../sql/reclaim_preview.sql");
const DELETE_SQL: &str = include_str!("../../sql/reclaim_delete.sql");
const FAIL_SQL: &str = include_str!("../../sql/reclaim_fail.sql");
const RELEASE_SQL: &str = include_str!("../../sql/reclaim_release.sql");
const APPLY_DELETE_SQL: &str = include_str!("../../sql/reclaim_apply_delete.sql");
const APPLY_FAIL_SQL: &str = include_str!("../../sql/reclaim_apply_fail.sql");
const APPLY_RELEASE_SQL: &str = include_str!("../../sql/reclaim_apply_release.sql");
const ARCHIVE_LOCK_SQL: &str = include_str!("../../sql/reclaim_archive_lock.sql");

/// Attempts of one batch that runs into a lock held longer than the session's few-millisecond
/// lock_timeout (DDL, or a relation-extension lock under heavy inserts) before the run gives up.
const LOCK_TRIES: u32 = 5;

/// A stuck key as the preview reads it.
#[derive(Debug, Clone)]
pub struct StuckKey {
    pub api_key_id: String,
    pub key: String,
    pub request_method: String,
    pub request_path: String,
    pub locked_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub age_seconds: f64,
}

/// The preview's snapshot: up to `cap` keys, whether more matched, the capped count and the
/// database clock.
pub struct Listing {
    pub rows: Vec<StuckKey>,
    pub truncated: bool,
    pub count: Capped,
    pub db_now: OffsetDateTime,
}

/// List up to `cap` keys held longer than `older_than` seconds and count them (up to
/// `count_cap`) in one read-only snapshot, so the count and the list agree. (An error leaves the
/// session in the transaction; the process ends.)
pub async fn list_stuck(
    client: &Session,
    table: &KeyTable,
    older_than: f64,
    cap: i64,
    count_cap: i64,
) -> Result<Listing> {
    client
        .begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .context("failed to start the preview's read-only transaction")?;
    let db_now: OffsetDateTime = client
        .query_one(include_str!("../../sql/database_now.sql"), &[])
        .await
        .context("failed to read the database clock")?
        .try_get("now")?;
    let rows = client
        .query(&table.sql(PREVIEW_SQL), &[p(&older_than), p(&(cap + 1))])
        .await
        .context("failed to list stuck in_progress keys")?;
    let stuck = queries::stuck(client, table, older_than, count_cap).await?;
    client
        .commit()
        .await
        .context("failed to end the preview's transaction")?;
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let rows = rows
        .iter()
        .map(|r| {
            Ok(StuckKey {
                api_key_id: r.try_get("api_key_id")?,
                key: r.try_get("key")?,
                request_method: r.try_get("request_method")?,
                request_path: r.try_get("request_path")?,
                locked_at: r.try_get("locked_at")?,
                created_at: r.try_get("created_at")?,
                age_seconds: r.try_get("age_seconds")?,
            })
        })
        .collect::<Result<Vec<_>>>()
        .context("failed to read a listed key")?;
    Ok(Listing {
        truncated: rows.len() > cap,
        rows: rows.into_iter().take(cap).collect(),
        count: stuck.count,
        db_now,
    })
}

/// A key an archived batch took, with its whole record before the change.
pub struct ArchivedKey {
    pub api_key_id: String,
    pub key: String,
    pub record: serde_json::Value,
    /// The database clock at the batch (its transaction's start).
    pub at: OffsetDateTime,
}

/// What `--action fail` stores.
pub struct FailWith<'a> {
    pub status: i32,
    /// A JSON object.
    pub body: &'a serde_json::Value,
    /// Keep a failed key at least this many seconds from now (0 = as it is).
    pub keep_failed: f64,
}

/// The statements of one action on one table, filled from its profile once per run.
pub struct Statements {
    sweep: String,
    archive_lock: String,
    apply: String,
    /// How long the client waits for any one answer (statement_timeout plus a margin).
    deadline: Duration,
}

impl Statements {
    pub fn new(table: &KeyTable, action: ReclaimAction, deadline: Duration) -> Statements {
        let (sweep, apply) = match action {
            ReclaimAction::Delete => (DELETE_SQL, APPLY_DELETE_SQL),
            ReclaimAction::Fail => (FAIL_SQL, APPLY_FAIL_SQL),
            ReclaimAction::Release => (RELEASE_SQL, APPLY_RELEASE_SQL),
        };
        Statements {
            sweep: table.sql(sweep),
            archive_lock: table.sql(ARCHIVE_LOCK_SQL),
            apply: table.sql(apply),
            deadline,
        }
    }

    /// One sweep batch: reclaim up to `limit` keys held longer than `older_than` seconds;
    /// returns the (tenant, key) of each.
    pub async fn sweep_batch(
        &self,
        client: &Session,
        older_than: f64,
        limit: i64,
        fail_with: Option<&FailWith<'_>>,
    ) -> Result<Vec<(String, String)>> {
        let mut params = vec![p(&older_than), p(&limit)];
        if let Some(f) = fail_with {
            params.extend([p(&f.status), p(f.body), p(&f.keep_failed)]);
        }
        let rows = self.query(client, &self.sweep, &params).await?;
        let row = rows
            .first()
            .ok_or_else(|| fail(Exit::Internal, "the batch statement returned no row"))?;
        let tenants: Vec<String> = row.try_get("api_key_ids")?;
        let keys: Vec<String> = row.try_get("keys")?;
        Ok(tenants.into_iter().zip(keys).collect())
    }

    /// One sweep batch for `--archive`, in a transaction of its own: lock the keys it will take
    /// and read each whole record before the change, run the batch, hand the records of the keys
    /// it took to `archive` (which must make them durable) and only then commit. A batch that took
    /// a key whose record was not read is rolled back and tried again, as is one that met a lock
    /// held past the session's lock_timeout; an error from `archive` rolls the batch back.
    pub async fn sweep_batch_archived(
        &self,
        client: &Session,
        older_than: f64,
        limit: i64,
        fail_with: Option<&FailWith<'_>>,
        archive: &mut dyn FnMut(&[ArchivedKey]) -> Result<()>,
    ) -> Result<Vec<(String, String)>> {
        let mut tries = 1;
        loop {
            client
                .begin("BEGIN")
                .await
                .context("failed to start an archived batch's transaction")?;
            let outcome = self
                .archived_once(client, older_than, limit, fail_with, archive)
                .await;
            match outcome {
                Ok(Some(got)) => {
                    client
                        .commit()
                        .await
                        .context("failed to commit a batch (its keys are in the archive)")?;
                    return Ok(got);
                }
                Ok(None) if tries < LOCK_TRIES => {}
                Err(e) if super::is_lock_timeout(&e) && tries < LOCK_TRIES => {
                    let _ = client.rollback().await;
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Ok(None) => {
                    let _ = client.rollback().await;
                    return Err(fail(
                        Exit::Failure,
                        "an archived batch kept taking keys other than those it locked; it was rolled back",
                    ));
                }
                Err(e) => {
                    let _ = client.rollback().await;
                    return Err(e);
                }
            }
            let _ = client.rollback().await;
            tries += 1;
        }
    }

    /// One try of an archived batch inside its transaction: None when the batch took a key whose
    /// record was not read first (the caller rolls back).
    async fn archived_once(
        &self,
        client: &Session,
        older_than: f64,
        limit: i64,
        fail_with: Option<&FailWith<'_>>,
        archive: &mut dyn FnMut(&[ArchivedKey]) -> Result<()>,
    ) -> Result<Option<Vec<(String, String)>>> {
        let locked = super::with_deadline(
            self.deadline,
            client.query_reused(&self.archive_lock, &[p(&older_than), p(&limit)]),
        )
        .await
        .context("failed to read the records of a batch's keys for the archive")?;
        let mut records = std::collections::HashMap::new();
        for r in &locked {
            let tenant: String = r.try_get("api_key_id")?;
            let key: String = r.try_get("key")?;
            let record: serde_json::Value = r.try_get("record")?;
            let at: OffsetDateTime = r.try_get("at")?;
            records.insert((tenant, key), (record, at));
        }
        let mut params = vec![p(&older_than), p(&limit)];
        if let Some(f) = fail_with {
            params.extend([p(&f.status), p(f.body), p(&f.keep_failed)]);
        }
        let rows =
            super::with_deadline(self.deadline, client.query_reused(&self.sweep, &params)).await?;
        let row = rows
            .first()
            .ok_or_else(|| fail(Exit::Internal, "the batch statement returned no row"))?;
        let tenants: Vec<String> = row.try_get("api_key_ids")?;
        let keys: Vec<String> = row.try_get("keys")?;
        let got: Vec<(String, String)> = tenants.into_iter().zip(keys).collect();
        let mut archived = Vec::with_capacity(got.len());
        for k in &got {
            match records.remove(k) {
                Some((record, at)) => archived.push(ArchivedKey {
                    api_key_id: k.0.clone(),
                    key: k.1.clone(),
                    record,
                    at,
                }),
                None => return Ok(None),
            }
        }
        archive(&archived)?;
        Ok(Some(got))
    }

    /// One batch of plan rows, each as (tenant, key, locked_at, created_at): each row's outcome
    /// and current state, in the batch's order.
    pub async fn apply_batch(
        &self,
        client: &Session,
        rows: &[(&str, &str, Option<OffsetDateTime>, OffsetDateTime)],
        older_than: f64,
        fail_with: Option<&FailWith<'_>>,
    ) -> Result<Vec<(String, Option<String>)>> {
        let tenants: Vec<&str> = rows.iter().map(|r| r.0).collect();
        let keys: Vec<&str> = rows.iter().map(|r| r.1).collect();
        let locked: Vec<Option<OffsetDateTime>> = rows.iter().map(|r| r.2).collect();
        let created: Vec<OffsetDateTime> = rows.iter().map(|r| r.3).collect();
        let mut params = vec![
            p(&tenants),
            p(&keys),
            p(&locked),
            p(&created),
            p(&older_than),
        ];
        if let Some(f) = fail_with {
            params.extend([p(&f.status), p(f.body), p(&f.keep_failed)]);
        }
        let answered = self.query(client, &self.apply, &params).await?;
        if answered.len() != rows.len() {
            return Err(fail(
                Exit::Internal,
                format!(
                    "the apply statement answered for {} of {} plan rows",
                    answered.len(),
                    rows.len()
                ),
            ));
        }
        answered
            .iter()
            .map(|r| Ok((r.try_get("outcome")?, r.try_get("state")?)))
            .collect()
    }

    /// Run one batch statement with the client-side deadline, which guards against a dead network
    /// path the server-side timeout cannot see. A batch that could not get a lock within the
    /// lock_timeout was rolled back whole; it is tried again a little later.
    async fn query(
        &self,
        client: &Session,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<tokio_postgres::Row>> {
        let mut tries = 1;
        loop {
            match super::with_deadline(self.deadline, client.query_reused(sql, params)).await {
                Err(e) if super::is_lock_timeout(&e) && tries < LOCK_TRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => return other,
            }
        }
    }
}

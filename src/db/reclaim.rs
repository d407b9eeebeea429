//! reclaim's statements and their typed rows: the preview of stuck keys (list and count in one
//! read-only snapshot), one sweep batch and one batch of a plan for each action, each also in an
//! archived form, and the filters (`--api-key-id`, `--path`, `--method`) every one of them binds.
//! Every batch runs through the batch runner ([`super::batch`]): a client-side deadline, and tried
//! again when it met a lock held past the session's few-millisecond lock_timeout.

use std::time::Duration;

use crate::report::timestamp::Timestamp;
use anyhow::{Context as _, Result};
use time::OffsetDateTime;

use super::batch::{self, Rerun, ThroughCoordinator};
use super::queries::Capped;
use super::{KeyTable, Param, Session, p};
use crate::domain::ReclaimAction;
use crate::exit::{Exit, refuse};
use crate::report::db::{Fault, Refusal, Step};
pub(crate) use crate::report::rows::Filter;

/// The preview: stuck keys, oldest first, up to a cap.
const PREVIEW_SQL: &str = include_str!("../../sql/reclaim_preview.sql");
const DELETE_SQL: &str = include_str!("../../sql/reclaim_delete.sql");
const FAIL_SQL: &str = include_str!("../../sql/reclaim_fail.sql");
const RELEASE_SQL: &str = include_str!("../../sql/reclaim_release.sql");
const APPLY_DELETE_SQL: &str = include_str!("../../sql/reclaim_apply_delete.sql");
const APPLY_FAIL_SQL: &str = include_str!("../../sql/reclaim_apply_fail.sql");
const APPLY_RELEASE_SQL: &str = include_str!("../../sql/reclaim_apply_release.sql");
const ARCHIVE_LOCK_SQL: &str = include_str!("../../sql/reclaim_archive_lock.sql");
const APPLY_ARCHIVE_LOCK_SQL: &str = include_str!("../../sql/reclaim_apply_archive_lock.sql");
const COUNT_SQL: &str = include_str!("../../sql/reclaim_count.sql");

impl Filter {
    pub(crate) fn is_empty(&self) -> bool {
        self.api_key_id.is_none() && self.path.is_none() && self.method.is_none()
    }

    fn params(&self) -> [Param<'_>; 3] {
        [p(&self.api_key_id), p(&self.path), p(&self.method)]
    }

    /// Refuse (exit 2, before any change) a filter the table cannot answer: a column the profile
    /// does not have, or a tenant the tenant column's type cannot hold (which the statement would
    /// only fail on).
    pub(crate) fn check(&self, table: &KeyTable) -> Result<()> {
        let profile = &table.profile;
        let lacks = |flag: &'static str, column: &'static str| {
            refuse(
                Exit::Usage,
                Refusal::FilterNotApplicable {
                    flag,
                    table: table.qualified_name(),
                    profile: profile.name.clone(),
                    column,
                },
            )
        };
        if self.api_key_id.is_some() && !profile.has_scope() {
            return Err(lacks("--api-key-id", "tenant"));
        }
        if self.path.is_some() && profile.request_path.is_none() {
            return Err(lacks("--path", "request path"));
        }
        if self.method.is_some() && profile.request_method.is_none() {
            return Err(lacks("--method", "request method"));
        }
        if let Some(id) = &self.api_key_id {
            profile
                .scope_value_problem(id, "--api-key-id", &table.qualified_name())
                .map_or(Ok(()), |why| {
                    Err(refuse(Exit::Usage, Refusal::ScopeValue(why)))
                })?;
        }
        Ok(())
    }
}

pub(crate) use super::profile::fits_type;

/// Stuck keys matching `filter`, counted up to `cap` (through the optional in_progress index).
pub(crate) async fn count_stuck(
    client: &Session,
    table: &KeyTable,
    older_than: f64,
    cap: i64,
    filter: &Filter,
) -> Result<Capped> {
    let mut params = vec![p(&older_than), p(&cap)];
    params.extend(filter.params());
    let r = client
        .query_one(&table.sql(COUNT_SQL), &params)
        .await
        .context(Step::CountStuck)?;
    Ok(Capped::from_raw(r.try_get("n")?, cap))
}

/// A stuck key as the preview reads it.
#[derive(Debug, Clone)]
pub(crate) struct StuckKey {
    /// None on a table without a tenant column.
    pub api_key_id: Option<String>,
    /// Each scope column's value (None without a scope).
    pub scope: Option<crate::report::rows::Scope>,
    pub key: String,
    /// None where the table has no such column or the row holds NULL.
    pub request_method: Option<String>,
    pub request_path: Option<String>,
    pub locked_at: Option<Timestamp>,
    /// None where the column allows NULL and holds it (Laravel's, Alembic's `created_at`).
    pub created_at: Option<Timestamp>,
    pub age_seconds: f64,
}

/// The preview's snapshot: up to `cap` keys, whether more matched, the capped count and the
/// database clock.
pub(crate) struct Listing {
    pub rows: Vec<StuckKey>,
    pub truncated: bool,
    pub count: Capped,
    pub db_now: OffsetDateTime,
}

/// List up to `cap` keys held longer than `older_than` seconds and count them (up to
/// `count_cap`) in one read-only snapshot, so the count and the list agree. (An error leaves the
/// session in the transaction; the process ends.)
pub(crate) async fn list_stuck(
    client: &Session,
    table: &KeyTable,
    older_than: f64,
    cap: i64,
    count_cap: i64,
    filter: &Filter,
) -> Result<Listing> {
    client
        .begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .context(Step::StartPreview)?;
    let db_now: OffsetDateTime = client
        .query_one(include_str!("../../sql/database_now.sql"), &[])
        .await
        .context(Step::ReadClock)?
        .try_get("now")?;
    let listed = cap + 1;
    let mut params = vec![p(&older_than), p(&listed)];
    params.extend(filter.params());
    let rows = client
        .query(&table.sql(PREVIEW_SQL), &params)
        .await
        .context(Step::ListStuck)?;
    let count = count_stuck(client, table, older_than, count_cap, filter).await?;
    client.commit().await.context(Step::EndPreview)?;
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let has_tenant = table.profile.has_scope();
    let rows = rows
        .iter()
        .map(|r| {
            let api_key_id = tenant_of(has_tenant, r.try_get("api_key_id")?);
            Ok(StuckKey {
                scope: table.profile.scope_of(api_key_id.as_deref()),
                api_key_id,
                key: r.try_get("key")?,
                request_method: r.try_get("request_method")?,
                request_path: r.try_get("request_path")?,
                locked_at: r.try_get("locked_at")?,
                created_at: r.try_get("created_at")?,
                age_seconds: r.try_get("age_seconds")?,
            })
        })
        .collect::<Result<Vec<_>>>()
        .context(Step::ReadListedKey)?;
    Ok(Listing {
        truncated: rows.len() > cap,
        rows: rows.into_iter().take(cap).collect(),
        count,
        db_now,
    })
}

/// A key an archived batch took, with its whole record before the change.
pub(crate) struct ArchivedKey {
    /// None on a table without a tenant column.
    pub api_key_id: Option<String>,
    /// Each scope column's value (None without a scope).
    pub scope: Option<crate::report::rows::Scope>,
    pub key: String,
    pub record: serde_json::Value,
    /// The database clock at the batch (its transaction's start).
    pub at: OffsetDateTime,
}

/// What `--action fail` stores.
pub(crate) struct FailWith<'a> {
    pub status: i32,
    /// A JSON object.
    pub body: &'a serde_json::Value,
    /// Keep a failed key at least this many seconds from now (0 = as it is).
    pub keep_failed: f64,
}

/// The statements of one action on one table, filled from its profile once per run, with the
/// run's filters.
pub(crate) struct Statements {
    sweep: String,
    archive_lock: String,
    /// The apply statements (the batch, and its archived form's lock) for each pattern of NULL
    /// scope values the plan rows can have ([`KeyTable::scope_null_patterns`]).
    apply: Vec<ApplyForm>,
    filter: Filter,
    /// How long the client waits for any one answer (statement_timeout plus a margin).
    deadline: Duration,
    /// On a Citus reference table (written through the coordinator to every placement): each
    /// batch runs in a transaction of its own that keeps its row waits to `wait` on every node
    /// ([`super::citus::bound_row_waits`]), and waits out a live transaction's lock.
    bound_waits: Option<ThroughCoordinator>,
    /// On a Citus reference or local table: each batch in a transaction of its own that plans it
    /// with its values ([`super::citus::plan_with_values`]).
    by_identity: bool,
    /// The table has a tenant column (without one, its statements answer '' as the tenant, and
    /// plan rows without a tenant are bound as '').
    has_tenant: bool,
    /// The scope's columns, which name an archived key's scope values.
    scope_columns: Vec<String>,
}

/// How a table's batches reach its rows, for [`Statements::new`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Route {
    /// Find the rows a batch locked again by the key's identity, not by ctid (a Citus reference
    /// or local table: [`super::citus::Layout::matches_rows_by_identity`]).
    pub by_identity: bool,
    /// Keep each batch's row waits bounded on every Citus node and wait out a live
    /// transaction's lock (a reference table).
    pub bound_waits: Option<ThroughCoordinator>,
}

/// A plan row as apply binds it: (tenant, key, locked_at, created_at, the scope columns that are
/// NULL); the tenant is None on a table without a tenant column and where a one-column scope is
/// NULL. The rows of one batch have the same NULL columns.
pub(crate) type PlanKey<'a> = (
    Option<&'a str>,
    &'a str,
    Option<Timestamp>,
    Option<Timestamp>,
    &'a [bool],
);

/// The apply statements for plan rows whose scope is NULL in the columns `nulls` marks.
struct ApplyForm {
    nulls: Vec<bool>,
    apply: String,
    archive_lock: String,
}

/// A key a batch took: (tenant, key), the tenant None on a table without a tenant column.
pub(crate) type TakenKey = (Option<String>, String);

/// The archive a batch hands the records of the keys it took to, before it commits.
pub(crate) type ArchiveSink<'a> = &'a mut dyn FnMut(&[ArchivedKey]) -> Result<()>;

/// Reads an archived batch's answer: the (tenant, key) of each key it took, and what the caller
/// gets back.
type TakenBy<'a, T> = &'a dyn Fn(&[tokio_postgres::Row]) -> Result<(Vec<TakenKey>, T)>;

impl Statements {
    pub(crate) fn new(
        table: &KeyTable,
        action: ReclaimAction,
        filter: &Filter,
        deadline: Duration,
        route: Route,
    ) -> Result<Statements> {
        let (sweep, apply) = match action {
            ReclaimAction::Delete => (DELETE_SQL, APPLY_DELETE_SQL),
            ReclaimAction::Fail => (FAIL_SQL, APPLY_FAIL_SQL),
            ReclaimAction::Release => (RELEASE_SQL, APPLY_RELEASE_SQL),
        };
        let render_with = |template: &str, nulls: &[bool]| -> Result<String> {
            if !route.by_identity {
                return Ok(table.sql_with_nulls(template, nulls));
            }
            super::citus::rows_by_identity(template)
                .map(|t| table.sql_with_nulls(&t, nulls))
                .ok_or_else(|| refuse(Exit::Internal, Fault::ReclaimWithoutIdentityForm))
        };
        let render = |template: &str| render_with(template, &[]);
        let forms = table
            .scope_null_patterns()
            .into_iter()
            .map(|nulls| {
                Ok(ApplyForm {
                    apply: render_with(apply, &nulls)?,
                    archive_lock: table.sql_with_nulls(APPLY_ARCHIVE_LOCK_SQL, &nulls),
                    nulls,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Statements {
            sweep: render(sweep)?,
            archive_lock: table.sql(ARCHIVE_LOCK_SQL),
            apply: forms,
            filter: filter.clone(),
            deadline,
            bound_waits: route.bound_waits,
            by_identity: route.by_identity,
            has_tenant: table.profile.has_scope(),
            scope_columns: table.profile.tenant.clone(),
        })
    }

    /// A sweep batch's parameters: cutoff, size, what `fail` stores, then the filters.
    fn sweep_params<'a>(
        &'a self,
        older_than: &'a f64,
        limit: &'a i64,
        fail_with: Option<&'a FailWith<'_>>,
    ) -> Vec<Param<'a>> {
        let mut params = vec![p(older_than), p(limit)];
        if let Some(f) = fail_with {
            params.extend([p(&f.status), p(f.body), p(&f.keep_failed)]);
        }
        params.extend(self.filter.params());
        params
    }

    /// One sweep batch: reclaim up to `limit` keys held longer than `older_than` seconds;
    /// returns the (tenant, key) of each.
    pub(crate) async fn sweep_batch(
        &self,
        client: &Session,
        older_than: f64,
        limit: i64,
        fail_with: Option<&FailWith<'_>>,
    ) -> Result<Vec<TakenKey>> {
        let params = self.sweep_params(&older_than, &limit, fail_with);
        let rows = self.query(client, &self.sweep, &params).await?;
        // The batch has committed: a failure from here on must not be told as a rollback.
        taken(&rows, self.has_tenant).context(Step::ReadTakenKeys)
    }

    /// One sweep batch for `--archive`, in a transaction of its own: lock the keys it will take
    /// and read each whole record before the change, run the batch, hand the records of the keys
    /// it took to `archive` (which must make them durable) and only then commit. A batch that took
    /// a key whose record was not read is rolled back and tried again, as is one that met a lock
    /// held past the session's lock_timeout; an error from `archive` rolls the batch back.
    pub(crate) async fn sweep_batch_archived(
        &self,
        client: &Session,
        older_than: f64,
        limit: i64,
        fail_with: Option<&FailWith<'_>>,
        archive: ArchiveSink<'_>,
    ) -> Result<Vec<TakenKey>> {
        let mut lock_params = vec![p(&older_than), p(&limit)];
        lock_params.extend(self.filter.params());
        let params = self.sweep_params(&older_than, &limit, fail_with);
        let batch = Archived {
            lock: (&self.archive_lock, &lock_params),
            change: (&self.sweep, &params),
        };
        self.archived(client, &batch, archive, &|rows| {
            taken(rows, self.has_tenant).map(|got| (got.clone(), got))
        })
        .await
    }

    /// An apply batch's parameters: the plan rows as arrays, the plan's cutoff, what `fail`
    /// stores, then the filters.
    fn apply_params<'a>(
        &'a self,
        arrays: &'a PlanArrays<'a>,
        older_than: &'a f64,
        fail_with: Option<&'a FailWith<'_>>,
    ) -> Vec<Param<'a>> {
        let mut params = vec![
            p(&arrays.tenants),
            p(&arrays.keys),
            p(&arrays.locked),
            p(&arrays.created),
            p(older_than),
        ];
        if let Some(f) = fail_with {
            params.extend([p(&f.status), p(f.body), p(&f.keep_failed)]);
        }
        params.extend(self.filter.params());
        params
    }

    /// The apply form for the batch's rows, which all have the same NULL scope columns.
    fn apply_form(&self, rows: &[PlanKey<'_>]) -> Result<&ApplyForm> {
        let nulls = rows.first().map_or(&[][..], |r| r.4);
        let same = rows.iter().all(|r| r.4 == nulls);
        let wanted = |f: &&ApplyForm| {
            f.nulls == nulls || (!nulls.contains(&true) && !f.nulls.contains(&true))
        };
        match self.apply.iter().find(wanted) {
            Some(form) if same => Ok(form),
            _ => Err(refuse(Exit::Internal, Fault::NoApplyFormForNulls)),
        }
    }

    /// One batch of plan rows: each row's outcome and current state, in the batch's order.
    pub(crate) async fn apply_batch(
        &self,
        client: &Session,
        rows: &[PlanKey<'_>],
        older_than: f64,
        fail_with: Option<&FailWith<'_>>,
    ) -> Result<Vec<(String, Option<String>)>> {
        let form = self.apply_form(rows)?;
        let arrays = PlanArrays::of(rows, self.has_tenant);
        let params = self.apply_params(&arrays, &older_than, fail_with);
        let answered = self.query(client, &form.apply, &params).await?;
        outcomes(&answered, rows)
    }

    /// One batch of plan rows for `--archive`, as [`Statements::sweep_batch_archived`] does it:
    /// the rows it will take locked and read first, their records durable in the archive before
    /// the batch commits.
    pub(crate) async fn apply_batch_archived(
        &self,
        client: &Session,
        rows: &[PlanKey<'_>],
        older_than: f64,
        fail_with: Option<&FailWith<'_>>,
        archive: ArchiveSink<'_>,
    ) -> Result<Vec<(String, Option<String>)>> {
        let form = self.apply_form(rows)?;
        let arrays = PlanArrays::of(rows, self.has_tenant);
        let mut lock_params = vec![
            p(&arrays.tenants),
            p(&arrays.keys),
            p(&arrays.locked),
            p(&arrays.created),
            p(&older_than),
        ];
        lock_params.extend(self.filter.params());
        let params = self.apply_params(&arrays, &older_than, fail_with);
        let batch = Archived {
            lock: (&form.archive_lock, &lock_params),
            change: (&form.apply, &params),
        };
        self.archived(client, &batch, archive, &|answered| {
            let outcomes = outcomes(answered, rows)?;
            let got = rows
                .iter()
                .zip(&outcomes)
                .filter(|(_, (o, _))| o == "reclaimed")
                .map(|(r, _)| (r.0.map(str::to_owned), r.1.to_owned()))
                .collect();
            Ok((got, outcomes))
        })
        .await
    }

    /// An archived batch in a transaction of its own (see [`Statements::sweep_batch_archived`]):
    /// `read` turns the changing statement's rows into the keys it took and the caller's answer.
    async fn archived<T>(
        &self,
        client: &Session,
        batch: &Archived<'_>,
        archive: ArchiveSink<'_>,
        read: TakenBy<'_, T>,
    ) -> Result<T> {
        let failed = [Step::StartArchivedBatch, Step::CommitArchivedBatch];
        // Each try hands its records to the one archive, one try after another.
        let archive = std::sync::Mutex::new(archive);
        let attempt = || {
            let once = self.archived_once(client, batch, &archive, read);
            batch::in_transaction(client, failed.clone(), once)
        };
        batch::retrying_through(self.bound_waits.as_ref(), attempt)
            .await
            .map_err(|e| match batch::Failure::of(&e) {
                batch::Failure::Rerun => refuse(Exit::Failure, Refusal::ArchivedBatchRaced),
                _ => e,
            })
    }

    /// One try of an archived batch inside its transaction: a [`Rerun`] when the batch took a key
    /// whose record was not read first (the transaction is rolled back).
    async fn archived_once<T>(
        &self,
        client: &Session,
        batch: &Archived<'_>,
        archive: &std::sync::Mutex<ArchiveSink<'_>>,
        read: TakenBy<'_, T>,
    ) -> Result<T> {
        self.through_citus(client).await?;
        let (lock_sql, lock_params) = batch.lock;
        let locked =
            super::with_deadline(self.deadline, client.query_reused(lock_sql, lock_params))
                .await
                .context(Step::ReadArchiveRecords)?;
        let mut records = std::collections::HashMap::new();
        for r in &locked {
            let tenant = tenant_of(self.has_tenant, r.try_get("api_key_id")?);
            let key: String = r.try_get("key")?;
            let record: serde_json::Value = r.try_get("record")?;
            let at: OffsetDateTime = r.try_get("at")?;
            records.insert((tenant, key), (record, at));
        }
        let (sql, params) = batch.change;
        let rows = super::with_deadline(self.deadline, client.query_reused(sql, params))
            .await
            .context(Step::ChangeArchivedBatch)?;
        let (got, answer) = read(&rows)?;
        let mut archived = Vec::with_capacity(got.len());
        for k in got {
            match records.remove(&k) {
                Some((record, at)) => archived.push(ArchivedKey {
                    scope: super::profile::scope_from(&self.scope_columns, k.0.as_deref()),
                    api_key_id: k.0,
                    key: k.1,
                    record,
                    at,
                }),
                None => return Err(Rerun.into()),
            }
        }
        let mut archive = archive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (*archive)(&archived)?;
        Ok(answer)
    }

    /// Run one batch statement with the client-side deadline, which guards against a dead network
    /// path the server-side timeout cannot see, through the batch runner (a batch rolled back by a
    /// lock wait past lock_timeout is tried again a little later).
    async fn query(
        &self,
        client: &Session,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<tokio_postgres::Row>> {
        if !self.by_identity {
            return batch::retrying(|| {
                super::with_deadline(self.deadline, client.query_reused(sql, params))
            })
            .await;
        }
        let attempt = || {
            batch::in_transaction(client, [Step::StartBatch, Step::CommitBatch], async move {
                self.through_citus(client).await?;
                super::with_deadline(self.deadline, client.query_reused(sql, params)).await
            })
        };
        batch::retrying_through(self.bound_waits.as_ref(), attempt).await
    }

    /// At the start of a batch's transaction on a Citus reference or local table: plan it with
    /// its values, and on a reference table keep its row waits bounded on every node.
    async fn through_citus(&self, client: &Session) -> Result<()> {
        if self.by_identity {
            super::citus::plan_with_values(client).await?;
        }
        if let Some(how) = &self.bound_waits {
            super::citus::bound_row_waits(client, how.wait).await?;
        }
        Ok(())
    }
}

/// The two statements of an archived batch with their parameters: the one that locks and reads
/// the records, and the one that changes the rows.
struct Archived<'a> {
    lock: (&'a str, &'a [Param<'a>]),
    change: (&'a str, &'a [Param<'a>]),
}

/// Plan rows as the parallel arrays the apply statements unnest. A row without a tenant (on a
/// table without a tenant column) is bound as '', which its statements compare the tenant as; a
/// NULL one-column scope as NULL.
struct PlanArrays<'a> {
    tenants: Vec<Option<&'a str>>,
    keys: Vec<&'a str>,
    locked: Vec<Option<Timestamp>>,
    created: Vec<Option<Timestamp>>,
}

impl<'a> PlanArrays<'a> {
    fn of(rows: &[PlanKey<'a>], has_tenant: bool) -> PlanArrays<'a> {
        PlanArrays {
            tenants: rows
                .iter()
                .map(|r| if has_tenant { r.0 } else { Some("") })
                .collect(),
            keys: rows.iter().map(|r| r.1).collect(),
            locked: rows.iter().map(|r| r.2).collect(),
            created: rows.iter().map(|r| r.3).collect(),
        }
    }
}

/// The (tenant, key) of each key a sweep batch took, from its one row of arrays.
fn taken(rows: &[tokio_postgres::Row], has_tenant: bool) -> Result<Vec<TakenKey>> {
    let row = rows
        .first()
        .ok_or_else(|| refuse(Exit::Internal, Fault::NoBatchRow))?;
    let tenants: Vec<Option<String>> = row.try_get("api_key_ids")?;
    let keys: Vec<String> = row.try_get("keys")?;
    Ok(tenants
        .into_iter()
        .map(|t| tenant_of(has_tenant, t))
        .zip(keys)
        .collect())
}

/// Whether a sweep batch that failed with `e` had committed, and only reading the keys it took
/// from its answer failed.
pub(crate) fn committed_unread(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<Step>(), Some(Step::ReadTakenKeys))
}

/// The tenant a statement answered, as its callers get it: None on a table without a tenant
/// column, whose statements answer '' (a tenant table may hold '' as a tenant), and where a
/// one-column scope holds NULL.
fn tenant_of(has_tenant: bool, answered: Option<String>) -> Option<String> {
    answered.filter(|_| has_tenant)
}

/// Each plan row's outcome and current state, in the batch's order.
fn outcomes(
    answered: &[tokio_postgres::Row],
    rows: &[PlanKey<'_>],
) -> Result<Vec<(String, Option<String>)>> {
    if answered.len() != rows.len() {
        return Err(refuse(
            Exit::Internal,
            Fault::ApplyAnswered {
                answered: answered.len(),
                rows: rows.len(),
            },
        ));
    }
    answered
        .iter()
        .map(|r| Ok((r.try_get("outcome")?, r.try_get("state")?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::fits_type;

    #[test]
    fn a_bytea_key_is_written_as_psql_prints_it() {
        assert!(fits_type("\\x9f86d0", "bytea"));
        assert!(fits_type("\\x", "bytea"));
        assert!(!fits_type("9f86d0", "bytea"));
        assert!(!fits_type("\\x9f8", "bytea"));
        assert!(!fits_type("\\xzz", "bytea"));
    }
}

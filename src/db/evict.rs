//! evict's statements and their typed rows: claiming a range of the expiry index, deleting it (and
//! its SKIP LOCKED fallback), the counts of what a range left, the leftover counts after a run, the
//! dry run's preview, sample and plan, and the planner's estimate for the progress bar. Each batch
//! statement runs with a client-side deadline (see [`super::with_deadline`]).

use std::time::Duration;

use crate::report::timestamp::Timestamp;
use anyhow::{Context as _, Result};

use super::batch::ThroughCoordinator;
use super::queries::Capped;
pub(crate) use super::references::References;
use super::{KeyTable, Param, Session, p, with_deadline};
use crate::exit::{Exit, refuse};
use crate::ident::quote_ident;
use crate::report::db::{Fault, Step};
pub(crate) use crate::report::rows::SampleKey;

const CLAIM_SQL: &str = include_str!("../../sql/evict_range_end.sql");
const BATCH_SQL: &str = include_str!("../../sql/evict_batch.sql");
const TOO_YOUNG_SQL: &str = include_str!("../../sql/evict_batch_too_young.sql");
const SKIP_LOCKED_SQL: &str = include_str!("../../sql/evict_batch_skip_locked.sql");
const REFERENCED_SQL: &str = include_str!("../../sql/evict_batch_referenced.sql");
const RANGE_IN_PROGRESS_SQL: &str = include_str!("../../sql/evict_range_in_progress.sql");
const PREVIEW_SQL: &str = include_str!("../../sql/evict_preview.sql");
const PREVIEW_SAMPLE_SQL: &str = include_str!("../../sql/evict_preview_sample.sql");
const BACKLOG_FROM_SQL: &str = include_str!("../../sql/expired_backlog_from.sql");
const IN_PROGRESS_FROM_SQL: &str = include_str!("../../sql/expired_in_progress_from.sql");
const PING_SQL: &str = include_str!("../../sql/ping.sql");
const ESTIMATE_SQL: &str = include_str!("../../sql/evict_estimate.sql");
const JIT_OFF_SQL: &str = include_str!("../../sql/jit_off.sql");
const WALK_SQL: &str = include_str!("../../sql/evict_walk.sql");
const WALK_PREVIEW_SQL: &str = include_str!("../../sql/evict_walk_preview.sql");

/// evict's statements on a table without an expiry index: pages of a unique index walked in order
/// ([`WALK_SQL`]), the first page's and the next ones', and the dry run's read-only pages
/// ([`WALK_PREVIEW_SQL`]), the same pages.
#[derive(Debug, Clone)]
pub struct Walk {
    first: String,
    next: String,
    preview_first: String,
    preview_next: String,
    /// The index walked, for messages.
    pub index: String,
    /// The walk follows age (a key from a sequence): it stops at the first page in which nothing
    /// has expired.
    pub follows_age: bool,
    /// The table's scope columns (the sample lists each key's scope).
    scope: Vec<String>,
}

/// What one page of the walk did.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub examined: u64,
    pub expired: u64,
    pub deleted: u64,
    /// Expired finished rows kept because they are younger than --min-age.
    pub too_young: u64,
    /// The page's last key, as text (None: the page was empty).
    pub last_key: Option<Vec<String>>,
    /// No row of the page had expired.
    pub none_past: bool,
}

/// What one page of the walk would do (the dry run): `page.deleted` is 0, `page.expired` the rows
/// a run would delete (unless a live transaction holds them).
#[derive(Debug, Default)]
pub(crate) struct PreviewPage {
    pub page: Page,
    /// The oldest and newest expiry among the rows a run would delete.
    pub oldest: Option<Timestamp>,
    pub newest: Option<Timestamp>,
    /// The first keys a run would delete, and the first --min-age would keep, in the index's order.
    pub evict: Vec<SampleKey>,
    pub kept: Vec<SampleKey>,
}

impl Walk {
    /// The statements walking `index` of `table`.
    pub fn new(table: &KeyTable, index: &super::table::Index) -> Walk {
        let mut walk = Walk::of(&table.profile, &table.quoted, &table.walk_columns(index));
        walk.index.clone_from(&index.name);
        walk.follows_age = table.walk_follows_age(index);
        walk
    }

    /// The statements walking an index of `columns` (name, type) of the table `quoted`, whose
    /// roles `profile` gives.
    pub fn of(
        profile: &crate::db::profile::Profile,
        quoted: &str,
        columns: &[(String, String)],
    ) -> Walk {
        let quoted_columns: Vec<String> = columns.iter().map(|(c, _)| quote_ident(c)).collect();
        let list = quoted_columns.join(", ");
        let each = |suffix: &str| {
            quoted_columns
                .iter()
                .map(|c| format!("{c}{suffix}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        // The previous page's last key, from parameter $`from` on.
        let after = |from: usize| {
            format!(
                "({list}) > ({})",
                columns
                    .iter()
                    .enumerate()
                    .map(|(n, (_, ty))| format!("${}::text::{ty}", n + from))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let fill = |template: &str, after: &str| {
            profile.render(
                &template
                    .replace("{walk_columns}", &list)
                    .replace("{walk_desc}", &each(" DESC"))
                    .replace("{walk_text}", &each("::text"))
                    .replace("{walk_after}", after),
                quoted,
            )
        };
        Walk {
            first: fill(WALK_SQL, "true"),
            next: fill(WALK_SQL, &after(3)),
            preview_first: fill(WALK_PREVIEW_SQL, "true"),
            preview_next: fill(WALK_PREVIEW_SQL, &after(4)),
            index: String::new(),
            follows_age: false,
            scope: profile.tenant.clone(),
        }
    }

    /// The statement of the first page, or of the page after a key (for the EXPLAIN test).
    pub fn sql(&self, after_a_key: bool) -> &str {
        if after_a_key { &self.next } else { &self.first }
    }

    /// The dry run's statement of the first page, or of the page after a key.
    pub fn preview_sql(&self, after_a_key: bool) -> &str {
        if after_a_key {
            &self.preview_next
        } else {
            &self.preview_first
        }
    }

    /// Walk one page of at most `size` index entries after `after` (None: from the start),
    /// keeping rows younger than `min_age` seconds.
    pub async fn page(
        &self,
        client: &Session,
        deadline: Duration,
        size: i64,
        min_age: Option<f64>,
        after: Option<&[String]>,
    ) -> Result<Page> {
        let mut params: Vec<Param<'_>> = vec![p(&size), p(&min_age)];
        let sql = match after {
            None => &self.first,
            Some(key) => {
                params.extend(key.iter().map(p));
                &self.next
            }
        };
        let row = one_row(client, deadline, sql, &params).await?;
        Ok(Page {
            examined: count(&row, "examined")?,
            expired: count(&row, "expired")?,
            deleted: count(&row, "deleted")?,
            too_young: count(&row, "too_young")?,
            last_key: row.try_get("last_key")?,
            none_past: row.try_get("none_past")?,
        })
    }

    /// Read one page as [`Walk::page`] would walk it, changing nothing; list up to `listed` keys of
    /// each kind.
    pub(crate) async fn preview_page(
        &self,
        client: &Session,
        deadline: Duration,
        size: i64,
        min_age: Option<f64>,
        listed: i64,
        after: Option<&[String]>,
    ) -> Result<PreviewPage> {
        let mut params: Vec<Param<'_>> = vec![p(&size), p(&min_age), p(&listed)];
        let sql = match after {
            None => &self.preview_first,
            Some(key) => {
                params.extend(key.iter().map(p));
                &self.preview_next
            }
        };
        let row = with_deadline(deadline, client.query_one(sql, &params))
            .await
            .context(Step::ReadWalkPage)?;
        let young: Vec<bool> = row.try_get("sample_young")?;
        let scope: Vec<Option<String>> = row.try_get("sample_scope")?;
        let key: Vec<Option<String>> = row.try_get("sample_key")?;
        let expires: Vec<Timestamp> = row.try_get("sample_expires_at")?;
        let created: Vec<Option<Timestamp>> = row.try_get("sample_created_at")?;
        let mut preview = PreviewPage {
            page: Page {
                examined: count(&row, "examined")?,
                expired: count(&row, "expired")?,
                deleted: 0,
                too_young: count(&row, "too_young")?,
                last_key: row.try_get("last_key")?,
                none_past: row.try_get("none_past")?,
            },
            oldest: row.try_get("oldest")?,
            newest: row.try_get("newest")?,
            ..PreviewPage::default()
        };
        for (n, young) in young.into_iter().enumerate() {
            let api_key_id = scope
                .get(n)
                .cloned()
                .flatten()
                .filter(|_| !self.scope.is_empty());
            let sample = SampleKey {
                scope: super::profile::scope_from(&self.scope, api_key_id.as_deref()),
                api_key_id,
                key: key.get(n).cloned().flatten(),
                expires_at: expires[n],
                created_at: created.get(n).copied().flatten(),
            };
            match young {
                true => preview.kept.push(sample),
                false => preview.evict.push(sample),
            }
        }
        Ok(preview)
    }
}

/// The batch statements of one table, filled from its profile once per run (per shard on Citus).
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    claim: String,
    delete: String,
    too_young: String,
    skip_locked: String,
    range_in_progress: String,
    /// The count of a range's keys still referenced by a NO ACTION / RESTRICT foreign key (None:
    /// no such key references the table).
    referenced: Option<String>,
    /// On Citus, a table written through the coordinator: each batch's row waits on every node,
    /// and how its fallback waits out a live transaction (see [`Statements::through_coordinator`]).
    coordinator_waits: Option<ThroughCoordinator>,
    /// On a Citus reference or local table: each batch statement in a transaction of its own that
    /// plans it with its values ([`super::citus::plan_with_values`]).
    by_identity: bool,
    /// On a table without an expiry index: the pages of the unique index each batch walks instead
    /// of a range of the expiry index.
    walk: Option<Walk>,
}

/// A claimed range: its first row's expiry (None: nothing left) and where it ends (None: open).
pub(crate) struct Claim {
    pub first: Option<Timestamp>,
    pub end: Option<Timestamp>,
}

fn count(row: &tokio_postgres::Row, column: &str) -> Result<u64> {
    Ok(u64::try_from(row.try_get::<_, i64>(column)?).unwrap_or(0))
}

/// Run one statement that returns one row (prepared once per owned session), with the deadline.
async fn one_row(
    client: &Session,
    deadline: Duration,
    sql: &str,
    params: &[Param<'_>],
) -> Result<tokio_postgres::Row> {
    let mut rows = with_deadline(deadline, client.query_reused(sql, params)).await?;
    match rows.len() {
        1 => Ok(rows.remove(0)),
        n => Err(refuse(Exit::Internal, Fault::RowCount(n))),
    }
}

impl Statements {
    pub(crate) fn new(table: &KeyTable) -> Statements {
        Statements::with_references(table, &References::none())
    }

    /// The statements of a table that foreign keys reference: the batches leave out keys still
    /// referenced by a NO ACTION / RESTRICT row (and count them), and the SKIP LOCKED fallback
    /// skips keys whose referencing rows a live transaction holds (see [`References`]).
    pub(crate) fn with_references(table: &KeyTable, refs: &References) -> Statements {
        let render = |template: &str| refs.fill(&table.sql(template), &table.quoted);
        Statements {
            claim: table.sql(CLAIM_SQL),
            delete: render(BATCH_SQL),
            too_young: table.sql(TOO_YOUNG_SQL),
            skip_locked: render(SKIP_LOCKED_SQL),
            range_in_progress: table.sql(RANGE_IN_PROGRESS_SQL),
            referenced: refs.any_blocking().then(|| render(REFERENCED_SQL)),
            coordinator_waits: None,
            by_identity: false,
            walk: None,
        }
    }

    /// The statements of a table without an expiry index: each batch is a page of `walk`.
    pub(crate) fn walking(mut self, walk: Walk) -> Statements {
        self.walk = Some(walk);
        self
    }

    /// The walk each batch takes a page of (None: batches are ranges of the expiry index).
    pub(crate) fn walk(&self) -> Option<&Walk> {
        self.walk.as_ref()
    }

    /// Whether a batch may leave keys that are still referenced (see [`Statements::referenced`]).
    pub(crate) fn counts_referenced(&self) -> bool {
        self.referenced.is_some()
    }

    /// Expired completed rows of [start, end) left because a NO ACTION / RESTRICT foreign key
    /// still references them (0 when none references the table).
    pub(crate) async fn referenced(
        &self,
        client: &Session,
        deadline: Duration,
        start: Option<Timestamp>,
        end: Option<Timestamp>,
    ) -> Result<u64> {
        let Some(sql) = &self.referenced else {
            return Ok(0);
        };
        let row = one_row(client, deadline, sql, &[p(&start), p(&end)]).await?;
        count(&row, "referenced")
    }

    /// The table is a Citus reference or local table, whose statements Citus plans on the
    /// coordinator: the SKIP LOCKED fallback finds the rows it locked again by the key's identity,
    /// not by ctid, which Citus refuses there ([`super::citus::rows_by_identity`]). Its DELETE
    /// re-checks expiry and state on every row it removes, as by ctid. It leaves out the keys a
    /// NO ACTION / RESTRICT row of `refs` still references, as the batch statement does; it does
    /// not lock the rows an ON DELETE action changes first.
    pub(crate) fn by_identity(mut self, table: &KeyTable, refs: &References) -> Result<Statements> {
        let template = super::citus::rows_by_identity(SKIP_LOCKED_SQL)
            .ok_or_else(|| refuse(Exit::Internal, Fault::EvictWithoutIdentityForm))?;
        self.skip_locked = refs
            .blocking_only()
            .fill(&table.sql(&template), &table.quoted);
        self.by_identity = true;
        Ok(self)
    }

    /// The table is written through the Citus coordinator (a reference table): each batch
    /// statement runs in a transaction of its own that bounds its row waits to `how.wait` on every
    /// node ([`super::citus::bound_row_waits`]), as the session's lock_timeout does on one server.
    pub(crate) fn through_coordinator(mut self, how: ThroughCoordinator) -> Statements {
        self.coordinator_waits = Some(how);
        self
    }

    /// Run one batch statement: as it is, or through the coordinator in its own transaction.
    async fn batch<T>(
        &self,
        client: &Session,
        statement: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let wait = self.coordinator_waits.as_ref().map(|how| how.wait);
        if wait.is_none() && !self.by_identity {
            return statement.await;
        }
        super::batch::in_transaction(client, [Step::StartBatch, Step::CommitBatch], async {
            if self.by_identity {
                super::citus::plan_with_values(client).await?;
            }
            if let Some(wait) = wait {
                super::citus::bound_row_waits(client, wait).await?;
            }
            statement.await
        })
        .await
    }

    /// The batch statement as it runs (for `--dry-run`).
    pub(crate) fn delete_sql(&self) -> &str {
        &self.delete
    }

    /// The range from `start` that holds at most `limit` deletable rows.
    pub(crate) async fn claim(
        &self,
        client: &Session,
        deadline: Duration,
        start: Option<Timestamp>,
        limit: i64,
    ) -> Result<Claim> {
        let row = one_row(client, deadline, &self.claim, &[p(&start), p(&limit)]).await?;
        Ok(Claim {
            first: row.try_get("first")?,
            end: row.try_get("range_end")?,
        })
    }

    /// Delete the expired completed rows of [start, end); the count deleted.
    pub(crate) async fn delete(
        &self,
        client: &Session,
        deadline: Duration,
        start: Option<Timestamp>,
        end: Option<Timestamp>,
        min_age: Option<f64>,
    ) -> Result<u64> {
        self.batch(
            client,
            with_deadline(
                deadline,
                client.execute_reused(&self.delete, &[p(&start), p(&end), p(&min_age)]),
            ),
        )
        .await
    }

    /// The SKIP LOCKED delete over [first, last] (inclusive; None = open): (deleted, present,
    /// time spent pausing between tries: none but on a reference table).
    pub(crate) async fn skip_locked(
        &self,
        client: &Session,
        deadline: Duration,
        first: Option<Timestamp>,
        last: Option<Timestamp>,
        limit: i64,
        min_age: Option<f64>,
    ) -> Result<(u64, u64, Duration)> {
        if let Some(how) = &self.coordinator_waits {
            return self
                .whole_range_again(client, deadline, how, first, last, min_age)
                .await;
        }
        let row = self
            .batch(
                client,
                one_row(
                    client,
                    deadline,
                    &self.skip_locked,
                    &[p(&first), p(&last), p(&limit), p(&min_age)],
                ),
            )
            .await?;
        Ok((
            count(&row, "deleted")?,
            count(&row, "present")?,
            Duration::ZERO,
        ))
    }

    /// The SKIP LOCKED fallback through the Citus coordinator (a reference table). There no
    /// statement can skip the one row a live request holds (Citus cannot plan the SKIP LOCKED
    /// statement on a reference table, and serializes its writes: [`ThroughCoordinator`]), so the
    /// range [first, last] is deleted whole again ([`super::batch::waiting_out`]), each try
    /// waiting on every node no longer than `how.wait`, for up to `how.patience`; then the run
    /// ends, having made no request wait longer than one try's wait, and leaves the rest to the
    /// next run. (deleted, present, paused): both the rows deleted, and the time
    /// spent pausing between tries (not the statement's work).
    async fn whole_range_again(
        &self,
        client: &Session,
        deadline: Duration,
        how: &ThroughCoordinator,
        first: Option<Timestamp>,
        last: Option<Timestamp>,
        min_age: Option<f64>,
    ) -> Result<(u64, u64, Duration)> {
        let end = last.map(Timestamp::next_after);
        let (deleted, paused) =
            super::batch::waiting_out(how, || self.delete(client, deadline, first, end, min_age))
                .await?;
        Ok((deleted, deleted, paused))
    }

    /// Expired completed rows of [start, end) kept back by --min-age.
    pub(crate) async fn too_young(
        &self,
        client: &Session,
        deadline: Duration,
        start: Option<Timestamp>,
        end: Option<Timestamp>,
        min_age: Option<f64>,
    ) -> Result<u64> {
        let row = one_row(
            client,
            deadline,
            &self.too_young,
            &[p(&start), p(&end), p(&min_age)],
        )
        .await?;
        count(&row, "too_young")
    }

    /// The expired rows of [start, end) left: (completed, not completed).
    pub(crate) async fn range_left(
        &self,
        client: &Session,
        deadline: Duration,
        start: Option<Timestamp>,
        end: Option<Timestamp>,
    ) -> Result<(u64, u64)> {
        let row = one_row(
            client,
            deadline,
            &self.range_in_progress,
            &[p(&start), p(&end)],
        )
        .await?;
        Ok((count(&row, "completed")?, count(&row, "passed_over")?))
    }
}

/// One empty statement, to time the round trip to the server.
pub(crate) async fn ping(client: &Session, deadline: Duration) -> Result<()> {
    one_row(client, deadline, PING_SQL, &[]).await.map(drop)
}

/// Expired completed keys from `cursor` on, up to `cap`, with a generic plan (the index range,
/// whatever the statistics say), as the batches run.
pub(crate) async fn backlog_from(
    client: &Session,
    table: &KeyTable,
    cursor: Option<Timestamp>,
    cap: i64,
) -> Result<Capped> {
    client
        .set("plan_cache_mode", "force_generic_plan")
        .await
        .context(Step::SetUpFinalCount)?;
    let row = client
        .query_one(&table.sql(BACKLOG_FROM_SQL), &[p(&cap), p(&cursor)])
        .await
        .context(Step::CountBacklogLeft)?;
    Ok(Capped::from_raw(row.try_get("n")?, cap))
}

/// Expired keys not completed from `cursor` on, examining at most `cap` expired rows.
pub(crate) async fn in_progress_from(
    client: &Session,
    table: &KeyTable,
    cursor: Option<Timestamp>,
    cap: i64,
) -> Result<Capped> {
    let row = client
        .query_one(&table.sql(IN_PROGRESS_FROM_SQL), &[p(&cap), p(&cursor)])
        .await
        .context(Step::CountExpiredInProgressLeft)?;
    let examined: i64 = row.try_get("examined")?;
    Ok(Capped {
        count: row.try_get("n")?,
        at_least: examined >= cap,
    })
}

/// What a dry run would evict: the count (up to `cap`) and the expiry range of the candidates, and
/// the candidates it would leave because a NO ACTION / RESTRICT foreign key still references them.
pub(crate) struct Preview {
    pub count: Capped,
    pub referenced: Capped,
    pub oldest: Option<Timestamp>,
    pub newest: Option<Timestamp>,
}

/// The dry run's counts. `refs`: the foreign keys probed as the batches probe them (see
/// [`References::index_backed`]); none leaves the statement the plain count.
pub(crate) async fn preview(
    client: &Session,
    table: &KeyTable,
    refs: &References,
    cap: i64,
    min_age: Option<f64>,
) -> Result<Preview> {
    let row = client
        .query_one(
            &refs.fill(&table.sql(PREVIEW_SQL), &table.quoted),
            &[p(&cap), p(&min_age)],
        )
        .await
        .context(Step::PreviewEviction)?;
    let walked: i64 = row.try_get("walked")?;
    // Both counts come from one walk of at most cap + 1 candidates: past the cap, each is a floor.
    let capped = |n: i64| Capped {
        count: n.min(cap),
        at_least: walked > cap,
    };
    Ok(Preview {
        count: capped(row.try_get("n")?),
        referenced: capped(row.try_get("referenced")?),
        oldest: row.try_get("oldest")?,
        newest: row.try_get("newest")?,
    })
}

/// The dry run's samples: keys that would go, keys --min-age holds back and how many among the
/// expired keys walked.
pub(crate) struct Sample {
    pub evict: Vec<SampleKey>,
    pub kept: Vec<SampleKey>,
    pub held_back: i64,
    pub walked: i64,
}

/// The dry run's samples; a key a foreign key of `refs` still references is not among those it
/// would evict.
pub(crate) async fn preview_sample(
    client: &Session,
    table: &KeyTable,
    refs: &References,
    cap: i64,
    min_age: Option<f64>,
    size: i64,
) -> Result<Sample> {
    let rows = client
        .query(
            &refs.fill(&table.sql(PREVIEW_SAMPLE_SQL), &table.quoted),
            &[p(&cap), p(&min_age), p(&size)],
        )
        .await
        .context(Step::SampleEvicted)?;
    let mut sample = Sample {
        evict: Vec::new(),
        kept: Vec::new(),
        held_back: 0,
        walked: 0,
    };
    let has_tenant = table.profile.has_scope();
    for r in &rows {
        sample.held_back = r.try_get("held_back_count")?;
        sample.walked = r.try_get("walked")?;
        // NULL where a one-column scope holds NULL.
        let api_key_id: Option<String> = if has_tenant {
            r.try_get("api_key_id")?
        } else {
            None
        };
        let key = SampleKey {
            scope: table.profile.scope_of(api_key_id.as_deref()),
            api_key_id,
            key: r.try_get("key")?,
            expires_at: r.try_get("expires_at")?,
            created_at: r.try_get("created_at")?,
        };
        if r.try_get("held_back")? {
            sample.kept.push(key);
        } else {
            sample.evict.push(key);
        }
    }
    Ok(sample)
}

/// The generic plan of the first batch (the one evict runs), sized to `rows`, as EXPLAIN prints it.
/// Needs the DELETE privilege.
pub(crate) async fn explain_first_batch(
    client: &Session,
    table: &KeyTable,
    statements: &Statements,
    rows: i64,
    min_age: Option<f64>,
) -> Result<Vec<String>> {
    let start = None::<Timestamp>;
    let end: Option<Timestamp> = client
        .query_one(&table.sql(CLAIM_SQL), &[p(&start), p(&rows)])
        .await
        .context(Step::SizeFirstBatch)?
        .try_get("range_end")?;
    let end = end.map_or_else(|| "NULL".to_owned(), literal);
    let min_age = min_age.map_or_else(|| "NULL".to_owned(), |d| format!("{d}"));
    explain_generic(
        client,
        statements.delete_sql(),
        &format!("NULL, {end}, {min_age}"),
    )
    .await
}

/// The generic plan of the walk's first page (the one evict runs), of `rows` index entries, as
/// EXPLAIN prints it. Needs the DELETE privilege.
pub(crate) async fn explain_first_page(
    client: &Session,
    walk: &Walk,
    rows: i64,
    min_age: Option<f64>,
) -> Result<Vec<String>> {
    let min_age = min_age.map_or_else(|| "NULL".to_owned(), |d| format!("{d}"));
    explain_generic(client, walk.sql(false), &format!("{rows}, {min_age}")).await
}

/// The generic plan of `sql` run with `args` (typed values idemctl wrote, never user text).
async fn explain_generic(client: &Session, sql: &str, args: &str) -> Result<Vec<String>> {
    // EXPLAIN of a parameterised statement shows a custom plan; PREPARE + EXPLAIN EXECUTE under
    // force_generic_plan shows the one evict uses.
    // One transaction, one message: the prepared statement is gone before the server session is
    // anyone else's (behind a transaction pooler, a failed transaction keeps the server session
    // until it is rolled back, in the same message as the DEALLOCATE).
    let script = format!(
        "SET LOCAL plan_cache_mode = force_generic_plan; PREPARE idemctl_evict_batch AS {sql}; \
         EXPLAIN EXECUTE idemctl_evict_batch({args}); \
         DEALLOCATE idemctl_evict_batch"
    );
    client.begin("BEGIN").await.context(Step::ExplainBatch)?;
    let messages = match client.simple_query(&script).await {
        Ok(messages) => {
            client.commit().await.context(Step::ExplainBatch)?;
            messages
        }
        Err(e) => {
            client.rollback_then("DEALLOCATE idemctl_evict_batch").await;
            return Err(e.context(Step::ExplainBatch));
        }
    };
    Ok(messages
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .collect())
}

/// A time as a `timestamptz` literal takes it: `-infinity`, `infinity`, or the instant in UTC to
/// the microsecond (a year before 1 AD written BC, as the server reads it).
fn literal(t: Timestamp) -> String {
    let t = match t {
        Timestamp::At(t) => t.to_offset(time::UtcOffset::UTC),
        infinity => return format!("'{}'::timestamptz", infinity.to_the_second()),
    };
    let (year, era) = match t.year() {
        y if y < 1 => (1 - y, " BC"),
        y => (y, ""),
    };
    format!(
        "'{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}+00{era}'::timestamptz",
        year,
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// The planner's estimate of the expired completed rows (the progress bar, and stats beyond its
/// counting cap). The plan is a scan of the whole table, costly enough for JIT, which EXPLAIN
/// would compile for nothing (tens to hundreds of ms on a large table): off in its transaction.
pub(crate) async fn estimate_backlog(client: &Session, table: &KeyTable) -> Result<u64> {
    client.begin("BEGIN READ ONLY").await?;
    let planned = async {
        client.batch_execute(JIT_OFF_SQL).await?;
        client.query_one(&table.sql(ESTIMATE_SQL), &[]).await
    }
    .await;
    let row = match planned {
        Ok(row) => {
            client.commit().await?;
            row
        }
        Err(e) => {
            let _ = client.rollback().await;
            return Err(e);
        }
    };
    let plan: serde_json::Value = row.try_get(0)?;
    Ok(plan[0]["Plan"]["Plan Rows"].as_f64().unwrap_or(0.0) as u64)
}

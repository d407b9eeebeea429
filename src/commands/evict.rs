//! `idemctl evict`: delete expired completed keys in short, bounded, index-backed batches that
//! never wait on a live request for more than a few milliseconds.
//!
//! The loop: take the table's advisory lock; then batch after batch, each its own transaction,
//! walk the expiry index forward (keyset paging) with a single-pass range DELETE under a very short
//! lock_timeout; when a live request holds a row in the range, redo that range with
//! `FOR UPDATE SKIP LOCKED`. Stop when drained, out of budget, interrupted, or on error.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde::Serialize;
use time::OffsetDateTime;

use crate::cli::{EvictArgs, OutputFormat};
use crate::context::Context;
use crate::db::KeyTable;
use crate::db::lock::{self, LockClass};
use crate::db::queries::{self, Capped};
use crate::exit::{Exit, fail};
use crate::output::prometheus::{Kind, Metrics, write_atomic};
use crate::output::{Doc, human_secs, rfc3339};
use crate::progress::Progress;

/// The range statement.
pub const BATCH_SQL: &str = include_str!("../../sql/evict_batch.sql");
/// The skip-locked statement for contended ranges and runs of equal expiry times.
pub const SKIP_LOCKED_SQL: &str = include_str!("../../sql/evict_batch_skip_locked.sql");
/// The dry-run preview.
pub const PREVIEW_SQL: &str = include_str!("../../sql/evict_preview.sql");

/// How long a batch may wait for a row lock before it falls back to skipping locked rows.
pub const ROW_LOCK_WAIT: Duration = Duration::from_millis(5);
/// Counts in the summary and preview stop here.
const COUNT_CAP: i64 = 100_000;
/// Consecutive batches that could not lock the table before the run gives up.
const MAX_TABLE_LOCK_RETRIES: u32 = 5;

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    Drained,
    TimeBudget,
    RowBudget,
    BatchBudget,
    Interrupted,
    Error,
}

impl EndReason {
    const ALL: [EndReason; 6] = [
        EndReason::Drained,
        EndReason::TimeBudget,
        EndReason::RowBudget,
        EndReason::BatchBudget,
        EndReason::Interrupted,
        EndReason::Error,
    ];

    fn as_str(self) -> &'static str {
        match self {
            EndReason::Drained => "drained",
            EndReason::TimeBudget => "time_budget",
            EndReason::RowBudget => "row_budget",
            EndReason::BatchBudget => "batch_budget",
            EndReason::Interrupted => "interrupted",
            EndReason::Error => "error",
        }
    }
}

/// The run's summary (also the JSON document).
#[derive(Debug, Clone, Serialize)]
pub struct EvictReport {
    pub table: String,
    pub end_reason: EndReason,
    pub rows_evicted: u64,
    pub batches: u64,
    pub elapsed_seconds: f64,
    pub rows_per_second: f64,
    /// Expired completed rows left because a live request held them.
    pub skipped_locked: u64,
    /// Expired completed rows left because they are younger than --min-age.
    pub skipped_min_age: u64,
    /// Batches that fell back to skipping locked rows.
    pub lock_fallbacks: u64,
    /// Expired rows still in_progress (reclaim's job), counted after the run.
    pub expired_in_progress_left: Option<Capped>,
    /// Expired completed rows still present after the run.
    pub backlog_left: Option<Capped>,
    pub batch_ms_p50: f64,
    pub batch_ms_p99: f64,
    pub batch_ms_max: f64,
    /// The error that ended the run, if any.
    pub error: Option<String>,
}

/// Run `evict`.
pub async fn run(ctx: &Context, args: &EvictArgs) -> Result<Exit> {
    let client = ctx.client().await?;
    let table = ctx.table(&client).await?;
    table.require_columns()?;
    table.require_expiry_index()?;
    let privileges = table.privileges(&client).await?;
    if args.dry_run {
        privileges.require(&table, "evict --dry-run", &[("SELECT", privileges.select)])?;
        return dry_run(ctx, &client, &table, args).await;
    }
    // DELETE reads the rows it deletes (SELECT), and skipping rows a live request holds takes row
    // locks, which PostgreSQL grants only with UPDATE on at least one column.
    privileges.require(
        &table,
        "evict",
        &[
            ("SELECT", privileges.select),
            ("DELETE", privileges.delete),
            ("UPDATE (expires_at)", privileges.lock_rows),
        ],
    )?;
    lock::acquire(&client, &table, LockClass::Evict).await?;
    client
        .batch_execute(&format!(
            "SET lock_timeout = '{}ms'",
            ROW_LOCK_WAIT.as_millis()
        ))
        .await
        .context("failed to set the evict session's lock_timeout")?;
    ctx.cancel.install()?;
    let started_at = OffsetDateTime::now_utc();
    let mut run = Run::new(ctx, &table, args);
    let outcome = run.drive(&client).await;
    let report = run.finish(&client, outcome).await;
    if let Some(path) = &args.textfile {
        write_textfile(path, &report, started_at)?;
    }
    print_report(ctx, &report)?;
    match (report.end_reason, &report.error) {
        (EndReason::Interrupted, _) => Ok(Exit::Interrupted),
        (EndReason::Error, _) => Err(run
            .error
            .take()
            .unwrap_or_else(|| fail(Exit::Failure, "eviction failed"))),
        _ => Ok(Exit::Success),
    }
}

/// State of one run.
struct Run<'a> {
    ctx: &'a Context,
    table: &'a KeyTable,
    args: &'a EvictArgs,
    batch_sql: String,
    skip_sql: String,
    start: Instant,
    rows: u64,
    batches: u64,
    skipped_locked: u64,
    skipped_min_age: u64,
    lock_fallbacks: u64,
    latencies_ms: Vec<f64>,
    progress: Progress,
    error: Option<anyhow::Error>,
}

/// What one batch did.
struct Batch {
    deleted: u64,
    /// Where the next batch starts; None when nothing expired lies further on.
    next: Option<OffsetDateTime>,
}

impl<'a> Run<'a> {
    fn new(ctx: &'a Context, table: &'a KeyTable, args: &'a EvictArgs) -> Run<'a> {
        Run {
            ctx,
            table,
            args,
            batch_sql: table.sql(BATCH_SQL),
            skip_sql: table.sql(SKIP_LOCKED_SQL),
            start: Instant::now(),
            rows: 0,
            batches: 0,
            skipped_locked: 0,
            skipped_min_age: 0,
            lock_fallbacks: 0,
            latencies_ms: Vec::new(),
            progress: Progress::hidden(),
            error: None,
        }
    }

    fn min_age(&self) -> Option<f64> {
        self.args.min_age.map(|d| d.as_secs_f64())
    }

    fn budget_reason(&self) -> Option<EndReason> {
        if self.ctx.cancel.requested() {
            return Some(EndReason::Interrupted);
        }
        if self
            .args
            .max_runtime
            .is_some_and(|m| self.start.elapsed() >= m)
        {
            return Some(EndReason::TimeBudget);
        }
        if self.args.max_rows.is_some_and(|m| self.rows >= m) {
            return Some(EndReason::RowBudget);
        }
        if self.args.max_batches.is_some_and(|m| self.batches >= m) {
            return Some(EndReason::BatchBudget);
        }
        None
    }

    /// The batch size for the next batch: never more than the rows left in the row budget.
    fn limit(&self) -> i64 {
        let size = u64::from(self.args.batch_size);
        let left = self
            .args
            .max_rows
            .map_or(size, |m| m.saturating_sub(self.rows).min(size));
        i64::try_from(left.max(1)).unwrap_or(i64::MAX)
    }

    async fn drive(&mut self, client: &deadpool_postgres::Object) -> Result<EndReason> {
        if self.ctx.output.progress_allowed() {
            let estimate = estimate_backlog(client, self.table).await.unwrap_or(0);
            self.progress = Progress::rows(estimate);
        }
        let mut start: Option<OffsetDateTime> = None;
        loop {
            if let Some(reason) = self.budget_reason() {
                return Ok(reason);
            }
            let batch = self.batch(client, start).await?;
            self.progress.set(self.rows, self.skipped_locked);
            match batch.next {
                None => return Ok(EndReason::Drained),
                Some(next) => start = Some(next),
            }
            if !self.args.pause.is_zero() && self.budget_reason().is_none() {
                tokio::select! {
                    _ = tokio::time::sleep(self.args.pause) => {},
                    _ = self.ctx.cancel.wait() => {},
                }
            }
        }
    }

    /// One batch from `start`: the range statement, its skip-locked fallback, or a run of ties.
    async fn batch(
        &mut self,
        client: &deadpool_postgres::Object,
        start: Option<OffsetDateTime>,
    ) -> Result<Batch> {
        let limit = self.limit();
        let t0 = Instant::now();
        let mut table_lock_retries = 0;
        let outcome = loop {
            match self.range_batch(client, start, limit).await {
                Ok(b) => break b,
                Err(e) if is_lock_timeout(&e) => {
                    // A live request holds a row in this range (or DDL holds the table): skip it.
                    match self.skip_locked_range(client, start, limit).await {
                        Ok(b) => break b,
                        Err(e2)
                            if is_lock_timeout(&e2)
                                && table_lock_retries < MAX_TABLE_LOCK_RETRIES =>
                        {
                            table_lock_retries += 1;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(e2) => return Err(self.batch_error(e2)),
                    }
                }
                Err(e) => return Err(self.batch_error(e)),
            }
        };
        self.latencies_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        self.batches += 1;
        self.rows += outcome.deleted;
        Ok(outcome)
    }

    fn batch_error(&self, e: anyhow::Error) -> anyhow::Error {
        let n = self.batches + 1;
        let closed = e.chain().any(|c| {
            c.downcast_ref::<tokio_postgres::Error>()
                .is_some_and(tokio_postgres::Error::is_closed)
        });
        if closed {
            e.context(format!(
                "lost the connection during batch {n}; the server rolled that batch back and the next run continues"
            ))
        } else {
            e.context(format!("batch {n} failed and was rolled back"))
        }
    }

    /// The single-pass range DELETE, in its own transaction with a very short lock_timeout.
    async fn range_batch(
        &mut self,
        client: &deadpool_postgres::Object,
        start: Option<OffsetDateTime>,
        limit: i64,
    ) -> Result<Batch> {
        let min_age = self.min_age();
        let row = exec_batch(
            client,
            self.ctx,
            &self.batch_sql,
            &[&start, &limit, &min_age],
        )
        .await?;
        let deleted = u64::try_from(row.get::<_, i64>("deleted")).unwrap_or(0);
        let range_end: Option<OffsetDateTime> = row.get("range_end");
        self.skipped_min_age += u64::try_from(row.get::<_, i64>("too_young")).unwrap_or(0);
        match range_end {
            // More rows than a batch share the start's expires_at: clear that run of ties first.
            Some(end) if Some(end) == start || (start.is_none() && deleted == 0) => {
                self.tie_run(client, end, limit).await
            }
            next => Ok(Batch { deleted, next }),
        }
    }

    /// The range from `start` redone with FOR UPDATE SKIP LOCKED, up to the bound the range
    /// statement would have used (recomputed: the failed statement returned nothing).
    async fn skip_locked_range(
        &mut self,
        client: &deadpool_postgres::Object,
        start: Option<OffsetDateTime>,
        limit: i64,
    ) -> Result<Batch> {
        self.lock_fallbacks += 1;
        let end = range_end(client, self.table, start, limit).await?;
        let last = end.map(|e| e - time::Duration::microseconds(1));
        let (deleted, present) = self.skip_locked(client, start, last, limit).await?;
        self.skipped_locked += present.saturating_sub(deleted);
        match end {
            Some(e) if Some(e) == start => self.tie_run(client, e, limit).await,
            next => Ok(Batch { deleted, next }),
        }
    }

    /// Delete a run of rows that all expire at `at` (more than one batch of them), batch by batch
    /// with SKIP LOCKED, then continue after it.
    async fn tie_run(
        &mut self,
        client: &deadpool_postgres::Object,
        at: OffsetDateTime,
        limit: i64,
    ) -> Result<Batch> {
        let mut total = 0;
        loop {
            let (deleted, present) = self.skip_locked(client, Some(at), Some(at), limit).await?;
            total += deleted;
            if present < u64::try_from(limit).unwrap_or(u64::MAX) || deleted == 0 {
                self.skipped_locked += present.saturating_sub(deleted);
                break;
            }
            if self.budget_reason().is_some() {
                // Resume at the same instant next time; the rest of the run is left to it.
                return Ok(Batch {
                    deleted: total,
                    next: Some(at),
                });
            }
        }
        Ok(Batch {
            deleted: total,
            next: Some(at + time::Duration::microseconds(1)),
        })
    }

    async fn skip_locked(
        &self,
        client: &deadpool_postgres::Object,
        first: Option<OffsetDateTime>,
        last: Option<OffsetDateTime>,
        limit: i64,
    ) -> Result<(u64, u64)> {
        let min_age = self.min_age();
        let row = exec_batch(
            client,
            self.ctx,
            &self.skip_sql,
            &[&first, &last, &limit, &min_age],
        )
        .await?;
        let deleted = u64::try_from(row.get::<_, i64>("deleted")).unwrap_or(0);
        let present = u64::try_from(row.get::<_, i64>("present")).unwrap_or(0);
        Ok((deleted, present))
    }

    async fn finish(
        &mut self,
        client: &deadpool_postgres::Object,
        outcome: Result<EndReason>,
    ) -> EvictReport {
        self.progress.finish();
        let end_reason = match outcome {
            Ok(r) => r,
            Err(e) => {
                self.error = Some(e);
                EndReason::Error
            }
        };
        let connected = !client.is_closed();
        let (in_progress_left, backlog_left) = if connected && end_reason != EndReason::Error {
            (
                queries::expired_in_progress(client, self.table, COUNT_CAP)
                    .await
                    .ok(),
                queries::expired_backlog(client, self.table, COUNT_CAP)
                    .await
                    .ok(),
            )
        } else {
            (None, None)
        };
        let elapsed = self.start.elapsed().as_secs_f64();
        let (p50, p99, max) = percentiles(&mut self.latencies_ms);
        EvictReport {
            table: self.table.display(),
            end_reason,
            rows_evicted: self.rows,
            batches: self.batches,
            elapsed_seconds: elapsed,
            rows_per_second: if elapsed > 0.0 {
                self.rows as f64 / elapsed
            } else {
                0.0
            },
            skipped_locked: self.skipped_locked,
            skipped_min_age: self.skipped_min_age,
            lock_fallbacks: self.lock_fallbacks,
            expired_in_progress_left: in_progress_left,
            backlog_left,
            batch_ms_p50: p50,
            batch_ms_p99: p99,
            batch_ms_max: max,
            error: self.error.as_ref().map(|e| format!("{e:#}")),
        }
    }
}

/// Run one batch statement. The evict session runs in autocommit with a lock_timeout of
/// [`ROW_LOCK_WAIT`], so each statement is its own short transaction: the server commits it, or
/// rolls it back on any error. A client-side deadline (statement_timeout plus a margin) guards
/// against a dead network path, which the server-side timeout cannot see.
async fn exec_batch(
    client: &deadpool_postgres::Object,
    ctx: &Context,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<tokio_postgres::Row> {
    let deadline = ctx.global.statement_timeout + Duration::from_secs(10);
    let work = async {
        let stmt = client.prepare_cached(sql).await?;
        client.query_one(&stmt, params).await
    };
    match tokio::time::timeout(deadline, work).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(fail(
            Exit::Failure,
            format!(
                "no answer from the server within {}; giving up on this connection",
                human_secs(deadline.as_secs_f64())
            ),
        )),
    }
}

fn is_lock_timeout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::code)
            .is_some_and(|code| *code == tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
    })
}

/// Where a range batch from `start` would end (the (limit + 1)-th expired row's expires_at).
async fn range_end(
    client: &tokio_postgres::Client,
    table: &KeyTable,
    start: Option<OffsetDateTime>,
    limit: i64,
) -> Result<Option<OffsetDateTime>> {
    let sql = table.sql(include_str!("../../sql/evict_range_end.sql"));
    let row = client
        .query_one(&sql, &[&start, &limit])
        .await
        .context("failed to find the end of the batch range")?;
    Ok(row.get("range_end"))
}

/// The planner's estimate of the expired completed rows, for the progress bar only.
async fn estimate_backlog(client: &tokio_postgres::Client, table: &KeyTable) -> Result<u64> {
    let sql = format!(
        "EXPLAIN (FORMAT JSON) {}",
        table.sql("SELECT 1 FROM {table} WHERE expires_at < now() AND state = 'completed'")
    );
    let row = client.query_one(&sql, &[]).await?;
    let plan: serde_json::Value = row.get(0);
    Ok(plan[0]["Plan"]["Plan Rows"].as_f64().unwrap_or(0.0) as u64)
}

fn percentiles(v: &mut [f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), v[v.len() - 1])
}

async fn dry_run(
    ctx: &Context,
    client: &deadpool_postgres::Object,
    table: &KeyTable,
    args: &EvictArgs,
) -> Result<Exit> {
    let min_age = args.min_age.map(|d| d.as_secs_f64());
    let row = client
        .query_one(&table.sql(PREVIEW_SQL), &[&COUNT_CAP, &min_age])
        .await
        .context("failed to preview the eviction")?;
    let count = Capped::from_raw(row.get("n"), COUNT_CAP);
    let oldest: Option<OffsetDateTime> = row.get("oldest");
    let newest: Option<OffsetDateTime> = row.get("newest");
    let statement = table.sql(BATCH_SQL);
    let limit = i64::from(args.batch_size);
    let plan_rows = client
        .query(
            &format!("EXPLAIN {statement}"),
            &[&None::<OffsetDateTime>, &limit, &min_age],
        )
        .await
        .context("failed to explain the batch statement")?;
    let plan: Vec<String> = plan_rows.iter().map(|r| r.get::<_, String>(0)).collect();
    let json = serde_json::json!({
        "table": table.display(),
        "dry_run": true,
        "would_evict": count,
        "oldest_candidate": oldest.map(rfc3339),
        "newest_candidate": newest.map(rfc3339),
        "batch_size": args.batch_size,
        "statement": statement,
        "plan": plan,
    });
    let mut doc = Doc::default();
    doc.fields(
        None,
        vec![
            ("table".into(), table.display()),
            ("would evict".into(), count.to_string()),
            (
                "oldest candidate".into(),
                oldest.map_or_else(|| "-".into(), rfc3339),
            ),
            (
                "newest candidate".into(),
                newest.map_or_else(|| "-".into(), rfc3339),
            ),
            ("batch size".into(), args.batch_size.to_string()),
        ],
    );
    doc.text(format!("statement (per batch, $1 = previous batch's end, $2 = batch size, $3 = min-age seconds):\n{statement}"));
    doc.text(format!("plan:\n{}", plan.join("\n")));
    ctx.output.emit(&doc, &json)?;
    Ok(Exit::Success)
}

fn print_report(ctx: &Context, r: &EvictReport) -> Result<()> {
    let explicit = ctx.global.output != OutputFormat::Auto;
    let json = ctx.output.format == OutputFormat::Json;
    // Under cron (no terminal) a successful run prints nothing: cron mails any output.
    if !json && (ctx.global.quiet || (!explicit && !ctx.output.stdout_tty)) {
        return Ok(());
    }
    ctx.output.emit(&doc(r), &serde_json::to_value(r)?)?;
    Ok(())
}

fn doc(r: &EvictReport) -> Doc {
    let mut d = Doc::default();
    let capped = |c: &Option<Capped>| c.map_or_else(|| "-".to_owned(), |c| c.to_string());
    d.fields(
        None,
        vec![
            ("table".into(), r.table.clone()),
            ("end reason".into(), r.end_reason.as_str().into()),
            ("rows evicted".into(), r.rows_evicted.to_string()),
            ("batches".into(), r.batches.to_string()),
            ("elapsed".into(), format!("{:.2}s", r.elapsed_seconds)),
            ("rate".into(), format!("{:.0} rows/s", r.rows_per_second)),
            (
                "skipped (locked by live requests)".into(),
                r.skipped_locked.to_string(),
            ),
            (
                "skipped (younger than --min-age)".into(),
                r.skipped_min_age.to_string(),
            ),
            (
                "expired in_progress left (see reclaim)".into(),
                capped(&r.expired_in_progress_left),
            ),
            ("expired backlog left".into(), capped(&r.backlog_left)),
            (
                "batch latency p50 / p99 / max".into(),
                format!(
                    "{:.1} / {:.1} / {:.1} ms",
                    r.batch_ms_p50, r.batch_ms_p99, r.batch_ms_max
                ),
            ),
        ],
    );
    d
}

fn write_textfile(path: &std::path::Path, r: &EvictReport, started: OffsetDateTime) -> Result<()> {
    let now = OffsetDateTime::now_utc().unix_timestamp() as f64;
    let success = !matches!(r.end_reason, EndReason::Error | EndReason::Interrupted);
    let last_success = if success {
        Some(now)
    } else {
        previous_success(path)
    };
    let mut m = Metrics::default();
    let l: &[(&str, &str)] = &[("table", &r.table)];
    let g = Kind::Gauge;
    m.add(
        "idemctl_evict_last_run_timestamp_seconds",
        "Unix time the last evict run ended.",
        g,
        l,
        now,
    );
    m.add(
        "idemctl_evict_last_run_start_timestamp_seconds",
        "Unix time the last evict run started.",
        g,
        l,
        started.unix_timestamp() as f64,
    );
    if let Some(t) = last_success {
        m.add(
            "idemctl_evict_last_success_timestamp_seconds",
            "Unix time the last successful evict run ended.",
            g,
            l,
            t,
        );
    }
    m.add(
        "idemctl_evict_last_run_success",
        "1 if the last evict run succeeded, else 0.",
        g,
        l,
        if success { 1.0 } else { 0.0 },
    );
    m.add(
        "idemctl_evict_duration_seconds",
        "Wall time of the last evict run.",
        g,
        l,
        r.elapsed_seconds,
    );
    m.add(
        "idemctl_evict_rows_evicted",
        "Keys deleted by the last evict run.",
        g,
        l,
        r.rows_evicted as f64,
    );
    m.add(
        "idemctl_evict_rows_skipped_locked",
        "Expired keys the last run left because live requests held them.",
        g,
        l,
        r.skipped_locked as f64,
    );
    if let Some(b) = r.backlog_left {
        m.add(
            "idemctl_evict_backlog_left_keys",
            "Expired completed keys left after the last run (exact up to the cap).",
            g,
            l,
            b.count as f64,
        );
    }
    if let Some(ip) = r.expired_in_progress_left {
        m.add(
            "idemctl_evict_expired_in_progress_keys",
            "Expired keys still in_progress after the last run (reclaim needed).",
            g,
            l,
            ip.count as f64,
        );
    }
    let mut reasons = String::new();
    for reason in EndReason::ALL {
        let v = if reason == r.end_reason { 1 } else { 0 };
        reasons.push_str(&format!(
            "idemctl_evict_end_reason{{table=\"{}\",reason=\"{}\"}} {v}\n",
            crate::output::prometheus::escape_label(&r.table),
            reason.as_str()
        ));
    }
    let text = format!(
        "{}# HELP idemctl_evict_end_reason Why the last evict run ended (1 for the reason that applied).\n# TYPE idemctl_evict_end_reason gauge\n{reasons}",
        m.text()
    );
    write_atomic(path, &text)
}

/// Keep the last-success timestamp across a failed run by reading it back from the previous file.
fn previous_success(path: &std::path::Path) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with("idemctl_evict_last_success_timestamp_seconds"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

//! evict on a table without an index on its expiry column (a table as an ORM's migrations ship
//! it): the primary key (or another unique index) is walked in pages by keyset pagination, each
//! page reading a bounded number of index entries and deleting the expired finished rows among
//! them, skipping rows a live transaction holds. Where the walk follows age (a key from a
//! sequence), it stops at the first page in which nothing has expired. The report counts the
//! entries examined beside the rows deleted.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::{EndReason, EvictReport, print_report};
use crate::cli::EvictArgs;
use crate::context::Context;
use crate::db::evict::{Page, Walk};
use crate::db::{KeyTable, Session};
use crate::exit::{Exit, fail};

/// Index entries a page reads when --batch-size does not say.
const PAGE: u32 = 2_000;

/// Walk the table's unique index, page after page, until its end (or an early stop, a budget, a
/// signal).
pub(super) async fn run(
    ctx: &Context,
    args: &EvictArgs,
    client: &Session,
    table: &KeyTable,
    started: Instant,
) -> Result<Exit> {
    let Some(index) = table.walk_index() else {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::nothing_to_walk(table, &table.expiry_index_fix()),
        ));
    };
    // What the walk does not do yet: refused, before anything is deleted, naming the index that
    // lets evict do it.
    let unsupported = [
        ("--min-age", args.min_age.is_some()),
        ("--max-rate", args.max_rate.is_some()),
        ("--max-wal-rate", args.max_wal_rate.is_some()),
        ("--max-replica-lag", args.max_replica_lag.is_some()),
        ("--max-batches", args.max_batches.is_some()),
    ];
    if let Some((flag, _)) = unsupported.iter().find(|(_, given)| *given) {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::walk_refuses(table, flag, &table.expiry_index_fix()),
        ));
    }
    // A key a NO ACTION / RESTRICT foreign key still references would fail the page's DELETE:
    // the batches through the expiry index leave such keys out; the walk does not.
    let keys = crate::db::queries::referencing_keys(client, table).await?;
    if keys.iter().any(|k| k.blocks()) {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::walk_refuses_blocking_key(table, &table.expiry_index_fix()),
        ));
    }
    let walk = Walk::new(table, index);
    let follows_age = table.walk_follows_age(index);
    let size = args.batch_size.unwrap_or(PAGE);
    ctx.output.note(&crate::output::evict::walking(
        table,
        &walk.index,
        size,
        follows_age,
        &table.expiry_index_fix(),
    ));
    let deadline = ctx.answer_deadline();
    let budget_end = args.max_runtime.map(|m| started + m);
    let mut cursor: Option<Vec<String>> = None;
    let mut totals = Totals::default();
    let end_reason = loop {
        if ctx.cancel.requested() {
            break EndReason::Interrupted;
        }
        if budget_end.is_some_and(|end| Instant::now() >= end) {
            break EndReason::TimeBudget;
        }
        if args.max_rows.is_some_and(|max| totals.deleted >= max) {
            break EndReason::RowBudget;
        }
        let t0 = Instant::now();
        let page = walk
            .page(client, deadline, i64::from(size), cursor.as_deref())
            .await?;
        let took = t0.elapsed();
        totals.add(&page, took);
        let stop = page.examined < u64::from(size) || (follows_age && page.none_past);
        if stop || page.last_key.is_none() {
            totals.stopped_early = follows_age && page.none_past && page.examined > 0;
            break EndReason::Drained;
        }
        cursor = page.last_key;
        // Pages share the server with the API: unless --catch-up, pause four times as long as
        // the page took (a fifth of the time working).
        if !args.catch_up {
            tokio::time::sleep(took * 4).await;
        }
    };
    let expiry = super::expiry_of(table, &ctx.global);
    let report = totals.report(table, expiry, &walk.index, end_reason, started.elapsed());
    ctx.metrics
        .finish(super::run_end(&report), super::metrics(&report))
        .await?;
    print_report(ctx, &report)?;
    Ok(match end_reason {
        EndReason::Interrupted => Exit::Interrupted,
        _ => Exit::Success,
    })
}

/// What the walk did so far.
#[derive(Default)]
struct Totals {
    pages: u64,
    examined: u64,
    expired: u64,
    deleted: u64,
    latencies_ms: Vec<f64>,
    stopped_early: bool,
}

impl Totals {
    fn add(&mut self, page: &Page, took: Duration) {
        self.pages += 1;
        self.examined += page.examined;
        self.expired += page.expired;
        self.deleted += page.deleted;
        self.latencies_ms.push(took.as_secs_f64() * 1000.0);
    }

    fn report(
        mut self,
        table: &KeyTable,
        expiry: super::Expiry,
        index: &str,
        end_reason: EndReason,
        elapsed: Duration,
    ) -> EvictReport {
        let mut report = super::empty_report(table, expiry, end_reason, elapsed.as_secs_f64());
        let (p50, p99, max) = super::percentiles(&mut self.latencies_ms);
        report.rows_evicted = self.deleted;
        report.batches = self.pages;
        report.rows_per_second = if elapsed.as_secs_f64() > 0.0 {
            self.deleted as f64 / elapsed.as_secs_f64()
        } else {
            0.0
        };
        report.skipped_locked = self.expired - self.deleted;
        report.batch_ms_p50 = p50;
        report.batch_ms_p99 = p99;
        report.batch_ms_max = max;
        report.walk = Some(super::WalkReport {
            index: index.to_owned(),
            rows_examined: self.examined,
            stopped_early: self.stopped_early,
        });
        report
    }
}

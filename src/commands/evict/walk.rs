//! evict on a table without an index on its expiry column (a table as an ORM's migrations ship
//! it): each batch is a page of the primary key (or another unique index), walked in order by
//! keyset pagination, reading a bounded number of index entries and deleting the expired finished
//! rows among them, skipping rows a live transaction holds. Where the walk follows age (a key from
//! a sequence), it stops at the first page in which nothing has expired. A page is one kind of
//! the batches the workers run (see `worker`): budgets, rate caps, replica lag and the pace hold
//! for it as for a range of the expiry index. The report counts the entries examined beside the
//! rows deleted. The dry run reads the same pages with a statement that changes nothing.

use std::time::Instant;

use anyhow::Result;

use super::{DryRunReport, EndReason, SAMPLE_SIZE};
use crate::cli::{BatchSizing, EvictArgs};
use crate::context::Context;
use crate::db::evict::Walk;
use crate::db::{KeyTable, Session};
use crate::exit::{Exit, fail};
use crate::report::evict::WalkPreview;
use crate::report::rows::{Capped, SampleKey};

/// Index entries a page reads when --batch-size does not say.
const PAGE: u32 = crate::domain::WALK_PAGE;

/// The pages' size: --batch-size, else [`PAGE`] (a page's cost is its entries, not its deletions,
/// so its size does not follow the statement time).
pub(super) fn sizing(args: &EvictArgs) -> BatchSizing {
    BatchSizing::Fixed(args.batch_size.unwrap_or(PAGE))
}

/// The walk of `table`, checked before any change: a unique index to walk, no NO ACTION / RESTRICT foreign key referencing the table (a referenced key would fail
/// the page's DELETE: the batches through the expiry index leave such keys out; a page does not).
pub(super) async fn require(client: &Session, table: &KeyTable) -> Result<Walk> {
    let Some(index) = table.walk_index() else {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::nothing_to_walk(&table.shown(), &table.expiry_index_fix()),
        ));
    };
    let keys = crate::db::queries::referencing_keys(client, table).await?;
    if keys.iter().any(|k| k.blocks()) {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::walk_refuses(
                &table.shown(),
                crate::output::evict::WalkRefusal::BlockingKey,
                &table.expiry_index_fix(),
            ),
        ));
    }
    Ok(Walk::new(table, index))
}

/// Say once per run that it walks, and what the expiry index would save.
pub(super) fn say(ctx: &Context, args: &EvictArgs, table: &KeyTable, walk: &Walk) {
    ctx.output.note(&crate::output::evict::walking(
        &table.shown(),
        &walk.index,
        args.batch_size.unwrap_or(PAGE),
        walk.follows_age,
        &table.expiry_index_fix(),
    ));
}

/// What the dry run's walk read: the pages a run would take and what they would delete.
struct Previewed {
    walk: WalkPreview,
    would_evict: u64,
    too_young: u64,
    oldest: Option<crate::report::timestamp::Timestamp>,
    newest: Option<crate::report::timestamp::Timestamp>,
    evict: Vec<SampleKey>,
    kept: Vec<SampleKey>,
}

/// `evict --dry-run` on a table without an expiry index: every page a run with these flags would
/// walk, read with the read-only page statement (no row lock, no DELETE), in the same bounded
/// pages and under the same budgets, counting what the run would delete. The statement shown is
/// the run's; its plan, when the role may delete.
pub(super) async fn dry_run(
    ctx: &Context,
    args: &EvictArgs,
    client: &Session,
    table: &KeyTable,
    can_delete: bool,
    sharded: bool,
) -> Result<DryRunReport> {
    let walk = require(client, table).await?;
    let min_age = args.min_age.map(|d| d.as_secs_f64());
    let read = preview(ctx, args, client, &walk).await?;
    let plan = if sharded {
        vec![crate::output::evict::page_plan_on_shards().to_owned()]
    } else if can_delete {
        let rows = i64::from(sizing(args).first());
        crate::db::evict::explain_first_page(client, &walk, rows, min_age).await?
    } else {
        vec![crate::output::evict::page_plan_needs_delete().to_owned()]
    };
    let replicas = match args.max_replica_lag {
        Some(_) => Some(crate::db::replication::replicas(client).await?),
        None => None,
    };
    // The partitions a run would drop before it walks (their bounds prove their keys expired);
    // the pages read here still count their rows.
    let drops = match args.drop_partitions {
        true => Some(super::partitions::preview(client, table, min_age).await?),
        false => None,
    };
    let held_back = i64::try_from(read.too_young).unwrap_or(i64::MAX);
    Ok(DryRunReport {
        table: table.qualified_name(),
        dry_run: true,
        expiry: super::expiry_of(table, &ctx.global),
        would_evict: Capped {
            count: i64::try_from(read.would_evict).unwrap_or(i64::MAX),
            at_least: false,
        },
        would_skip_referenced: None,
        oldest_candidate: read.oldest,
        newest_candidate: read.newest,
        batch_size: args.batch_size,
        batch_sizing: sizing(args).describe(),
        statement: walk.sql(false).to_owned(),
        plan,
        sample: read.evict,
        held_back_by_min_age: held_back,
        held_back_sample: read.kept,
        min_age: args.min_age.is_some(),
        walked: held_back,
        walked_all: false,
        rows_dropped_estimate: drops
            .as_ref()
            .map(super::partitions::DropReport::estimated_rows),
        would_drop_partitions: drops.as_ref().map(|d| d.dropped.clone()),
        partitions_kept: drops.map(|d| d.kept),
        replicas,
        notes: Vec::new(),
        walk: Some(read.walk),
    })
}

/// Read the pages a run would walk: pages of the run's size (less what --max-rows leaves), until
/// the index ends, a page where nothing has expired ends a walk that follows age, or a budget runs
/// out, as the run's claims decide.
async fn preview(
    ctx: &Context,
    args: &EvictArgs,
    client: &Session,
    walk: &Walk,
) -> Result<Previewed> {
    let size = u64::from(args.batch_size.unwrap_or(PAGE));
    let min_age = args.min_age.map(|d| d.as_secs_f64());
    let started = Instant::now();
    let mut read = Previewed {
        walk: WalkPreview {
            index: walk.index.clone(),
            page_size: args.batch_size.unwrap_or(PAGE),
            pages: 0,
            rows_examined: 0,
            stopped_early: false,
            end_reason: EndReason::Drained,
        },
        would_evict: 0,
        too_young: 0,
        oldest: None,
        newest: None,
        evict: Vec::new(),
        kept: Vec::new(),
    };
    let mut after: Option<Vec<String>> = None;
    loop {
        if let Some(reason) = budget_spent(args, started, &read) {
            read.walk.end_reason = reason;
            return Ok(read);
        }
        let left = args
            .max_rows
            .map_or(size, |m| m.saturating_sub(read.would_evict).min(size));
        let limit = i64::try_from(left.max(1)).unwrap_or(i64::MAX);
        let page = walk
            .preview_page(
                client,
                ctx.answer_deadline(),
                limit,
                min_age,
                SAMPLE_SIZE,
                after.as_deref(),
            )
            .await?;
        read.walk.pages += 1;
        read.walk.rows_examined += page.page.examined;
        read.would_evict += page.page.expired;
        read.too_young += page.page.too_young;
        read.oldest = earliest(read.oldest, page.oldest, false);
        read.newest = earliest(read.newest, page.newest, true);
        let room = |v: &Vec<SampleKey>| usize::try_from(SAMPLE_SIZE).unwrap_or(0) - v.len();
        let n = room(&read.evict).min(page.evict.len());
        read.evict.extend(page.evict.into_iter().take(n));
        let n = room(&read.kept).min(page.kept.len());
        read.kept.extend(page.kept.into_iter().take(n));
        let none_past = walk.follows_age && page.page.none_past;
        if page.page.examined < u64::try_from(limit).unwrap_or(0)
            || none_past
            || page.page.last_key.is_none()
        {
            read.walk.stopped_early = none_past && page.page.examined > 0;
            return Ok(read);
        }
        after = page.page.last_key;
    }
}

/// The budget that stops the walk before its next page, as it would stop the run's claims.
fn budget_spent(args: &EvictArgs, started: Instant, read: &Previewed) -> Option<EndReason> {
    if args.max_runtime.is_some_and(|m| started.elapsed() >= m) {
        return Some(EndReason::TimeBudget);
    }
    if args.max_rows.is_some_and(|m| read.would_evict >= m) {
        return Some(EndReason::RowBudget);
    }
    if args.max_batches.is_some_and(|m| read.walk.pages >= m) {
        return Some(EndReason::BatchBudget);
    }
    None
}

/// The earlier (or, `later`, the later) of two instants, either absent.
fn earliest(
    a: Option<crate::report::timestamp::Timestamp>,
    b: Option<crate::report::timestamp::Timestamp>,
    later: bool,
) -> Option<crate::report::timestamp::Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if later { a.max(b) } else { a.min(b) }),
        (a, b) => a.or(b),
    }
}

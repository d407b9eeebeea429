//! `idemctl evict`: delete expired completed keys in short, bounded, index-backed batches that
//! never wait on a live request for more than a few milliseconds.
//!
//! This module validates the run, takes the table's advisory lock, drops whole expired partitions
//! when asked (see `partitions`), starts the workers (see `worker`), which pause while replicas lag
//! when asked (see `replica`), and reports: a summary table or JSON, and Prometheus textfile metrics.

pub(crate) mod pace;
pub(crate) mod partitions;
pub(crate) mod placements;
pub(crate) mod rate;
pub(crate) mod replica;
pub(crate) mod vacuum;
mod walk;
mod worker;

use crate::db::Session;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use crate::cli::EvictArgs;
use crate::context::Context;
use crate::db::KeyTable;
use crate::db::batch;
use crate::db::evict as evict_db;
use crate::db::lock::{self, LockClass};
use crate::domain::CATCH_UP_BATCH_TIME;
use crate::exit::{Exit, fail};
use crate::metrics::RunEnd;
use crate::metrics::Series as S;
use crate::output::prometheus::Metrics;
use crate::progress::Progress;
pub(crate) use crate::report::evict::{DryRunReport, EvictReport, Expiry, WalkReport};
use crate::report::rows::{Capped, Layout};
pub(crate) use crate::report::run::EndReason;

/// How many keys of each kind the dry run lists.
const SAMPLE_SIZE: i64 = 10;

use placements::{COUNT_CAP, ROW_LOCK_WAIT};

/// The expiry rule `table` follows, given the TTL the flags, the environment or the config file
/// set.
pub(crate) fn expiry_of(table: &KeyTable, global: &crate::config::Plan) -> Expiry {
    let from = (!global.ttl_from.is_empty()).then(|| global.ttl_from.clone());
    match table.profile.ttl() {
        Some(ttl) => Expiry {
            column: table.profile.expiry_column().to_owned(),
            ttl_seconds: Some(ttl.as_secs_f64()),
            ttl_from: from,
            ttl_ignored_seconds: None,
        },
        None => {
            let ignored = global.ttl.filter(|_| !table.profile.expires_by_ttl());
            Expiry {
                column: table.profile.expiry_column().to_owned(),
                ttl_seconds: None,
                ttl_from: from.filter(|_| ignored.is_some()),
                ttl_ignored_seconds: ignored.map(|t| t.as_secs_f64()),
            }
        }
    }
}

/// Run `evict`.
pub(crate) async fn run(ctx: &Context, args: &EvictArgs) -> Result<Exit> {
    let client = ctx.session().await?;
    let table = ctx.table(&client).await?;
    // The table's layout, resolved once for the run (None off Citus).
    let layout = crate::db::citus::layout(&client, &table).await?;
    let privileges = require(ctx, args, &client, &table, layout.as_ref()).await?;
    if args.dry_run {
        // The walk's page locks the rows it deletes (FOR UPDATE), which explaining it checks too.
        let can_delete = match table.expiry_index() {
            Some(_) => privileges.delete,
            None => privileges.delete && privileges.lock_rows,
        };
        return dry_run(ctx, &client, &table, args, layout.as_ref(), can_delete).await;
    }
    let vacuum_targets = require_for_a_run(args, &client, &table, &privileges).await?;
    let walk = match table.expiry_index() {
        None => Some(walk::require(&client, &table).await?),
        Some(_) => None,
    };
    let scope = lock::acquire(&client, &table, LockClass::Evict).await?;
    if scope.pooler_note(ctx.route()) {
        ctx.output
            .note(&crate::output::db::pooler_note(LockClass::Evict.name()));
    }
    ctx.cancel
        .install()
        .context(crate::report::failure::Step::ListenForSigint)?;
    let started = Instant::now();
    // On Citus, once the shards have been checked (see evict_placements).
    if let Some(walk) = walk
        .as_ref()
        .filter(|_| !layout.as_ref().is_some_and(Layout::sharded))
    {
        walk::say(ctx, args, &table, walk);
    }
    let gate = args
        .max_replica_lag
        .map(|max| Arc::new(replica::ReplicaGate::new(max, args.max_replica_wait)));
    let sharded = layout.clone().filter(Layout::sharded);
    let walked = walk.as_ref().map(|w| w.index.clone());
    let on = Placements {
        client,
        table: &table,
        layout,
        walk,
    };
    let (outcome, drops) = evict_placements(ctx, args, on, started, &gate).await?;
    let waits = match &gate {
        Some(g) => g.totals().await,
        None => replica::WaitTotals::default(),
    };
    let ran = Ran {
        outcome,
        drops,
        waits,
        sharded,
        walked,
        started,
    };
    finish(ctx, args, &table, ran, vacuum_targets).await
}

/// What every run and dry run needs, checked before anything changes: the columns, the TTL, the
/// flags the table's layout supports, the replicas' visibility. Returns the role's privileges.
async fn require(
    ctx: &Context,
    args: &EvictArgs,
    client: &Session,
    table: &KeyTable,
    layout: Option<&Layout>,
) -> Result<crate::db::table::Privileges> {
    table.require_columns()?;
    table.require_ttl("evict")?;
    table.require_ttl_floor(
        "evict",
        args.force || ctx.global.short_ttl_allowed,
        &ctx.global.ttl_from,
    )?;
    let sharded = layout.filter(|l| l.sharded());
    // Without an index on expiry, evict walks a unique index instead, in its plain batches (on
    // Citus, each shard's copy on its worker; a dry run reads the same pages through the server it
    // connected to). Whole partitions are dropped first where their bounds prove their keys
    // expired; elsewhere that proof needs the index (on Citus, the flag is refused below whatever
    // the indexes).
    if let Some(key) = table.range_key().filter(|_| {
        table.expiry_index().is_none()
            && args.drop_partitions
            && sharded.is_none()
            && table.expiry_past_bound().is_none()
    }) {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::drop_partitions_unproven(
                &table.shown(),
                key.column(),
                &table.expiry_index_fix(),
            ),
        ));
    }
    let privileges = table.privileges(client).await?;
    if args.max_replica_lag.is_some() {
        replica::require_visibility(client).await?;
    }
    if let Some(layout) = sharded {
        placements::require_supported(args, table, layout)?;
    }
    if args.dry_run {
        privileges.require_for(table, "evict --dry-run", crate::db::table::Job::Read)?;
        if args.drop_partitions {
            partitions::require_layout(table, None)?;
        }
    }
    Ok(privileges)
}

/// What a run (not a dry run) needs beyond [`require`], checked before anything changes: the
/// privileges to delete, a writable server, the WAL position for --max-wal-rate, the right to
/// vacuum (the targets, with --vacuum), a layout --drop-partitions can drop.
async fn require_for_a_run(
    args: &EvictArgs,
    client: &Session,
    table: &KeyTable,
    privileges: &crate::db::table::Privileges,
) -> Result<Option<Vec<vacuum::Target>>> {
    // DELETE reads the rows it deletes (SELECT), and skipping rows a live request holds takes row
    // locks, which PostgreSQL grants only with UPDATE on at least one column.
    privileges.require_for(table, "evict", crate::db::table::Job::Evict)?;
    privileges.require_durable_points("evict")?;
    client.require_writable("evict").await?;
    rate::require_wal_position(client, args.rate_caps()).await?;
    let vacuum_targets = match args.vacuum {
        true => Some(vacuum::require_privilege(client, table).await?),
        false => None,
    };
    if args.drop_partitions {
        partitions::require_layout(table, Some(privileges))?;
    }
    Ok(vacuum_targets)
}

/// The batches over the table's placements: the workers' shards of a table Citus distributes,
/// else the table on this server (after --drop-partitions dropped whole partitions). `client`
/// holds the table's advisory lock, until the run ends.
async fn evict_placements(
    ctx: &Context,
    args: &EvictArgs,
    on: Placements<'_>,
    started: Instant,
    gate: &Option<Arc<replica::ReplicaGate>>,
) -> Result<(placements::Outcome, partitions::DropReport)> {
    let Placements {
        client,
        table,
        layout,
        walk,
    } = on;
    let mut plan = plan(ctx, args);
    if walk.is_some() {
        plan.sizing = walk::sizing(args);
    }
    let mut pace = pace_mode(args);
    let budgeted = args.max_rows.is_some() || args.max_batches.is_some();
    let sharded = layout.as_ref().is_some_and(Layout::sharded);
    let (mut nodes, holder, drops, drop_result) = match sharded {
        true => {
            let jobs = args.effective_jobs();
            let walks = walk.is_some();
            let nodes = placements::workers(ctx, &client, table, jobs, budgeted, walks).await?;
            if let Some(walk) = &walk {
                walk::say(ctx, args, table, walk);
            }
            if let pace::Mode::Adaptive { .. } = pace {
                pace = pace.leaving_out(placements::not_foreground(&client, &nodes).await?);
            }
            (
                nodes,
                Some(client),
                partitions::DropReport::default(),
                Ok(None),
            )
        }
        false => {
            let statements = server_statements(ctx, args, &client, table, layout.as_ref()).await?;
            let statements = match walk {
                Some(walk) => statements.walking(walk),
                None => statements,
            };
            let (drops, stop) =
                drop_phase(ctx, args, table, &client, started, gate.as_deref()).await;
            let node = placements::Node::server(ctx, client, table, statements);
            (vec![node], None, drops, stop)
        }
    };
    let progress = if ctx.output.progress_allowed() {
        // The bar's goal is the backlog counted now, exactly up to the cap (a walk of the expiry
        // index), not the planner's estimate, which stale statistics can put far off.
        let goal = placements::count_backlog(&mut nodes)
            .await
            .map(|c| progress_goal(c, args));
        Progress::rows(goal, args.max_runtime.map(|m| started + m))
    } else {
        Progress::hidden()
    };
    let jobs = args.effective_jobs();
    let run = placements::Run::new(ctx, plan, pace, jobs, started, gate.clone(), progress);
    let outcome = match drop_result {
        Ok(stop) => placements::evict(&run, nodes, stop).await,
        Err(e) => {
            run.progress.finish();
            placements::Outcome::failed(e)
        }
    };
    drop(holder);
    Ok((outcome, drops))
}

/// The statements of the table on this server. A reference table is written through the
/// coordinator, to every placement: each batch then bounds its row waits on every node, not only
/// on this session, and waits out a live transaction at most a bounded time (never past
/// --max-runtime). A reference or Citus local table is planned by Citus: its SKIP LOCKED fallback
/// finds rows by the key's identity, leaving out the keys a NO ACTION / RESTRICT row still
/// references (an ON DELETE action's rows are left to the server).
async fn server_statements(
    ctx: &Context,
    args: &EvictArgs,
    client: &Session,
    table: &KeyTable,
    layout: Option<&Layout>,
) -> Result<worker::Statements> {
    let refs = references(client, table).await?;
    let statements = worker::Statements::with_references(table, &refs);
    let Some(layout) = layout else {
        return Ok(statements);
    };
    let statements = match layout.matches_rows_by_identity() {
        true => statements.by_identity(table, &refs)?,
        false => statements,
    };
    if !layout.written_through_coordinator() {
        return Ok(statements);
    }
    require_plannable_references(client, table).await?;
    Ok(statements.through_coordinator(batch::ThroughCoordinator {
        wait: ROW_LOCK_WAIT,
        patience: args
            .max_runtime
            .map_or(batch::HELD_REFERENCE_PATIENCE, |m| {
                m.min(batch::HELD_REFERENCE_PATIENCE)
            }),
        cancel: ctx.cancel.clone(),
    }))
}

/// The run's end: its summary (with what the rows still to be made durable, a lost connection
/// and --vacuum came to), the metrics, the summary printed and the exit code.
async fn finish(
    ctx: &Context,
    args: &EvictArgs,
    table: &KeyTable,
    ran: Ran,
    vacuum_targets: Option<Vec<vacuum::Target>>,
) -> Result<Exit> {
    let gave_up_on = ran.waits.gave_up_on.clone();
    let (mut report, error) = summary(ctx, table, ran);
    let error = error.map(|e| lost_context(e, &report));
    if let Some(targets) = &vacuum_targets {
        // VACUUM runs on a session of its own, after a run that ended well.
        let client = match error {
            None => ctx.session().await.ok(),
            Some(_) => None,
        };
        let lock_timeout = ctx.global.lock_timeout;
        report.vacuum =
            Some(vacuum_after(args, &report, client.as_ref(), targets, lock_timeout).await);
    }
    ctx.metrics
        .finish(run_end(&report), metrics(&report))
        .await?;
    print_report(ctx, &report)?;
    if let Some(v) = report.vacuum.as_ref().filter(|v| v.failed() > 0) {
        crate::output::warn(&crate::output::evict::vacuum_warning(v));
    }
    if let (EndReason::ReplicaLag, Some(why)) = (report.end_reason, &gave_up_on) {
        crate::output::warn(&crate::output::evict::replica_gave_up(why));
    }
    match (report.end_reason, error) {
        (_, Some(e)) => Err(e),
        (EndReason::Interrupted, None) => Ok(Exit::Interrupted),
        _ => Ok(Exit::Success),
    }
}

/// The summary of the run over the placements (with, on Citus, what each worker did), and the
/// error that ended it.
fn summary(ctx: &Context, table: &KeyTable, ran: Ran) -> (EvictReport, Option<anyhow::Error>) {
    let Ran {
        outcome,
        drops,
        waits,
        sharded,
        walked,
        started,
    } = ran;
    let placements::Outcome {
        nodes,
        totals,
        end_reason,
        error,
        confirmed,
        pace,
        rate_limit,
        backlog_left,
        expired_in_progress_left,
    } = outcome;
    let (totals_examined, stopped_early) = (totals.examined, totals.stopped_early);
    let mut report = assemble(Assembled {
        table,
        expiry: expiry_of(table, &ctx.global),
        end_reason,
        totals,
        elapsed: started.elapsed().as_secs_f64(),
        backlog_left,
        expired_in_progress_left,
        drops,
        waits: &waits,
        pace,
        rate_limit,
    });
    report.rows_unconfirmed = report.rows_evicted - confirmed.min(report.rows_evicted);
    report.citus = sharded.map(|layout| placements::CitusReport { layout, nodes });
    report.walk = walked.map(|index| WalkReport {
        index,
        rows_examined: totals_examined,
        stopped_early,
    });
    (report, error)
}

/// The table's placements as the run found them: `client` holds the advisory lock; `walk`, on a
/// table without an expiry index.
struct Placements<'a> {
    client: Session,
    table: &'a KeyTable,
    layout: Option<Layout>,
    walk: Option<crate::db::evict::Walk>,
}

/// What the batches over the placements came to, with what the run did around them.
struct Ran {
    outcome: placements::Outcome,
    drops: partitions::DropReport,
    waits: replica::WaitTotals,
    /// The layout of a table Citus distributes (None on one server).
    sharded: Option<Layout>,
    /// The unique index walked (None: the batches went through the expiry index).
    walked: Option<String>,
    started: Instant,
}

/// A run that lost its connection says how much of its work is durable: the rows deleted up to
/// its last durable point, those deleted since (a crash or failover may bring them back), and,
/// when the connection was lost under a batch statement, the batch in flight, whose commit may or
/// may not have happened. Lost elsewhere (setting a session up, between batches, in the drop
/// phase), no batch was in flight.
fn lost_context(e: anyhow::Error, report: &EvictReport) -> anyhow::Error {
    if e.downcast_ref::<crate::db::session::Lost>().is_none() {
        return e;
    }
    let in_flight = matches!(
        e.downcast_ref::<crate::report::failure::Step>(),
        Some(crate::report::failure::Step::BatchLost)
    );
    e.context(crate::output::evict::lost_connection(
        report.rows_evicted - report.rows_unconfirmed,
        report.rows_unconfirmed,
        in_flight,
    ))
}

/// --vacuum after the run: VACUUM (ANALYZE) when the run ended well and evicted more than
/// --vacuum-min-rows keys.
async fn vacuum_after(
    args: &EvictArgs,
    report: &EvictReport,
    client: Option<&Session>,
    targets: &[vacuum::Target],
    lock_timeout: Duration,
) -> vacuum::VacuumReport {
    let min = args.vacuum_min_rows;
    let skip = |why| vacuum::VacuumReport::skipped(min, why);
    if matches!(report.end_reason, EndReason::Error | EndReason::Interrupted) {
        return skip(vacuum::Skipped::RunEnded(report.end_reason));
    }
    if report.rows_evicted <= min {
        return skip(vacuum::Skipped::TooFew {
            evicted: report.rows_evicted,
            min_rows: min,
        });
    }
    match client {
        Some(c) => vacuum::run(c, targets, min, lock_timeout).await,
        None => skip(vacuum::Skipped::NoSession),
    }
}

/// With --drop-partitions, drop whole expired partitions before the batches start, on the session
/// that holds the advisory lock. Returns what it did, and why the run must stop (if it must) or the
/// error that ends it.
async fn drop_phase(
    ctx: &Context,
    args: &EvictArgs,
    table: &KeyTable,
    client: &Session,
    started: Instant,
    gate: Option<&replica::ReplicaGate>,
) -> (partitions::DropReport, Result<Option<EndReason>>) {
    if !args.drop_partitions {
        return (partitions::DropReport::default(), Ok(None));
    }
    let run = partitions::DropRun {
        table,
        lock_timeout: args.drop_lock_timeout,
        min_age_secs: args.min_age.map(|d| d.as_secs_f64()),
        cancel: &ctx.cancel,
        deadline: args.max_runtime.map(|m| started + m),
        gate,
    };
    partitions::drop_expired(client, &run).await
}

fn plan(ctx: &Context, args: &EvictArgs) -> worker::Plan {
    worker::Plan {
        sizing: args.batch_sizing(),
        max_rows: args.max_rows,
        max_batches: args.max_batches,
        max_runtime: args.max_runtime,
        min_age_secs: args.min_age.map(|d| d.as_secs_f64()),
        deadline: ctx.answer_deadline(),
        statement_timeout: ctx.statement_timeout(),
        caps: args.rate_caps(),
    }
}

/// The pace: fixed by --duty-cycle, --catch-up or --pause, else adaptive, with one extra session
/// (beyond --jobs) and catch-up-sized batches (unless --batch-time or --batch-size) while the
/// foreground is idle.
fn pace_mode(args: &EvictArgs) -> pace::Mode {
    match args.fixed_duty_cycle() {
        Some(duty) => pace::Mode::Fixed {
            duty,
            pause: args.pause.unwrap_or_default(),
            fallback: None,
        },
        None => pace::Mode::Adaptive {
            base_workers: args.effective_jobs(),
            full_batch_time: (args.batch_time.is_none() && args.batch_size.is_none())
                .then_some(CATCH_UP_BATCH_TIME),
            floor_tables: None,
            left_out: Vec::new(),
        },
    }
}

/// Refuse (exit 2, before any change) a reference key table that a distributed table references
/// with ON DELETE NO ACTION / RESTRICT: the batches leave the keys it still references out with a
/// probe of the referencing table, and Citus cannot plan a DELETE on a reference table that reads a
/// distributed one (without the probe, the first such key fails every try of its batch).
async fn require_plannable_references(client: &Session, table: &KeyTable) -> Result<()> {
    let keys = crate::db::citus::distributed_blocking_references(client, table).await?;
    match keys.first() {
        Some(key) => Err(fail(
            Exit::Usage,
            crate::output::evict::reference_table_referenced_by_distributed(&table.shown(), key),
        )),
        None => Ok(()),
    }
}

/// The foreign keys that reference a table on one server.
async fn references(client: &Session, table: &KeyTable) -> Result<evict_db::References> {
    let keys = crate::db::queries::referencing_keys(client, table).await?;
    Ok(evict_db::References::new(keys))
}

/// The progress bar's goal: the backlog counted (exact, or at least the cap), or --max-rows below it.
fn progress_goal(counted: Capped, args: &EvictArgs) -> crate::progress::Goal {
    crate::progress::Goal::new(
        u64::try_from(counted.count).unwrap_or(0),
        counted.at_least,
        args.max_rows,
    )
}

/// The parts of a summary.
struct Assembled<'a> {
    table: &'a KeyTable,
    expiry: Expiry,
    end_reason: EndReason,
    totals: worker::Totals,
    elapsed: f64,
    backlog_left: Option<Capped>,
    expired_in_progress_left: Option<Capped>,
    drops: partitions::DropReport,
    waits: &'a replica::WaitTotals,
    pace: pace::PaceReport,
    rate_limit: Option<rate::RateReport>,
}

fn assemble(a: Assembled<'_>) -> EvictReport {
    let Assembled {
        table,
        expiry,
        end_reason,
        mut totals,
        elapsed,
        backlog_left,
        expired_in_progress_left: in_progress_left,
        drops,
        waits,
        pace,
        rate_limit,
    } = a;
    let (p50, p99, max) = percentiles(&mut totals.latencies_ms);
    totals.sizes.sort_unstable();
    // Batch sizes describe batches that deleted something: none for a run that evicted nothing.
    if totals.rows == 0 {
        totals.sizes.clear();
    }
    let rows_p50 = totals
        .sizes
        .get(totals.sizes.len() / 2)
        .copied()
        .unwrap_or(0);
    let rows_max = totals.sizes.last().copied().unwrap_or(0);
    EvictReport {
        table: table.qualified_name(),
        expiry,
        end_reason,
        rows_evicted: totals.rows,
        rows_unconfirmed: 0,
        batches: totals.batches,
        elapsed_seconds: elapsed,
        rows_per_second: if elapsed > 0.0 {
            totals.rows as f64 / elapsed
        } else {
            0.0
        },
        skipped_locked: totals.skipped_locked,
        skipped_min_age: totals.skipped_min_age,
        skipped_referenced: totals.skipped_referenced,
        lock_fallbacks: totals.lock_fallbacks,
        expired_in_progress_left: in_progress_left,
        backlog_left,
        batch_ms_p50: p50,
        batch_ms_p99: p99,
        batch_ms_max: max,
        batch_rows_p50: rows_p50,
        batch_rows_max: rows_max,
        rows_dropped_estimate: drops.estimated_rows(),
        dropped_partitions: drops.dropped,
        partitions_kept: drops.kept,
        replica_lag_limit_seconds: waits.limit_seconds,
        replica_lag_waits: waits.waits,
        replica_lag_wait_seconds: waits.waited.as_secs_f64(),
        replica_lag_max_seconds: waits.max_lag_seconds,
        pace,
        citus: None,
        rate_limit,
        vacuum: None,
        walk: None,
    }
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
    client: &Session,
    table: &KeyTable,
    args: &EvictArgs,
    layout: Option<&Layout>,
    can_delete: bool,
) -> Result<Exit> {
    let report = match table.expiry_index() {
        Some(_) => preview(ctx, client, table, args, layout, can_delete).await?,
        None => {
            let sharded = layout.is_some_and(Layout::sharded);
            walk::dry_run(ctx, args, client, table, can_delete, sharded).await?
        }
    };
    let json = serde_json::to_value(&report)?;
    ctx.output
        .emit(&crate::output::evict::dry_run(&report), &json)?;
    Ok(Exit::Success)
}

/// What a run would do, through the expiry index.
async fn preview(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    args: &EvictArgs,
    layout: Option<&Layout>,
    can_delete: bool,
) -> Result<DryRunReport> {
    let min_age = args.min_age.map(|d| d.as_secs_f64());
    // The keys the run would leave because a NO ACTION / RESTRICT foreign key still references
    // them are counted apart, as the batches count them. On Citus the run reads them on each
    // shard's worker (or leaves them out through the coordinator); the preview, made on the
    // coordinator, counts them and says so.
    let refs =
        evict_db::References::new(crate::db::queries::referencing_keys(client, table).await?);
    let (probed, notes) = match layout {
        Some(_) => (
            evict_db::References::none(),
            refs.blocking_keys()
                .map(|k| crate::output::unprobed_reference_note(k, "would evict", true))
                .collect(),
        ),
        // A key the probes leave out (no index, or a table this role may not read): its keys
        // are counted as would-evict, and a note says so, as stats' does for the lag.
        None => (
            refs.index_backed(),
            refs.unprobed()
                .map(|k| crate::output::unprobed_reference_note(k, "would evict", false))
                .collect(),
        ),
    };
    let evict_db::Preview {
        count,
        referenced,
        oldest,
        newest,
    } = evict_db::preview(client, table, &probed, COUNT_CAP, min_age).await?;
    let statements = worker::Statements::with_references(table, &refs);
    let statement = statements.delete_sql().to_owned();
    // EXPLAIN of a DELETE needs the DELETE privilege; a read-only role still gets the preview.
    let plan = if can_delete {
        let rows = i64::from(args.batch_sizing().first());
        evict_db::explain_first_batch(client, table, &statements, rows, min_age).await?
    } else {
        vec![crate::output::evict::plan_needs_delete().to_owned()]
    };
    let sample =
        evict_db::preview_sample(client, table, &probed, COUNT_CAP, min_age, SAMPLE_SIZE).await?;
    let drops = if args.drop_partitions {
        Some(partitions::preview(client, table, min_age).await?)
    } else {
        None
    };
    let replicas = match args.max_replica_lag {
        Some(_) => Some(crate::db::replication::replicas(client).await?),
        None => None,
    };
    let report = DryRunReport {
        table: table.qualified_name(),
        dry_run: true,
        expiry: expiry_of(table, &ctx.global),
        would_evict: count,
        would_skip_referenced: probed.any_blocking().then_some(referenced),
        oldest_candidate: oldest,
        newest_candidate: newest,
        batch_size: args.batch_size,
        batch_sizing: args.batch_sizing().describe(),
        statement,
        plan,
        sample: sample.evict,
        held_back_by_min_age: sample.held_back,
        held_back_sample: sample.kept,
        min_age: args.min_age.is_some(),
        walked: sample.walked,
        walked_all: sample.walked >= COUNT_CAP,
        rows_dropped_estimate: drops.as_ref().map(partitions::DropReport::estimated_rows),
        would_drop_partitions: drops.as_ref().map(|d| d.dropped.clone()),
        partitions_kept: drops.map(|d| d.kept),
        replicas,
        notes,
        walk: None,
    };
    Ok(report)
}

fn print_report(ctx: &Context, r: &EvictReport) -> Result<()> {
    // A run is routine: silent under cron, which mails any output.
    if !ctx.prints_summary(false) {
        // An interrupted run is not a success: say in one line what it did before it stopped.
        if r.end_reason == EndReason::Interrupted {
            crate::output::evict::tell(crate::output::evict::Event::Interrupted {
                rows_evicted: r.rows_evicted,
                batches: r.batches,
            });
        }
        return Ok(());
    }
    ctx.output
        .emit(&crate::output::evict::summary(r), &serde_json::to_value(r)?)?;
    Ok(())
}

/// The run's own figures (the run series are added by the recorder; the catalogue names them).
fn metrics(r: &EvictReport) -> Metrics {
    let mut m = Metrics::default();
    m.set(S::EvictRowsEvicted, r.rows_evicted);
    m.set(S::EvictRowsSkippedLocked, r.skipped_locked);
    m.set(S::EvictRowsSkippedReferenced, r.skipped_referenced);
    if let Some(b) = r.backlog_left {
        m.set(S::EvictBacklogLeft, b.count);
    }
    if let Some(ip) = r.expired_in_progress_left {
        m.set(S::EvictExpiredInProgress, ip.count);
    }
    if !r.dropped_partitions.is_empty() || !r.partitions_kept.is_empty() {
        m.set(S::EvictPartitionsDropped, r.dropped_partitions.len());
        m.set(S::EvictRowsDroppedEstimate, r.rows_dropped_estimate);
    }
    if r.replica_lag_limit_seconds.is_some() {
        m.set(S::EvictReplicaLagWaits, r.replica_lag_waits);
        m.set(S::EvictReplicaLagWait, r.replica_lag_wait_seconds);
    }
    r.pace.metrics(&mut m);
    if let Some(rate) = &r.rate_limit {
        rate.metrics(&mut m);
    }
    if let Some(v) = &r.vacuum {
        v.metrics(&mut m);
    }
    m
}

/// How the run ends, for the run series.
fn run_end(r: &EvictReport) -> RunEnd {
    RunEnd {
        success: !matches!(r.end_reason, EndReason::Error | EndReason::Interrupted),
        reason: r.end_reason,
        reasons: EndReason::EVICT,
        rows: Some((r.rows_evicted, "keys deleted")),
    }
}

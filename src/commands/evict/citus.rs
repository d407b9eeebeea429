//! `evict` on a hash-distributed Citus table: shard by shard, on the workers.
//!
//! The coordinator's metadata says where each shard is (`pg_dist_shard`, `pg_dist_placement`,
//! `pg_dist_node`). idemctl connects to each worker that holds shards directly, with the settings it
//! was given for the coordinator (user, database, password source, TLS) and the worker's host and
//! port from the metadata, and runs its ordinary batch loop on each shard there: the shard is an
//! ordinary table on its worker, so every batch is a one-node, index-backed statement in its own
//! short transaction, under idemctl's session limits on that worker (lock_timeout of a millisecond
//! or so, statement_timeout), with no distributed plan and no distributed transaction.
//!
//! - Workers proceed in parallel, one shard at a time each (`--jobs` sessions on that shard, as on a
//!   single server). With `--max-rows` or `--max-batches` the shards are taken one at a time across
//!   the cluster, so the budget holds exactly.
//! - Each worker has its own pace, sampled from that worker's `pg_stat_activity` (where the live
//!   requests the coordinator routes there run), so each worker's live traffic sees the pace it
//!   would see on a single server.
//! - One run per table: the advisory lock is taken on the coordinator (by the caller) and held for
//!   the whole run.
//! - The leftover counts are made per shard and added up.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result};
use serde::Serialize;
use tokio::sync::{Mutex, Semaphore};

use super::pace::{PaceReport, Pacer};
use super::{EndReason, EvictReport, worker};
use crate::cli::EvictArgs;
use crate::commands::shards::{self, Node, Shard};
use crate::context::Context;
use crate::db::citus;
use crate::db::{KeyTable, Session};
use crate::exit::{Exit, fail};
use crate::progress::Progress;
use crate::report::rows::Capped;
use crate::report::rows::Layout;

/// What one worker node did.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct NodeReport {
    /// `host:port` as the coordinator's metadata names it.
    pub node: String,
    /// Shards of the table on this node, and how many the run went through to the end.
    pub shards: usize,
    pub shards_drained: usize,
    pub rows_evicted: u64,
    pub batches: u64,
    pub skipped_locked: u64,
    /// Left because a NO ACTION / RESTRICT foreign key (from a colocated shard) still references
    /// them.
    pub skipped_referenced: u64,
    /// Expired completed keys left on this node after the run.
    pub backlog_left: Option<Capped>,
    /// Expired in_progress keys left on this node.
    pub expired_in_progress_left: Option<Capped>,
    pub pace: PaceReport,
}

/// The Citus part of the summary.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CitusReport {
    pub layout: Layout,
    pub nodes: Vec<NodeReport>,
}

/// Refuse what a distributed table does not support, before any change.
pub(crate) fn require_supported(args: &EvictArgs, table: &KeyTable, layout: &Layout) -> Result<()> {
    let refused = if args.drop_partitions {
        Some("--drop-partitions")
    } else if args.max_replica_lag.is_some() {
        Some("--max-replica-lag")
    } else if args.max_rate.is_some() {
        Some("--max-rate")
    } else if args.max_wal_rate.is_some() {
        Some("--max-wal-rate")
    } else if args.vacuum {
        Some("--vacuum")
    } else {
        None
    };
    match refused {
        Some(flag) => Err(fail(
            Exit::Usage,
            crate::output::evict::refused_on_citus(flag, table, layout),
        )),
        None => Ok(()),
    }
}

const ZERO: Capped = Capped {
    count: 0,
    at_least: false,
};

/// Sum of counts; `None` when any is unknown.
fn add(a: Option<Capped>, b: Option<Capped>) -> Option<Capped> {
    let (a, b) = (a?, b?);
    Some(Capped {
        count: a.count.saturating_add(b.count),
        at_least: a.at_least || b.at_least,
    })
}

/// The run across the cluster: what every node and shard did.
struct Outcome {
    nodes: Vec<NodeReport>,
    totals: worker::Totals,
    end_reason: EndReason,
    error: Option<anyhow::Error>,
}

/// Evict from every shard of the distributed `table`; `lock_holder` is the coordinator session
/// that holds the table's advisory lock, kept until the end of the run.
pub(crate) async fn run(
    ctx: &Context,
    args: &EvictArgs,
    lock_holder: Session,
    table: &KeyTable,
    layout: Layout,
    started: Instant,
) -> Result<Exit> {
    let jobs = usize::from(args.effective_jobs());
    // Sessions per worker: the batch sessions, the adaptive pace's extra one, and one for the
    // pace's samples and the counts.
    let cluster = shards::connect(ctx, &lock_holder, table, jobs + 2)
        .await
        .context("failed to reach the key table's shards on the Citus workers")?;
    require_shard_indexes(table, &cluster.nodes)?;
    require_shard_grants(table, &cluster.nodes).await?;
    let pace = super::pace_mode(args);
    let pace = match pace {
        super::pace::Mode::Adaptive { .. } => {
            pace.leaving_out(not_foreground(&lock_holder, &cluster.nodes).await?)
        }
        fixed => fixed,
    };
    let progress = if ctx.output.progress_allowed() {
        let goal = count_backlog(&cluster.nodes)
            .await
            .map(|c| super::progress_goal(c, args));
        Progress::rows(goal, args.max_runtime.map(|m| started + m))
    } else {
        Progress::hidden()
    };
    let progress = Arc::new(progress);
    let nodes = match args.max_rows.is_some() || args.max_batches.is_some() {
        true => oldest_first(cluster.nodes).await?,
        false => cluster.nodes,
    };
    let nodes = with_statements(&lock_holder, table, nodes).await?;
    let outcome = evict_cluster(ctx, args, pace, nodes, progress.clone(), started).await;
    progress.finish();
    let report = summary(
        table,
        super::expiry_of(table, &ctx.global),
        layout,
        outcome.nodes,
        outcome.totals,
        outcome.end_reason,
        started,
    )
    .await;
    drop(lock_holder);
    ctx.metrics
        .finish(super::run_end(&report), super::metrics(&report))
        .await?;
    super::print_report(ctx, &report)?;
    match (report.end_reason, outcome.error) {
        (_, Some(e)) => Err(e),
        (EndReason::Interrupted, None) => Ok(Exit::Interrupted),
        _ => Ok(Exit::Success),
    }
}

/// Refuse (exit 2, before any change) a shard that lost the expiry index its batches walk (dropped
/// on its worker): every batch there would scan the shard whole. Read from the shards' catalogs,
/// which the connection to the workers already resolved (no extra query). The fix recreates the
/// index on the coordinator, which Citus creates on every shard again.
fn require_shard_indexes(table: &KeyTable, nodes: &[Node]) -> Result<()> {
    for node in nodes {
        if let Some(shard) = node
            .shards
            .iter()
            .find(|s| s.table.expiry_index().is_none())
        {
            let why =
                crate::output::evict::shard_without_expiry_index(shard.id, table, &node.name());
            return Err(fail(Exit::Usage, why));
        }
    }
    Ok(())
}

/// Refuse (exit 6, before any change) a role that lacks on some shard a grant evict needs (SELECT,
/// DELETE, UPDATE on a column for the row locks), although it has it on the coordinator's table
/// (a grant revoked on a worker): one catalog lookup per worker. The fix is the GRANT on the
/// coordinator, which Citus passes on to every shard.
async fn require_shard_grants(table: &KeyTable, nodes: &[Node]) -> Result<()> {
    let lock = format!(
        "UPDATE ({})",
        crate::db::table::quote_ident_if_needed(
            table.row_lock_column(crate::db::table::Job::Evict)
        )
    );
    for node in nodes {
        let session = node.session().await?;
        let oids: Vec<i64> = node.shards.iter().map(|s| s.table.oid).collect();
        let grants = citus::shard_grants(&session, &oids).await?;
        for (shard, g) in node.shards.iter().zip(&grants) {
            let lacks: Vec<&str> = [
                ("SELECT", g.select),
                ("DELETE", g.delete),
                (lock.as_str(), g.lock_rows),
            ]
            .into_iter()
            .filter(|(_, has)| !has)
            .map(|(grant, _)| grant)
            .collect();
            if !lacks.is_empty() {
                let why = crate::output::evict::shard_grants_missing(
                    &g.role,
                    &lacks,
                    shard.id,
                    table,
                    &node.name(),
                );
                return Err(fail(Exit::PermissionDenied, why));
            }
        }
    }
    Ok(())
}

/// The global pids, on the coordinator and every worker of the run, whose Citus connections are not
/// the foreground of any worker's pace: Citus's background processes (its distributed deadlock
/// detection queries every node every few seconds) and idemctl's own sessions. Read once, at the
/// start of the run.
async fn not_foreground(coordinator: &Session, nodes: &[Node]) -> Result<Vec<i64>> {
    let mut gpids = citus::not_foreground(coordinator, "the coordinator").await?;
    for node in nodes {
        let session = node.session().await?;
        let name = format!("worker {}", node.name());
        gpids.extend(citus::not_foreground(&session, &name).await?);
    }
    gpids.sort_unstable();
    gpids.dedup();
    Ok(gpids)
}

/// The expired backlog for the progress bar, counted on each shard's worker up to a share of the
/// cap (so the whole count stays bounded however many shards there are), and added up: "at least"
/// when any shard's count stopped at its share. None when a worker cannot be asked.
async fn count_backlog(nodes: &[Node]) -> Option<Capped> {
    let shards = nodes.iter().map(|n| n.shards.len()).sum::<usize>().max(1);
    let share = (super::COUNT_CAP / i64::try_from(shards).unwrap_or(i64::MAX)).max(1_000);
    let mut sum = ZERO;
    for node in nodes {
        let session = node.session().await.ok()?;
        for shard in &node.shards {
            let c = crate::db::evict::backlog_from(&session, &shard.table, None, share)
                .await
                .ok()?;
            sum = Capped {
                count: sum.count.saturating_add(c.count),
                at_least: sum.at_least || c.at_least,
            };
        }
    }
    Some(sum)
}

/// Under a row or batch budget the shards are taken one at a time: in the order of their oldest
/// expired completed key (the workers by their oldest shard, each worker's shards likewise; shards
/// with none last), so each run spends its budget where keys have waited longest, wherever they
/// are, and does not start again at the same shards every run. One probe of the expiry index per
/// shard, on its worker.
async fn oldest_first(nodes: Vec<Node>) -> Result<Vec<Node>> {
    let mut keyed_nodes = Vec::with_capacity(nodes.len());
    for mut node in nodes {
        let session = node.session().await?;
        let mut keyed = Vec::with_capacity(node.shards.len());
        for shard in std::mem::take(&mut node.shards) {
            let at = crate::db::queries::oldest_expired(&session, &shard.table)
                .await
                .with_context(|| format!("shard {} on worker {}", shard.id, node.name()))?
                .map(|k| k.expires_at);
            keyed.push((at, shard));
        }
        // None (no expired key) sorts last.
        keyed.sort_by_key(|(at, s)| (at.is_none(), *at, s.id));
        let oldest = keyed.first().and_then(|(at, _)| *at);
        node.shards = keyed.into_iter().map(|(_, s)| s).collect();
        keyed_nodes.push((oldest, node));
    }
    keyed_nodes.sort_by_key(|(at, _)| (at.is_none(), *at));
    Ok(keyed_nodes.into_iter().map(|(_, n)| n).collect())
}

/// Each node with its shards' batch statements (in the order of its shards), made once per shard
/// before any change, with the foreign keys that reference that shard on its worker: the shards
/// of the distributed tables colocated with the key table that reference it. As on one server,
/// a batch leaves out (and counts) the keys a NO ACTION / RESTRICT row still references, and its
/// SKIP LOCKED fallback first locks the rows an ON DELETE CASCADE / SET NULL / SET DEFAULT changes;
/// the change itself stays on the shard's worker, in the batch's own transaction. One catalog
/// lookup per shard, in one transaction per worker; none when no foreign key references the
/// distributed table on the coordinator (Citus makes a shard's foreign keys from its table's).
async fn with_statements(
    coordinator: &Session,
    table: &KeyTable,
    nodes: Vec<Node>,
) -> Result<Vec<(Node, Vec<worker::Statements>)>> {
    let referenced = !crate::db::queries::referencing_keys(coordinator, table)
        .await?
        .is_empty();
    let mut out = Vec::with_capacity(nodes.len());
    for node in nodes {
        if !referenced {
            let statements = node
                .shards
                .iter()
                .map(|s| worker::Statements::new(&s.table))
                .collect();
            out.push((node, statements));
            continue;
        }
        let session = node.session().await?;
        let tables: Vec<&KeyTable> = node.shards.iter().map(|s| &s.table).collect();
        let keys = citus::shard_referencing_keys(&session, &tables)
            .await
            .with_context(|| format!("worker {}", node.name()))?;
        let statements = node
            .shards
            .iter()
            .zip(keys)
            .map(|(shard, keys)| {
                worker::Statements::with_references(
                    &shard.table,
                    &crate::db::evict::References::new(keys),
                )
            })
            .collect();
        out.push((node, statements));
    }
    Ok(out)
}

/// What every node's run needs, owned (the nodes run as tasks of their own).
#[derive(Clone)]
struct RunPlan {
    /// The batch plan of a shard before the budgets are split.
    plan: worker::Plan,
    pace: super::pace::Mode,
    jobs: u8,
    max_rows: Option<u64>,
    max_batches: Option<u64>,
    cancel: crate::domain::Cancel,
    started: Instant,
    /// The run's bar; each shard draws on a part of it.
    progress: Arc<Progress>,
    /// Set once the pace's fallback (a role that cannot see the sessions) has been said: once
    /// per run, not once per worker.
    fallback_said: Arc<std::sync::atomic::AtomicBool>,
}

/// Every node in parallel (or one at a time under a row or batch budget), each shard in turn.
async fn evict_cluster(
    ctx: &Context,
    args: &EvictArgs,
    pace: super::pace::Mode,
    nodes: Vec<(Node, Vec<worker::Statements>)>,
    progress: Arc<Progress>,
    started: Instant,
) -> Outcome {
    let run = RunPlan {
        plan: super::plan(ctx, args),
        pace,
        jobs: args.effective_jobs(),
        max_rows: args.max_rows,
        max_batches: args.max_batches,
        cancel: ctx.cancel.clone(),
        started,
        progress,
        fallback_said: Arc::default(),
    };
    let budgeted = args.max_rows.is_some() || args.max_batches.is_some();
    let gate = Arc::new(Semaphore::new(if budgeted {
        1
    } else {
        nodes.len().max(1)
    }));
    let spent = Arc::new(Mutex::new(Spent::default()));
    let mut set = tokio::task::JoinSet::new();
    for (index, (node, statements)) in nodes.into_iter().enumerate() {
        let (spent, run) = (spent.clone(), run.clone());
        // Taken here, in the nodes' order: under a budget the nodes run one after the other in
        // that order.
        let Ok(turn) = gate.clone().acquire_owned().await else {
            break;
        };
        set.spawn(async move {
            let _turn = turn;
            let (report, totals, result) = evict_node(&run, &node, statements, &spent).await;
            (index, report, totals, result)
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(r) => results.push(r),
            Err(e) => {
                return Outcome {
                    nodes: Vec::new(),
                    totals: worker::Totals::default(),
                    end_reason: EndReason::Error,
                    error: Some(fail(
                        Exit::Internal,
                        crate::output::evict::worker_stopped(&e),
                    )),
                };
            }
        }
    }
    results.sort_by_key(|r| r.0);
    let mut totals = worker::Totals::default();
    let mut reports = Vec::new();
    let mut error = None;
    for (_, report, node_totals, result) in results {
        reports.push(report);
        merge(&mut totals, node_totals);
        if let Err(e) = result {
            error.get_or_insert(e);
        }
    }
    let stop = spent.lock().await.stop;
    let end_reason = if ctx.cancel.requested() {
        EndReason::Interrupted
    } else if error.is_some() {
        EndReason::Error
    } else {
        stop.unwrap_or(EndReason::Drained)
    };
    Outcome {
        nodes: reports,
        totals,
        end_reason,
        error,
    }
}

/// What the shards done so far used of the run's budgets, and why the run stops (if it does).
#[derive(Default)]
struct Spent {
    rows: u64,
    batches: u64,
    stop: Option<EndReason>,
}

fn merge(into: &mut worker::Totals, from: worker::Totals) {
    into.rows += from.rows;
    into.batches += from.batches;
    into.skipped_locked += from.skipped_locked;
    into.skipped_min_age += from.skipped_min_age;
    into.skipped_referenced += from.skipped_referenced;
    into.lock_fallbacks += from.lock_fallbacks;
    into.passed_over += from.passed_over;
    into.latencies_ms.extend(from.latencies_ms);
    into.sizes.extend(from.sizes);
}

/// One worker node: its pace, then its shards one after the other.
async fn evict_node(
    run: &RunPlan,
    node: &Node,
    statements: Vec<worker::Statements>,
    spent: &Mutex<Spent>,
) -> (NodeReport, worker::Totals, Result<()>) {
    let mut report = NodeReport {
        node: node.name(),
        shards: node.shards.len(),
        shards_drained: 0,
        rows_evicted: 0,
        batches: 0,
        skipped_locked: 0,
        skipped_referenced: 0,
        backlog_left: Some(ZERO),
        expired_in_progress_left: Some(ZERO),
        pace: PaceReport::default(),
    };
    let mut totals = worker::Totals::default();
    let result = async {
        let control = node.session().await?;
        // Floored by the inserts into this worker's shards: its share of the table's inserts.
        let shards = node.shards.iter().map(|s| s.table.oid).collect();
        let said = &run.fallback_said;
        let warn_once = |w: &str| {
            if !said.swap(true, std::sync::atomic::Ordering::Relaxed) {
                crate::output::warn(w);
            }
        };
        let pacer = Pacer::start_warning(
            &control,
            run.pace.clone().with_insert_floor(shards),
            &warn_once,
        )
        .await
        .with_context(|| format!("failed to set up evict's pace on worker {}", node.name()))?;
        let pacer = Arc::new(pacer);
        let outcome = evict_shards(
            run,
            node,
            statements,
            &control,
            &pacer,
            spent,
            &mut report,
            &mut totals,
        )
        .await;
        report.pace = pacer.report().await;
        outcome
    }
    .await;
    if result.is_err() {
        spent.lock().await.stop.get_or_insert(EndReason::Error);
        report.backlog_left = None;
        report.expired_in_progress_left = None;
    }
    report.rows_evicted = totals.rows;
    report.batches = totals.batches;
    report.skipped_locked = totals.skipped_locked;
    report.skipped_referenced = totals.skipped_referenced;
    (report, totals, result)
}

#[expect(
    clippy::too_many_arguments,
    reason = "one worker's share of the run: its plan, node, shards and the run's shared tallies, each borrowed separately by the tasks running beside it"
)]
async fn evict_shards(
    run: &RunPlan,
    node: &Node,
    statements: Vec<worker::Statements>,
    control: &Session,
    pacer: &Arc<Pacer>,
    spent: &Mutex<Spent>,
    report: &mut NodeReport,
    totals: &mut worker::Totals,
) -> Result<()> {
    let sessions = if pacer.adaptive() {
        run.jobs.max(2)
    } else {
        run.jobs
    };
    for (shard, statements) in node.shards.iter().zip(statements) {
        let plan = {
            let spent = spent.lock().await;
            if spent.stop.is_some() || run.cancel.requested() {
                None
            } else {
                let mut plan = run.plan.clone();
                plan.max_rows = run.max_rows.map(|m| m.saturating_sub(spent.rows));
                plan.max_batches = run.max_batches.map(|m| m.saturating_sub(spent.batches));
                Some(plan)
            }
        };
        let Some(plan) = plan else {
            // Not reached: its backlog is all left.
            count_untouched(control, shard, report).await;
            continue;
        };
        let shared = worker::Shared::new(
            plan,
            statements,
            run.cancel.clone(),
            run.progress.part(),
            run.started,
            None,
            pacer.clone(),
        );
        let error = drive(node, &shared, sessions).await;
        let shard_totals = shared.totals().await;
        let reason = shared.end_reason(error.is_some()).await;
        if let Some(e) = error {
            merge(totals, shard_totals);
            return Err(e.context(format!("shard {} on worker {}", shard.id, node.name())));
        }
        let left = super::leftovers(control, &shard.table, &shared, &shard_totals).await;
        let (backlog, in_progress) = match left {
            Some((b, i)) => (Some(b), Some(i)),
            None => (None, None),
        };
        report.backlog_left = add(report.backlog_left, backlog);
        report.expired_in_progress_left = add(report.expired_in_progress_left, in_progress);
        {
            let mut spent = spent.lock().await;
            spent.rows += shard_totals.rows;
            spent.batches += shard_totals.batches;
            if reason != EndReason::Drained {
                spent.stop.get_or_insert(reason);
            }
        }
        if reason == EndReason::Drained {
            report.shards_drained += 1;
        }
        merge(totals, shard_totals);
    }
    Ok(())
}

/// The leftovers of a shard the run did not reach.
async fn count_untouched(control: &Session, shard: &Shard, report: &mut NodeReport) {
    let backlog = super::backlog_from(control, &shard.table, None).await.ok();
    let in_progress = super::in_progress_from(control, &shard.table, None)
        .await
        .ok();
    report.backlog_left = add(report.backlog_left, backlog);
    report.expired_in_progress_left = add(report.expired_in_progress_left, in_progress);
}

/// The batch sessions of one shard, on its worker, like `super::drive` on a single server.
async fn drive(node: &Node, shared: &Arc<worker::Shared>, jobs: u8) -> Option<anyhow::Error> {
    let mut sessions = Vec::with_capacity(usize::from(jobs));
    for _ in 0..jobs {
        match node.session().await {
            Ok(s) => sessions.push(s),
            Err(e) => return Some(e),
        }
    }
    super::run_workers(shared, sessions).await
}

/// The run's summary: the nodes' figures added up.
async fn summary(
    table: &KeyTable,
    expiry: crate::report::evict::Expiry,
    layout: Layout,
    nodes: Vec<NodeReport>,
    totals: worker::Totals,
    end_reason: EndReason,
    started: Instant,
) -> EvictReport {
    let failed = end_reason == EndReason::Error;
    let (mut backlog, mut in_progress) = (Some(ZERO), Some(ZERO));
    for n in &nodes {
        backlog = add(backlog, n.backlog_left);
        in_progress = add(in_progress, n.expired_in_progress_left);
    }
    if failed {
        backlog = None;
        in_progress = Some(Capped {
            count: i64::try_from(totals.passed_over).unwrap_or(i64::MAX),
            at_least: true,
        });
    }
    let pace = merged_pace(&nodes);
    let mut report = super::assemble(super::Assembled {
        table,
        expiry,
        end_reason,
        totals,
        elapsed: started.elapsed().as_secs_f64(),
        backlog_left: backlog,
        expired_in_progress_left: in_progress,
        drops: super::partitions::DropReport::default(),
        waits: &super::replica::WaitTotals::default(),
        pace,
        rate_limit: None,
    });
    report.citus = Some(CitusReport { layout, nodes });
    report
}

/// The workers' paces as one: times and counts added up over the workers (worker-seconds), the
/// lowest duty cycle any went down to, and the table's insert rate as the sum of the rates each
/// worker measured on its shards.
fn merged_pace(nodes: &[NodeReport]) -> PaceReport {
    let mut merged: Option<PaceReport> = None;
    for n in nodes {
        let p = &n.pace;
        match &mut merged {
            None => merged = Some(p.clone()),
            Some(m) => {
                m.samples += p.samples;
                m.full_seconds += p.full_seconds;
                m.paced_seconds += p.paced_seconds;
                m.backoff_seconds += p.backoff_seconds;
                m.floor_cut_seconds += p.floor_cut_seconds;
                m.ceiling_added_seconds += p.ceiling_added_seconds;
                m.insert_rate = match (m.insert_rate, p.insert_rate) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                for (r, s) in &p.backoff_seconds_by_reason {
                    *m.backoff_seconds_by_reason.entry(*r).or_default() += s;
                }
                for (r, c) in &p.backoffs_by_reason {
                    *m.backoffs_by_reason.entry(*r).or_default() += c;
                }
                m.min_duty_cycle = match (m.min_duty_cycle, p.min_duty_cycle) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                if m.fallback.is_none() {
                    m.fallback.clone_from(&p.fallback);
                }
            }
        }
    }
    merged.unwrap_or_default()
}

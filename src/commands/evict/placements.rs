//! The placements evict runs over, and the one path that runs its batches on them.
//!
//! A plain server is one node holding one placement: the table itself, on sessions of the run's
//! pool (the first batch session is the one holding the table's advisory lock). A table Citus
//! distributes (hash-distributed, or the one shard of a distributed schema's table) is one node per
//! worker holding shards, each shard an ordinary table there: idemctl connects to the worker
//! directly (the coordinator's connection settings, the worker's host and port from the metadata)
//! and runs the same batches on it, one-node, index-backed statements in short transactions under
//! its own session limits, with no distributed plan and no distributed transaction.
//!
//! - The nodes run side by side, each with its own pace, sampled from that node's
//!   `pg_stat_activity` (where the live requests routed there run), the placements of a node one
//!   after another, with `--jobs` sessions each. Under `--max-rows` or `--max-batches` the nodes
//!   take turns and every placement draws on the one budget, so it holds exactly.
//! - After each placement its batches are made durable and what they left is counted; totals,
//!   paces and leftovers are merged one way into the run's figures.
//! - One run per table: the advisory lock is taken on the server idemctl connected to (the
//!   coordinator on Citus) and held for the whole run.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use tokio::sync::{Mutex, Semaphore};

use super::pace::{self, PaceReport, Pacer};
use super::rate::RateReport;
use super::replica::ReplicaGate;
use super::worker::{self, Statements, Totals};
use crate::commands::shards::{self, Shard};
use crate::context::Context;
use crate::db::citus;
use crate::db::{KeyTable, Session};
use crate::exit::{Exit, fail};
use crate::progress::Progress;
pub(crate) use crate::report::evict::{CitusReport, NodeReport};
use crate::report::rows::{Capped, Layout};
use crate::report::run::EndReason;

/// How long a batch may wait for a row lock before it falls back to skipping locked rows.
pub(crate) const ROW_LOCK_WAIT: Duration = Duration::from_millis(1);

/// Counts in the summary and the progress bar's goal stop here (over all the placements).
pub(super) const COUNT_CAP: i64 = 100_000;

/// One placement of the table, with its batch statements.
pub(super) struct Placement {
    /// The shard's id on Citus (None on a plain server).
    shard: Option<i64>,
    table: KeyTable,
    statements: Statements,
}

/// Where a node's sessions come from.
enum Source<'a> {
    /// The server the run connected to: sessions of the run's pool.
    Server(&'a Context),
    /// A Citus worker holding shards, reached directly.
    Worker(Box<shards::Node>),
}

/// A node and its placements.
pub(super) struct Node<'a> {
    source: Source<'a>,
    placements: Vec<Placement>,
    /// The session of the node's pace samples and counts: on a plain server the one holding the
    /// advisory lock until it becomes the first batch session, then one from the pool, opened
    /// when needed.
    control: Option<Session>,
}

impl<'a> Node<'a> {
    /// The server the run connected to, holding `table` (whose statements are `statements`);
    /// `holder` holds the table's advisory lock.
    pub(super) fn server(
        ctx: &'a Context,
        holder: Session,
        table: &KeyTable,
        statements: Statements,
    ) -> Node<'a> {
        Node {
            source: Source::Server(ctx),
            placements: vec![Placement {
                shard: None,
                table: table.clone(),
                statements,
            }],
            control: Some(holder),
        }
    }

    fn worker(node: shards::Node, statements: Vec<Statements>) -> Node<'a> {
        let placements = node
            .shards
            .iter()
            .zip(statements)
            .map(|(s, statements)| Placement {
                shard: Some(s.id),
                table: s.table.clone(),
                statements,
            })
            .collect();
        Node {
            source: Source::Worker(Box::new(node)),
            placements,
            control: None,
        }
    }

    /// The worker's `host:port` (None on a plain server).
    fn name(&self) -> Option<String> {
        match &self.source {
            Source::Server(_) => None,
            Source::Worker(n) => Some(crate::output::names::worker(&n.host, n.port)),
        }
    }

    /// A new session on this node.
    async fn session(&self) -> Result<Session> {
        match &self.source {
            Source::Server(ctx) => ctx.session().await,
            Source::Worker(n) => n.session().await,
        }
    }

    /// The node's control session (opened when needed).
    async fn control(&mut self) -> Result<&Session> {
        let session = match self.control.take() {
            Some(s) => s,
            None => self.session().await?,
        };
        Ok(self.control.insert(session))
    }

    /// `jobs` batch sessions: on a plain server the control session (the advisory lock's holder)
    /// first.
    async fn batch_sessions(&mut self, jobs: u8) -> Result<Vec<Session>> {
        let mut sessions = Vec::with_capacity(usize::from(jobs));
        if let Source::Server(_) = self.source {
            sessions.extend(self.control.take());
        }
        while sessions.len() < usize::from(jobs) {
            let session = match &self.source {
                Source::Server(ctx) => ctx
                    .session()
                    .await
                    .context(crate::report::failure::Step::OpenExtraWorker)?,
                Source::Worker(n) => n.session().await?,
            };
            sessions.push(session);
        }
        Ok(sessions)
    }

    /// An error met on the placement `shard`, naming the shard and worker on Citus.
    fn on(&self, shard: Option<i64>, e: anyhow::Error) -> anyhow::Error {
        match (shard, self.name()) {
            (Some(id), Some(worker)) => e.context(crate::output::names::on_shard(id, &worker)),
            _ => e,
        }
    }
}

/// Refuse what the placements on Citus workers do not support, before any change.
pub(super) fn require_supported(
    args: &crate::cli::EvictArgs,
    table: &KeyTable,
    layout: &Layout,
) -> Result<()> {
    let refused = [
        ("--drop-partitions", args.drop_partitions),
        ("--max-replica-lag", args.max_replica_lag.is_some()),
        ("--max-rate", args.max_rate.is_some()),
        ("--max-wal-rate", args.max_wal_rate.is_some()),
        ("--vacuum", args.vacuum),
    ];
    match refused.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(fail(
            Exit::Usage,
            crate::output::evict::refused_on_citus(flag, &table.shown(), layout),
        )),
        None => Ok(()),
    }
}

/// The workers holding the shards of the distributed `table`, each shard with its statements,
/// checked before any change: every shard keeps the index its batches read (the expiry index, or
/// its copy of the unique index the run walks where `walks`: the table has no expiry index) and
/// grants evict what it needs. Under a row or batch budget, in the order of their oldest expired
/// key (found through the expiry index; a walk takes them in the workers' order).
pub(super) async fn workers<'a>(
    ctx: &Context,
    coordinator: &Session,
    table: &KeyTable,
    jobs: u8,
    budgeted: bool,
    walks: bool,
) -> Result<Vec<Node<'a>>> {
    // Sessions per worker: the batch sessions, the adaptive pace's extra one, and one for the
    // pace's samples and the counts.
    let cluster = shards::connect(ctx, coordinator, table, usize::from(jobs) + 2)
        .await
        .context(crate::report::failure::Step::ReachShards)?;
    require_shard_indexes(table, &cluster.nodes, walks)?;
    require_shard_grants(table, &cluster.nodes).await?;
    let nodes = match budgeted && !walks {
        true => oldest_first(cluster.nodes).await?,
        false => cluster.nodes,
    };
    with_statements(coordinator, table, nodes, walks).await
}

/// Refuse (exit 2, before any change) a shard that lost the index its batches read (dropped on its
/// worker): the expiry index, or where the run walks, a unique index to walk; without it every
/// batch there would scan the shard whole. Read from the shards' catalogs, which the connection to
/// the workers already resolved (no extra query). The fix recreates the index on the coordinator,
/// which Citus creates on every shard again.
fn require_shard_indexes(table: &KeyTable, nodes: &[shards::Node], walks: bool) -> Result<()> {
    for node in nodes {
        let lacking = |s: &&Shard| match walks {
            true => s.table.walk_index().is_none(),
            false => s.table.expiry_index().is_none(),
        };
        if let Some(shard) = node.shards.iter().find(lacking) {
            let worker = crate::output::names::worker(&node.host, node.port);
            let why = match walks {
                true => crate::output::evict::shard_without_walk_index(
                    shard.id,
                    &table.shown(),
                    &worker,
                ),
                false => crate::output::evict::shard_without_expiry_index(
                    shard.id,
                    &table.shown(),
                    &worker,
                ),
            };
            return Err(fail(Exit::Usage, why));
        }
    }
    Ok(())
}

/// A shard's statements: where the run walks, each batch a page of the shard's own copy of the
/// unique index (checked by [`require_shard_indexes`]).
fn on_shard(statements: Statements, shard: &KeyTable, walks: bool) -> Statements {
    match shard.walk_index().filter(|_| walks) {
        Some(index) => statements.walking(crate::db::evict::Walk::new(shard, index)),
        None => statements,
    }
}

/// Refuse (exit 6, before any change) a role that lacks on some shard a grant evict needs (SELECT,
/// DELETE, UPDATE on a column for the row locks), although it has it on the coordinator's table
/// (a grant revoked on a worker): one catalog lookup per worker. The fix is the GRANT on the
/// coordinator, which Citus passes on to every shard. Likewise a worker where the role may not call
/// the function evict's durable points call there (granted per database, on that worker).
async fn require_shard_grants(table: &KeyTable, nodes: &[shards::Node]) -> Result<()> {
    let lock = table.row_lock_grant(crate::db::table::Job::Evict);
    for node in nodes {
        let session = node.session().await?;
        let oids: Vec<i64> = node.shards.iter().map(|s| s.table.oid).collect();
        let grants = citus::shard_grants(&session, &oids).await.map_err(|e| {
            e.context(crate::output::names::on_worker(
                &crate::output::names::worker(&node.host, node.port),
            ))
        })?;
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
                    &table.shown(),
                    &crate::output::names::worker(&node.host, node.port),
                );
                return Err(fail(Exit::PermissionDenied, why));
            }
        }
        if let Some(g) = grants.iter().find(|g| !g.confirm) {
            let why = crate::output::evict::worker_durable_point_refused(
                &g.role,
                g.confirm_function
                    .as_deref()
                    .unwrap_or(crate::db::table::CONFIRM_FUNCTION),
                &crate::output::names::worker(&node.host, node.port),
            );
            return Err(fail(Exit::PermissionDenied, why));
        }
    }
    Ok(())
}

/// Under a row or batch budget the shards are taken one at a time: in the order of their oldest
/// expired completed key (the workers by their oldest shard, each worker's shards likewise; shards
/// with none last), so each run spends its budget where keys have waited longest, wherever they
/// are, and does not start again at the same shards every run. One probe of the expiry index per
/// shard, on its worker.
async fn oldest_first(nodes: Vec<shards::Node>) -> Result<Vec<shards::Node>> {
    let mut keyed_nodes = Vec::with_capacity(nodes.len());
    for mut node in nodes {
        let session = node.session().await?;
        let mut keyed = Vec::with_capacity(node.shards.len());
        for shard in std::mem::take(&mut node.shards) {
            let at = crate::db::queries::oldest_expired(&session, &shard.table)
                .await
                .map_err(|e| {
                    e.context(crate::output::names::on_shard(
                        shard.id,
                        &crate::output::names::worker(&node.host, node.port),
                    ))
                })?
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
async fn with_statements<'a>(
    coordinator: &Session,
    table: &KeyTable,
    nodes: Vec<shards::Node>,
    walks: bool,
) -> Result<Vec<Node<'a>>> {
    let referenced = !crate::db::queries::referencing_keys(coordinator, table)
        .await?
        .is_empty();
    let mut out = Vec::with_capacity(nodes.len());
    for node in nodes {
        if !referenced {
            let statements = node
                .shards
                .iter()
                .map(|s| on_shard(Statements::new(&s.table), &s.table, walks))
                .collect();
            out.push(Node::worker(node, statements));
            continue;
        }
        let session = node.session().await?;
        let tables: Vec<&KeyTable> = node.shards.iter().map(|s| &s.table).collect();
        let keys = citus::shard_referencing_keys(&session, &tables)
            .await
            .map_err(|e| {
                e.context(crate::output::names::on_worker(
                    &crate::output::names::worker(&node.host, node.port),
                ))
            })?;
        let statements = node
            .shards
            .iter()
            .zip(keys)
            .map(|(shard, keys)| {
                let refs = crate::db::evict::References::new(keys);
                on_shard(
                    Statements::with_references(&shard.table, &refs),
                    &shard.table,
                    walks,
                )
            })
            .collect();
        out.push(Node::worker(node, statements));
    }
    Ok(out)
}

/// The global pids, on the coordinator and every worker of the run, whose Citus connections are not
/// the foreground of any worker's pace: Citus's background processes (its distributed deadlock
/// detection queries every node every few seconds) and idemctl's own sessions. Read once, at the
/// start of the run.
pub(super) async fn not_foreground(coordinator: &Session, nodes: &[Node<'_>]) -> Result<Vec<i64>> {
    let mut gpids = citus::not_foreground(coordinator, "the coordinator").await?;
    for node in nodes {
        let Source::Worker(worker) = &node.source else {
            continue;
        };
        let session = worker.session().await?;
        let name = crate::output::names::on_worker(&crate::output::names::worker(
            &worker.host,
            worker.port,
        ));
        gpids.extend(citus::not_foreground(&session, &name).await?);
    }
    gpids.sort_unstable();
    gpids.dedup();
    Ok(gpids)
}

/// The expired backlog for the progress bar, counted on each placement's node up to a share of
/// the cap (so the whole count stays bounded however many shards there are), and added up: "at
/// least" when any count stopped at its share. None when a node cannot be asked.
pub(super) async fn count_backlog(nodes: &mut [Node<'_>]) -> Option<Capped> {
    let placements = nodes.iter().map(|n| n.placements.len()).sum::<usize>();
    let share = match placements {
        0 | 1 => COUNT_CAP,
        n => (COUNT_CAP / i64::try_from(n).unwrap_or(i64::MAX)).max(1_000),
    };
    // Without an expiry index the backlog cannot be counted in bounded reads.
    let walks = nodes
        .iter()
        .any(|n| n.placements.iter().any(|p| p.statements.walk().is_some()));
    if walks {
        return None;
    }
    let mut sum = Some(ZERO);
    for node in nodes {
        let tables: Vec<KeyTable> = node.placements.iter().map(|p| p.table.clone()).collect();
        let session = node.control().await.ok()?;
        for table in &tables {
            let c = crate::db::evict::backlog_from(session, table, None, share)
                .await
                .ok()?;
            sum = add(sum, Some(c));
        }
    }
    sum
}

const ZERO: Capped = Capped {
    count: 0,
    at_least: false,
};

/// Sum of counts; `None` when any is unknown.
pub(super) fn add(a: Option<Capped>, b: Option<Capped>) -> Option<Capped> {
    let (a, b) = (a?, b?);
    Some(Capped {
        count: a.count.saturating_add(b.count),
        at_least: a.at_least || b.at_least,
    })
}

/// What every node's run shares.
pub(super) struct Run<'a> {
    pub(super) ctx: &'a Context,
    /// The batch plan of a placement before the budgets are split.
    pub(super) plan: worker::Plan,
    pub(super) pace: pace::Mode,
    pub(super) jobs: u8,
    pub(super) started: Instant,
    /// Pauses every claim while replicas lag (--max-replica-lag).
    pub(super) gate: Option<Arc<ReplicaGate>>,
    /// The run's bar; each placement draws on a part of it.
    pub(super) progress: Arc<Progress>,
    /// Set once the pace's fallback (a role that cannot see the sessions) has been said: once
    /// per run, not once per node.
    fallback_said: AtomicBool,
    spent: Mutex<Spent>,
}

impl<'a> Run<'a> {
    pub(super) fn new(
        ctx: &'a Context,
        plan: worker::Plan,
        pace: pace::Mode,
        jobs: u8,
        started: Instant,
        gate: Option<Arc<ReplicaGate>>,
        progress: Progress,
    ) -> Run<'a> {
        Run {
            ctx,
            plan,
            pace,
            jobs,
            started,
            gate,
            progress: Arc::new(progress),
            fallback_said: AtomicBool::new(false),
            spent: Mutex::new(Spent::default()),
        }
    }

    fn budgeted(&self) -> bool {
        self.plan.max_rows.is_some() || self.plan.max_batches.is_some()
    }

    /// The plan of the next placement: the budgets less what the placements before it spent;
    /// None once the run stops.
    async fn next_plan(&self) -> Option<worker::Plan> {
        let spent = self.spent.lock().await;
        if spent.stop.is_some() || self.ctx.cancel.requested() {
            return None;
        }
        let mut plan = self.plan.clone();
        plan.max_rows = self.plan.max_rows.map(|m| m.saturating_sub(spent.rows));
        plan.max_batches = self
            .plan
            .max_batches
            .map(|m| m.saturating_sub(spent.batches));
        Some(plan)
    }
}

/// What the placements done so far used of the run's budgets, and why the run stops (if it does).
#[derive(Default)]
struct Spent {
    rows: u64,
    batches: u64,
    stop: Option<EndReason>,
}

/// The run over every placement: what each node did and the figures merged.
pub(super) struct Outcome {
    pub(super) nodes: Vec<NodeReport>,
    pub(super) totals: Totals,
    pub(super) end_reason: EndReason,
    pub(super) error: Option<anyhow::Error>,
    /// Rows deleted up to the last point known durable.
    pub(super) confirmed: u64,
    pub(super) pace: PaceReport,
    pub(super) rate_limit: Option<RateReport>,
    pub(super) backlog_left: Option<Capped>,
    pub(super) expired_in_progress_left: Option<Capped>,
}

impl Outcome {
    /// A run that failed before any batch (the drop phase's error).
    pub(super) fn failed(error: anyhow::Error) -> Outcome {
        Outcome {
            nodes: Vec::new(),
            totals: Totals::default(),
            end_reason: EndReason::Error,
            error: Some(error),
            confirmed: 0,
            pace: PaceReport::default(),
            rate_limit: None,
            backlog_left: None,
            expired_in_progress_left: Some(Capped {
                count: 0,
                at_least: true,
            }),
        }
    }
}

/// Evict from every placement of `nodes`; `stop`, when the run must stop before its batches
/// (the drop phase ended it).
pub(super) async fn evict(run: &Run<'_>, nodes: Vec<Node<'_>>, stop: Option<EndReason>) -> Outcome {
    if let Some(reason) = stop {
        run.spent.lock().await.stop = Some(reason);
    }
    let turns = Semaphore::new(if run.budgeted() {
        1
    } else {
        nodes.len().max(1)
    });
    let turns = &turns;
    // Under a budget the nodes take turns in their order (the semaphore is fair, and each node
    // asks for its turn in that order).
    let runs = side_by_side(
        nodes
            .into_iter()
            .map(|node| async move {
                let _turn = turns.acquire().await.ok();
                evict_node(run, node).await
            })
            .collect(),
    )
    .await;
    run.progress.finish();
    merge(run, runs).await
}

/// Run `futures` side by side on this task; their outputs in order.
async fn side_by_side<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (future, out) in pending.iter_mut().zip(done.iter_mut()) {
            if out.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => all = false,
                }
            }
        }
        if all { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    done.into_iter().flatten().collect()
}

/// What one node's run came to.
struct NodeRun {
    report: NodeReport,
    totals: Totals,
    confirmed: u64,
    rate_limit: Option<RateReport>,
    result: Result<()>,
}

/// The nodes' runs as the run's figures: totals, paces and leftovers merged one way.
async fn merge(run: &Run<'_>, runs: Vec<NodeRun>) -> Outcome {
    let mut totals = Totals::default();
    let (mut nodes, mut paces) = (Vec::new(), Vec::new());
    let (mut error, mut confirmed, mut rate_limit) = (None, 0, None);
    let (mut backlog, mut in_progress) = (Some(ZERO), Some(ZERO));
    for r in runs {
        totals.merge(r.totals);
        confirmed += r.confirmed;
        rate_limit = rate_limit.or(r.rate_limit);
        backlog = add(backlog, r.report.backlog_left);
        in_progress = add(in_progress, r.report.expired_in_progress_left);
        paces.push(r.report.pace.clone());
        nodes.push(r.report);
        if let Err(e) = r.result {
            error.get_or_insert(e);
        }
    }
    let stop = run.spent.lock().await.stop;
    let end_reason = if run.ctx.cancel.requested() {
        EndReason::Interrupted
    } else if error.is_some() {
        EndReason::Error
    } else {
        stop.unwrap_or(EndReason::Drained)
    };
    // Without a count (a failed run), the in_progress keys the batches passed over are a lower
    // bound.
    if error.is_some() {
        backlog = None;
        in_progress = Some(Capped {
            count: i64::try_from(totals.passed_over).unwrap_or(i64::MAX),
            at_least: true,
        });
    }
    Outcome {
        nodes,
        totals,
        end_reason,
        error,
        confirmed,
        pace: PaceReport::merged(&paces),
        rate_limit,
        backlog_left: backlog,
        expired_in_progress_left: in_progress,
    }
}

/// One node: its pace, then its placements one after the other.
async fn evict_node(run: &Run<'_>, mut node: Node<'_>) -> NodeRun {
    let mut out = NodeRun {
        report: NodeReport {
            node: node.name().unwrap_or_default(),
            shards: node.placements.len(),
            shards_drained: 0,
            rows_evicted: 0,
            batches: 0,
            skipped_locked: 0,
            skipped_referenced: 0,
            backlog_left: Some(ZERO),
            expired_in_progress_left: Some(ZERO),
            pace: PaceReport::default(),
        },
        totals: Totals::default(),
        confirmed: 0,
        rate_limit: None,
        result: Ok(()),
    };
    out.result = match start_pace(run, &mut node).await {
        Ok(pacer) => {
            let pacer = Arc::new(pacer);
            let result = each_placement(run, &mut node, &pacer, &mut out).await;
            out.report.pace = pacer.report().await;
            result
        }
        Err(e) => Err(e),
    };
    if out.result.is_err() {
        run.spent.lock().await.stop.get_or_insert(EndReason::Error);
        out.report.backlog_left = None;
        out.report.expired_in_progress_left = None;
    }
    out.report.rows_evicted = out.totals.rows;
    out.report.batches = out.totals.batches;
    out.report.skipped_locked = out.totals.skipped_locked;
    out.report.skipped_referenced = out.totals.skipped_referenced;
    out
}

/// The node's pace, floored by the inserts into its placements (on Citus, the worker's share of
/// the table's inserts); the fallback to a fixed pace is said once per run.
async fn start_pace(run: &Run<'_>, node: &mut Node<'_>) -> Result<Pacer> {
    let oids = node.placements.iter().map(|p| p.table.oid).collect();
    let mode = run.pace.clone().with_insert_floor(oids);
    let said = &run.fallback_said;
    let warn_once = |w: &str| {
        if !said.swap(true, Ordering::Relaxed) {
            crate::output::warn(w);
        }
    };
    let name = node.name();
    let control = node.control().await?;
    Pacer::start_warning(control, mode, &warn_once)
        .await
        .map_err(|e| e.context(crate::output::evict::pace_setup_failed(name.as_deref())))
}

/// The node's placements one after the other, each with its batches on `run.jobs` sessions (at
/// least two under the adaptive pace), until they end or the run stops.
async fn each_placement(
    run: &Run<'_>,
    node: &mut Node<'_>,
    pacer: &Arc<Pacer>,
    out: &mut NodeRun,
) -> Result<()> {
    let jobs = if pacer.adaptive() {
        run.jobs.max(2)
    } else {
        run.jobs
    };
    for placement in std::mem::take(&mut node.placements) {
        let Some(plan) = run.next_plan().await else {
            // Not reached: its backlog is all left.
            count_untouched(node, &placement, &mut out.report).await;
            continue;
        };
        let Placement {
            shard,
            table,
            statements,
        } = placement;
        let shared = worker::Shared::new(
            plan,
            statements,
            run.ctx.cancel.clone(),
            run.progress.part(),
            run.started,
            run.gate.clone(),
            pacer.clone(),
        );
        let result = evict_placement(run, node, &shared, &table, jobs, &mut out.report).await;
        out.confirmed += shared.confirmed().await;
        if out.rate_limit.is_none() {
            out.rate_limit = shared.rate_report().await;
        }
        out.totals.merge(shared.totals().await);
        result.map_err(|e| node.on(shard, e))?;
    }
    Ok(())
}

/// One placement's batches on `jobs` sessions of its node; then, unless they failed, the rows
/// they deleted made durable and what they left counted on the node's control session (no count
/// when that session cannot be had).
async fn evict_placement(
    run: &Run<'_>,
    node: &mut Node<'_>,
    shared: &Arc<worker::Shared>,
    table: &KeyTable,
    jobs: u8,
    report: &mut NodeReport,
) -> Result<()> {
    let error = match node.batch_sessions(jobs).await {
        Ok(sessions) => run_workers(shared, sessions).await,
        Err(e) => Some(e),
    };
    if let Some(e) = error {
        return Err(e);
    }
    let reason = shared.end_reason(false).await;
    let (backlog, in_progress) = match node.control().await {
        Ok(control) => {
            // The placement's end is a durable point: every batch committed so far is flushed.
            shared.confirm(control, true).await?;
            let totals = shared.totals().await;
            // Without an expiry index the leftovers cannot be counted in bounded reads.
            let counted = match shared.walks() {
                true => None,
                false => leftovers(control, table, shared, &totals).await,
            };
            match counted {
                Some((b, i)) => (Some(b), Some(i)),
                None => (None, None),
            }
        }
        Err(_) => (None, None),
    };
    report.backlog_left = add(report.backlog_left, backlog);
    report.expired_in_progress_left = add(report.expired_in_progress_left, in_progress);
    let totals = shared.totals().await;
    {
        let mut spent = run.spent.lock().await;
        spent.rows += totals.rows;
        spent.batches += totals.batches;
        if reason != EndReason::Drained {
            spent.stop.get_or_insert(reason);
        }
    }
    if reason == EndReason::Drained {
        report.shards_drained += 1;
    }
    Ok(())
}

/// The leftovers of a placement the run did not reach.
async fn count_untouched(node: &mut Node<'_>, placement: &Placement, report: &mut NodeReport) {
    let table = &placement.table;
    // Without an expiry index the leftovers cannot be counted in bounded reads.
    let control = match placement.statements.walk() {
        Some(_) => None,
        None => node.control().await.ok(),
    };
    let (backlog, in_progress) = match control {
        Some(control) => (
            crate::db::evict::backlog_from(control, table, None, COUNT_CAP)
                .await
                .ok(),
            crate::db::evict::in_progress_from(control, table, None, COUNT_CAP)
                .await
                .ok(),
        ),
        None => (None, None),
    };
    report.backlog_left = add(report.backlog_left, backlog);
    report.expired_in_progress_left = add(report.expired_in_progress_left, in_progress);
}

/// The leftover counts of a placement: what the batches left in the ranges behind the final
/// cursor, plus a count from the cursor on (which sees the last, open range and whatever expired
/// meanwhile), so every expired key left is counted once. None when the counts cannot be made.
async fn leftovers(
    client: &Session,
    table: &KeyTable,
    shared: &worker::Shared,
    totals: &Totals,
) -> Option<(Capped, Capped)> {
    let cursor = shared.cursor().await;
    let (mut completed, mut in_progress) = (0u64, 0u64);
    let sql = Statements::new(table);
    for range in worker::merged_behind(&totals.left, cursor) {
        let (c, n) = worker::count_left(client, &sql, shared.deadline(), range)
            .await
            .ok()?;
        completed += c;
        in_progress += n;
    }
    let backlog = crate::db::evict::backlog_from(client, table, cursor, COUNT_CAP)
        .await
        .ok()?;
    let ahead = crate::db::evict::in_progress_from(client, table, cursor, COUNT_CAP)
        .await
        .ok()?;
    let plus = |c: Capped, n: u64| {
        add(
            Some(c),
            Some(Capped {
                count: i64::try_from(n).unwrap_or(i64::MAX),
                at_least: false,
            }),
        )
    };
    Some((plus(backlog, completed)?, plus(ahead, in_progress)?))
}

/// Settings of every evict session: never wait on a row for more than [`ROW_LOCK_WAIT`], commit
/// without waiting for the WAL flush (or a synchronous standby) so a batch releases its rows
/// sooner (a server crash can undo the last instant of deletions, which the next run repeats),
/// and plan the batch statements generically. A custom plan is costed from the table's statistics, which
/// can be stale right after a bulk load and then favour a sequential scan for a bounded range;
/// the generic plan of an index range is always the index scan. Behind a transaction pooler each
/// batch's transaction sets them (SET LOCAL) instead of the session.
async fn session_setup(session: &Session) -> Result<()> {
    crate::db::batch::limit_row_waits(session, ROW_LOCK_WAIT).await?;
    session.set("plan_cache_mode", "force_generic_plan").await?;
    session.set("synchronous_commit", "off").await?;
    Ok(())
}

/// One batch worker per session, all on `shared`, until they end (on a single server, or on one
/// shard of a Citus worker). Returns the first error, if any; a worker that fails stops the others
/// at their next claim.
async fn run_workers(
    shared: &Arc<worker::Shared>,
    sessions: Vec<Session>,
) -> Option<anyhow::Error> {
    let mut set = tokio::task::JoinSet::new();
    for (index, client) in sessions.into_iter().enumerate() {
        let shared = shared.clone();
        set.spawn(async move {
            session_setup(&client)
                .await
                .context(crate::report::failure::Step::SetUpEvictSession)?;
            let result = worker::work(shared.clone(), client, index).await;
            if result.is_err() {
                shared.abort().await;
            }
            result
        });
    }
    let mut first_error = None;
    while let Some(joined) = set.join_next().await {
        // The set is never aborted, so a task ends without a result only by panicking, and the
        // panic hook has then already ended the process in its one line (exit 70).
        let result = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        if let Err(e) = result {
            first_error.get_or_insert(e);
        }
    }
    first_error
}

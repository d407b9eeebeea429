//! `idemctl stats`: the figures an alert needs, every one of them from the catalog or a bounded,
//! index-backed statement. One path reads them on every placement of the table (the table itself
//! on a plain server; each shard, an ordinary table on its worker, on Citus) with the same
//! statements and adds them up: sizes, row estimates and tuple counts summed, the oldest keys and
//! the least recent (auto)vacuum/analyze over the placements, and the capped counts shared out so
//! that the whole run examines at most the cap of rows (plus one per placement). `check` and `top`
//! gather their figures here too; src/report/stats.rs holds the report.

use anyhow::{Context as _, Result};

use super::shards::{Node, Placements, Shard};
use crate::cli::StatsArgs;
use crate::context::Context;
use crate::db::queries::{self, Sizes, Stuck, Vacuum};
use crate::db::references::{self, References};
use crate::db::{KeyTable, Session, citus, partitions};
use crate::domain::OutputFormat;
use crate::exit::Exit;
use crate::metrics::RunEnd;
use crate::metrics::Series as S;
use crate::output::prometheus::Metrics;
use crate::report::rows::{AutovacuumRel, Capped, KeyRef};
use crate::report::run::EndReason;
pub(crate) use crate::report::stats::{
    CitusStats, ExpiryFigures, NodeStats, ReferencedExpired, StatsNote, StatsReport,
};

/// Stats and check examine at most this many of the oldest expired keys to tell apart those
/// still referenced (an index probe each).
pub(crate) const REFERENCED_CAP: i64 = 10_000;

/// Stuck keys are counted exactly up to this many.
pub(crate) const STUCK_CAP: i64 = 100_000;

/// What a run gathers, and how far it counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    /// Age past which an in_progress key counts as stuck.
    pub stuck_after_secs: f64,
    /// Count the expired backlog exactly up to this many rows (None: do not count it).
    pub backlog_cap: Option<i64>,
    /// Count stuck keys exactly up to this many.
    pub stuck_cap: i64,
    /// Count stuck keys by reading the whole table when the in_progress index is missing.
    pub allow_scan: bool,
    /// The recent-TTL sample also counts the keys that live less than this (check --min-ttl).
    pub below_ttl: Option<f64>,
}

/// What the run reads on each placement, decided once from the table.
struct Plan {
    stuck_after_secs: f64,
    figures: ExpiryFigures,
    count_stuck: bool,
}

/// The caps shared out over the placements: how much of each is left.
struct Budget {
    backlog_left: Option<i64>,
    stuck_left: i64,
}

/// What one placement says.
struct PlacementStats {
    sizes: Sizes,
    vacuum: Vacuum,
    autovacuum: Vec<AutovacuumRel>,
    oldest_live: Option<KeyRef>,
    oldest_expired: Option<KeyRef>,
    /// The eviction lag on this placement (None: unknown, the figures are not exact).
    lag: Option<f64>,
    /// The lag estimated from the planner's statistics where it cannot be found (no expiry
    /// index); None where it is found, or no statistics hold the expiry column.
    lag_estimate: Option<f64>,
    referenced: Option<ReferencedExpired>,
    backlog: Option<Capped>,
    /// The planner's estimate of the expired backlog, read when the count stopped at its cap or
    /// could not be made (no expiry index).
    backlog_estimate: Option<u64>,
    stuck: Option<Stuck>,
}

/// The figures added up so far beyond the report's own.
struct Totals {
    relations: Vec<AutovacuumRel>,
    /// The least recent (auto)vacuum and analyze; `None` once a placement had none.
    vacuumed: Option<Option<time::OffsetDateTime>>,
    analyzed: Option<Option<time::OffsetDateTime>>,
    /// The backlog's estimate added up (a placement counted exactly adds its count); `None` once
    /// a placement had neither.
    estimate: Option<u64>,
    nodes: Vec<NodeStats>,
    /// Notes about a placement's figures.
    notes: Vec<StatsNote>,
}

/// Gather the report over the table's placements; shared with `check` and `top`.
pub(crate) async fn gather(
    client: &Session,
    table: &KeyTable,
    placements: &Placements,
    reading: Reading,
) -> Result<StatsReport> {
    table.require_columns()?;
    let shards = placements.in_shards();
    if shards {
        table.require_ttl("stats")?;
    }
    let mut notes = Vec::new();
    let figures = expiry_figures(table, &mut notes);
    let exact = figures == ExpiryFigures::Exact;
    let count_stuck = count_stuck(table, reading.allow_scan, shards, &mut notes);
    let plan = Plan {
        stuck_after_secs: reading.stuck_after_secs,
        figures,
        count_stuck,
    };
    let mut budget = Budget {
        backlog_left: reading.backlog_cap.filter(|_| exact),
        stuck_left: reading.stuck_cap,
    };
    let mut report = empty(table, &plan, budget.backlog_left.is_some());
    let mut totals = Totals {
        relations: Vec::new(),
        vacuumed: Some(None),
        analyzed: Some(None),
        estimate: Some(0),
        nodes: Vec::new(),
        notes: Vec::new(),
    };
    match &placements.cluster {
        None => {
            let mut part = node_part(String::new(), 1, count_stuck);
            let s = read_placement(client, table, &plan, &mut budget, &mut totals).await?;
            merge(&mut report, &mut part, &mut totals, s);
        }
        Some(cluster) => {
            for node in &cluster.nodes {
                let session = node.session().await?;
                let mut part = node_part(
                    crate::output::names::worker(&node.host, node.port),
                    node.shards.len(),
                    count_stuck,
                );
                for shard in &node.shards {
                    let s = read_shard(&session, node, shard, &plan, &mut budget, &mut totals);
                    let s = s.await?;
                    merge(&mut report, &mut part, &mut totals, s);
                }
                totals.nodes.push(part);
            }
        }
    }
    // The TTL sample reads the first and last keys of the expiry index: on Citus through the
    // coordinator, which merges the shards' ends.
    let recent_ttl = match exact {
        true => crate::db::maintenance::recent_ttl(client, table, reading.below_ttl).await?,
        false => None,
    };
    // Each placement (a shard, a leaf partition) is vacuumed on its own: one relation each.
    report.maintenance = super::maintenance::outlook(totals.relations, recent_ttl.as_ref());
    report.recent_ttl = recent_ttl;
    report.vacuum.last_vacuum = totals.vacuumed.flatten();
    report.vacuum.last_analyze = totals.analyzed.flatten();
    report.expired_backlog_estimate = match (report.expired_backlog, figures) {
        (Some(b), _) if b.at_least => totals.estimate,
        (_, ExpiryFigures::Estimated) => totals.estimate,
        _ => None,
    };
    if table.partitioned && !shards {
        report.partitioning = table.partitioning.clone();
        report.partitions = Some(partitions::list(client, table).await?);
    }
    // The notes in the order the figures are shown.
    let mut all = Vec::new();
    let (expiry, rest): (Vec<_>, Vec<_>) = notes.into_iter().partition(|n| {
        matches!(
            n,
            StatsNote::ExpiryUnknownWithoutTtl { .. }
                | StatsNote::ExpiryEstimatedWithoutIndex { .. }
        )
    });
    all.extend(expiry);
    all.extend(totals.notes);
    all.extend(rest);
    if report.sizes.never_analyzed {
        all.push(StatsNote::NeverAnalyzed { shards });
    }
    report.notes = all;
    report.citus = placements.layout.clone().map(|layout| CitusStats {
        layout,
        nodes: totals.nodes,
    });
    Ok(report)
}

/// How the figures about expiry can be found: they need a TTL where keys expire by one, and the
/// expiry index to be counted; without it the backlog is the planner's estimate, and what only a
/// walk of the index tells is unknown.
fn expiry_figures(table: &KeyTable, notes: &mut Vec<StatsNote>) -> ExpiryFigures {
    if table.profile.lacks_ttl() {
        notes.push(StatsNote::ExpiryUnknownWithoutTtl {
            table: table.qualified_name(),
            profile: table.profile.name.clone(),
            created_at: table.profile.created_at.clone(),
        });
        ExpiryFigures::Unknown
    } else if table.expiry_index().is_none() {
        notes.push(StatsNote::ExpiryEstimatedWithoutIndex {
            table: table.qualified_name(),
            column: table.profile.expiry_column().to_owned(),
            fix: table.expiry_index_fix(),
        });
        ExpiryFigures::Estimated
    } else {
        ExpiryFigures::Exact
    }
}

/// Whether stuck keys are counted: always without an in-flight marker (none is ever stuck), else
/// through the in_progress index or, with --allow-scan, by reading the whole table.
fn count_stuck(
    table: &KeyTable,
    allow_scan: bool,
    shards: bool,
    notes: &mut Vec<StatsNote>,
) -> bool {
    let no_marker = !table.profile.has_in_flight_marker();
    if no_marker {
        notes.push(StatsNote::NoInFlightMarker {
            table: table.qualified_name(),
            profile: table.profile.name.clone(),
        });
    }
    let counted = no_marker || table.stuck_index().is_some() || allow_scan;
    if !counted {
        notes.push(StatsNote::StuckNotCounted {
            fix: table.stuck_index_fix(),
            shards,
        });
    }
    counted
}

/// The report before any placement is read: every figure that adds up at zero.
fn empty(table: &KeyTable, plan: &Plan, count_backlog: bool) -> StatsReport {
    StatsReport {
        expiry_figures: plan.figures,
        table: table.qualified_name(),
        sizes: Sizes {
            estimated_rows: 0,
            heap_bytes: 0,
            toast_bytes: 0,
            index_bytes: 0,
            total_bytes: 0,
            never_analyzed: false,
        },
        vacuum: Vacuum {
            live_tuples: 0,
            dead_tuples: 0,
            inserted_rows: 0,
            deleted_rows: 0,
            last_vacuum: None,
            last_analyze: None,
        },
        oldest_live: None,
        oldest_expired: None,
        eviction_lag_seconds: (plan.figures == ExpiryFigures::Exact).then_some(0.0),
        eviction_lag_estimated_seconds: None,
        referenced_expired: None,
        expired_backlog: count_backlog.then_some(Capped::ZERO),
        expired_backlog_estimate: None,
        stuck_after_seconds: plan.stuck_after_secs,
        stuck: plan.count_stuck.then_some(Stuck {
            count: Capped::ZERO,
            oldest_since: None,
        }),
        partitioning: None,
        partitions: None,
        maintenance: super::maintenance::outlook(Vec::new(), None),
        recent_ttl: None,
        notes: Vec::new(),
        citus: None,
    }
}

/// A worker's part before its shards are read.
fn node_part(node: String, shards: usize, count_stuck: bool) -> NodeStats {
    NodeStats {
        node,
        shards,
        estimated_rows: 0,
        total_bytes: 0,
        live_tuples: 0,
        dead_tuples: 0,
        inserted_rows: 0,
        deleted_rows: 0,
        expired_backlog: Capped::ZERO,
        eviction_lag_seconds: 0.0,
        stuck: count_stuck.then_some(Capped::ZERO),
    }
}

/// Add one placement's figures to the report and to its worker's part: the one merge of every
/// figure.
fn merge(report: &mut StatsReport, part: &mut NodeStats, totals: &mut Totals, s: PlacementStats) {
    totals.relations.extend(s.autovacuum);
    let sz = &mut report.sizes;
    sz.estimated_rows += s.sizes.estimated_rows;
    sz.heap_bytes += s.sizes.heap_bytes;
    sz.toast_bytes += s.sizes.toast_bytes;
    sz.index_bytes += s.sizes.index_bytes;
    sz.total_bytes += s.sizes.total_bytes;
    sz.never_analyzed |= s.sizes.never_analyzed;
    let v = &mut report.vacuum;
    v.live_tuples += s.vacuum.live_tuples;
    v.dead_tuples += s.vacuum.dead_tuples;
    v.inserted_rows += s.vacuum.inserted_rows;
    v.deleted_rows += s.vacuum.deleted_rows;
    totals.vacuumed = least_recent(totals.vacuumed, s.vacuum.last_vacuum);
    totals.analyzed = least_recent(totals.analyzed, s.vacuum.last_analyze);
    part.estimated_rows += s.sizes.estimated_rows;
    part.total_bytes += s.sizes.total_bytes;
    part.live_tuples += s.vacuum.live_tuples;
    part.dead_tuples += s.vacuum.dead_tuples;
    part.inserted_rows += s.vacuum.inserted_rows;
    part.deleted_rows += s.vacuum.deleted_rows;
    if let Some(lag) = s.lag {
        part.eviction_lag_seconds = part.eviction_lag_seconds.max(lag);
        report.eviction_lag_seconds = Some(report.eviction_lag_seconds.unwrap_or(0.0).max(lag));
    }
    if let Some(lag) = s.lag_estimate {
        let e = &mut report.eviction_lag_estimated_seconds;
        *e = Some(e.unwrap_or(0.0).max(lag));
    }
    report.oldest_live = earliest(report.oldest_live.take(), s.oldest_live);
    report.oldest_expired = earliest(report.oldest_expired.take(), s.oldest_expired);
    if s.referenced.is_some() {
        report.referenced_expired = s.referenced;
    }
    let counted = s
        .backlog_estimate
        .or(s.backlog.map(|b| b.count.max(0) as u64));
    totals.estimate = totals.estimate.zip(counted).map(|(a, b)| a + b);
    if let Some(b) = s.backlog {
        part.expired_backlog = part.expired_backlog.plus(b);
        report.expired_backlog = report.expired_backlog.map(|total| total.plus(b));
    }
    if let (Some(total), Some(st)) = (&mut report.stuck, &s.stuck) {
        total.count = total.count.plus(st.count);
        total.oldest_since = match (total.oldest_since, st.oldest_since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    if let (Some(n), Some(st)) = (&mut part.stuck, &s.stuck) {
        *n = n.plus(st.count);
    }
}

/// `None` once a placement had no such time; otherwise the earliest.
fn least_recent(
    acc: Option<Option<time::OffsetDateTime>>,
    t: Option<time::OffsetDateTime>,
) -> Option<Option<time::OffsetDateTime>> {
    let acc = acc?;
    let t = t?;
    Some(Some(acc.map_or(t, |a| a.min(t))))
}

fn earliest(a: Option<KeyRef>, b: Option<KeyRef>) -> Option<KeyRef> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.expires_at < a.expires_at { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// One shard's figures, read on its worker in one read-only transaction that shows the shards to
/// the catalog, then the planner's estimate where it is wanted.
async fn read_shard(
    session: &Session,
    node: &Node,
    shard: &Shard,
    plan: &Plan,
    budget: &mut Budget,
    totals: &mut Totals,
) -> Result<PlacementStats> {
    citus::begin_catalog_reads(session).await?;
    let read = read_figures(session, &shard.table, plan, budget, totals, false)
        .await
        .with_context(|| {
            crate::output::names::on_shard(
                shard.id,
                &crate::output::names::worker(&node.host, node.port),
            )
        });
    match read {
        Ok(mut s) => {
            citus::end_catalog_reads(session).await?;
            s.backlog_estimate = estimate(session, &shard.table, plan, s.backlog).await?;
            Ok(s)
        }
        Err(e) => {
            let _ = session.rollback().await;
            Err(e)
        }
    }
}

/// The figures of the table itself, on the run's session (a plain server's one placement).
async fn read_placement(
    session: &Session,
    table: &KeyTable,
    plan: &Plan,
    budget: &mut Budget,
    totals: &mut Totals,
) -> Result<PlacementStats> {
    let mut s = read_figures(session, table, plan, budget, totals, true).await?;
    s.backlog_estimate = estimate(session, table, plan, s.backlog).await?;
    Ok(s)
}

/// The planner's estimate of the placement's expired backlog, when the count stopped at its cap
/// or there is no expiry index to count through.
async fn estimate(
    session: &Session,
    table: &KeyTable,
    plan: &Plan,
    backlog: Option<Capped>,
) -> Result<Option<u64>> {
    let wanted = plan.figures == ExpiryFigures::Estimated || backlog.is_some_and(|b| b.at_least);
    Ok(match wanted {
        true => Some(crate::db::evict::estimate_backlog(session, table).await?),
        false => None,
    })
}

/// One placement's figures, its share of the caps taken from `budget`. `whole`: the placement is
/// the table itself, whose referencing foreign keys are read to tell the keys they still
/// reference apart (a shard's are not).
async fn read_figures(
    c: &Session,
    t: &KeyTable,
    plan: &Plan,
    budget: &mut Budget,
    totals: &mut Totals,
    whole: bool,
) -> Result<PlacementStats> {
    let exact = plan.figures == ExpiryFigures::Exact;
    let sizes = queries::sizes(c, t).await?;
    let vacuum = queries::vacuum(c, t).await?;
    let oldest_live = match exact {
        true => queries::oldest_live(c, t).await?,
        false => None,
    };
    let (oldest_expired, referenced, lag) = match exact {
        true if whole => {
            let (oldest, referenced, lag) = eviction_lag(c, t, &mut totals.notes).await?;
            (oldest, referenced, Some(lag))
        }
        true => {
            let oldest = queries::oldest_expired(c, t).await?;
            let lag = oldest.as_ref().map_or(0.0, |k| k.seconds);
            (oldest, None, Some(lag))
        }
        false => (None, None, None),
    };
    let lag_estimate = match plan.figures {
        ExpiryFigures::Estimated => queries::lag_estimate(c, t).await?,
        ExpiryFigures::Exact | ExpiryFigures::Unknown => None,
    };
    let backlog = match budget.backlog_left {
        Some(left) => {
            let mut b = queries::expired_backlog(c, t, left).await?;
            budget.backlog_left = Some((left - b.count).max(0));
            // With the cap spent by the placements before it, one still examines one row: when it
            // found one, it holds at least that one (not "at least 0").
            if b.at_least && b.count == 0 {
                b.count = 1;
            }
            Some(b)
        }
        None => None,
    };
    let autovacuum = crate::db::maintenance::autovacuum(c, t).await?;
    let stuck = match plan.count_stuck {
        true => {
            let s = queries::stuck(c, t, plan.stuck_after_secs, budget.stuck_left).await?;
            budget.stuck_left = (budget.stuck_left - s.count.count).max(0);
            Some(s)
        }
        false => None,
    };
    Ok(PlacementStats {
        sizes,
        vacuum,
        autovacuum,
        oldest_live,
        oldest_expired,
        lag,
        lag_estimate,
        referenced,
        backlog,
        backlog_estimate: None,
        stuck,
    })
}

/// The oldest expired completed key evict can delete, the expired keys it leaves because a NO
/// ACTION / RESTRICT foreign key still references them, and the eviction lag. Without such a key,
/// or when none has an index on its referencing columns, the oldest expired key and its wait, as
/// evict sees it (check explains a key without an index).
async fn eviction_lag(
    c: &Session,
    table: &KeyTable,
    notes: &mut Vec<StatsNote>,
) -> Result<(Option<KeyRef>, Option<ReferencedExpired>, f64)> {
    let refs = References::new(queries::referencing_keys(c, table).await?);
    for k in refs.unprobed() {
        notes.push(StatsNote::UnprobedReference { key: k.clone() });
    }
    let probed = refs.index_backed();
    if !probed.any_blocking() {
        let oldest = queries::oldest_expired(c, table).await?;
        let lag = oldest.as_ref().map_or(0.0, |k| k.seconds);
        return Ok((oldest, None, lag));
    }
    let found = references::oldest_expired_by_reference(c, table, &probed, REFERENCED_CAP).await?;
    // The walk saw every expired key unless it stopped at its cap: then, when each key it examined
    // is still referenced, the oldest key evict can delete (if any) is younger than the newest one
    // examined, whose wait is an upper bound of the lag, not the lag. When it saw every expired
    // key and none it can delete, nothing evict can delete waits.
    let lag_at_most = found.deletable.is_none() && found.capped;
    let lag = match (&found.deletable, lag_at_most) {
        (Some(k), _) => k.seconds,
        (None, true) => found.newest_examined_seconds.unwrap_or(0.0),
        (None, false) => 0.0,
    };
    let referenced = ReferencedExpired {
        count: Capped {
            count: found.referenced_count,
            at_least: found.capped,
        },
        examined: found.examined,
        oldest: found.referenced,
        lag_at_most,
    };
    Ok((found.deletable, Some(referenced), lag))
}

/// How a stats run that gathered its report ends.
const STATS_END: RunEnd = RunEnd {
    success: true,
    reason: EndReason::Completed,
    reasons: EndReason::STATS,
    rows: None,
};

/// Run `stats`.
pub(crate) async fn run(ctx: &Context, args: &StatsArgs) -> Result<Exit> {
    let client = ctx.session().await?;
    let table = ctx.table(&client).await?;
    table.require_ttl_floor(
        "stats",
        args.force || ctx.global.short_ttl_allowed,
        &ctx.global.ttl_from,
    )?;
    let privileges = table.privileges(&client).await?;
    privileges.require_for(&table, "stats", crate::db::table::Job::Read)?;
    let placements = Placements::resolve(ctx, &client, &table).await?;
    let reading = Reading {
        stuck_after_secs: args.stuck_after.as_secs_f64(),
        backlog_cap: Some(args.backlog_cap),
        stuck_cap: STUCK_CAP,
        allow_scan: args.allow_scan,
        below_ttl: None,
    };
    let report = gather(&client, &table, &placements, reading).await?;
    ctx.metrics.finish(STATS_END, metrics(&report)).await?;
    if ctx.output.format == OutputFormat::Prometheus {
        crate::output::write_stdout(&ctx.metrics.render(&metrics(&report)))?;
    } else if ctx.prints_summary(true) {
        let d = crate::output::stats::report(&report, args.partitions);
        ctx.output.emit(&d, &crate::output::stats::json(&report)?)?;
    }
    Ok(Exit::Success)
}

/// The Prometheus figures of a report (the catalogue names them).
pub(crate) fn metrics(r: &StatsReport) -> Metrics {
    let mut m = Metrics::default();
    let s = &r.sizes;
    m.set(S::TableEstimatedRows, s.estimated_rows);
    m.set(S::TableHeapBytes, s.heap_bytes);
    m.set(S::TableToastBytes, s.toast_bytes);
    m.set(S::TableIndexBytes, s.index_bytes);
    m.set(S::TableTotalBytes, s.total_bytes);
    m.set(
        S::OldestLiveKeyAge,
        r.oldest_live.as_ref().map_or(0.0, |k| k.seconds),
    );
    // An unknown lag is no gauge at all (a 0 would say nothing waits): an absent() alert, or one
    // on idemctl_eviction_lag_known == 0, fires instead.
    if let Some(lag) = r.eviction_lag_seconds {
        m.set(S::EvictionLag, lag);
    }
    m.set(S::EvictionLagKnown, r.eviction_lag_seconds.is_some());
    // Known means measured: the planner's estimate, where the lag cannot be found, has a gauge of
    // its own and leaves idemctl_eviction_lag_known at 0.
    if let Some(estimate) = r.eviction_lag_estimated_seconds {
        m.set(S::EvictionLagEstimated, estimate);
    }
    if let Some(refd) = &r.referenced_expired {
        m.set(S::ExpiredReferencedKeys, refd.count.count);
        m.set(S::ExpiredReferencedCapped, refd.count.at_least);
        m.set(S::EvictionLagUpperBound, refd.lag_at_most);
        let oldest = refd.oldest.as_ref().map_or(0.0, |k| k.seconds);
        m.set(S::ExpiredReferencedOldest, oldest);
    }
    // A backlog that was not counted is no gauge at all (a 0 would say nothing waits); the
    // planner's estimate, where there is one, has its own.
    match (r.expired_backlog, r.expired_backlog_estimate) {
        (Some(b), _) => {
            m.set(S::ExpiredBacklogKeys, b.count);
            m.set(S::ExpiredBacklogCapped, b.at_least);
        }
        (None, Some(estimate)) => m.set(S::ExpiredBacklogEstimatedKeys, estimate),
        (None, None) => {}
    }
    if let Some(st) = &r.stuck {
        m.set(S::StuckKeys, st.count.count);
    }
    if let Some(parts) = &r.partitions {
        m.set(S::TablePartitions, parts.len());
    }
    if let Some(p) = r.default_partition() {
        m.set(S::DefaultPartitionEstimatedRows, p.estimated_rows);
    }
    m.set(S::TableDeadTuples, r.vacuum.dead_tuples);
    let o = &r.maintenance;
    m.set(S::TableDeadTupleRatio, o.dead_tuple_ratio);
    m.set(S::AutovacuumEnabled, o.autovacuum_enabled);
    if let [one] = o.relations.as_slice() {
        m.set(S::AutovacuumThreshold, one.threshold);
    }
    if let Some(s) = o.next_autovacuum_seconds {
        m.set(S::AutovacuumNext, s);
    }
    if let Some(t) = &r.recent_ttl {
        m.set(S::RecentTtlMin, t.min_seconds);
        m.set(S::RecentTtlP10, t.p10_seconds);
        m.set(S::RecentTtlMedian, t.p50_seconds);
        m.set(S::RecentTtlP90, t.p90_seconds);
        m.set(S::RecentTtlMax, t.max_seconds);
    }
    m.set(S::TableLastVacuum, r.vacuum.last_vacuum);
    m.set(S::TableLastAnalyze, r.vacuum.last_analyze);
    m
}

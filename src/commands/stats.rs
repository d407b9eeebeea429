//! `idemctl stats`: the figures an alert needs, every one of them from the catalog or a bounded,
//! index-backed statement.

use crate::db::Session;
use anyhow::Result;
use serde::Serialize;

use crate::cli::StatsArgs;
use crate::context::Context;
use crate::db::KeyTable;
use crate::db::partitions::{self, Partition};
use crate::db::queries::{self, Sizes, Stuck, Vacuum};
use crate::db::references::{self, References};
use crate::db::table::Partitioning;
use crate::domain::OutputFormat;
use crate::exit::Exit;
use crate::metrics::RunEnd;
use crate::metrics::Series as S;
use crate::output::prometheus::Metrics;
use crate::report::rows::{Capped, KeyRef};
use crate::report::run::EndReason;

/// The stats report (also the JSON document).
#[derive(Debug, Serialize)]
pub(crate) struct StatsReport {
    pub table: String,
    pub sizes: Sizes,
    pub vacuum: Vacuum,
    /// The live key that expires next, with its age since creation.
    pub oldest_live: Option<KeyRef>,
    /// The oldest expired completed key evict can delete, with how long it has waited for
    /// eviction (a key a NO ACTION / RESTRICT foreign key still references is in
    /// `referenced_expired` instead).
    pub oldest_expired: Option<KeyRef>,
    /// How the figures about expiry (oldest live key, lag, backlog, recent TTL) were found.
    pub expiry_figures: ExpiryFigures,
    /// 0 unless `expiry_figures` is exact.
    pub eviction_lag_seconds: f64,
    /// The expired completed keys evict leaves because a NO ACTION / RESTRICT foreign key still
    /// references them, among the oldest ones (absent when no such key references the table
    /// through an indexed column).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub referenced_expired: Option<ReferencedExpired>,
    /// None when not counted (check has no use for it).
    pub expired_backlog: Option<Capped>,
    /// The planner's estimate of the backlog, when the count stopped at its cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expired_backlog_estimate: Option<u64>,
    pub stuck_after_seconds: f64,
    /// None when the optional in_progress index is missing and no scan was allowed.
    pub stuck: Option<Stuck>,
    /// How the table is partitioned (null for a plain table).
    pub partitioning: Option<Partitioning>,
    /// Every leaf partition, from the catalog (null for a plain table). Bounds are filled in for a
    /// table range-partitioned on one timestamp column.
    pub partitions: Option<Vec<Partition>>,
    /// Dead tuples, autovacuum's thresholds and when it next vacuums the table (estimated).
    pub maintenance: crate::commands::maintenance::Outlook,
    /// How long recent keys live (expires_at − created_at); None for an empty table.
    pub recent_ttl: Option<crate::report::rows::RecentTtl>,
    /// Why a figure was not computed.
    pub notes: Vec<String>,
    /// On a table Citus distributes: its layout and each worker's part (the figures above are the
    /// shards' added up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub citus: Option<super::citus_stats::CitusStats>,
}

/// How stats found the figures about expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ExpiryFigures {
    /// Counted through the expiry index.
    Exact,
    /// No expiry index: the backlog is the planner's estimate; the lag and the oldest keys unknown.
    Estimated,
    /// No expiry column and no TTL: nothing about expiry is known.
    Unknown,
}

/// Expired completed keys that a NO ACTION / RESTRICT foreign key still references: evict leaves
/// them until nothing does, so they are not in the eviction lag.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReferencedExpired {
    /// How many of the `examined` oldest expired completed keys are still referenced ("at least"
    /// when the walk stopped at its cap with more expired keys beyond it; exact otherwise).
    pub count: Capped,
    pub examined: i64,
    /// The oldest of them, with how long it has waited.
    pub oldest: Option<KeyRef>,
    /// Every key examined is still referenced and more expired keys wait beyond them: the lag is
    /// unknown, and `eviction_lag_seconds` is the wait of the newest key examined, an upper bound
    /// of it (check does not call it a breach of evict). When the walk saw every expired key and
    /// none evict can delete, the lag is 0 and this is false.
    pub lag_at_most: bool,
}

/// Stats and check examine at most this many of the oldest expired keys to tell apart those
/// still referenced (an index probe each).
pub(crate) const REFERENCED_CAP: i64 = 10_000;

impl StatsReport {
    /// The default partition, if the table has one.
    pub(crate) fn default_partition(&self) -> Option<&Partition> {
        self.partitions.as_ref()?.iter().find(|p| p.is_default)
    }
}

/// Gather the report; shared with `check`. `backlog_cap`: count the expired backlog exactly up
/// to this many rows (None: do not count it); `cap` bounds the stuck count.
pub(crate) async fn gather(
    client: &Session,
    table: &KeyTable,
    stuck_after_secs: f64,
    backlog_cap: Option<i64>,
    cap: i64,
    allow_scan: bool,
    below_ttl: Option<f64>,
) -> Result<StatsReport> {
    table.require_columns()?;
    let c: &Session = client;
    let sizes = queries::sizes(c, table).await?;
    let vacuum = queries::vacuum(c, table).await?;
    let mut notes = Vec::new();
    // The figures about expiry need a TTL where keys expire by one, and the expiry index to be
    // counted; without it the backlog is the planner's estimate, and what only a walk of the index
    // tells is unknown.
    let expiry_figures = if table.profile.lacks_ttl() {
        notes.push(crate::output::stats::expiry_unknown_without_ttl(table));
        ExpiryFigures::Unknown
    } else if table.expiry_index().is_none() {
        notes.push(crate::output::stats::expiry_estimated_without_index(
            table,
            &table.expiry_index_fix(),
        ));
        ExpiryFigures::Estimated
    } else {
        ExpiryFigures::Exact
    };
    let exact = expiry_figures == ExpiryFigures::Exact;
    let oldest_live = match exact {
        true => queries::oldest_live(c, table).await?,
        false => None,
    };
    let (oldest_expired, referenced_expired, eviction_lag_seconds) = match exact {
        true => eviction_lag(c, table, &mut notes).await?,
        false => (None, None, 0.0),
    };
    let expired_backlog = match backlog_cap {
        Some(n) if exact => Some(queries::expired_backlog(c, table, n).await?),
        _ => None,
    };
    let expired_backlog_estimate = match (expired_backlog, expiry_figures) {
        (Some(b), _) if b.at_least => Some(crate::db::evict::estimate_backlog(c, table).await?),
        (_, ExpiryFigures::Estimated) => Some(crate::db::evict::estimate_backlog(c, table).await?),
        _ => None,
    };
    let recent_ttl = match exact {
        true => crate::db::maintenance::recent_ttl(c, table, below_ttl).await?,
        false => None,
    };
    let maintenance = crate::commands::maintenance::outlook(
        crate::db::maintenance::autovacuum(c, table).await?,
        recent_ttl.as_ref(),
    );
    let no_marker = !table.profile.has_in_flight_marker();
    if no_marker {
        notes.push(crate::output::stats::no_in_flight_marker(
            &table.qualified_name(),
            &table.profile.name,
        ));
    }
    let stuck = if no_marker || table.stuck_index().is_some() || allow_scan {
        Some(queries::stuck(c, table, stuck_after_secs, cap).await?)
    } else {
        notes.push(format!(
            "stuck in_progress keys not counted: that needs the optional index ({}) or --allow-scan, which reads the whole table",
            table.stuck_index_fix()
        ));
        None
    };
    let partitions = if table.partitioned {
        Some(partitions::list(c, table).await?)
    } else {
        None
    };
    if sizes.never_analyzed {
        notes.push(
            "the table has never been analyzed; the row estimate is unknown until ANALYZE runs"
                .into(),
        );
    }
    Ok(StatsReport {
        table: table.qualified_name(),
        expiry_figures,
        eviction_lag_seconds,
        referenced_expired,
        sizes,
        vacuum,
        oldest_live,
        oldest_expired,
        expired_backlog,
        expired_backlog_estimate,
        stuck_after_seconds: stuck_after_secs,
        stuck,
        partitioning: table.partitioning.clone(),
        partitions,
        maintenance,
        recent_ttl,
        notes,
        citus: None,
    })
}

/// The oldest expired completed key evict can delete, the expired keys it leaves because a NO
/// ACTION / RESTRICT foreign key still references them, and the eviction lag. Without such a key,
/// or when none has an index on its referencing columns, the oldest expired key and its wait, as
/// evict sees it (check explains a key without an index).
async fn eviction_lag(
    c: &Session,
    table: &KeyTable,
    notes: &mut Vec<String>,
) -> Result<(Option<KeyRef>, Option<ReferencedExpired>, f64)> {
    let refs = References::new(queries::referencing_keys(c, table).await?);
    for k in refs.unprobed() {
        notes.push(crate::output::unprobed_reference_note(
            k,
            "the eviction lag",
            false,
        ));
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
/// Stuck keys are counted exactly up to this many.
pub(crate) const STUCK_CAP: i64 = 100_000;

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
        args.force || ctx.global.short_ttl_allowed_by.is_some(),
        &ctx.global.ttl_from,
    )?;
    let privileges = table.privileges(&client).await?;
    privileges.require_for(&table, "stats", crate::db::table::Job::Read)?;
    let stuck_after = args.stuck_after.as_secs_f64();
    // A reference or Citus local table is read like a distributed one, on one of its placements:
    // the coordinator's table is an empty shell beside it.
    let report = match crate::db::citus::layout(&client, &table).await? {
        Some(layout) => {
            super::citus_stats::gather(
                ctx,
                &client,
                &table,
                layout,
                stuck_after,
                args.backlog_cap,
                args.allow_scan,
                None,
            )
            .await?
        }
        None => {
            gather(
                &client,
                &table,
                stuck_after,
                Some(args.backlog_cap),
                STUCK_CAP,
                args.allow_scan,
                None,
            )
            .await?
        }
    };
    ctx.metrics.finish(STATS_END, metrics(&report)).await?;
    if ctx.output.format == OutputFormat::Prometheus {
        crate::output::write_stdout(&ctx.metrics.render(&metrics(&report)))?;
    } else if ctx.prints_summary() {
        let d = crate::output::stats::report(&report, args.partitions);
        ctx.output.emit(&d, &serde_json::to_value(&report)?)?;
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
    m.set(S::EvictionLag, r.eviction_lag_seconds);
    if let Some(refd) = &r.referenced_expired {
        m.set(S::ExpiredReferencedKeys, refd.count.count);
        m.set(S::ExpiredReferencedCapped, refd.count.at_least);
        m.set(S::EvictionLagUpperBound, refd.lag_at_most);
        let oldest = refd.oldest.as_ref().map_or(0.0, |k| k.seconds);
        m.set(S::ExpiredReferencedOldest, oldest);
    }
    m.set(
        S::ExpiredBacklogKeys,
        r.expired_backlog.map_or(0, |b| b.count),
    );
    let capped = r.expired_backlog.is_some_and(|b| b.at_least);
    m.set(S::ExpiredBacklogCapped, capped);
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

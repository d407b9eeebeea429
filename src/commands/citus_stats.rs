//! `stats` on a table Citus hash-distributes: the coordinator holds an empty shell, the rows are in
//! the shards. Each shard's figures are read on its worker with the single-server statements (the
//! shard is an ordinary table there; catalog figures inside a read-only transaction that shows the
//! shards to the catalog), then added up: sizes, row estimates and tuple counts summed, the oldest
//! keys and the least recent (auto)vacuum/analyze over every shard, and the capped counts shared
//! out so the whole run examines at most the cap of rows (plus one per shard), like on one server.
//! Each worker's part is reported too.

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::shards::{self, Node, Shard};
use super::stats::StatsReport;
use crate::context::Context;
use crate::db::citus;
use crate::db::queries::{self, Sizes, Stuck, Vacuum};
use crate::db::{KeyTable, Session};
use crate::report::rows::Layout;
use crate::report::rows::{Capped, KeyRef};

/// One worker's part.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct NodeStats {
    /// `host:port` as the coordinator's metadata names it.
    pub node: String,
    pub shards: usize,
    pub estimated_rows: i64,
    pub total_bytes: i64,
    pub live_tuples: i64,
    pub dead_tuples: i64,
    /// Rows inserted into and deleted from the worker's shards since its statistics were reset.
    pub inserted_rows: i64,
    pub deleted_rows: i64,
    pub expired_backlog: Capped,
    pub eviction_lag_seconds: f64,
    /// None when stuck keys are not counted (no in_progress index and no --allow-scan).
    pub stuck: Option<Capped>,
}

/// The Citus part of the stats report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CitusStats {
    pub layout: Layout,
    pub nodes: Vec<NodeStats>,
}

/// What one shard says.
struct ShardStats {
    sizes: Sizes,
    vacuum: Vacuum,
    oldest_live: Option<KeyRef>,
    oldest_expired: Option<KeyRef>,
    backlog: Capped,
    /// The planner's estimate of the shard's expired completed keys (None when it cannot be read).
    backlog_estimate: Option<u64>,
    stuck: Option<Stuck>,
    autovacuum: Vec<crate::db::maintenance::AutovacuumRel>,
}

/// The shared-out caps: what the shards counted so far and how much of the cap is left.
struct Budget {
    backlog_left: i64,
    stuck_left: i64,
}

fn add(a: Capped, b: Capped) -> Capped {
    Capped {
        count: a.count.saturating_add(b.count),
        at_least: a.at_least || b.at_least,
    }
}

const ZERO: Capped = Capped {
    count: 0,
    at_least: false,
};

/// The stats of the distributed `table`, read shard by shard on the workers.
#[expect(
    clippy::too_many_arguments,
    reason = "the same figures stats::gather takes, plus the Citus layout and context; goes with the one stats path over placements"
)]
pub(crate) async fn gather(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    layout: Layout,
    stuck_after_secs: f64,
    cap: i64,
    allow_scan: bool,
    below_ttl: Option<f64>,
) -> Result<StatsReport> {
    table.require_columns()?;
    table.require_ttl("stats")?;
    table.require_expiry_index()?;
    // A reference table has a copy on every node, a Citus local table one on the coordinator:
    // their figures are those of one placement (the first the metadata lists, named in the
    // per-node table), not of the coordinator's empty shell.
    let one_placement = matches!(layout, Layout::Reference | Layout::CitusLocal);
    let cluster = shards::connect_placements(ctx, client, table, 1, one_placement)
        .await
        .context("failed to reach the key table's shards on the Citus workers")?;
    let count_stuck =
        allow_scan || table.stuck_index().is_some() || !table.profile.has_in_flight_marker();
    let mut budget = Budget {
        backlog_left: cap,
        stuck_left: cap,
    };
    // The TTL sample reads the first and last keys of the expiry index: through the coordinator,
    // which merges the shards' ends.
    let recent_ttl = crate::db::maintenance::recent_ttl(client, table, below_ttl).await?;
    let mut relations = Vec::new();
    let mut report = empty(table, stuck_after_secs, count_stuck);
    let mut nodes = Vec::new();
    let mut vacuumed = Some(None);
    let mut analyzed = Some(None);
    // The shards' estimates added up; None once a shard's could not be read.
    let mut estimate = Some(0u64);
    for node in &cluster.nodes {
        let session = node.session().await?;
        let mut part = NodeStats {
            node: node.name(),
            shards: node.shards.len(),
            estimated_rows: 0,
            total_bytes: 0,
            live_tuples: 0,
            dead_tuples: 0,
            inserted_rows: 0,
            deleted_rows: 0,
            expired_backlog: ZERO,
            eviction_lag_seconds: 0.0,
            stuck: count_stuck.then_some(ZERO),
        };
        for shard in &node.shards {
            let s = shard_stats(
                &session,
                node,
                shard,
                stuck_after_secs,
                count_stuck,
                &mut budget,
            )
            .await?;
            relations.extend(s.autovacuum.iter().cloned());
            let sz = &mut report.sizes;
            sz.estimated_rows += s.sizes.estimated_rows.max(0);
            sz.heap_bytes += s.sizes.heap_bytes;
            sz.toast_bytes += s.sizes.toast_bytes;
            sz.index_bytes += s.sizes.index_bytes;
            sz.total_bytes += s.sizes.total_bytes;
            sz.never_analyzed |= s.sizes.never_analyzed;
            report.vacuum.live_tuples += s.vacuum.live_tuples;
            report.vacuum.dead_tuples += s.vacuum.dead_tuples;
            report.vacuum.inserted_rows += s.vacuum.inserted_rows;
            report.vacuum.deleted_rows += s.vacuum.deleted_rows;
            // The least recent over the shards; never, when a shard never had one.
            vacuumed = least_recent(vacuumed, s.vacuum.last_vacuum);
            analyzed = least_recent(analyzed, s.vacuum.last_analyze);
            part.estimated_rows += s.sizes.estimated_rows.max(0);
            part.total_bytes += s.sizes.total_bytes;
            part.live_tuples += s.vacuum.live_tuples;
            part.dead_tuples += s.vacuum.dead_tuples;
            part.inserted_rows += s.vacuum.inserted_rows;
            part.deleted_rows += s.vacuum.deleted_rows;
            part.expired_backlog = add(part.expired_backlog, s.backlog);
            estimate = estimate.zip(s.backlog_estimate).map(|(a, b)| a + b);
            report.expired_backlog = Some(add(report.expired_backlog.unwrap_or(ZERO), s.backlog));
            if let Some(k) = &s.oldest_expired {
                part.eviction_lag_seconds = part.eviction_lag_seconds.max(k.seconds);
            }
            report.oldest_live = earliest(report.oldest_live.take(), s.oldest_live);
            report.oldest_expired = earliest(report.oldest_expired.take(), s.oldest_expired);
            if let (Some(total), Some(st)) = (&mut report.stuck, &s.stuck) {
                total.count = add(total.count, st.count);
                total.oldest_since = match (total.oldest_since, st.oldest_since) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            if let (Some(n), Some(st)) = (&mut part.stuck, &s.stuck) {
                *n = add(*n, st.count);
            }
        }
        nodes.push(part);
    }
    // Each shard is vacuumed on its own, like a partition: one relation each in the outlook.
    report.maintenance = crate::commands::maintenance::outlook(relations, recent_ttl.as_ref());
    report.recent_ttl = recent_ttl;
    report.vacuum.last_vacuum = vacuumed.flatten();
    report.vacuum.last_analyze = analyzed.flatten();
    report.eviction_lag_seconds = report.oldest_expired.as_ref().map_or(0.0, |k| k.seconds);
    report.expired_backlog_estimate = match report.expired_backlog {
        Some(b) if b.at_least => estimate,
        _ => None,
    };
    if report.sizes.never_analyzed {
        report.notes.push(
            "a shard has never been analyzed; the row estimate counts it as empty until ANALYZE runs"
                .into(),
        );
    }
    report.citus = Some(CitusStats { layout, nodes });
    Ok(report)
}

/// `None` once a shard had no such time; otherwise the earliest.
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

fn empty(table: &KeyTable, stuck_after_secs: f64, count_stuck: bool) -> StatsReport {
    let mut notes = Vec::new();
    if !count_stuck {
        notes.push(format!(
            "stuck in_progress keys not counted: that needs the optional index ({}) or --allow-scan, which reads every shard whole",
            table.stuck_index_fix()
        ));
    }
    StatsReport {
        expiry_figures: super::stats::ExpiryFigures::Exact,
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
        eviction_lag_seconds: 0.0,
        referenced_expired: None,
        expired_backlog: Some(ZERO),
        expired_backlog_estimate: None,
        stuck_after_seconds: stuck_after_secs,
        stuck: count_stuck.then_some(Stuck {
            count: ZERO,
            oldest_since: None,
        }),
        partitioning: None,
        partitions: None,
        maintenance: crate::commands::maintenance::outlook(Vec::new(), None),
        recent_ttl: None,
        notes,
        citus: None,
    }
}

/// One shard's figures, in one read-only transaction on its worker.
async fn shard_stats(
    session: &Session,
    node: &Node,
    shard: &Shard,
    stuck_after_secs: f64,
    count_stuck: bool,
    budget: &mut Budget,
) -> Result<ShardStats> {
    citus::begin_catalog_reads(session).await?;
    let result = async {
        let t = &shard.table;
        let sizes = queries::sizes(session, t).await?;
        let vacuum = queries::vacuum(session, t).await?;
        let autovacuum = crate::db::maintenance::autovacuum(session, t).await?;
        let oldest_live = queries::oldest_live(session, t).await?;
        let oldest_expired = queries::oldest_expired(session, t).await?;
        let mut backlog = queries::expired_backlog(session, t, budget.backlog_left).await?;
        budget.backlog_left = (budget.backlog_left - backlog.count).max(0);
        // With the cap spent by the shards before it, a shard still examines one row: when it
        // found one, it holds at least that one (not "at least 0").
        if backlog.at_least && backlog.count == 0 {
            backlog.count = 1;
        }
        let stuck = if count_stuck {
            let s = queries::stuck(session, t, stuck_after_secs, budget.stuck_left).await?;
            budget.stuck_left = (budget.stuck_left - s.count.count).max(0);
            Some(s)
        } else {
            None
        };
        Ok::<_, anyhow::Error>(ShardStats {
            sizes,
            vacuum,
            oldest_live,
            oldest_expired,
            backlog,
            backlog_estimate: None,
            stuck,
            autovacuum,
        })
    }
    .await
    .with_context(|| format!("shard {} on worker {}", shard.id, node.name()));
    match result {
        Ok(mut s) => {
            citus::end_catalog_reads(session).await?;
            // The planner's figure, for a total the cap leaves open ("at least N"), as on one
            // server; one EXPLAIN of the shard.
            s.backlog_estimate = crate::db::evict::estimate_backlog(session, &shard.table)
                .await
                .ok();
            Ok(s)
        }
        Err(e) => {
            let _ = session.rollback().await;
            Err(e)
        }
    }
}

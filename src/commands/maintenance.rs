//! The maintenance outlook that `stats` reports and `check` judges: dead tuples, when autovacuum
//! will next vacuum the key table, and how long recent keys live.
//!
//! Estimates. In a steady state a key table holds about (new keys per second) × TTL rows, and
//! eviction turns as many rows a second into dead tuples: the turnover is estimated as the table's
//! rows (pg_class.reltuples) divided by the median TTL of recent keys. Autovacuum vacuums a
//! relation when its dead tuples exceed autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor
//! × reltuples, so from a fresh vacuum the dead rows of eviction wait about that threshold divided
//! by the turnover (the "cycle"), and the next vacuum is (threshold − dead tuples) ÷ turnover away.
//! A partitioned table is vacuumed one leaf partition at a time; each leaf is estimated with its own
//! rows (eviction empties the oldest partitions first, so treat the leaves' figures as rough).

use std::time::Duration;

use crate::db::maintenance::AutovacuumRel;
use crate::report::check::Autovacuum;
use crate::report::rows::RecentTtl;
pub(crate) use crate::report::stats::{Outlook, RelOutlook};

/// Compute the outlook from autovacuum's figures and the recent TTL.
pub(crate) fn outlook(rels: Vec<AutovacuumRel>, ttl: Option<&RecentTtl>) -> Outlook {
    let median_ttl = ttl.map(|t| t.p50_seconds).filter(|t| *t > 0.0);
    let per_second = |reltuples: f64| {
        median_ttl
            .filter(|_| reltuples > 0.0)
            .map(|ttl| reltuples / ttl)
    };
    let relations: Vec<RelOutlook> = rels
        .into_iter()
        .map(|rel| {
            let threshold = rel.threshold();
            let rate = per_second(rel.reltuples);
            let total = (rel.live_tuples + rel.dead_tuples) as f64;
            RelOutlook {
                threshold,
                dead_tuple_ratio: if total > 0.0 {
                    rel.dead_tuples as f64 / total
                } else {
                    0.0
                },
                next_autovacuum_seconds: match (rel.enabled, rate) {
                    (false, _) => None,
                    (true, _) if rel.dead_tuples as f64 > threshold => Some(0.0),
                    (true, Some(r)) => Some((threshold - rel.dead_tuples as f64) / r),
                    (true, None) => None,
                },
                cycle_seconds: rate.map(|r| threshold / r),
                rel,
            }
        })
        .collect();
    let (live, dead) = relations.iter().fold((0i64, 0i64), |(l, d), r| {
        (l + r.rel.live_tuples, d + r.rel.dead_tuples)
    });
    let next = relations
        .iter()
        .filter_map(|r| r.next_autovacuum_seconds.map(|s| (s, &r.rel.relation)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let reltuples: f64 = relations.iter().map(|r| r.rel.reltuples).sum();
    Outlook {
        dead_tuple_ratio: if live + dead > 0 {
            dead as f64 / (live + dead) as f64
        } else {
            0.0
        },
        turnover_rows_per_second: per_second(reltuples),
        next_autovacuum_seconds: next.map(|n| n.0),
        next_autovacuum_relation: next.map(|n| n.1.clone()),
        cycle_seconds: relations
            .iter()
            .filter_map(|r| r.cycle_seconds)
            .max_by(f64::total_cmp),
        autovacuum_enabled: relations.iter().all(|r| r.rel.enabled),
        relations,
    }
}

/// Target time between autovacuums that check's suggested settings aim for, as a multiple of the
/// eviction interval.
const TARGET_INTERVALS: f64 = 6.0;
/// Cycles longer than this many eviction intervals are warned about.
pub(crate) const WARN_INTERVALS: f64 = 12.0;
/// The base threshold check suggests (so that a small table is not vacuumed constantly), and the
/// fewest dead rows worth a warning.
const SUGGESTED_THRESHOLD: f64 = 1000.0;

/// check's verdict on autovacuum: None when fine, else what is wrong with the statements that
/// fix it.
pub(crate) fn autovacuum_advice(o: &Outlook, interval: Duration) -> Option<Autovacuum> {
    let interval = interval.as_secs_f64();
    let off: Vec<&RelOutlook> = o.relations.iter().filter(|r| !r.rel.enabled).collect();
    if !off.is_empty() {
        let fix = off
            .iter()
            .map(|r| crate::db::table::autovacuum_on_fix(&r.rel.relation))
            .collect::<Vec<_>>()
            .join("\n");
        return Some(Autovacuum::Off { fix });
    }
    let limit = WARN_INTERVALS * interval;
    // Dead rows that wait matter in volume: a relation that autovacuum takes on by the time a
    // thousand rows are dead is fine however long they take to die.
    let slow: Vec<&RelOutlook> = o
        .relations
        .iter()
        .filter(|r| r.threshold > SUGGESTED_THRESHOLD && r.cycle_seconds.is_some_and(|c| c > limit))
        .collect();
    let worst = slow
        .iter()
        .filter_map(|r| r.cycle_seconds)
        .max_by(f64::total_cmp)?;
    let target = TARGET_INTERVALS * interval;
    let mut after = 0.0f64;
    let fix = slow
        .iter()
        .map(|r| {
            // Dead rows a second there (threshold ÷ cycle), and how many gather in the target time.
            let rate = r.threshold / r.cycle_seconds.unwrap_or(f64::INFINITY);
            let want = target * rate;
            let scale = ((want - SUGGESTED_THRESHOLD) / r.rel.reltuples.max(1.0) * 10_000.0)
                .floor()
                / 10_000.0;
            let scale = scale.max(0.0);
            if rate > 0.0 {
                after = after.max((SUGGESTED_THRESHOLD + scale * r.rel.reltuples) / rate);
            }
            crate::db::table::autovacuum_scale_fix(&r.rel.relation, scale, SUGGESTED_THRESHOLD)
        })
        .collect::<Vec<_>>()
        .join("\n");
    Some(Autovacuum::Slow {
        worst,
        interval,
        after,
        fix,
    })
}

//! The Prometheus catalogue: every series idemctl writes, declared once with its name, type, label
//! names and help. Commands hand figures (counts, seconds, flags, times) for a [`Series`]; the
//! catalogue names and explains them, and `output::prometheus` renders and escapes the text.
//!
//! A name or help may hold `{command}`: the run series every recording command writes about
//! itself (`idemctl_evict_duration_seconds`, `idemctl_stats_duration_seconds`, ...).

use time::OffsetDateTime;

use crate::output::prometheus::{Kind, Metrics};

/// One series as declared.
struct Def {
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
}

/// Declare the series: `Variant = kind "name" [labels] "help";`, in one list that makes both the
/// enum and its definitions.
macro_rules! catalogue {
    ($($series:ident = $kind:ident $name:literal [$($label:literal),*] $help:literal;)*) => {
        /// Every series idemctl writes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Series {
            $($series,)*
        }

        /// Every series, for the catalogue's own test.
        #[cfg(test)]
        const ALL: &[Series] = &[$(Series::$series,)*];

        impl Series {
            fn def(self) -> Def {
                match self {
                    $(Series::$series => Def {
                        name: $name,
                        kind: Kind::$kind,
                        labels: &[$($label),*],
                        help: $help,
                    },)*
                }
            }
        }
    };
}

catalogue! {
    // The run series of evict, reclaim and stats.
    LastRunTimestamp = Gauge "idemctl_{command}_last_run_timestamp_seconds" []
        "Unix time the last {command} run ended.";
    LastRunStartTimestamp = Gauge "idemctl_{command}_last_run_start_timestamp_seconds" []
        "Unix time the last {command} run started.";
    LastSuccessTimestamp = Gauge "idemctl_{command}_last_success_timestamp_seconds" []
        "Unix time the last successful {command} run ended (kept across failed runs).";
    LastRunSuccess = Gauge "idemctl_{command}_last_run_success" []
        "1 if the last {command} run succeeded, else 0.";
    Duration = Gauge "idemctl_{command}_duration_seconds" []
        "Wall time of the last {command} run, connecting included.";
    EndReason = Gauge "idemctl_{command}_end_reason" ["reason"]
        "Why the last {command} run ended (1 for the reason that applied).";

    // stats (and stats -o prometheus).
    TableEstimatedRows = Gauge "idemctl_table_estimated_rows" []
        "Estimated rows in the key table (pg_class.reltuples).";
    TableHeapBytes = Gauge "idemctl_table_heap_bytes" []
        "Size of the key table's heap in bytes.";
    TableToastBytes = Gauge "idemctl_table_toast_bytes" []
        "Size of the key table's TOAST data in bytes.";
    TableIndexBytes = Gauge "idemctl_table_index_bytes" []
        "Size of the key table's indexes in bytes.";
    TableTotalBytes = Gauge "idemctl_table_total_bytes" []
        "Total size of the key table in bytes.";
    OldestLiveKeyAge = Gauge "idemctl_oldest_live_key_age_seconds" []
        "Age of the live key that expires next (0 when no key is live).";
    EvictionLag = Gauge "idemctl_eviction_lag_seconds" []
        "How long the oldest expired completed key evict can delete has waited for eviction (0 when none waits; an upper bound when idemctl_eviction_lag_upper_bound is 1; absent when idemctl_eviction_lag_known is 0).";
    EvictionLagKnown = Gauge "idemctl_eviction_lag_known" []
        "1 when stats found the eviction lag; 0 when it is unknown (no index on the expiry column, or no expiry column and no --ttl), and idemctl_eviction_lag_seconds is then absent.";
    EvictionLagEstimated = Gauge "idemctl_eviction_lag_estimated_seconds" []
        "Where the eviction lag cannot be found (no index on the expiry column), the planner's estimate of it: how long the lowest expiry the last ANALYZE sampled has been past (0 when none); absent where the lag is found or the column has no statistics.";
    ExpiredReferencedKeys = Gauge "idemctl_expired_referenced_keys" []
        "Expired completed keys evict leaves because a NO ACTION or RESTRICT foreign key still references them, among the oldest examined (not in the eviction lag).";
    ExpiredReferencedCapped = Gauge "idemctl_expired_referenced_capped" []
        "1 when the count of expired keys still referenced stopped at its cap, so it is a lower bound.";
    EvictionLagUpperBound = Gauge "idemctl_eviction_lag_upper_bound" []
        "1 when each of the oldest expired keys examined is still referenced and more wait beyond them, so the eviction lag is an upper bound (the newest examined key's wait), not the lag.";
    ExpiredReferencedOldest = Gauge "idemctl_expired_referenced_oldest_seconds" []
        "How long the oldest expired completed key a foreign key still references has waited (0 when none).";
    ExpiredBacklogKeys = Gauge "idemctl_expired_backlog_keys" []
        "Expired completed keys not yet evicted (exact up to the cap; absent when they cannot be counted: no index on the expiry column, or no expiry column and no --ttl).";
    ExpiredBacklogEstimatedKeys = Gauge "idemctl_expired_backlog_estimated_keys" []
        "The planner's estimate of the expired completed keys not yet evicted, where they cannot be counted (no index on the expiry column); absent where they are counted.";
    ExpiredBacklogCapped = Gauge "idemctl_expired_backlog_capped" []
        "1 when the expired backlog exceeds the counting cap, so the backlog figure is a lower bound.";
    StuckKeys = Gauge "idemctl_stuck_keys" []
        "in_progress keys held longer than the stuck-after cutoff (exact up to the cap).";
    TablePartitions = Gauge "idemctl_table_partitions" []
        "Leaf partitions of the key table.";
    DefaultPartitionEstimatedRows = Gauge "idemctl_default_partition_estimated_rows" []
        "Estimated rows in the default partition (keys that fell outside every partition's range).";
    TableDeadTuples = Gauge "idemctl_table_dead_tuples" []
        "Dead tuples in the key table (pg_stat_all_tables).";
    TableDeadTupleRatio = Gauge "idemctl_table_dead_tuple_ratio" []
        "Dead tuples as a share of live and dead tuples in the key table (0 to 1).";
    AutovacuumEnabled = Gauge "idemctl_autovacuum_enabled" []
        "1 if autovacuum is on for the key table (and every partition) and the server.";
    AutovacuumThreshold = Gauge "idemctl_autovacuum_threshold_dead_tuples" []
        "Dead tuples above which autovacuum vacuums the key table (threshold + scale factor x reltuples).";
    AutovacuumNext = Gauge "idemctl_autovacuum_next_seconds" []
        "Estimated seconds until autovacuum's threshold is crossed on the key table (0: crossed), at the eviction rate of reltuples / median TTL.";
    RecentTtlMin = Gauge "idemctl_recent_ttl_min_seconds" []
        "TTL (expires_at - created_at) of recent keys, shortest: the keys that expire next and last.";
    RecentTtlP10 = Gauge "idemctl_recent_ttl_p10_seconds" []
        "TTL (expires_at - created_at) of recent keys, 10th percentile: the keys that expire next and last.";
    RecentTtlMedian = Gauge "idemctl_recent_ttl_median_seconds" []
        "TTL (expires_at - created_at) of recent keys, median: the keys that expire next and last.";
    RecentTtlP90 = Gauge "idemctl_recent_ttl_p90_seconds" []
        "TTL (expires_at - created_at) of recent keys, 90th percentile: the keys that expire next and last.";
    RecentTtlMax = Gauge "idemctl_recent_ttl_max_seconds" []
        "TTL (expires_at - created_at) of recent keys, longest: the keys that expire next and last.";
    TableLastVacuum = Gauge "idemctl_table_last_vacuum_timestamp_seconds" []
        "Unix time of the last vacuum or autovacuum (0 if never).";
    TableLastAnalyze = Gauge "idemctl_table_last_analyze_timestamp_seconds" []
        "Unix time of the last analyze or autoanalyze (0 if never).";

    // evict.
    EvictRowsEvicted = Gauge "idemctl_evict_rows_evicted" []
        "Keys deleted by the last evict run.";
    EvictRowsSkippedLocked = Gauge "idemctl_evict_rows_skipped_locked" []
        "Expired keys the last run left because live requests held them.";
    EvictRowsSkippedReferenced = Gauge "idemctl_evict_rows_skipped_referenced" []
        "Expired keys the last run left because a NO ACTION or RESTRICT foreign key still references them.";
    EvictBacklogLeft = Gauge "idemctl_evict_backlog_left_keys" []
        "Expired completed keys left after the last run (exact up to the cap).";
    EvictExpiredInProgress = Gauge "idemctl_evict_expired_in_progress_keys" []
        "Expired keys still in_progress after the last run (reclaim needed).";
    EvictPartitionsDropped = Gauge "idemctl_evict_partitions_dropped" []
        "Partitions the last run detached and dropped whole (--drop-partitions).";
    EvictRowsDroppedEstimate = Gauge "idemctl_evict_rows_dropped_estimate" []
        "Estimated keys in the partitions the last run dropped.";
    EvictReplicaLagWaits = Gauge "idemctl_evict_replica_lag_waits" []
        "Times the last run paused because a streaming replica was behind --max-replica-lag.";
    EvictReplicaLagWait = Gauge "idemctl_evict_replica_lag_wait_seconds" []
        "Seconds the last run spent paused for replica lag.";
    EvictPaceAdaptive = Gauge "idemctl_evict_pace_adaptive" []
        "1 if the last evict run paced itself from the foreground's activity, 0 if at a fixed duty cycle.";
    EvictPaceFull = Gauge "idemctl_evict_pace_full_seconds" []
        "Seconds the last evict run ran unpaced because no other session was active.";
    EvictPaceBackoff = Gauge "idemctl_evict_pace_backoff_seconds" ["reason"]
        "Seconds the last evict run spent backed off below the default duty cycle, by the signal that made it back off.";
    EvictPaceFloorCut = Gauge "idemctl_evict_pace_floor_cut_seconds" []
        "Seconds of rests the last evict run cut to keep removing keys at least 10 times as fast as the table gained them.";
    EvictPaceCeilingAdded = Gauge "idemctl_evict_pace_ceiling_added_seconds" []
        "Seconds of rests the last evict run added to remove keys at most 20 times as fast as the table gained them while other sessions were active.";
    EvictMaxRowsPerSecond = Gauge "idemctl_evict_max_rows_per_second" []
        "The last evict run's --max-rate (rows deleted per second, all sessions together).";
    EvictMaxWalBytesPerSecond = Gauge "idemctl_evict_max_wal_bytes_per_second" []
        "The last evict run's --max-wal-rate (WAL bytes per second).";
    EvictWalBytes = Gauge "idemctl_evict_wal_bytes" []
        "WAL the last evict run's batches wrote (measured with --max-wal-rate).";
    EvictRateLimitWait = Gauge "idemctl_evict_rate_limit_wait_seconds" []
        "Seconds the last evict run's claims waited for --max-rate or --max-wal-rate.";
    EvictVacuumRan = Gauge "idemctl_evict_vacuum_ran" []
        "1 if the last evict run ran VACUUM (ANALYZE) after evicting (--vacuum), else 0.";
    EvictVacuumSeconds = Gauge "idemctl_evict_vacuum_seconds" []
        "Seconds the last evict run spent in VACUUM (ANALYZE) (--vacuum).";
    EvictVacuumRelations = Gauge "idemctl_evict_vacuum_relations" []
        "Relations (the table or its leaf partitions) the last evict run vacuumed.";
    EvictVacuumFailedRelations = Gauge "idemctl_evict_vacuum_failed_relations" []
        "Relations whose VACUUM failed in the last evict run.";

    // reclaim.
    ReclaimKeysReclaimed = Gauge "idemctl_reclaim_keys_reclaimed" ["action"]
        "Stuck keys the last reclaim run reclaimed, by action.";
    ReclaimKeysLeftAlone = Gauge "idemctl_reclaim_keys_left_alone" ["reason"]
        "Keys the last reclaim run left alone, by reason (held: a live owner holds the row).";
    ReclaimStuckLeft = Gauge "idemctl_reclaim_stuck_left_keys" []
        "Stuck keys still in the table after the last reclaim sweep.";
}

impl Series {
    /// The series' name; `command` names a run series' command (ignored by the others).
    pub(crate) fn name(self, command: &str) -> String {
        self.def().name.replace("{command}", command)
    }
}

/// A figure as a sample's value: counts, seconds, ratios, flags (1 or 0) and times (Unix seconds,
/// 0 for never).
pub(crate) trait Figure {
    fn value(self) -> f64;
}

impl Figure for f64 {
    fn value(self) -> f64 {
        self
    }
}

impl Figure for u64 {
    fn value(self) -> f64 {
        self as f64
    }
}

impl Figure for i64 {
    fn value(self) -> f64 {
        self as f64
    }
}

impl Figure for usize {
    fn value(self) -> f64 {
        self as f64
    }
}

impl Figure for bool {
    fn value(self) -> f64 {
        if self { 1.0 } else { 0.0 }
    }
}

impl Figure for Option<OffsetDateTime> {
    fn value(self) -> f64 {
        self.map_or(0.0, |t| t.unix_timestamp() as f64)
    }
}

impl Metrics {
    /// Add a sample of `series`, which has no labels of its own.
    pub(crate) fn set(&mut self, series: Series, figure: impl Figure) {
        self.set_labelled(series, &[], figure);
    }

    /// Add a sample of `series` with the values of its labels, in the catalogue's order.
    pub(crate) fn set_labelled(&mut self, series: Series, values: &[&str], figure: impl Figure) {
        self.set_run("", series, values, figure);
    }

    /// Add a sample of a run series of `command` (or of any series, `command` then unused).
    pub(crate) fn set_run(
        &mut self,
        command: &str,
        series: Series,
        values: &[&str],
        figure: impl Figure,
    ) {
        let def = series.def();
        debug_assert_eq!(def.labels.len(), values.len(), "labels of {}", def.name);
        let labels: Vec<(&str, &str)> = def
            .labels
            .iter()
            .copied()
            .zip(values.iter().copied())
            .collect();
        self.add(
            &series.name(command),
            &def.help.replace("{command}", command),
            def.kind,
            &labels,
            figure.value(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names and label names are what Prometheus accepts, each name declared once.
    #[test]
    fn every_series_is_declared_once_and_well_formed() {
        let all = ALL;
        let mut names: Vec<String> = all.iter().map(|s| s.name("evict")).collect();
        for n in &names {
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{n}"
            );
        }
        names.sort();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "a name declared twice");
        for s in all {
            for l in s.def().labels {
                assert!(
                    crate::output::prometheus::RESERVED_LABELS.contains(l),
                    "{l}"
                );
            }
        }
    }
}

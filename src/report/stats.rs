//! What `stats` found: the figures of the key table (on Citus, its shards' added up, with each
//! worker's part), the maintenance outlook, and why a figure was not computed. `check` and `top`
//! read the same report.

use serde::Serialize;

use crate::report::rows::{
    AutovacuumRel, Capped, KeyRef, Layout, Partition, Partitioning, RecentTtl, ReferencingKey,
    Sizes, Stuck, Vacuum,
};

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
    /// None (null) unless `expiry_figures` is exact: without the expiry index the lag is unknown,
    /// and a 0 would read as "nothing waits".
    pub eviction_lag_seconds: Option<f64>,
    /// Where the lag cannot be found (no expiry index), the planner's estimate of it: the wait of
    /// the lowest expiry the last analyze sampled. Absent where the lag is found, or no statistics
    /// hold the expiry column; `eviction_lag_seconds` stays null beside it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_lag_estimated_seconds: Option<f64>,
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
    pub maintenance: Outlook,
    /// How long recent keys live (expires_at − created_at); None for an empty table.
    pub recent_ttl: Option<RecentTtl>,
    /// Why a figure was not computed (the output layer words them, in the JSON document too).
    #[serde(skip)]
    pub notes: Vec<StatsNote>,
    /// On a table Citus distributes: its layout and each worker's part (the figures above are the
    /// shards' added up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub citus: Option<CitusStats>,
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

impl StatsReport {
    /// The default partition, if the table has one.
    pub(crate) fn default_partition(&self) -> Option<&Partition> {
        self.partitions.as_ref()?.iter().find(|p| p.is_default)
    }
}

/// Why a figure of the report was not computed, or what it leaves out.
#[derive(Debug, Clone)]
pub(crate) enum StatsNote {
    /// The table has no expiry column and no TTL was given: nothing about expiry is known.
    ExpiryUnknownWithoutTtl {
        table: String,
        profile: String,
        created_at: String,
    },
    /// No index on the expiry column: the backlog is estimated, the lag unknown; `fix` creates it.
    ExpiryEstimatedWithoutIndex {
        table: String,
        column: String,
        fix: String,
    },
    /// The profile maps no in-flight marker: no key is ever stuck.
    NoInFlightMarker { table: String, profile: String },
    /// Stuck keys were not counted: that needs the in_progress index (`fix`) or --allow-scan,
    /// which reads the whole table (every shard whole, `shards`).
    StuckNotCounted { fix: String, shards: bool },
    /// The table (a shard, `shards`) has never been analyzed.
    NeverAnalyzed { shards: bool },
    /// The eviction lag includes keys this foreign key still references, not told apart.
    UnprobedReference { key: ReferencingKey },
}

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

/// One relation's outlook.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RelOutlook {
    #[serde(flatten)]
    pub rel: AutovacuumRel,
    /// Dead tuples above which autovacuum vacuums it.
    pub threshold: f64,
    /// Dead tuples ÷ (live + dead).
    pub dead_tuple_ratio: f64,
    /// Estimated seconds until autovacuum's threshold is crossed (0: crossed, waiting for a worker;
    /// None: autovacuum is off, or no turnover to estimate from).
    pub next_autovacuum_seconds: Option<f64>,
    /// Estimated seconds from a vacuum to the next: how long eviction's dead rows wait at most.
    pub cycle_seconds: Option<f64>,
}

/// The whole table's outlook.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Outlook {
    /// Dead tuples ÷ (live + dead), over the whole table.
    pub dead_tuple_ratio: f64,
    /// Estimated rows evicted (turned dead) per second: reltuples ÷ the median recent TTL.
    pub turnover_rows_per_second: Option<f64>,
    /// The soonest estimated autovacuum of any relation, and which.
    pub next_autovacuum_seconds: Option<f64>,
    pub next_autovacuum_relation: Option<String>,
    /// The longest estimated cycle of any relation.
    pub cycle_seconds: Option<f64>,
    /// False when autovacuum is off for the server or any relation.
    pub autovacuum_enabled: bool,
    pub relations: Vec<RelOutlook>,
}

//! What an evict run reports beside its totals: why it ended, its rate caps and progress, the
//! partitions it dropped or kept, the replicas it waited for and what it vacuumed; the run's
//! summary and the dry run's findings themselves, the pace's decisions and, on Citus, what each
//! worker did.

use std::collections::BTreeMap;

use crate::report::timestamp::Timestamp;
use serde::Serialize;

use crate::report::rows::{Capped, Layout};
use crate::report::run::EndReason;

/// The worst replica at one reading (worded by the output layer).
#[derive(Debug, Clone)]
pub(crate) struct Lagging {
    pub name: String,
    pub lag_seconds: f64,
    pub behind_bytes: i64,
}

/// The replica that ended a run: how far behind it was when evict gave up, after how long a wait.
#[derive(Debug, Clone)]
pub(crate) struct GaveUp {
    pub(crate) worst: Lagging,
    pub(crate) waited_seconds: f64,
}

/// A partition that went (or, in a dry run, would go).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Dropped {
    pub name: String,
    pub bound: String,
    /// `pg_class.reltuples` before the drop: an estimate.
    pub estimated_rows: i64,
    pub total_bytes: i64,
}

/// A partition that was tried and left to the batches, and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Kept {
    pub name: String,
    /// Worded by the output layer, in the summary and the JSON alike.
    pub reason: KeptBecause,
}

/// A signal the adaptive pace watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PaceSignal {
    Activity,
    OwnBatchTime,
    Interval,
    /// The table's insert rate, the floor of the removal rate.
    InsertedRows,
}

/// Why --drop-partitions left a partition to the batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeptBecause {
    NotOwner,
    HoldsInProgress,
    HoldsUnexpired,
    /// Its locks were not granted within the lock timeout (in milliseconds).
    LocksNotGranted {
        ms: u128,
    },
    Dependents,
    RunStopped,
    EarlierLocksNotGranted,
}

/// Why --vacuum did not run (worded by the output layer, in the summary and the JSON alike).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Skipped {
    /// The run ended with an error or was interrupted.
    RunEnded(EndReason),
    /// The run evicted `evicted` keys, not more than `min_rows` (--vacuum-min-rows).
    TooFew { evicted: u64, min_rows: u64 },
    /// No session was left to run it on.
    NoSession,
}

/// What --vacuum did.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VacuumReport {
    /// --vacuum-min-rows.
    pub min_rows: u64,
    /// Whether VACUUM ran (the run evicted more than min_rows and ended well).
    pub ran: bool,
    /// Why it did not run.
    pub skipped: Option<Skipped>,
    pub relations: Vec<Vacuumed>,
    pub seconds: f64,
}

/// Where the caps stand during a run (the output layer words it for the progress bar).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateProgress {
    /// --max-rate, rows per second.
    pub max_rows_per_second: Option<f64>,
    /// --max-wal-rate, bytes per second.
    pub max_wal_bytes_per_second: Option<f64>,
    /// WAL the batches wrote per second so far (0 without --max-wal-rate).
    pub wal_bytes_per_second: f64,
}

/// What the caps did, for the summary, JSON and metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct RateReport {
    /// --max-rate, rows per second.
    pub max_rows_per_second: Option<f64>,
    /// --max-wal-rate, bytes per second.
    pub max_wal_bytes_per_second: Option<f64>,
    /// From the first claim to the end of the last batch: the stretch the caps held.
    pub seconds: f64,
    /// Rows deleted per second over it.
    pub rows_per_second: f64,
    /// WAL the batches wrote (measured with --max-wal-rate only).
    pub wal_bytes: Option<u64>,
    /// wal_bytes per second over the same stretch.
    pub wal_bytes_per_second: Option<f64>,
    /// Claims that waited for the caps, and how long in all.
    pub waits: u64,
    pub wait_seconds: f64,
}

/// One relation's VACUUM.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Vacuumed {
    pub relation: String,
    pub seconds: f64,
    /// Why it failed (it was rolled back; the next relation was still tried).
    pub error: Option<String>,
}
/// How the run's keys expire (also in the JSON): at the table's expiry column, or a TTL after
/// `created_at`, with where that TTL came from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Expiry {
    /// The expiry column, or the column the TTL is added to.
    pub column: String,
    /// The TTL (None when the table has an expiry column).
    pub ttl_seconds: Option<f64>,
    /// Where the TTL (applied or not) came from: `--ttl`, `IDEMCTL_TTL` or `ttl in config file
    /// PATH`.
    pub ttl_from: Option<String>,
    /// A TTL given for a table with an expiry column, where it does not apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ignored_seconds: Option<f64>,
}

/// The run's summary (also the JSON document).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EvictReport {
    pub table: String,
    /// How keys expire: the expiry column, or created_at + the TTL and where it came from.
    pub expiry: Expiry,
    pub end_reason: EndReason,
    pub rows_evicted: u64,
    /// Of rows_evicted, those deleted after the last point known durable (their commits are
    /// asynchronous): a crash or a failover may bring them back, and the next run deletes them
    /// again. 0 after a run that ended well (its end is a durable point).
    pub rows_unconfirmed: u64,
    pub batches: u64,
    pub elapsed_seconds: f64,
    pub rows_per_second: f64,
    /// Expired completed rows left because a live request held them.
    pub skipped_locked: u64,
    /// Expired completed rows left because they are younger than --min-age.
    pub skipped_min_age: u64,
    /// Expired completed rows left because a foreign key with ON DELETE NO ACTION or RESTRICT
    /// still references them (evict leaves them until nothing does).
    pub skipped_referenced: u64,
    /// Batches that fell back to skipping locked rows.
    pub lock_fallbacks: u64,
    /// Expired rows still in_progress (reclaim's job), counted after the run.
    pub expired_in_progress_left: Option<Capped>,
    /// Expired completed rows still present after the run.
    pub backlog_left: Option<Capped>,
    pub batch_ms_p50: f64,
    pub batch_ms_p99: f64,
    pub batch_ms_max: f64,
    /// Rows asked of a batch: median and largest (fixed with --batch-size, else paced by
    /// --batch-time).
    pub batch_rows_p50: u32,
    pub batch_rows_max: u32,
    /// Partitions detached and dropped whole (--drop-partitions).
    pub dropped_partitions: Vec<Dropped>,
    /// Sum of the dropped partitions' row estimates (pg_class.reltuples).
    pub rows_dropped_estimate: i64,
    /// Partitions --drop-partitions tried and left to the batches, with the reason.
    pub partitions_kept: Vec<Kept>,
    /// --max-replica-lag in seconds (None without it).
    pub replica_lag_limit_seconds: Option<f64>,
    /// Pauses because a replica was behind --max-replica-lag, and their total length.
    pub replica_lag_waits: u64,
    pub replica_lag_wait_seconds: f64,
    /// The largest replica lag measured during the run (0 without --max-replica-lag).
    pub replica_lag_max_seconds: f64,
    /// How the run was paced, and the adaptive pace's decisions (on a Citus cluster: the workers'
    /// paces added up).
    pub pace: PaceReport,
    /// On a table Citus distributes: its layout and what each worker did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub citus: Option<CitusReport>,
    /// --max-rate and --max-wal-rate, and what they did (None without either).
    pub rate_limit: Option<RateReport>,
    /// --vacuum: what it did (None without it).
    pub vacuum: Option<VacuumReport>,
    /// Without an expiry index: the unique index walked and what the walk read (None when the
    /// batches went through the expiry index).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub walk: Option<WalkReport>,
}

/// What a walk of a unique index read, beside what it deleted.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WalkReport {
    pub index: String,
    /// Index entries (rows) the pages examined.
    pub rows_examined: u64,
    /// The walk follows age and stopped at a page in which nothing had expired.
    pub stopped_early: bool,
}

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

/// What a dry run found and would do (also the JSON document): the candidates, the batch
/// statement and its plan, a sample of the keys, and with --drop-partitions or --max-replica-lag
/// the partitions it would drop and the replicas it would watch.
#[derive(Debug, Serialize)]
pub(crate) struct DryRunReport {
    pub(crate) table: String,
    pub(crate) dry_run: bool,
    /// How keys expire: the expiry column, or created_at + the TTL and where it came from.
    pub(crate) expiry: Expiry,
    pub(crate) would_evict: Capped,
    /// Candidates the run would leave because a NO ACTION / RESTRICT foreign key still references
    /// them (absent when none references the table through an indexed column).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) would_skip_referenced: Option<Capped>,
    #[serde(serialize_with = "to_the_second")]
    pub(crate) oldest_candidate: Option<Timestamp>,
    #[serde(serialize_with = "to_the_second")]
    pub(crate) newest_candidate: Option<Timestamp>,
    pub(crate) batch_size: Option<u32>,
    pub(crate) batch_sizing: String,
    pub(crate) statement: String,
    pub(crate) plan: Vec<String>,
    pub(crate) sample: Vec<crate::report::rows::SampleKey>,
    pub(crate) held_back_by_min_age: i64,
    pub(crate) held_back_sample: Vec<crate::report::rows::SampleKey>,
    /// --min-age was given.
    #[serde(skip)]
    pub(crate) min_age: bool,
    /// Expired keys the --min-age count walked, and whether it stopped at its cap.
    #[serde(skip)]
    pub(crate) walked: i64,
    #[serde(skip)]
    pub(crate) walked_all: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) would_drop_partitions: Option<Vec<Dropped>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rows_dropped_estimate: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partitions_kept: Option<Vec<Kept>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) replicas: Option<Vec<crate::report::rows::Replica>>,
    /// What the figures leave out, such as the keys of a NO ACTION / RESTRICT foreign key that
    /// are not probed (counted in would_evict).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) notes: Vec<String>,
    /// Without an expiry index: the walk a run would take, read page by page (None when the
    /// batches go through the expiry index).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) walk: Option<WalkPreview>,
}

/// The dry run's walk of a unique index: the pages a run would read, as it would read them (same
/// pages, same budgets), and why it would stop.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WalkPreview {
    pub index: String,
    /// Index entries a page reads at most.
    pub page_size: u32,
    pub pages: u64,
    /// Index entries (rows) the pages read.
    pub rows_examined: u64,
    /// The walk follows age and would stop at a page in which nothing has expired.
    pub stopped_early: bool,
    /// Why the walk would end: drained, or a budget (--max-rows, --max-batches, --max-runtime).
    pub end_reason: EndReason,
}

fn to_the_second<S: serde::Serializer>(
    t: &Option<Timestamp>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&t.to_the_second()),
        None => s.serialize_none(),
    }
}

/// The paced removal rate never falls below this multiple of the table's insert rate.
pub(crate) const INSERT_MULTIPLE: f64 = 10.0;
/// While the foreground is present, the pace removes keys at most this multiple of the table's
/// insert rate (the rest is lengthened to hold it), whatever duty cycle the signals allow: beside
/// a workload that is not saturating the server its tail latency paid for every batch beyond
/// that (bench/run's pace phase at half load), while the backlog still shrinks at 19 times the
/// rate it grows.
pub(crate) const PRESENT_MULTIPLE: f64 = 20.0;

/// Why evict backed off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reason {
    /// Other sessions' statements wait on WAL, I/O or locks more than before.
    ForegroundWaiting,
    /// Other sessions' statements run longer than before.
    ForegroundSlower,
    /// evict's own batches run slower than before.
    BatchesSlower,
}

impl Reason {
    pub(crate) const ALL: [Reason; 3] = [
        Reason::ForegroundWaiting,
        Reason::ForegroundSlower,
        Reason::BatchesSlower,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::ForegroundWaiting => "foreground_waiting",
            Reason::ForegroundSlower => "foreground_slower",
            Reason::BatchesSlower => "batches_slower",
        }
    }
}

/// Where the pace stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum State {
    /// The foreground is idle: unpaced, every session, catch-up-sized batches.
    Full,
    /// The foreground is present and nothing says it suffers.
    Paced,
    /// Recovering from a back-off, for this reason.
    BackingOff(Reason),
}

/// What the controller decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Decision {
    pub state: State,
    /// Percent of wall time a worker may spend in statements.
    pub duty: f64,
}

impl Decision {
    pub(crate) fn full(&self) -> bool {
        self.state == State::Full
    }
}

/// The adaptive pace in effect, for the progress bar.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PaceStatus {
    pub decision: Decision,
    /// The removal rate the insert-rate floor holds (rows/s), while paced.
    pub floor_rows_per_second: Option<f64>,
}

/// The pace decisions of a run, for the summary, JSON and metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct PaceReport {
    /// "adaptive" or "fixed".
    pub mode: &'static str,
    /// The fixed duty cycle (fixed mode).
    pub duty_cycle: Option<u8>,
    /// --pause: the rest added after every batch on top of the duty cycle's (fixed mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_seconds: Option<f64>,
    /// Why an adaptive pace was not possible (fixed mode by fallback).
    pub fallback: Option<String>,
    /// What the adaptive pace watched (worded by the output layer, in the JSON too).
    pub signals: Vec<PaceSignal>,
    pub samples: u64,
    /// Wall time unpaced because the foreground was idle.
    pub full_seconds: f64,
    /// Wall time paced at or climbing towards the default duty cycle.
    pub paced_seconds: f64,
    /// Wall time spent backed off below it, in all and by reason.
    pub backoff_seconds: f64,
    pub backoff_seconds_by_reason: BTreeMap<Reason, f64>,
    /// Back-offs (halvings of the duty cycle), by reason.
    pub backoffs_by_reason: BTreeMap<Reason, u64>,
    /// The lowest duty cycle the run went down to, in percent.
    pub min_duty_cycle: Option<f64>,
    /// The table's insert rate last measured (rows/s), when the floor watches it.
    pub insert_rate: Option<f64>,
    /// Rest time the insert-rate floor cut (seconds, summed over workers).
    pub floor_cut_seconds: f64,
    /// Rest time the insert-rate ceiling added (seconds, summed over workers).
    pub ceiling_added_seconds: f64,
}

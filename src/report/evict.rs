//! What an evict run reports beside its totals: why it ended, its rate caps and progress, the
//! partitions it dropped or kept, the replicas it waited for and what it vacuumed.

use serde::Serialize;

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
    pub reason: String,
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

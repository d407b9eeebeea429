//! Why a run ended, for every command: one list of reasons, one name each, which is both the JSON
//! `end_reason` and the `reason` label of the run series.

use serde::Serialize;

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EndReason {
    /// Nothing was left to do.
    Drained,
    /// A command that runs once finished (stats).
    Completed,
    /// evict: --max-runtime ran out.
    TimeBudget,
    /// evict: --max-rows reached.
    RowBudget,
    /// evict: --max-batches reached.
    BatchBudget,
    /// evict: a streaming replica stayed behind --max-replica-lag for --max-replica-wait, or until
    /// --max-runtime ran out.
    ReplicaLag,
    /// reclaim: --limit reached.
    Limit,
    /// SIGINT or SIGTERM, after the batch in flight.
    Interrupted,
    /// A failure ended the run.
    Error,
    /// A run that failed before it began: no connection.
    CannotConnect,
    /// ... the role lacks a privilege.
    PermissionDenied,
    /// ... the table does not exist.
    TableNotFound,
    /// ... another run holds the table's maintenance lock.
    LockBusy,
}

impl EndReason {
    /// The reasons of an evict run.
    pub(crate) const EVICT: &[EndReason] = &[
        EndReason::Drained,
        EndReason::TimeBudget,
        EndReason::RowBudget,
        EndReason::BatchBudget,
        EndReason::ReplicaLag,
        EndReason::Interrupted,
        EndReason::Error,
    ];
    /// The reasons of a writing reclaim run.
    pub(crate) const RECLAIM: &[EndReason] =
        &[EndReason::Drained, EndReason::Limit, EndReason::Interrupted];
    /// The reasons of a stats run.
    pub(crate) const STATS: &[EndReason] = &[EndReason::Completed];
    /// How any run can fail before it begins (or end by a failure), which every run series lists.
    pub(crate) const FAILURES: &[EndReason] = &[
        EndReason::CannotConnect,
        EndReason::PermissionDenied,
        EndReason::TableNotFound,
        EndReason::LockBusy,
        EndReason::Interrupted,
        EndReason::Error,
    ];

    /// Its name: the JSON value and the metrics label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EndReason::Drained => "drained",
            EndReason::Completed => "completed",
            EndReason::TimeBudget => "time_budget",
            EndReason::RowBudget => "row_budget",
            EndReason::BatchBudget => "batch_budget",
            EndReason::ReplicaLag => "replica_lag",
            EndReason::Limit => "limit",
            EndReason::Interrupted => "interrupted",
            EndReason::Error => "error",
            EndReason::CannotConnect => "cannot_connect",
            EndReason::PermissionDenied => "permission_denied",
            EndReason::TableNotFound => "table_not_found",
            EndReason::LockBusy => "lock_busy",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EndReason;

    #[test]
    fn each_name_is_the_json_value() {
        for r in [
            EndReason::EVICT,
            EndReason::RECLAIM,
            EndReason::STATS,
            EndReason::FAILURES,
        ]
        .concat()
        {
            let json = serde_json::to_value(r).unwrap();
            assert_eq!(json, r.as_str(), "{r:?}");
        }
    }
}

/// How a run ended, for the run series.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunEnd {
    pub success: bool,
    /// One of `reasons`.
    pub reason: EndReason,
    /// Every end reason of the command (the run series sets one of them to 1, the others to 0,
    /// and lists `EndReason::FAILURES` too).
    pub reasons: &'static [EndReason],
    /// What the run did, for the line said when its metrics cannot be written: the rows it
    /// changed and how it says so ("keys deleted"); None for a run that changes nothing.
    pub rows: Option<(u64, &'static str)>,
}

/// Metrics that could not be written at the end of a run whose work was done: the line to say,
/// and the exit code that tells it from a failed run ([`crate::exit::Exit::MetricsUnwritten`]).
#[derive(Debug, Clone)]
pub(crate) struct Unwritten {
    pub command: &'static str,
    pub end: RunEnd,
    /// The file and why it could not be written.
    pub why: String,
}

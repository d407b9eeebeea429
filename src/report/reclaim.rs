//! reclaim's reports, which the output layer words: the preview, the summary of a writing run with
//! the keys it reclaimed and the plan rows it left alone, and how a batch ended a run.

use std::time::Duration;

use crate::report::timestamp::Timestamp;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use crate::domain::ReclaimAction;
use crate::report::rows::{Capped, Filter, Scope};
use crate::report::run::EndReason;

/// Why a batch ended a writing run (the batches before it are committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchEnd {
    /// It met a row a live transaction holds on a table written through the Citus coordinator,
    /// past its patience, and was rolled back.
    HeldReference,
    /// It could not get a lock in `tries` tries, and was rolled back.
    LockTimeout { tries: u32 },
    /// Any other failure the server reported; it was rolled back.
    Failed,
    /// Its connection was lost: the batch in flight (`in_flight` keys at most) may or may not
    /// have committed.
    Lost { in_flight: u64 },
    /// Its connection was lost inside its transaction before its COMMIT was sent: it never
    /// committed.
    LostBeforeCommit,
    /// It committed, but the keys it took could not be read from its answer.
    CommittedUnread,
    /// A batch of one key still exceeded statement_timeout (`statement_timeout`) after the
    /// batches were made smaller; it was rolled back.
    SmallestTimedOut { statement_timeout: Duration },
}

/// A writing run ended by a batch: which batch, and what the earlier ones reclaimed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchFailed {
    /// The failed batch's number, from 1.
    pub(crate) batch: u64,
    /// Keys reclaimed by the committed batches before it.
    pub(crate) reclaimed: u64,
    pub(crate) end: BatchEnd,
}

/// What makes a plan file one that apply refuses.
#[derive(Debug, Clone)]
pub(crate) enum PlanProblem {
    /// It is not the JSON of a plan (the parser's words).
    Unparsed(String),
    /// Its schema_version (None: missing) is not one this idemctl reads (`read`, oldest first).
    Version { found: Option<u32>, read: Vec<u32> },
    /// older_than_seconds is not a positive number.
    OlderThan,
    /// The status is not an HTTP status.
    Status(i32),
    /// Action fail without a JSON object as body.
    FailWithoutBody,
    /// A body with action delete or release.
    BodyWithoutFail,
    /// A key (of a tenant, or of none) listed twice.
    KeyTwice {
        key: String,
        api_key_id: Option<String>,
    },
    /// A row whose tenant does not fit the table (`api_key_id` None: a row without one).
    RowTenantUnfit {
        table: Box<crate::report::table::Table>,
        key: String,
        api_key_id: Option<String>,
    },
}

/// A stuck key as the preview lists it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Candidate {
    /// None on a table without a tenant column (null in JSON).
    pub(crate) api_key_id: Option<String>,
    /// Each scope column's value, by column (null in JSON on a table without a scope).
    pub(crate) scope: Option<Scope>,
    pub(crate) key: String,
    /// None where the table has no such column or the row holds NULL (null in JSON).
    pub(crate) request_method: Option<String>,
    pub(crate) request_path: Option<String>,
    pub(crate) locked_at: Option<Timestamp>,
    /// None where the row holds none (a nullable created_at column).
    pub(crate) created_at: Option<Timestamp>,
    /// locked_at, or created_at where the owner never set locked_at.
    pub(crate) held_since: Timestamp,
    /// Which column `held_since` comes from.
    pub(crate) held_since_column: &'static str,
    pub(crate) age_seconds: f64,
}

/// What a preview found and would do: the `--dry-run` and `--plan` report (also the JSON
/// document).
#[derive(Debug, Serialize)]
pub(crate) struct PreviewReport {
    pub(crate) table: String,
    pub(crate) dry_run: bool,
    pub(crate) older_than_seconds: f64,
    /// The filters (null without any).
    #[serde(serialize_with = "filter_or_null")]
    pub(crate) filter: Filter,
    /// None when the profile allows no action (the preview only lists the keys).
    pub(crate) action: Option<ReclaimAction>,
    pub(crate) response_status: Option<i32>,
    pub(crate) response_body: Option<Value>,
    pub(crate) limit: Option<u64>,
    pub(crate) would_reclaim: Capped,
    pub(crate) rows_listed: usize,
    pub(crate) listing_truncated: bool,
    pub(crate) plan_file: Option<String>,
    /// The database clock, to the second (UTC).
    #[serde(with = "crate::report::timestamp")]
    pub(crate) db_now: OffsetDateTime,
    pub(crate) rows: Vec<Candidate>,
    /// The status `--action fail` stores.
    #[serde(skip)]
    pub(crate) status: i32,
}

/// A key identified for the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KeyId {
    /// None on a table without a tenant column (null in JSON).
    pub(crate) api_key_id: Option<String>,
    /// Each scope column's value, by column (null in JSON on a table without a scope).
    pub(crate) scope: Option<Scope>,
    pub(crate) key: String,
}

/// A plan row that apply left alone, and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LeftAlone {
    /// None on a table without a tenant column (null in JSON).
    pub(crate) api_key_id: Option<String>,
    /// Each scope column's value, by column (null in JSON on a table without a scope).
    pub(crate) scope: Option<Scope>,
    pub(crate) key: String,
    /// gone, filtered, completed, other_state, changed, too_young or held.
    pub(crate) reason: String,
    /// The row's state when apply looked, if it still exists.
    pub(crate) state: Option<String>,
}

/// The summary of a writing run (also the JSON document).
#[derive(Debug, Serialize)]
pub(crate) struct ReclaimReport {
    pub(crate) table: String,
    pub(crate) action: ReclaimAction,
    pub(crate) older_than_seconds: f64,
    /// The filters the run was limited to (null without any).
    #[serde(serialize_with = "filter_or_null")]
    pub(crate) filter: Filter,
    pub(crate) response_status: Option<i32>,
    /// `--action fail`: each failed key is kept at least this long from when it was failed.
    pub(crate) keep_failed_for_seconds: Option<f64>,
    pub(crate) plan_file: Option<String>,
    pub(crate) end_reason: EndReason,
    pub(crate) rows_reclaimed: u64,
    pub(crate) batches: u64,
    pub(crate) elapsed_seconds: f64,
    /// Stuck keys skipped because their owner holds the row lock (it is alive).
    pub(crate) skipped_live_owner: Option<Capped>,
    /// Stuck keys still in the table after the run (sweep only).
    pub(crate) stuck_left: Option<Capped>,
    /// Plan rows apply did not reclaim, with why.
    pub(crate) left_alone: Vec<LeftAlone>,
    /// The keys reclaimed (the first LIST_CAP).
    pub(crate) reclaimed: Vec<KeyId>,
    pub(crate) reclaimed_listing_truncated: bool,
    /// The table's scope columns, which name each listed key's scope values.
    #[serde(skip)]
    pub(crate) scope_columns: Vec<String>,
}

/// The filters for JSON output: null without any.
fn filter_or_null<S: serde::Serializer>(f: &Filter, s: S) -> std::result::Result<S::Ok, S::Error> {
    if f.is_empty() {
        s.serialize_none()
    } else {
        f.serialize(s)
    }
}

/// An action as flags, plans, archives and metrics name it.
pub(crate) fn action_name(a: ReclaimAction) -> &'static str {
    match a {
        ReclaimAction::Delete => "delete",
        ReclaimAction::Fail => "fail",
        ReclaimAction::Release => "release",
    }
}

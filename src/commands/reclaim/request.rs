//! What a reclaim run is asked to do: the mode and the request, validated before connecting, and
//! the bounds every mode keeps.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::plan::Plan;
use crate::db::reclaim as reclaim_db;
use crate::domain::ReclaimAction;
use crate::report::rows::Layout;

/// How long any reclaim statement may wait for a lock: SKIP LOCKED never waits on rows, so this
/// only bounds waits on the table itself (DDL), which must not stall the API behind us.
pub(super) const ROW_LOCK_WAIT: Duration = Duration::from_millis(5);
/// The preview, a plan and the summary's key list stop here: enough to review at once, and it keeps
/// idemctl's memory flat (a 10,000-row listing took 30-50 MB; 2,000 rows stay near 6 MB).
pub(super) const LIST_CAP: i64 = 2_000;
/// Counts of stuck keys stop here ("at least N"), so that every statement stays bounded by this
/// cap rather than by the table: a run reclaims in batches whatever the count says.
pub(super) const COUNT_CAP: i64 = 10_000;

/// What this run does, decided from the flags (and the plan file) before connecting.
pub(super) enum Mode {
    /// List (and with a path, write a plan); change nothing.
    Preview(Option<PathBuf>),
    /// Find stuck keys and reclaim them batch by batch.
    Sweep,
    /// Reclaim exactly the rows of a plan.
    Apply(PathBuf, Box<Plan>),
}

/// The validated request.
pub(super) struct Request {
    pub(super) mode: Mode,
    pub(super) older_than: f64,
    pub(super) action: ReclaimAction,
    pub(super) status: i32,
    /// The stored response body (`--action fail` only).
    pub(super) body: Option<Value>,
    /// Reclaim (or list) at most this many keys.
    pub(super) limit: Option<u64>,
    /// `--action fail`: keep a failed key at least this many seconds from now (0 = as it is).
    pub(super) keep_failed: f64,
    /// Only keys of this tenant and route (`--api-key-id`, `--path`, `--method`, and a plan's).
    pub(super) filter: reclaim_db::Filter,
    /// How the batches reach the table's rows (set once connected: a Citus reference or local
    /// table is changed through the coordinator, its rows found by the key's identity).
    pub(super) route: reclaim_db::Route,
    /// How Citus places the table's rows (None on a plain server), resolved once connected.
    pub(super) layout: Option<Layout>,
    /// The profile allows no action: a dry run previews the stuck keys and says so.
    pub(super) no_action: bool,
}

pub(crate) use crate::report::reclaim::action_name;

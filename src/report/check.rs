//! What `check` found, one finding per line of its report: how each check came out and the typed
//! facts behind it. src/output/check.rs words them (the check's name, the detail, the fix).

use serde::Serialize;

use crate::domain::ReclaimAction;
use crate::report::citus::Outcome;
use crate::report::db::{Accepted, FoundType, MatchReason, TimeProblem, Writability};
use crate::report::rows::{Capped, RecentTtl, ReferencingKey};
use crate::report::stats::ReferencedExpired;

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    /// Not required, but worth knowing (an optional index, a privilege a command not run here needs).
    Note,
    /// Something idemctl needs is missing or wrong.
    Fail,
    /// An alert threshold is breached.
    Breached,
    /// Works, but a setting makes it worse than it should be (with the statement that fixes it).
    Warn,
}

/// One line of the check report.
#[derive(Debug)]
pub(crate) struct Finding {
    pub status: Status,
    pub found: Found,
}

impl From<(Status, Found)> for Finding {
    fn from((status, found): (Status, Found)) -> Finding {
        Finding { status, found }
    }
}

impl Finding {
    pub(crate) fn new(status: Status, found: Found) -> Finding {
        Finding { status, found }
    }
}

/// An index as a finding names it.
#[derive(Debug, Clone)]
pub(crate) struct IndexRef {
    pub name: String,
    /// Its key columns as PostgreSQL prints them.
    pub columns: Vec<String>,
}

/// What a check found.
#[derive(Debug)]
pub(crate) enum Found {
    /// How idemctl reaches its server sessions (`route`: None when not determined), and whether
    /// it owns them (so evict and reclaim hold a per-table lock).
    Connection {
        route: Option<crate::domain::Route>,
        owns_session: bool,
    },
    /// Whether evict and reclaim can write on this session.
    Writes { writability: Writability },
    /// What the table is: its profile, columns and indexes, its partitioning.
    Structure(Structure),
    /// A foreign key that references the key table, and what it means for evict.
    Referencing {
        key: ReferencingKey,
        /// The role, quoted for a GRANT.
        grantee: String,
        case: Referencing,
    },
    /// Whether evict --drop-partitions is available.
    DropPartitions(DropPartitions),
    /// What a command needs against what the role has.
    Privileges(Privileges),
    /// A threshold row not checked: the statistics cannot be read safely until the failing
    /// checks pass (`blocking`: their places in the report's findings).
    NotChecked {
        threshold: Threshold,
        blocking: Vec<usize>,
    },
    /// The eviction lag against --max-eviction-lag.
    Lag(Lag),
    /// Stuck keys (older than `after` seconds) against --max-stuck.
    Stuck { after: f64, stuck: Stuck },
    /// Autovacuum against the eviction interval.
    Autovacuum(Autovacuum),
    /// Recent keys' TTL against --min-ttl.
    RecentTtl(TtlCheck),
    /// A check on the Citus workers of a distributed table.
    Citus(Outcome),
}

/// What the table is.
#[derive(Debug)]
pub(crate) enum Structure {
    /// The profile chosen, and why.
    Profile {
        name: String,
        because: Option<MatchReason>,
    },
    /// Every column the profile names is there with a usable type.
    ColumnsOk { profile: String },
    /// A column of the profile is missing (`found` None) or has a type it cannot use.
    Column {
        column: String,
        profile: String,
        found: Option<FoundType>,
        expected: Accepted,
        /// The table's column of that name but for case (quoted), when one is missing.
        other_case: Option<String>,
    },
    /// The time columns cannot be compared as they are.
    TimeColumns { why: TimeProblem },
    /// No expiry column and no TTL.
    NoExpiry { created_at: String },
    /// The expiry index (None: missing; `walked`: the index evict walks instead). `ttl`: keys
    /// expire by a TTL (the index is one the application's schema does not have).
    ExpiryIndex {
        column: String,
        index: Option<String>,
        walked: Option<String>,
        ttl: bool,
        fix: String,
        /// What the walk costs on this table, measured (None: not walked, or not measurable).
        walk_cost: Option<WalkCost>,
    },
    /// The identity index as found.
    Identity { identity: Identity, label: String },
    /// The optional in_progress index (None: missing, `fix` creates it).
    StuckIndex { index: Option<String>, fix: String },
    /// The table has no in-flight marker, so it needs no in_progress index.
    NoInFlightMarker { table: String, profile: String },
    /// The table's partitioning and its number of leaf partitions.
    Partitioning { definition: String, leaves: usize },
    /// The default partition holds rows.
    DefaultPartition { name: String, rows: i64 },
}

/// What evict's walk (no expiry index) costs on the table, measured cheaply: the planner's figures
/// and one bounded read-only page, timed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WalkCost {
    /// The unique index walked.
    pub index: String,
    /// Its entries as the planner last counted them: what a full walk reads each run (None: never
    /// counted).
    pub index_entries: Option<i64>,
    pub index_bytes: i64,
    /// Entries a page reads (evict's default).
    pub page_size: u32,
    /// Pages a full walk takes.
    pub pages_per_run: Option<i64>,
    /// The planner's estimate of the expired finished rows, and their share of the entries.
    pub expired_estimate: Option<i64>,
    pub expired_fraction: Option<f64>,
    /// Index entries a full walk reads per expired row it finds.
    pub entries_per_expired_row: Option<f64>,
    /// The walk follows age (a key from a sequence): it stops at the first page in which nothing
    /// has expired, so it reads less than the whole index.
    pub follows_age: bool,
    /// One page read, timed: its entries and how long it took.
    pub timed_entries: u64,
    pub timed_seconds: f64,
    /// A full walk's reading time extrapolated from the timed page (None: nothing to time).
    pub full_walk_seconds_estimate: Option<f64>,
}

/// The identity index: how it identifies a row.
#[derive(Debug)]
pub(crate) enum Identity {
    /// Unique across the table.
    Global(IndexRef),
    /// Unique only within a partition (it includes the partition key).
    PerPartition {
        index: IndexRef,
        partition_key: Vec<String>,
    },
    /// The table's own identity is wider than the mapping's.
    Wider(IndexRef),
    /// No unique index implies the identity, so the database does not keep a key unique within
    /// its scope (idemctl never proposes one: it could refuse rows already written). `fix`: the
    /// plain index lookups need, when no index serves them.
    NotEnforced { fix: Option<String> },
}

/// What a referencing foreign key means for evict.
#[derive(Debug)]
pub(crate) enum Referencing {
    /// No index leads with the referencing columns (quoted for the index that fixes it).
    Unindexed { columns: Vec<String> },
    /// A NO ACTION / RESTRICT key whose table this role may not read.
    Unreadable,
    /// A NO ACTION / RESTRICT key: evict leaves the keys it references (of the oldest expired keys
    /// examined, how many are, when counted).
    LeftBehind { counted: Option<(i64, i64)> },
    /// A key whose rows this role may not lock.
    Unlockable,
    /// Evict's batches include the work.
    Fine,
}

/// Whether evict --drop-partitions is available.
#[derive(Debug)]
pub(crate) enum DropPartitions {
    /// Not RANGE partitioned on a timestamp (the partitioning's definition).
    NotRange { definition: String },
    /// It needs the in_progress index.
    NeedsStuckIndex { fix: String },
    /// Partitioned on a column that does not bound the expiry column (`column`), which has no
    /// index: only that index proves a partition's keys have all expired.
    NeedsExpiryIndex {
        key: &'static str,
        column: String,
        fix: String,
    },
    /// Available, on this column.
    Available { column: &'static str },
}

/// What one command needs against what the role has.
#[derive(Debug)]
pub(crate) enum Privileges {
    /// inspect, stats and check: the grants the role lacks (`table` and `grantee`: the table and
    /// the role quoted, for the GRANT).
    Read {
        role: String,
        grantee: String,
        missing: Vec<String>,
        table: String,
    },
    /// evict: the grants the role lacks; `refused`: why evict refuses on this session.
    Evict {
        role: String,
        grantee: String,
        missing: Vec<String>,
        /// The function evict's durable points call, when the role may not execute it.
        durable_point: Option<String>,
        refused: Option<Writability>,
        table: String,
    },
    /// evict --drop-partitions: whether the role owns the table.
    DropPartitions { role: String, owner: bool },
    /// reclaim: the actions the role may and may not take, and the grants it lacks for them.
    Reclaim(ReclaimGrants),
}

/// What reclaim needs against what the role has.
#[derive(Debug)]
pub(crate) struct ReclaimGrants {
    pub role: String,
    pub grantee: String,
    pub profile: String,
    pub able: Vec<ReclaimAction>,
    pub unable: Vec<ReclaimAction>,
    pub lacks: Vec<String>,
    pub refused: Option<Writability>,
    pub table: String,
}

/// The threshold rows check reads the statistics for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Threshold {
    Lag,
    Stuck { after: f64 },
    Autovacuum,
    RecentTtl,
}

/// The eviction lag against --max-eviction-lag (`max`, seconds).
#[derive(Debug)]
pub(crate) enum Lag {
    /// Unknown without the expiry index (or a TTL).
    Unknown,
    /// `seconds`, or at most that (`at_most`: each of the oldest expired keys is still referenced).
    Known {
        seconds: f64,
        at_most: Option<ReferencedExpired>,
        max: Option<f64>,
    },
}

/// Stuck keys against --max-stuck.
#[derive(Debug)]
pub(crate) enum Stuck {
    /// --max-stuck without the in_progress index or --allow-scan.
    Uncounted,
    /// The count, and --max-stuck when given.
    Counted { count: Capped, max: Option<u64> },
}

/// Autovacuum against the eviction interval (seconds).
#[derive(Debug)]
pub(crate) enum Autovacuum {
    /// Off for the table (or the server); `fix` turns it on.
    Off { fix: String },
    /// Eviction's dead rows wait up to `worst` seconds; with the settings of `fix` autovacuum
    /// comes about every `after` seconds.
    Slow {
        worst: f64,
        interval: f64,
        after: f64,
        fix: String,
    },
    /// Fine: dead rows wait up to `cycle` seconds (None: no recent keys to estimate from).
    Fine { cycle: Option<f64>, interval: f64 },
}

/// Recent keys' TTL against --min-ttl (`min`, seconds).
#[derive(Debug)]
pub(crate) enum TtlCheck {
    /// No keys to sample.
    NoKeys,
    /// Some recent keys live less than `min`.
    Short { ttl: RecentTtl, min: f64 },
    /// Every recent key lives at least `min`.
    Fine { shortest: f64, min: f64 },
}

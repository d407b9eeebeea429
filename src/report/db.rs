//! What the database layer found, refused or failed at, as typed values: the output layer words
//! them (src/output/db.rs holds their `Display`), so src/db/ writes no sentence of its own.

use std::time::Duration;

/// A step of the database layer whose statement failed, attached to the server's error as its
/// context.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    BoundLockIdle,
    CheckCitus,
    CheckTimeZone,
    CheckKeyHolder,
    CheckWritable,
    CheckActivityAccess,
    CheckReplicationAccess,
    ChangeArchivedBatch,
    CommitArchivedBatch,
    CommitBatch,
    CountStuck,
    CountBacklogLeft,
    CountExpiredInProgressLeft,
    CountReferenced,
    CountExpiredBacklog,
    EndPreview,
    EndWorkerReads,
    ExplainBatch,
    FindOldestDeletable,
    FindOldestExpired,
    FindOldestLive,
    FindOldestStuck,
    FindTenantShard,
    FindPlanShards,
    ListOwnSessions,
    ListStuck,
    ListPartitions,
    ListShards,
    ListWaiters,
    LookUpTable,
    PassSettingsToWorkers,
    PlanWithValues,
    PreviewEviction,
    ReadListedKey,
    ReadWalkPage,
    ReadDistribution,
    ReadPartitioning,
    ReadReplicaLag,
    ReadTableSizes,
    ReadExpiryStatistics,
    ReadAutovacuumSettings,
    ReadClock,
    ReadDistributedReferences,
    ReadReferences,
    ReadColumns,
    ReadIndexes,
    ReadKey,
    ReadArchiveRecords,
    ReadTakenKeys,
    ReadColumnPrivileges,
    ReadShardPrivileges,
    ReadPrivileges,
    ReadWalPosition,
    ReadWalkedIndexSize,
    ReadVacuumStats,
    ReadDatabase,
    ReadVacuumRights,
    SampleTtl,
    SampleEvicted,
    SampleActivity,
    SetBatchLockTimeout,
    SetSessionLockTimeout,
    SetUpFinalCount,
    ShowShards,
    SizeFirstBatch,
    StartBatch,
    StartWorkerReads,
    StartArchivedBatch,
    StartPreview,
    TakeLock,
    /// Probing one partition of the key table (its name).
    ProbePartition(String),
    /// Reading Citus's own sessions on a node.
    ReadCitusSessions(String),
    /// Opening the catalog reads of one shard on its worker.
    ReadShard {
        shard_id: i64,
        node: String,
        port: u16,
    },
}

/// The type a column the profile names has, when the profile cannot use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FoundType {
    /// A type the profile does not accept.
    Type(String),
    /// An enum type that lacks a value the mapping names (comparing with it would fail): its
    /// labels, and the values it lacks.
    EnumLacking {
        sql_type: String,
        labels: Vec<String>,
        missing: Vec<String>,
    },
}

/// The types the profile accepts for a column: these type names, or (`or_enum`) also an enum type
/// holding every value the mapping names (a state compared with literals, which PostgreSQL reads
/// as the enum's values). No type names and no enum: any type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Accepted {
    pub(crate) types: &'static [&'static str],
    pub(crate) or_enum: bool,
}

/// A column the profile names that the table lacks (`found` None) or holds with a type the
/// profile cannot use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnProblem {
    pub(crate) column: String,
    pub(crate) found: Option<FoundType>,
    /// The types the profile accepts for it.
    pub(crate) expected: Accepted,
}

/// Why the table's time columns cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TimeProblem {
    /// These columns are `timestamp without time zone` and the others `timestamptz`.
    Mixed { naive: Vec<String> },
    /// These columns are `timestamp without time zone` and no zone was declared; `origin`: the
    /// config file the mapping lives in.
    NoZone {
        naive: Vec<String>,
        origin: Option<String>,
    },
}

/// Why a profile was taken for the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MatchReason {
    /// The table has the built-in profile's columns (these).
    Columns(Vec<String>),
    /// A flag or setting named a built-in profile.
    ChosenBy(String),
    /// The mapping in a config file (`origin`: which), `by_name` when --profile named it.
    MappingIn {
        origin: Option<String>,
        by_name: bool,
    },
}

/// What a built-in profile missed on a table none fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProfileMiss {
    pub(crate) profile: String,
    pub(crate) missing: Vec<Missing>,
}

/// One thing a built-in profile missed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Missing {
    /// No column for this role (`key`, `creation time`, ...).
    Column { role: &'static str, column: String },
    /// The column is there with a type the profile cannot use.
    Type {
        column: String,
        expected: Accepted,
        found: FoundType,
    },
}

/// Why a value given as a scope (by `flag`) is not one of table `table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScopeValueProblem {
    /// Not a text array of one value per scope column; `example`: the form one takes.
    NotAScope {
        flag: String,
        value: String,
        table: String,
        columns: Vec<String>,
        example: String,
    },
    /// The one tenant column's type cannot hold the value.
    TenantType {
        flag: String,
        value: String,
        table: String,
        column_type: String,
    },
    /// A scope column's type cannot hold its part of the value (`part`).
    ScopeType {
        flag: String,
        value: String,
        table: String,
        column: String,
        column_type: String,
        part: String,
    },
}

/// Whether a session can write at all: a hot standby, or a role or database whose transactions
/// are read-only by default (`default_transaction_read_only = on`, a pooler's read-only endpoint),
/// would let evict and reclaim fail only mid-run; they ask first, and `check` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writability {
    Writable,
    /// The server is in recovery (a hot standby): nothing can be written.
    HotStandby,
    /// Transactions are read-only by default.
    ReadOnly,
}

/// The session that holds the maintenance lock, as pg_stat_activity shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockHolder {
    pub(crate) pid: Option<i32>,
    pub(crate) application_name: Option<String>,
    pub(crate) user: Option<String>,
    pub(crate) client_addr: Option<String>,
}

/// A token of an in-flight predicate, as a parse error names what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    End,
    Word(String),
    Quoted(String),
    Text(String),
    Number(String),
    Op(&'static str),
    Open,
    Close,
    Comma,
}

/// Why a config file's in-flight predicate is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// A string or quoted name opened with this quote is not closed.
    Unterminated(char),
    EmptyQuotedName,
    NotANumber(String),
    /// A `!` not followed by `=`.
    LoneBang,
    Unexpected(char),
    /// A `(` is not closed.
    Unclosed,
    ExpectedColumn(Seen),
    ExpectedLiteral(Seen),
    /// After IS.
    ExpectedIsOperand(Seen),
    ExpectedOpenAfterIn,
    ExpectedInListSeparator(Seen),
    ExpectedInAfterNot,
    /// After a column name.
    ExpectedComparison {
        column: String,
        found: Seen,
    },
    Empty,
    /// Text after a complete predicate.
    Trailing(Seen),
}

impl std::error::Error for ParseError {}

/// The connection under a session was lost: no answer within the deadline, or it ended.
#[derive(Debug)]
pub(crate) enum Lost {
    /// No answer within `deadline` (statement_timeout plus `margin`).
    NoAnswer {
        deadline: Duration,
        margin: Duration,
    },
    /// The connection ended; the reason the connection recorded, if any.
    Ended(Option<crate::report::failure::EndReason>),
}

impl std::error::Error for Lost {}

/// The server warned at a durable point: a wait for synchronous standbys cancelled (by
/// `pg_cancel_backend`, or a pooler's query timeout) commits with a WARNING, so the deletes before
/// it are committed here but not known to have reached a standby. Its message and SQLSTATE.
#[derive(Debug)]
pub(crate) struct WarnedAtDurablePoint {
    pub(crate) message: String,
    pub(crate) code: String,
}

impl std::error::Error for WarnedAtDurablePoint {}

/// A batch that found the rows changed under it between its statements (an archived batch took a
/// key whose record it had not read) and was rolled back to run again.
#[derive(Debug)]
pub(crate) struct Rerun;

impl std::error::Error for Rerun {}

/// A live transaction held a row of a Citus reference table for longer than the run waits.
#[derive(Debug)]
pub(crate) struct HeldReferenceRow {
    pub(crate) patience: Duration,
}

impl std::error::Error for HeldReferenceRow {}

/// What a failed batch met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchFailure {
    /// Something other than a lock wait.
    Failed,
    /// A row's lock, which the server named.
    RowLock,
    /// A lock, a row's or a table's.
    Locks,
}

/// What the database layer refuses, before any change, and why (each with its exit code, given
/// where it is raised).
#[derive(Debug, Clone)]
pub(crate) enum Refusal {
    /// `--table` names no table the role can see.
    NoTable {
        table: String,
    },
    /// A column the profile needs is missing or mistyped; `other_case`: a column of that name but
    /// for case; `origin`: the config file the mapping lives in.
    Column {
        table: String,
        profile: String,
        problem: ColumnProblem,
        other_case: Option<String>,
        origin: Option<String>,
    },
    Times {
        table: String,
        problem: TimeProblem,
    },
    /// Keys expire a TTL after creation and none was given.
    NoTtl {
        table: String,
        profile: String,
        created_at: String,
        command: String,
    },
    /// The TTL is under the floor (`from`: where it came from).
    ShortTtl {
        ttl: Duration,
        from: String,
        table: String,
        command: String,
    },
    UnknownProfile {
        name: String,
        by: String,
        builtin: &'static [&'static str],
    },
    /// A forced built-in profile whose columns the table lacks.
    ForcedProfileLacks {
        table: String,
        missing: Vec<String>,
        profile: String,
        by: String,
    },
    NoProfile {
        table: String,
        misses: Vec<ProfileMiss>,
    },
    UnknownZone {
        zone: String,
        from: String,
    },
    /// The role may not call `function`, which writes the WAL record of `command`'s durable
    /// points.
    DurablePoint {
        role: String,
        function: String,
        command: String,
    },
    /// The role lacks grants `command` needs (`quoted`: the table as a GRANT names it).
    Grant {
        role: String,
        missing: Vec<String>,
        table: String,
        quoted: String,
        command: String,
    },
    /// A reclaim filter (`flag`) on a table without the column it filters by (`column`: what
    /// that column is, e.g. `tenant`).
    FilterNotApplicable {
        flag: &'static str,
        table: String,
        profile: String,
        column: &'static str,
    },
    /// A scope value that is not one, before any change.
    ScopeValue(ScopeValueProblem),
    /// Another run of `command` holds the maintenance lock on `table`.
    LockBusy {
        command: &'static str,
        table: String,
        holder: Option<LockHolder>,
    },
    /// The session cannot write, so `command` does not run.
    CannotWrite {
        command: String,
        writability: Writability,
    },
    /// A shard is not where the coordinator's metadata places it (`why`: the lookup's error).
    ShardMissing {
        shard_id: i64,
        table: String,
        shard: String,
        node: String,
        port: u16,
        /// What resolving it there said; None: no table of that name is there.
        why: Option<String>,
    },
    /// An archived batch kept taking keys it had not locked.
    ArchivedBatchRaced,
    /// The coordinator's metadata places shards on a node whose port no TCP port can be.
    NodePort {
        node: String,
        port: i32,
    },
}

/// A state the database layer never expects (a bug, or metadata it cannot use).
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// A statement that returns one row returned this many.
    RowCount(usize),
    /// Evict's SKIP LOCKED statement has no form that finds its rows by the key's identity.
    EvictWithoutIdentityForm,
    /// A reclaim statement has no form that finds its rows by the key's identity.
    ReclaimWithoutIdentityForm,
    /// The batch statement returned no row.
    NoBatchRow,
    /// A batch of plan rows has no apply statement for the NULLs of their scopes.
    NoApplyFormForNulls,
    /// The apply statement answered for `answered` of `rows` plan rows.
    ApplyAnswered { answered: usize, rows: usize },
}

//! The words for what the database layer found, refused or failed at (src/report/db.rs): a failed
//! step as the context of the server's error, refusals with their advice, a table's column and time
//! problems, why a profile was taken, a predicate's parse error, a lost connection. Each type's
//! `Display` is here, so an error chain raised in src/db/ is worded when it is printed.

use std::fmt;

use crate::domain::{human_secs, ttl_text};
use crate::ident::{literal, quote_ident};
use crate::report::db::{
    Accepted, BatchFailure, ColumnProblem, Fault, FoundType, HeldReferenceRow, Lost, MatchReason,
    Missing, ParseError, ProfileMiss, Refusal, Rerun, ScopeValueProblem, Seen, Step, TimeProblem,
    WarnedAtDurablePoint, Writability,
};
use crate::report::failure::EndReason;

/// A step that failed, as the context of the server's error: `failed to ...`.
pub(crate) fn failed(step: &Step) -> String {
    format!("failed to {}", step_words(step))
}

/// What a step does, as `failed to` goes on.
fn step_words(step: &Step) -> String {
    let words = match step {
        Step::ProbePartition(name) => return format!("probe partition {name}"),
        Step::ReadCitusSessions(node) => return format!("read Citus's own sessions on {node}"),
        Step::ReadShard {
            shard_id,
            node,
            port,
        } => return format!("read shard {shard_id} on node {node}:{port}"),
        Step::BoundLockIdle => "bound how long the maintenance lock outlives a silent run",
        Step::CheckCitus => "check for the citus extension",
        Step::CheckTimeZone => "check the declared time zone",
        Step::CheckKeyHolder => "check whether a running transaction holds the key",
        Step::CheckWritable => "check whether the session can write",
        Step::CheckActivityAccess => "check whether this role may read other sessions' activity",
        Step::CheckReplicationAccess => "check whether this role may read pg_stat_replication",
        Step::ChangeArchivedBatch => "change an archived batch's keys",
        Step::CommitArchivedBatch => "commit a batch (its keys are in the archive)",
        Step::CommitBatch => "commit a batch",
        Step::CountStuck => "count stuck in_progress keys",
        Step::CountBacklogLeft => "count the backlog left",
        Step::CountExpiredInProgressLeft => "count the expired in_progress keys left",
        Step::CountReferenced => "count the expired keys still referenced",
        Step::CountExpiredBacklog => "count the expired backlog",
        Step::EndPreview => "end the preview's transaction",
        Step::EndWorkerReads => "end the read-only transaction on the worker",
        Step::ExplainBatch => "explain the batch statement",
        Step::FindOldestDeletable => "find the oldest expired key evict can delete",
        Step::FindOldestExpired => "find the oldest expired key",
        Step::FindOldestLive => "find the oldest live key",
        Step::FindOldestStuck => "find the oldest stuck key",
        Step::FindTenantShard => "find the shard that holds the tenant",
        Step::FindPlanShards => "find the shards that hold the plan's tenants",
        Step::ListOwnSessions => "list idemctl's sessions",
        Step::ListStuck => "list stuck in_progress keys",
        Step::ListPartitions => "list the key table's partitions",
        Step::ListShards => "list the key table's shards",
        Step::ListWaiters => "list the sessions waiting for a key's row",
        Step::LookUpTable => "look up the key table in the catalog",
        Step::PassSettingsToWorkers => "pass the batch's settings on to the Citus workers",
        Step::PlanWithValues => "plan the batch with its values",
        Step::PreviewEviction => "preview the eviction",
        Step::ReadListedKey => "read a listed key",
        Step::ReadWalkPage => "read a page of the walk",
        Step::ReadDistribution => "read how Citus distributes the key table",
        Step::ReadPartitioning => "read how the key table is partitioned",
        Step::ReadReplicaLag => "read replica lag from pg_stat_replication",
        Step::ReadTableSizes => "read table sizes",
        Step::ReadExpiryStatistics => "read the expiry column's statistics",
        Step::ReadAutovacuumSettings => "read the autovacuum settings",
        Step::ReadClock => "read the database clock",
        Step::ReadDistributedReferences => {
            "read the distributed tables' foreign keys that reference the table"
        }
        Step::ReadReferences => "read the foreign keys that reference the table",
        Step::ReadColumns => "read the key table's columns",
        Step::ReadIndexes => "read the key table's indexes",
        Step::ReadKey => "read the key",
        Step::ReadArchiveRecords => "read the records of a batch's keys for the archive",
        Step::ReadTakenKeys => "read the keys the batch took",
        Step::ReadColumnPrivileges => "read the role's column privileges",
        Step::ReadShardPrivileges => "read the role's privileges on the shards",
        Step::ReadPrivileges => "read the role's privileges",
        Step::ReadWalPosition => "read the server's WAL position",
        Step::ReadWalkedIndexSize => "read the walked index's size",
        Step::ReadVacuumStats => "read vacuum statistics",
        Step::ReadDatabase => "read which database this is",
        Step::ReadVacuumRights => "read who may vacuum the table",
        Step::SampleTtl => "sample the TTL of recent keys",
        Step::SampleEvicted => "sample the keys the run would evict",
        Step::SampleActivity => "sample the other sessions' activity",
        Step::SetBatchLockTimeout => "set the batch's lock_timeout",
        Step::SetSessionLockTimeout => "set the session's lock_timeout",
        Step::SetUpFinalCount => "set up the session for the final count",
        Step::ShowShards => "show the shards to the catalog reads on the worker",
        Step::SizeFirstBatch => "size the first batch",
        Step::StartBatch => "start a batch's transaction",
        Step::StartWorkerReads => "start a read-only transaction on the worker",
        Step::StartArchivedBatch => "start an archived batch's transaction",
        Step::StartPreview => "start the preview's read-only transaction",
        Step::TakeLock => "take the maintenance lock",
    };
    words.to_owned()
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&failed(self))
    }
}

/// The types the profile accepts for a column, as `a or b`.
pub(crate) fn accepted(a: &Accepted) -> String {
    let mut names: Vec<&str> = a.types.to_vec();
    if a.or_enum {
        names.push("an enum holding every value the mapping names");
    }
    names.join(" or ")
}

/// A type the profile cannot use, as found.
pub(crate) fn found_type(found: &FoundType) -> String {
    match found {
        FoundType::Type(t) => t.clone(),
        FoundType::EnumLacking {
            sql_type,
            labels,
            missing,
        } => {
            let listed = |v: &[String]| v.iter().map(|l| literal(l)).collect::<Vec<_>>().join(", ");
            format!(
                "{sql_type}, whose values ({}) do not include {}",
                listed(labels),
                listed(missing)
            )
        }
    }
}

/// Why the table's time columns cannot be read.
pub(crate) fn time_problem(problem: &TimeProblem) -> String {
    match problem {
        TimeProblem::Mixed { naive } => format!(
            "column {} is timestamp without time zone while the other time columns are timestamp with time zone; idemctl reads a table's times in one kind: map columns of one kind",
            naive.join(", column ")
        ),
        TimeProblem::NoZone { naive, origin } => {
            let key = match origin {
                Some(origin) => format!("time_zone = \"UTC\" in the mapping ({origin})"),
                None => "time_zone = \"UTC\" in a config file".to_owned(),
            };
            format!(
                "column {} is timestamp without time zone, which holds no zone: declare the zone the application writes it in with {key}, --time-zone or IDEMCTL_TIME_ZONE (any IANA name, e.g. UTC)",
                naive.join(", column ")
            )
        }
    }
}

/// Why the profile was taken (empty when nothing chose it).
pub(crate) fn match_reason(reason: Option<&MatchReason>) -> String {
    match reason {
        None => String::new(),
        Some(MatchReason::Columns(names)) => {
            format!("the table has the columns {}", names.join(", "))
        }
        Some(MatchReason::ChosenBy(by)) => format!("chosen by {by}"),
        Some(MatchReason::MappingIn { origin, by_name }) => format!(
            "the mapping in {}{}",
            origin.as_deref().unwrap_or("the config file"),
            if *by_name { ", chosen by name" } else { "" }
        ),
    }
}

/// Why a value given as a scope is not one of the table.
pub(crate) fn scope_value_problem(problem: &ScopeValueProblem) -> String {
    match problem {
        ScopeValueProblem::NotAScope {
            flag,
            value,
            table,
            columns,
            example,
        } => format!(
            "{flag} \"{value}\" is not a scope of table {table}: its scope is the {} columns ({}), given as one text array of their values in that order, as idemctl prints it ({example})",
            columns.len(),
            columns.join(", ")
        ),
        ScopeValueProblem::TenantType {
            flag,
            value,
            table,
            column_type,
        } => format!(
            "{flag} \"{value}\" cannot be a tenant of table {table}: its tenant column is of type {column_type}"
        ),
        ScopeValueProblem::ScopeType {
            flag,
            value,
            table,
            column,
            column_type,
            part,
        } => format!(
            "{flag} \"{value}\" cannot be a scope of table {table}: its column {column} is of type {column_type}, which cannot hold \"{part}\""
        ),
    }
}

impl fmt::Display for ScopeValueProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&scope_value_problem(self))
    }
}

/// Why writing commands refuse on this session; `None` when it can write.
pub(crate) fn write_problem(w: Writability) -> Option<&'static str> {
    match w {
        Writability::Writable => None,
        Writability::HotStandby => Some(
            "the server is a standby (in recovery); connect to the primary (for example with \
             target_session_attrs=read-write)",
        ),
        Writability::ReadOnly => Some(
            "the session is read-only (default_transaction_read_only is on for this role, \
             database or server); connect as a role without it",
        ),
    }
}

/// The note said at run time when a pooler was detected: runs of `command` are not kept apart.
pub(crate) fn pooler_note(command: &str) -> String {
    format!(
        "connected through a connection pooler (transaction pooling assumed): this {command} run \
         holds no lock beyond its own transactions, so another {command} run on this table is not \
         kept out; overlapping runs share the rows, none is changed twice and no request waits \
         on them longer than lock_timeout (--pool-mode session behind a session pooler keeps \
         runs apart; --pool-mode transaction silences this note)"
    )
}

/// What a failed batch met, for the error line.
pub(crate) fn batch_failure(failure: BatchFailure) -> &'static str {
    match failure {
        BatchFailure::Failed => "a batch failed and was rolled back",
        BatchFailure::RowLock => {
            "a batch could not lock a row within lock_timeout (a live transaction holds it)"
        }
        BatchFailure::Locks => {
            "a batch could not get its locks within lock_timeout (a live transaction or DDL holds them)"
        }
    }
}

impl fmt::Display for BatchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(batch_failure(*self))
    }
}

/// A connection lost under a session.
fn lost(lost: &Lost) -> String {
    match lost {
        Lost::NoAnswer { deadline, margin } => format!(
            "no answer from the server within {} (statement_timeout plus {}); the connection was given up",
            human_secs(deadline.as_secs_f64()),
            human_secs(margin.as_secs_f64())
        ),
        Lost::Ended(Some(EndReason::Server { message, code })) => {
            format!("the server ended the connection: {message} (SQLSTATE {code})")
        }
        Lost::Ended(Some(EndReason::Socket(text))) => {
            format!("the server ended the connection: {text}")
        }
        Lost::Ended(None) => "the connection was closed without a reason".to_owned(),
    }
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&lost(self))
    }
}

/// A durable point the server answered with a warning (a cancelled wait for synchronous standbys).
pub(crate) fn warned_at_durable_point(message: &str, code: &str) -> String {
    format!(
        "the server warned \"{message}\" (SQLSTATE {code}): the deletes are committed on this server but not known to have reached a synchronous standby, so they are counted as unconfirmed"
    )
}

impl fmt::Display for WarnedAtDurablePoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&warned_at_durable_point(&self.message, &self.code))
    }
}

impl fmt::Display for Rerun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the batch raced another session and was rolled back")
    }
}

/// A live transaction kept a row of a Citus reference table past the run's patience.
fn held_reference_row(patience: std::time::Duration) -> String {
    format!(
        "a live transaction held a row of this Citus reference table for more than {} s, and Citus \
         lets no other write to a reference table proceed until that transaction ends; no request \
         waited on idemctl longer than its lock_timeout; run it again once that transaction has ended",
        patience.as_secs_f64()
    )
}

impl fmt::Display for HeldReferenceRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&held_reference_row(self.patience))
    }
}

/// What a parse error found, as its message names it.
fn seen(t: &Seen) -> String {
    match t {
        Seen::End => "the end".into(),
        Seen::Word(w) => format!("`{w}`"),
        Seen::Quoted(w) => format!("`\"{w}\"`"),
        Seen::Text(w) => format!("'{w}'"),
        Seen::Number(n) => format!("`{n}`"),
        Seen::Op(o) => format!("`{o}`"),
        Seen::Open => "`(`".into(),
        Seen::Close => "`)`".into(),
        Seen::Comma => "`,`".into(),
    }
}

/// Why an in-flight predicate is refused.
pub(crate) fn predicate_error(e: &ParseError) -> String {
    match e {
        ParseError::Unterminated(c) => format!("unterminated {c}...{c}"),
        ParseError::EmptyQuotedName => "empty quoted column name".into(),
        ParseError::NotANumber(n) => format!("`{n}` is not a number"),
        ParseError::LoneBang => "unexpected `!`".into(),
        ParseError::Unexpected(c) => format!("unexpected `{}`", c.escape_default()),
        ParseError::Unclosed => "a `(` is not closed".into(),
        ParseError::ExpectedColumn(t) => format!("expected a column name, found {}", seen(t)),
        ParseError::ExpectedLiteral(t) => format!(
            "expected a literal ('text', a number, true or false), found {}",
            seen(t)
        ),
        ParseError::ExpectedIsOperand(t) => {
            format!("expected NULL, TRUE or FALSE after IS, found {}", seen(t))
        }
        ParseError::ExpectedOpenAfterIn => "expected `(` after IN".into(),
        ParseError::ExpectedInListSeparator(t) => {
            format!("expected `,` or `)` in the IN list, found {}", seen(t))
        }
        ParseError::ExpectedInAfterNot => "expected IN after NOT".into(),
        ParseError::ExpectedComparison { column, found } => format!(
            "expected IS, IN or a comparison (=, <>, <, <=, >, >=) after {column}, found {}",
            seen(found)
        ),
        ParseError::Empty => "the predicate is empty".into(),
        ParseError::Trailing(t) => {
            format!("unexpected {} after a complete predicate", seen(t))
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&predicate_error(self))
    }
}

/// `--table` names no table the role can see.
pub(crate) fn no_table(table: &str) -> String {
    format!(
        "table {table} does not exist (or is not visible on search_path); check --table, or create it from sql/schema.sql"
    )
}

/// A column the profile needs that the table lacks or holds with another type.
pub(crate) fn column_refused(
    table: &str,
    profile: &str,
    problem: &ColumnProblem,
    other_case: Option<&str>,
    origin: Option<&str>,
) -> String {
    let name = &problem.column;
    let what = match (&problem.found, other_case) {
        (None, Some(has)) => format!(
            "has no column {name} but has {}: names are matched exactly, and a predicate folds an unquoted name to lower case as SQL does, so write it there with double quotes",
            quote_ident(has)
        ),
        (None, None) => format!("has no column {name}"),
        (Some(t), _) => format!(
            "column {name} is {}, expected {}",
            found_type(t),
            accepted(&problem.expected)
        ),
    };
    let advice = match origin {
        Some(origin) => format!("the mapping in {origin} names it; correct the mapping"),
        None => "pick another with --profile, or map the table's columns in a config file with --config (see docs/profiles.md)".to_owned(),
    };
    format!("table {table} {what}, which profile {profile} needs; {advice}")
}

/// The table's times cannot be read.
pub(crate) fn times_refused(table: &str, problem: &TimeProblem) -> String {
    format!(
        "table {table}: {}; nothing was changed",
        time_problem(problem)
    )
}

/// Keys expire a TTL after creation and no TTL was given.
pub(crate) fn no_ttl(table: &str, profile: &str, created_at: &str, command: &str) -> String {
    format!(
        "table {table} has no expiry column (profile {profile}): keys expire a TTL after {created_at}, so {command} needs --ttl DUR (or IDEMCTL_TTL), e.g. --ttl 24h"
    )
}

/// A TTL under the floor without --force.
pub(crate) fn short_ttl(
    ttl: std::time::Duration,
    from: &str,
    table: &str,
    command: &str,
) -> String {
    let ttl = ttl_text(ttl);
    format!(
        "the TTL {ttl} (from {from}) is under 1h: table {table} has no expiry column, so {command} would take every answered key created over {ttl} ago as expired; give the time the API keeps keys for (e.g. 24h), or pass --force (or allow_short_ttl = true in the config file) if {ttl} is meant"
    )
}

/// `--profile` (or `by`) names no profile.
pub(crate) fn unknown_profile(name: &str, by: &str, builtin: &[&str]) -> String {
    format!(
        "unknown profile {name} (named by {by}): expected one of {}, or a [profiles.NAME] mapping in a config file (--config)",
        builtin.join(", ")
    )
}

/// A forced built-in profile names columns the table lacks.
pub(crate) fn forced_profile_lacks(
    table: &str,
    missing: &[String],
    profile: &str,
    by: &str,
) -> String {
    format!(
        "table {table} has no column {}, which profile {profile} needs (chosen by {by}); drop {by} to detect the table's profile, or map its columns in a config file (--config)",
        missing.join(", column ")
    )
}

/// What one built-in profile missed, as `NAME needs ...`.
fn profile_miss(miss: &ProfileMiss) -> String {
    let missing: Vec<String> = miss
        .missing
        .iter()
        .map(|m| match m {
            Missing::Column { role, column } => format!("{role} column {column}"),
            Missing::Type {
                column,
                expected,
                found,
            } => format!(
                "column {column} as {} (it is {})",
                accepted(expected),
                found_type(found)
            ),
        })
        .collect();
    format!("{} needs {}", miss.profile, missing.join(", "))
}

/// No built-in profile fits the table.
pub(crate) fn no_profile(table: &str, misses: &[ProfileMiss]) -> String {
    format!(
        "table {table} matches no table profile ({}); force one with --profile, or map the table's columns in a config file with --config (docs/profiles.md)",
        misses
            .iter()
            .map(profile_miss)
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// A time zone the server does not know.
pub(crate) fn unknown_zone(zone: &str, from: &str) -> String {
    format!(
        "time zone {zone:?} (given by {from}) is not one the server knows; give an IANA name as pg_timezone_names lists it, e.g. UTC or Europe/Paris; nothing was changed"
    )
}

/// The role lacks grants the command needs.
pub(crate) fn grant_missing(
    role: &str,
    missing: &[String],
    table: &str,
    quoted: &str,
    command: &str,
) -> String {
    let missing = missing.join(", ");
    format!(
        "permission denied: role {role} lacks {missing} on {table}, which {command} needs; grant it with: GRANT {missing} ON {quoted} TO {};",
        quote_ident(role)
    )
}

/// A role that may not write the WAL record that confirms deletes durable.
pub(crate) fn durable_point_refused(role: &str, function: &str, command: &str) -> String {
    format!(
        "permission denied: role {role} may not execute {function}, which {command} calls once a \
         second to make its deletes durable (and wait for synchronous standbys); grant it with: \
         GRANT EXECUTE ON FUNCTION {function} TO {};",
        quote_ident(role)
    )
}

/// A reclaim filter on a table without the column it filters by.
pub(crate) fn filter_not_applicable(
    flag: &str,
    table: &str,
    profile: &str,
    column: &str,
) -> String {
    format!(
        "{flag} does not apply to table {table} (profile {profile}): it has no {column} column, so reclaim cannot tell its keys apart by it; drop {flag}"
    )
}

/// Another run holds the maintenance lock.
pub(crate) fn lock_busy(
    command: &str,
    table: &str,
    holder: Option<&crate::report::db::LockHolder>,
) -> String {
    let Some(h) = holder else {
        return format!(
            "another {command} run holds the lock on {table}; this run did nothing, try again when it has finished"
        );
    };
    // The holder is named, never judged: its application_name is whatever its conninfo said, so
    // it proves neither that it is an idemctl run nor that it is not.
    format!(
        "another {command} run holds the lock on {table} (pid {}, application_name {}, user {}, client {}); this run did nothing, try again when it has finished",
        h.pid.map_or_else(|| "?".into(), |p| p.to_string()),
        h.application_name.as_deref().unwrap_or("unknown"),
        h.user.as_deref().unwrap_or("unknown"),
        h.client_addr.as_deref().unwrap_or("local socket"),
    )
}

/// The session cannot write.
pub(crate) fn cannot_write(command: &str, writability: Writability) -> String {
    format!(
        "{command} cannot run here, nothing was changed: {}",
        write_problem(writability).unwrap_or_default()
    )
}

/// A shard is not where the coordinator's metadata places it.
fn shard_missing(
    shard_id: i64,
    table: &str,
    shard: &str,
    node: &str,
    port: u16,
    why: Option<&str>,
) -> String {
    let why = why.unwrap_or("no table of that name is there");
    format!(
        "shard {shard_id} of {table} (table {shard}) is not on node {node}:{port} where the coordinator's metadata places it ({why}); a shard move may be under way, try again"
    )
}

/// The coordinator's metadata names a port no worker can listen on (pg_dist_node edited by hand).
pub(crate) fn node_port(node: &str, port: i32) -> String {
    format!(
        "the Citus metadata places shards on node {node} port {port}, which is not a TCP port (1 to 65535); correct the node's entry in pg_dist_node with citus_update_node"
    )
}

/// What the database layer refuses.
fn refusal(r: &Refusal) -> String {
    match r {
        Refusal::NoTable { table } => no_table(table),
        Refusal::Column {
            table,
            profile,
            problem,
            other_case,
            origin,
        } => column_refused(
            table,
            profile,
            problem,
            other_case.as_deref(),
            origin.as_deref(),
        ),
        Refusal::Times { table, problem } => times_refused(table, problem),
        Refusal::NoTtl {
            table,
            profile,
            created_at,
            command,
        } => no_ttl(table, profile, created_at, command),
        Refusal::ShortTtl {
            ttl,
            from,
            table,
            command,
        } => short_ttl(*ttl, from, table, command),
        Refusal::UnknownProfile { name, by, builtin } => unknown_profile(name, by, builtin),
        Refusal::ForcedProfileLacks {
            table,
            missing,
            profile,
            by,
        } => forced_profile_lacks(table, missing, profile, by),
        Refusal::NoProfile { table, misses } => no_profile(table, misses),
        Refusal::UnknownZone { zone, from } => unknown_zone(zone, from),
        Refusal::Grant {
            role,
            missing,
            table,
            quoted,
            command,
        } => grant_missing(role, missing, table, quoted, command),
        Refusal::FilterNotApplicable {
            flag,
            table,
            profile,
            column,
        } => filter_not_applicable(flag, table, profile, column),
        Refusal::DurablePoint {
            role,
            function,
            command,
        } => durable_point_refused(role, function, command),
        Refusal::ScopeValue(problem) => {
            format!("{}; nothing was changed", scope_value_problem(problem))
        }
        Refusal::LockBusy {
            command,
            table,
            holder,
        } => lock_busy(command, table, holder.as_ref()),
        Refusal::CannotWrite {
            command,
            writability,
        } => cannot_write(command, *writability),
        Refusal::ShardMissing {
            shard_id,
            table,
            shard,
            node,
            port,
            why,
        } => shard_missing(*shard_id, table, shard, node, *port, why.as_deref()),
        Refusal::NodePort { node, port } => node_port(node, *port),
        Refusal::ArchivedBatchRaced => {
            "an archived batch kept taking keys other than those it locked; it was rolled back"
                .to_owned()
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&refusal(self))
    }
}

/// A state the database layer never expects.
fn fault(fault: &Fault) -> String {
    match fault {
        Fault::RowCount(n) => format!("a statement that returns one row returned {n}"),
        Fault::EvictWithoutIdentityForm => {
            "evict's SKIP LOCKED statement has no form that finds its rows by the key's identity"
                .to_owned()
        }
        Fault::ReclaimWithoutIdentityForm => {
            "a reclaim statement has no form that finds its rows by the key's identity".to_owned()
        }
        Fault::NoBatchRow => "the batch statement returned no row".to_owned(),
        Fault::NoApplyFormForNulls => {
            "a batch of plan rows has no statement for the NULLs of their scopes".to_owned()
        }
        Fault::ApplyAnswered { answered, rows } => {
            format!("the apply statement answered for {answered} of {rows} plan rows")
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&fault(self))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_failed_step_reads_as_the_context_of_the_servers_error() {
        assert_eq!(
            Step::ReadTableSizes.to_string(),
            "failed to read table sizes"
        );
        assert_eq!(
            Step::ReadShard {
                shard_id: 102008,
                node: "w1".into(),
                port: 5432
            }
            .to_string(),
            "failed to read shard 102008 on node w1:5432"
        );
        assert_eq!(
            Step::ProbePartition("public.keys_2024".into()).to_string(),
            "failed to probe partition public.keys_2024"
        );
    }

    #[test]
    fn an_enum_that_lacks_a_mapped_value_is_named_with_its_values() {
        let found = FoundType::EnumLacking {
            sql_type: "idempotency_state".into(),
            labels: vec!["in_progress".into(), "done".into()],
            missing: vec!["completed".into()],
        };
        assert_eq!(
            found_type(&found),
            "idempotency_state, whose values ('in_progress', 'done') do not include 'completed'"
        );
        let state = Accepted {
            types: &["text", "character varying"],
            or_enum: true,
        };
        assert_eq!(
            accepted(&state),
            "text or character varying or an enum holding every value the mapping names"
        );
    }

    #[test]
    fn a_lost_connection_says_how() {
        let no_answer = Lost::NoAnswer {
            deadline: Duration::from_secs(12),
            margin: Duration::from_secs(10),
        };
        assert_eq!(
            no_answer.to_string(),
            "no answer from the server within 12s (statement_timeout plus 10s); the connection was given up"
        );
        assert_eq!(
            Lost::Ended(None).to_string(),
            "the connection was closed without a reason"
        );
        let server = EndReason::Server {
            message: "terminating connection due to administrator command".into(),
            code: "57P01".into(),
        };
        assert_eq!(
            Lost::Ended(Some(server)).to_string(),
            "the server ended the connection: terminating connection due to administrator \
             command (SQLSTATE 57P01)"
        );
        assert_eq!(
            Lost::Ended(Some(EndReason::Socket("Connection reset by peer".into()))).to_string(),
            "the server ended the connection: Connection reset by peer"
        );
    }

    #[test]
    fn a_predicate_error_names_what_it_found() {
        assert_eq!(
            ParseError::ExpectedComparison {
                column: "code".into(),
                found: Seen::Text("x".into())
            }
            .to_string(),
            "expected IS, IN or a comparison (=, <>, <, <=, >, >=) after code, found 'x'"
        );
        assert_eq!(
            ParseError::Trailing(Seen::End).to_string(),
            "unexpected the end after a complete predicate"
        );
        assert_eq!(ParseError::Unexpected('\t').to_string(), "unexpected `\\t`");
        assert_eq!(
            ParseError::Unterminated('"').to_string(),
            "unterminated \"...\""
        );
    }

    #[test]
    fn refusals_and_faults_that_no_run_here_reaches_keep_their_words() {
        let missing = Refusal::ShardMissing {
            shard_id: 102008,
            table: "public.keys".into(),
            shard: "public.keys_102008".into(),
            node: "w1".into(),
            port: 5432,
            why: Some("relation does not exist".into()),
        };
        assert_eq!(
            missing.to_string(),
            "shard 102008 of public.keys (table public.keys_102008) is not on node w1:5432 where the coordinator's metadata places it (relation does not exist); a shard move may be under way, try again"
        );
        assert_eq!(
            HeldReferenceRow {
                patience: Duration::from_secs(10)
            }
            .to_string(),
            "a live transaction held a row of this Citus reference table for more than 10 s, and Citus lets no other write to a reference table proceed until that transaction ends; no request waited on idemctl longer than its lock_timeout; run it again once that transaction has ended"
        );
        assert_eq!(
            Fault::ApplyAnswered {
                answered: 2,
                rows: 3
            }
            .to_string(),
            "the apply statement answered for 2 of 3 plan rows"
        );
        assert_eq!(
            match_reason(Some(&MatchReason::MappingIn {
                origin: None,
                by_name: true
            })),
            "the mapping in the config file, chosen by name"
        );
    }
}

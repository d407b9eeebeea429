//! check's report for people and its JSON document: one row a finding, its check's name, status,
//! detail and fix worded here from what the checks found (names escaped where they are spliced
//! into a fix's statement; the detail escaped once more where it reaches the terminal).

use crate::domain::{ReclaimAction, Route};
use crate::output::db::{found_type, match_reason, time_problem};
use crate::output::names::worker;
use crate::output::stats::key_label;
use crate::output::{Doc, escape_controls, escape_lines, human_secs, sanitize};
use crate::report::check::{
    Autovacuum, DropPartitions, Finding, Found, Identity, Lag, Privileges, ReclaimGrants,
    Referencing, Status, Structure, Stuck, Threshold, TtlCheck, WalkCost,
};
use crate::report::citus::{Outcome, ShardLacks, WorkerLacks};
use crate::report::db::Accepted;
use crate::report::rows::Layout;
use crate::report::stats::ReferencedExpired;

/// A finding in words: what was checked, how it came out, the detail and the fix.
pub(crate) struct Worded {
    pub(crate) check: String,
    pub(crate) status: Status,
    pub(crate) detail: String,
    /// The statement that fixes it, when one exists.
    pub(crate) fix: Option<String>,
}

pub(crate) fn worded(check: &str, status: Status, detail: String, fix: Option<String>) -> Worded {
    Worded {
        check: check.to_owned(),
        status,
        detail,
        fix,
    }
}

/// The error line of a check that found problems: the one finding, or the checks that failed.
pub(crate) fn failed(failed: &[&Finding], all: &[Finding]) -> String {
    match failed {
        [one] => {
            let w = words(one, all);
            format!("check failed: {}: {}", w.check, w.detail)
        }
        many => format!(
            "{} checks failed: {}",
            many.len(),
            many.iter()
                .map(|f| words(f, all).check)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// check's JSON document: the table and each finding's check, status, detail and fix.
pub(crate) fn json(table: &str, findings: &[Finding]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = findings
        .iter()
        .map(|f| {
            let w = words(f, findings);
            let mut row = serde_json::json!({
                "check": w.check,
                "status": w.status,
                "detail": w.detail,
                "fix": w.fix,
            });
            if let Found::Structure(Structure::ExpiryIndex {
                walk_cost: Some(cost),
                ..
            }) = &f.found
            {
                row["walk_cost"] = serde_json::to_value(cost).unwrap_or_default();
            }
            row
        })
        .collect();
    serde_json::json!({ "table": table, "findings": rows })
}

/// One row a finding: what was checked, its status and the detail; the fixes follow the table,
/// each whole on lines of its own under an SQL comment naming its check, so a fix can be copied
/// at any terminal width (a table cell would wrap it inside an identifier) and the block pastes
/// into psql as it is.
pub(crate) fn findings(findings: &[Finding]) -> Doc {
    let worded: Vec<Worded> = findings.iter().map(|f| words(f, findings)).collect();
    let mut d = Doc::default();
    let mut fixes = Vec::new();
    let rows = worded
        .iter()
        .map(|f| {
            let status = status_word(f.status);
            let fix = match f.fix.as_deref().filter(|fix| !fix.is_empty()) {
                Some(fix) => {
                    fixes.push(format!(
                        "-- fix {}: {} ({status})\n{}",
                        fixes.len() + 1,
                        escape_controls(&f.check),
                        escape_lines(fix)
                    ));
                    format!("fix {} below", fixes.len())
                }
                None => String::new(),
            };
            vec![
                f.check.clone(),
                status.to_owned(),
                escape_controls(&f.detail),
                fix,
            ]
        })
        .collect();
    d.rows(None, &["check", "status", "detail", "fix"], rows);
    if !fixes.is_empty() {
        d.text(fixes.join("\n\n"));
    }
    d
}

fn status_word(status: Status) -> &'static str {
    match status {
        Status::Ok => "ok",
        Status::Note => "note",
        Status::Fail => "FAIL",
        Status::Breached => "BREACHED",
        Status::Warn => "WARN",
    }
}

/// The eviction lag in a finding: its wait, or "at most" its wait when each of the oldest expired
/// keys stats examined is still referenced (`at_most`), so the lag is bounded, not known.
fn lag(seconds: f64, at_most: Option<&ReferencedExpired>) -> String {
    match at_most {
        Some(_) => format!("at most {}", human_secs(seconds)),
        None => human_secs(seconds),
    }
}

/// The eviction lag finding when its upper bound is past --max-eviction-lag but each of the oldest
/// expired keys stats examined is still referenced: the lag itself is unknown, and what holds the
/// keys is a NO ACTION / RESTRICT foreign key, not a stopped evict job.
fn lag_unknown(x: &ReferencedExpired, at_most: f64, max: f64) -> String {
    format!(
        "eviction lag unknown: each of the oldest {} expired keys is still referenced by a NO ACTION / RESTRICT foreign key{}, so evict leaves them, and the oldest key it can delete, if any, is younger: it has waited at most {}, which is more than --max-eviction-lag {}; see `idemctl stats` and what still references these keys",
        x.examined,
        x.oldest.as_ref().map_or_else(String::new, |k| format!(
            " (oldest: {}, waiting {})",
            key_label(k),
            human_secs(k.seconds)
        )),
        human_secs(at_most),
        human_secs(max)
    )
}

/// The words of one finding (`all`: the report's findings, which a row not checked names).
pub(crate) fn words(f: &Finding, all: &[Finding]) -> Worded {
    let status = f.status;
    match &f.found {
        Found::Connection {
            route,
            owns_session,
        } => connection(status, *route, *owns_session),
        Found::Writes { writability } => {
            let detail = match crate::output::db::write_problem(*writability) {
                None => "the session can write".to_owned(),
                Some(why) => format!("evict and reclaim refuse to run here: {why}"),
            };
            worded("writes", status, detail, None)
        }
        Found::Referencing { key, grantee, case } => referencing(status, key, grantee, case),
        Found::DropPartitions(d) => drop_partitions(status, d),
        Found::Privileges(p) => privileges(status, p),
        Found::NotChecked {
            threshold,
            blocking,
        } => not_checked(*threshold, blocking, all),
        Found::Lag(l) => lag_finding(status, l),
        Found::Stuck { after, stuck } => stuck_finding(status, *after, stuck),
        Found::Autovacuum(a) => autovacuum(status, a),
        Found::RecentTtl(t) => recent_ttl(status, t),
        Found::Citus(o) => Worded {
            status,
            ..citus_finding(o)
        },
        Found::Structure(s) => structure(status, s),
    }
}

/// How idemctl reaches its server sessions, in one line for the operator.
fn route_words(route: Route) -> &'static str {
    match route {
        Route::Direct => "direct connection: idemctl owns its server sessions",
        Route::DeclaredSession => {
            "session pooling (--pool-mode session): idemctl owns its server sessions while connected"
        }
        Route::DetectedPooler => {
            "through a connection pooler (the server process differs from the one the login \
             announced): transaction pooling assumed, so idemctl keeps its settings, locks and \
             statements inside its own transactions"
        }
        Route::DeclaredTransaction => {
            "transaction pooling (--pool-mode transaction): idemctl keeps its settings, locks and \
             statements inside its own transactions"
        }
    }
}

fn connection(status: Status, route: Option<Route>, owns_session: bool) -> Worded {
    let detail = match route.map(route_words) {
        None => "not determined".to_owned(),
        Some(route) if owns_session => {
            format!("{route}; evict and reclaim each hold a per-table lock for the whole run")
        }
        Some(route) => format!(
            "{route}; evict and reclaim hold no lock beyond a transaction, so two runs on one \
             table may overlap (they share the rows; none is changed twice); behind a \
             session-mode pooler, --pool-mode session keeps runs apart"
        ),
    };
    worded("connection", status, detail, None)
}

/// What an index costs the API's writes, for the findings that propose one: every insert adds an
/// entry, and an index on a column the completion UPDATE writes makes that UPDATE non-HOT (every
/// index touched), the cost measured for the in_progress index.
fn index_write_cost(written_by_completion: bool) -> &'static str {
    if written_by_completion {
        "every completion UPDATE: it then touches all indexes (no HOT update; about +9% write latency measured)"
    } else {
        "one more index entry per insert; the completion UPDATE does not write its column, so it stays a HOT update (no write latency measurable: 0.97x, bench/index-cost)"
    }
}

/// A column the profile names that the table lacks (`other_case`: one it has under another
/// case) or has with another type (`found`).
fn column_unfit(
    status: Status,
    column: &str,
    profile: &str,
    found: Option<&str>,
    expected: &Accepted,
    other_case: Option<&str>,
) -> Worded {
    let detail = match (found, other_case) {
        (None, Some(has)) => format!(
            "column {column} (profile {profile}) is missing, but the table has {has}: names are matched exactly, and a predicate folds an unquoted name to lower case as SQL does, so write it there with double quotes"
        ),
        (None, None) => format!("column {column} (profile {profile}) is missing"),
        (Some(t), _) => format!(
            "column {column} is {t}, profile {profile} expects {}",
            crate::output::db::accepted(expected)
        ),
    };
    let fix = "choose the profile that fits with --profile, or map the table's columns in a config file (--config)".to_owned();
    worded("columns", status, detail, Some(fix))
}

/// The findings about the table's columns and indexes.
fn structure(status: Status, found: &Structure) -> Worded {
    match found {
        Structure::Profile { name, because } => {
            let because = match_reason(because.as_ref());
            worded("profile", status, format!("{name}: {because}"), None)
        }
        Structure::ColumnsOk { profile } => worded(
            "columns",
            status,
            format!("every column profile {profile} names, with a usable type"),
            None,
        ),
        Structure::Column {
            column,
            profile,
            found,
            expected,
            other_case,
        } => column_unfit(
            status,
            column,
            profile,
            found.as_ref().map(found_type).as_deref(),
            expected,
            other_case.as_deref(),
        ),
        Structure::TimeColumns { why } => worded("columns", status, time_problem(why), None),
        Structure::NoExpiry { created_at } => worded(
            "expiry",
            status,
            format!(
                "the table has no expiry column: keys expire a TTL after {created_at}, which evict and stats need to know"
            ),
            Some("pass --ttl DUR (or set IDEMCTL_TTL, or ttl in the config file)".into()),
        ),
        Structure::ExpiryIndex {
            column,
            index,
            walked,
            ttl,
            fix,
            walk_cost,
        } => {
            let mut w = expiry_index(
                status,
                column,
                index.as_deref(),
                walked.as_deref(),
                *ttl,
                fix,
            );
            if let Some(cost) = walk_cost {
                w.detail = format!("{}; {}", w.detail, walk_cost_text(cost));
            }
            w
        }
        Structure::Identity { identity, label } => identity_index(status, identity, label),
        Structure::NoInFlightMarker { table, profile } => worded(
            "in_progress index",
            status,
            crate::output::stats::no_in_flight_marker(table, profile),
            None,
        ),
        Structure::StuckIndex { index: Some(i), .. } => worded(
            "in_progress index",
            status,
            format!(
                "{i} makes reclaim and stuck counts index-backed; it costs the API's completion UPDATE its HOT path"
            ),
            None,
        ),
        Structure::StuckIndex { index: None, fix } => worded(
            "in_progress index",
            status,
            format!(
                "optional index absent: reclaim and stuck-key counts need --allow-scan (a full table read). Creating it makes them index-backed, but it costs {}",
                index_write_cost(true)
            ),
            Some(fix.clone()),
        ),
        Structure::Partitioning { definition, leaves } => worded(
            "partitioning",
            status,
            format!(
                "{definition}, {leaves} leaf partitions; every statement reaches them through the partitions' copies of the table's indexes"
            ),
            None,
        ),
        Structure::DefaultPartition { name, rows } => worded(
            "default partition",
            status,
            format!(
                "{name} holds about {rows} rows: keys fell outside every partition's range, so partition maintenance (e.g. pg_partman's run_maintenance) is behind; evict deletes them in batches, --drop-partitions never drops the default partition"
            ),
            None,
        ),
    }
}

fn expiry_index(
    status: Status,
    column: &str,
    index: Option<&str>,
    walked: Option<&str>,
    ttl: bool,
    fix: &str,
) -> Worded {
    // On a TTL table the index is one the application's own schema does not have: say what it
    // costs the API, as for the in_progress index.
    let cost = |what: &str| match ttl {
        true => format!("; creating {what} costs {}", index_write_cost(false)),
        false => String::new(),
    };
    let (detail, fix) = match (index, walked) {
        (Some(i), _) => (format!("{i} orders keys by {column}"), None),
        (None, Some(walked)) => (
            format!(
                "no valid index on {column}: evict walks {walked} instead, reading every key of the table in bounded pages each run to find the expired ones (its summary counts the rows examined per row evicted), and stats can only estimate the backlog and the lag from the planner's statistics{}",
                cost("the index")
            ),
            Some(fix.to_owned()),
        ),
        (None, None) => (
            format!(
                "no valid index on {column}: eviction, lag and backlog cannot be index-backed{}",
                cost("it")
            ),
            Some(fix.to_owned()),
        ),
    };
    worded("expiry index", status, detail, fix)
}

/// The walk's measured cost, beside the expiry index it would save.
fn walk_cost_text(c: &WalkCost) -> String {
    let duration = |secs: f64| match secs {
        s if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        s => human_secs(s),
    };
    let mut parts = Vec::new();
    match (c.index_entries, c.pages_per_run) {
        (Some(n), Some(pages)) => parts.push(format!(
            "a full walk reads about {n} entries of {} ({}) each run, in {pages} pages of {}{}",
            sanitize(&c.index),
            crate::output::human_bytes(c.index_bytes),
            c.page_size,
            if c.follows_age {
                " (less where it stops early: the key follows age)"
            } else {
                ""
            }
        )),
        _ => parts.push(format!(
            "the planner has not counted the entries of {} yet (ANALYZE the table)",
            sanitize(&c.index)
        )),
    }
    if let (Some(x), Some(f)) = (c.expired_estimate, c.expired_fraction) {
        let per = c.entries_per_expired_row.map_or_else(String::new, |e| {
            format!(", {e:.1} entries read per key evicted")
        });
        parts.push(format!(
            "about {x} of them expired ({:.1}%{per})",
            f * 100.0
        ));
    }
    if c.timed_entries > 0 {
        let whole = c.full_walk_seconds_estimate.map_or_else(String::new, |s| {
            format!(", so a full walk spends about {} reading", duration(s))
        });
        parts.push(format!(
            "one page of {} entries read in {}{whole}",
            c.timed_entries,
            duration(c.timed_seconds)
        ));
    }
    format!(
        "measured (planner's estimates, one page timed): {}",
        parts.join("; ")
    )
}

fn identity_index(status: Status, identity: &Identity, label: &str) -> Worded {
    let label = crate::output::sanitize(label);
    let (detail, fix) = match identity {
        Identity::PerPartition {
            index,
            partition_key,
        } => (
            format!(
                "{} identifies a row by ({}); it includes the partition key, as PostgreSQL requires of a unique index on a partitioned table, so the database enforces it only within one partition: keeping {label} unique across partitions is the API's business (an insert of an existing key with another {} is not refused)",
                index.name,
                index.columns.join(", "),
                partition_key.join(", ")
            ),
            None,
        ),
        Identity::Global(i) => (
            format!(
                "{} is unique on ({}), so {label} identifies a row",
                i.name,
                i.columns.join(", ")
            ),
            None,
        ),
        Identity::Wider(i) => (
            format!(
                "{} makes a key unique only within ({}), wider than the mapping's {label}: the same key may exist under several values of the other columns (inspect lists them); no index is proposed, since one on {label} would refuse the application's rows",
                i.name,
                i.columns.join(", ")
            ),
            None,
        ),
        Identity::NotEnforced { fix } => {
            let lookups = match fix {
                None => "an index serves lookups by it",
                Some(_) => {
                    "keys cannot be looked up by it without a scan; the index below serves lookups"
                }
            };
            (
                format!(
                    "no valid unique index makes {label} name one row, so the database does not keep a key unique within its scope; no unique index is proposed, since one could refuse rows the application wrote (map every column the table's own identity has); {lookups}"
                ),
                fix.clone(),
            )
        }
    };
    worded("identity index", status, detail, fix)
}

/// A foreign key that references the key table, and what it means for evict.
fn referencing(
    status: Status,
    k: &crate::report::rows::ReferencingKey,
    grantee: &str,
    case: &Referencing,
) -> Worded {
    let columns = k.columns.join(", ");
    let referencing = &k.referencing_table;
    let what = format!(
        "{referencing} ({columns}) references the table ON DELETE {} ({})",
        k.on_delete, &k.name
    );
    let grant = |what: &str| {
        Some(format!(
            "GRANT {what} ON {} TO {grantee};",
            k.referencing_quoted
        ))
    };
    let (detail, fix) = match case {
        Referencing::Unindexed { columns: quoted } => {
            let effect = if k.blocks() {
                "each evicted key would scan it to prove nothing references the key"
            } else {
                "evict's batches include that work"
            };
            (
                format!(
                    "{what}; no index leads with ({columns}), so every evicted key scans {referencing} ({effect})"
                ),
                Some(format!(
                    "CREATE INDEX CONCURRENTLY ON {} ({});",
                    k.referencing_quoted,
                    quoted.join(", ")
                )),
            )
        }
        Referencing::Unreadable => (
            format!(
                "{what}; indexed, but this role may not read {referencing}, so evict cannot leave out the keys it still references: a batch that meets one fails"
            ),
            grant("SELECT"),
        ),
        Referencing::LeftBehind { counted } => {
            let counted = match counted {
                Some((n, examined)) => {
                    format!(" ({n} of the oldest {examined} expired keys are referenced now)")
                }
                None => String::new(),
            };
            (
                format!(
                    "{what}; indexed, but evict leaves the expired keys it still references behind (counted as skipped_referenced){counted}: they go once nothing references them"
                ),
                None,
            )
        }
        Referencing::Unlockable => (
            format!(
                "{what}; indexed, so evict's batches include that work, but this role may not lock {referencing}'s rows: a live transaction holding a referencing row makes evict's batches wait on it up to lock_timeout and fail"
            ),
            grant("SELECT, UPDATE"),
        ),
        Referencing::Fine => (
            format!(
                "{what}; indexed, so evict's batches include that work (a key whose referencing row a live transaction holds is left to the next run)"
            ),
            None,
        ),
    };
    worded("referencing key", status, detail, fix)
}

fn drop_partitions(status: Status, d: &DropPartitions) -> Worded {
    let (detail, fix) = match d {
        DropPartitions::NotRange { definition } => (
            format!("not available: it needs RANGE partitioning on expires_at or created_at, not {definition}; evict deletes in batches"),
            None,
        ),
        DropPartitions::NeedsStuckIndex { fix } => (
            "not available without the optional in_progress index, which proves a partition holds no in_progress key while it is locked".to_owned(),
            Some(fix.clone()),
        ),
        DropPartitions::NeedsExpiryIndex { key, column, fix } => (
            format!(
                "not available without the index on {}: the partitions are bounded on {key}, which does not bound {}, and only that index proves a partition's keys have all expired without reading it under the table's lock; evict walks the table meanwhile",
                sanitize(column),
                sanitize(column)
            ),
            Some(fix.clone()),
        ),
        DropPartitions::Available { column } => (
            format!(
                "available: a partition whose {column} range has passed is dropped whole when it holds no in_progress or unexpired key (needs ownership of the table)"
            ),
            None,
        ),
    };
    worded("evict --drop-partitions", status, detail, fix)
}

fn grant(what: &str, table: &str, grantee: &str) -> String {
    format!("GRANT {what} ON {table} TO {grantee};")
}

/// `what`, and on a session that cannot write, that `command` refuses to run here.
fn granted_but(what: String, command: &str, refused: Option<&str>) -> String {
    match refused {
        None => what,
        Some(why) => format!("{what}, but {command} refuses to run here (exit 6): {why}"),
    }
}

fn action_names(actions: &[ReclaimAction]) -> String {
    actions
        .iter()
        .map(|a| format!("--action {}", action_name(*a)))
        .collect::<Vec<_>>()
        .join(" and ")
}

fn action_name(a: ReclaimAction) -> &'static str {
    match a {
        ReclaimAction::Delete => "delete",
        ReclaimAction::Fail => "fail",
        ReclaimAction::Release => "release",
    }
}

/// What a command needs, against what the role has.
fn privileges(status: Status, p: &Privileges) -> Worded {
    match p {
        Privileges::Read {
            role,
            grantee,
            missing,
            table,
        } => {
            let (detail, fix) = match missing.is_empty() {
                true => (format!("{role} may SELECT"), None),
                false => (
                    format!("{role} lacks {}", missing.join(", ")),
                    Some(grant(&missing.join(", "), table, grantee)),
                ),
            };
            worded("privileges: inspect, stats, check", status, detail, fix)
        }
        Privileges::Evict {
            role,
            grantee,
            missing,
            durable_point,
            refused,
            table,
        } => {
            let mut fixes: Vec<String> = missing.iter().map(|m| grant(m, table, grantee)).collect();
            let cannot_confirm = durable_point.as_ref().map(|f| {
                fixes.push(format!("GRANT EXECUTE ON FUNCTION {f} TO {grantee};"));
                format!(
                    "may not execute {f}, which evict calls once a second to make its deletes durable"
                )
            });
            let detail = match (missing.is_empty(), cannot_confirm) {
                (true, None) => granted_but(
                    format!("{role} may SELECT, DELETE and lock rows"),
                    "evict",
                    refused.and_then(crate::output::db::write_problem),
                ),
                (true, Some(c)) => format!("{role} may SELECT, DELETE and lock rows, but {c}"),
                (false, c) => format!(
                    "{role} lacks {} (needed only to run evict; row locks need UPDATE on a column){}",
                    missing.join(", "),
                    c.map(|c| format!(", and {c}")).unwrap_or_default()
                ),
            };
            let fix = (!fixes.is_empty()).then(|| fixes.join(" "));
            worded("privileges: evict", status, detail, fix)
        }
        Privileges::DropPartitions { role, owner } => {
            let detail = match owner {
                true => format!("{role} owns the table, so it may detach and drop partitions"),
                false => format!(
                    "{role} does not own the table (needed only to detach and drop partitions; evict without the flag deletes in batches)"
                ),
            };
            worded("privileges: evict --drop-partitions", status, detail, None)
        }
        Privileges::Reclaim(g) => reclaim_privileges(status, g),
    }
}

fn reclaim_privileges(status: Status, g: &ReclaimGrants) -> Worded {
    let ReclaimGrants {
        role,
        grantee,
        profile,
        able,
        unable,
        lacks,
        refused,
        table,
    } = g;
    let (detail, fix) = if able.is_empty() && unable.is_empty() {
        (format!("profile {profile} allows no reclaim action"), None)
    } else if unable.is_empty() {
        let may = format!("{role} may reclaim with {}", action_names(able));
        (
            granted_but(
                may,
                "reclaim",
                refused.and_then(crate::output::db::write_problem),
            ),
            None,
        )
    } else if able.is_empty() {
        (
            format!(
                "{role} may not reclaim (needed only to run reclaim): {} needs {}",
                action_names(unable),
                lacks.join(", ")
            ),
            Some(grant(&lacks.join(", "), table, grantee)),
        )
    } else {
        (
            format!(
                "{role} may reclaim with {}; {} also needs {}",
                action_names(able),
                action_names(unable),
                lacks.join(", ")
            ),
            Some(grant(&lacks.join(", "), table, grantee)),
        )
    };
    worded("privileges: reclaim", status, detail, fix)
}

fn stuck_label(after: f64) -> String {
    format!("stuck keys (> {})", human_secs(after))
}

/// A threshold row not checked, naming the failing checks that keep the statistics from being
/// read safely.
fn not_checked(threshold: Threshold, blocking: &[usize], all: &[Finding]) -> Worded {
    let names: Vec<String> = blocking
        .iter()
        .filter_map(|i| all.get(*i))
        .map(|f| words(f, all).check)
        .collect();
    let why = format!(
        "not checked: the statistics it needs cannot be read safely until {} passes",
        names.join(", ")
    );
    let check = match threshold {
        Threshold::Lag => "eviction lag".to_owned(),
        Threshold::Stuck { after } => stuck_label(after),
        Threshold::Autovacuum => "autovacuum".to_owned(),
        Threshold::RecentTtl => "recent TTL".to_owned(),
    };
    worded(&check, Status::Note, why, None)
}

fn lag_finding(status: Status, l: &Lag) -> Worded {
    let Lag::Known {
        seconds,
        at_most,
        max,
    } = l
    else {
        let detail = "not checked: the lag is unknown without the expiry index (or a TTL)";
        return worded("eviction lag", status, detail.to_owned(), None);
    };
    let shown = lag(*seconds, at_most.as_ref());
    let detail = match (max, at_most) {
        (Some(max), Some(x)) if seconds > max => lag_unknown(x, *seconds, *max),
        (Some(max), _) if seconds > max => format!(
            "eviction lag {shown} exceeds --max-eviction-lag {}; is the evict job running?",
            human_secs(*max)
        ),
        (Some(max), _) => format!("eviction lag {shown} within {}", human_secs(*max)),
        (None, _) => format!("eviction lag {shown} (no threshold set)"),
    };
    worded("eviction lag", status, detail, None)
}

fn stuck_finding(status: Status, after: f64, stuck: &Stuck) -> Worded {
    let detail = match stuck {
        Stuck::Uncounted => {
            "--max-stuck needs the optional in_progress index or --allow-scan".to_owned()
        }
        Stuck::Counted {
            count,
            max: Some(max),
        } if count.count as u64 > *max => format!(
            "{count} stuck in_progress keys exceed --max-stuck {max}; see `idemctl reclaim --dry-run`"
        ),
        Stuck::Counted {
            count,
            max: Some(max),
        } => format!("{count} within {max}"),
        Stuck::Counted { count, max: None } => format!("{count} (no threshold set)"),
    };
    worded(&stuck_label(after), status, detail, None)
}

fn autovacuum(status: Status, a: &Autovacuum) -> Worded {
    let (detail, fix) = match a {
        Autovacuum::Off { fix } => (
            "autovacuum is off for this table (or the server): eviction's dead rows wait for a manual VACUUM (evict --vacuum runs one after a run)".to_owned(),
            Some(fix.clone()),
        ),
        Autovacuum::Slow {
            worst,
            interval,
            after,
            fix,
        } => (
            format!(
                "a day's eviction leaves its dead rows waiting up to about {} for autovacuum, far longer \
                 than the eviction interval ({}); with the settings below autovacuum comes about every \
                 {} at the current eviction rate",
                human_secs(*worst),
                human_secs(*interval),
                human_secs(*after)
            ),
            Some(fix.clone()),
        ),
        Autovacuum::Fine {
            cycle: Some(c),
            interval,
        } => (
            format!(
                "eviction's dead rows wait up to about {} for autovacuum (eviction every {})",
                human_secs(*c),
                human_secs(*interval)
            ),
            None,
        ),
        Autovacuum::Fine { cycle: None, .. } => (
            "no recent keys to estimate the eviction rate from".to_owned(),
            None,
        ),
    };
    worded("autovacuum", status, detail, fix)
}

fn recent_ttl(status: Status, t: &TtlCheck) -> Worded {
    let detail = match t {
        TtlCheck::NoKeys => "no keys to sample".to_owned(),
        TtlCheck::Short { ttl, min } if ttl.source == "ttl" => format!(
            "keys live {} (--ttl), shorter than --min-ttl {}: a retry after the key is evicted runs the request again",
            human_secs(ttl.min_seconds),
            human_secs(*min)
        ),
        TtlCheck::Short { ttl, min } => format!(
            "{} of {} recent keys sampled live less than --min-ttl {} (shortest {}, median {}): a \
             retry after the key is evicted runs the request again",
            ttl.keys_below,
            ttl.keys,
            human_secs(*min),
            human_secs(ttl.min_seconds),
            human_secs(ttl.p50_seconds)
        ),
        TtlCheck::Fine { shortest, min } => format!(
            "recent keys live at least {} (--min-ttl {})",
            human_secs(*shortest),
            human_secs(*min)
        ),
    };
    worded("recent TTL", status, detail, None)
}

/// check's finding on the workers of a distributed table, from one outcome.
fn citus_finding(outcome: &Outcome) -> Worded {
    match outcome {
        Outcome::Layout {
            layout,
            tenant_local,
        } => layout_finding(layout, *tenant_local),
        Outcome::Unreachable { error } => worded(
            "citus workers",
            Status::Fail,
            format!("cannot work on the shards: {error}"),
            Some("evict, reclaim, inspect and stats connect to each worker with this connection's role, password source (password, ~/.pgpass, service file) and TLS settings, at the host and port the coordinator's pg_dist_node names: let that role connect to every worker (pg_hba.conf, a ~/.pgpass line per worker host)".into()),
        ),
        Outcome::Workers { workers } => {
            let names: Vec<String> = workers
                .iter()
                .map(|w| format!("{} ({})", worker(&w.host, w.port), shard_count(w.shards)))
                .collect();
            worded(
                "citus workers",
                Status::Ok,
                format!(
                    "reached every worker holding shards with this connection's settings: {}",
                    names.join(", ")
                ),
                None,
            )
        }
        Outcome::Indexes {
            shards,
            want_expiry,
            want_stuck,
            missing,
            table,
            fixes,
            identity,
        } => indexes_finding(
            *shards,
            (*want_expiry, *want_stuck),
            missing,
            table,
            fixes,
            identity.as_ref(),
        ),
        Outcome::PrivilegesUnread { error } => worded(
            "citus shard privileges",
            Status::Fail,
            format!("cannot read the role's privileges on the shards: {error}"),
            None,
        ),
        Outcome::Privileges {
            role,
            grantee,
            shards,
            wanted,
            short,
            no_durable_point,
            table,
        } => privileges_finding(role, grantee, *shards, (wanted, short), no_durable_point, table),
    }
}

/// How the table is distributed, and what that means for the commands.
fn layout_finding(layout: &Layout, tenant_local: bool) -> Worded {
    if matches!(layout, Layout::SingleShard) {
        return worded(
            "citus layout",
            Status::Note,
            format!(
                "{}: evict, stats, inspect and the reclaim sweep work on its one shard on its worker; reclaim --apply is refused (it sends each plan row to its tenant's shard by a distribution column, which this table does not have)",
                layout.describe()
            ),
            None,
        );
    }
    if !matches!(layout, Layout::Distributed { .. }) {
        return worded("citus layout", Status::Ok, layout.describe(), None);
    }
    if tenant_local {
        worded(
            "citus layout",
            Status::Ok,
            format!(
                "{}; the distribution column is in the primary key, so a tenant's keys live on one shard",
                layout.describe()
            ),
            None,
        )
    } else {
        worded(
            "citus layout",
            Status::Note,
            format!(
                "{}, not by the tenant column: evict, stats, inspect and the reclaim sweep work shard by shard whatever the column; inspect --api-key-id reads every shard; reclaim --apply is refused (it sends each plan row to its tenant's shard)",
                layout.describe()
            ),
            None,
        )
    }
}

/// `n` shards, in the singular for one.
fn shard_count(n: usize) -> String {
    match n {
        1 => "1 shard".to_owned(),
        _ => format!("{n} shards"),
    }
}

/// Every one of `n` shards: a table of a distributed schema has one.
fn all_shards(n: usize) -> String {
    match n {
        1 => "its one shard".to_owned(),
        _ => format!("all {n} shards"),
    }
}

/// Each shard that lacks something, `shard N on host:port` followed by what it lacks as `lacks`
/// words it, joined by `; `.
fn shards_lacking(shards: &[ShardLacks], lacks: impl Fn(&[String]) -> String) -> String {
    shards
        .iter()
        .map(|s| {
            format!(
                "shard {} on {}{}",
                s.shard,
                worker(&s.host, s.port),
                lacks(&s.lacks)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn indexes_finding(
    shards: usize,
    (want_expiry, want_stuck): (bool, bool),
    missing: &[ShardLacks],
    table: &str,
    fixes: &[String],
    identity: Option<&(String, String)>,
) -> Worded {
    if missing.is_empty() {
        let carried = match want_expiry {
            true => "the expiry and identity indexes",
            false => "the identity index",
        };
        let stuck = match want_stuck {
            true => " and the in_progress index",
            false => "",
        };
        return worded(
            "citus shard indexes",
            Status::Ok,
            format!(
                "{} {} {carried}{stuck}",
                all_shards(shards),
                if shards == 1 { "carries" } else { "carry" }
            ),
            None,
        );
    }
    worded(
        "citus shard indexes",
        Status::Fail,
        shards_lacking(missing, |l| {
            let index = if l.len() == 1 { "index" } else { "indexes" };
            format!(" lacks the {} {index}", l.join(" and "))
        }),
        Some(index_fix(table, fixes, identity)),
    )
}

/// The grants some shard lacks, each once, in the order first met, of those the role has on the
/// coordinator's table (`wanted`): the GRANT there passes them on again and gives nothing new.
fn missing_grants<'a>(short: &'a [ShardLacks], wanted: &[String]) -> Vec<&'a str> {
    let mut grants: Vec<&str> = Vec::new();
    for g in short.iter().flat_map(|s| &s.lacks) {
        if wanted.contains(g) && !grants.contains(&g.as_str()) {
            grants.push(g);
        }
    }
    grants
}

/// On the coordinator, the statements that recreate each lost index on every shard, and for a
/// lost identity index (which backs the primary key or a unique constraint, so no index statement
/// restores it) what restores a constraint: alone, when no index statement is needed.
fn index_fix(table: &str, fixes: &[String], identity: Option<&(String, String)>) -> String {
    let mut fix: Vec<String> = fixes.iter().map(|f| sanitize(f)).collect();
    if !fix.is_empty() {
        fix.push("-- on the coordinator: Citus passes each statement to every shard".to_owned());
    }
    if let Some((index, columns)) = identity {
        let restore = format!(
            "the identity index {} backs the primary key or a unique constraint on {}, which no index statement restores: drop that constraint and add it again on the same columns, on the coordinator (ALTER TABLE {table} DROP CONSTRAINT ..., then ADD PRIMARY KEY or UNIQUE {}), which Citus applies to every shard and which locks the table while the index builds",
            sanitize(index),
            sanitize(columns),
            sanitize(columns)
        );
        fix.push(match fix.is_empty() {
            true => restore,
            false => format!("; {restore}"),
        });
    }
    fix.join(" ").replace(" ; ", "; ")
}

fn privileges_finding(
    role: &str,
    grantee: &str,
    shards: usize,
    (wanted, short): (&[String], &[ShardLacks]),
    no_durable_point: &[WorkerLacks],
    table: &str,
) -> Worded {
    let shown = sanitize(role);
    if short.is_empty() && no_durable_point.is_empty() {
        return worded(
            "citus shard privileges",
            Status::Ok,
            format!(
                "{shown} has on {} the grants it has on the coordinator's table",
                all_shards(shards)
            ),
            None,
        );
    }
    let mut details = Vec::new();
    let mut fixes = Vec::new();
    if !short.is_empty() {
        details.push(format!(
            "{shown} lacks on {} of {shards} shards grants it has on the coordinator's table, so the commands that work on the shards fail there: {}",
            short.len(),
            shards_lacking(short, |l| format!(": {}", l.join(", ")))
        ));
        fixes.push(format!(
            "GRANT {} ON {table} TO {}; -- on the coordinator: Citus passes grants on a distributed table to every shard",
            missing_grants(short, wanted).join(", "),
            sanitize(grantee)
        ));
    }
    for w in no_durable_point {
        let at = worker(&w.host, w.port);
        details.push(format!(
            "{shown} may not execute {} on worker {at}, which evict calls there once a second to make its deletes durable",
            sanitize(&w.function)
        ));
        fixes.push(format!(
            "GRANT EXECUTE ON FUNCTION {} TO {}; -- on worker {at}: function grants stay in the database where they are made",
            sanitize(&w.function),
            sanitize(grantee)
        ));
    }
    worded(
        "citus shard privileges",
        Status::Fail,
        details.join("; "),
        Some(fixes.join(" ")),
    )
}

//! The Citus parts of the reports for people: check's findings on the workers, the per-worker
//! tables of `stats` and of evict's summary. Worker names, the role and the distribution column are
//! escaped here, where they are printed.

use crate::commands::citus_stats::CitusStats;
use crate::output::names::worker;
use crate::output::{Doc, human_bytes, human_secs, sanitize};
use crate::report::check::{Finding, Status, finding};
use crate::report::citus::{Outcome, ShardLacks};
use crate::report::evict::CitusReport;
use crate::report::rows::Capped;
use crate::report::rows::Layout;

/// A table of one row a worker, titled with the table's layout.
fn workers_table<N>(
    d: &mut Doc,
    layout: &Layout,
    header: &[&str],
    nodes: &[N],
    row: impl Fn(&N) -> Vec<String>,
) {
    // "table distributed by ...", else the layout's own noun ("a reference table", ...).
    let title = match layout {
        Layout::Distributed { .. } => format!("Citus workers (table {}):", layout.describe()),
        _ => format!("Citus workers ({}):", layout.describe()),
    };
    d.rows(Some(&title), header, nodes.iter().map(row).collect());
}

/// `stats`: one row a worker, its part of the table's figures.
pub(crate) fn stats_workers(d: &mut Doc, c: &CitusStats) {
    let header = [
        "worker",
        "shards",
        "estimated rows",
        "total size",
        "dead tuples",
        "expired backlog",
        "eviction lag",
        "stuck in_progress",
    ];
    workers_table(d, &c.layout, &header, &c.nodes, |n| {
        vec![
            n.node.clone(),
            n.shards.to_string(),
            n.estimated_rows.to_string(),
            human_bytes(n.total_bytes),
            n.dead_tuples.to_string(),
            n.expired_backlog.to_string(),
            human_secs(n.eviction_lag_seconds),
            n.stuck
                .map_or_else(|| "not counted".to_owned(), |s| s.to_string()),
        ]
    });
}

/// evict's summary: one row a worker, what its run did and left, and its pace. The keys left
/// because a foreign key still references them get a column when any worker left such a key.
pub(crate) fn evict_workers(d: &mut Doc, c: &CitusReport) {
    let capped = |c: &Option<Capped>| c.map_or_else(|| "-".to_owned(), |c| c.to_string());
    let referenced = c.nodes.iter().any(|n| n.skipped_referenced > 0);
    let mut header = vec![
        "worker",
        "shards drained",
        "rows evicted",
        "batches",
        "skipped (locked)",
    ];
    if referenced {
        header.push("skipped (still referenced)");
    }
    header.extend(["backlog left", "in_progress left", "pace"]);
    workers_table(d, &c.layout, &header, &c.nodes, |n| {
        let mut row = vec![
            n.node.clone(),
            format!("{} / {}", n.shards_drained, n.shards),
            n.rows_evicted.to_string(),
            n.batches.to_string(),
            n.skipped_locked.to_string(),
        ];
        if referenced {
            row.push(n.skipped_referenced.to_string());
        }
        row.extend([
            capped(&n.backlog_left),
            capped(&n.expired_in_progress_left),
            crate::output::evict::pace_summary(&n.pace),
        ]);
        row
    });
}

/// check's findings on the workers of a distributed table, one per outcome.
pub(crate) fn check_findings(outcomes: &[Outcome]) -> Vec<Finding> {
    outcomes.iter().map(check_finding).collect()
}

fn check_finding(outcome: &Outcome) -> Finding {
    match outcome {
        Outcome::Layout {
            layout,
            tenant_local,
        } => layout_finding(layout, *tenant_local),
        Outcome::Unreachable { error } => finding(
            "citus workers",
            Status::Fail,
            format!("cannot work on the shards: {error}"),
            Some("evict, reclaim, inspect and stats connect to each worker with this connection's role, password source (password, ~/.pgpass, service file) and TLS settings, at the host and port the coordinator's pg_dist_node names: let that role connect to every worker (pg_hba.conf, a ~/.pgpass line per worker host)".into()),
        ),
        Outcome::Workers { workers } => {
            let names: Vec<String> = workers
                .iter()
                .map(|w| format!("{} ({} shards)", worker(&w.host, w.port), w.shards))
                .collect();
            finding(
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
            want_stuck,
            missing,
            table,
            fixes,
            identity,
        } => indexes_finding(*shards, *want_stuck, missing, table, fixes, identity.as_ref()),
        Outcome::PrivilegesUnread { error } => finding(
            "citus shard privileges",
            Status::Fail,
            format!("cannot read the role's privileges on the shards: {error}"),
            None,
        ),
        Outcome::Privileges {
            role,
            shards,
            wanted,
            short,
            table,
        } => privileges_finding(role, *shards, wanted, short, table),
    }
}

/// How the table is distributed, and what that means for the commands.
fn layout_finding(layout: &Layout, tenant_local: bool) -> Finding {
    if matches!(layout, Layout::SingleShard) {
        return finding(
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
        return finding("citus layout", Status::Ok, layout.describe(), None);
    }
    if tenant_local {
        finding(
            "citus layout",
            Status::Ok,
            format!(
                "{}; the distribution column is in the primary key, so a tenant's keys live on one shard",
                layout.describe()
            ),
            None,
        )
    } else {
        finding(
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
    want_stuck: bool,
    missing: &[ShardLacks],
    table: &str,
    fixes: &[String],
    identity: Option<&(String, String)>,
) -> Finding {
    if missing.is_empty() {
        return finding(
            "citus shard indexes",
            Status::Ok,
            format!(
                "all {shards} shards carry the expiry and identity indexes{}",
                if want_stuck {
                    " and the in_progress index"
                } else {
                    ""
                }
            ),
            None,
        );
    }
    finding(
        "citus shard indexes",
        Status::Fail,
        shards_lacking(missing, |l| format!(" lacks the {} index", l.join(" and "))),
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
/// restores it) what restores a constraint.
fn index_fix(table: &str, fixes: &[String], identity: Option<&(String, String)>) -> String {
    let mut fix: Vec<String> = fixes.iter().map(|f| sanitize(f)).collect();
    fix.push("-- on the coordinator: Citus passes each statement to every shard".to_owned());
    if let Some((index, columns)) = identity {
        fix.push(format!(
            "; the identity index {} backs the primary key or a unique constraint on {}, which no index statement restores: drop that constraint and add it again on the same columns (ALTER TABLE {table} DROP CONSTRAINT ..., then ADD PRIMARY KEY or UNIQUE {}), which Citus applies to every shard and which locks the table while the index builds",
            sanitize(index),
            sanitize(columns),
            sanitize(columns)
        ));
    }
    fix.join(" ").replace(" ; ", "; ")
}

fn privileges_finding(
    role: &str,
    shards: usize,
    wanted: &[String],
    short: &[ShardLacks],
    table: &str,
) -> Finding {
    let shown = sanitize(role);
    if short.is_empty() {
        return finding(
            "citus shard privileges",
            Status::Ok,
            format!(
                "{shown} has on all {shards} shards the grants it has on the coordinator's table"
            ),
            None,
        );
    }
    finding(
        "citus shard privileges",
        Status::Fail,
        format!(
            "{shown} lacks on {} of {shards} shards grants it has on the coordinator's table, so the commands that work on the shards fail there: {}",
            short.len(),
            shards_lacking(short, |l| format!(": {}", l.join(", ")))
        ),
        Some(format!(
            "GRANT {} ON {table} TO {}; -- on the coordinator: Citus passes grants on a distributed table to every shard",
            missing_grants(short, wanted).join(", "),
            sanitize(&crate::db::table::quote_ident(role))
        )),
    )
}

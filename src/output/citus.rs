//! The Citus parts of the reports for people: the per-worker tables of `stats` and of evict's
//! summary. Worker names, the role and the distribution column are
//! escaped here, where they are printed.

use crate::output::{Doc, human_bytes, human_secs};
use crate::report::evict::CitusReport;
use crate::report::rows::Capped;
use crate::report::rows::Layout;
use crate::report::stats::CitusStats;

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

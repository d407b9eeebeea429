//! evict's run summary for people, and the partition tables the summary and the dry run share.
//! Names from the catalog are escaped here, where they are printed.

use crate::commands::evict::EvictReport;
use crate::commands::evict::partitions;
use crate::db::queries::Capped;
use crate::output::{Doc, human_bytes, human_secs, sanitize};

/// The summary of a run: what it evicted and left, its batches, pace and limits, the Citus
/// workers' table and the partitions it dropped.
pub(crate) fn summary(r: &EvictReport) -> Doc {
    let mut d = Doc::default();
    let capped = |c: &Option<Capped>| c.map_or_else(|| "-".to_owned(), |c| c.to_string());
    let mut fields: Vec<(String, String)> = vec![
        ("table".into(), r.table.clone()),
        ("end reason".into(), r.end_reason.as_str().into()),
        ("rows evicted".into(), r.rows_evicted.to_string()),
        ("batches".into(), r.batches.to_string()),
        ("elapsed".into(), format!("{:.2}s", r.elapsed_seconds)),
        ("rate".into(), format!("{:.0} rows/s", r.rows_per_second)),
        (
            "skipped (locked by live requests)".into(),
            r.skipped_locked.to_string(),
        ),
        (
            "skipped (younger than --min-age)".into(),
            r.skipped_min_age.to_string(),
        ),
        (
            "expired in_progress left (see reclaim)".into(),
            capped(&r.expired_in_progress_left),
        ),
        ("expired backlog left".into(), capped(&r.backlog_left)),
    ];
    // Batch figures describe batches that deleted something; a run that evicted nothing has none.
    if r.rows_evicted > 0 {
        fields.extend([
            (
                "batch latency p50 / p99 / max".into(),
                format!(
                    "{:.1} / {:.1} / {:.1} ms",
                    r.batch_ms_p50, r.batch_ms_p99, r.batch_ms_max
                ),
            ),
            (
                "rows per batch p50 / max".into(),
                format!("{} / {}", r.batch_rows_p50, r.batch_rows_max),
            ),
        ]);
    }
    d.fields(None, fields);
    let mut extra = Vec::new();
    if !r.dropped_partitions.is_empty() || !r.partitions_kept.is_empty() {
        extra.push((
            "partitions dropped".into(),
            format!(
                "{} (about {} rows)",
                r.dropped_partitions.len(),
                r.rows_dropped_estimate
            ),
        ));
    }
    if let Some(limit) = r.replica_lag_limit_seconds {
        extra.push((
            "paused for replica lag".into(),
            format!(
                "{} times, {} in all (limit {}, worst lag seen {})",
                r.replica_lag_waits,
                human_secs(r.replica_lag_wait_seconds),
                human_secs(limit),
                human_secs(r.replica_lag_max_seconds)
            ),
        ));
    }
    extra.push(("pace".into(), r.pace.describe()));
    if let Some(rate) = &r.rate_limit {
        extra.push(("rate limit".into(), rate.describe()));
    }
    if let Some(v) = &r.vacuum {
        extra.push(("vacuum".into(), v.describe()));
    }
    d.fields(None, extra);
    if let Some(c) = &r.citus {
        crate::commands::evict::citus::blocks(&mut d, c);
    }
    partition_blocks(
        &mut d,
        &r.dropped_partitions,
        &r.partitions_kept,
        "partitions dropped",
    );
    d
}

/// Tables of dropped (or droppable) partitions and of those left to the batches.
pub(crate) fn partition_blocks(
    doc: &mut Doc,
    dropped: &[partitions::Dropped],
    kept: &[partitions::Kept],
    title: &str,
) {
    if !dropped.is_empty() {
        let rows = dropped
            .iter()
            .map(|d| {
                vec![
                    sanitize(&d.name),
                    bound_text(d),
                    d.estimated_rows.to_string(),
                    human_bytes(d.total_bytes),
                ]
            })
            .collect();
        doc.rows(
            Some(title),
            &["partition", "bounds", "estimated rows", "size"],
            rows,
        );
    }
    if !kept.is_empty() {
        let rows = kept
            .iter()
            .map(|k| vec![sanitize(&k.name), k.reason.clone()])
            .collect();
        doc.rows(
            Some("partitions left to the batches"),
            &["partition", "why"],
            rows,
        );
    }
}

/// A partition's bound for the human summary: its range when known, else as PostgreSQL prints it
/// (escaped for a terminal).
fn bound_text(d: &partitions::Dropped) -> String {
    sanitize(d.bound.strip_prefix("FOR VALUES ").unwrap_or(&d.bound))
}

//! stats's report for people: the figures an alert needs as `name  value` lines (sizes, lag,
//! backlog, stuck keys, vacuum), the Citus workers' table, the notes, and with `--partitions` one
//! row per leaf partition. Keys and catalog names are escaped here, where they are printed.

use crate::output::{Doc, escape_controls, human_bytes, human_secs, rfc3339, sanitize};
use crate::report::rows::KeyRef;
use crate::report::stats::{ExpiryFigures, Outlook, ReferencedExpired, StatsNote, StatsReport};

/// The human-readable report; with `partitions`, the table of leaf partitions too.
pub(crate) fn report(r: &StatsReport, partitions: bool) -> Doc {
    let mut d = doc(r);
    if partitions {
        partitions_block(&mut d, r);
    }
    d
}

/// The recent TTL, one line.
fn ttl_text(t: Option<&crate::report::rows::RecentTtl>) -> String {
    match t {
        None => "no keys to sample".into(),
        Some(t) if t.source == "ttl" => format!(
            "{} for every key (--ttl; the table has no expiry column)",
            human_secs(t.min_seconds)
        ),
        Some(t) => format!(
            "min {} / p10 {} / median {} / p90 {} / max {} ({} keys: the next and the last to expire)",
            human_secs(t.min_seconds),
            human_secs(t.p10_seconds),
            human_secs(t.p50_seconds),
            human_secs(t.p90_seconds),
            human_secs(t.max_seconds),
            t.keys
        ),
    }
}

pub(crate) fn key_label(k: &KeyRef) -> String {
    crate::output::key_label(k.api_key_id.as_deref(), k.scope.as_ref(), k.key.as_deref())
}

/// The human-readable report.
fn doc(r: &StatsReport) -> Doc {
    let mut d = Doc::default();
    let s = &r.sizes;
    let oldest_live = r.oldest_live.as_ref().map_or_else(
        || match r.expiry_figures {
            ExpiryFigures::Exact => "none (no live keys)".to_owned(),
            _ => "unknown (see note)".to_owned(),
        },
        |k| {
            format!(
                "{} age {}, expires {}",
                key_label(k),
                human_secs(k.seconds),
                crate::output::at(k.expires_at)
            )
        },
    );
    let lag = lag_text(r);
    let stuck = r.stuck.as_ref().map_or_else(
        || "not counted (see note)".to_owned(),
        |st| match st.oldest_since {
            Some(t) => format!("{} (oldest held since {})", st.count, crate::output::at(t)),
            None => st.count.to_string(),
        },
    );
    let when = |t: Option<time::OffsetDateTime>| t.map_or_else(|| "never".to_owned(), rfc3339);
    let mut rows: Vec<(String, String)> = vec![
        ("table".into(), sanitize(&r.table)),
        ("estimated rows".into(), s.estimated_rows.to_string()),
        ("heap size".into(), human_bytes(s.heap_bytes)),
        ("toast size".into(), human_bytes(s.toast_bytes)),
        ("index size".into(), human_bytes(s.index_bytes)),
        ("total size".into(), human_bytes(s.total_bytes)),
        ("oldest live key".into(), oldest_live),
        ("eviction lag".into(), lag),
        ("expired backlog".into(), backlog_text(r)),
        (
            format!(
                "stuck in_progress (> {})",
                human_secs(r.stuck_after_seconds)
            ),
            stuck,
        ),
        ("dead tuples".into(), r.vacuum.dead_tuples.to_string()),
        (
            "dead tuple ratio".into(),
            format!("{:.1}%", r.maintenance.dead_tuple_ratio * 100.0),
        ),
        ("autovacuum threshold".into(), thresholds(&r.maintenance)),
        ("next autovacuum".into(), next_autovacuum(&r.maintenance)),
        ("recent TTL".into(), ttl_text(r.recent_ttl.as_ref())),
        ("last vacuum".into(), when(r.vacuum.last_vacuum)),
        ("last analyze".into(), when(r.vacuum.last_analyze)),
    ];
    if let (Some(how), Some(parts)) = (&r.partitioning, &r.partitions) {
        let default = r.default_partition().map_or_else(
            || "no default partition".to_owned(),
            |p| {
                format!(
                    "default partition {} holds about {} rows",
                    sanitize(&p.name),
                    p.estimated_rows
                )
            },
        );
        rows.push((
            "partitions".into(),
            format!(
                "{} leaf partitions, {}; {default}",
                parts.len(),
                sanitize(&how.definition)
            ),
        ));
    }
    if let Some(refd) = &r.referenced_expired {
        rows.insert(
            8,
            ("expired, still referenced".into(), referenced_text(refd)),
        );
    }
    d.fields(None, rows);
    if let Some(c) = &r.citus {
        crate::output::citus::stats_workers(&mut d, c);
    }
    for n in &r.notes {
        d.text(format!("note: {}", escape_controls(&note(n))));
    }
    d
}

/// The eviction lag, with the key it is the wait of. With a NO ACTION / RESTRICT foreign key, that
/// is the oldest expired key evict can delete (the referenced ones have a line of their own).
fn lag_text(r: &StatsReport) -> String {
    match r.expiry_figures {
        ExpiryFigures::Unknown => return "unknown (no expiry column and no --ttl)".into(),
        ExpiryFigures::Estimated => {
            return match r.eviction_lag_estimated_seconds {
                Some(s) => format!(
                    "about {} (estimated: the planner's statistics as of the last analyze, no index on expiry)",
                    human_secs(s)
                ),
                None => "unknown (no index on expiry to find it, and no planner statistics to estimate it from until the table is analyzed)".into(),
            };
        }
        ExpiryFigures::Exact => {}
    }
    let refd = r.referenced_expired.as_ref();
    match (&r.oldest_expired, refd) {
        (Some(k), _) => format!(
            "{} (oldest expired{}: {}, expired {})",
            human_secs(k.seconds),
            if refd.is_some() {
                " not referenced"
            } else {
                ""
            },
            key_label(k),
            crate::output::at(k.expires_at)
        ),
        (None, Some(x)) if x.lag_at_most => format!(
            "unknown, at most {} (each of the oldest {} expired keys is still referenced, and more wait beyond them: the oldest key evict can delete, if any, is younger than those)",
            human_secs(r.eviction_lag_seconds.unwrap_or(0.0)),
            x.examined
        ),
        (None, Some(_)) => "0s (no expired key evict can delete is waiting)".to_owned(),
        (None, None) => "0s (nothing expired is waiting)".to_owned(),
    }
}

/// The expired keys a NO ACTION / RESTRICT foreign key still references, one line.
fn referenced_text(x: &ReferencedExpired) -> String {
    match &x.oldest {
        None => format!("{} (among the oldest {} expired keys)", x.count, x.examined),
        Some(k) => format!(
            "{} among the oldest {} expired keys (evict leaves them until nothing references them; oldest: {}, waiting {}, expired {})",
            x.count,
            x.examined,
            key_label(k),
            human_secs(k.seconds),
            crate::output::at(k.expires_at)
        ),
    }
}

/// `stats --partitions`: one row per leaf partition.
fn partitions_block(d: &mut Doc, r: &StatsReport) {
    let Some(parts) = &r.partitions else {
        d.text("the table is not partitioned");
        return;
    };
    let at = |t: Option<crate::report::timestamp::Timestamp>| {
        t.map_or_else(|| "-".to_owned(), crate::output::at)
    };
    let rows = parts
        .iter()
        .map(|p| {
            let bounds = if p.is_default {
                "DEFAULT".to_owned()
            } else if p.range_from.is_some() || p.range_to.is_some() {
                format!("{} .. {}", at(p.range_from), at(p.range_to))
            } else {
                sanitize(p.bound.strip_prefix("FOR VALUES ").unwrap_or(&p.bound))
            };
            let rows = if p.never_analyzed {
                "not analyzed".to_owned()
            } else {
                p.estimated_rows.to_string()
            };
            vec![sanitize(&p.name), bounds, rows, human_bytes(p.total_bytes)]
        })
        .collect();
    d.rows(
        Some("Partitions (estimates from the catalog):"),
        &["partition", "bounds", "estimated rows", "total size"],
        rows,
    );
}

/// The backlog as the report shows it: exact, or "at least" the cap with the planner's estimate.
fn backlog_text(r: &StatsReport) -> String {
    match r.expiry_figures {
        ExpiryFigures::Unknown => return "unknown (no expiry column and no --ttl)".into(),
        ExpiryFigures::Estimated => {
            return format!(
                "about {} (estimated: the planner's estimate, no index on expiry)",
                r.expired_backlog_estimate.unwrap_or(0)
            );
        }
        ExpiryFigures::Exact => {}
    }
    match (r.expired_backlog, r.expired_backlog_estimate) {
        (None, _) => "not counted".into(),
        (Some(b), Some(est)) if b.at_least => {
            format!("{b} (about {est} by the planner's estimate)")
        }
        (Some(b), _) => b.to_string(),
    }
}

/// The summary line for `stats`: when autovacuum next vacuums the table (the relation, a leaf
/// partition's name as the catalog holds it, escaped here).
fn next_autovacuum(o: &Outlook) -> String {
    if !o.autovacuum_enabled {
        return "never: autovacuum is off for this table or the server".into();
    }
    let rel = o.next_autovacuum_relation.as_deref().map(sanitize);
    match (&o.next_autovacuum_seconds, rel) {
        (Some(s), Some(rel)) if *s <= 0.0 => {
            format!("due now ({rel} is past its threshold, waiting for an autovacuum worker)")
        }
        (Some(s), Some(rel)) if o.relations.len() > 1 => {
            format!("in about {} ({rel})", human_secs(*s))
        }
        (Some(s), _) => format!("in about {}", human_secs(*s)),
        _ => "unknown (no recent keys to estimate the eviction rate from)".into(),
    }
}

/// The thresholds, one line.
fn thresholds(o: &Outlook) -> String {
    match o.relations.as_slice() {
        [one] => format!(
            "{} dead tuples ({} + {} × {:.0} rows{})",
            one.threshold.round(),
            one.rel.base_threshold,
            one.rel.scale_factor,
            one.rel.reltuples,
            if one.rel.own_settings {
                ", the table's own settings"
            } else {
                ", the server's settings"
            }
        ),
        many => format!("per partition ({} leaf partitions)", many.len()),
    }
}

/// The report as its JSON document: the figures as they are, the notes worded.
pub(crate) fn json(r: &StatsReport) -> serde_json::Result<serde_json::Value> {
    let mut v = serde_json::to_value(r)?;
    let notes: Vec<String> = r.notes.iter().map(note).collect();
    v["notes"] = serde_json::to_value(notes)?;
    Ok(v)
}

/// A note of the report, one sentence (names escaped; the report's text escapes it once more).
pub(crate) fn note(n: &StatsNote) -> String {
    match n {
        StatsNote::ExpiryUnknownWithoutTtl {
            table,
            profile,
            created_at,
        } => format!(
            "table {} has no expiry column (profile {profile}): keys expire a TTL after {}; the oldest live key, eviction lag, expired backlog and recent TTL need --ttl DUR (or IDEMCTL_TTL)",
            sanitize(table),
            sanitize(created_at)
        ),
        StatsNote::ExpiryEstimatedWithoutIndex { table, column, fix } => format!(
            "table {} has no index on {}: the expired backlog and the eviction lag are estimated from the planner's statistics, and the oldest live key is unknown (finding it would read the whole table); evict walks the table's unique index meanwhile. The index makes them exact: {fix}",
            sanitize(table),
            sanitize(column)
        ),
        StatsNote::NoInFlightMarker { table, profile } => no_in_flight_marker(table, profile),
        StatsNote::StuckNotCounted { fix, shards } => format!(
            "stuck in_progress keys not counted: that needs the optional index ({fix}) or --allow-scan, which reads {}",
            if *shards {
                "every shard whole"
            } else {
                "the whole table"
            }
        ),
        StatsNote::NeverAnalyzed { shards: false } => {
            "the table has never been analyzed; the row estimate is unknown until ANALYZE runs"
                .to_owned()
        }
        StatsNote::NeverAnalyzed { shards: true } => {
            "a shard has never been analyzed; the row estimate counts it as empty until ANALYZE runs"
                .to_owned()
        }
        StatsNote::UnprobedReference { key } => {
            crate::output::unprobed_reference_note(key, "the eviction lag", false)
        }
    }
}

/// The table has no in-flight marker (a mapping without `in_flight`).
pub(crate) fn no_in_flight_marker(table: &str, profile: &str) -> String {
    format!(
        "table {} has no in-flight marker (profile {} maps no in_flight): no key is ever in flight, so none is stuck, reclaim has nothing to do and no in_progress index is needed; evict removes every expired key no live transaction holds",
        sanitize(table),
        sanitize(profile)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_autovacuum_line_escapes_the_relation() {
        let o = Outlook {
            dead_tuple_ratio: 0.0,
            turnover_rows_per_second: None,
            next_autovacuum_seconds: Some(0.0),
            next_autovacuum_relation: Some("public.\"p\n\u{1b}[2J\"".into()),
            cycle_seconds: None,
            autovacuum_enabled: true,
            relations: Vec::new(),
        };
        assert_eq!(
            next_autovacuum(&o),
            "due now (public.\"p\\n\\x1b[2J\" is past its threshold, waiting for an autovacuum worker)"
        );
    }
}

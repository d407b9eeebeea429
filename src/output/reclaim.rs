//! reclaim's reports for people: the preview (`--dry-run`, `--plan`) with its listing and notes,
//! the summary of a writing run with the plan rows it left alone, and the filters as a summary
//! names them. Every value from the table is escaped here, where it is printed.

use crate::cli::ReclaimAction;
use crate::commands::reclaim::{Candidate, LeftAlone, PreviewReport, ReclaimReport};
use crate::db::queries::Capped;
use crate::db::reclaim::Filter;
use crate::output::{Doc, human_secs, rfc3339, sanitize};

/// The preview: what would be reclaimed, the keys listed, and what the listing leaves out.
pub(crate) fn preview(r: &PreviewReport) -> Doc {
    let mut doc = Doc::default();
    doc.fields(None, preview_fields(r));
    if !r.rows.is_empty() {
        let cells = r.rows.iter().map(candidate_cells).collect();
        doc.rows(None, &CANDIDATE_HEADER, cells);
        preview_notes(&mut doc, r);
    }
    if let Some(p) = &r.plan_file {
        let p = sanitize(p);
        doc.text(format!(
            "plan written to {p} ({} keys); review it, then run: idemctl reclaim --apply {p}",
            r.rows.len()
        ));
    }
    doc
}

fn preview_notes(doc: &mut Doc, r: &PreviewReport) {
    let listed = r.rows.len();
    let at_limit = r
        .limit
        .is_some_and(|l| u64::try_from(listed).is_ok_and(|n| n == l));
    if r.listing_truncated && at_limit {
        doc.text(format!(
            "listed the oldest {listed}: as many as --limit {listed} lets a run take"
        ));
    } else if r.listing_truncated && r.plan_file.is_some() {
        doc.text(format!(
            "the plan holds the oldest {listed} keys only; apply it, then make a new plan for the rest"
        ));
    } else if r.listing_truncated {
        doc.text(format!(
            "listed the oldest {listed} keys only; a run reclaims more, batch by batch"
        ));
    }
    doc.text("a key whose owner is still alive (its row locked) is listed but skipped at run time");
}

fn preview_fields(r: &PreviewReport) -> Vec<(String, String)> {
    let would = match r.limit {
        Some(l) => format!("{} (a run with --limit {l} stops at {l})", r.would_reclaim),
        None => r.would_reclaim.to_string(),
    };
    let mut rows = vec![
        ("table".to_owned(), r.table.clone()),
        (
            "held longer than".to_owned(),
            format!("{} (database clock)", human_secs(r.older_than_seconds)),
        ),
    ];
    if let Some(only) = filter_text(&r.filter) {
        rows.push(("only".to_owned(), only));
    }
    rows.extend([
        ("action".to_owned(), preview_action(r)),
        ("would reclaim".to_owned(), would),
    ]);
    if let Some(body) = &r.response_body {
        rows.push(("stored body".to_owned(), sanitize(&body.to_string())));
    }
    rows
}

/// The filters for a summary (None without any): `api_key_id t42, path /v1/payments, method POST`.
pub(crate) fn filter_text(f: &Filter) -> Option<String> {
    let parts: Vec<String> = [
        ("api_key_id", &f.api_key_id),
        ("path", &f.path),
        ("method", &f.method),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.as_deref().map(|v| format!("{name} {}", sanitize(v))))
    .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

const CANDIDATE_HEADER: [&str; 7] = [
    "api_key_id",
    "key",
    "method",
    "path",
    "held since",
    "from",
    "age",
];

fn candidate_cells(c: &Candidate) -> Vec<String> {
    vec![
        sanitize(&c.api_key_id),
        sanitize(&c.key),
        sanitize(&c.request_method),
        sanitize(&c.request_path),
        rfc3339(c.held_since),
        c.held_since_column.to_owned(),
        human_secs(c.age_seconds),
    ]
}

fn preview_action(r: &PreviewReport) -> String {
    match r.action {
        ReclaimAction::Delete => "delete (the retry runs afresh)".to_owned(),
        ReclaimAction::Release => {
            "release (lock cleared; the retry resumes from its recovery point)".to_owned()
        }
        ReclaimAction::Fail => format!(
            "fail (completed with status {}; the retry gets it replayed)",
            r.status
        ),
    }
}

/// The summary of a sweep or an apply.
pub(crate) fn summary(r: &ReclaimReport) -> Doc {
    let capped = |c: &Option<Capped>| c.map_or_else(|| "-".to_owned(), |c| c.to_string());
    let action = match (r.action, r.response_status) {
        (ReclaimAction::Fail, Some(s)) => match r.keep_failed_for_seconds {
            Some(k) if k > 0.0 => format!(
                "fail (completed with status {s}, kept at least {} from now)",
                human_secs(k)
            ),
            _ => format!("fail (completed with status {s}, expires_at kept)"),
        },
        (ReclaimAction::Release, _) => "release".to_owned(),
        _ => "delete".to_owned(),
    };
    let mut fields = vec![
        ("table".to_owned(), r.table.clone()),
        ("action".to_owned(), action),
    ];
    if let Some(only) = filter_text(&r.filter) {
        fields.push(("only".to_owned(), only));
    }
    fields.extend([
        ("end reason".to_owned(), r.end_reason.as_str().to_owned()),
        ("keys reclaimed".to_owned(), r.rows_reclaimed.to_string()),
        (
            "skipped (held by a live owner)".to_owned(),
            capped(&r.skipped_live_owner),
        ),
    ]);
    if let Some(p) = &r.plan_file {
        fields.push(("plan".to_owned(), sanitize(p)));
        fields.push((
            "plan rows left alone".to_owned(),
            r.left_alone.len().to_string(),
        ));
    } else {
        fields.push(("stuck keys left".to_owned(), capped(&r.stuck_left)));
    }
    fields.push(("batches".to_owned(), r.batches.to_string()));
    fields.push(("elapsed".to_owned(), format!("{:.2}s", r.elapsed_seconds)));
    let mut d = Doc::default();
    d.fields(None, fields);
    if !r.left_alone.is_empty() {
        let rows = r.left_alone.iter().map(left_alone_cells).collect();
        d.rows(
            Some("Plan rows left alone:"),
            &["api_key_id", "key", "why"],
            rows,
        );
    }
    d
}

fn left_alone_cells(l: &LeftAlone) -> Vec<String> {
    let why = match l.reason.as_str() {
        "gone" => "gone: deleted since the plan".to_owned(),
        "filtered" => "does not match --api-key-id, --path or --method".to_owned(),
        "completed" => "completed since the plan".to_owned(),
        "changed" => "taken again since the plan (locked_at or created_at changed)".to_owned(),
        "too_young" => "no longer past the plan's cutoff".to_owned(),
        "held" => "held by a live owner (row locked)".to_owned(),
        other => format!(
            "{} (state {})",
            sanitize(other),
            sanitize(l.state.as_deref().unwrap_or("-"))
        ),
    };
    vec![sanitize(&l.api_key_id), sanitize(&l.key), why]
}

//! check's report for people: one row a finding. The findings' details are written (and their
//! values escaped) where each check is judged; this renders them, escaping once more what reaches
//! the terminal as it is (server messages, the names in a fix's statement).

use crate::commands::stats::ReferencedExpired;
use crate::output::stats::key_label;
use crate::output::{Doc, escape_controls, escape_lines, human_secs};
use crate::report::check::{Finding, Status};

/// The error line of a check that found problems: the one finding, or the checks that failed.
pub(crate) fn failed(failed: &[&Finding]) -> String {
    match failed {
        [one] => format!("check failed: {}: {}", one.check, one.detail),
        many => format!(
            "{} checks failed: {}",
            many.len(),
            many.iter()
                .map(|f| f.check.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// One row a finding: what was checked, its status and the detail; the fixes follow the table,
/// each whole on lines of its own under an SQL comment naming its check, so a fix can be copied
/// at any terminal width (a table cell would wrap it inside an identifier) and the block pastes
/// into psql as it is.
pub(crate) fn findings(findings: &[Finding]) -> Doc {
    let mut d = Doc::default();
    let mut fixes = Vec::new();
    let rows = findings
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
pub(crate) fn lag(seconds: f64, at_most: Option<&ReferencedExpired>) -> String {
    match at_most {
        Some(_) => format!("at most {}", human_secs(seconds)),
        None => human_secs(seconds),
    }
}

/// The eviction lag finding when its upper bound is past --max-eviction-lag but each of the oldest
/// expired keys stats examined is still referenced: the lag itself is unknown, and what holds the
/// keys is a NO ACTION / RESTRICT foreign key, not a stopped evict job.
pub(crate) fn lag_unknown(x: &ReferencedExpired, at_most: f64, max: f64) -> String {
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

/// No unique index makes the mapping's identity name one row; whether an index serves lookups
/// decides what follows (a lookup index is proposed by the caller when none does).
pub(crate) fn identity_not_enforced(table: &crate::db::KeyTable) -> String {
    let lookups = if table.has_tenant_key_index() {
        "an index serves lookups by it"
    } else {
        "keys cannot be looked up by it without a scan; the index below serves lookups"
    };
    format!(
        "no valid unique index makes {} name one row, so the database does not keep a key unique within its scope; no unique index is proposed, since one could refuse rows the application wrote (map every column the table's own identity has); {lookups}",
        table.identity_label(),
    )
}

//! check's report for people: one row a finding. The findings' details are written (and their
//! values escaped) where each check is judged; this renders them, escaping once more what reaches
//! the terminal as it is (server messages, the names in a fix's statement).

use crate::commands::check::{Finding, Status};
use crate::output::{Doc, escape_controls};

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

/// One row a finding: what was checked, its status, the detail and the fix.
pub(crate) fn findings(findings: &[Finding]) -> Doc {
    let mut d = Doc::default();
    let rows = findings
        .iter()
        .map(|f| {
            let status = match f.status {
                Status::Ok => "ok",
                Status::Note => "note",
                Status::Fail => "FAIL",
                Status::Breached => "BREACHED",
                Status::Warn => "WARN",
            };
            vec![
                f.check.clone(),
                status.to_owned(),
                escape_controls(&f.detail),
                escape_controls(f.fix.as_deref().unwrap_or_default()),
            ]
        })
        .collect();
    d.rows(None, &["check", "status", "detail", "fix"], rows);
    d
}

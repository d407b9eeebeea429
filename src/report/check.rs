//! What `check` found, one finding per line of its report: the status and the words the checks
//! hand to the output layer.

use serde::Serialize;

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    /// Not required, but worth knowing (an optional index, a privilege a command not run here needs).
    Note,
    /// Something idemctl needs is missing or wrong.
    Fail,
    /// An alert threshold is breached.
    Breached,
    /// Works, but a setting makes it worse than it should be (with the statement that fixes it).
    Warn,
}

/// One line of the check report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Finding {
    pub check: String,
    pub status: Status,
    pub detail: String,
    /// The statement that fixes it, when one exists.
    pub fix: Option<String>,
}

pub(crate) fn finding(check: &str, status: Status, detail: String, fix: Option<String>) -> Finding {
    Finding {
        check: check.to_owned(),
        status,
        detail,
        fix,
    }
}

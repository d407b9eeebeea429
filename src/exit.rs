//! The exit-code contract: every way idemctl can end, one number each, documented in `--help`,
//! the man page and the README.

use std::fmt;

/// How a run ended. The numeric values are a public interface: scripts and cron wrappers match on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The command did what was asked (including "nothing to do").
    Success,
    /// A runtime failure not covered below (a query failed, the connection was lost mid-run).
    Failure,
    /// Bad usage: an unknown flag, a malformed value or conninfo, a refused unsafe request.
    Usage,
    /// `inspect` found no such key, or the table does not exist.
    NotFound,
    /// `check` found a figure past its alert threshold, or `inspect --body` found the request
    /// differs from the stored one (fingerprint, method or path).
    ThresholdBreached,
    /// The server could not be reached or refused the login.
    CannotConnect,
    /// The role lacks a privilege the command needs.
    PermissionDenied,
    /// Another idemctl run holds the table's maintenance lock.
    LockBusy,
    /// The work was done and reported, but its metrics could not be written (`--textfile`).
    MetricsUnwritten,
    /// SIGINT or SIGTERM stopped the run after the batch in flight (top: `q`'s Ctrl-C or SIGINT).
    Interrupted,
    /// SIGTERM ended `top` (its terminal restored).
    Terminated,
    /// A bug in idemctl.
    Internal,
}

impl Exit {
    /// Every code, in the order the documentation lists them (ascending).
    pub const ALL: [Exit; 12] = [
        Exit::Success,
        Exit::Failure,
        Exit::Usage,
        Exit::NotFound,
        Exit::ThresholdBreached,
        Exit::CannotConnect,
        Exit::PermissionDenied,
        Exit::LockBusy,
        Exit::MetricsUnwritten,
        Exit::Internal,
        Exit::Interrupted,
        Exit::Terminated,
    ];

    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::NotFound => 3,
            Exit::ThresholdBreached => 4,
            Exit::CannotConnect => 5,
            Exit::PermissionDenied => 6,
            Exit::LockBusy => 7,
            Exit::MetricsUnwritten => 8,
            Exit::Interrupted => 130,
            Exit::Terminated => 143,
            Exit::Internal => 70,
        }
    }

    /// One line for the documentation table.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Success => "success, including nothing to do",
            Exit::Failure => {
                "runtime failure (query failed, timeout, connection lost mid-run or no answer within statement_timeout + 10s)"
            }
            Exit::Usage => {
                "usage error: bad flag, value, conninfo, table name or config file; unsafe request refused"
            }
            Exit::NotFound => "key not found (inspect) or table not found",
            Exit::ThresholdBreached => {
                "check found a problem or a breached alert threshold; inspect --body: the request differs (fingerprint, method or path)"
            }
            Exit::CannotConnect => {
                "cannot connect: server unreachable, login refused, no such database"
            }
            Exit::PermissionDenied => {
                "permission denied: the role lacks a needed privilege, or a writing command met a read-only session or a standby"
            }
            Exit::LockBusy => "another idemctl run holds the maintenance lock for this table",
            Exit::MetricsUnwritten => {
                "the work was done and reported, but its metrics could not be written (--textfile)"
            }
            Exit::Interrupted => {
                "interrupted by SIGINT or SIGTERM after finishing the batch in flight (top: by Ctrl-C or SIGINT)"
            }
            Exit::Terminated => "top ended by SIGTERM (the terminal restored)",
            Exit::Internal => "internal error (a bug: please report it)",
        }
    }

    /// The exit-code table as plain text, for `--help` and the man page.
    pub fn table_text() -> String {
        Exit::ALL
            .iter()
            .map(|e| format!("{:>3}  {}", e.code(), e.meaning()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e.code())
    }
}

/// An error that carries its own exit code. Attach it where a condition is known precisely; the
/// message is one lowercase sentence fragment that names what was wrong and what to do. It is held
/// as a typed value until printed, so a layer below the output layer can refuse with what it found
/// and leave the wording to src/output/.
pub(crate) struct Classified {
    pub exit: Exit,
    pub message: Box<dyn fmt::Display + Send + Sync>,
}

impl fmt::Debug for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classified")
            .field("exit", &self.exit)
            .field("message", &self.message.to_string())
            .finish()
    }
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.message.fmt(f)
    }
}

impl std::error::Error for Classified {}

/// Build an error with an explicit exit code.
pub(crate) fn fail(exit: Exit, message: impl Into<String>) -> anyhow::Error {
    refuse(exit, message.into())
}

/// Build an error with an explicit exit code from a typed reason that the output layer words (its
/// `Display`).
pub(crate) fn refuse(exit: Exit, why: impl fmt::Display + Send + Sync + 'static) -> anyhow::Error {
    anyhow::Error::new(Classified {
        exit,
        message: Box::new(why),
    })
}

/// Decide the exit code of an error: an explicit [`Classified`] or a typed failure (which names its
/// own code) anywhere in the chain wins, then the
/// SQLSTATE of a server error, then a lost or refused connection; anything else is a plain failure.
pub(crate) fn classify(err: &anyhow::Error) -> Exit {
    for cause in err.chain() {
        if let Some(c) = cause.downcast_ref::<Classified>() {
            return c.exit;
        }
        if let Some(c) = cause.downcast_ref::<crate::report::failure::ConnFailure>() {
            return c.exit();
        }
        if cause.is::<crate::report::failure::ConfigFailure>() {
            return Exit::Usage;
        }
    }
    for cause in err.chain() {
        if let Some(pg) = cause.downcast_ref::<tokio_postgres::Error>() {
            if let Some(code) = pg.code() {
                return exit_for_sqlstate(code.code());
            }
            if pg.is_closed() {
                return Exit::Failure;
            }
        }
    }
    Exit::Failure
}

/// Map a SQLSTATE to an exit code.
pub(crate) fn exit_for_sqlstate(code: &str) -> Exit {
    match code {
        "42501" => Exit::PermissionDenied,
        c if c.starts_with("28") => Exit::CannotConnect,
        "3D000" | "53300" | "57P03" => Exit::CannotConnect,
        c if c.starts_with("08") => Exit::CannotConnect,
        "42P01" | "3F000" => Exit::NotFound,
        _ => Exit::Failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct() {
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len());
    }

    #[test]
    fn codes_are_listed_in_ascending_order() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert!(codes.windows(2).all(|w| w[0] < w[1]), "{codes:?}");
    }

    #[test]
    fn classified_error_wins_over_context() {
        let e = fail(Exit::LockBusy, "another evict holds the lock").context("failed to evict");
        assert_eq!(classify(&e), Exit::LockBusy);
    }

    #[test]
    fn sqlstates_map_to_documented_codes() {
        assert_eq!(exit_for_sqlstate("42501"), Exit::PermissionDenied);
        assert_eq!(exit_for_sqlstate("28P01"), Exit::CannotConnect);
        assert_eq!(exit_for_sqlstate("3D000"), Exit::CannotConnect);
        assert_eq!(exit_for_sqlstate("57014"), Exit::Failure);
    }
}

//! `target_session_attrs` as libpq 14+ judges it after login: `read-write` and `read-only` ask
//! about the *session* (`transaction_read_only`, which a read-only role or a hot standby turns
//! on), `primary` and `standby` about the *server* (`pg_is_in_recovery()`), and `prefer-standby`
//! looks for a standby among all hosts first, then takes any. A server that does not fit is
//! skipped for the next host with libpq's reason, plus what to change.

use std::fmt;

use crate::report::failure::AttrsMismatch;

/// The value of `target_session_attrs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SessionAttrs {
    #[default]
    Any,
    ReadWrite,
    ReadOnly,
    Primary,
    Standby,
    PreferStandby,
}

pub(crate) const CHOICES: &[(&str, SessionAttrs)] = &[
    ("any", SessionAttrs::Any),
    ("read-write", SessionAttrs::ReadWrite),
    ("read-only", SessionAttrs::ReadOnly),
    ("primary", SessionAttrs::Primary),
    ("standby", SessionAttrs::Standby),
    ("prefer-standby", SessionAttrs::PreferStandby),
];

/// What a logged-in session showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Observed {
    /// `pg_is_in_recovery()`: the server is a hot standby.
    pub(crate) in_hot_standby: bool,
    /// `transaction_read_only`: the session cannot write (a read-only role, or a standby).
    pub(crate) read_only: bool,
}

/// Why a server was skipped: libpq's words, then what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch(pub(crate) AttrsMismatch);

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Mismatch {}

/// The query whose answer [`SessionAttrs::judge`] reads (simple protocol, so it also works
/// through a transaction pooler).
pub(crate) const QUERY: &str = "SELECT pg_catalog.pg_is_in_recovery(), \
     pg_catalog.current_setting('transaction_read_only')";

impl SessionAttrs {
    /// Whether a session must be examined after login.
    pub(crate) fn needs_check(self) -> bool {
        !matches!(self, SessionAttrs::Any | SessionAttrs::PreferStandby)
    }

    /// `Ok` when the session fits, else libpq's reason for skipping it.
    pub(crate) fn judge(self, seen: Observed) -> Result<(), Mismatch> {
        let name = self.name();
        let (fits, mismatch) = match self {
            SessionAttrs::Any | SessionAttrs::PreferStandby => return Ok(()),
            SessionAttrs::ReadWrite => (!seen.read_only, AttrsMismatch::ReadOnly(name)),
            SessionAttrs::ReadOnly => (seen.read_only, AttrsMismatch::NotReadOnly(name)),
            SessionAttrs::Primary => (!seen.in_hot_standby, AttrsMismatch::HotStandby(name)),
            SessionAttrs::Standby => (seen.in_hot_standby, AttrsMismatch::NotHotStandby(name)),
        };
        if fits {
            Ok(())
        } else {
            Err(Mismatch(mismatch))
        }
    }

    fn name(self) -> &'static str {
        CHOICES
            .iter()
            .find(|(_, a)| *a == self)
            .map_or("?", |(n, _)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judged_like_libpq_14() {
        let primary = Observed {
            in_hot_standby: false,
            read_only: false,
        };
        let ro_role_on_primary = Observed {
            in_hot_standby: false,
            read_only: true,
        };
        let standby = Observed {
            in_hot_standby: true,
            read_only: true,
        };
        use SessionAttrs::*;
        assert!(Primary.judge(ro_role_on_primary).is_ok());
        assert!(Standby.judge(ro_role_on_primary).is_err());
        assert!(ReadOnly.judge(ro_role_on_primary).is_ok());
        assert!(ReadWrite.judge(ro_role_on_primary).is_err());
        assert!(Standby.judge(standby).is_ok());
        assert!(Primary.judge(standby).is_err());
        assert!(ReadWrite.judge(primary).is_ok());
        let e = Standby.judge(primary).unwrap_err().to_string();
        assert!(e.starts_with("server is not in hot standby mode"), "{e}");
        let e = ReadWrite.judge(standby).unwrap_err().to_string();
        assert!(e.starts_with("session is read-only"), "{e}");
        let e = Primary.judge(standby).unwrap_err().to_string();
        assert!(e.starts_with("server is in hot standby mode"), "{e}");
        let e = ReadOnly.judge(primary).unwrap_err().to_string();
        assert!(e.starts_with("session is not read-only"), "{e}");
    }
}

//! Connecting the way libpq and psql do: conninfo and URI strings, PG* variables, ~/.pgpass, sslmode.
//!
//! tokio-postgres parses connection strings but reads no environment, no password file, rejects
//! libpq-only keywords and knows only three sslmodes. This module is the libpq-compatible layer in
//! front of it: [`resolve()`] turns the URL and environment into a [`Target`], which builds the pool
//! and connects with retries.
//!
//! Layout: `conninfo` tokenises, `params` knows the keywords and `PG*` variables, `hosts` the
//! host/port lists, `service` the connection service files, `pgpass` the password file, `tls`, `tls_stream` and `verify` the sslmodes
//! (on OpenSSL, as libpq), `resolve` puts
//! them together, `pool` connects.

mod attrs;
mod auth;
mod conninfo;
mod env;
mod hosts;
mod params;
mod pgpass;
mod pool;
mod resolve;
mod service;
mod tls;
mod tls_stream;
mod verify;

#[cfg(test)]
mod tests;

pub(crate) use env::{Env, ProcessEnv};
pub(crate) use params::ENV_VARS as LIBPQ_ENV_VARS;
pub(crate) use pool::setting_millis;
pub(crate) use pool::{Line, Pool, Route};

use crate::report::failure::{ConnWarning, TargetName};
use std::fmt;
use std::time::Duration;

/// What the command line says about connecting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConnectSettings {
    /// `-d/--database-url`, `IDEMCTL_DATABASE_URL`, then `DATABASE_URL` (the caller picks): a URI
    /// or a keyword/value conninfo string. `None`: everything from `PG*` variables and defaults.
    pub database_url: Option<String>,
    /// Where `database_url` came from, for messages about it.
    pub database_url_from: crate::report::failure::UrlSource,
    /// `--connect-timeout`: the overall budget for connecting, retries included. `None` (or zero):
    /// `connect_timeout`/`PGCONNECT_TIMEOUT`, else 10 s.
    pub connect_timeout: Option<Duration>,
    /// Set as `statement_timeout` on every connection (zero: no limit).
    pub statement_timeout: Duration,
    /// `--statement-timeout` was given; when not, a shorter statement_timeout the session has of
    /// its own (the role's, the database's, the server's) is kept instead.
    pub statement_timeout_given: bool,
    /// Set as `lock_timeout` on every connection (zero: no limit).
    pub lock_timeout: Duration,
    /// Set as `idle_in_transaction_session_timeout` on every connection (zero: no limit).
    pub idle_in_transaction_timeout: Duration,
}

/// The session limits applied to every new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SessionTimeouts {
    pub(crate) statement: Duration,
    /// Whether a shorter statement_timeout the session has of its own wins (the flag not given).
    pub(crate) shorter_own_statement: bool,
    pub(crate) lock: Duration,
    pub(crate) idle_in_transaction: Duration,
    /// How quickly the server notices that idemctl's end of a direct connection is gone.
    pub(crate) liveness: Liveness,
}

/// How long idemctl waits for any answer beyond the statement_timeout it sets: the time the
/// answer of a statement cancelled by the server at its statement_timeout needs to arrive.
pub(crate) const ANSWER_MARGIN: Duration = Duration::from_secs(10);

/// The deadline of one round trip on an open connection (a statement, `BEGIN`, `COMMIT`,
/// `ROLLBACK`, a sample or a probe): the statement_timeout in force on idemctl's sessions, which
/// the server enforces, plus [`ANSWER_MARGIN`]. No answer by then means the path to the server is
/// gone, and the connection is given up. This is the one definition every command uses.
pub(crate) fn answer_deadline(statement_timeout: Duration) -> Duration {
    statement_timeout + ANSWER_MARGIN
}

/// TCP keepalive and user-timeout settings, applied to idemctl's own sockets and asked of the
/// server for its end of a direct connection (never of a pooler's server sessions), with
/// `client_connection_check_interval` where the server has it (PostgreSQL 14 and later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Liveness {
    /// `keepalives=0` turns the probes off (both ends keep the system's defaults).
    pub(crate) keepalives: bool,
    pub(crate) idle: Duration,
    pub(crate) interval: Duration,
    pub(crate) count: u32,
    /// Unacknowledged data older than this aborts the connection (`tcp_user_timeout`).
    pub(crate) user_timeout: Duration,
    /// How often the server checks, while a statement runs, that idemctl is still connected.
    pub(crate) check_interval: Duration,
}

impl Liveness {
    /// Defaults for a cron job: a silent peer is noticed within about 25 s
    /// (`keepalives_idle=10 keepalives_interval=5 keepalives_count=3`), unacknowledged data
    /// within 30 s (`tcp_user_timeout=30000`); the server checks every 10 s during a statement.
    pub(crate) const DEFAULT: Liveness = Liveness {
        keepalives: true,
        idle: Duration::from_secs(10),
        interval: Duration::from_secs(5),
        count: 3,
        user_timeout: Duration::from_secs(30),
        check_interval: Duration::from_secs(10),
    };
}

/// A resolved connection: driver config, TLS connector, timeouts, and warnings met on the way.
pub(crate) struct Target {
    config: tokio_postgres::Config,
    endpoints: Vec<hosts::Endpoint>,
    tls_plan: tls::TlsPlan,
    tls: Option<tls_stream::MakeTls>,
    connect_timeout: Duration,
    session: SessionTimeouts,
    /// `target_session_attrs`, judged by idemctl's host loop after each login.
    attrs: attrs::SessionAttrs,
    /// `require_auth`: the authentication methods the server may ask for.
    require_auth: Option<std::sync::Arc<auth::AuthRule>>,
    warnings: Vec<ConnWarning>,
}

/// Resolve the connection like libpq: explicit URL parameters, then `PG*` variables, then
/// defaults; `~/.pgpass` when no password is given. Warnings (such as an unsafe password file) are
/// kept in [`Target::warnings`] for the caller to print.
///
/// Errors carry [`crate::exit::Exit::Usage`], name what is wrong and never echo the URL.
pub(crate) fn resolve(settings: &ConnectSettings, env: &dyn Env) -> anyhow::Result<Target> {
    resolve::resolve_quietly(settings, env)
}

/// [`resolve()`] for another node of the same cluster: see [`resolve::resolve_node_quietly`].
/// Warnings are dropped (the coordinator's resolution printed them already).
pub(crate) fn resolve_node(
    settings: &ConnectSettings,
    env: &dyn Env,
    host: &str,
    port: u16,
) -> anyhow::Result<Target> {
    resolve::resolve_node_quietly(settings, env, host, port)
}

impl Target {
    /// The user, the hosts and the database, as messages name them; never the password.
    pub(crate) fn name(&self) -> TargetName {
        TargetName {
            user: self.config.get_user().unwrap_or_default().to_owned(),
            places: self.endpoints.iter().map(hosts::Endpoint::place).collect(),
            dbname: self.config.get_dbname().unwrap_or_default().to_owned(),
        }
    }

    /// The database connected to (as resolved: dbname, PGDATABASE, else the user name).
    pub(crate) fn dbname(&self) -> &str {
        self.config.get_dbname().unwrap_or_default()
    }

    /// The overall budget for [`Target::connect`], retries included.
    #[cfg(test)]
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Problems that did not stop resolution, for the caller to print.
    pub(crate) fn warnings(&self) -> &[ConnWarning] {
        &self.warnings
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("config", &self.config)
            .field("sslmode", &self.tls_plan.mode)
            .field("verification", &self.tls_plan.verification)
            .field("connect_timeout", &self.connect_timeout)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

//! Connections for a resolved [`Target`]: the deadpool pool (TLS connector, session timeouts set
//! on every new connection) and the connect loop that retries transient failures with backoff
//! until the connect timeout, then fails with one line saying where, as whom, and why.

use super::{SessionTimeouts, Target};
use crate::exit::{Exit, fail};
use deadpool_postgres::{
    Hook, HookError, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use std::error::Error as StdError;
use std::io;
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

const SESSION_SQL: &str = include_str!("../../sql/session_settings.sql");
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);

impl Target {
    /// A pool of at most `max_size` connections (at least 1). Every new connection gets the
    /// session timeouts; reused ones are checked with a round trip (`Verified`) so a connection
    /// dropped by a proxy is replaced rather than failing the next query.
    pub fn pool(&self, max_size: usize) -> anyhow::Result<Pool> {
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Verified,
        };
        let config = self.config.clone();
        let manager = match &self.tls {
            Some(tls) => Manager::from_config(config, tls.clone(), manager_config),
            None => Manager::from_config(config, NoTls, manager_config),
        };
        Pool::builder(manager)
            .max_size(max_size.max(1))
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(self.connect_timeout))
            .recycle_timeout(Some(self.connect_timeout))
            .post_create(session_hook(self.session))
            .build()
            .map_err(|e| {
                fail(
                    Exit::Internal,
                    format!("cannot build the connection pool: {e}"),
                )
            })
    }

    /// A connection from `pool`, retrying refused/missing/starting-up/overloaded servers with
    /// exponential backoff (100 ms doubling to 2 s) until the connect timeout has elapsed overall.
    /// Errors carry [`Exit::CannotConnect`] and never contain the password.
    pub async fn connect(&self, pool: &Pool) -> anyhow::Result<Object> {
        let started = Instant::now();
        let deadline = started + self.connect_timeout;
        let mut delay = FIRST_RETRY_DELAY;
        let mut attempts = 0u32;
        let mut previous: Option<Failure> = None;
        loop {
            attempts += 1;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let failure = match tokio::time::timeout(remaining, pool.get()).await {
                Ok(Ok(client)) => return Ok(client),
                // The budget ran out mid-attempt (the pool's own create timeout is the same
                // budget, and may fire first): the previous attempt's reason (say, "connection
                // refused") tells the operator more than "timed out".
                Ok(Err(PoolError::Timeout(_))) | Err(_) => previous
                    .take()
                    .unwrap_or_else(|| Failure::timed_out(self.connect_timeout)),
                Ok(Err(e)) => Failure::from_pool(&e),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if !failure.transient || left.is_zero() {
                return Err(self.connect_error(&failure, attempts, started.elapsed()));
            }
            tokio::time::sleep(delay.min(left)).await;
            delay = (delay * 2).min(MAX_RETRY_DELAY);
            previous = Some(failure);
        }
    }

    fn connect_error(&self, failure: &Failure, attempts: u32, elapsed: Duration) -> anyhow::Error {
        let retried = if attempts > 1 {
            format!(" (retried for {})", rounded(elapsed))
        } else {
            String::new()
        };
        let message = format!(
            "cannot connect to {}: {}{retried}",
            self.describe(),
            failure.reason
        );
        fail(Exit::CannotConnect, message)
    }
}

/// `10s` rather than `10s 3ms 120us`.
fn rounded(elapsed: Duration) -> humantime::FormattedDuration {
    let step = if elapsed < Duration::from_secs(1) {
        Duration::from_millis(elapsed.as_millis().try_into().unwrap_or(u64::MAX))
    } else {
        Duration::from_secs(elapsed.as_secs() + u64::from(elapsed.subsec_millis() >= 500))
    };
    humantime::format_duration(step)
}

/// Sets the session timeouts right after login. Kept out of startup `options` because PgBouncer
/// refuses unknown startup parameters.
fn session_hook(timeouts: SessionTimeouts) -> Hook {
    Hook::async_fn(move |client, _metrics| {
        Box::pin(async move {
            let values = [
                timeouts.statement,
                timeouts.lock,
                timeouts.idle_in_transaction,
            ]
            .map(setting_millis);
            client
                .execute(SESSION_SQL, &[&values[0], &values[1], &values[2]])
                .await
                .map_err(HookError::Backend)?;
            Ok(())
        })
    })
}

/// A GUC value in milliseconds. Sub-millisecond durations round up so they do not turn into 0
/// (which means "no limit"), and huge ones are capped at the server's maximum (about 24 days).
pub(crate) fn setting_millis(duration: Duration) -> String {
    let millis = duration.as_millis();
    let millis = if millis == 0 && !duration.is_zero() {
        1
    } else {
        millis
    };
    format!("{}ms", millis.min(i32::MAX as u128))
}

/// Why an attempt failed, in words for the operator, and whether trying again may help.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) reason: String,
    pub(crate) transient: bool,
}

impl Failure {
    fn timed_out(after: Duration) -> Failure {
        Failure {
            reason: format!("timed out after {}", rounded(after)),
            transient: true,
        }
    }

    fn from_pool(e: &PoolError) -> Failure {
        match e {
            PoolError::Backend(e) => Failure::from_pg(e),
            PoolError::PostCreateHook(HookError::Backend(e)) => Failure {
                reason: format!(
                    "setting session timeouts failed: {}",
                    Failure::from_pg(e).reason
                ),
                transient: false,
            },
            PoolError::Timeout(_) => Failure {
                reason: "timed out".to_string(),
                transient: true,
            },
            other => Failure {
                reason: other.to_string().trim().to_string(),
                transient: false,
            },
        }
    }

    /// Server errors give their message (the driver's `Display` says only "db error"); socket
    /// errors are named by kind; anything else is the error chain.
    pub(crate) fn from_pg(e: &tokio_postgres::Error) -> Failure {
        if let Some(db) = e.as_db_error() {
            // 57P03: starting up or shutting down; 53300: too many connections.
            let transient = matches!(db.code().code(), "57P03" | "53300");
            let reason = db.message().to_string();
            return Failure { reason, transient };
        }
        if let Some(reason) = certificate_problem(e) {
            let reason = format!("TLS handshake failed: {reason}");
            return Failure {
                reason,
                transient: false,
            };
        }
        if let Some(failure) = io_failure(e) {
            return failure;
        }
        let chain = chain_text(e);
        if chain.ends_with("password missing") {
            let reason = "the server asks for a password and none was given (set PGPASSWORD, \
                          add a ~/.pgpass line, or put it in the URL)";
            return Failure {
                reason: reason.to_string(),
                transient: false,
            };
        }
        Failure {
            reason: chain,
            transient: false,
        }
    }
}

/// Socket-level failures that mean "nobody is listening (yet)" or "no answer".
fn io_failure(e: &tokio_postgres::Error) -> Option<Failure> {
    let io = sources(e).find_map(|s| s.downcast_ref::<io::Error>())?;
    let reason = match io.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused",
        io::ErrorKind::NotFound => "no server socket found (is the server running?)",
        io::ErrorKind::TimedOut => "timed out",
        io::ErrorKind::ConnectionReset => "connection reset by the server",
        _ => return None,
    };
    Some(Failure {
        reason: reason.to_string(),
        transient: true,
    })
}

/// Why the server's certificate was refused, in words, when that is what failed. rustls shows
/// several of its verdicts only by variant name ("invalid peer certificate: UnknownIssuer").
fn certificate_problem(e: &tokio_postgres::Error) -> Option<String> {
    use rustls::CertificateError as Cert;
    let rustls_error = sources(e)
        .filter_map(|s| s.downcast_ref::<io::Error>())
        .find_map(|io| io.get_ref()?.downcast_ref::<rustls::Error>())?;
    let rustls::Error::InvalidCertificate(problem) = rustls_error else {
        return None;
    };
    let words = match problem {
        Cert::UnknownIssuer => {
            "the server's certificate is not signed by a trusted root certificate (unknown issuer; \
             check sslrootcert)"
                .to_string()
        }
        Cert::Revoked => "the server's certificate has been revoked (see sslcrl)".to_string(),
        Cert::UnknownRevocationStatus => "the revocation status of the server's certificate is \
                                          unknown: no certificate revocation list from its issuer"
            .to_string(),
        Cert::BadSignature => "the server's certificate has an invalid signature".to_string(),
        Cert::BadEncoding => "the server's certificate is malformed".to_string(),
        Cert::Expired => "the server's certificate has expired".to_string(),
        Cert::NotValidYet => "the server's certificate is not valid yet".to_string(),
        Cert::NotValidForName => {
            "the server's certificate is not valid for the host name connected to".to_string()
        }
        Cert::InvalidPurpose => {
            "the server's certificate is not meant for TLS servers (extended key usage)".to_string()
        }
        // The rest display well (names, times and purposes included).
        other => format!("invalid server certificate: {other}"),
    };
    Some(words)
}

/// The error and its causes joined with ": ", minus the driver's generic top line.
fn chain_text(e: &tokio_postgres::Error) -> String {
    let mut parts: Vec<String> = std::iter::once(e as &dyn StdError)
        .chain(sources(e))
        .map(ToString::to_string)
        .collect();
    parts.dedup();
    if parts.len() > 1 && parts[0] == "error connecting to server" {
        parts.remove(0);
    }
    parts.join(": ")
}

fn sources<'a>(
    e: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(e.source(), |&s| s.source())
}

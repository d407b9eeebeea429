//! Plain domain types every layer may use: the key table's name as given, what reclaim does, how
//! sessions are shared, output formats, evict's catch-up batch time and rate caps, the run's stop
//! flag, durations as people write them, which characters move a terminal, and an error chain as
//! one line. Nothing here imports another module of idemctl.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::ValueEnum;

/// How the server sessions behind a connection are shared (`--pool-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PoolMode {
    /// Detect a pooler from the connection and assume transaction pooling behind one.
    Auto,
    /// idemctl owns each server session while connected (direct, or a session-mode pooler).
    Session,
    /// Server sessions are shared between transactions (a transaction-mode pooler).
    Transaction,
}

/// What reclaim does to a stuck key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReclaimAction {
    /// Delete the row: the key becomes absent and the client's retry executes afresh. Right when
    /// the key and the side effect commit in one transaction, so a dead owner's effect was rolled
    /// back with it.
    Delete,
    /// Mark the row completed with a stored error response, so a retry gets that response replayed
    /// instead of executing again. Right when the effect may have committed outside the key's
    /// transaction (insert the key first, do the work, then record the response).
    Fail,
    /// Clear the key's lock time and leave the row, so the client's retry resumes from the
    /// recovery point the owner reached (the rocket-rides table's way; its only safe action).
    Release,
}

impl ReclaimAction {
    /// Its name, as the flag, the JSON and the metrics' `action` label spell it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReclaimAction::Delete => "delete",
            ReclaimAction::Fail => "fail",
            ReclaimAction::Release => "release",
        }
    }
}

/// The statement_timeout in force on idemctl's sessions, and what set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StatementTimeout {
    pub(crate) value: std::time::Duration,
    pub(crate) set_by: SetBy,
}

/// What set a session's statement_timeout: idemctl (`--statement-timeout` or its default), or,
/// when the flag is not given and the session's own setting is shorter, where that comes from
/// (`pg_settings.source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SetBy {
    /// `--statement-timeout`, or its default.
    Flag,
    /// `ALTER ROLE ... SET`.
    Role,
    /// `ALTER DATABASE ... SET`.
    Database,
    /// `ALTER ROLE ... IN DATABASE ... SET`.
    RoleInDatabase,
    /// The connection's startup options (`options=-c ...`, PGOPTIONS).
    Client,
    /// The server's configuration (postgresql.conf, ALTER SYSTEM, a command-line option).
    Server,
}

impl SetBy {
    /// From `pg_settings.source`.
    pub(crate) fn of_source(source: &str) -> SetBy {
        match source {
            "user" => SetBy::Role,
            "database" => SetBy::Database,
            "database user" => SetBy::RoleInDatabase,
            "client" => SetBy::Client,
            _ => SetBy::Server,
        }
    }
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    /// A table on a terminal, plain text otherwise.
    Auto,
    /// A table (comfy-table).
    Table,
    /// Plain text: aligned `name  value` lines, tables as tab-separated rows.
    Plain,
    /// One JSON document on stdout.
    Json,
    /// Prometheus text exposition format (stats only).
    Prometheus,
}

/// Colour choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// A validated `[schema.]name`, kept unquoted; the database layer quotes each part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableName {
    pub schema: Option<String>,
    pub name: String,
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// The batch time of --catch-up, which the adaptive pace also uses while the foreground is idle.
pub(crate) const CATCH_UP_BATCH_TIME: Duration = Duration::from_millis(15);

/// Index entries a page of evict's walk (a table without an expiry index) reads when --batch-size
/// does not say.
pub(crate) const WALK_PAGE: u32 = 2_000;

/// The caps of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Caps {
    /// Rows per second.
    pub rows: Option<f64>,
    /// WAL bytes per second.
    pub wal: Option<f64>,
}

impl Caps {
    pub(crate) fn any(&self) -> bool {
        self.rows.is_some() || self.wal.is_some()
    }
}

/// A flag set by SIGINT or SIGTERM once [`Cancel::install`] has run; long-running commands check it
/// between batches. Commands that never install it keep the default behaviour (the signal ends the
/// process at once, which is right for a read-only command).
#[derive(Clone, Default, Debug)]
pub(crate) struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Start listening for SIGINT and SIGTERM.
    pub(crate) fn install(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let flag = self.0.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {},
                _ = term.recv() => {},
            }
            flag.store(true, Ordering::SeqCst);
        });
        Ok(())
    }

    /// Whether a stop was requested.
    pub(crate) fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Wait until a stop is requested (polling is fine at this granularity).
    pub(crate) async fn wait(&self) {
        while !self.requested() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// A character that moves or recolours a terminal's output or reorders it for the reader: a
/// control character or a bidirectional override. The output layer escapes these; SQL that names
/// an identifier holding one writes it in the Unicode-escape form.
pub(crate) fn moves_the_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Format seconds as people write durations: the largest unit and the next one when it is not
/// zero (`6d 23h`, `3h 2m`, `7d`, `45s`); an infinite span (from a time of `'-infinity'`, say) as
/// `infinity`, an unknown one (NaN) as `-`.
pub(crate) fn human_secs(secs: f64) -> String {
    if secs.is_infinite() {
        return if secs > 0.0 { "infinity" } else { "-infinity" }.into();
    }
    if !secs.is_finite() {
        return "-".into();
    }
    let negative = secs < 0.0;
    let mut rest = secs.abs().round() as u64;
    let mut parts: Vec<(u64, &str)> = Vec::new();
    for (size, unit) in [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")] {
        parts.push((rest / size, unit));
        rest %= size;
    }
    let first = parts.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    let mut text = format!("{}{}", parts[first].0, parts[first].1);
    if let Some((n, unit)) = parts.get(first + 1).filter(|(n, _)| *n > 0) {
        text.push_str(&format!(" {n}{unit}"));
    }
    if negative { format!("-{text}") } else { text }
}

/// The error chain as one line. A server error is shown by its message, detail and hint instead
/// of the driver's generic "db error" wrapper.
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut skip_db_error = false;
    for cause in err.chain() {
        if skip_db_error && cause.is::<tokio_postgres::error::DbError>() {
            continue;
        }
        if let Some(db) = cause
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error)
        {
            let mut text = db.message().to_owned();
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            parts.push(text);
            skip_db_error = true;
            continue;
        }
        parts.push(cause.to_string());
    }
    one_spaced(&parts.join(": "))
}

/// A message's line breaks, with the indentation that follows them (a server's multi-line text:
/// libpq's "Connection refused\n\tIs the server running ...", which Citus passes on), as one
/// space each, so the line reads as one sentence; a tab or space within a line is kept.
fn one_spaced(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' || c == '\r' {
            while out.ends_with([' ', '\t']) {
                out.pop();
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// A TTL as people write it, in the largest unit that divides it: `24h`, `90m`, `30s`, `250ms`.
pub(crate) fn ttl_text(ttl: Duration) -> String {
    let ms = ttl.as_millis();
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms if ms > 0 => format!("{ms}ms"),
        _ => format!("{}us", ttl.as_micros()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn line_breaks_and_their_indentation_become_one_space() {
        assert_eq!(
            super::one_spaced("connection refused\n\tIs the server running?\r\n"),
            "connection refused Is the server running? "
        );
        assert_eq!(super::one_spaced("a\tb"), "a\tb");
        assert_eq!(super::one_spaced("a \n  \n b"), "a b");
    }
}

/// How idemctl's connections reach their server sessions, as far as it can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Route {
    /// The server process that answers is the one whose cancel key the login sent: a direct
    /// connection, whose session idemctl owns until it disconnects.
    Direct,
    /// `--pool-mode session`: a pooler that gives idemctl a server session until it disconnects.
    DeclaredSession,
    /// The login's cancel key names no server process of this connection: a pooler (PgBouncer and
    /// the like), assumed to share server sessions between transactions.
    DetectedPooler,
    /// `--pool-mode transaction`.
    DeclaredTransaction,
}

impl Route {
    /// Whether session-level state (settings, advisory locks, named prepared statements) stays
    /// idemctl's own: false behind a transaction-mode pooler, where it would leak to the API.
    pub(crate) fn owns_session(self) -> bool {
        matches!(self, Route::Direct | Route::DeclaredSession)
    }
}

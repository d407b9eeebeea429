//! The run context built once per invocation: resolved connection target and pool, output
//! settings, the key table, cancellation by SIGINT / SIGTERM, and the clean close of every
//! connection at the end.

use anyhow::Result;

use crate::config::Plan;
use crate::conn::{self, ConnectSettings, Route, Target};
use crate::db::{KeyTable, Session};
use crate::domain::{Cancel, OutputFormat};
use crate::output::Output;

/// Everything a command needs, built once from the run plan and never patched afterwards.
pub(crate) struct Context {
    /// The run's global settings.
    pub global: Plan,
    pub output: Output,
    pub target: Target,
    settings: ConnectSettings,
    pool: conn::Pool,
    pub cancel: Cancel,
    /// Records the run's metrics (evict, reclaim, stats); no destination by default.
    pub metrics: crate::metrics::Recorder,
}

impl Context {
    /// Resolve the connection (no network yet), build the pool and, for a run that records its
    /// metrics (`metrics`: the command and where they go), check their destinations.
    pub(crate) fn new(
        global: Plan,
        pool_size: usize,
        metrics: Option<(&'static str, crate::metrics::Destinations)>,
    ) -> Result<Context> {
        let output = Output::new(global.output, global.color, global.quiet, global.no_color);
        let settings = ConnectSettings {
            database_url: global.database_url.clone(),
            database_url_from: global.database_url_from.clone(),
            connect_timeout: global.connect_timeout,
            statement_timeout: global.statement_timeout,
            statement_timeout_given: global.statement_timeout_given,
            lock_timeout: global.lock_timeout,
            idle_in_transaction_timeout: global.idle_in_transaction_timeout,
        };
        let target = conn::resolve(&settings, &conn::ProcessEnv)?;
        for warning in target.warnings() {
            crate::output::warn(&crate::output::errors::password_file_warning(warning));
        }
        let pool = target.pool_with(pool_size, global.pool_mode)?;
        let metrics = match metrics {
            Some((command, dest)) => {
                crate::metrics::Recorder::new(command, dest, target.dbname(), &global.table)?
            }
            None => crate::metrics::Recorder::default(),
        };
        Ok(Context {
            global,
            output,
            target,
            settings,
            pool,
            cancel: Cancel::default(),
            metrics,
        })
    }

    /// A session with idemctl's settings, retrying transient failures up to the connect timeout.
    /// Behind a transaction pooler its settings are applied inside each of its transactions.
    pub(crate) async fn session(&self) -> Result<Session> {
        let client = self.target.connect(&self.pool).await?;
        let pooled = !self.route().is_some_and(Route::owns_session);
        let line = self.pool.line(&client).await;
        Ok(Session::new(
            client,
            pooled,
            self.pool.session_settings(),
            line,
        ))
    }

    /// The deadline of one round trip: the statement_timeout in force plus a margin (see
    /// `conn::answer_deadline`). Every session applies it to every round trip.
    pub(crate) fn answer_deadline(&self) -> std::time::Duration {
        self.pool.answer_deadline()
    }

    /// The statement_timeout in force on the sessions (once one has connected), and what set it.
    pub(crate) fn statement_timeout(&self) -> crate::domain::StatementTimeout {
        self.pool.statement_timeout()
    }

    /// How the sessions reach the server (known once one has connected).
    pub(crate) fn route(&self) -> Option<Route> {
        self.pool.route()
    }

    /// The same connection settings aimed at another node of a Citus cluster (a worker holding
    /// shards), with a pool of `pool_size` sessions.
    pub(crate) fn node(
        &self,
        host: &str,
        port: u16,
        pool_size: usize,
    ) -> Result<(Target, conn::Pool)> {
        let target = conn::resolve_node(&self.settings, &conn::ProcessEnv, host, port)?;
        let pool = target.pool_with(pool_size, self.global.pool_mode)?;
        Ok((target, pool))
    }

    /// Resolve `--table` on the given session.
    pub(crate) async fn table(&self, session: &Session) -> Result<KeyTable> {
        // A mapping chosen by name takes the name's place: it is no built-in to look up.
        let choice = crate::db::table::ProfileChoice {
            forced: match &self.global.mapping {
                Some(_) => None,
                None => self.global.profile.clone(),
            },
            forced_by: self.global.profile_from.clone(),
            mapping: self.global.mapping.clone(),
            ttl: self.global.ttl,
            time_zone: self
                .global
                .time_zone
                .clone()
                .map(|z| (z, self.global.time_zone_from.clone())),
        };
        let table = KeyTable::resolve(session, &self.global.table, &choice).await?;
        self.metrics.set_table(&table.qualified_name());
        Ok(table)
    }

    /// Whether the run's summary prints: the one rule of every command. Never under --quiet (a
    /// JSON document still prints: it was asked for). Under cron (stdout no terminal and no
    /// --output), which mails any output, only a `noteworthy` run's (stats' report, a reclaim that
    /// did or left something; never a routine evict), and only when it writes no metrics, which
    /// then say it instead.
    pub(crate) fn prints_summary(&self, noteworthy: bool) -> bool {
        let cron = self.global.output == OutputFormat::Auto && !self.output.stdout_tty;
        summary_prints(
            self.output.format,
            self.output.quiet,
            cron,
            noteworthy,
            self.metrics.enabled(),
        )
    }

    /// Close the connections, each with its Terminate message, before the process exits. Every
    /// [`Session`] must have been dropped (a session still held closes when it is dropped, too
    /// late to be waited for).
    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }
}

/// [`Context::prints_summary`]'s rule, for the resolved `format`.
fn summary_prints(
    format: OutputFormat,
    quiet: bool,
    cron: bool,
    noteworthy: bool,
    metrics: bool,
) -> bool {
    let asked = matches!(format, OutputFormat::Json | OutputFormat::Prometheus);
    if quiet && !asked {
        return false;
    }
    !cron || (noteworthy && !metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_decides_when_a_summary_prints() {
        use OutputFormat::{Json, Plain, Table};
        // On a terminal: always, unless --quiet (a JSON document still prints).
        assert!(summary_prints(Table, false, false, false, true));
        assert!(!summary_prints(Table, true, false, true, false));
        assert!(summary_prints(Json, true, false, false, false));
        // Under cron: a noteworthy run without metrics only (stats' report, a reclaim that did
        // something); never a routine one (evict, a reclaim with nothing to do).
        assert!(summary_prints(Plain, false, true, true, false));
        assert!(!summary_prints(Plain, false, true, true, true));
        assert!(!summary_prints(Plain, false, true, false, false));
    }
}

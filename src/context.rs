//! The run context built once per invocation: resolved connection target and pool, output
//! settings, the key table, cancellation by SIGINT / SIGTERM, and the clean close of every
//! connection at the end.

use anyhow::Result;

use crate::config::Plan;
use crate::conn::{self, ConnectSettings, Route, Target};
use crate::db::{KeyTable, Session};
use crate::domain::Cancel;
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
        let database_url = global.database_url.clone();
        let settings = ConnectSettings {
            database_url,
            connect_timeout: global.connect_timeout,
            statement_timeout: global.statement_timeout,
            lock_timeout: global.lock_timeout,
            idle_in_transaction_timeout: global.idle_in_transaction_timeout,
        };
        let target = conn::resolve(&settings, &conn::ProcessEnv).map_err(|e| {
            // The connection string's errors say --database-url; name where it really came from.
            let from = &global.database_url_from;
            if settings.database_url.is_none() || from.is_empty() || from == "--database-url" {
                return e;
            }
            let text = format!("{e:#}").replace("--database-url", from);
            crate::exit::fail(crate::exit::classify(&e), text)
        })?;
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

    /// The deadline of one round trip: the statement_timeout idemctl sets plus a margin (see
    /// `conn::SessionTimeouts::answer_deadline`). Every session applies it to every round trip.
    pub(crate) fn answer_deadline(&self) -> std::time::Duration {
        self.pool.answer_deadline()
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

    /// Whether a command that records metrics prints its summary: not under cron (no terminal, no
    /// explicit --output) when it writes metrics, since cron mails any output.
    pub(crate) fn prints_summary(&self) -> bool {
        let explicit = self.global.output != crate::domain::OutputFormat::Auto;
        !(self.metrics.enabled() && !explicit && !self.output.stdout_tty)
    }

    /// Close the connections, each with its Terminate message, before the process exits. Every
    /// [`Session`] must have been dropped (a session still held closes when it is dropped, too
    /// late to be waited for).
    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }
}

//! The run context built once per invocation: resolved connection target and pool, output
//! settings, the key table, and cancellation by SIGINT / SIGTERM.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;

use crate::cli::GlobalArgs;
use crate::conn::{self, ConnectSettings, Target};
use crate::db::KeyTable;
use crate::output::Output;

/// Everything a command needs.
pub struct Context {
    pub global: GlobalArgs,
    pub output: Output,
    pub target: Target,
    pool: deadpool_postgres::Pool,
    pub cancel: Cancel,
    /// Records the run's metrics (evict, reclaim, stats); no destination by default.
    pub metrics: crate::metrics::Recorder,
}

impl Context {
    /// Resolve the connection (no network yet) and build the pool.
    pub fn new(global: GlobalArgs, pool_size: usize) -> Result<Context> {
        let output = Output::new(global.output, global.color, global.quiet);
        let database_url = global
            .database_url
            .clone()
            .or_else(|| std::env::var("DATABASE_URL").ok().filter(|s| !s.is_empty()));
        let settings = ConnectSettings {
            database_url,
            connect_timeout: global.connect_timeout,
            statement_timeout: global.statement_timeout,
            lock_timeout: global.lock_timeout,
            idle_in_transaction_timeout: global.idle_in_transaction_timeout,
        };
        let target = conn::resolve(&settings, &conn::ProcessEnv)?;
        let pool = target.pool(pool_size)?;
        Ok(Context {
            global,
            output,
            target,
            pool,
            cancel: Cancel::default(),
            metrics: crate::metrics::Recorder::default(),
        })
    }

    /// A session with idemctl's settings, retrying transient failures up to the connect timeout.
    pub async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.target.connect(&self.pool).await
    }

    /// Resolve `--table` on the given session.
    pub async fn table(&self, client: &deadpool_postgres::Object) -> Result<KeyTable> {
        let table = KeyTable::resolve(client, &self.global.table).await?;
        self.metrics.set_table(&table.display());
        Ok(table)
    }
}

/// A flag set by SIGINT or SIGTERM once [`Cancel::install`] has run; long-running commands check it
/// between batches. Commands that never install it keep the default behaviour (the signal ends the
/// process at once, which is right for a read-only command).
#[derive(Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Start listening for SIGINT and SIGTERM.
    pub fn install(&self) -> Result<()> {
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
    pub fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Wait until a stop is requested (polling is fine at this granularity).
    pub async fn wait(&self) {
        while !self.requested() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

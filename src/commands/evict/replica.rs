//! `evict --max-replica-lag`: before each batch (and each partition drop), read how far every
//! streaming replica's replay is behind, and pause while the worst one is further behind than the
//! limit. Only called between statements: evict runs in autocommit, so no transaction is open while
//! it waits.
//!
//! How lag is measured. `pg_stat_replication.replay_lag` alone is not enough: PostgreSQL clears it
//! after an idle spell and stops updating it while replay is stuck (a standby paused with
//! `pg_wal_replay_pause()`, or blocked by a conflicting query, shows a NULL or frozen small value
//! forever). So a replica's lag is:
//! * 0 when its replay position has reached the WAL flushed on the primary (whatever replay_lag
//!   still says);
//! * otherwise the larger of replay_lag and how long idemctl has seen its replay position standing
//!   still while behind.
//!
//! The primary only learns a standby's replay position from the standby's status messages; an idle
//! standby sends one every `wal_receiver_status_interval` (10 s by default), so right after a burst
//! the measured lag can read up to that much high. Limits well above it are what this is for.
//! A replica that was already stuck before the run started is noticed once its position has stood
//! still for the limit.

use crate::db::Session;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::sync::Mutex;

use crate::db::replication;
use crate::domain::Cancel;
use crate::exit::{Exit, fail};
use crate::progress::Progress;
pub(crate) use crate::report::evict::{GaveUp, Lagging};
use crate::report::run::EndReason;

/// How often the lag is read again while waiting.
const POLL: Duration = Duration::from_millis(500);

/// Waiting totals for the summary.
#[derive(Debug, Clone, Default)]
pub(crate) struct WaitTotals {
    /// The limit, in seconds (None when the run did not throttle).
    pub limit_seconds: Option<f64>,
    /// Times a pause began.
    pub waits: u64,
    pub waited: Duration,
    /// The largest lag measured during the run.
    pub max_lag_seconds: f64,
    /// The replica that ended the run, when one did.
    pub gave_up_on: Option<GaveUp>,
}

#[derive(Default)]
struct State {
    /// Per walsender pid: the replay position last seen and since when it has not moved.
    still_since: HashMap<i32, (i64, Instant)>,
    totals: WaitTotals,
}

/// The pause shared by every worker of a run.
pub(crate) struct ReplicaGate {
    max_lag: Duration,
    max_wait: Duration,
    state: Mutex<State>,
}

/// Fail before any change when the role cannot see the replay positions: throttling on columns that
/// read NULL would silently never pause.
pub(crate) async fn require_visibility(client: &Session) -> Result<()> {
    let (role, can_see) = replication::visibility(client).await?;
    if can_see {
        return Ok(());
    }
    Err(fail(
        Exit::PermissionDenied,
        crate::output::evict::replica_positions_hidden(&role),
    ))
}

impl ReplicaGate {
    pub(crate) fn new(max_lag: Duration, max_wait: Duration) -> ReplicaGate {
        ReplicaGate {
            max_lag,
            max_wait,
            state: Mutex::new(State::default()),
        }
    }

    /// Totals so far.
    pub(crate) async fn totals(&self) -> WaitTotals {
        WaitTotals {
            limit_seconds: Some(self.max_lag.as_secs_f64()),
            ..self.state.lock().await.totals.clone()
        }
    }

    /// Return at once when every replica is within the limit; otherwise pause, polling, until it is
    /// (None), a stop is requested (None: the caller's budget check sees it), or the wait outlasts
    /// --max-replica-wait or the run's deadline (Some(ReplicaLag)).
    pub(crate) async fn pause_while_lagging(
        &self,
        client: &Session,
        cancel: &Cancel,
        run_deadline: Option<Instant>,
        progress: &Progress,
    ) -> Result<Option<EndReason>> {
        let mut state = self.state.lock().await;
        let Some(mut worst) = self.over_limit(&mut state, client).await? else {
            return Ok(None);
        };
        let started = Instant::now();
        state.totals.waits += 1;
        let give_up_at =
            run_deadline.map_or(started + self.max_wait, |d| d.min(started + self.max_wait));
        let outcome = loop {
            progress.note(&crate::output::evict::replica_pause(
                &worst,
                self.max_lag.as_secs_f64(),
            ));
            let now = Instant::now();
            if now >= give_up_at {
                state.totals.gave_up_on = Some(GaveUp {
                    worst: worst.clone(),
                    waited_seconds: started.elapsed().as_secs_f64(),
                });
                break Some(EndReason::ReplicaLag);
            }
            if cancel.requested() {
                break None;
            }
            tokio::select! {
                _ = tokio::time::sleep(POLL.min(give_up_at - now)) => {},
                _ = cancel.wait() => {},
            }
            match self.over_limit(&mut state, client).await? {
                Some(w) => worst = w,
                None => break None,
            }
        };
        state.totals.waited += started.elapsed();
        Ok(outcome)
    }

    /// Read the replicas; the worst one when it is past the limit.
    async fn over_limit(&self, state: &mut State, client: &Session) -> Result<Option<Lagging>> {
        let replicas = replication::replicas(client).await?;
        let now = Instant::now();
        let mut worst: Option<Lagging> = None;
        state
            .still_since
            .retain(|pid, _| replicas.iter().any(|r| r.pid == *pid));
        for r in &replicas {
            let lag_seconds = if r.behind_bytes <= 0 {
                state.still_since.remove(&r.pid);
                0.0
            } else {
                let seen = state
                    .still_since
                    .entry(r.pid)
                    .or_insert((r.replay_position, now));
                if seen.0 != r.replay_position {
                    *seen = (r.replay_position, now);
                }
                let still = now.duration_since(seen.1).as_secs_f64();
                r.replay_lag_seconds.unwrap_or(0.0).max(still)
            };
            if worst.as_ref().is_none_or(|w| lag_seconds > w.lag_seconds) {
                worst = Some(Lagging {
                    name: r.name.clone(),
                    lag_seconds,
                    behind_bytes: r.behind_bytes,
                });
            }
        }
        let worst = worst.filter(|w| w.lag_seconds > 0.0);
        if let Some(w) = &worst {
            state.totals.max_lag_seconds = state.totals.max_lag_seconds.max(w.lag_seconds);
        }
        Ok(worst.filter(|w| w.lag_seconds > self.max_lag.as_secs_f64()))
    }
}

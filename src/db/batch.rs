//! The one runner of batch statements, evict's and reclaim's alike. A batch is its own short
//! transaction: one autocommit statement, or a few in [`in_transaction`]; either way under the
//! session's settings, which behind a transaction pooler are `SET LOCAL`s at the start of that
//! transaction (see [`super::Session`]), and with a client-side deadline ([`super::with_deadline`]).
//! Row waits are kept to a few milliseconds ([`limit_row_waits`]), so a batch never queues the
//! API behind it. A failed batch was rolled back whole; [`Failure::of`] says why, and the policy
//! here decides what follows:
//!
//! * a lock not granted within lock_timeout, a deadlock or a serialization failure is transient:
//!   the batch is tried again after [`PAUSE`], up to [`TRIES`] times in all ([`retrying`]); so is
//!   a foreign key violation: a row referencing a key (ON DELETE NO ACTION / RESTRICT) inserted
//!   after the batch's statement began, which the batch, tried again, leaves out;
//! * evict redoes a batch that met a held row with `FOR UPDATE SKIP LOCKED`, leaving the row to
//!   its live owner ([`or_skip_locked`]), and only that fallback meeting a lock counts as a try;
//! * a cancellation (statement_timeout, a signal), a lost connection or any other error ends the
//!   run at once.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio_postgres::error::SqlState;

use super::Session;
use crate::report::db::{BatchFailure, Step};

/// Tries of one batch (the first included) before a transient failure ends the run.
pub(crate) const TRIES: u32 = 5;
/// The pause before a batch is tried again: long enough for a short DDL statement to finish.
const PAUSE: Duration = Duration::from_millis(200);

/// Why a batch failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// A lock (a row's, or the table's under DDL) was not granted within lock_timeout.
    LockTimeout,
    /// The server broke a deadlock by rolling this batch back.
    Deadlock,
    /// The batch's snapshot conflicted with a concurrent change.
    Serialization,
    /// A key the batch deleted gained a referencing row (NO ACTION / RESTRICT) meanwhile.
    Referenced,
    /// statement_timeout, or a cancel request (a signal to idemctl).
    Canceled,
    /// A batch must run again because it raced another session (see [`Rerun`]).
    Rerun,
    /// Anything else: not a condition a retry can clear.
    Other,
}

impl Failure {
    /// The failure behind `e`, wherever in its chain the server's error (or a [`Rerun`]) is.
    pub(crate) fn of(e: &anyhow::Error) -> Failure {
        for cause in e.chain() {
            if cause.is::<Rerun>() {
                return Failure::Rerun;
            }
            if let Some(e) = cause.downcast_ref::<tokio_postgres::Error>() {
                return Failure::of_statement(e);
            }
        }
        Failure::Other
    }

    /// The failure a statement met, by the server's SQLSTATE.
    pub(crate) fn of_statement(e: &tokio_postgres::Error) -> Failure {
        match e.code() {
            Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => Failure::LockTimeout,
            Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED => Failure::Deadlock,
            Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE => Failure::Serialization,
            Some(c) if *c == SqlState::FOREIGN_KEY_VIOLATION => Failure::Referenced,
            Some(c) if *c == SqlState::QUERY_CANCELED => Failure::Canceled,
            _ => Failure::Other,
        }
    }

    /// Whether the batch may simply be tried again.
    fn transient(self) -> bool {
        matches!(
            self,
            Failure::LockTimeout
                | Failure::Deadlock
                | Failure::Serialization
                | Failure::Referenced
                | Failure::Rerun
        )
    }
}

/// What a batch that failed with `e` met, for the error line. A lock wait names a row only when
/// the server said it waited on one (its error's context names the tuple); otherwise the lock may
/// have been a table's (DDL) or a row's, and the words say both.
pub(crate) fn lock_failure(e: &anyhow::Error) -> BatchFailure {
    if Failure::of(e) != Failure::LockTimeout {
        return BatchFailure::Failed;
    }
    let on_row = e.chain().any(|cause| {
        cause
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error)
            .and_then(|db| db.where_())
            .is_some_and(|w| w.contains("tuple"))
    });
    if on_row {
        BatchFailure::RowLock
    } else {
        BatchFailure::Locks
    }
}

/// A batch that found the rows changed under it between its statements, rolled back to run again.
pub(crate) use crate::report::db::Rerun;

/// Keep every row (and table) wait of the session's batches to `wait`: `SET` on an owned session,
/// `SET LOCAL` in each batch's transaction behind a pooler.
pub(crate) async fn limit_row_waits(session: &Session, wait: Duration) -> Result<()> {
    session
        .set("lock_timeout", &format!("{}ms", wait.as_millis()))
        .await
        .context(Step::SetSessionLockTimeout)
}

/// The size to do a failed batch of `rows` again at: half as large (at least one row) when it
/// exceeded statement_timeout (the server cancelled it and no signal asked for that,
/// `interrupted` false). None for any other failure, and for a batch of one row, which cannot be
/// made smaller: that one ends the run. evict and reclaim alike redo such a batch's work in
/// batches of this size, and start later batches at the size that worked.
pub(crate) fn smaller_after_timeout(
    e: &anyhow::Error,
    rows: u64,
    interrupted: bool,
) -> Option<u64> {
    (timed_out(e, interrupted) && rows > 1).then(|| (rows / 2).max(1))
}

/// Whether a batch failed because it exceeded statement_timeout (not a signal's cancel).
pub(crate) fn timed_out(e: &anyhow::Error, interrupted: bool) -> bool {
    Failure::of(e) == Failure::Canceled && !interrupted
}

/// Run one batch (`attempt`: its own transaction), trying it again after a transient failure, up
/// to [`TRIES`] tries; the last error otherwise.
pub(crate) async fn retrying<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(e) if again(&e, &mut tries).await => {}
            other => return other,
        }
    }
}

/// Whether a batch that failed with `e` after `tries` tries is tried again (after the pause).
async fn again(e: &anyhow::Error, tries: &mut u32) -> bool {
    if !Failure::of(e).transient() || *tries >= TRIES {
        return false;
    }
    *tries += 1;
    tokio::time::sleep(PAUSE).await;
    true
}

/// How the batches of a table written through the Citus coordinator (a reference table) wait.
/// There no statement can skip the one row a live request holds: to keep the placements alike,
/// Citus serializes every write to a reference table behind a transaction that wrote one of its
/// rows or locked one `FOR UPDATE` (an exclusive lock on the table's shard), whichever row the
/// write touches. So a batch that met such a lock is tried again whole ([`waiting_out`]).
#[derive(Debug, Clone)]
pub(crate) struct ThroughCoordinator {
    /// The longest any batch statement waits on a lock, on every node.
    pub wait: Duration,
    /// How long a batch that met a live transaction's lock keeps being tried again (each try
    /// waiting at most `wait`), before the run ends.
    pub patience: Duration,
    /// Set when the run is interrupted: the batch stops trying at once.
    pub cancel: crate::domain::Cancel,
}

/// How long a batch on a Citus reference table waits out a live transaction at most.
pub(crate) const HELD_REFERENCE_PATIENCE: Duration = Duration::from_secs(10);

/// The pauses between the tries of a batch that waits out a live transaction: short at first (a
/// live request's transaction usually ends within milliseconds), then at most this long.
const HELD_PAUSE_FIRST: Duration = Duration::from_millis(2);
const HELD_PAUSE_MAX: Duration = Duration::from_millis(100);

/// A live transaction held a row of a Citus reference table for longer than the run waits.
pub(crate) use crate::report::db::HeldReferenceRow;

/// Run one batch on a table written through the coordinator: a try that met a lock held past
/// `how.wait` is made again after a short pause, for up to `how.patience` (then
/// [`HeldReferenceRow`], which no runner tries again; or, once the run is interrupted, that
/// try's own error). Any other failure is returned as it is, for the caller's runner to judge.
/// Returns the batch's result and the time spent pausing between tries (not the batch's work).
pub(crate) async fn waiting_out<T, F, Fut>(
    how: &ThroughCoordinator,
    mut attempt: F,
) -> Result<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let since = std::time::Instant::now();
    let mut pause = HELD_PAUSE_FIRST;
    let mut paused = Duration::ZERO;
    loop {
        match attempt().await {
            Err(e) if Failure::of(&e) == Failure::LockTimeout => {
                if how.cancel.requested() {
                    return Err(e);
                }
                if since.elapsed() + pause > how.patience {
                    return Err(anyhow::Error::new(HeldReferenceRow {
                        patience: how.patience,
                    }));
                }
                tokio::time::sleep(pause).await;
                paused += pause;
                pause = (pause * 2).min(HELD_PAUSE_MAX);
            }
            other => return other.map(|done| (done, paused)),
        }
    }
}

/// [`retrying`], with each try waiting out a live transaction ([`waiting_out`]) when the table is
/// written through the Citus coordinator (`how`).
pub(crate) async fn retrying_through<T, F, Fut>(
    how: Option<&ThroughCoordinator>,
    attempt: F,
) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match how {
        Some(how) => retrying(|| async { Ok(waiting_out(how, &attempt).await?.0) }).await,
        None => retrying(attempt).await,
    }
}

/// Which statement of [`or_skip_locked`] did the batch.
pub(crate) enum Ran<T, U> {
    /// The batch statement, which met no held row.
    First(T),
    /// The SKIP LOCKED fallback, after the batch statement met a held row.
    SkippedLocked(U),
}

/// Run `first`; when it met a lock held past lock_timeout (a live request holds a row), redo the
/// batch with `skip_locked`, which leaves held rows to their owners. A fallback that itself fails
/// (DDL holds the table) is a failed try of the whole batch, as [`retrying`] counts them.
pub(crate) async fn or_skip_locked<T, U, F, FF, S, SF>(
    mut first: F,
    mut skip_locked: S,
) -> Result<Ran<T, U>>
where
    F: FnMut() -> FF,
    FF: Future<Output = Result<T>>,
    S: FnMut() -> SF,
    SF: Future<Output = Result<U>>,
{
    let mut tries = 1;
    loop {
        let ran = match first().await {
            Ok(done) => Ok(Ran::First(done)),
            Err(e) if Failure::of(&e) == Failure::LockTimeout => {
                skip_locked().await.map(Ran::SkippedLocked)
            }
            Err(e) => Err(e),
        };
        match ran {
            Err(e) if again(&e, &mut tries).await => {}
            other => return other,
        }
    }
}

/// Run `work` (statements of one batch) in a transaction of its own, started with the session's
/// settings: committed when it succeeds, rolled back when it fails. `failed` says what failed
/// when the transaction could not be started, then when it could not be committed.
pub(crate) async fn in_transaction<T>(
    client: &Session,
    failed: [Step; 2],
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    let [begin, commit] = failed;
    client.begin("BEGIN").await.context(begin)?;
    match work.await {
        Ok(done) => {
            client.commit().await.context(commit)?;
            Ok(done)
        }
        Err(e) => {
            let _ = client.rollback().await;
            Err(e)
        }
    }
}

/// Whether a batch that failed with `e` failed inside its own transaction before its COMMIT was
/// sent (its BEGIN, or a statement after it, such as the settings a batch through the Citus
/// coordinator makes first): then it never committed, whatever became of the connection, as the
/// server rolls back a transaction whose session ends.
pub(crate) fn failed_before_commit(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<Step>(),
        Some(
            Step::StartBatch
                | Step::StartArchivedBatch
                | Step::ReadArchiveRecords
                | Step::ChangeArchivedBatch
                | Step::PlanWithValues
                | Step::PassSettingsToWorkers
                | Step::SetBatchLockTimeout
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_is_found_under_context_and_is_transient() {
        let e = anyhow::Error::new(Rerun).context("a batch failed");
        assert_eq!(Failure::of(&e), Failure::Rerun);
        assert!(Failure::of(&e).transient());
        let other = anyhow::anyhow!("no answer from the server");
        assert_eq!(Failure::of(&other), Failure::Other);
        assert!(!Failure::Canceled.transient());
    }

    #[tokio::test]
    async fn transient_failures_are_tried_again_up_to_the_limit() {
        let mut tries = 0;
        let got: Result<()> = retrying(|| {
            tries += 1;
            async { Err(anyhow::Error::new(Rerun)) }
        })
        .await;
        assert!(got.is_err());
        assert_eq!(tries, TRIES);
        let mut tries = 0;
        let got: Result<()> = retrying(|| {
            tries += 1;
            async { Err(anyhow::anyhow!("for good")) }
        })
        .await;
        assert!(got.is_err());
        assert_eq!(tries, 1);
    }
}

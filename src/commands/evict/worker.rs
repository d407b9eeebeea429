//! The batch loop of `evict`: one or more workers, each on its own session, claim disjoint ranges of
//! the expiry index in order and delete them, one short statement per batch.
//!
//! A claim probes where the next batch ends (the (N+1)-th expired row from the shared cursor) and
//! moves the cursor there, under a mutex, so ranges never overlap. The DELETE of a range runs
//! through the batch runner ([`crate::db::batch`]) under a lock_timeout of a few milliseconds; if a
//! live request holds a row in it, the range is redone with `FOR UPDATE SKIP LOCKED` and the held
//! row is left (and counted). More than one batch of rows sharing a single expires_at is taken in
//! SKIP LOCKED batches at that instant.
//!
//! With --max-replica-lag the claim first waits, holding the claim lock (so every worker pauses) but
//! no transaction, until the replicas are within the limit (see `replica`).

use crate::db::Session;
use crate::db::batch::{self, Ran};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::report::timestamp::Timestamp;
use anyhow::{Context as _, Result};
use tokio::sync::Mutex;

use super::pace::Pacer;
use super::rate::{self, Limiter, Ticket};
use super::replica::ReplicaGate;
use crate::cli::BatchSizing;
use crate::domain::Cancel;
use crate::progress::Progress;
use crate::report::run::EndReason;

/// The validated limits and pace of a run.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub sizing: BatchSizing,
    pub max_rows: Option<u64>,
    pub max_batches: Option<u64>,
    pub max_runtime: Option<Duration>,
    pub min_age_secs: Option<f64>,
    /// Client-side limit on one statement (statement_timeout plus a margin).
    pub deadline: Duration,
    /// The statement_timeout in force, and what set it.
    pub statement_timeout: crate::domain::StatementTimeout,
    /// --max-rate and --max-wal-rate.
    pub caps: crate::domain::Caps,
}

pub(super) use crate::db::evict::Statements;

/// Totals of a run.
#[derive(Debug, Default, Clone)]
pub(super) struct Totals {
    pub rows: u64,
    pub batches: u64,
    pub skipped_locked: u64,
    pub skipped_min_age: u64,
    /// Left because a NO ACTION / RESTRICT foreign key still references them.
    pub skipped_referenced: u64,
    pub lock_fallbacks: u64,
    /// Expired rows in the ranges walked that are not completed (in_progress: reclaim's job).
    pub passed_over: u64,
    /// What each batch left behind in its range (only batches that left something).
    pub left: Vec<Left>,
    pub latencies_ms: Vec<f64>,
    /// Rows asked of each batch (what --batch-size or --batch-time made of it).
    pub sizes: Vec<u32>,
    /// Index entries the batches read (on a walk: every entry of its pages).
    pub examined: u64,
    /// The walk follows age and stopped at a page in which nothing had expired.
    pub stopped_early: bool,
}

impl Totals {
    /// Add `other`'s figures (another placement's, or another node's).
    pub(super) fn merge(&mut self, other: Totals) {
        self.rows += other.rows;
        self.batches += other.batches;
        self.skipped_locked += other.skipped_locked;
        self.skipped_min_age += other.skipped_min_age;
        self.skipped_referenced += other.skipped_referenced;
        self.lock_fallbacks += other.lock_fallbacks;
        self.passed_over += other.passed_over;
        self.left.extend(other.left);
        self.latencies_ms.extend(other.latencies_ms);
        self.sizes.extend(other.sizes);
        self.examined += other.examined;
        self.stopped_early |= other.stopped_early;
    }
}

/// A range in which a batch left rows. After the run, the ranges behind the final cursor are
/// counted again (merged where they overlap: batches of ties at one instant, and a range claimed
/// while they ran, share rows), and added to a count made from the cursor on, so no row is counted
/// twice and none is missed, whatever the batches running side by side saw of each other's locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Left {
    /// Inclusive start (None: the start of the index).
    pub lower: Option<Timestamp>,
    /// Exclusive end (None: open, the last range of a run).
    pub upper: Option<Timestamp>,
}

impl Left {
    /// Whether the range lies wholly behind `cursor` (the counts from the cursor do not see it).
    pub(super) fn behind(&self, cursor: Option<Timestamp>) -> bool {
        matches!((self.upper, cursor), (Some(u), Some(c)) if u <= c)
    }
}

/// The ranges behind `cursor`, sorted, overlapping ones merged.
pub(super) fn merged_behind(left: &[Left], cursor: Option<Timestamp>) -> Vec<Left> {
    let mut ranges: Vec<Left> = left.iter().filter(|l| l.behind(cursor)).copied().collect();
    ranges.sort_by_key(|l| (l.lower, l.upper));
    let mut out: Vec<Left> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            // Both have an end (they are behind the cursor); None sorts first as a start.
            Some(last) if r.lower < last.upper => last.upper = last.upper.max(r.upper),
            _ => out.push(r),
        }
    }
    out
}

/// Count the expired rows of [lower, upper) left: (completed, not completed). Its caller leaves
/// the leftover counts out of the report when this fails, so the error carries no step.
pub(super) async fn count_left(
    client: &Session,
    sql: &Statements,
    deadline: Duration,
    range: Left,
) -> Result<(u64, u64)> {
    sql.range_left(client, deadline, range.lower, range.upper)
        .await
}

/// The shared cursor and totals.
#[derive(Default)]
struct State {
    /// Where the next claim starts (None = the start of the index).
    next: Option<Timestamp>,
    /// The last range has been claimed.
    drained: bool,
    /// Why claiming stopped, when a budget or a failure stopped it.
    stop: Option<EndReason>,
    /// Rows deleted plus rows claimed by batches still in flight (for --max-rows).
    reserved: u64,
    claims: u64,
    /// An instant whose run of ties has no deletable row left: continue after it.
    ties_done: Option<Timestamp>,
    /// Rows the next batch asks for (0 = not started: the sizing's first).
    batch_rows: u32,
    /// On a walk: the last key of the last page, as text (None: from the start of the index).
    walked_to: Option<Vec<String>>,
    totals: Totals,
}

/// What a worker is to do next.
enum Claim {
    /// Delete [start, end) (end None = up to now()).
    Range {
        start: Option<Timestamp>,
        end: Option<Timestamp>,
        limit: i64,
        size: u32,
    },
    /// More than one batch of rows expire at exactly `at`: one SKIP LOCKED batch of them.
    Ties {
        at: Timestamp,
        limit: i64,
        size: u32,
    },
    /// A page of the walk, already run (under the claim, which knows where the next page starts
    /// only once this one has ended).
    Walked {
        outcome: Outcome,
        limit: i64,
        size: u32,
    },
    Stop,
}

/// Everything the workers share.
pub(super) struct Shared {
    plan: Plan,
    sql: Statements,
    cancel: Cancel,
    started: Instant,
    progress: Progress,
    gate: Option<Arc<ReplicaGate>>,
    pacer: Arc<Pacer>,
    /// The rate caps' schedule (with --max-rate or --max-wal-rate).
    limiter: Option<Limiter>,
    state: Mutex<State>,
    /// The last point known durable: when it was made, and the rows deleted up to it.
    durable: Mutex<(Instant, u64)>,
}

/// How often a worker makes the batches committed so far durable (their commits are
/// asynchronous): one small synchronous commit, which flushes the WAL written before it. The rows
/// deleted since the last such point are the ones a crash or a failover may bring back.
pub(super) const DURABLE_EVERY: Duration = Duration::from_secs(1);

impl Shared {
    /// `started` is when the run began (budgets count from it); `gate` pauses claims while replicas
    /// lag; `pacer` decides the rest after each batch.
    pub(super) fn new(
        plan: Plan,
        sql: Statements,
        cancel: Cancel,
        progress: Progress,
        started: Instant,
        gate: Option<Arc<ReplicaGate>>,
        pacer: Arc<Pacer>,
    ) -> Arc<Shared> {
        let limiter = plan.caps.any().then(|| Limiter::new(plan.caps));
        Arc::new(Shared {
            limiter,
            plan,
            sql,
            cancel,
            started,
            progress,
            gate,
            pacer,
            state: Mutex::new(State::default()),
            durable: Mutex::new((started, 0)),
        })
    }

    /// Why the run ended, once every worker has stopped; `failed` when a worker returned an error.
    pub(super) async fn end_reason(&self, failed: bool) -> EndReason {
        let state = self.state.lock().await;
        if self.cancel.requested() {
            EndReason::Interrupted
        } else if failed {
            EndReason::Error
        } else {
            state.stop.unwrap_or_else(|| {
                if !state.drained && self.plan.max_rows.is_some_and(|m| state.reserved >= m) {
                    EndReason::RowBudget
                } else {
                    EndReason::Drained
                }
            })
        }
    }

    /// Make the batches committed so far durable, when [`DURABLE_EVERY`] has passed since the last
    /// time (or `now`): the rows counted before it began are then confirmed.
    pub(super) async fn confirm(&self, client: &Session, now: bool) -> Result<()> {
        {
            let mut durable = self.durable.lock().await;
            if !now && durable.0.elapsed() < DURABLE_EVERY {
                return Ok(());
            }
            durable.0 = Instant::now();
        }
        let rows = self.state.lock().await.totals.rows;
        crate::db::vacuum::flush_commits(client)
            .await
            .context(crate::report::failure::Step::MakeDeletesDurable)?;
        let mut durable = self.durable.lock().await;
        durable.1 = durable.1.max(rows);
        Ok(())
    }

    /// Start later claims at no more than `rows` (a batch of more exceeded statement_timeout).
    pub(super) async fn shrink_to(&self, rows: i64) {
        let rows = u32::try_from(rows.max(1)).unwrap_or(u32::MAX);
        let mut state = self.state.lock().await;
        state.batch_rows = state.batch_rows.min(rows).max(1);
    }

    /// Rows deleted up to the last point known durable.
    pub(super) async fn confirmed(&self) -> u64 {
        self.durable.lock().await.1
    }

    /// The totals so far.
    pub(super) async fn totals(&self) -> Totals {
        self.state.lock().await.totals.clone()
    }

    /// Whether the batches walk a unique index (a table without an expiry index).
    pub(super) fn walks(&self) -> bool {
        self.sql.walk().is_some()
    }

    /// The client-side limit on one statement.
    pub(super) fn deadline(&self) -> Duration {
        self.plan.deadline
    }

    /// Stop every worker at its next claim (a worker failed).
    pub(super) async fn abort(&self) {
        self.state.lock().await.stop.get_or_insert(EndReason::Error);
    }

    fn budget_reason(&self, state: &State) -> Option<EndReason> {
        if self.cancel.requested() {
            return Some(EndReason::Interrupted);
        }
        if let Some(stop) = state.stop {
            return Some(stop);
        }
        if state.drained {
            return Some(EndReason::Drained);
        }
        let p = &self.plan;
        if p.max_runtime.is_some_and(|m| self.started.elapsed() >= m) {
            return Some(EndReason::TimeBudget);
        }
        if p.max_rows.is_some_and(|m| state.reserved >= m) {
            return Some(EndReason::RowBudget);
        }
        if p.max_batches.is_some_and(|m| state.claims >= m) {
            return Some(EndReason::BatchBudget);
        }
        None
    }

    /// Stop claiming when a budget says so (recording why). The row budget is not recorded: rows
    /// reserved by another session's batch under way come back when that batch deletes fewer (a
    /// row in its range is in_progress or held), and that session then claims them again, so the
    /// run ends at exactly --max-rows; `end_reason` names the budget at the end.
    fn should_stop(&self, state: &mut State) -> bool {
        let Some(reason) = self.budget_reason(state) else {
            return false;
        };
        if !matches!(
            reason,
            EndReason::Drained | EndReason::Interrupted | EndReason::RowBudget
        ) {
            state.stop.get_or_insert(reason);
        }
        true
    }

    /// Claim the next range, probing its end on this worker's session; with a rate cap, the
    /// batch's reservation too.
    async fn claim(&self, client: &Session) -> Result<(Claim, Option<Ticket>)> {
        let mut state = self.state.lock().await;
        let claimed = self.claim_in(&mut state, client).await;
        if claimed.is_err() {
            // Stop every worker before letting the next one claim: a round trip that failed here
            // (a dead path, a lost server) would likely fail theirs too, one deadline after another.
            state.stop.get_or_insert(EndReason::Error);
        }
        claimed
    }

    async fn claim_in(
        &self,
        state: &mut tokio::sync::MutexGuard<'_, State>,
        client: &Session,
    ) -> Result<(Claim, Option<Ticket>)> {
        let state = &mut **state;
        if self.should_stop(state) {
            return Ok((Claim::Stop, None));
        }
        if self.replicas_stop(state, client).await? {
            return Ok((Claim::Stop, None));
        }
        if state.ties_done.is_some() && state.ties_done == state.next {
            state.next = state.next.map(Timestamp::next_after);
        }
        if state.batch_rows == 0 {
            state.batch_rows = self.plan.sizing.first();
        }
        let batch_rows = state.batch_rows;
        let size = match &self.limiter {
            Some(l) => l.batch_cap(u64::from(batch_rows)).await,
            None => u64::from(batch_rows),
        };
        let left = self
            .plan
            .max_rows
            .map_or(size, |m| m.saturating_sub(state.reserved).min(size));
        let limit = i64::try_from(left.max(1)).unwrap_or(i64::MAX);
        let Some(ticket) = self.slot(state, client, limit).await? else {
            return Ok((Claim::Stop, None));
        };
        if let Some(walk) = self.sql.walk() {
            let claim = self
                .walk_page(state, client, walk, limit, batch_rows)
                .await?;
            return Ok((claim, ticket));
        }
        let start = state.next;
        let crate::db::evict::Claim { first, end } = self
            .sql
            .claim(client, self.plan.deadline, start, limit)
            .await
            .context(crate::report::failure::Step::FindNextRange)?;
        if first.is_none() {
            // Nothing expired is left from the cursor: no batch runs, so none is counted (an empty
            // Citus shard spends none of --max-batches).
            state.drained = true;
            if let (Some(l), Some(t)) = (&self.limiter, ticket) {
                l.cancel(t).await;
            }
            return Ok((Claim::Stop, None));
        }
        state.claims += 1;
        state.reserved += u64::try_from(limit).unwrap_or(0);
        let claim = match (first, end) {
            (Some(f), Some(e)) if f == e => {
                state.next = Some(e);
                Claim::Ties {
                    at: e,
                    limit,
                    size: batch_rows,
                }
            }
            (_, None) => {
                state.drained = true;
                Claim::Range {
                    start,
                    end: None,
                    limit,
                    size: batch_rows,
                }
            }
            (_, Some(e)) => {
                state.next = Some(e);
                Claim::Range {
                    start,
                    end: Some(e),
                    limit,
                    size: batch_rows,
                }
            }
        };
        Ok((claim, ticket))
    }

    /// With --max-replica-lag, wait (holding the claim, so every worker pauses) until the replicas
    /// are within the limit; true when the run must stop instead.
    async fn replicas_stop(&self, state: &mut State, client: &Session) -> Result<bool> {
        let Some(gate) = &self.gate else {
            return Ok(false);
        };
        let deadline = self.plan.max_runtime.map(|m| self.started + m);
        if let Some(reason) = gate
            .pause_while_lagging(client, &self.cancel, deadline, &self.progress)
            .await?
        {
            state.stop.get_or_insert(reason);
            return Ok(true);
        }
        Ok(self.should_stop(state))
    }

    /// The rate caps: wait for this batch's slot of `limit` rows (every worker waits behind this
    /// claim). `Some(None)` without a cap; None when the run must stop instead.
    async fn slot(
        &self,
        state: &mut State,
        client: &Session,
        limit: i64,
    ) -> Result<Option<Option<Ticket>>> {
        let Some(l) = &self.limiter else {
            return Ok(Some(None));
        };
        let deadline = self.plan.max_runtime.map(|m| self.started + m);
        let ticket = l
            .acquire(u64::try_from(limit).unwrap_or(0), &self.cancel, deadline)
            .await;
        match ticket {
            Some(mut t) if !self.should_stop(state) => {
                // From here on the server's WAL is this batch's, the claim's probe included
                // (reading a range prunes the dead rows of earlier batches).
                l.before_batch(client, &mut t).await?;
                Ok(Some(Some(t)))
            }
            Some(t) => {
                l.cancel(t).await;
                Ok(None)
            }
            None => {
                self.should_stop(state);
                Ok(None)
            }
        }
    }

    /// Run the next page of `walk`: at most `limit` index entries after the last page's last key,
    /// the expired finished rows among them deleted. The walk ends at the end of the index, or,
    /// where it follows age, at the first page in which nothing has expired.
    async fn walk_page(
        &self,
        state: &mut State,
        client: &Session,
        walk: &crate::db::evict::Walk,
        limit: i64,
        size: u32,
    ) -> Result<Claim> {
        let t0 = Instant::now();
        let after = state.walked_to.as_deref();
        let min_age = self.plan.min_age_secs;
        let page = batch::retrying(|| walk.page(client, self.plan.deadline, limit, min_age, after))
            .await
            .map_err(batch_failed)?;
        let statement = t0.elapsed();
        let none_past = walk.follows_age && page.none_past;
        if page.examined < u64::try_from(limit).unwrap_or(0) || none_past || page.last_key.is_none()
        {
            state.drained = true;
            state.totals.stopped_early = none_past && page.examined > 0;
        }
        state.walked_to = page.last_key;
        state.claims += 1;
        state.reserved += u64::try_from(limit).unwrap_or(0);
        let outcome = Outcome {
            deleted: page.deleted,
            skipped_locked: page.expired.saturating_sub(page.deleted),
            skipped_min_age: page.too_young,
            examined: page.examined,
            statement,
            ..Outcome::default()
        };
        Ok(Claim::Walked {
            outcome,
            limit,
            size,
        })
    }

    /// Record a finished batch, and size the next one from how long its statement held rows:
    /// `size` is the batch size in effect when the batch was claimed, `rtt` this worker's network
    /// round trip (which the statement's time as seen here includes, but its locks do not).
    /// A count made after a batch's statement returned: that batch's deletes are committed, so
    /// when the count fails the run still counts them (deleted, not yet durable) as it ends.
    async fn after_batch<T>(&self, deleted: u64, counted: Result<T>) -> Result<T> {
        if counted.is_err() {
            let mut state = self.state.lock().await;
            state.totals.rows += deleted;
            state.totals.batches += 1;
        }
        counted
    }

    async fn record(
        &self,
        limit: i64,
        size: u32,
        outcome: &Outcome,
        took: Duration,
        rtt: Duration,
    ) {
        let held = outcome
            .statement
            .saturating_sub(rtt)
            .max(outcome.statement / 10);
        self.pacer.batch(held, outcome.examined).await;
        let sizing = match self.pacer.batch_time().await {
            Some(t) => self.plan.sizing.with_target(t),
            None => self.plan.sizing,
        };
        let mut state = self.state.lock().await;
        if let Some(next) = sizing.next(size, outcome.examined, held) {
            state.batch_rows = next;
        }
        let t = &mut state.totals;
        t.sizes.push(u32::try_from(limit).unwrap_or(u32::MAX));
        t.rows += outcome.deleted;
        t.batches += 1;
        t.skipped_locked += outcome.skipped_locked;
        t.skipped_min_age += outcome.skipped_min_age;
        t.skipped_referenced += outcome.skipped_referenced;
        t.lock_fallbacks += u64::from(outcome.fell_back);
        t.passed_over += outcome.passed_over;
        t.examined += outcome.examined;
        if outcome.skipped_locked
            + outcome.skipped_min_age
            + outcome.skipped_referenced
            + outcome.passed_over
            > 0
        {
            t.left.push(Left {
                lower: outcome.lower,
                upper: outcome.upper,
            });
        }
        t.latencies_ms.push(took.as_secs_f64() * 1000.0);
        let (rows, skipped) = (t.rows, t.skipped_locked);
        let unused = u64::try_from(limit)
            .unwrap_or(0)
            .saturating_sub(outcome.deleted);
        state.reserved = state.reserved.saturating_sub(unused);
        if let Some(at) = outcome.ties_exhausted {
            state.ties_done = Some(at);
        }
        drop(state);
        let mut status: Vec<String> = self
            .pacer
            .in_effect()
            .await
            .iter()
            .map(crate::output::evict::pace_status)
            .collect();
        if let Some(l) = &self.limiter {
            let progress = l.progress(self.started.elapsed().as_secs_f64()).await;
            status.push(crate::output::evict::rate_status(&progress));
        }
        if !status.is_empty() {
            self.progress.set_pace(status.join("; "));
        }
        self.progress.set(rows, skipped);
    }
}

/// What one batch did.
#[derive(Default)]
struct Outcome {
    deleted: u64,
    skipped_locked: u64,
    skipped_min_age: u64,
    skipped_referenced: u64,
    fell_back: bool,
    /// Expired rows of the range that are not completed.
    passed_over: u64,
    /// The range the batch finished with: [lower, upper) (upper None: open, or ties not done).
    lower: Option<Timestamp>,
    upper: Option<Timestamp>,
    /// The run of ties at this instant has nothing deletable left.
    ties_exhausted: Option<Timestamp>,
    /// How long the deleting statement ran (and held the rows it deleted), as seen from here.
    statement: Duration,
    /// Time the batch spent pausing between tries of a range a live transaction held (on a
    /// Citus reference table): not work, so neither the batch sizing nor the pace counts it.
    paused: Duration,
    /// Index entries the statement walked: the claimed rows of a range with an end, else the rows
    /// it found.
    examined: u64,
}

/// One worker (`index` from 0): claim, delete, pace, until a claim says stop.
pub(super) async fn work(shared: Arc<Shared>, client: Session, index: usize) -> Result<()> {
    let rtt = round_trip(&shared, &client).await?;
    loop {
        if !shared.wait_turn(&client, index).await? {
            return Ok(());
        }
        let (claim, ticket) = shared.claim(&client).await?;
        let t0 = Instant::now();
        let (limit, size, outcome) = match claim {
            Claim::Stop => return Ok(()),
            Claim::Walked {
                outcome,
                limit,
                size,
            } => (limit, size, outcome),
            Claim::Range {
                start,
                end,
                limit,
                size,
            } => {
                let mut outcome = delete_range(&shared, &client, start, end, limit).await?;
                let counted = passed_over(&shared, &client, start, end, limit, &outcome).await;
                outcome.passed_over = shared.after_batch(outcome.deleted, counted).await?;
                outcome.lower = start;
                outcome.upper = end;
                outcome.examined = match end {
                    Some(_) => u64::try_from(limit).unwrap_or(0),
                    None => outcome.deleted + outcome.skipped_locked + outcome.passed_over,
                };
                (limit, size, outcome)
            }
            Claim::Ties { at, limit, size } => {
                let mut outcome = delete_ties(&shared, &client, at, limit).await?;
                outcome.examined = outcome.deleted + outcome.skipped_locked;
                // Done with this instant: what it leaves is counted once, here.
                if outcome.ties_exhausted.is_some() {
                    let (from, after) = (Some(at), Some(at.next_after()));
                    let deleted = outcome.deleted;
                    let counted = range_in_progress(&shared, &client, from, after).await;
                    outcome.passed_over = shared.after_batch(deleted, counted).await?;
                    if shared.plan.min_age_secs.is_some() {
                        let counted = too_young(&shared, &client, from, after).await;
                        outcome.skipped_min_age = shared.after_batch(deleted, counted).await?;
                    }
                    let counted = referenced(&shared, &client, from, after).await;
                    outcome.skipped_referenced = shared.after_batch(deleted, counted).await?;
                    outcome.lower = from;
                    outcome.upper = after;
                }
                (limit, size, outcome)
            }
        };
        // A page of the walk ran under its claim.
        let took = t0
            .elapsed()
            .saturating_sub(outcome.paused)
            .max(outcome.statement);
        if let (Some(l), Some(t)) = (&shared.limiter, ticket) {
            l.settle(&client, t, outcome.deleted).await?;
        }
        shared.record(limit, size, &outcome, took, rtt).await;
        shared.confirm(&client, false).await?;
        let until = shared.plan.max_runtime.map(|m| shared.started + m);
        shared
            .pacer
            .rest(&client, took, outcome.deleted, until, &shared.cancel)
            .await?;
    }
}

/// This session's network round trip: the quickest of a few empty queries. The batch timer
/// subtracts it, so a distant server does not shrink batches that hold their rows briefly.
async fn round_trip(shared: &Shared, client: &Session) -> Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        crate::db::evict::ping(client, shared.plan.deadline)
            .await
            .context(crate::report::failure::Step::MeasureRoundTrip)?;
        best = best.min(t0.elapsed());
    }
    Ok(best)
}

/// The expired rows of a range that are not completed. A range with an end held at most `limit`
/// rows when it was claimed: when the batch handled them all, none was passed over; otherwise
/// (rows not completed, or ties on the range's end, which the range excludes) they are counted.
async fn passed_over(
    shared: &Shared,
    client: &Session,
    start: Option<Timestamp>,
    end: Option<Timestamp>,
    limit: i64,
    o: &Outcome,
) -> Result<u64> {
    let handled = o.deleted + o.skipped_locked + o.skipped_min_age + o.skipped_referenced;
    if end.is_some() && handled >= u64::try_from(limit).unwrap_or(0) {
        return Ok(0);
    }
    range_in_progress(shared, client, start, end).await
}

/// The expired rows of [start, end) that are not completed (bounded: one batch's range).
async fn range_in_progress(
    shared: &Shared,
    client: &Session,
    start: Option<Timestamp>,
    end: Option<Timestamp>,
) -> Result<u64> {
    let (_, passed_over) = shared
        .sql
        .range_left(client, shared.plan.deadline, start, end)
        .await
        .context(crate::report::failure::Step::CountInProgressInRange)?;
    Ok(passed_over)
}

impl Shared {
    /// Where the next claim would start (None = the start of the expiry index).
    pub(super) async fn cursor(&self) -> Option<Timestamp> {
        self.state.lock().await.next
    }
}

impl Shared {
    /// Wait while the pace parks this worker (an extra session runs only while the foreground is
    /// idle); false when the run ended meanwhile.
    async fn wait_turn(&self, client: &Session, index: usize) -> Result<bool> {
        while !self.pacer.may_run(index).await {
            if self.budget_reason(&*self.state.lock().await).is_some() {
                return Ok(false);
            }
            tokio::select! {
                _ = tokio::time::sleep(super::pace::SAMPLE_EVERY) => {},
                _ = self.cancel.wait() => {},
            }
            self.pacer.sample(client, false).await?;
        }
        Ok(true)
    }

    /// What the rate caps did (None without a cap).
    pub(super) async fn rate_report(&self) -> Option<rate::RateReport> {
        match &self.limiter {
            Some(l) => Some(l.report().await),
            None => None,
        }
    }
}

/// Delete the expired completed rows of [start, end) through the batch runner: one statement,
/// or, when a live request holds a row of the range, the range redone with SKIP LOCKED, leaving
/// what is held (and counting it).
async fn delete_range(
    shared: &Shared,
    client: &Session,
    start: Option<Timestamp>,
    end: Option<Timestamp>,
    limit: i64,
) -> Result<Outcome> {
    let min_age = shared.plan.min_age_secs;
    let last = end.map(|e| e.plus_micros(-1));
    let ran = or_shrinking(
        shared,
        client,
        (start, last, limit),
        batch::or_skip_locked(
            || async move {
                let t0 = Instant::now();
                let deleted = shared
                    .sql
                    .delete(client, shared.plan.deadline, start, end, min_age)
                    .await
                    .map_err(batch_failed)?;
                Ok((deleted, t0.elapsed()))
            },
            || async move {
                let t0 = Instant::now();
                let counts = skip_locked(shared, client, start, last, limit)
                    .await
                    .map_err(|e| match lost(&e) {
                        true => batch_failed(e),
                        false => {
                            let why = batch::lock_failure(&e);
                            e.context(why)
                        }
                    })?;
                Ok((counts, t0.elapsed()))
            },
        ),
    )
    .await?;
    let mut outcome = match ran {
        Ran::First((deleted, statement)) => Outcome {
            deleted,
            statement,
            ..Outcome::default()
        },
        Ran::SkippedLocked(((deleted, present, paused), statement)) => Outcome {
            deleted,
            skipped_locked: present.saturating_sub(deleted),
            fell_back: true,
            statement: statement.saturating_sub(paused),
            paused,
            ..Outcome::default()
        },
    };
    // The batch's deletes are committed: a count after it that fails still counts them.
    if min_age.is_some() {
        let counted = too_young(shared, client, start, end).await;
        outcome.skipped_min_age = shared.after_batch(outcome.deleted, counted).await?;
    }
    // A range the batch emptied (every claimed row handled) holds no referenced key to count.
    let handled = outcome.deleted + outcome.skipped_locked + outcome.skipped_min_age;
    if end.is_none() || handled < u64::try_from(limit).unwrap_or(0) {
        let counted = referenced(shared, client, start, end).await;
        outcome.skipped_referenced = shared.after_batch(outcome.deleted, counted).await?;
    }
    Ok(outcome)
}

/// A batch that exceeded statement_timeout (not a signal's cancel) is done again in batches half
/// as large, then half as large again, through the SKIP LOCKED statement over the same range,
/// until its range is done; only a batch of one row that still exceeds it ends the run, in one line
/// naming the setting. Later claims start at the size that worked.
async fn or_shrinking<T>(
    shared: &Shared,
    client: &Session,
    (first, last, limit): (Option<Timestamp>, Option<Timestamp>, i64),
    batch: impl std::future::Future<Output = Result<Ran<T, ((u64, u64, Duration), Duration)>>>,
) -> Result<Ran<T, ((u64, u64, Duration), Duration)>> {
    let e = match batch.await {
        Err(e) if batch::timed_out(&e, shared.cancel.requested()) => e,
        other => return other,
    };
    let t0 = Instant::now();
    let mut size = (limit / 2).max(1);
    let mut last_error = e;
    let mut deleted = 0u64;
    loop {
        match skip_locked(shared, client, first, last, size).await {
            Ok((d, present, paused)) => {
                deleted += d;
                if d < u64::try_from(size).unwrap_or(u64::MAX) {
                    shared.shrink_to(size).await;
                    let skipped = present.saturating_sub(d);
                    return Ok(Ran::SkippedLocked((
                        (deleted, deleted + skipped, paused),
                        t0.elapsed(),
                    )));
                }
            }
            Err(e) if batch::timed_out(&e, shared.cancel.requested()) && size > 1 => {
                size = (size / 2).max(1);
                last_error = e;
            }
            Err(e) if batch::timed_out(&e, shared.cancel.requested()) => {
                return Err(e.context(crate::output::evict::smallest_batch_timed_out(
                    shared.plan.statement_timeout,
                )));
            }
            Err(e) if lost(&e) => return Err(batch_failed(e)),
            Err(e) => return Err(e),
        }
        if shared.cancel.requested() {
            return Err(last_error);
        }
    }
}

/// What a failed batch was: rolled back by the server, or, when its connection was lost, a batch
/// whose end is unknown (the run's line says so).
fn batch_failed(e: anyhow::Error) -> anyhow::Error {
    if lost(&e) {
        e.context(crate::report::failure::Step::BatchLost)
    } else {
        e.context(crate::report::failure::Step::BatchRolledBack)
    }
}

/// Whether `e` is a lost connection (the statement's end is unknown).
fn lost(e: &anyhow::Error) -> bool {
    e.downcast_ref::<crate::db::session::Lost>().is_some()
}

/// One SKIP LOCKED batch of the rows expiring at exactly `at`, through the batch runner.
async fn delete_ties(
    shared: &Shared,
    client: &Session,
    at: Timestamp,
    limit: i64,
) -> Result<Outcome> {
    let t0 = Instant::now();
    let (deleted, present, paused) =
        batch::retrying(|| skip_locked(shared, client, Some(at), Some(at), limit))
            .await
            .map_err(batch_failed)?;
    let statement = t0.elapsed().saturating_sub(paused);
    let exhausted = deleted < u64::try_from(limit).unwrap_or(u64::MAX);
    Ok(Outcome {
        deleted,
        skipped_locked: if exhausted {
            present.saturating_sub(deleted)
        } else {
            0
        },
        fell_back: true,
        ties_exhausted: exhausted.then_some(at),
        statement,
        paused,
        ..Outcome::default()
    })
}

/// The SKIP LOCKED statement over [first, last] (inclusive; None = open): (deleted, present,
/// time paused between tries).
async fn skip_locked(
    shared: &Shared,
    client: &Session,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
    limit: i64,
) -> Result<(u64, u64, Duration)> {
    let min_age = shared.plan.min_age_secs;
    shared
        .sql
        .skip_locked(client, shared.plan.deadline, first, last, limit, min_age)
        .await
}

/// Expired completed rows of [start, end) left because a NO ACTION / RESTRICT foreign key still
/// references them (no statement runs when no such key references the table).
async fn referenced(
    shared: &Shared,
    client: &Session,
    start: Option<Timestamp>,
    end: Option<Timestamp>,
) -> Result<u64> {
    if !shared.sql.counts_referenced() {
        return Ok(0);
    }
    shared
        .sql
        .referenced(client, shared.plan.deadline, start, end)
        .await
        .context(crate::report::failure::Step::CountReferenced)
}

/// Expired completed rows of [start, end) kept back by --min-age.
async fn too_young(
    shared: &Shared,
    client: &Session,
    start: Option<Timestamp>,
    end: Option<Timestamp>,
) -> Result<u64> {
    shared
        .sql
        .too_young(
            client,
            shared.plan.deadline,
            start,
            end,
            shared.plan.min_age_secs,
        )
        .await
        .context(crate::report::failure::Step::CountTooYoung)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_behind_the_cursor_merge_where_they_overlap() {
        let t = |s: i64| {
            Some(Timestamp::At(
                time::OffsetDateTime::from_unix_timestamp(s).unwrap(),
            ))
        };
        let r = |lower, upper| Left { lower, upper };
        let left = [
            r(t(10), t(20)),
            r(t(10), t(11)), // ties at 10, done while [10, 20) ran
            r(None, t(5)),
            r(t(20), t(30)), // adjacent: kept apart
            r(t(30), None),  // the open last range: counted from the cursor
            r(t(40), t(50)), // ahead of the cursor
        ];
        assert_eq!(
            merged_behind(&left, t(40)),
            vec![r(None, t(5)), r(t(10), t(20)), r(t(20), t(30))]
        );
        assert!(merged_behind(&left, None).is_empty());
    }
}

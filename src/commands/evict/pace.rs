//! evict's pace: how long a worker rests after each batch. Without --duty-cycle, --catch-up or
//! --pause the pace adapts to what the rest of the server (the foreground: the API's sessions) is
//! doing, measured on the database while evict runs; with any of them it is fixed.
//!
//! Method. Between batches, at most every [`SAMPLE_EVERY`], one worker samples `pg_stat_activity`
//! (sql/pace_foreground.sql, one pass over one row per connection) and the [`Controller`] decides:
//! * no other session ran anything in the last [`QUIET_SAMPLES`] samples: the foreground is idle, so
//!   evict runs unpaced, with its extra session and catch-up-sized batches ("full"); the first
//!   sample, taken before the first batch, looks back over that whole window, so a run that starts
//!   on an idle database is unpaced from its first batch;
//! * otherwise evict is paced at a duty cycle between [`MIN_DUTY`] and [`MAX_DUTY`] percent (the
//!   latter is the fixed default's), raised by [`STEP`] points per sample while nothing says the
//!   foreground suffers, and halved on the first sample that says it does:
//!   - other sessions' running statements wait on lightweight locks, I/O or locks (WAL insertion and
//!     flushes, buffers, rows) more than their floor by [`WAIT_MARGIN`] sessions,
//!   - other sessions' running statements have been running [`AGE_RATIO`] times their floor,
//!   - evict's own batches take [`BATCH_RATIO`] times their floor per row (CPU or I/O taken by
//!     the foreground slows them as much as they slow it).
//!
//! Each figure is smoothed over about a second; its floor follows it down within a few seconds and
//! up slowly (a time constant of about ten seconds), so a lasting change of the foreground becomes
//! the new normal while the effect of evict's own work shows as a rise above it, and the noise of
//! counting sessions at one instant does not. A back-off holds for a
//! second before the duty cycle climbs again.
//!
//! Floor. While the foreground is present, the rests never let evict remove keys slower than
//! [`INSERT_MULTIPLE`] times the rate at which the table gains them (its inserted-row counter in
//! the statistics, read with each sample and measured over [`INSERT_WINDOW`]): a pace below the
//! insert rate would let the backlog grow without end, however well it protects the foreground.
//! The floor shortens rests, to no less than a [`FLOOR_MAX_DUTY`] duty cycle; it never lengthens
//! a batch or adds sessions.
//!
//! Ceiling. While the foreground is present the rests also hold removal to at most
//! [`PRESENT_MULTIPLE`] times the insert rate (never resting a worker below a
//! [`PRESENT_MIN_DUTY`] duty cycle): the signals above see contention only once it shows in the
//! sessions' waits and ages, while a workload with headroom pays for each batch in its tail
//! latency before either rises. Removal between 10 and 20 times the insert rate still shrinks
//! the backlog; an idle foreground lifts the ceiling with the rest of the pacing. A role that cannot see other roles' sessions (no
//! pg_read_all_stats, which pg_monitor grants) keeps the fixed 20 % duty cycle, and says so once.

use std::time::{Duration, Instant};

use anyhow::Result;
use time::OffsetDateTime;
use tokio::sync::Mutex;

use crate::db::Session;
use crate::db::activity::{self, Foreground};
use crate::domain::Cancel;
use crate::metrics::Series;
use crate::output::prometheus::Metrics;
use crate::report::evict::PaceSignal;
pub(crate) use crate::report::evict::{
    Decision, INSERT_MULTIPLE, PRESENT_MULTIPLE, PaceReport, PaceStatus, Reason, State,
};

/// How often the foreground is sampled, at most.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// Samples in a row in which no other session ran anything before evict runs unpaced.
pub(crate) const QUIET_SAMPLES: u32 = 2;
/// The duty cycle's range while the foreground is present, in percent.
pub(crate) const MIN_DUTY: f64 = 5.0;
pub(crate) const MAX_DUTY: f64 = 20.0;
/// The duty cycle evict starts at, and returns to when the foreground comes back.
pub(crate) const START_DUTY: f64 = 10.0;
/// Points added per calm sample.
pub(crate) const STEP: f64 = 1.0;
/// Back-off thresholds (see the module comment).
pub(crate) const WAIT_MARGIN: f64 = 0.5;
pub(crate) const AGE_RATIO: f64 = 1.5;
/// The smallest rise of the running statements' age that counts, in ms (below it is noise).
pub(crate) const AGE_MARGIN_MS: f64 = 1.0;
pub(crate) const BATCH_RATIO: f64 = 1.5;
/// Samples a back-off holds before the duty cycle climbs again.
const HOLD_SAMPLES: u32 = 5;
/// Smoothing of each figure per sample (about a second), and how fast its floor follows it up
/// (about ten seconds) and down (about four): the figures are counts of sessions caught in one
/// instant, noisy by nature, so a floor that dropped to every low reading would call the noise
/// a rise and keep evict at its minimum (measured in bench/run's pace phase: a saturating
/// workload waiting on its own commit flushes kept the earlier floor at 2 % the whole run).
const SMOOTHING: f64 = 0.2;
/// The floor never makes a worker spend more than this share of wall time in batches, in percent
/// (a burst of inserts must not turn evict into a full-speed deleter beside it).
pub(crate) const FLOOR_MAX_DUTY: f64 = 50.0;
/// The ceiling never rests a worker below this duty cycle, in percent: a table that gains few
/// keys on a server busy with other work still drains.
pub(crate) const PRESENT_MIN_DUTY: f64 = 2.0;
/// The window the insert rate is measured over: backends publish their counters about once a
/// second, so a shorter window would see bursts.
pub(crate) const INSERT_WINDOW: Duration = Duration::from_secs(5);
const FLOOR_RISE: f64 = 0.02;
const FLOOR_FALL: f64 = 0.05;

/// One sample's figures, as the controller sees them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Signals {
    /// Other sessions that ran anything since the last sample.
    pub recent: u32,
    /// How many sampling periods the sample looked back over (the first one looks back
    /// [`QUIET_SAMPLES`]; 0 counts as 1).
    pub windows: u32,
    /// Other sessions running a statement.
    pub active: u32,
    /// Of those, sessions waiting on WAL, I/O or locks.
    pub waiting: u32,
    /// Mean age of their running statements, ms.
    pub age_ms: f64,
    /// evict's own time per row in the batches since the last sample (ms), when there were any.
    pub batch_ms_per_row: Option<f64>,
}

/// A smoothed figure and its floor.
#[derive(Debug, Clone, Copy, Default)]
struct Tracker {
    value: Option<f64>,
    floor: Option<f64>,
}

impl Tracker {
    /// Add a reading; returns (smoothed, floor).
    fn add(&mut self, x: f64) -> (f64, f64) {
        let v = self.value.map_or(x, |v| v + SMOOTHING * (x - v));
        let f = match self.floor {
            Some(f) if v >= f => f + FLOOR_RISE * (v - f),
            Some(f) => f + FLOOR_FALL * (v - f),
            None => v,
        };
        self.value = Some(v);
        self.floor = Some(f);
        (v, f)
    }
}

/// The adaptive pace's decisions, from one sample to the next (no I/O: unit-tested on made-up
/// sequences).
#[derive(Debug, Clone)]
pub(crate) struct Controller {
    decision: Decision,
    quiet: u32,
    hold: u32,
    waiting: Tracker,
    age: Tracker,
    batches: Tracker,
}

impl Default for Controller {
    fn default() -> Self {
        Controller {
            decision: Decision {
                state: State::Paced,
                duty: START_DUTY,
            },
            quiet: 0,
            hold: 0,
            waiting: Tracker::default(),
            age: Tracker::default(),
            batches: Tracker::default(),
        }
    }
}

impl Controller {
    pub(crate) fn decision(&self) -> Decision {
        self.decision
    }

    /// Take one sample and decide.
    pub(crate) fn observe(&mut self, s: &Signals) -> Decision {
        self.quiet = if s.recent == 0 {
            self.quiet + s.windows.max(1)
        } else {
            0
        };
        if self.quiet >= QUIET_SAMPLES {
            // Full-speed batches are larger, so their time per row says nothing about the next
            // paced ones; the foreground's figures start afresh when it returns.
            *self = Controller {
                quiet: self.quiet,
                decision: Decision {
                    state: State::Full,
                    duty: 100.0,
                },
                ..Controller::default()
            };
            return self.decision;
        }
        if self.decision.full() {
            self.decision = Controller::default().decision;
        }
        match self.pressure(s) {
            Some(reason) => {
                self.decision = Decision {
                    state: State::BackingOff(reason),
                    duty: (self.decision.duty / 2.0).max(MIN_DUTY),
                };
                self.hold = HOLD_SAMPLES;
            }
            None if self.hold > 0 => self.hold -= 1,
            None => {
                let duty = (self.decision.duty + STEP).min(MAX_DUTY);
                let state = match self.decision.state {
                    State::BackingOff(r) if duty < MAX_DUTY => State::BackingOff(r),
                    _ => State::Paced,
                };
                self.decision = Decision { state, duty };
            }
        }
        self.decision
    }

    /// The first signal that says the foreground suffers, if any (every tracker is fed).
    fn pressure(&mut self, s: &Signals) -> Option<Reason> {
        let (waiting, waiting_floor) = self.waiting.add(f64::from(s.waiting));
        let mut reason =
            (waiting - waiting_floor >= WAIT_MARGIN).then_some(Reason::ForegroundWaiting);
        if s.active > 0 {
            let (age, floor) = self.age.add(s.age_ms);
            if age >= floor * AGE_RATIO && age - floor >= AGE_MARGIN_MS {
                reason = reason.or(Some(Reason::ForegroundSlower));
            }
        }
        if let Some(per_row) = s.batch_ms_per_row {
            let (v, floor) = self.batches.add(per_row);
            if floor > 0.0 && v >= floor * BATCH_RATIO {
                reason = reason.or(Some(Reason::BatchesSlower));
            }
        }
        reason
    }
}

/// How a run is paced.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    /// A fixed duty cycle and pause (explicit flags, or the fallback with the reason).
    Fixed {
        duty: u8,
        pause: Duration,
        fallback: Option<String>,
    },
    /// Adaptive; `base_workers` run whatever the foreground does, the others only while it is
    /// idle; `full_batch_time` is the batch time while it is idle (None: keep the sizing's).
    Adaptive {
        base_workers: u8,
        full_batch_time: Option<Duration>,
        /// The relations (oids) whose insert rate floors the pace: the key table, or the shards
        /// of a distributed one on the worker this pace samples (None: no floor).
        floor_tables: Option<Vec<i64>>,
        /// Citus global pids whose connections on the sampled worker are not the foreground
        /// (empty on a single server).
        left_out: Vec<i64>,
    },
}

impl Mode {
    /// The same mode, with the removal rate floored by the insert rate of `tables` when adaptive.
    pub(crate) fn with_insert_floor(self, tables: Vec<i64>) -> Mode {
        match self {
            Mode::Adaptive {
                base_workers,
                full_batch_time,
                left_out,
                ..
            } => Mode::Adaptive {
                base_workers,
                full_batch_time,
                floor_tables: Some(tables),
                left_out,
            },
            fixed => fixed,
        }
    }

    /// The same mode, leaving out the Citus connections of the global pids `gpids` when adaptive.
    pub(crate) fn leaving_out(self, gpids: Vec<i64>) -> Mode {
        match self {
            Mode::Adaptive {
                base_workers,
                full_batch_time,
                floor_tables,
                ..
            } => Mode::Adaptive {
                base_workers,
                full_batch_time,
                floor_tables,
                left_out: gpids,
            },
            fixed => fixed,
        }
    }
}

impl PaceReport {
    /// Several nodes' paces as one: times and counts added up over the nodes (node-seconds), the
    /// lowest duty cycle any went down to, and the table's insert rate as the sum of the rates
    /// each node measured on its placements.
    pub(crate) fn merged(paces: &[PaceReport]) -> PaceReport {
        let Some((first, rest)) = paces.split_first() else {
            return PaceReport::default();
        };
        let mut m = first.clone();
        for p in rest {
            m.samples += p.samples;
            m.full_seconds += p.full_seconds;
            m.paced_seconds += p.paced_seconds;
            m.backoff_seconds += p.backoff_seconds;
            m.floor_cut_seconds += p.floor_cut_seconds;
            m.ceiling_added_seconds += p.ceiling_added_seconds;
            m.insert_rate = match (m.insert_rate, p.insert_rate) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
            for (r, s) in &p.backoff_seconds_by_reason {
                *m.backoff_seconds_by_reason.entry(*r).or_default() += s;
            }
            for (r, c) in &p.backoffs_by_reason {
                *m.backoffs_by_reason.entry(*r).or_default() += c;
            }
            m.min_duty_cycle = match (m.min_duty_cycle, p.min_duty_cycle) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if m.fallback.is_none() {
                m.fallback.clone_from(&p.fallback);
            }
        }
        m
    }
}

/// The signals the adaptive pace uses, for the report.
const SIGNALS: [PaceSignal; 3] = [
    PaceSignal::Activity,
    PaceSignal::OwnBatchTime,
    PaceSignal::Interval,
];
/// The floor's signal, for the report.
const FLOOR_SIGNAL: PaceSignal = PaceSignal::InsertedRows;

/// The table's insert rate from its counter's readings over [`INSERT_WINDOW`].
#[derive(Debug, Default)]
struct InsertRate {
    readings: std::collections::VecDeque<(Instant, i64)>,
}

impl InsertRate {
    /// Add a reading taken at `at`; returns the rate in rows/s once the readings span a second.
    fn add(&mut self, at: Instant, inserted: i64) -> Option<f64> {
        if self.readings.back().is_some_and(|&(_, n)| inserted < n) {
            // The statistics were reset: start again.
            self.readings.clear();
        }
        self.readings.push_back((at, inserted));
        while self.readings.len() > 2
            && self
                .readings
                .get(1)
                .is_some_and(|&(t, _)| at.duration_since(t) >= INSERT_WINDOW)
        {
            self.readings.pop_front();
        }
        let (t0, n0) = *self.readings.front()?;
        let span = at.duration_since(t0).as_secs_f64();
        (span >= 1.0).then(|| (inserted - n0) as f64 / span)
    }
}

/// The longest rest after a batch that removed `removed` rows in `took` that keeps one of
/// `workers` sessions at its share of `floor` rows/s, but no shorter than [`FLOOR_MAX_DUTY`]
/// allows (None: no floor applies).
fn floor_rest(took: Duration, removed: u64, floor: f64, workers: u8) -> Option<Duration> {
    if floor <= 0.0 || removed == 0 {
        return None;
    }
    let per_worker = floor / f64::from(workers.max(1));
    let cycle = Duration::from_secs_f64((removed as f64 / per_worker).min(3600.0));
    Some(
        cycle
            .saturating_sub(took)
            .max(rest_for(took, FLOOR_MAX_DUTY)),
    )
}

/// The rest after a batch that took `took` and removed `removed` rows, with the table gaining
/// `insert_rate` rows/s (None: not measured yet) and `workers` sessions sharing the work: `rest`
/// (the duty cycle's) lengthened to hold the removal rate at [`PRESENT_MULTIPLE`] times the
/// insert rate, but never past a [`PRESENT_MIN_DUTY`] duty cycle, then shortened to keep it at
/// [`INSERT_MULTIPLE`] times, never past [`FLOOR_MAX_DUTY`]. The ceiling holds only while the
/// foreground is `present`.
fn bounded_rest(
    rest: Duration,
    took: Duration,
    removed: u64,
    insert_rate: Option<f64>,
    workers: u8,
    present: bool,
) -> Duration {
    let Some(rate) = insert_rate else {
        return rest;
    };
    let mut rest = rest;
    if present && removed > 0 {
        let longest = rest_for(took, PRESENT_MIN_DUTY);
        let held = floor_rest(took, removed, rate * PRESENT_MULTIPLE, workers).unwrap_or(longest);
        rest = rest.max(held.min(longest));
    }
    if let Some(shortest) = floor_rest(took, removed, rate * INSERT_MULTIPLE, workers) {
        rest = rest.min(shortest);
    }
    rest
}

struct Inner {
    controller: Controller,
    last_sample: Option<Instant>,
    since: Option<OffsetDateTime>,
    /// Time per row of the batches since the last sample (ms).
    batch_ms_per_row: Vec<f64>,
    /// When the current decision took effect.
    since_decision: Instant,
    inserts: InsertRate,
    report: PaceReport,
}

/// The pace shared by every worker of a run.
pub(crate) struct Pacer {
    mode: Mode,
    inner: Mutex<Inner>,
}

impl Pacer {
    /// Decide the mode: fixed when a flag fixes it, or when this role cannot see other sessions
    /// (the fallback's warning handed to `warn`: a run over several nodes says it once), else
    /// adaptive (the first sample is taken here).
    pub(crate) async fn start_warning(
        client: &Session,
        mode: Mode,
        warn: &(dyn Fn(&str) + Sync),
    ) -> Result<Pacer> {
        let mode = match mode {
            Mode::Adaptive { .. } => {
                let (role, can_see) = activity::visibility(client).await?;
                if can_see {
                    mode
                } else {
                    let why = crate::output::reasons::activity_hidden_from(&role);
                    warn(&crate::output::evict::pace_fallback(&why));
                    Mode::Fixed {
                        duty: 20,
                        pause: Duration::ZERO,
                        fallback: Some(why),
                    }
                }
            }
            fixed => fixed,
        };
        let report = match &mode {
            Mode::Fixed {
                duty,
                pause,
                fallback,
            } => PaceReport {
                mode: "fixed",
                duty_cycle: Some(*duty),
                pause_seconds: (!pause.is_zero()).then_some(pause.as_secs_f64()),
                fallback: fallback.clone(),
                ..PaceReport::default()
            },
            Mode::Adaptive { floor_tables, .. } => {
                let mut signals = SIGNALS.to_vec();
                if floor_tables.is_some() {
                    signals.push(FLOOR_SIGNAL);
                }
                PaceReport {
                    mode: "adaptive",
                    signals,
                    ..PaceReport::default()
                }
            }
        };
        let pacer = Pacer {
            mode,
            inner: Mutex::new(Inner {
                controller: Controller::default(),
                last_sample: None,
                since: None,
                batch_ms_per_row: Vec::new(),
                since_decision: Instant::now(),
                inserts: InsertRate::default(),
                report,
            }),
        };
        if matches!(pacer.mode, Mode::Adaptive { .. }) {
            pacer.sample(client, true).await?;
        }
        Ok(pacer)
    }

    pub(crate) fn adaptive(&self) -> bool {
        matches!(self.mode, Mode::Adaptive { .. })
    }

    /// The batch time in effect now, when the pace overrides the sizing's.
    pub(crate) async fn batch_time(&self) -> Option<Duration> {
        match self.mode {
            Mode::Adaptive {
                full_batch_time: Some(t),
                ..
            } if self.inner.lock().await.controller.decision().full() => Some(t),
            _ => None,
        }
    }

    /// Record a batch's statement time and the index entries it walked.
    pub(crate) async fn batch(&self, statement: Duration, rows: u64) {
        if self.adaptive() && rows >= 50 {
            let per_row = statement.as_secs_f64() * 1000.0 / rows as f64;
            self.inner.lock().await.batch_ms_per_row.push(per_row);
        }
    }

    /// Whether worker `index` (0-based) may claim a batch now.
    pub(crate) async fn may_run(&self, index: usize) -> bool {
        match self.mode {
            Mode::Adaptive { base_workers, .. } if index >= usize::from(base_workers) => {
                self.inner.lock().await.controller.decision().full()
            }
            _ => true,
        }
    }

    /// Sample the foreground on this session if a sample is due, and decide.
    pub(crate) async fn sample(&self, client: &Session, force: bool) -> Result<Decision> {
        let mut inner = self.inner.lock().await;
        let due = inner
            .last_sample
            .is_none_or(|t| t.elapsed() >= SAMPLE_EVERY);
        if !self.adaptive() || !(due || force) {
            return Ok(inner.controller.decision());
        }
        let first = inner.since.is_none();
        let (floor_tables, left_out) = match &self.mode {
            Mode::Adaptive {
                floor_tables,
                left_out,
                ..
            } => (floor_tables.as_deref(), left_out.as_slice()),
            Mode::Fixed { .. } => (None, &[][..]),
        };
        let fg: Foreground = activity::foreground(
            client,
            inner.since,
            SAMPLE_EVERY * QUIET_SAMPLES,
            floor_tables,
            left_out,
        )
        .await?;
        let now = Instant::now();
        inner.last_sample = Some(now);
        inner.since = Some(fg.sampled_at);
        if let Some(n) = fg.inserted
            && let Some(rate) = inner.inserts.add(now, n)
        {
            inner.report.insert_rate = Some(rate);
        }
        let mut rows = std::mem::take(&mut inner.batch_ms_per_row);
        rows.sort_by(f64::total_cmp);
        let signals = Signals {
            recent: fg.recent,
            windows: if first { QUIET_SAMPLES } else { 1 },
            active: fg.active,
            waiting: fg.waiting,
            age_ms: fg.age_ms,
            batch_ms_per_row: rows.get(rows.len() / 2).copied(),
        };
        inner.report.samples += 1;
        let before = inner.controller.decision();
        let after = inner.controller.observe(&signals);
        inner.account(before, after);
        Ok(after)
    }

    /// The rest after a batch that took `took` and removed `removed` rows: the fixed pause and
    /// duty cycle, or the adaptive one, re-decided every sample while resting (a foreground that
    /// turns idle ends the rest) and held between the insert-rate floor and ceiling. A rest ends
    /// at `until` (the run's --max-runtime) whatever it planned.
    pub(crate) async fn rest(
        &self,
        client: &Session,
        took: Duration,
        removed: u64,
        until: Option<Instant>,
        cancel: &Cancel,
    ) -> Result<()> {
        let (duty, pause, present) = match &self.mode {
            Mode::Fixed { duty, pause, .. } => (f64::from(*duty), *pause, true),
            Mode::Adaptive { .. } => {
                let now = self.sample(client, false).await?;
                (now.duty, Duration::ZERO, !now.full())
            }
        };
        let mut wanted = rest_for(took, duty);
        let mut planned = self.bounded(wanted, took, removed, present).await;
        let started = Instant::now();
        loop {
            let mut left = (planned + pause).saturating_sub(started.elapsed());
            if let Some(until) = until {
                left = left.min(until.saturating_duration_since(Instant::now()));
            }
            if left.is_zero() || cancel.requested() {
                break;
            }
            let chunk = if self.adaptive() {
                left.min(SAMPLE_EVERY)
            } else {
                left
            };
            tokio::select! {
                _ = tokio::time::sleep(chunk) => {},
                _ = cancel.wait() => {},
            }
            if self.adaptive() {
                // Re-decided while resting: a back-off lengthens the rest, an idle foreground
                // ends it.
                let now = self.sample(client, false).await?;
                if now.full() {
                    break;
                }
                wanted = rest_for(took, now.duty);
                planned = self.bounded(wanted, took, removed, true).await;
            }
        }
        if self.adaptive() {
            let mut inner = self.inner.lock().await;
            let r = &mut inner.report;
            r.floor_cut_seconds += wanted.saturating_sub(planned).as_secs_f64();
            r.ceiling_added_seconds += planned.saturating_sub(wanted).as_secs_f64();
        }
        Ok(())
    }

    /// `rest` held between the insert-rate floor and ceiling ([`bounded_rest`]); the ceiling only
    /// while the foreground is `present` (an idle foreground lifts it).
    async fn bounded(
        &self,
        rest: Duration,
        took: Duration,
        removed: u64,
        present: bool,
    ) -> Duration {
        let Mode::Adaptive {
            base_workers,
            floor_tables: Some(_),
            ..
        } = self.mode
        else {
            return rest;
        };
        let inner = self.inner.lock().await;
        bounded_rest(
            rest,
            took,
            removed,
            inner.report.insert_rate,
            base_workers,
            present,
        )
    }

    /// The adaptive pace in effect, for the progress bar.
    pub(crate) async fn in_effect(&self) -> Option<PaceStatus> {
        if !self.adaptive() {
            return None;
        }
        let inner = self.inner.lock().await;
        let decision = inner.controller.decision();
        Some(PaceStatus {
            decision,
            floor_rows_per_second: inner
                .report
                .insert_rate
                .filter(|r| *r > 0.0 && !decision.full())
                .map(|r| r * INSERT_MULTIPLE),
        })
    }

    /// The report, with the current decision's time added.
    pub(crate) async fn report(&self) -> PaceReport {
        let mut inner = self.inner.lock().await;
        let d = inner.controller.decision();
        inner.account(d, d);
        inner.report.clone()
    }
}

impl Inner {
    /// Add the time since the last decision to the state it was spent in; count a back-off.
    fn account(&mut self, before: Decision, after: Decision) {
        let now = Instant::now();
        let spent = now.duration_since(self.since_decision).as_secs_f64();
        self.since_decision = now;
        let r = &mut self.report;
        if !matches!(r.mode, "adaptive") {
            return;
        }
        match before.state {
            State::Full => r.full_seconds += spent,
            State::Paced => r.paced_seconds += spent,
            State::BackingOff(reason) => {
                r.backoff_seconds += spent;
                *r.backoff_seconds_by_reason.entry(reason).or_default() += spent;
            }
        }
        if let State::BackingOff(reason) = after.state
            && after.duty < before.duty
        {
            *r.backoffs_by_reason.entry(reason).or_default() += 1;
        }
        r.min_duty_cycle = Some(
            r.min_duty_cycle
                .map_or(after.duty, |m: f64| m.min(after.duty)),
        );
    }
}

/// The rest that keeps a worker's share of wall time in statements at `duty` percent.
fn rest_for(took: Duration, duty: f64) -> Duration {
    let duty = duty.clamp(1.0, 100.0) / 100.0;
    took.mul_f64((1.0 - duty) / duty)
}

impl PaceReport {
    /// Add the pace's figures to `m`.
    pub(crate) fn metrics(&self, m: &mut Metrics) {
        m.set(Series::EvictPaceAdaptive, self.mode == "adaptive");
        if self.mode != "adaptive" {
            return;
        }
        m.set(Series::EvictPaceFull, self.full_seconds);
        for r in Reason::ALL {
            let spent = self.backoff_seconds_by_reason.get(&r).copied();
            m.set_labelled(
                Series::EvictPaceBackoff,
                &[r.as_str()],
                spent.unwrap_or(0.0),
            );
        }
        m.set(Series::EvictPaceFloorCut, self.floor_cut_seconds);
        m.set(Series::EvictPaceCeilingAdded, self.ceiling_added_seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(waiting: u32, age_ms: f64, batch: Option<f64>) -> Signals {
        Signals {
            recent: 2,
            windows: 1,
            active: 2,
            waiting,
            age_ms,
            batch_ms_per_row: batch,
        }
    }

    fn run(c: &mut Controller, s: Signals, n: usize) -> Decision {
        let mut d = c.decision();
        for _ in 0..n {
            d = c.observe(&s);
        }
        d
    }

    #[test]
    fn an_idle_foreground_lifts_pacing_after_two_quiet_samples() {
        let mut c = Controller::default();
        let quiet = Signals::default();
        assert_eq!(c.observe(&quiet).state, State::Paced);
        let d = c.observe(&quiet);
        assert_eq!(d.state, State::Full);
        assert_eq!(d.duty, 100.0);
    }

    #[test]
    fn a_first_sample_looking_back_over_the_quiet_window_lifts_pacing_at_once() {
        let mut c = Controller::default();
        let first = Signals {
            windows: QUIET_SAMPLES,
            ..Signals::default()
        };
        assert_eq!(c.observe(&first).state, State::Full);
        let mut c = Controller::default();
        let busy_first = Signals {
            windows: QUIET_SAMPLES,
            recent: 1,
            ..Signals::default()
        };
        assert_eq!(c.observe(&busy_first).state, State::Paced);
    }

    #[test]
    fn the_foreground_returning_ends_full_speed_at_the_next_sample() {
        let mut c = Controller::default();
        run(&mut c, Signals::default(), 3);
        let d = c.observe(&busy(0, 1.0, None));
        assert_ne!(d.state, State::Full);
        assert!(d.duty <= START_DUTY + STEP, "{d:?}");
    }

    #[test]
    fn a_calm_foreground_lets_the_duty_cycle_climb_to_the_default_and_no_further() {
        let mut c = Controller::default();
        let d = c.observe(&busy(0, 1.0, Some(0.01)));
        assert_eq!(d.duty, START_DUTY + STEP);
        let d = run(&mut c, busy(0, 1.0, Some(0.01)), 100);
        assert_eq!(
            d,
            Decision {
                state: State::Paced,
                duty: MAX_DUTY
            }
        );
    }

    #[test]
    fn sessions_waiting_on_wal_halve_the_duty_cycle_and_say_why() {
        let mut c = Controller::default();
        run(&mut c, busy(0, 1.0, Some(0.01)), 20);
        let d = run(&mut c, busy(2, 1.0, Some(0.01)), 2);
        assert_eq!(d.state, State::BackingOff(Reason::ForegroundWaiting));
        assert_eq!(d.duty, MAX_DUTY / 2.0);
        // The back-off holds while the trackers settle, then the duty cycle climbs back.
        let d = run(&mut c, busy(0, 1.0, Some(0.01)), HOLD_SAMPLES as usize + 40);
        assert_eq!(
            d,
            Decision {
                state: State::Paced,
                duty: MAX_DUTY
            }
        );
    }

    #[test]
    fn slower_foreground_statements_back_off() {
        let mut c = Controller::default();
        run(&mut c, busy(0, 2.0, None), 20);
        let d = run(&mut c, busy(0, 6.0, None), 2);
        assert_eq!(d.state, State::BackingOff(Reason::ForegroundSlower));
    }

    #[test]
    fn slower_batches_back_off() {
        let mut c = Controller::default();
        run(&mut c, busy(0, 1.0, Some(0.010)), 20);
        let d = c.observe(&busy(0, 1.0, Some(0.040)));
        assert_eq!(d.state, State::BackingOff(Reason::BatchesSlower));
    }

    #[test]
    fn a_foreground_that_is_noisy_on_its_own_does_not_pin_the_duty_cycle_low() {
        // Two sessions committing with synchronous_commit on: 0, 1 or 2 of them caught waiting
        // on their own WAL flush at each sample, whatever evict does.
        let mut c = Controller::default();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut duty = 0.0;
        let samples = 1500;
        for _ in 0..samples {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let waiting = (x % 3) as u32;
            duty += c.observe(&busy(waiting, 1.0, Some(0.01))).duty;
        }
        let mean = duty / f64::from(samples);
        assert!(mean >= START_DUTY, "mean duty cycle {mean:.1}%");
    }

    #[test]
    fn a_rise_of_waiting_sessions_backs_off_within_a_second() {
        let mut c = Controller::default();
        run(&mut c, busy(0, 1.0, Some(0.01)), 100);
        let within = (Duration::from_secs(1).as_millis() / SAMPLE_EVERY.as_millis()) as usize;
        let backed = (0..within).any(|_| {
            matches!(
                c.observe(&busy(2, 1.0, Some(0.01))).state,
                State::BackingOff(Reason::ForegroundWaiting)
            )
        });
        assert!(backed);
    }

    #[test]
    fn lasting_pressure_bottoms_out_at_the_minimum() {
        let mut c = Controller::default();
        run(&mut c, busy(0, 1.0, None), 10);
        let mut d = c.decision();
        // Waits keep rising: each new level is pressure again.
        for w in 1..40 {
            d = c.observe(&busy(w, 1.0, None));
        }
        assert_eq!(d.duty, MIN_DUTY);
        assert!(matches!(d.state, State::BackingOff(_)));
    }

    #[test]
    fn sub_millisecond_jitter_in_statement_age_is_not_pressure() {
        let mut c = Controller::default();
        let mut d = c.decision();
        for i in 0..60 {
            let age = if i % 2 == 0 { 0.2 } else { 0.9 };
            d = c.observe(&busy(0, age, None));
            assert_ne!(
                d.state,
                State::BackingOff(Reason::ForegroundSlower),
                "sample {i}"
            );
        }
        assert_eq!(d.duty, MAX_DUTY);
    }

    #[test]
    fn a_lasting_rise_of_the_foreground_becomes_its_new_normal() {
        let mut c = Controller::default();
        run(&mut c, busy(0, 2.0, None), 20);
        assert!(matches!(
            c.observe(&busy(0, 8.0, None)).state,
            State::BackingOff(Reason::ForegroundSlower)
        ));
        // Ten seconds later at the new level the floor has caught up: no more back-offs.
        let d = run(&mut c, busy(0, 8.0, None), 150);
        assert_eq!(
            d,
            Decision {
                state: State::Paced,
                duty: MAX_DUTY
            }
        );
    }

    #[test]
    fn the_rest_keeps_the_duty_cycle() {
        assert_eq!(
            rest_for(Duration::from_millis(2), 20.0),
            Duration::from_millis(8)
        );
        assert_eq!(rest_for(Duration::from_millis(2), 100.0), Duration::ZERO);
        assert_eq!(
            rest_for(Duration::from_millis(2), 2.0),
            Duration::from_millis(98)
        );
    }

    #[test]
    fn the_ceiling_lengthens_rests_to_hold_removal_at_twenty_times_the_inserts() {
        let ms = Duration::from_millis;
        // 2 ms batches of 100 rows at a 20 % duty cycle: 8 ms rests, 10,000 rows/s.
        let rest = rest_for(ms(2), 20.0);
        assert_eq!(rest, ms(8));
        // The table gains 100 rows/s: 20x is 2,000 rows/s, one batch every 50 ms, so 48 ms rests.
        assert_eq!(bounded_rest(rest, ms(2), 100, Some(100.0), 1, true), ms(48));
        // Shared by two sessions: each holds 1,000 rows/s, one batch every 100 ms.
        assert_eq!(bounded_rest(rest, ms(2), 100, Some(100.0), 2, true), ms(98));
        // No inserts: the ceiling rests down to its 2 % duty cycle, no further.
        assert_eq!(bounded_rest(rest, ms(2), 100, Some(0.0), 1, true), ms(98));
        assert_eq!(bounded_rest(rest, ms(2), 100, Some(1.0), 1, true), ms(98));
        // Inserts fast enough that 20x is above what the duty cycle removes: the rest stands.
        assert_eq!(
            bounded_rest(rest, ms(2), 100, Some(1_000.0), 1, true),
            ms(8)
        );
        // Not measured yet, or a batch that removed nothing: no bound.
        assert_eq!(bounded_rest(rest, ms(2), 100, None, 1, true), ms(8));
        assert_eq!(bounded_rest(rest, ms(2), 0, Some(100.0), 1, true), ms(8));
        // An idle foreground lifts the ceiling: no inserts, nobody else, no rest.
        assert_eq!(
            bounded_rest(Duration::ZERO, ms(2), 100, Some(0.0), 1, false),
            Duration::ZERO
        );
        assert_eq!(bounded_rest(rest, ms(2), 100, Some(100.0), 1, false), ms(8));
    }

    #[test]
    fn the_floor_wins_over_a_backed_off_duty_cycle_and_the_ceiling_never_crosses_it() {
        let ms = Duration::from_millis;
        // Backed off to 5 %: 38 ms rests, 2,500 rows/s; the table gains 500 rows/s, so the
        // floor (5,000 rows/s, one batch every 20 ms) cuts the rest to 18 ms.
        let rest = rest_for(ms(2), 5.0);
        assert_eq!(rest, ms(38));
        assert_eq!(bounded_rest(rest, ms(2), 100, Some(500.0), 1, true), ms(18));
        // Removal always lands between 10x and 20x the inserts when the duty cycles allow it.
        for rate in [50.0, 200.0, 400.0] {
            for duty in [5.0, 10.0, 20.0] {
                let r = bounded_rest(rest_for(ms(2), duty), ms(2), 100, Some(rate), 1, true);
                let removal = 100.0 / (ms(2) + r).as_secs_f64();
                assert!(
                    removal >= rate * INSERT_MULTIPLE * 0.999
                        && removal <= rate * PRESENT_MULTIPLE * 1.001,
                    "{rate} rows/s at {duty}%: {removal}"
                );
            }
        }
    }

    #[test]
    fn the_insert_rate_is_measured_over_the_window_and_restarts_after_a_reset() {
        let mut r = InsertRate::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(r.add(at(0), 1_000), None);
        // Counters published about once a second: within the first second, no rate yet.
        assert_eq!(r.add(at(200), 1_000), None);
        let rate = r.add(at(1_000), 1_500).unwrap();
        assert!((rate - 500.0).abs() < 1e-6, "{rate}");
        // Readings older than the window are dropped: the rate follows a change.
        for s in 2..=12u64 {
            r.add(at(s * 1_000), 1_500 + (s as i64 - 1) * 100);
        }
        let rate = r.add(at(13_000), 2_700).unwrap();
        assert!((rate - 100.0).abs() < 1.0, "{rate}");
        // A statistics reset starts again rather than reading a negative rate.
        assert_eq!(r.add(at(13_200), 10), None);
    }

    #[test]
    fn the_floor_caps_the_rest_by_each_workers_share_of_the_rate() {
        // 100 rows in 2 ms; floor 10,000 rows/s on one worker: a 10 ms cycle, so 8 ms of rest.
        let rest = floor_rest(Duration::from_millis(2), 100, 10_000.0, 1).unwrap();
        assert_eq!(rest, Duration::from_millis(8));
        // Two workers share it: each needs 5,000 rows/s, a 20 ms cycle.
        let rest = floor_rest(Duration::from_millis(2), 100, 10_000.0, 2).unwrap();
        assert_eq!(rest, Duration::from_millis(18));
        // A batch slower than the cycle still rests as long as it ran: the floor stops at a
        // 50 % duty cycle.
        let rest = floor_rest(Duration::from_millis(20), 100, 10_000.0, 1).unwrap();
        assert_eq!(rest, Duration::from_millis(20));
        // No inserts, or a batch that removed nothing: no floor.
        assert_eq!(floor_rest(Duration::from_millis(2), 100, 0.0, 1), None);
        assert_eq!(floor_rest(Duration::from_millis(2), 0, 10_000.0, 1), None);
    }
}

//! evict's rate caps: `--max-rate ROWS/s` (rows deleted per second, by every session of the run
//! together) and `--max-wal-rate BYTES/s` (WAL written by the batches per second).
//!
//! Method: one schedule shared by the workers. Each claim, made under the claim lock, first waits
//! until the schedule's next slot, then reserves its batch: the slot moves on by the batch's rows
//! divided by the row cap, and by its expected WAL (bytes per row seen so far, times the rows)
//! divided by the WAL cap. When the batch is done the reservation is corrected: rows not deleted are
//! given back, and the WAL actually written (the server's WAL insert position read before and after
//! the batch on the batch's session; when batches overlap, bytes already counted are not counted
//! again) replaces the estimate. A schedule that fell behind (slow batches, pauses) may catch up by
//! at most [`CATCH_UP`], so the cap also holds over any stretch of the run, not only on average.
//! Batches are cut to [`GRAIN`] of the cap, so the first batches do not overshoot it.
//!
//! The WAL insert position advances with every write on the server: WAL that other sessions write
//! while a batch runs counts as the batch's, so on a busy server evict stays below the WAL cap.
//! The cap composes with the pace (`pace`): a worker rests as the pace says, then waits for its
//! slot, so whichever is stricter decides.

use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::sync::Mutex;

use crate::db::Session;
use crate::domain::{Cancel, Caps};
use crate::exit::{Exit, fail};
use crate::metrics::Series;
use crate::output::prometheus::Metrics;
pub(crate) use crate::report::evict::{RateProgress, RateReport};

/// A batch holds at most this much of a second's budget.
pub(crate) const GRAIN: Duration = Duration::from_millis(50);
/// How much a schedule that fell behind may catch up.
pub(crate) const CATCH_UP: Duration = Duration::from_millis(100);
/// How often a waiting claim looks at the schedule again (a finished batch may give time back).
const RECHECK: Duration = Duration::from_millis(10);

/// A claim's reservation, settled when its batch is done.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ticket {
    rows: u64,
    wal: f64,
    /// The WAL insert position before the batch (with --max-wal-rate).
    pub wal_before: Option<i64>,
}

struct Inner {
    /// The next slot of the row schedule and of the WAL schedule.
    rows_next: Instant,
    wal_next: Instant,
    /// WAL per deleted row so far (None until a batch deleted something).
    bytes_per_row: Option<f64>,
    /// The highest WAL position counted (bytes below it are not counted twice).
    counted_to: i64,
    wal_bytes: u64,
    waited: Duration,
    waits: u64,
    /// When the schedule started, rows deleted under it, and when its last batch ended.
    started: Instant,
    rows: u64,
    last: Option<Instant>,
}

/// The shared schedule.
pub(crate) struct Limiter {
    caps: Caps,
    inner: Mutex<Inner>,
}

impl Limiter {
    pub(crate) fn new(caps: Caps) -> Limiter {
        let now = Instant::now();
        Limiter {
            caps,
            inner: Mutex::new(Inner {
                rows_next: now,
                wal_next: now,
                bytes_per_row: None,
                counted_to: 0,
                wal_bytes: 0,
                waited: Duration::ZERO,
                waits: 0,
                started: now,
                rows: 0,
                last: None,
            }),
        }
    }

    /// The largest batch the caps allow now (`rows` when they allow it whole).
    pub(crate) async fn batch_cap(&self, rows: u64) -> u64 {
        let mut cap = rows;
        if let Some(r) = self.caps.rows {
            cap = cap.min((r * GRAIN.as_secs_f64()).ceil() as u64);
        }
        if let (Some(w), Some(per_row)) = (self.caps.wal, self.inner.lock().await.bytes_per_row)
            && per_row > 0.0
        {
            cap = cap.min((w * GRAIN.as_secs_f64() / per_row).ceil() as u64);
        }
        cap.max(1)
    }

    /// Wait for the next slot (or until `deadline` or a cancel), then reserve a batch of `rows`.
    /// None when the wait ended without a slot.
    pub(crate) async fn acquire(
        &self,
        rows: u64,
        cancel: &Cancel,
        deadline: Option<Instant>,
    ) -> Option<Ticket> {
        let started = Instant::now();
        let mut waited = false;
        loop {
            let mut inner = self.inner.lock().await;
            let now = Instant::now();
            let ready = inner.rows_next.max(inner.wal_next);
            if ready <= now {
                if waited {
                    inner.waits += 1;
                    inner.waited += started.elapsed();
                }
                let floor = now.checked_sub(CATCH_UP).unwrap_or(now);
                let wal = inner.bytes_per_row.unwrap_or(0.0) * rows as f64;
                if let Some(r) = self.caps.rows {
                    inner.rows_next =
                        inner.rows_next.max(floor) + Duration::from_secs_f64(rows as f64 / r);
                }
                if let Some(w) = self.caps.wal {
                    inner.wal_next = inner.wal_next.max(floor) + Duration::from_secs_f64(wal / w);
                }
                return Some(Ticket {
                    rows,
                    wal,
                    wal_before: None,
                });
            }
            drop(inner);
            if cancel.requested() || deadline.is_some_and(|d| now >= d) {
                let mut inner = self.inner.lock().await;
                if waited {
                    inner.waits += 1;
                    inner.waited += started.elapsed();
                }
                return None;
            }
            waited = true;
            let mut nap = (ready - now).min(RECHECK);
            if let Some(d) = deadline {
                nap = nap.min(d.saturating_duration_since(now));
            }
            tokio::select! {
                _ = tokio::time::sleep(nap) => {},
                _ = cancel.wait() => {},
            }
        }
    }

    /// Read the WAL position before a batch, its claim included (with --max-wal-rate).
    pub(crate) async fn before_batch(&self, client: &Session, ticket: &mut Ticket) -> Result<()> {
        if self.caps.wal.is_some() {
            ticket.wal_before = Some(wal_position(client).await?);
        }
        Ok(())
    }

    /// Settle a batch that deleted `deleted` rows: give back the rows it did not use, and replace
    /// its expected WAL with the WAL written while it ran.
    pub(crate) async fn settle(
        &self,
        client: &Session,
        ticket: Ticket,
        deleted: u64,
    ) -> Result<()> {
        let after = match ticket.wal_before {
            Some(_) => Some(wal_position(client).await?),
            None => None,
        };
        let mut inner = self.inner.lock().await;
        inner.rows += deleted;
        inner.last = Some(Instant::now());
        if let Some(r) = self.caps.rows {
            let unused = ticket.rows.saturating_sub(deleted) as f64;
            inner.rows_next = inner
                .rows_next
                .checked_sub(Duration::from_secs_f64(unused / r))
                .unwrap_or(inner.rows_next);
        }
        if let (Some(w), Some(before), Some(after)) = (self.caps.wal, ticket.wal_before, after) {
            let from = before.max(inner.counted_to);
            let written = u64::try_from(after - from).unwrap_or(0);
            inner.counted_to = inner.counted_to.max(after);
            inner.wal_bytes += written;
            let correction = written as f64 - ticket.wal;
            inner.wal_next = if correction >= 0.0 {
                inner.wal_next + Duration::from_secs_f64(correction / w)
            } else {
                inner
                    .wal_next
                    .checked_sub(Duration::from_secs_f64(-correction / w))
                    .unwrap_or(inner.wal_next)
            };
            if deleted > 0 {
                // All the WAL the batch's statement wrote, overlap or not, is what a row costs.
                let per_row = u64::try_from(after - before).unwrap_or(0) as f64 / deleted as f64;
                inner.bytes_per_row = Some(match inner.bytes_per_row {
                    Some(b) => b + 0.3 * (per_row - b),
                    None => per_row,
                });
            }
        }
        Ok(())
    }

    /// Give back a reservation that no batch used.
    pub(crate) async fn cancel(&self, ticket: Ticket) {
        let mut inner = self.inner.lock().await;
        if let Some(r) = self.caps.rows {
            inner.rows_next = inner
                .rows_next
                .checked_sub(Duration::from_secs_f64(ticket.rows as f64 / r))
                .unwrap_or(inner.rows_next);
        }
        if let Some(w) = self.caps.wal {
            inner.wal_next = inner
                .wal_next
                .checked_sub(Duration::from_secs_f64(ticket.wal / w))
                .unwrap_or(inner.wal_next);
        }
    }

    /// The caps and what they did.
    pub(crate) async fn report(&self) -> RateReport {
        let inner = self.inner.lock().await;
        let seconds = inner
            .last
            .map_or(0.0, |l| l.duration_since(inner.started).as_secs_f64());
        let per_second = |n: u64| {
            if seconds > 0.0 {
                n as f64 / seconds
            } else {
                0.0
            }
        };
        let wal_bytes = self.caps.wal.map(|_| inner.wal_bytes);
        RateReport {
            max_rows_per_second: self.caps.rows,
            max_wal_bytes_per_second: self.caps.wal,
            seconds,
            rows_per_second: per_second(inner.rows),
            wal_bytes,
            wal_bytes_per_second: wal_bytes.map(per_second),
            waits: inner.waits,
            wait_seconds: inner.waited.as_secs_f64(),
        }
    }

    /// The caps and the WAL rate so far (`elapsed` seconds into the run), for the progress bar.
    pub(crate) async fn progress(&self, elapsed: f64) -> RateProgress {
        let wal_bytes_per_second = match self.caps.wal {
            Some(_) if elapsed > 0.0 => self.inner.lock().await.wal_bytes as f64 / elapsed,
            _ => 0.0,
        };
        RateProgress {
            max_rows_per_second: self.caps.rows,
            max_wal_bytes_per_second: self.caps.wal,
            wal_bytes_per_second,
        }
    }
}

/// With --max-wal-rate, check before any change that the server gives its WAL position.
pub(crate) async fn require_wal_position(client: &Session, caps: Caps) -> Result<()> {
    if caps.wal.is_none() {
        return Ok(());
    }
    match wal_position(client).await {
        Ok(_) => Ok(()),
        // Only the server's own refusal says it does not give the position; a lost connection
        // is not an answer, and is told as itself.
        Err(e) if answered(&e) => Err(fail(
            Exit::Failure,
            crate::output::evict::no_wal_position(&e),
        )),
        Err(e) => Err(e),
    }
}

/// Whether the server answered the statement with an error of its own.
fn answered(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error)
            .is_some()
    })
}

async fn wal_position(client: &Session) -> Result<i64> {
    crate::db::activity::wal_insert_position(client).await
}

impl RateReport {
    /// Whether a cap was set.
    pub(crate) fn capped(&self) -> bool {
        self.max_rows_per_second.is_some() || self.max_wal_bytes_per_second.is_some()
    }

    /// Add the caps' figures to `m` (only for a run with a cap).
    pub(crate) fn metrics(&self, m: &mut Metrics) {
        if let Some(r) = self.max_rows_per_second {
            m.set(Series::EvictMaxRowsPerSecond, r);
        }
        if let Some(w) = self.max_wal_bytes_per_second {
            m.set(Series::EvictMaxWalBytesPerSecond, w);
        }
        if let Some(b) = self.wal_bytes {
            m.set(Series::EvictWalBytes, b);
        }
        if self.capped() {
            m.set(Series::EvictRateLimitWait, self.wait_seconds);
        }
    }
}

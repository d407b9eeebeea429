//! `idemctl top`: the figures of `stats` (gathered by the same code, on one server and on Citus)
//! read again every interval, with what a live view adds: the insert and eviction rates from the
//! server's counters, the oldest stuck key, the other idemctl sessions and the sessions waiting for
//! a key's row. Each refresh runs under a deadline and never overlaps the next; a failed one marks
//! the connection lost and the next one connects again. The frames are data; output/top.rs draws
//! them.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use time::OffsetDateTime;

use super::shards::Placements;
use super::stats::StatsReport;
use crate::cli::TopArgs;
use crate::context::Context;
use crate::db::activity::{self, IdemctlSession, RowWait};
use crate::db::queries::{self, KeyRef};
use crate::db::{KeyTable, Session};
use crate::domain::OutputFormat;
use crate::exit::{Exit, fail};
use crate::output::top::{
    self as view, Count, Frame, Key, KeyFig, SessionFig, Status, TopNote, TtlFig, View, WaitFig,
    WorkerFig,
};

/// The backlog and the stuck keys are counted exactly up to this many each refresh (`stats`
/// counts further, once): past it the view says "at least" and shows the planner's estimate of the
/// backlog, which its trend follows. Each counted key is an index entry, and the backlog's a heap
/// read too, so the cap is what keeps a refresh short on a table far behind.
pub(crate) const CAP: i64 = 1_000;

/// Sessions and waits listed, at most.
const LISTED: i64 = 20;

/// The rates are measured over the counters' change in about this long (the server publishes a
/// backend's counters at most once a second, so a shorter window would jump).
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// Trend values kept (more than the widest terminal shows).
const TREND_KEEP: usize = 400;

/// The shortest --interval (output/top.rs's refusal names it).
const MIN_INTERVAL: Duration = Duration::from_millis(500);

/// One refresh's reads.
struct Sample {
    stats: StatsReport,
    oldest_stuck: Option<KeyRef>,
    sessions: Vec<IdemctlSession>,
    waits: Vec<RowWait>,
    pooled: bool,
    elapsed: Duration,
    at: Instant,
}

/// The counters of one refresh: the table's, and each Citus worker's.
struct Counters {
    at: Instant,
    inserted: i64,
    deleted: i64,
    nodes: Vec<(String, i64, i64)>,
}

/// What top remembers between refreshes: the counters of the last seconds (for the rates) and the
/// trends.
#[derive(Default)]
struct History {
    counters: VecDeque<Counters>,
    trends: view::Trends,
}

/// Check what can be checked before connecting.
fn refuse_early(ctx: &Context, args: &TopArgs) -> Result<()> {
    if args.interval < MIN_INTERVAL {
        return Err(fail(Exit::Usage, view::INTERVAL_TOO_SHORT));
    }
    if ctx.output.format == OutputFormat::Json && !args.once {
        return Err(fail(Exit::Usage, view::JSON_NEEDS_ONCE));
    }
    if !args.once && !ctx.output.stdout_tty {
        return Err(fail(Exit::Usage, view::NOT_A_TERMINAL));
    }
    Ok(())
}

/// Run `top`.
pub(crate) async fn run(ctx: &Context, args: &TopArgs) -> Result<Exit> {
    refuse_early(ctx, args)?;
    let session = ctx.session().await?;
    let table = ctx.table(&session).await?;
    table.require_columns()?;
    table.require_ttl("top")?;
    table.require_ttl_floor("top", ctx.global.short_ttl_allowed, &ctx.global.ttl_from)?;
    let privileges = table.privileges(&session).await?;
    privileges.require_for(&table, "top", crate::db::table::Job::Read)?;
    let placements = Placements::resolve(ctx, &session, &table).await?;
    let mut history = History::default();
    if args.once {
        return once(ctx, args, &session, &table, &placements, &mut history).await;
    }
    live(ctx, args, session, &table, &placements, history).await
}

/// `--once`: two refreshes an interval apart (the second has rates), printed as text or JSON.
async fn once(
    ctx: &Context,
    args: &TopArgs,
    session: &Session,
    table: &KeyTable,
    placements: &Placements,
    history: &mut History,
) -> Result<Exit> {
    let deadline = refresh_deadline(args.interval);
    let first = within(deadline, sample(session, table, placements, args)).await?;
    history.absorb(first, args);
    tokio::time::sleep(args.interval).await;
    let second = within(deadline, sample(session, table, placements, args)).await?;
    let frame = history.absorb(second, args);
    if ctx.output.format == OutputFormat::Json {
        let mut text = serde_json::to_string_pretty(&frame)?;
        text.push('\n');
        crate::output::write_stdout(&text)?;
        return Ok(Exit::Success);
    }
    let width = if ctx.output.stdout_tty {
        ratatui::crossterm::terminal::size().map_or(80, |(w, _)| w)
    } else {
        80
    };
    let v = View {
        frame: Some(frame),
        trends: history.trends.clone(),
        status: Status::Live,
        interval: args.interval,
        help: false,
        color: false,
        once: true,
        recovered: None,
        back_at: None,
    };
    crate::output::write_stdout(&view::plain(&v, width))?;
    Ok(Exit::Success)
}

/// A refresh in flight: it owns the session while it runs and hands it back when it succeeded.
type Refresh<'a> = Pin<Box<dyn Future<Output = (Option<Session>, Result<Sample>)> + Send + 'a>>;

/// The live view, until a key or a signal ends it.
async fn live(
    ctx: &Context,
    args: &TopArgs,
    session: Session,
    table: &KeyTable,
    placements: &Placements,
    mut history: History,
) -> Result<Exit> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term =
        signal(SignalKind::terminate()).context(crate::report::failure::Step::ListenForSigterm)?;
    let mut int =
        signal(SignalKind::interrupt()).context(crate::report::failure::Step::ListenForSigint)?;
    let mut screen = view::Screen::enter().context(crate::report::failure::Step::SetUpTerminal)?;
    let mut keys = key_reader();
    let mut keys_open = true;
    let mut v = View {
        frame: None,
        trends: view::Trends::default(),
        status: Status::Starting,
        interval: args.interval,
        help: false,
        color: ctx.output.color,
        once: false,
        recovered: None,
        back_at: None,
    };
    let deadline = refresh_deadline(args.interval);
    let mut session = Some(session);
    let mut paused = false;
    let mut next = tokio::time::Instant::now();
    let mut inflight: Option<Refresh<'_>> = None;
    let code = loop {
        screen
            .draw(&v)
            .context(crate::report::failure::Step::DrawLiveView)?;
        if inflight.is_none() && !paused && tokio::time::Instant::now() >= next {
            next = tokio::time::Instant::now() + args.interval;
            let s = session.take();
            inflight = Some(Box::pin(refresh(ctx, s, table, placements, args, deadline)));
        }
        tokio::select! {
            (back, result) = async { inflight.as_mut().expect("a refresh in flight").await },
                if inflight.is_some() => {
                inflight = None;
                session = back;
                match result {
                    Ok(s) => {
                        if matches!(v.status, Status::Lost { .. }) {
                            v.back_at = Some(OffsetDateTime::now_utc());
                        }
                        v.frame = Some(history.absorb(s, args));
                        v.trends = history.trends.clone();
                        v.status = if paused { Status::Paused } else { Status::Live };
                    }
                    Err(e) => {
                        let since = match &v.status {
                            Status::Lost { since, .. } => *since,
                            _ => OffsetDateTime::now_utc(),
                        };
                        let message = crate::domain::one_line(&e);
                        v.recovered = Some((message.clone(), since));
                        v.status = Status::Lost { message, since };
                        // The next try waits an interval, so that the loss stays in view.
                        next = tokio::time::Instant::now() + args.interval;
                    }
                }
            }
            () = tokio::time::sleep_until(next), if inflight.is_none() && !paused => {}
            key = keys.recv(), if keys_open => match key {
                Some(Key::Quit) => break Exit::Success,
                Some(Key::Interrupt) => break Exit::Interrupted,
                Some(Key::Pause) => {
                    paused = !paused;
                    if paused {
                        v.status = Status::Paused;
                    } else if !matches!(v.status, Status::Lost { .. }) {
                        v.status = Status::Live;
                    }
                }
                Some(Key::Help) => v.help = !v.help,
                Some(Key::Redraw) => {}
                None => keys_open = false,
            },
            _ = term.recv() => break Exit::Terminated,
            _ = int.recv() => break Exit::Interrupted,
        }
    };
    drop(inflight);
    drop(screen);
    drop(session);
    Ok(code)
}

/// Read keys on a thread of their own (the terminal's reads block), sending each to the loop; the
/// thread ends when the loop is gone.
fn key_reader() -> tokio::sync::mpsc::UnboundedReceiver<Key> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        loop {
            match view::read_key(Duration::from_millis(100)) {
                Ok(Some(k)) => {
                    if tx.send(k).is_err() {
                        break;
                    }
                }
                Ok(None) if tx.is_closed() => break,
                Ok(None) => {}
                Err(_) => break,
            }
        }
    });
    rx
}

/// How long a refresh (connecting again included) may take before it counts as lost: a silent
/// network must not leave the figures looking current.
fn refresh_deadline(interval: Duration) -> Duration {
    interval.max(Duration::from_secs(5))
}

async fn within<T>(deadline: Duration, work: impl Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(deadline, work).await {
        Ok(r) => r,
        Err(_) => Err(fail(Exit::Failure, view::no_answer(deadline))),
    }
}

/// One refresh on `session`, or on a new one when the last refresh failed. A session that failed
/// is closed, not handed back.
async fn refresh<'a>(
    ctx: &'a Context,
    session: Option<Session>,
    table: &'a KeyTable,
    placements: &'a Placements,
    args: &'a TopArgs,
    deadline: Duration,
) -> (Option<Session>, Result<Sample>) {
    let session = match session {
        Some(s) => s,
        None => match within(deadline, ctx.session()).await {
            Ok(s) => s,
            Err(e) => return (None, Err(e)),
        },
    };
    match within(deadline, sample(&session, table, placements, args)).await {
        Ok(s) => (Some(session), Ok(s)),
        Err(e) => {
            session.discard();
            (None, Err(e))
        }
    }
}

/// Read one refresh's figures: the stats report (its gathering shared with `stats`), the oldest
/// stuck key, the idemctl sessions and the row waits.
async fn sample(
    session: &Session,
    table: &KeyTable,
    placements: &Placements,
    args: &TopArgs,
) -> Result<Sample> {
    let started = Instant::now();
    let stuck_after = args.stuck_after.as_secs_f64();
    let reading = super::stats::Reading {
        stuck_after_secs: stuck_after,
        backlog_cap: Some(CAP),
        stuck_cap: CAP,
        allow_scan: false,
        below_ttl: None,
    };
    let stats = super::stats::gather(session, table, placements, reading).await?;
    let any_stuck = stats.stuck.as_ref().is_some_and(|s| s.count.count > 0);
    let oldest_stuck = if any_stuck && table.stuck_index().is_some() {
        queries::oldest_stuck(session, table, stuck_after).await?
    } else {
        None
    };
    let sessions = activity::idemctl_sessions(session, table, LISTED).await?;
    let waits = activity::row_waits(session, table, LISTED).await?;
    Ok(Sample {
        stats,
        oldest_stuck,
        sessions,
        waits,
        pooled: session.pooled(),
        elapsed: started.elapsed(),
        at: Instant::now(),
    })
}

fn key_fig(k: &KeyRef) -> KeyFig {
    KeyFig {
        api_key_id: k.api_key_id.clone(),
        scope: k.scope.clone(),
        key: k.key.clone(),
        seconds: k.seconds,
    }
}

fn count(c: queries::Capped) -> Count {
    Count {
        count: c.count,
        at_least: c.at_least,
    }
}

/// The backlog's trend value: the count, or past the cap the planner's estimate.
fn backlog_trend(r: &StatsReport) -> Option<u64> {
    match (r.expired_backlog, r.expired_backlog_estimate) {
        (Some(b), Some(estimate)) if b.at_least => Some(estimate.max(b.count.max(0) as u64)),
        (Some(b), _) => Some(b.count.max(0) as u64),
        (None, _) => None,
    }
}

/// Rows per second between two counter readings (None when the counter went back: reset).
fn per_second(now: i64, then: i64, seconds: f64) -> Option<f64> {
    (now >= then && seconds > 0.0).then(|| (now - then) as f64 / seconds)
}

impl History {
    /// Remember a refresh's counters and trend values, and turn it into a frame.
    fn absorb(&mut self, s: Sample, args: &TopArgs) -> Frame {
        let r = &s.stats;
        let nodes: Vec<(String, i64, i64)> = r.citus.as_ref().map_or_else(Vec::new, |c| {
            c.nodes
                .iter()
                .map(|n| (n.node.clone(), n.inserted_rows, n.deleted_rows))
                .collect()
        });
        let now = Counters {
            at: s.at,
            inserted: r.vacuum.inserted_rows,
            deleted: r.vacuum.deleted_rows,
            nodes,
        };
        // The oldest reading within the window (and at least the one before this).
        while self.counters.len() > 1 && now.at.duration_since(self.counters[1].at) >= RATE_WINDOW {
            self.counters.pop_front();
        }
        let then = self.counters.front();
        let seconds = then.map(|t| now.at.duration_since(t.at).as_secs_f64());
        let rate = |pick: fn(&Counters) -> i64| {
            then.zip(seconds)
                .and_then(|(t, secs)| per_second(pick(&now), pick(t), secs))
        };
        let insert = rate(|c| c.inserted);
        let evict = rate(|c| c.deleted);
        let node_rate = |node: &str, ins: bool| -> Option<f64> {
            let t = then?;
            let find = |c: &Counters| {
                c.nodes
                    .iter()
                    .find(|(n, ..)| n == node)
                    .map(|(_, i, d)| if ins { *i } else { *d })
            };
            per_second(find(&now)?, find(t)?, seconds?)
        };
        let workers = r.citus.as_ref().map_or_else(Vec::new, |c| {
            c.nodes
                .iter()
                .map(|n| WorkerFig {
                    node: n.node.clone(),
                    shards: n.shards,
                    backlog: count(n.expired_backlog),
                    eviction_lag_seconds: n.eviction_lag_seconds,
                    dead_tuples: n.dead_tuples,
                    insert_per_second: node_rate(&n.node, true),
                    evict_per_second: node_rate(&n.node, false),
                })
                .collect()
        });
        self.counters.push_back(now);
        let t = &mut self.trends;
        for (series, value) in [
            (&mut t.backlog, backlog_trend(r)),
            (
                &mut t.lag,
                r.eviction_lag_seconds.map(|s| s.max(0.0) as u64),
            ),
            (&mut t.insert, insert.map(|r| r as u64)),
            (&mut t.evict, evict.map(|r| r as u64)),
        ] {
            series.push(value);
            if series.len() > TREND_KEEP {
                series.remove(0);
            }
        }
        frame(&s, args, (insert, evict, seconds), workers)
    }
}

/// A refresh's frame: its figures, the rates (insert, evict, over how many seconds) and each
/// worker's part.
fn frame(
    s: &Sample,
    args: &TopArgs,
    (insert, evict, seconds): (Option<f64>, Option<f64>, Option<f64>),
    workers: Vec<WorkerFig>,
) -> Frame {
    let r = &s.stats;
    let mut notes: Vec<TopNote> = r.notes.iter().cloned().map(TopNote::Stats).collect();
    if r.citus.is_some() {
        notes.push(TopNote::CoordinatorSessionsOnly);
    }
    Frame {
        table: r.table.clone(),
        taken_at: OffsetDateTime::now_utc(),
        backlog: r.expired_backlog.map(count),
        backlog_estimate: r.expired_backlog_estimate,
        eviction_lag_seconds: r.eviction_lag_seconds,
        eviction_lag_estimated_seconds: r.eviction_lag_estimated_seconds,
        eviction_lag_at_most: r.referenced_expired.as_ref().is_some_and(|x| x.lag_at_most),
        insert_per_second: insert,
        evict_per_second: evict,
        rate_seconds: seconds,
        oldest_live: r.oldest_live.as_ref().map(key_fig),
        oldest_expired: r.oldest_expired.as_ref().map(key_fig),
        stuck_after_seconds: args.stuck_after.as_secs_f64(),
        stuck: r.stuck.as_ref().map(|st| count(st.count)),
        oldest_stuck: s.oldest_stuck.as_ref().map(key_fig),
        ttl: r.recent_ttl.as_ref().map(|t| TtlFig {
            keys: t.keys,
            fixed_seconds: (t.source == "ttl").then_some(t.min_seconds),
            p50_seconds: t.p50_seconds,
            buckets: t
                .histogram
                .iter()
                .map(|b| (b.under_seconds, b.keys))
                .collect(),
        }),
        estimated_rows: r.sizes.estimated_rows,
        total_bytes: r.sizes.total_bytes,
        heap_bytes: r.sizes.heap_bytes,
        index_bytes: r.sizes.index_bytes,
        dead_tuples: r.vacuum.dead_tuples,
        dead_tuple_ratio: r.maintenance.dead_tuple_ratio,
        last_vacuum: r.vacuum.last_vacuum,
        sessions: s
            .sessions
            .iter()
            .map(|x| SessionFig {
                pid: x.pid,
                command: x.holds_lock.clone(),
                state: x.state.clone(),
                statement: x.statement.clone(),
                wait_event: x.wait_event.clone(),
                connected_seconds: x.connected_seconds,
            })
            .collect(),
        row_waits: s
            .waits
            .iter()
            .map(|w| WaitFig {
                pid: w.pid,
                application_name: w.application_name.clone(),
                waiting_seconds: w.waiting_seconds,
                relation: w.relation.clone(),
                row_address: w.row_address.clone(),
                holder_pid: w.holder_pid,
                holder_application_name: w.holder_application_name.clone(),
                holder_state: w.holder_state.clone(),
                holder_transaction_seconds: w.holder_transaction_seconds,
            })
            .collect(),
        workers,
        pooled: s.pooled,
        notes,
        refresh_ms: s.elapsed.as_secs_f64() * 1000.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_that_went_back_has_no_rate() {
        assert_eq!(per_second(150, 100, 2.0), Some(25.0));
        assert_eq!(per_second(10, 100, 2.0), None);
        assert_eq!(per_second(10, 10, 0.0), None);
    }

    #[test]
    fn the_deadline_is_never_shorter_than_five_seconds() {
        assert_eq!(
            refresh_deadline(Duration::from_secs(2)),
            Duration::from_secs(5)
        );
        assert_eq!(
            refresh_deadline(Duration::from_secs(30)),
            Duration::from_secs(30)
        );
    }
}

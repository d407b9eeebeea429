//! top's view for people: one frame of figures (data the command gathered) and their trends drawn
//! with ratatui on the terminal, or into a buffer printed as plain text (`--once`); the terminal's
//! raw mode and alternate screen, entered and always left again (on `q`, a signal, an error or a
//! panic); and the keys. Keys, tenants, application names and server messages are untrusted: they
//! are escaped here, where they are drawn.

use std::io::Write as _;
use std::time::Duration;

use ratatui::buffer::Buffer;
use ratatui::crossterm::{cursor, event, execute, terminal};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Sparkline, Widget};
use serde::Serialize;
use time::OffsetDateTime;

use crate::output::{escape_controls, human_bytes, human_secs, sanitize};
use crate::report::stats::StatsNote;

/// The refusal off a terminal.
pub(crate) const NOT_A_TERMINAL: &str = "top draws a live view and stdout is not a terminal; for figures a script can read, run `idemctl stats -o json` (or `idemctl top --once` for one frame as text)";

/// The refusal of `-o json` for the live view.
pub(crate) const JSON_NEEDS_ONCE: &str = "top's live view has no JSON form; add --once for one frame as JSON, or run `idemctl stats -o json`";

/// The refusal of an --interval under 500 ms.
pub(crate) const INTERVAL_TOO_SHORT: &str =
    "--interval must be at least 500ms: each refresh reads the table's figures again";

/// A refresh (connecting again included) that had no answer within its deadline.
pub(crate) fn no_answer(deadline: Duration) -> String {
    format!(
        "no answer from the server within {}",
        human_secs(deadline.as_secs_f64())
    )
}

/// A count that may have stopped at its cap.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Count {
    pub count: i64,
    pub at_least: bool,
}

/// A key the view names, with a duration (age, wait or time held).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KeyFig {
    pub api_key_id: Option<String>,
    /// Each scope column's value (null without a scope).
    pub scope: Option<crate::report::rows::Scope>,
    /// None where the key column allows NULL and holds it (null in JSON).
    pub key: Option<String>,
    pub seconds: f64,
}

/// The TTL of recent keys.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TtlFig {
    /// Keys sampled; 0 when every key lives the one --ttl (`fixed_seconds`).
    pub keys: i64,
    pub fixed_seconds: Option<f64>,
    pub p50_seconds: f64,
    /// (upper bound in seconds, keys); the last bucket has no bound.
    pub buckets: Vec<(Option<f64>, i64)>,
}

/// Another idemctl session on the database.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SessionFig {
    pub pid: i32,
    /// `evict` or `reclaim` when it holds that command's lock on the table.
    pub command: Option<String>,
    pub state: String,
    pub statement: Option<String>,
    pub wait_event: Option<String>,
    pub connected_seconds: f64,
}

/// A session waiting for a key's row, and who holds it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WaitFig {
    pub pid: i32,
    pub application_name: Option<String>,
    pub waiting_seconds: Option<f64>,
    pub relation: String,
    pub row_address: String,
    pub holder_pid: i32,
    pub holder_application_name: Option<String>,
    pub holder_state: Option<String>,
    pub holder_transaction_seconds: Option<f64>,
}

/// One Citus worker's part.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WorkerFig {
    pub node: String,
    pub shards: usize,
    pub backlog: Count,
    pub eviction_lag_seconds: f64,
    pub dead_tuples: i64,
    pub insert_per_second: Option<f64>,
    pub evict_per_second: Option<f64>,
}

/// A note under a refresh's figures (a string in JSON, as the view words it).
#[derive(Debug, Clone)]
pub(crate) enum TopNote {
    /// One of the notes of `stats`.
    Stats(StatsNote),
    /// On Citus, the sessions and row waits listed are the coordinator's only.
    CoordinatorSessionsOnly,
}

impl TopNote {
    /// The note in words (unescaped; the view escapes it where it is printed).
    fn text(&self) -> String {
        match self {
            TopNote::Stats(n) => crate::output::stats::note(n),
            TopNote::CoordinatorSessionsOnly => {
                "on Citus, sessions and row waits are the coordinator's; the workers' are not listed"
                    .to_owned()
            }
        }
    }
}

impl Serialize for TopNote {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

/// The figures of one refresh (also the JSON document of `top --once -o json`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Frame {
    pub table: String,
    #[serde(with = "crate::report::timestamp")]
    pub taken_at: OffsetDateTime,
    /// Expired completed keys waiting for evict (None when not counted).
    pub backlog: Option<Count>,
    pub backlog_estimate: Option<u64>,
    /// None when unknown (no expiry index, or no expiry and no TTL).
    pub eviction_lag_seconds: Option<f64>,
    /// Where the lag is unknown for want of an expiry index, the planner's estimate of it (stats'
    /// `eviction_lag_estimated_seconds`); shown as such, never drawn in the lag's trend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_lag_estimated_seconds: Option<f64>,
    /// The lag is an upper bound (every oldest expired key examined is still referenced).
    pub eviction_lag_at_most: bool,
    /// Rows inserted and deleted per second, from the server's counters over `rate_seconds`
    /// (None until two refreshes have been read, or after the counters were reset).
    pub insert_per_second: Option<f64>,
    pub evict_per_second: Option<f64>,
    pub rate_seconds: Option<f64>,
    pub oldest_live: Option<KeyFig>,
    pub oldest_expired: Option<KeyFig>,
    pub stuck_after_seconds: f64,
    /// None when not counted (no in_progress index).
    pub stuck: Option<Count>,
    pub oldest_stuck: Option<KeyFig>,
    pub ttl: Option<TtlFig>,
    pub estimated_rows: i64,
    pub total_bytes: i64,
    pub heap_bytes: i64,
    pub index_bytes: i64,
    pub dead_tuples: i64,
    pub dead_tuple_ratio: f64,
    #[serde(with = "crate::report::timestamp::option")]
    pub last_vacuum: Option<OffsetDateTime>,
    pub sessions: Vec<SessionFig>,
    pub row_waits: Vec<WaitFig>,
    /// On a Citus table, each worker's part.
    pub workers: Vec<WorkerFig>,
    /// Read through a transaction pooler: each statement in a transaction of its own.
    pub pooled: bool,
    pub notes: Vec<TopNote>,
    /// Wall time of the refresh's statements, in milliseconds.
    pub refresh_ms: f64,
}

impl Frame {
    /// Removal ÷ insert: whether eviction keeps up (None without an insert rate).
    pub(crate) fn removal_ratio(&self) -> Option<f64> {
        match (self.evict_per_second, self.insert_per_second) {
            (Some(e), Some(i)) if i > 0.0 => Some(e / i),
            _ => None,
        }
    }
}

/// One figure's recent values, oldest first (`None`: not known at that refresh).
type Series = [Option<u64>];

/// The recent values of the figures drawn as sparklines, oldest first; `None` where a refresh
/// could not tell the figure (an unknown lag, a backlog not counted, a rate not yet measured),
/// drawn as a gap, never as a 0.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trends {
    pub backlog: Vec<Option<u64>>,
    pub lag: Vec<Option<u64>>,
    pub insert: Vec<Option<u64>>,
    pub evict: Vec<Option<u64>>,
}

/// What the view is doing.
#[derive(Debug, Clone)]
pub(crate) enum Status {
    /// Refreshing every interval.
    Live,
    /// `p` pressed: the figures stay as they are.
    Paused,
    /// The last refresh failed (`message`, unescaped); retried every interval.
    Lost {
        message: String,
        since: OffsetDateTime,
    },
    /// The first refresh has not come back yet.
    Starting,
}

/// Everything drawn.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub frame: Option<Frame>,
    pub trends: Trends,
    pub status: Status,
    pub interval: Duration,
    pub help: bool,
    pub color: bool,
    /// One frame printed as text (`--once`): no key hints.
    pub once: bool,
    /// The last connection lost (why, since when), and when a refresh answered again: shown for
    /// a minute after.
    pub recovered: Option<(String, OffsetDateTime)>,
    pub back_at: Option<OffsetDateTime>,
}

/// How long the view says a lost connection came back.
const BACK_SHOWN_SECONDS: f64 = 60.0;

const TITLE_HELP: &str = "q quit  p pause  ? help";

fn style(color: bool, c: Color) -> Style {
    if color {
        Style::default().fg(c)
    } else {
        Style::default()
    }
}

fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

fn clock(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!("{:02}:{:02}:{:02} UTC", t.hour(), t.minute(), t.second())
}

fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn count_text(c: Count) -> String {
    if c.at_least {
        format!("≥{}", thousands(c.count))
    } else {
        thousands(c.count)
    }
}

fn rate_text(r: Option<f64>) -> String {
    match r {
        Some(r) if r >= 100.0 => format!("{} rows/s", thousands(r.round() as i64)),
        Some(r) => format!("{r:.1} rows/s"),
        None => "measuring…".into(),
    }
}

fn key_text(k: &KeyFig) -> String {
    crate::output::key_label(k.api_key_id.as_deref(), k.scope.as_ref(), k.key.as_deref())
}

/// A string cut to `width` characters, with `…` when cut.
fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The last `width` values of a series.
fn tail<T>(series: &[T], width: u16) -> &[T] {
    &series[series.len().saturating_sub(usize::from(width))..]
}

/// Draw the view into `buf` over `area`.
pub(crate) fn draw(area: Rect, buf: &mut Buffer, view: &View) {
    let [title, eviction, middle, bottom, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(7),
        Constraint::Length(9),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    title_line(view).render(title, buf);
    let Some(f) = &view.frame else {
        let text = match &view.status {
            Status::Lost { message, .. } => format!(
                "no figures yet: {}; retrying every {}",
                escape_controls(message),
                interval_text(view.interval)
            ),
            _ => "reading the table's figures…".into(),
        };
        Paragraph::new(text)
            .wrap(ratatui::widgets::Wrap { trim: true })
            .render(eviction.union(middle), buf);
        footer_line(view).render(footer, buf);
        return;
    };
    eviction_block(f, view, eviction, buf);
    let [keys, ttl] =
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(middle);
    keys_block(f, keys, buf);
    ttl_block(f, view.color, ttl, buf);
    bottom_block(f, view, bottom, buf);
    footer_line(view).render(footer, buf);
    if view.help {
        help_popup(area, buf);
    }
}

/// The refresh interval as written on the command line's terms (`500ms`, `2s`, `1m`).
fn interval_text(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        human_secs(d.as_secs_f64())
    }
}

fn title_line(view: &View) -> Line<'static> {
    let table = view
        .frame
        .as_ref()
        .map_or_else(String::new, |f| escape_controls(&f.table));
    let when = view
        .frame
        .as_ref()
        .map_or_else(String::new, |f| clock(f.taken_at));
    let (state, st) = match &view.status {
        _ if view.once => ("", Style::default()),
        Status::Live => ("live", style(view.color, Color::Green)),
        Status::Paused => (
            "PAUSED",
            style(view.color, Color::Yellow).add_modifier(Modifier::BOLD),
        ),
        Status::Lost { .. } => (
            "CONNECTION LOST",
            style(view.color, Color::Red).add_modifier(Modifier::BOLD),
        ),
        Status::Starting => ("connecting", Style::default()),
    };
    Line::from(vec![
        Span::styled("idemctl top", bold()),
        Span::raw(format!(
            " · {table} · every {} · {when}  ",
            interval_text(view.interval)
        )),
        Span::styled(state, st),
    ])
}

fn footer_line(view: &View) -> Line<'static> {
    let refresh = view
        .frame
        .as_ref()
        .map_or_else(String::new, |f| format!("refresh {:.0} ms", f.refresh_ms));
    if view.once {
        return Line::from(refresh);
    }
    Line::from(vec![
        Span::styled(TITLE_HELP, style(view.color, Color::Cyan)),
        Span::raw(format!("   {refresh}")),
    ])
}

fn boxed(title: &str) -> Block<'static> {
    Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(format!(" {title} "), bold()))
}

fn eviction_block(f: &Frame, view: &View, area: Rect, buf: &mut Buffer) {
    let shown = view.trends.backlog.len().max(1) as f64;
    let span = human_secs(shown * view.interval.as_secs_f64());
    let block = boxed(&format!("eviction · trend over the last {span}"));
    let inner = block.inner(area);
    block.render(area, buf);
    // Where a figure cannot be measured (no expiry index), the planner's estimate, said so.
    let backlog = match (f.backlog, f.backlog_estimate) {
        (Some(c), Some(e)) if c.at_least => format!("{} (~{})", count_text(c), thousands(e as i64)),
        (Some(c), _) => count_text(c),
        (None, Some(e)) => format!("~{} (estimate)", thousands(e as i64)),
        (None, None) => "not counted".into(),
    };
    let lag = match (f.eviction_lag_seconds, f.eviction_lag_estimated_seconds) {
        (None, Some(e)) => format!("~{} (estimate)", human_secs(e)),
        (None, None) => "unknown".to_owned(),
        (Some(s), _) if f.eviction_lag_at_most => format!("≤{}", human_secs(s)),
        (Some(s), _) => human_secs(s),
    };
    // Behind: evicting less than is inserted while the lag grows, or the backlog while it is
    // counted exactly (past the cap its trend is the planner's estimate, which jumps when the table
    // is analyzed). Fewer evictions than inserts is normal while new keys have not expired.
    // Between the first and the last value known of the recent ones; a gap tells nothing.
    let rising = |series: &[Option<u64>]| {
        let mut known = tail(series, 30).iter().flatten();
        let first = known.next();
        first.is_some() && first < known.last()
    };
    let exact = f.backlog.is_some_and(|b| !b.at_least);
    let growing = rising(&view.trends.lag) || (exact && rising(&view.trends.backlog));
    let empty = f.backlog.is_some_and(|b| b.count == 0);
    let ratio = match f.removal_ratio() {
        Some(r) if r >= 0.95 || empty => {
            (format!("{r:.2}  keeps up"), style(view.color, Color::Green))
        }
        Some(r) if growing => (
            format!("{r:.2}  falling behind"),
            style(view.color, Color::Red),
        ),
        Some(r) => (format!("{r:.2}"), Style::default()),
        None if f.insert_per_second == Some(0.0) => ("no inserts".into(), Style::default()),
        None => ("measuring…".into(), Style::default()),
    };
    let rows: [(&str, String, Style, Option<&Series>); 5] = [
        (
            "backlog",
            backlog,
            Style::default(),
            Some(&view.trends.backlog),
        ),
        ("lag", lag, Style::default(), Some(&view.trends.lag)),
        (
            "inserted",
            rate_text(f.insert_per_second),
            Style::default(),
            Some(&view.trends.insert),
        ),
        (
            "evicted",
            rate_text(f.evict_per_second),
            Style::default(),
            Some(&view.trends.evict),
        ),
        ("evicted ÷ inserted", ratio.0, ratio.1, None),
    ];
    for (n, (label, value, st, series)) in rows.into_iter().enumerate() {
        let Some(row) = row_of(inner, n) else { break };
        let [l, v, s] = Layout::horizontal([
            Constraint::Length(19),
            Constraint::Length(21),
            Constraint::Min(0),
        ])
        .areas(row);
        Span::styled(label, bold()).render(l, buf);
        // A figure without a trend may use the trend's columns too.
        let v = if series.is_some() { v } else { v.union(s) };
        Span::styled(fit(&value, usize::from(v.width)), st).render(v, buf);
        if let Some(series) = series {
            // The backlog and the lag are drawn from their lowest value in view, so that a slow
            // climb or fall shows; a rate from 0, so that a stop shows.
            let (data, max) = sparkline_data(tail(series, s.width), n < 2);
            Sparkline::default()
                .data(data)
                .max(max)
                .style(style(view.color, Color::Cyan))
                .render(s, buf);
        }
    }
}

/// A trend's bars and their full height: from 0, or (`from_lowest`) from the lowest value shown,
/// a flat trend then drawn as the lowest bar. A value not known stays absent (a gap), and the
/// known ones alone set the scale.
fn sparkline_data(values: &[Option<u64>], from_lowest: bool) -> (Vec<Option<u64>>, u64) {
    let known = || values.iter().flatten().copied();
    let lo = if from_lowest {
        known().min().unwrap_or(0)
    } else {
        0
    };
    let hi = known().max().unwrap_or(0);
    if from_lowest {
        // The lowest value is an eighth of the height (the lowest bar), the highest the whole.
        let range = hi - lo;
        if range == 0 {
            return (values.iter().map(|v| v.map(|_| 1)).collect(), 8);
        }
        let data = values
            .iter()
            .map(|v| v.map(|v| (v - lo).saturating_mul(7).saturating_add(range)))
            .collect();
        return (data, range.saturating_mul(8));
    }
    (values.to_vec(), hi.max(1))
}

fn row_of(area: Rect, n: usize) -> Option<Rect> {
    let n = u16::try_from(n).ok()?;
    (n < area.height).then(|| Rect {
        y: area.y + n,
        height: 1,
        ..area
    })
}

fn keys_block(f: &Frame, area: Rect, buf: &mut Buffer) {
    let block = boxed("keys and table");
    let inner = block.inner(area);
    block.render(area, buf);
    let w = usize::from(inner.width).saturating_sub(14);
    let oldest_live = f.oldest_live.as_ref().map_or_else(
        || "none".to_owned(),
        |k| format!("{} {}", human_secs(k.seconds), key_text(k)),
    );
    let stuck = match f.stuck {
        Some(c) => count_text(c),
        None => "not counted (index)".into(),
    };
    let oldest_stuck = f.oldest_stuck.as_ref().map_or_else(
        || "none".to_owned(),
        |k| format!("{} {}", human_secs(k.seconds), key_text(k)),
    );
    let vacuum = f.last_vacuum.map_or_else(
        || "never".to_owned(),
        |t| format!("{} ago", human_secs((f.taken_at - t).as_seconds_f64())),
    );
    let lines = [
        ("oldest live", oldest_live),
        (
            &*format!("stuck >{}", human_secs(f.stuck_after_seconds)),
            stuck,
        ),
        ("oldest stuck", oldest_stuck),
        (
            "size",
            format!(
                "{} ({} rows)",
                human_bytes(f.total_bytes),
                thousands(f.estimated_rows)
            ),
        ),
        (
            "dead tuples",
            format!(
                "{} ({:.1}%)",
                thousands(f.dead_tuples),
                f.dead_tuple_ratio * 100.0
            ),
        ),
        ("last vacuum", vacuum),
    ]
    .map(|(label, value)| {
        Line::from(vec![
            Span::styled(format!("{label:<13} "), bold()),
            Span::raw(fit(&value, w)),
        ])
    });
    Paragraph::new(lines.to_vec()).render(inner, buf);
}

fn bucket_label(n: usize, bound: Option<f64>, buckets: &[(Option<f64>, i64)]) -> String {
    match bound {
        Some(b) => format!("<{}", human_secs(b)),
        None => {
            let last = n
                .checked_sub(1)
                .and_then(|p| buckets.get(p))
                .and_then(|(b, _)| *b);
            last.map_or_else(|| "all".into(), |b| format!("≥{}", human_secs(b)))
        }
    }
}

fn ttl_block(f: &Frame, color: bool, area: Rect, buf: &mut Buffer) {
    let Some(t) = &f.ttl else {
        let block = boxed("TTL of recent keys");
        let inner = block.inner(area);
        block.render(area, buf);
        Paragraph::new("no keys to sample").render(inner, buf);
        return;
    };
    if let Some(fixed) = t.fixed_seconds {
        let block = boxed("TTL of recent keys");
        let inner = block.inner(area);
        block.render(area, buf);
        Paragraph::new(format!("{} for every key (--ttl)", human_secs(fixed))).render(inner, buf);
        return;
    }
    let block = boxed(&format!(
        "TTL · {} keys · median {}",
        t.keys,
        human_secs(t.p50_seconds)
    ));
    let inner = block.inner(area);
    block.render(area, buf);
    let most = t.buckets.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    let bar_room = usize::from(inner.width).saturating_sub(12).max(1);
    let lines: Vec<Line> = t
        .buckets
        .iter()
        .enumerate()
        .map(|(n, (bound, keys))| {
            let len = ((*keys as f64 / most as f64) * bar_room as f64).round() as usize;
            let len = if *keys > 0 { len.max(1) } else { 0 };
            Line::from(vec![
                Span::styled(
                    format!("{:>5} ", bucket_label(n, *bound, &t.buckets)),
                    bold(),
                ),
                Span::styled("█".repeat(len), style(color, Color::Cyan)),
                Span::raw(format!(" {keys}")),
            ])
        })
        .collect();
    Paragraph::new(lines).render(inner, buf);
}

fn session_line(s: &SessionFig) -> String {
    let what = s.command.as_deref().unwrap_or("idemctl");
    let mut text = format!("pid {} {what}: {}", s.pid, escape_controls(&s.state));
    if let Some(st) = &s.statement {
        text.push_str(&format!(" {}", sanitize(st)));
    }
    if let Some(w) = &s.wait_event {
        text.push_str(&format!(", waits on {}", sanitize(w)));
    }
    text.push_str(&format!(", up {}", human_secs(s.connected_seconds)));
    text
}

fn wait_line(w: &WaitFig) -> String {
    let app = |a: &Option<String>| {
        a.as_deref()
            .filter(|a| !a.is_empty())
            .map_or_else(|| "?".to_owned(), sanitize)
    };
    let holder_state = w
        .holder_state
        .as_deref()
        .map_or_else(|| "?".to_owned(), sanitize);
    let held = w.holder_transaction_seconds.map_or_else(String::new, |s| {
        format!(", in its transaction for {}", human_secs(s))
    });
    format!(
        "pid {} ({}) waits {} for row {} of {}, held by pid {} ({}, {holder_state}{held})",
        w.pid,
        app(&w.application_name),
        w.waiting_seconds.map_or_else(|| "?".into(), human_secs),
        sanitize(&w.row_address),
        escape_controls(&w.relation),
        w.holder_pid,
        app(&w.holder_application_name),
    )
}

/// The lines of the bottom box: the lost connection, Citus workers, waits, sessions and notes.
fn bottom_lines(f: &Frame, view: &View) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    if let Status::Lost { message, since } = &view.status {
        lines.push(Line::from(Span::styled(
            format!(
                "connection lost at {}: {}; retrying every {} (figures from {})",
                clock(*since),
                escape_controls(message),
                interval_text(view.interval),
                clock(f.taken_at)
            ),
            style(view.color, Color::Red).add_modifier(Modifier::BOLD),
        )));
    }
    if let (Status::Live | Status::Paused, Some((message, since)), Some(back)) =
        (&view.status, &view.recovered, view.back_at)
        && (f.taken_at - back).as_seconds_f64() < BACK_SHOWN_SECONDS
    {
        lines.push(Line::from(Span::styled(
            format!(
                "connection back at {} (lost at {}: {})",
                clock(back),
                clock(*since),
                escape_controls(message)
            ),
            style(view.color, Color::Yellow),
        )));
    }
    for w in &f.workers {
        lines.push(Line::from(format!(
            "worker {} ({} shard{}): backlog {}, lag {}, dead {}, in {} / out {}",
            escape_controls(&w.node),
            w.shards,
            if w.shards == 1 { "" } else { "s" },
            count_text(w.backlog),
            human_secs(w.eviction_lag_seconds),
            thousands(w.dead_tuples),
            rate_text(w.insert_per_second),
            rate_text(w.evict_per_second),
        )));
    }
    for w in &f.row_waits {
        lines.push(Line::from(Span::styled(
            wait_line(w),
            style(view.color, Color::Yellow),
        )));
    }
    if f.sessions.is_empty() {
        lines.push(Line::from("no other idemctl session on this database"));
    }
    for s in &f.sessions {
        lines.push(Line::from(session_line(s)));
    }
    if f.pooled {
        lines.push(Line::from(
            "through a transaction pooler: each read is a transaction of its own; sessions are the pooler's",
        ));
    }
    for n in &f.notes {
        lines.push(Line::from(format!("note: {}", escape_controls(&n.text()))));
    }
    lines
}

fn bottom_block(f: &Frame, view: &View, area: Rect, buf: &mut Buffer) {
    let title = if f.workers.is_empty() {
        "sessions and waits"
    } else {
        "Citus workers, sessions and waits"
    };
    let block = boxed(title);
    let inner = block.inner(area);
    block.render(area, buf);
    let mut lines = bottom_lines(f, view);
    // A long line wraps; keep the lines that fit whole, and say how many are left out.
    let width = usize::from(inner.width).max(1);
    let rows = |l: &Line| l.width().max(1).div_ceil(width);
    let room = usize::from(inner.height);
    let total: usize = lines.iter().map(rows).sum();
    if total > room && room > 0 {
        let mut used = 1;
        let keep = lines
            .iter()
            .take_while(|l| {
                used += rows(l);
                used <= room
            })
            .count();
        let more = lines.len() - keep;
        lines.truncate(keep);
        lines.push(Line::from(format!(
            "(+{more} more; a taller terminal shows them)"
        )));
    }
    Paragraph::new(lines)
        .wrap(ratatui::widgets::Wrap { trim: false })
        .render(inner, buf);
}

const HELP: &[(&str, &str)] = &[
    ("q", "quit (exit 0); Ctrl-C exits 130"),
    ("p", "pause or resume the refresh"),
    ("?", "show or hide this help"),
    ("backlog", "expired completed keys evict may delete"),
    ("lag", "how long the oldest of them has waited"),
    ("inserted", "rows/s, the server's n_tup_ins"),
    ("evicted", "rows/s deleted, the server's n_tup_del"),
    ("stuck", "in_progress longer than --stuck-after"),
];

fn help_popup(area: Rect, buf: &mut Buffer) {
    let width = 60.min(area.width);
    let height = (HELP.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    Clear.render(popup, buf);
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, v)| {
            Line::from(vec![
                Span::styled(format!("{k:<10} "), bold()),
                Span::raw(*v),
            ])
        })
        .collect();
    Paragraph::new(lines)
        .block(boxed("help · ? closes"))
        .render(popup, buf);
}

/// The view as plain text, `width` columns wide, tall enough for every line (`--once`).
pub(crate) fn plain(view: &View, width: u16) -> String {
    let extra = view
        .frame
        .as_ref()
        .map_or(0, |f| bottom_lines(f, view).len().saturating_sub(4));
    let height = 24 + u16::try_from(extra).unwrap_or(100).min(200);
    let area = Rect::new(0, 0, width.max(60), height);
    let mut buf = Buffer::empty(area);
    draw(area, &mut buf, view);
    buffer_text(&buf)
}

/// A buffer's symbols, one line per row, trailing spaces and blank rows at the end left out.
pub(crate) fn buffer_text(buf: &Buffer) -> String {
    let width = usize::from(buf.area.width);
    let mut lines: Vec<String> = buf
        .content()
        .chunks(width.max(1))
        .map(|row| {
            let mut line = String::new();
            let mut skip = 0;
            for cell in row {
                // A wide character's second cell holds nothing of its own.
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                let sym = cell.symbol();
                line.push_str(sym);
                skip = unicode_width(sym).saturating_sub(1);
            }
            line.trim_end().to_owned()
        })
        .collect();
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Terminal columns a symbol takes (the view draws only narrow characters and boxes).
fn unicode_width(sym: &str) -> usize {
    ratatui::text::Span::raw(sym).width()
}

/// A key the view acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    Quit,
    /// Ctrl-C (the terminal is raw, so it arrives as a key, not SIGINT).
    Interrupt,
    Pause,
    Help,
    /// The terminal was resized: draw again.
    Redraw,
}

/// Read the next key, waiting at most `wait` (None when none came or it means nothing here).
pub(crate) fn read_key(wait: Duration) -> std::io::Result<Option<Key>> {
    use event::{Event, KeyCode, KeyEventKind, KeyModifiers};
    if !event::poll(wait)? {
        return Ok(None);
    }
    Ok(match event::read()? {
        Event::Key(k) if k.kind != KeyEventKind::Release => match k.code {
            KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                Some(Key::Interrupt)
            }
            KeyCode::Char('q' | 'Q') | KeyCode::Esc => Some(Key::Quit),
            KeyCode::Char('p' | 'P' | ' ') => Some(Key::Pause),
            KeyCode::Char('?' | 'h') => Some(Key::Help),
            // Debug builds only: F12 panics on purpose, so that a test can prove in a real terminal
            // that a panic leaves raw mode and the alternate screen before its message prints.
            #[cfg(debug_assertions)]
            KeyCode::F(12) => panic!("F12 pressed in a debug build"),
            _ => None,
        },
        Event::Resize(..) => Some(Key::Redraw),
        _ => None,
    })
}

/// The terminal while the view is on it: raw mode and the alternate screen, left again when this
/// is dropped, and by a panic before its message is printed.
pub(crate) struct Screen {
    /// Never dropped: ratatui's terminal, dropped, shows the cursor again and prints its own line
    /// to stderr when that fails (a terminal that has gone), beside idemctl's one error line.
    /// [`restore_terminal`] shows the cursor instead; the buffers go with the process.
    terminal: std::mem::ManuallyDrop<
        ratatui::Terminal<ratatui::backend::CrosstermBackend<std::io::Stdout>>,
    >,
}

/// Leave raw mode and the alternate screen, and show the cursor. Safe to call twice.
pub(crate) fn restore_terminal() {
    let _ = terminal::disable_raw_mode();
    let mut out = std::io::stdout();
    let _ = execute!(out, terminal::LeaveAlternateScreen, cursor::Show);
    let _ = out.flush();
}

impl Screen {
    /// Enter raw mode and the alternate screen; a panic from here on restores the terminal first.
    pub(crate) fn enter() -> std::io::Result<Screen> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
        }));
        terminal::enable_raw_mode()?;
        let mut out = std::io::stdout();
        if let Err(e) = execute!(out, terminal::EnterAlternateScreen, cursor::Hide) {
            restore_terminal();
            return Err(e);
        }
        let terminal = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(out))
            .inspect_err(|_| restore_terminal())?;
        Ok(Screen {
            terminal: std::mem::ManuallyDrop::new(terminal),
        })
    }

    /// Draw the view.
    pub(crate) fn draw(&mut self, view: &View) -> std::io::Result<()> {
        self.terminal
            .draw(|f| draw(f.area(), f.buffer_mut(), view))
            .map(|_| ())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore_terminal();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Citus note reads the same in the view and in the JSON document.
    #[test]
    fn the_citus_note_is_worded_once_for_the_view_and_json() {
        let n = TopNote::CoordinatorSessionsOnly;
        let text =
            "on Citus, sessions and row waits are the coordinator's; the workers' are not listed";
        assert_eq!(n.text(), text);
        assert_eq!(serde_json::to_string(&n).unwrap(), format!("\"{text}\""));
    }

    fn frame() -> Frame {
        Frame {
            table: "public.idempotency_keys".into(),
            taken_at: OffsetDateTime::UNIX_EPOCH,
            backlog: Some(Count {
                count: 12_345,
                at_least: false,
            }),
            backlog_estimate: None,
            eviction_lag_seconds: Some(192.0),
            eviction_lag_estimated_seconds: None,
            eviction_lag_at_most: false,
            insert_per_second: Some(240.0),
            evict_per_second: Some(180.0),
            rate_seconds: Some(10.0),
            oldest_live: Some(KeyFig {
                api_key_id: Some("t\x1b[2J".into()),
                scope: None,
                key: Some("k\n1".into()),
                seconds: 3600.0,
            }),
            oldest_expired: None,
            stuck_after_seconds: 300.0,
            stuck: Some(Count {
                count: 2,
                at_least: false,
            }),
            oldest_stuck: None,
            ttl: Some(TtlFig {
                keys: 10,
                fixed_seconds: None,
                p50_seconds: 86_400.0,
                buckets: vec![(Some(60.0), 0), (Some(86_400.0), 3), (None, 7)],
            }),
            estimated_rows: 1_000,
            total_bytes: 1 << 20,
            heap_bytes: 1 << 19,
            index_bytes: 1 << 19,
            dead_tuples: 10,
            dead_tuple_ratio: 0.01,
            last_vacuum: None,
            sessions: Vec::new(),
            row_waits: Vec::new(),
            workers: Vec::new(),
            pooled: false,
            notes: Vec::new(),
            refresh_ms: 3.0,
        }
    }

    fn view() -> View {
        View {
            frame: Some(frame()),
            trends: Trends::default(),
            status: Status::Live,
            interval: Duration::from_secs(2),
            help: false,
            color: false,
            once: true,
            recovered: None,
            back_at: None,
        }
    }

    #[test]
    fn untrusted_names_are_escaped_where_drawn() {
        let text = plain(&view(), 80);
        assert!(text.contains("t\\x1b[2J/k\\n1"), "{text}");
        assert!(!text.contains('\x1b'), "{text}");
    }

    #[test]
    fn the_view_fits_80_by_24() {
        let text = plain(&view(), 80);
        assert!(text.lines().count() <= 24, "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert!(text.contains("12,345"), "{text}");
        assert!(text.contains("0.75\n") || text.contains("0.75 "), "{text}");
    }

    #[test]
    fn eviction_falls_behind_only_while_the_lag_or_the_counted_backlog_grows() {
        let mut v = view();
        v.trends.backlog = vec![Some(100), Some(100)];
        assert!(!plain(&v, 80).contains("falling behind"));
        v.trends.backlog = vec![Some(100), Some(120)];
        let text = plain(&v, 80);
        assert!(text.contains("0.75  falling behind"), "{text}");
        v.trends.backlog = vec![Some(100), Some(100)];
        v.trends.lag = vec![Some(60), Some(62)];
        assert!(plain(&v, 80).contains("0.75  falling behind"));
        v.trends.lag = vec![Some(62), Some(60)];
        assert!(!plain(&v, 80).contains("falling behind"));
        // A lag that became known, or known between gaps, is no growth by itself.
        v.trends.lag = vec![None, Some(60)];
        assert!(!plain(&v, 80).contains("falling behind"));
        v.trends.lag = vec![Some(60), None, Some(62), None];
        assert!(plain(&v, 80).contains("0.75  falling behind"));
        v.frame.as_mut().unwrap().evict_per_second = Some(240.0);
        assert!(plain(&v, 80).contains("1.00  keeps up"));
    }

    #[test]
    fn a_trend_is_drawn_from_its_lowest_value_or_from_zero() {
        let some = |v: &[u64]| v.iter().copied().map(Some).collect::<Vec<_>>();
        assert_eq!(
            sparkline_data(&some(&[100, 104, 108]), true),
            (some(&[8, 36, 64]), 64)
        );
        assert_eq!(sparkline_data(&some(&[7, 7]), true), (some(&[1, 1]), 8));
        assert_eq!(sparkline_data(&some(&[0, 5]), false), (some(&[0, 5]), 5));
        assert_eq!(sparkline_data(&[], false), (vec![], 1));
    }

    #[test]
    fn a_value_not_known_is_a_gap_in_its_trend_and_does_not_set_the_scale() {
        assert_eq!(
            sparkline_data(&[Some(100), None, Some(108)], true),
            (vec![Some(8), None, Some(64)], 64)
        );
        assert_eq!(
            sparkline_data(&[None, Some(7), None], true),
            (vec![None, Some(1), None], 8)
        );
        assert_eq!(sparkline_data(&[None, None], true), (vec![None, None], 8));
        assert_eq!(
            sparkline_data(&[Some(5), None], false),
            (vec![Some(5), None], 5)
        );
    }

    /// The lag's line as drawn: the columns of its trend.
    fn lag_trend(text: &str) -> String {
        let line = text
            .lines()
            .find(|l| l.starts_with("│lag "))
            .unwrap_or_else(|| panic!("no lag line:\n{text}"));
        line.chars().skip(41).take_while(|c| *c != '│').collect()
    }

    /// The value drawn beside `label` in the eviction box.
    fn figure(text: &str, label: &str) -> String {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("│{label} ")))
            .unwrap_or_else(|| panic!("no {label} line:\n{text}"));
        line.chars()
            .skip(20)
            .take(21)
            .collect::<String>()
            .trim()
            .to_owned()
    }

    #[test]
    fn figures_that_cannot_be_measured_show_the_planners_estimate_or_unknown() {
        let mut v = view();
        let f = v.frame.as_mut().unwrap();
        f.eviction_lag_seconds = None;
        f.backlog = None;
        assert_eq!(figure(&plain(&v, 80), "lag"), "unknown");
        assert_eq!(figure(&plain(&v, 80), "backlog"), "not counted");
        let f = v.frame.as_mut().unwrap();
        f.eviction_lag_estimated_seconds = Some(183_600.0);
        f.backlog_estimate = Some(41_250);
        assert_eq!(figure(&plain(&v, 80), "lag"), "~2d 3h (estimate)");
        assert_eq!(figure(&plain(&v, 80), "backlog"), "~41,250 (estimate)");
    }

    #[test]
    fn an_unknown_lag_is_drawn_as_a_gap_not_as_a_bar() {
        let mut v = view();
        v.frame.as_mut().unwrap().eviction_lag_seconds = None;
        v.trends.lag = vec![Some(60), None, None, Some(60)];
        let text = plain(&v, 80);
        assert_eq!(lag_trend(&text).trim_end(), "▁  ▁", "{text}");
        v.trends.lag = vec![Some(60), Some(0), None, Some(120)];
        assert_eq!(lag_trend(&plain(&v, 80)).trim_end(), "▄▁ █");
    }

    #[test]
    fn thousands_separate() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(-999), "-999");
        assert_eq!(thousands(0), "0");
    }
}

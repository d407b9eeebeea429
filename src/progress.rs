//! The progress bar on an attended terminal (stderr): rows deleted out of the backlog counted at
//! the start (exactly up to a cap, else "at least" the cap), the rate, and the time left as far as
//! it is known. Hidden under cron, with --quiet and with machine-readable output.

use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress display that may be hidden. One bar can be shared by parts of a run that count on
/// their own (the shards of a Citus table, each with its own workers): see [`Progress::part`].
pub(crate) struct Progress {
    bar: ProgressBar,
    started: std::time::Instant,
    /// What the run is expected to evict (None: unknown), and when it must end (--max-runtime).
    goal: Option<Goal>,
    deadline: Option<std::time::Instant>,
    /// The pace in effect, shown after the rate (evict's adaptive pace); shared by the parts.
    pace: Arc<Mutex<String>>,
    /// Rows and skipped rows every part of the bar has reported, added up.
    total: Arc<Mutex<Counts>>,
    /// What this part reported last.
    mine: Mutex<Counts>,
}

/// The rows a run is expected to evict: the backlog counted at the start up to a cap (`at_least`
/// when the count stopped there), or a --max-rows budget below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Goal {
    pub rows: u64,
    pub at_least: bool,
}

impl Goal {
    /// The goal of a run that counted `counted` (`at_least` when capped) and may evict at most
    /// `max_rows`.
    pub(crate) fn new(counted: u64, at_least: bool, max_rows: Option<u64>) -> Goal {
        match max_rows {
            Some(max) if max <= counted => Goal {
                rows: max,
                at_least: false,
            },
            _ => Goal {
                rows: counted,
                at_least,
            },
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Counts {
    rows: u64,
    skipped: u64,
}

impl Progress {
    fn with_bar(bar: ProgressBar) -> Progress {
        Progress {
            bar,
            started: std::time::Instant::now(),
            goal: None,
            deadline: None,
            pace: Arc::default(),
            total: Arc::default(),
            mine: Mutex::default(),
        }
    }

    /// A bar that draws nothing.
    pub(crate) fn hidden() -> Progress {
        Progress::with_bar(ProgressBar::hidden())
    }

    /// A part of this bar: its counts (`set`) are added to every other part's on the same bar;
    /// the rate counts from this bar's start.
    pub(crate) fn part(&self) -> Progress {
        Progress {
            bar: self.bar.clone(),
            started: self.started,
            goal: self.goal,
            deadline: self.deadline,
            pace: self.pace.clone(),
            total: self.total.clone(),
            mine: Mutex::default(),
        }
    }

    /// A bar on stderr towards `goal` (None: unknown, drawn as a spinner), for a run that ends
    /// at `deadline` at the latest.
    pub(crate) fn rows(goal: Option<Goal>, deadline: Option<std::time::Instant>) -> Progress {
        let length = goal.map_or(1, |g| g.rows.max(1));
        let bar = ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::stderr());
        let template = match goal {
            Some(_) => "{spinner} evicted {human_pos} of {prefix} rows [{wide_bar}] {msg}",
            None => "{spinner} evicted {human_pos} rows {msg}",
        };
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        if let Some(g) = goal {
            bar.set_prefix(goal_text(g, 0));
        }
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        let mut progress = Progress::with_bar(bar);
        progress.goal = goal;
        progress.deadline = deadline;
        progress
    }

    /// Update this part's counts (rows evicted and skipped so far); the bar shows every part's.
    pub(crate) fn set(&self, rows: u64, skipped: u64) {
        // Held to the end, so that parts reporting at once draw their sums in order.
        let Ok(mut total) = self.total.lock() else {
            return;
        };
        if let Ok(mut mine) = self.mine.lock() {
            total.rows = (total.rows + rows).saturating_sub(mine.rows);
            total.skipped = (total.skipped + skipped).saturating_sub(mine.skipped);
            *mine = Counts { rows, skipped };
        }
        let Counts { rows, skipped } = *total;
        // The text first, then the position: a position drawn at once is drawn with its text.
        if let Some(g) = self.goal {
            self.bar.set_prefix(goal_text(g, rows));
        }
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { rows as f64 / secs } else { 0.0 };
        let until_deadline = self.deadline.map(|d| {
            d.saturating_duration_since(std::time::Instant::now())
                .as_secs_f64()
        });
        let mut msg = format!(
            "{rate:.0} rows/s, {}",
            time_left(self.goal, rows, rate, until_deadline)
        );
        if skipped > 0 {
            msg.push_str(&format!(", {skipped} skipped (held by live requests)"));
        }
        if let Ok(pace) = self.pace.lock()
            && !pace.is_empty()
        {
            msg.push_str(&format!("; {pace}"));
        }
        self.bar.set_message(msg);
        if rows > self.bar.length().unwrap_or(0) {
            self.bar.set_length(rows);
        }
        self.bar.set_position(rows);
    }

    /// The pace to show from the next update on (empty = none).
    pub(crate) fn set_pace(&self, pace: String) {
        if let Ok(mut p) = self.pace.lock() {
            *p = pace;
        }
    }

    /// Show a message in place of the rate until the next update (e.g. why the run is paused).
    pub(crate) fn note(&self, message: &str) {
        self.bar.set_message(message.to_owned());
    }

    /// Remove the bar.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// The goal as the bar shows it after `rows`: exact, "at least" the cap while the count may be
/// short, and the rows evicted once they pass a capped count (keys that expired during the run
/// pass an exact one too).
fn goal_text(g: Goal, rows: u64) -> String {
    use indicatif::HumanCount;
    match g {
        _ if rows > g.rows => format!("{} so far", HumanCount(rows)),
        Goal {
            rows: n,
            at_least: true,
        } => format!("at least {}", HumanCount(n)),
        Goal { rows: n, .. } => HumanCount(n).to_string(),
    }
}

/// The time left, as far as it is known: the rows left at the rate so far, a lower bound while a
/// capped count may be short, unknown past it, and never past --max-runtime's end.
fn time_left(goal: Option<Goal>, rows: u64, rate: f64, until_deadline: Option<f64>) -> String {
    use crate::output::human_secs;
    let by_rows = match goal {
        Some(g) if rate > 0.0 && rows < g.rows => Some(((g.rows - rows) as f64 / rate, g.at_least)),
        Some(Goal {
            at_least: false, ..
        }) if rows > 0 => Some((0.0, false)),
        _ => None,
    };
    match (by_rows, until_deadline) {
        (Some((secs, _)), Some(end)) if end < secs => {
            format!("at most {} left (--max-runtime)", human_secs(end))
        }
        (Some((secs, false)), _) => format!("about {} left", human_secs(secs)),
        (Some((secs, true)), _) => format!("at least {} left", human_secs(secs)),
        (None, Some(end)) => format!(
            "time left unknown, at most {} (--max-runtime)",
            human_secs(end)
        ),
        (None, None) => "time left unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Goal, Progress, goal_text, time_left};

    #[test]
    fn the_time_left_says_what_is_known() {
        let exact = Some(Goal::new(1_000, false, None));
        let capped = Some(Goal::new(100_000, true, None));
        assert_eq!(time_left(exact, 400, 100.0, None), "about 6s left");
        assert_eq!(time_left(exact, 1_000, 100.0, None), "about 0s left");
        assert_eq!(time_left(exact, 0, 0.0, None), "time left unknown");
        assert_eq!(time_left(capped, 40_000, 1_000.0, None), "at least 1m left");
        assert_eq!(
            time_left(capped, 100_000, 1_000.0, None),
            "time left unknown"
        );
        assert_eq!(time_left(None, 5, 1.0, None), "time left unknown");
        assert_eq!(
            time_left(exact, 400, 1.0, Some(30.0)),
            "at most 30s left (--max-runtime)"
        );
        assert_eq!(
            time_left(capped, 100_500, 1.0, Some(30.0)),
            "time left unknown, at most 30s (--max-runtime)"
        );
        assert_eq!(time_left(exact, 400, 100.0, Some(30.0)), "about 6s left");
    }

    #[test]
    fn the_goal_is_the_count_or_the_row_budget() {
        assert_eq!(goal_text(Goal::new(158_000, false, None), 0), "158,000");
        assert_eq!(
            goal_text(Goal::new(100_000, true, None), 0),
            "at least 100,000"
        );
        assert_eq!(
            goal_text(Goal::new(100_000, true, None), 100_200),
            "100,200 so far"
        );
        assert_eq!(
            Goal::new(100_000, true, Some(5_000)),
            Goal {
                rows: 5_000,
                at_least: false
            }
        );
        assert_eq!(
            Goal::new(100, false, Some(5_000)),
            Goal {
                rows: 100,
                at_least: false
            }
        );
    }

    #[test]
    fn parts_of_a_bar_add_up() {
        let bar = Progress::hidden();
        let (a, b) = (bar.part(), bar.part());
        a.set(10, 1);
        b.set(5, 0);
        a.set(20, 3);
        assert_eq!(bar.bar.position(), 25);
        let total = |p: &Progress| {
            let t = *p.total.lock().unwrap();
            (t.rows, t.skipped)
        };
        assert_eq!(total(&bar), (25, 3));
        b.set(5, 2);
        assert_eq!(total(&bar), (25, 5));
        // A bar without parts counts as one.
        let single = Progress::hidden();
        single.set(7, 0);
        single.set(9, 1);
        assert_eq!(single.bar.position(), 9);
    }
}

//! The progress bar on an attended terminal (stderr): rows deleted, rate, estimate of what is left.
//! Hidden under cron, with --quiet and with machine-readable output.

use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress display that may be hidden. One bar can be shared by parts of a run that count on
/// their own (the shards of a Citus table, each with its own workers): see [`Progress::part`].
pub struct Progress {
    bar: ProgressBar,
    started: std::time::Instant,
    /// The pace in effect, shown after the rate (evict's adaptive pace); shared by the parts.
    pace: Arc<Mutex<String>>,
    /// Rows and skipped rows every part of the bar has reported, added up.
    total: Arc<Mutex<Counts>>,
    /// What this part reported last.
    mine: Mutex<Counts>,
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
            pace: Arc::default(),
            total: Arc::default(),
            mine: Mutex::default(),
        }
    }

    /// A bar that draws nothing.
    pub fn hidden() -> Progress {
        Progress::with_bar(ProgressBar::hidden())
    }

    /// A part of this bar: its counts (`set`) are added to every other part's on the same bar;
    /// the rate counts from this bar's start.
    pub fn part(&self) -> Progress {
        Progress {
            bar: self.bar.clone(),
            started: self.started,
            pace: self.pace.clone(),
            total: self.total.clone(),
            mine: Mutex::default(),
        }
    }

    /// A bar for `estimate` rows (the planner's estimate; 0 = unknown) on stderr.
    pub fn rows(estimate: u64) -> Progress {
        let bar =
            ProgressBar::with_draw_target(Some(estimate.max(1)), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{spinner} evicted {human_pos} of ~{human_len} rows [{wide_bar}] {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        Progress::with_bar(bar)
    }

    /// Update this part's counts (rows evicted and skipped so far); the bar shows every part's.
    pub fn set(&self, rows: u64, skipped: u64) {
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
        if rows > self.bar.length().unwrap_or(0) {
            self.bar.set_length(rows);
        }
        self.bar.set_position(rows);
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { rows as f64 / secs } else { 0.0 };
        let left = self.bar.length().unwrap_or(rows).saturating_sub(rows);
        let eta = if rate > 0.0 { left as f64 / rate } else { 0.0 };
        let mut msg = format!(
            "{rate:.0} rows/s, about {} left",
            crate::output::human_secs(eta)
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
    }

    /// The pace to show from the next update on (empty = none).
    pub fn set_pace(&self, pace: String) {
        if let Ok(mut p) = self.pace.lock() {
            *p = pace;
        }
    }

    /// Show a message in place of the rate until the next update (e.g. why the run is paused).
    pub fn note(&self, message: &str) {
        self.bar.set_message(message.to_owned());
    }

    /// Remove the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Progress;

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

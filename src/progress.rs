//! The progress bar on an attended terminal (stderr): rows deleted, rate, estimate of what is left.
//! Hidden under cron, with --quiet and with machine-readable output.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress display that may be hidden.
pub struct Progress {
    bar: ProgressBar,
    started: std::time::Instant,
    /// The pace in effect, shown after the rate (evict's adaptive pace).
    pace: std::sync::Mutex<String>,
}

impl Progress {
    /// A bar that draws nothing.
    pub fn hidden() -> Progress {
        Progress {
            bar: ProgressBar::hidden(),
            started: std::time::Instant::now(),
            pace: std::sync::Mutex::default(),
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
        Progress {
            bar,
            started: std::time::Instant::now(),
            pace: std::sync::Mutex::default(),
        }
    }

    /// Update the counts.
    pub fn set(&self, rows: u64, skipped: u64) {
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

//! The progress bar on an attended terminal (stderr): rows deleted, rate, estimate of what is left.
//! Hidden under cron, with --quiet and with machine-readable output.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress display that may be hidden.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar that draws nothing.
    pub fn hidden() -> Progress {
        Progress {
            bar: ProgressBar::hidden(),
        }
    }

    /// A bar for `estimate` rows (the planner's estimate; 0 = unknown) on stderr.
    pub fn rows(estimate: u64) -> Progress {
        let bar =
            ProgressBar::with_draw_target(Some(estimate.max(1)), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{spinner} evicted {human_pos} of ~{human_len} rows [{wide_bar}] {per_sec}, about {eta} left {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        Progress { bar }
    }

    /// Update the counts.
    pub fn set(&self, rows: u64, skipped: u64) {
        if rows > self.bar.length().unwrap_or(0) {
            self.bar.set_length(rows);
        }
        self.bar.set_position(rows);
        if skipped > 0 {
            self.bar
                .set_message(format!("({skipped} skipped: locked by live requests)"));
        }
    }

    /// Remove the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

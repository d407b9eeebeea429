//! Where a run's metrics go and how every run records itself: the destinations (`--textfile`,
//! `--pushgateway`) checked before any change, the labels every series carries (`database`,
//! `table`, each `--label`), and the run series (last run, success, end reason, duration,
//! last success kept across failures), written even when the run fails before it starts.

pub(crate) mod catalogue;
pub(crate) mod push;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use time::OffsetDateTime;

use crate::domain::TableName;
use crate::exit::{Exit, classify, fail};
use crate::output::prometheus::{self, Metrics};
use crate::report::run::EndReason;
pub(crate) use crate::report::run::{RunEnd, Unwritten};

pub(crate) use catalogue::Series;
pub(crate) use push::{GatewayArgs, PushUrl};

/// The metrics options of evict, reclaim and stats, once parsed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Destinations {
    pub textfile: Option<PathBuf>,
    pub pushgateway: GatewayArgs,
    pub labels: Vec<(String, String)>,
}

/// Records one run's metrics. Cheap to clone; a default recorder has no destination (and writes
/// nothing), but still knows the labels for `stats -o prometheus`.
#[derive(Clone, Default)]
pub(crate) struct Recorder {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    command: &'static str,
    dest: Destinations,
    gateway: Option<push::Gateway>,
    database: String,
    table: Mutex<String>,
    started_at: OffsetDateTime,
    started: Instant,
    /// The last success read back from the textfile before the run.
    previous_success: Option<f64>,
    /// The run has recorded itself.
    done: Mutex<bool>,
    /// The textfile could not be written.
    unwritten: Mutex<Option<Unwritten>>,
}

impl Recorder {
    /// Check the destinations (before any change) and start timing the run. `database` is the
    /// database idemctl connects to; `table` the --table as given (replaced by the resolved name
    /// once known).
    pub(crate) fn new(
        command: &'static str,
        dest: Destinations,
        database: &str,
        table: &TableName,
    ) -> Result<Recorder> {
        let previous_success = match &dest.textfile {
            Some(path) => {
                prometheus::check_writable(path).map_err(|why| {
                    fail(
                        Exit::Usage,
                        format!("cannot write metrics to {}: {why}", path.display()),
                    )
                })?;
                previous_success(path, command)
            }
            None => None,
        };
        let gateway =
            push::Gateway::new(&dest.pushgateway).map_err(|why| fail(Exit::Usage, why))?;
        let table = match &table.schema {
            Some(_) => table.to_string(),
            None => format!("public.{}", table.name),
        };
        Ok(Recorder {
            inner: Some(Arc::new(Inner {
                command,
                dest,
                gateway,
                database: database.to_owned(),
                table: Mutex::new(table),
                started_at: OffsetDateTime::now_utc(),
                started: Instant::now(),
                previous_success,
                done: Mutex::new(false),
                unwritten: Mutex::new(None),
            })),
        })
    }

    /// Whether metrics are written or pushed at the end of the run.
    pub(crate) fn enabled(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.dest.textfile.is_some() || i.gateway.is_some())
    }

    /// The table's resolved name, for the `table` label.
    pub(crate) fn set_table(&self, display: &str) {
        if let Some(i) = &self.inner {
            *i.table.lock().unwrap_or_else(|e| e.into_inner()) = display.to_owned();
        }
    }

    /// The labels every series carries: database, table, then each --label.
    pub(crate) fn common_labels(&self) -> Vec<(String, String)> {
        let Some(i) = &self.inner else {
            return Vec::new();
        };
        let mut labels = vec![
            ("database".to_owned(), i.database.clone()),
            (
                "table".to_owned(),
                i.table.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            ),
        ];
        labels.extend(i.dest.labels.iter().cloned());
        labels
    }

    /// The exposition text of `body` with the common labels.
    pub(crate) fn render(&self, body: &Metrics) -> String {
        body.render(&self.common_labels())
    }

    /// Record the run: the run series plus `body`, to the textfile and the Pushgateway. A push
    /// that fails is a warning (the run's outcome stands); a textfile that cannot be written is
    /// kept for [`Recorder::unwritten`]: the run still reports what it did, then says so.
    pub(crate) async fn finish(&self, end: RunEnd, body: Metrics) -> Result<()> {
        let Some(i) = &self.inner else {
            return Ok(());
        };
        {
            let mut done = i.done.lock().unwrap_or_else(|e| e.into_inner());
            if *done {
                return Ok(());
            }
            *done = true;
        }
        if !self.enabled() {
            return Ok(());
        }
        let now = unix_now();
        let mut m = run_series(i, end, now);
        m.extend(body);
        let common = self.common_labels();
        if let Some(gateway) = &i.gateway {
            let mut pushed = m.clone();
            // A failed run is pushed with POST, which keeps the group's other metrics: the last
            // success stays what the last successful run pushed.
            if !end.success {
                pushed.remove(&Series::LastSuccessTimestamp.name(i.command));
            }
            let job = format!("idemctl_{}", i.command);
            if let Err(e) = gateway
                .push(&job, &common, pushed.render(&common), end.success)
                .await
            {
                crate::output::warn(&crate::domain::one_line(&e));
            }
        }
        if let Some(path) = &i.dest.textfile
            && let Err(e) = prometheus::write_atomic(path, &m.render(&common))
        {
            *i.unwritten.lock().unwrap_or_else(|e| e.into_inner()) = Some(Unwritten {
                command: i.command,
                end,
                why: format!(
                    "--textfile {}: {}",
                    path.display(),
                    crate::domain::one_line(&e)
                ),
            });
        }
        Ok(())
    }

    /// The metrics the run could not write, if so.
    pub(crate) fn unwritten(&self) -> Option<Unwritten> {
        let i = self.inner.as_ref()?;
        i.unwritten
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Record a run that ended with `err` before recording itself (it failed to connect, lacked a
    /// privilege, found no table, or another run held the lock). A failure to write is a warning:
    /// `err` is what the operator must see.
    pub(crate) async fn finish_failed(&self, err: &anyhow::Error) {
        if let Err(e) = self.finish(failed_end(err), Metrics::default()).await {
            crate::output::warn(&crate::domain::one_line(&e));
        }
    }
}

/// The end of a run that failed with `err`.
pub(crate) fn failed_end(err: &anyhow::Error) -> RunEnd {
    let reason = match classify(err) {
        Exit::CannotConnect => EndReason::CannotConnect,
        Exit::PermissionDenied => EndReason::PermissionDenied,
        Exit::NotFound => EndReason::TableNotFound,
        Exit::LockBusy => EndReason::LockBusy,
        Exit::Interrupted => EndReason::Interrupted,
        _ => EndReason::Error,
    };
    RunEnd {
        success: false,
        reason,
        reasons: &[],
        rows: None,
    }
}

fn unix_now() -> f64 {
    let now = OffsetDateTime::now_utc();
    now.unix_timestamp() as f64 + f64::from(now.millisecond()) / 1000.0
}

/// The series every run writes about itself.
fn run_series(i: &Inner, end: RunEnd, now: f64) -> Metrics {
    let c = i.command;
    let mut m = Metrics::default();
    m.set_run(c, Series::LastRunTimestamp, &[], now);
    let started = i.started_at.unix_timestamp();
    m.set_run(c, Series::LastRunStartTimestamp, &[], started);
    let last_success = if end.success {
        Some(now)
    } else {
        i.previous_success
    };
    if let Some(t) = last_success {
        m.set_run(c, Series::LastSuccessTimestamp, &[], t);
    }
    m.set_run(c, Series::LastRunSuccess, &[], end.success);
    let took = i.started.elapsed().as_secs_f64();
    m.set_run(c, Series::Duration, &[], took);
    let mut reasons: Vec<EndReason> = end.reasons.to_vec();
    for r in EndReason::FAILURES.iter().chain([&end.reason]) {
        if !reasons.contains(r) {
            reasons.push(*r);
        }
    }
    for r in reasons {
        m.set_run(c, Series::EndReason, &[r.as_str()], r == end.reason);
    }
    m
}

/// Keep the last-success timestamp across a failed run by reading it back from the previous file.
fn previous_success(path: &Path, command: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    prometheus::read_value(&text, &Series::LastSuccessTimestamp.name(command))
}

/// Parse `--label KEY=VALUE`.
pub(crate) fn parse_label(s: &str) -> std::result::Result<(String, String), String> {
    let Some((k, v)) = s.split_once('=') else {
        return Err("expected KEY=VALUE, e.g. --label cluster=eu1".into());
    };
    prometheus::check_label_name(k)?;
    if v.is_empty() {
        return Err(format!(
            "label {k} has an empty value, which Prometheus treats as no label; give a value"
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(format!("label {k} has a control character in its value"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_and_reject_bad_input() {
        assert_eq!(
            parse_label("cluster=eu 1").unwrap(),
            ("cluster".into(), "eu 1".into())
        );
        assert_eq!(
            parse_label("k=a=\"b\"").unwrap(),
            ("k".into(), "a=\"b\"".into())
        );
        assert!(parse_label("cluster").is_err());
        assert!(parse_label("cluster=").is_err());
        assert!(parse_label("table=x").is_err());
        assert!(parse_label("bad-name=x").is_err());
        assert!(parse_label("k=a\nb").is_err());
    }
}

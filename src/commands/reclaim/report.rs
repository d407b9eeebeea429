//! The summary of a writing run, its metrics and when it prints.

use anyhow::Result;
use serde::Serialize;

use super::plan::PlanRow;
use super::request::{LIST_CAP, Mode, Request};
use crate::context::Context;
use crate::db::KeyTable;
use crate::db::batch;
use crate::db::reclaim as reclaim_db;
use crate::domain::ReclaimAction;
use crate::exit::Exit;
use crate::metrics::RunEnd;
use crate::metrics::Series;
use crate::output::prometheus::Metrics;
use crate::output::reclaim as output;
use crate::report::rows::Capped;
use crate::report::run::EndReason;

/// Why apply leaves a plan row alone (held: a live owner holds it; filtered: it does not match the
/// filters).
pub(super) const LEFT_ALONE_REASONS: [&str; 7] = [
    "gone",
    "filtered",
    "completed",
    "other_state",
    "changed",
    "too_young",
    "held",
];

/// A key identified for the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KeyId {
    /// None on a table without a tenant column (null in JSON).
    pub(crate) api_key_id: Option<String>,
    pub(crate) key: String,
}

/// A plan row that apply left alone, and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LeftAlone {
    /// None on a table without a tenant column (null in JSON).
    pub(crate) api_key_id: Option<String>,
    pub(crate) key: String,
    /// gone, filtered, completed, other_state, changed, too_young or held.
    pub(crate) reason: String,
    /// The row's state when apply looked, if it still exists.
    pub(crate) state: Option<String>,
}

/// The summary of a writing run (also the JSON document).
#[derive(Debug, Serialize)]
pub(crate) struct ReclaimReport {
    pub(crate) table: String,
    pub(crate) action: ReclaimAction,
    pub(crate) older_than_seconds: f64,
    /// The filters the run was limited to (null without any).
    #[serde(serialize_with = "filter_or_null")]
    pub(crate) filter: reclaim_db::Filter,
    pub(crate) response_status: Option<i32>,
    /// `--action fail`: each failed key is kept at least this long from when it was failed.
    pub(crate) keep_failed_for_seconds: Option<f64>,
    pub(crate) plan_file: Option<String>,
    pub(crate) end_reason: EndReason,
    pub(crate) rows_reclaimed: u64,
    pub(crate) batches: u64,
    pub(crate) elapsed_seconds: f64,
    /// Stuck keys skipped because their owner holds the row lock (it is alive).
    pub(crate) skipped_live_owner: Option<Capped>,
    /// Stuck keys still in the table after the run (sweep only).
    pub(crate) stuck_left: Option<Capped>,
    /// Plan rows apply did not reclaim, with why.
    pub(crate) left_alone: Vec<LeftAlone>,
    /// The keys reclaimed (the first LIST_CAP).
    pub(crate) reclaimed: Vec<KeyId>,
    pub(crate) reclaimed_listing_truncated: bool,
}

impl ReclaimReport {
    pub(super) fn new(table: &KeyTable, req: &Request) -> ReclaimReport {
        ReclaimReport {
            table: table.qualified_name(),
            action: req.action,
            older_than_seconds: req.older_than,
            filter: req.filter.clone(),
            response_status: req.body.as_ref().map(|_| req.status),
            keep_failed_for_seconds: (req.action == ReclaimAction::Fail
                && !table.profile.expires_by_ttl())
            .then_some(req.keep_failed),
            plan_file: match &req.mode {
                Mode::Apply(p, _) => Some(p.display().to_string()),
                _ => None,
            },
            end_reason: EndReason::Drained,
            rows_reclaimed: 0,
            batches: 0,
            elapsed_seconds: 0.0,
            skipped_live_owner: None,
            stuck_left: None,
            left_alone: Vec::new(),
            reclaimed: Vec::new(),
            reclaimed_listing_truncated: false,
        }
    }

    pub(super) fn add_reclaimed(&mut self, key: KeyId) {
        self.rows_reclaimed += 1;
        if self.reclaimed.len() < usize::try_from(LIST_CAP).unwrap_or(usize::MAX) {
            self.reclaimed.push(key);
        } else {
            self.reclaimed_listing_truncated = true;
        }
    }

    /// Wrap a batch failure with what had already been done (those batches are committed).
    pub(super) fn batch_error(&self, e: anyhow::Error) -> anyhow::Error {
        if e.is::<batch::HeldReferenceRow>() {
            return e.context(format!(
                "batch {} was rolled back ({} keys were reclaimed by earlier batches)",
                self.batches + 1,
                self.rows_reclaimed
            ));
        }
        let why = if batch::Failure::of(&e) == batch::Failure::LockTimeout {
            format!(
                "could not get a lock another session holds in {} tries (a live transaction holds a row it needs, or DDL holds the table)",
                batch::TRIES
            )
        } else {
            "failed".to_owned()
        };
        e.context(format!(
            "batch {} {why} and was rolled back ({} keys were reclaimed by earlier batches); run reclaim again",
            self.batches + 1,
            self.rows_reclaimed
        ))
    }

    /// Count each plan row as reclaimed or left alone (with why).
    pub(super) fn record_outcomes(
        &mut self,
        chunk: &[PlanRow],
        outcomes: Vec<(String, Option<String>)>,
    ) {
        for (row, (reason, state)) in chunk.iter().zip(outcomes) {
            let (api_key_id, key) = (row.api_key_id.clone(), row.key.clone());
            if reason == "reclaimed" {
                self.add_reclaimed(KeyId { api_key_id, key });
            } else {
                self.left_alone.push(LeftAlone {
                    api_key_id,
                    key,
                    reason,
                    state,
                });
            }
        }
    }

    /// How the run ends, for the run series.
    pub(super) fn run_end(&self) -> RunEnd {
        RunEnd {
            success: self.end_reason != EndReason::Interrupted,
            reason: self.end_reason,
            reasons: EndReason::RECLAIM,
            rows: Some((self.rows_reclaimed, "keys reclaimed")),
        }
    }

    /// The run's own figures: keys reclaimed by action, keys left alone by reason.
    pub(super) fn metrics(&self) -> Metrics {
        let mut m = Metrics::default();
        for action in [
            ReclaimAction::Delete,
            ReclaimAction::Fail,
            ReclaimAction::Release,
        ] {
            let n = if action == self.action {
                self.rows_reclaimed
            } else {
                0
            };
            m.set_labelled(Series::ReclaimKeysReclaimed, &[action.as_str()], n);
        }
        let held = self.skipped_live_owner.map_or(0, |c| c.count);
        for reason in LEFT_ALONE_REASONS {
            let n = if reason == "held" {
                u64::try_from(held).unwrap_or(0)
            } else {
                self.left_alone
                    .iter()
                    .filter(|l| l.reason == reason)
                    .count() as u64
            };
            m.set_labelled(Series::ReclaimKeysLeftAlone, &[reason], n);
        }
        if let Some(left) = self.stuck_left {
            m.set(Series::ReclaimStuckLeft, left.count);
        }
        m
    }

    pub(super) fn exit(&self) -> Exit {
        match self.end_reason {
            EndReason::Interrupted => Exit::Interrupted,
            _ => Exit::Success,
        }
    }
}

/// The filters for JSON output: null without any.
pub(super) fn filter_or_null<S: serde::Serializer>(
    f: &reclaim_db::Filter,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    if f.is_empty() {
        s.serialize_none()
    } else {
        f.serialize(s)
    }
}

pub(super) fn print_report(ctx: &Context, r: &ReclaimReport) -> Result<()> {
    // A run that found nothing to do is routine: silent under cron.
    let idle =
        r.rows_reclaimed == 0 && r.left_alone.is_empty() && r.end_reason == EndReason::Drained;
    if !ctx.prints_summary(!idle) {
        return Ok(());
    }
    ctx.output
        .emit(&output::summary(r), &serde_json::to_value(r)?)?;
    Ok(())
}

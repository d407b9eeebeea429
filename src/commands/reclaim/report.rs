//! The summary of a writing run, its metrics and when it prints.

use anyhow::Result;

use super::plan::PlanRow;
use super::request::{LIST_CAP, Mode, Request};
use crate::context::Context;
use crate::db::KeyTable;
use crate::db::batch;
use crate::db::profile::scope_from;
use crate::db::session::Lost;
use crate::domain::ReclaimAction;
use crate::exit::Exit;
use crate::metrics::RunEnd;
use crate::metrics::Series;
use crate::output::prometheus::Metrics;
use crate::output::reclaim as output;
use crate::report::reclaim::{BatchEnd, BatchFailed, KeyId, LeftAlone, ReclaimReport};
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
            scope_columns: table.profile.tenant.clone(),
        }
    }

    /// Count a reclaimed key (its scope as one text, None without a scope), listing the first
    /// LIST_CAP.
    pub(super) fn add_reclaimed(&mut self, api_key_id: Option<String>, key: String) {
        self.rows_reclaimed += 1;
        if self.reclaimed.len() < usize::try_from(LIST_CAP).unwrap_or(usize::MAX) {
            let scope = scope_from(&self.scope_columns, api_key_id.as_deref());
            self.reclaimed.push(KeyId {
                api_key_id,
                scope,
                key,
            });
        } else {
            self.reclaimed_listing_truncated = true;
        }
    }

    /// Wrap a batch failure with what had already been done (those batches are committed);
    /// `in_flight`: how many keys the failed batch could have taken.
    pub(super) fn batch_error(&self, e: anyhow::Error, in_flight: u64) -> anyhow::Error {
        let end = if crate::db::reclaim::committed_unread(&e) {
            BatchEnd::CommittedUnread
        } else if e.is::<batch::HeldReferenceRow>() {
            BatchEnd::HeldReference
        } else if e.chain().any(|c| c.is::<Lost>()) {
            if batch::failed_before_commit(&e) {
                BatchEnd::LostBeforeCommit
            } else {
                BatchEnd::Lost { in_flight }
            }
        } else if batch::Failure::of(&e) == batch::Failure::LockTimeout {
            BatchEnd::LockTimeout {
                tries: batch::TRIES,
            }
        } else {
            BatchEnd::Failed
        };
        self.ended_by(e, end)
    }

    /// A batch of one key that still exceeded statement_timeout after the batches were made
    /// smaller: the run ends, naming the setting.
    pub(super) fn smallest_timed_out(
        &self,
        e: anyhow::Error,
        statement_timeout: std::time::Duration,
    ) -> anyhow::Error {
        self.ended_by(e, BatchEnd::SmallestTimedOut { statement_timeout })
    }

    fn ended_by(&self, e: anyhow::Error, end: BatchEnd) -> anyhow::Error {
        e.context(output::batch_failed(&BatchFailed {
            batch: self.batches + 1,
            reclaimed: self.rows_reclaimed,
            end,
        }))
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
                self.add_reclaimed(api_key_id, key);
            } else {
                self.left_alone.push(LeftAlone {
                    scope: scope_from(&self.scope_columns, api_key_id.as_deref()),
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

//! `evict --drop-partitions`: on a table range-partitioned on expires_at or created_at, take whole
//! partitions whose keys have all expired out with DETACH + DROP instead of deleting them row by row.
//!
//! Which partitions are tried: leaf partitions attached directly to the key table, never the default
//! partition, whose upper bound is in the past by the database clock (minus --min-age). On an
//! expires_at layout that already means every key in it expired; on a created_at layout it means no
//! new key can land there (the API stamps created_at with now()), and the probe checks expiry.
//!
//! How one goes, in one transaction under a lock_timeout of a few milliseconds:
//! 1. `ALTER TABLE key_table DETACH PARTITION p` takes ACCESS EXCLUSIVE on the key table, the
//!    partition and the default partition. If any lock is not granted in time (a live request is
//!    using the table, or holds a row of the partition), the transaction rolls back and the
//!    partition is left to the batches that follow: live traffic waits at most the lock_timeout.
//! 2. With the locks held nothing can add or change a row of p, so the probe's answer stays true
//!    until commit: no in_progress key (through the optional in_progress index) and the latest
//!    expires_at in the past (through the expiry index). Otherwise: roll back, leave it to batches.
//! 3. `DROP TABLE p`, commit.
//!
//! Why not `DETACH PARTITION ... CONCURRENTLY` (PostgreSQL 14+): it cannot run inside a transaction
//! block, so the proof could not be made under the lock that keeps it true (between a probe and a
//! concurrent detach a request may take an expired key of a created_at partition again); it is refused
//! while a default partition exists, which pg_partman creates by default; it waits for every
//! transaction that uses the table instead of giving up after a few milliseconds; and an interrupted
//! one leaves the partition half-detached until someone runs `DETACH ... FINALIZE`. The plain detach
//! holds its locks only for two index probes and a catalog change.
//!
//! The probe must be index-backed, as a scan of the partition would hold ACCESS EXCLUSIVE on the
//! whole key table for its duration; so --drop-partitions needs the optional in_progress index. Rows
//! in a state other than in_progress and completed (which sql/schema.sql's CHECK forbids) have
//! expired and no owner, so they go with the partition.
//!
//! With --min-age, a partition is tried only when its upper bound is older than --min-age: on a
//! created_at layout that bounds every key's age directly; on an expires_at layout it relies on every
//! key's created_at being no later than its expires_at (a TTL that is not negative).

use crate::db::Session;
use crate::report::timestamp::Timestamp;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::replica::ReplicaGate;
use crate::db::KeyTable;
use crate::db::partitions::{self, Partition, Probe};
use crate::db::table::{Privileges, RangeKey};
use crate::domain::Cancel;
use crate::exit::{Exit, fail};
use crate::progress::Progress;
pub(crate) use crate::report::evict::{Dropped, Kept, KeptBecause};
use crate::report::run::EndReason;

/// After this many partitions in a row whose locks were not granted, the table is busy: the rest are
/// not tried in this run (each try may hold up live requests for the lock_timeout).
const MAX_LOCK_MISSES_IN_A_ROW: u32 = 3;

/// What the drop phase did.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct DropReport {
    pub dropped: Vec<Dropped>,
    pub kept: Vec<Kept>,
}

impl DropReport {
    pub(crate) fn estimated_rows(&self) -> i64 {
        self.dropped.iter().map(|d| d.estimated_rows).sum()
    }
}

/// Everything the drop phase needs from the run.
pub(crate) struct DropRun<'a> {
    pub table: &'a KeyTable,
    pub lock_timeout: Duration,
    pub min_age_secs: Option<f64>,
    pub cancel: &'a Cancel,
    pub deadline: Option<Instant>,
    pub gate: Option<&'a ReplicaGate>,
}

/// Refuse --drop-partitions before any change unless the table has a layout it understands and the
/// index that makes its proof cheap; `privileges` = None skips the ownership check (dry run).
pub(crate) fn require_layout(
    table: &KeyTable,
    privileges: Option<&Privileges>,
) -> Result<RangeKey> {
    let Some(key) = table.range_key() else {
        let how = table.partitioning.as_ref().map(|p| p.definition.as_str());
        return Err(fail(
            Exit::Usage,
            crate::output::evict::drop_partitions_layout(&table.shown(), how),
        ));
    };
    if table.stuck_index().is_none() {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::drop_partitions_without_stuck_index(&table.shown()),
        ));
    }
    if let Some(p) = privileges
        && !p.owner
    {
        return Err(fail(
            Exit::PermissionDenied,
            crate::output::evict::drop_partitions_not_owner(&p.role, &table.shown()),
        ));
    }
    Ok(key)
}

/// The latest expiry `p`'s bound allows, where the table has no expiry index (the probe then
/// takes it instead of reading the partition); None where the index finds it.
fn bound_expiry(table: &KeyTable, p: &Partition) -> Option<Timestamp> {
    if table.expiry_index().is_some() {
        return None;
    }
    let past = i64::try_from(table.expiry_past_bound()?.as_micros()).ok()?;
    p.range_to.map(|to| to.plus_micros(past))
}

/// The partitions to try, oldest first, and those passed over with the reason.
fn candidates(parts: &[Partition], min_age_secs: Option<f64>) -> (Vec<&Partition>, Vec<Kept>) {
    let margin = time::Duration::seconds_f64(min_age_secs.unwrap_or(0.0));
    let mut tried = Vec::new();
    let mut passed = Vec::new();
    for p in parts {
        let ended = p
            .range_to
            .is_some_and(|to| to <= Timestamp::At(p.db_now - margin));
        if !p.direct || p.is_default || !ended {
            continue;
        }
        if p.owned {
            tried.push(p);
        } else {
            passed.push(kept(p, KeptBecause::NotOwner));
        }
    }
    (tried, passed)
}

fn kept(p: &Partition, reason: KeptBecause) -> Kept {
    Kept {
        name: p.name.clone(),
        reason,
    }
}

fn dropped(p: &Partition) -> Dropped {
    Dropped {
        name: p.name.clone(),
        bound: p.bound.clone(),
        estimated_rows: p.estimated_rows,
        total_bytes: p.total_bytes,
    }
}

/// Why a probe says no.
fn refusal(probe: &Probe) -> KeptBecause {
    if probe.holds_in_progress {
        KeptBecause::HoldsInProgress
    } else {
        KeptBecause::HoldsUnexpired
    }
}

/// The dry run: what would be tried and what the probe says now (no lock is taken, so a run may still
/// leave one to the batches when its lock is not granted).
pub(crate) async fn preview(
    client: &Session,
    table: &KeyTable,
    min_age_secs: Option<f64>,
) -> Result<DropReport> {
    let parts = partitions::list(client, table).await?;
    let (tried, mut kept_list) = candidates(&parts, min_age_secs);
    let mut report = DropReport::default();
    for p in tried {
        let probe = partitions::probe(client, table, p, bound_expiry(table, p)).await?;
        if probe.droppable() {
            report.dropped.push(dropped(p));
        } else {
            kept_list.push(kept(p, refusal(&probe)));
        }
    }
    report.kept = kept_list;
    Ok(report)
}

/// Try each candidate in turn, before the batches start. Returns what happened and, when the run
/// must stop (signal, --max-runtime, replica lag), why; the error of a failed statement other than a
/// lock that was not granted ends the run.
pub(crate) async fn drop_expired(
    client: &Session,
    run: &DropRun<'_>,
) -> (DropReport, Result<Option<EndReason>>) {
    let mut report = DropReport::default();
    let outcome = drop_each(client, run, &mut report).await;
    (report, outcome)
}

async fn drop_each(
    client: &Session,
    run: &DropRun<'_>,
    report: &mut DropReport,
) -> Result<Option<EndReason>> {
    let parts = partitions::list(client, run.table).await?;
    let (tried, passed) = candidates(&parts, run.min_age_secs);
    report.kept.extend(passed);
    let mut misses = 0;
    // The progress bar starts with the batches; a pause before a drop is shown in the summary.
    let progress = Progress::hidden();
    for (n, p) in tried.iter().enumerate() {
        let stop = if run.cancel.requested() {
            Some(EndReason::Interrupted)
        } else if run.deadline.is_some_and(|d| Instant::now() >= d) {
            Some(EndReason::TimeBudget)
        } else if let Some(gate) = run.gate {
            gate.pause_while_lagging(client, run.cancel, run.deadline, &progress)
                .await?
        } else {
            None
        };
        if stop.is_some() || misses >= MAX_LOCK_MISSES_IN_A_ROW {
            let why = if stop.is_some() {
                KeptBecause::RunStopped
            } else {
                KeptBecause::EarlierLocksNotGranted
            };
            report.kept.extend(tried[n..].iter().map(|p| kept(p, why)));
            return Ok(stop);
        }
        match try_drop(client, run, p).await? {
            None => {
                misses = 0;
                report.dropped.push(dropped(p));
            }
            Some(Refused::Lock) => {
                misses += 1;
                let ms = run.lock_timeout.as_millis().max(1);
                report
                    .kept
                    .push(kept(p, KeptBecause::LocksNotGranted { ms }));
            }
            Some(Refused::Probe(why)) => report.kept.push(kept(p, why)),
            Some(Refused::Dependents) => report.kept.push(kept(p, KeptBecause::Dependents)),
        }
    }
    Ok(None)
}

enum Refused {
    Lock,
    Probe(KeptBecause),
    Dependents,
}

/// Detach, prove and drop one partition in one transaction; None when it went.
async fn try_drop(client: &Session, run: &DropRun<'_>, p: &Partition) -> Result<Option<Refused>> {
    let context = || crate::output::evict::partition_not_dropped(&p.name);
    partitions::begin(client).await.with_context(context)?;
    partitions::set_local_lock_timeout(client, run.lock_timeout)
        .await
        .with_context(context)?;
    if let Err(e) = partitions::detach(client, run.table, p).await {
        return refuse_or_fail(client, e, context()).await;
    }
    let probe = match partitions::probe(client, run.table, p, bound_expiry(run.table, p)).await {
        Ok(probe) => probe,
        Err(e) => {
            let _ = client.rollback().await;
            return Err(e);
        }
    };
    if !probe.droppable() {
        client.rollback().await.with_context(context)?;
        return Ok(Some(Refused::Probe(refusal(&probe))));
    }
    if let Err(e) = partitions::drop_detached(client, run.table, p).await {
        return refuse_or_fail(client, e, context()).await;
    }
    client.commit().await.map_err(|e| {
        let why = match e.downcast_ref::<crate::db::session::Lost>() {
            Some(_) => crate::output::evict::partition_drop_unknown(&p.name),
            None => context(),
        };
        e.context(why)
    })?;
    Ok(None)
}

/// A lock not granted in time or dependent objects leave the partition to the batches; any other
/// error ends the run. Either way the transaction rolls back, undoing the detach.
async fn refuse_or_fail(
    client: &Session,
    e: anyhow::Error,
    context: String,
) -> Result<Option<Refused>> {
    use crate::db::batch::Failure;
    use tokio_postgres::error::SqlState;
    let rolled_back = client.rollback().await;
    let code = e
        .chain()
        .find_map(|c| c.downcast_ref::<tokio_postgres::Error>())
        .and_then(tokio_postgres::Error::code);
    let refused = match code {
        _ if Failure::of(&e) == Failure::LockTimeout => Refused::Lock,
        Some(c) if *c == SqlState::DEPENDENT_OBJECTS_STILL_EXIST => Refused::Dependents,
        _ => return Err(e.context(context)),
    };
    rolled_back.context(context)?;
    Ok(Some(refused))
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::OffsetDateTime;

    fn part(name: &str, to_hours_ago: Option<i64>, default: bool) -> Partition {
        let now = OffsetDateTime::now_utc();
        Partition {
            name: name.into(),
            quoted: name.into(),
            bound: String::new(),
            is_default: default,
            direct: true,
            estimated_rows: 10,
            never_analyzed: false,
            total_bytes: 8192,
            owned: true,
            range_from: None,
            range_to: to_hours_ago.map(|h| Timestamp::At(now - time::Duration::hours(h))),
            db_now: now,
        }
    }

    #[test]
    fn only_ended_non_default_partitions_are_tried() {
        let parts = [
            part("old", Some(30), false),
            part("recent", Some(1), false),
            part("current", Some(-5), false),
            part("open", None, false),
            part("default", None, true),
        ];
        let names = |min_age| {
            candidates(&parts, min_age)
                .0
                .iter()
                .map(|p| p.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(None), ["old", "recent"]);
        assert_eq!(names(Some(2.0 * 3600.0)), ["old"]);
    }
}

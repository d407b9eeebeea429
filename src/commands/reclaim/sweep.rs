//! reclaim's sweep: find stuck keys and reclaim them, batch by batch.

use std::time::Instant;

use anyhow::{Context as _, Result};

use super::placements::{Placements, on_workers, routed_shard};
use super::report::print_report;
use super::request::{COUNT_CAP, Request};
use super::validation::{require_privileges, require_stuck_index};
use super::writing::{
    after_failure, archive_why, begin_writes, confirm, fail_with, open_archive, question,
    statements,
};
use crate::cli::ReclaimArgs;
use crate::commands::archive::{Archive, CommitUnwritten};
use crate::context::Context;
use crate::db::reclaim as reclaim_db;
use crate::db::{KeyTable, Session};
use crate::exit::Exit;
use crate::report::reclaim::ReclaimReport;
use crate::report::rows::Capped;
use crate::report::run::EndReason;

pub(super) async fn sweep(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
) -> Result<Exit> {
    require_stuck_index(table, args.allow_scan, ctx.global.quiet)?;
    require_privileges(client, table, Some(req.action)).await?;
    let mut archive = open_archive(args, None)?;
    begin_writes(ctx, client, table).await?;
    // The placements are reached first only where the scope routes the run to one shard, whose
    // stuck keys are counted there; otherwise the count goes through the session the run has.
    let scope = req.filter.api_key_id.as_deref();
    let layout = req.layout.as_ref();
    let routed = match layout.filter(|l| on_workers(Some(l))) {
        Some(l) => routed_shard(client, table, l, scope).await?.is_some(),
        None => false,
    };
    let mut placements = None;
    if routed {
        placements = Some(Placements::connect(ctx, client, table, layout, scope).await?);
    }
    let before = count_stuck(client, table, req, placements.as_ref()).await?;
    if before.count > 0 {
        let count = match req.limit {
            Some(limit) => crate::output::reclaim::AskedCount::UpTo { limit, of: before },
            None => crate::output::reclaim::AskedCount::Stuck(before),
        };
        confirm(args, &question(table, req, count))?;
    }
    ctx.cancel
        .install()
        .context(crate::report::failure::Step::ListenForSigint)?;
    let start = Instant::now();
    let mut report = ReclaimReport::new(table, req);
    let placements = match placements {
        Some(p) => p,
        None => Placements::connect(ctx, client, table, layout, scope).await?,
    };
    report.end_reason =
        sweep_placements(ctx, &placements, req, args, &mut report, archive.as_mut()).await?;
    let left = count_stuck(client, table, req, Some(&placements)).await?;
    if report.end_reason == EndReason::Drained {
        // The last batch found fewer unlocked stuck keys than it asked for, so every stuck key
        // still here was skipped because a live owner holds its row.
        report.skipped_live_owner = Some(left);
    }
    report.stuck_left = Some(left);
    report.elapsed_seconds = start.elapsed().as_secs_f64();
    ctx.metrics
        .finish(report.run_end(), report.metrics())
        .await?;
    print_report(ctx, &report)?;
    Ok(report.exit())
}

async fn sweep_batches(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
    report: &mut ReclaimReport,
    mut archive: Option<&mut Archive>,
) -> Result<EndReason> {
    let statements = statements(ctx, table, req)?;
    let mut size = u64::from(args.batch_size);
    loop {
        if ctx.cancel.requested() {
            return Ok(EndReason::Interrupted);
        }
        let want = match req.limit {
            Some(l) if l <= report.rows_reclaimed => return Ok(EndReason::Limit),
            Some(l) => size.min(l - report.rows_reclaimed),
            None => size,
        };
        let got = match archive.as_deref_mut() {
            Some(a) => archived_batch(&statements, client, req, want, a).await,
            None => sweep_batch(&statements, client, req, want)
                .await
                .map(|got| (got, Ok(()))),
        };
        // A batch that failed as the run was interrupted was rolled back whole.
        let (got, commit_line) = match got {
            Ok(got) => got,
            // Exceeded statement_timeout: rolled back; done again half as large.
            Err(e) => match after_failure(ctx, report, e, want)? {
                Some(smaller) => {
                    size = smaller;
                    continue;
                }
                None => return Ok(EndReason::Interrupted),
            },
        };
        report.batches += 1;
        let n = u64::try_from(got.len()).unwrap_or(u64::MAX);
        got.into_iter()
            .for_each(|(tenant, key)| report.add_reclaimed(tenant, key));
        // The batch committed: an archive that could not take its commit line ends the run here.
        if let (Err(failed), Some(a)) = (commit_line, archive.as_deref()) {
            return Err(a.commit_unwritten(failed, report.rows_reclaimed));
        }
        if n < want {
            return Ok(EndReason::Drained);
        }
    }
}

/// Stuck keys the run may take (its filters applied), counted up to COUNT_CAP: on the one shard
/// that holds them where the scope routes the run to it (read on its worker), else through the
/// session the run has (on Citus, the coordinator reads every shard).
pub(super) async fn count_stuck(
    client: &Session,
    table: &KeyTable,
    req: &Request,
    placements: Option<&Placements<'_>>,
) -> Result<Capped> {
    let (older, filter) = (req.older_than, &req.filter);
    if let Some(node) = placements.and_then(Placements::routed_node)
        && let Some(shard) = node.shards.first()
    {
        let session = node.session().await?;
        return reclaim_db::count_stuck(&session, shard.table, older, COUNT_CAP, filter).await;
    }
    reclaim_db::count_stuck(client, table, older, COUNT_CAP, filter).await
}

/// One batch of the sweep: returns the keys it reclaimed.
pub(super) async fn sweep_batch(
    statements: &reclaim_db::Statements,
    client: &Session,
    req: &Request,
    want: u64,
) -> Result<Vec<reclaim_db::TakenKey>> {
    let limit = i64::try_from(want).unwrap_or(i64::MAX);
    let got = statements
        .sweep_batch(client, req.older_than, limit, fail_with(req).as_ref())
        .await?;
    Ok(got)
}

/// One batch of the sweep with --archive: its keys are in the archive, durable, before it commits.
/// Returned beside the keys of a committed batch: whether its commit line was written.
pub(super) async fn archived_batch(
    statements: &reclaim_db::Statements,
    client: &Session,
    req: &Request,
    want: u64,
    archive: &mut Archive,
) -> Result<(Vec<reclaim_db::TakenKey>, Result<(), CommitUnwritten>)> {
    let limit = i64::try_from(want).unwrap_or(i64::MAX);
    let why = archive_why(req);
    let mut batch = None;
    let got = statements
        .sweep_batch_archived(
            client,
            req.older_than,
            limit,
            fail_with(req).as_ref(),
            &mut |keys| {
                if !keys.is_empty() {
                    batch = Some(archive.write_keys(&why, keys)?);
                }
                Ok(())
            },
        )
        .await?;
    let commit_line = match batch {
        Some(b) => archive.write_commit(&b, got.len()),
        None => Ok(()),
    };
    Ok((got, commit_line))
}

/// The sweep over the table's placements, shard after shard (a plain server's one); stops at the
/// first shard that does not drain (limit, signal).
async fn sweep_placements(
    ctx: &Context,
    placements: &Placements<'_>,
    req: &Request,
    args: &ReclaimArgs,
    report: &mut ReclaimReport,
    mut archive: Option<&mut Archive>,
) -> Result<EndReason> {
    for node in placements.nodes() {
        let session = node.session().await?;
        for shard in &node.shards {
            let archive = archive.as_deref_mut();
            let end = sweep_batches(ctx, &session, shard.table, req, args, report, archive).await?;
            if end != EndReason::Drained {
                return Ok(end);
            }
        }
    }
    Ok(EndReason::Drained)
}

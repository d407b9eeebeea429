//! reclaim `--apply`: exactly the rows of a reviewed plan that are unchanged since.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, Result};

use super::placements::{Placements, shards_of_rows};
use super::plan::{
    Plan, PlanRow, check_plan_database, check_plan_table, check_plan_tenants, listed_twice,
    with_scopes, without_empty_tenants,
};
use super::report::print_report;
use super::request::Request;
use super::validation::{require_identity_index, require_not_null_scope, require_privileges};
use super::writing::{
    after_failure, archive_why, begin_writes, confirm, fail_with, open_archive, question,
    statements,
};
use crate::cli::ReclaimArgs;
use crate::commands::archive::{Archive, CommitUnwritten};
use crate::context::Context;
use crate::db::reclaim as reclaim_db;
use crate::db::{KeyTable, Session};
use crate::exit::{Exit, fail};
use crate::output::reclaim as output;
use crate::report::reclaim::ReclaimReport;
use crate::report::rows::Capped;
use crate::report::run::EndReason;

pub(super) async fn apply(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
    path: &Path,
    plan: &Plan,
) -> Result<Exit> {
    check_plan_table(table, path, plan)?;
    let plan = &without_empty_tenants(table, plan);
    listed_twice(plan).map_err(|why| fail(Exit::Usage, output::plan_invalid(path, &why)))?;
    let plan = &with_scopes(table, plan);
    check_plan_tenants(table, path, plan)?;
    check_plan_database(client, path, plan).await?;
    require_not_null_scope(table)?;
    require_identity_index(table)?;
    require_privileges(client, table, Some(req.action)).await?;
    let rows = within_limit(&plan.rows, req.limit);
    let shards = shards_of_rows(client, table, req.layout.as_ref(), rows).await?;
    let mut archive = open_archive(args, Some(path))?;
    begin_writes(ctx, client, table).await?;
    if !rows.is_empty() {
        confirm(
            args,
            &question(table, req, output::AskedCount::Planned(rows.len())),
        )?;
    }
    ctx.cancel
        .install()
        .context(crate::report::failure::Step::ListenForSigint)?;
    let start = Instant::now();
    let mut report = ReclaimReport::new(table, req);
    let placed = Placed { rows, shards };
    report.end_reason = apply_placements(
        ctx,
        client,
        table,
        req,
        args,
        placed,
        &mut report,
        archive.as_mut(),
    )
    .await?;
    if report.end_reason == EndReason::Drained && rows.len() < plan.rows.len() {
        report.end_reason = EndReason::Limit;
    }
    let held = report
        .left_alone
        .iter()
        .filter(|l| l.reason == "held")
        .count();
    report.skipped_live_owner = Some(Capped {
        count: i64::try_from(held).unwrap_or(i64::MAX),
        at_least: false,
    });
    report.elapsed_seconds = start.elapsed().as_secs_f64();
    ctx.metrics
        .finish(report.run_end(), report.metrics())
        .await?;
    print_report(ctx, &report)?;
    Ok(report.exit())
}

/// The plan's first `limit` rows (all of them without a limit).
pub(super) fn within_limit(rows: &[PlanRow], limit: Option<u64>) -> &[PlanRow] {
    let n = limit.map_or(rows.len(), |l| {
        rows.len().min(usize::try_from(l).unwrap_or(usize::MAX))
    });
    &rows[..n]
}

#[expect(
    clippy::too_many_arguments,
    reason = "the run's context, table, request and report, the plan rows and the archive"
)]
pub(super) async fn apply_batches(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
    rows: &[PlanRow],
    report: &mut ReclaimReport,
    mut archive: Option<&mut Archive>,
) -> Result<EndReason> {
    let statements = statements(ctx, table, req)?;
    let mut size = u64::from(args.batch_size);
    let mut done = 0;
    while done < rows.len() {
        if ctx.cancel.requested() {
            return Ok(EndReason::Interrupted);
        }
        let end = rows
            .len()
            .min(done.saturating_add(usize::try_from(size).unwrap_or(usize::MAX)));
        // A batch's rows have the same NULL scope columns: each pattern is its own statement.
        let nulls = &rows[done].nulls;
        let end = done
            + rows[done..end]
                .iter()
                .take_while(|r| &r.nulls == nulls)
                .count();
        let chunk = &rows[done..end];
        let want = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
        let outcomes = match archive.as_deref_mut() {
            Some(a) => archived_apply_batch(&statements, client, req, chunk, a).await,
            None => apply_batch(&statements, client, req, chunk)
                .await
                .map(|outcomes| (outcomes, Ok(()))),
        };
        let (outcomes, commit_line) = match outcomes {
            Ok(outcomes) => outcomes,
            // Exceeded statement_timeout: rolled back; its rows done again half as many.
            Err(e) => match after_failure(ctx, report, e, want)? {
                Some(smaller) => {
                    size = smaller;
                    continue;
                }
                None => return Ok(EndReason::Interrupted),
            },
        };
        report.batches += 1;
        report.record_outcomes(chunk, outcomes);
        // The batch committed: an archive that could not take its commit line ends the run here.
        if let (Err(failed), Some(a)) = (commit_line, archive.as_deref()) {
            return Err(a.commit_unwritten(failed, report.rows_reclaimed));
        }
        done = end;
    }
    Ok(EndReason::Drained)
}

/// One batch of plan rows: each row's outcome and current state, in the chunk's order.
pub(super) async fn apply_batch(
    statements: &reclaim_db::Statements,
    client: &Session,
    req: &Request,
    chunk: &[PlanRow],
) -> Result<Vec<(String, Option<String>)>> {
    statements
        .apply_batch(
            client,
            &plan_keys(chunk),
            req.older_than,
            fail_with(req).as_ref(),
        )
        .await
}

/// One batch of plan rows with --archive: the keys it takes are in the archive, durable, before it
/// commits; a commit line follows. Returned beside the outcomes of a committed batch: whether its
/// commit line was written.
pub(super) async fn archived_apply_batch(
    statements: &reclaim_db::Statements,
    client: &Session,
    req: &Request,
    chunk: &[PlanRow],
    archive: &mut Archive,
) -> Result<(Vec<(String, Option<String>)>, Result<(), CommitUnwritten>)> {
    let why = archive_why(req);
    let mut batch = None;
    let outcomes = statements
        .apply_batch_archived(
            client,
            &plan_keys(chunk),
            req.older_than,
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
        Some(b) => {
            let taken = outcomes.iter().filter(|(o, _)| o == "reclaimed").count();
            archive.write_commit(&b, taken)
        }
        None => Ok(()),
    };
    Ok((outcomes, commit_line))
}

pub(super) fn plan_keys(chunk: &[PlanRow]) -> Vec<reclaim_db::PlanKey<'_>> {
    chunk
        .iter()
        .map(|r| {
            (
                r.api_key_id.as_deref(),
                r.key.as_str(),
                r.locked_at,
                r.created_at,
                r.nulls.as_slice(),
            )
        })
        .collect()
}

/// The plan rows a run applies and the shard of each (see `placements::shards_of_rows`).
struct Placed<'a> {
    rows: &'a [PlanRow],
    shards: Vec<Option<i64>>,
}

/// A plan's rows over the table's placements, each on the shard that holds it (a plain server's
/// one); stops at the first shard that does not drain (signal).
#[expect(
    clippy::too_many_arguments,
    reason = "the run's context, table, request and report, the placed rows and the archive"
)]
async fn apply_placements(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
    placed: Placed<'_>,
    report: &mut ReclaimReport,
    mut archive: Option<&mut Archive>,
) -> Result<EndReason> {
    // Each plan row goes to its own shard (`shards_of_rows`): every placement is reached.
    let placements = Placements::connect(ctx, client, table, req.layout.as_ref(), None).await?;
    if let Some(missing) = placed.shards.iter().find(|id| !placements.holds(**id)) {
        return Err(fail(
            Exit::Failure,
            output::shard_unplaced(missing.unwrap_or_default(), &table.shown()),
        ));
    }
    for node in placements.nodes() {
        let mut session = None;
        for shard in &node.shards {
            let mut mine: Vec<PlanRow> = placed
                .rows
                .iter()
                .zip(&placed.shards)
                .filter(|(_, s)| **s == shard.id)
                .map(|(r, _)| r.clone())
                .collect();
            if mine.is_empty() {
                continue;
            }
            // Rows with the same NULL scope columns together, so they share batches.
            mine.sort_by(|a, b| a.nulls.cmp(&b.nulls));
            if session.is_none() {
                session = Some(node.session().await?);
            }
            let Some(s) = session.as_deref() else {
                continue;
            };
            let archive = archive.as_deref_mut();
            let end = apply_batches(ctx, s, shard.table, req, args, &mine, report, archive).await?;
            if end != EndReason::Drained {
                return Ok(end);
            }
        }
    }
    Ok(EndReason::Drained)
}

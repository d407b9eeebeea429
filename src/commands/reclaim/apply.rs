//! reclaim `--apply`: exactly the rows of a reviewed plan that are unchanged since.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;

use super::plan::{
    Plan, PlanRow, check_plan_database, check_plan_table, check_plan_tenants, listed_twice,
    without_empty_tenants,
};
use super::report::{ReclaimReport, print_report};
use super::request::Request;
use super::validation::{require_identity_index, require_privileges};
use super::writing::{
    archive_why, begin_writes, confirm, fail_with, open_archive, question, statements,
};
use super::writing::{cluster, worker_session};
use crate::cli::ReclaimArgs;
use crate::commands::archive::Archive;
use crate::context::Context;
use crate::db::citus;
use crate::db::reclaim as reclaim_db;
use crate::db::{KeyTable, Session};
use crate::exit::{Exit, fail};
use crate::output::reclaim as output;
use crate::report::rows::Capped;
use crate::report::rows::Layout;
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
    check_plan_tenants(table, path, plan)?;
    check_plan_database(client, path, plan).await?;
    require_identity_index(table)?;
    require_privileges(client, table, Some(req.action)).await?;
    let distributed = crate::commands::shards::distributed(client, table).await?;
    let mut archive = open_archive(args, Some(path))?;
    begin_writes(ctx, client, table).await?;
    let rows = within_limit(&plan.rows, req.limit);
    if !rows.is_empty() {
        confirm(
            args,
            &question(table, req, &format!("the plan's {}", rows.len())),
        )?;
    }
    ctx.cancel.install()?;
    let start = Instant::now();
    let mut report = ReclaimReport::new(table, req);
    report.end_reason = match distributed {
        Some(layout) => {
            let archive = archive.as_mut();
            apply_shards(
                ctx,
                client,
                table,
                layout,
                req,
                args,
                rows,
                &mut report,
                archive,
            )
            .await?
        }
        None => {
            let archive = archive.as_mut();
            apply_batches(ctx, client, table, req, args, rows, &mut report, archive).await?
        }
    };
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
    let size = usize::try_from(args.batch_size).unwrap_or(usize::MAX);
    for chunk in rows.chunks(size) {
        if ctx.cancel.requested() {
            return Ok(EndReason::Interrupted);
        }
        let outcomes = match archive.as_deref_mut() {
            Some(a) => archived_apply_batch(&statements, client, req, chunk, a).await,
            None => apply_batch(&statements, client, req, chunk).await,
        };
        let outcomes = match outcomes {
            Err(_) if ctx.cancel.requested() => return Ok(EndReason::Interrupted),
            outcomes => outcomes.map_err(|e| report.batch_error(e))?,
        };
        report.batches += 1;
        report.record_outcomes(chunk, outcomes);
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
/// commits; a commit line follows.
pub(super) async fn archived_apply_batch(
    statements: &reclaim_db::Statements,
    client: &Session,
    req: &Request,
    chunk: &[PlanRow],
    archive: &mut Archive,
) -> Result<Vec<(String, Option<String>)>> {
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
    if let Some(b) = batch {
        let taken = outcomes.iter().filter(|(o, _)| o == "reclaimed").count();
        archive.write_commit(&b, taken)?;
    }
    Ok(outcomes)
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
            )
        })
        .collect()
}

/// A plan's rows, each on the shard that holds its tenant.
#[expect(
    clippy::too_many_arguments,
    reason = "the sweep's settings passed as they are to each shard's batches; goes with the one reclaim path over placements"
)]
async fn apply_shards(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    layout: Layout,
    req: &Request,
    args: &ReclaimArgs,
    rows: &[PlanRow],
    report: &mut ReclaimReport,
    mut archive: Option<&mut Archive>,
) -> Result<EndReason> {
    let by_tenant = matches!(&layout, Layout::Distributed { column, .. }
        if table.profile.tenant.as_deref() == Some(column.as_str()));
    if !by_tenant {
        return Err(crate::exit::fail(
            crate::exit::Exit::Usage,
            crate::output::reclaim::apply_not_by_tenant(table, &layout),
        ));
    }
    // Distributed by its tenant column: every plan row has a tenant (apply checked the plan).
    let tenants: Vec<&str> = rows
        .iter()
        .map(|r| r.api_key_id.as_deref().unwrap_or_default())
        .collect();
    let shard_of = citus::shards_for(client, table, &tenants).await?;
    let cluster = cluster(ctx, client, table).await?;
    let placed = |id: &i64| {
        cluster
            .nodes
            .iter()
            .any(|n| n.shards.iter().any(|s| s.id == *id))
    };
    if let Some(missing) = shard_of.iter().find(|id| !placed(id)) {
        return Err(crate::exit::fail(
            crate::exit::Exit::Failure,
            crate::output::reclaim::shard_unplaced(*missing, table),
        ));
    }
    for node in &cluster.nodes {
        let mut session = None;
        for shard in &node.shards {
            let mine: Vec<PlanRow> = rows
                .iter()
                .zip(&shard_of)
                .filter(|(_, s)| **s == shard.id)
                .map(|(r, _)| r.clone())
                .collect();
            if mine.is_empty() {
                continue;
            }
            if session.is_none() {
                session = Some(worker_session(node).await?);
            }
            let s = session.as_ref().expect("set above");
            let archive = archive.as_deref_mut();
            let end =
                apply_batches(ctx, s, &shard.table, req, args, &mine, report, archive).await?;
            if end != EndReason::Drained {
                return Ok(end);
            }
        }
    }
    Ok(EndReason::Drained)
}

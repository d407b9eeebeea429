//! `reclaim` on a table Citus hash-distributes. Its writes lock rows (`FOR UPDATE SKIP LOCKED`),
//! which Citus runs only within one shard, so the sweep and `--apply` run shard by shard on the
//! workers, connected directly like evict (the coordinator's connection settings, the worker's host
//! and port from the metadata): each batch is the single-server statement on one shard, under the
//! same few-millisecond lock_timeout, in its own one-node transaction (with `--archive`, the
//! archived form: the shard's rows locked and read, their lines fsynced, then the commit, all on
//! the worker). The reclaim lock stays on the coordinator (one run per table). The preview, `--plan` and the counts before and after run
//! through the coordinator, where Citus accepts them (a plan is made on, and applies to, the
//! coordinator's database).

use anyhow::{Context as _, Result};

use super::{EndReason, PlanRow, ROW_LOCK_WAIT, ReclaimArgs, ReclaimReport, Request};
use crate::commands::archive::Archive;
use crate::commands::shards::{self, Cluster};
use crate::context::Context;
use crate::db::citus;
use crate::db::{KeyTable, Session};
use crate::report::rows::Layout;

async fn cluster(ctx: &Context, client: &Session, table: &KeyTable) -> Result<Cluster> {
    shards::connect(ctx, client, table, 1)
        .await
        .context("failed to reach the key table's shards on the Citus workers")
}

/// A session on the worker with reclaim's lock_timeout.
async fn worker_session(node: &shards::Node) -> Result<Session> {
    let session = node.session().await?;
    crate::db::batch::limit_row_waits(&session, ROW_LOCK_WAIT)
        .await
        .with_context(|| {
            format!(
                "failed to set up the reclaim session on worker {}",
                node.name()
            )
        })?;
    Ok(session)
}

/// The sweep, shard after shard; stops at the first shard that does not drain (limit, signal).
pub(super) async fn sweep(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
    report: &mut ReclaimReport,
    mut archive: Option<&mut Archive>,
) -> Result<EndReason> {
    let cluster = cluster(ctx, client, table).await?;
    for node in &cluster.nodes {
        let session = worker_session(node).await?;
        for shard in &node.shards {
            let archive = archive.as_deref_mut();
            let end = super::sweep_batches(ctx, &session, &shard.table, req, args, report, archive)
                .await?;
            if end != EndReason::Drained {
                return Ok(end);
            }
        }
    }
    Ok(EndReason::Drained)
}

/// A plan's rows, each on the shard that holds its tenant.
#[expect(
    clippy::too_many_arguments,
    reason = "the sweep's settings passed as they are to each shard's batches; goes with the one reclaim path over placements"
)]
pub(super) async fn apply(
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
        if table.profile.tenant.as_slice() == std::slice::from_ref(column));
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
            let end = super::apply_batches(ctx, s, &shard.table, req, args, &mine, report, archive)
                .await?;
            if end != EndReason::Drained {
                return Ok(end);
            }
        }
    }
    Ok(EndReason::Drained)
}

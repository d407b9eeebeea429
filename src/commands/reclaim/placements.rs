//! Where reclaim's batches run: over the placements of the key table, one path for every layout.
//! A plain server is one node holding one shard: the table itself, on the session the run already
//! has. On Citus a table whose rows live on the workers (hash-distributed, or a single-shard
//! table) has one placement per shard: its writes lock rows (`FOR UPDATE SKIP LOCKED`), which
//! Citus runs only within one shard, so each batch is the single-server statement on one shard,
//! on a session to its worker connected directly like evict's, under the same few-millisecond
//! lock_timeout, in its own one-node transaction. A reference or Citus local table is one
//! placement on the connection the run has (changed through the coordinator, see
//! `reclaim_db::Route`). The layout is resolved once per run, before any placement is used.

use std::ops::Deref;

use anyhow::{Context as _, Result};

use super::plan::PlanRow;
use super::request::{Mode, ROW_LOCK_WAIT, Request};
use super::validation::require_rows_by_identity;
use crate::commands::shards::{self, Cluster};
use crate::context::Context;
use crate::db::reclaim as reclaim_db;
use crate::db::{KeyTable, Session};
use crate::db::{batch, citus};
use crate::exit::{Exit, fail};
use crate::output::reclaim as output;
use crate::report::rows::Layout;

/// Whether the table's rows live on the workers, shard by shard, where the batches must run.
pub(super) fn on_workers(layout: Option<&Layout>) -> bool {
    matches!(
        layout,
        Some(Layout::Distributed { .. } | Layout::SingleShard)
    )
}

/// Resolve, once per run, how the table's rows are placed, and how the batches reach them: on a
/// Citus reference or local table they are changed through the coordinator, found again by the
/// key's identity, which must then name one row.
pub(super) async fn resolve_layout(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &mut Request,
) -> Result<()> {
    let layout = crate::db::citus::layout(client, table).await?;
    if let Some(layout) = layout.as_ref().filter(|l| l.matches_rows_by_identity()) {
        if !matches!(req.mode, Mode::Preview(_)) {
            require_rows_by_identity(table, layout)?;
        }
        req.route = reclaim_db::Route {
            by_identity: true,
            bound_waits: layout
                .written_through_coordinator()
                .then(|| batch::ThroughCoordinator {
                    wait: ROW_LOCK_WAIT,
                    patience: batch::HELD_REFERENCE_PATIENCE,
                    cancel: ctx.cancel.clone(),
                }),
        };
    }
    req.layout = layout;
    Ok(())
}

/// Each plan row's shard, for `--apply`: the one shard of a plain server, a reference or a
/// Citus local table (`None`), or on a table distributed by one of its scope columns the shard
/// that holds the row's value of it. A table whose rows live on the workers by another column (or
/// on a single shard without a column) cannot send a row to its shard: refused before any change.
pub(super) async fn shards_of_rows(
    client: &Session,
    table: &KeyTable,
    layout: Option<&Layout>,
    rows: &[PlanRow],
) -> Result<Vec<Option<i64>>> {
    let Some(layout) = layout.filter(|l| on_workers(Some(l))) else {
        return Ok(vec![None; rows.len()]);
    };
    let scope = &table.profile.tenant;
    let Some(at) = (match layout {
        Layout::Distributed { column, .. } => scope.iter().position(|c| c == column),
        _ => None,
    }) else {
        return Err(fail(
            Exit::Usage,
            output::apply_not_by_tenant(&table.shown(), layout),
        ));
    };
    // Distributed by a scope column: every plan row has a scope of the table's columns (apply
    // checked the plan); the column's value places the row (Citus keeps no NULL there).
    let values: Vec<String> = rows
        .iter()
        .map(|r| {
            r.scope
                .as_ref()
                .and_then(|s| s.get(at).cloned().flatten())
                .unwrap_or_default()
        })
        .collect();
    let tenants: Vec<&str> = values.iter().map(String::as_str).collect();
    let shards = citus::shards_for(client, table, &tenants).await?;
    Ok(shards.into_iter().map(Some).collect())
}

/// The one shard that holds the rows of `scope` (--api-key-id), on a table distributed by one of
/// the scope's columns; None when the rows may be on any shard.
pub(super) async fn routed_shard(
    client: &Session,
    table: &KeyTable,
    layout: &Layout,
    scope: Option<&str>,
) -> Result<Option<i64>> {
    let values = scope
        .and_then(|s| crate::db::profile::scope_values(s, table.profile.tenant.len()))
        .unwrap_or_default();
    let given: Vec<Option<&str>> = values.iter().map(|v| Some(v.as_str())).collect();
    shards::shard_of_scope(client, table, layout, &given).await
}

/// The placements of the key table the run works on.
pub(super) struct Placements<'a> {
    here: &'a Session,
    table: &'a KeyTable,
    /// The workers and their shards, for a table whose rows live on them.
    cluster: Option<Cluster>,
    /// The scope routed the run to the one shard that holds its rows.
    routed: bool,
}

/// A node and the shards of the table it holds.
pub(super) struct Node<'a> {
    on: On<'a>,
    pub(super) shards: Vec<Shard<'a>>,
}

/// One shard: the table as the node holds it; `id` the Citus shard (None on a plain server).
pub(super) struct Shard<'a> {
    pub(super) id: Option<i64>,
    pub(super) table: &'a KeyTable,
}

enum On<'a> {
    /// The node the run is connected to.
    Here(&'a Session),
    /// A Citus worker, reached on a session of its own.
    Worker(&'a shards::Node),
}

/// A node's session: the run's own, or one opened on a worker for the batches there.
pub(super) enum Connected<'a> {
    Here(&'a Session),
    Worker(Session),
}

impl Deref for Connected<'_> {
    type Target = Session;

    fn deref(&self) -> &Session {
        match self {
            Connected::Here(s) => s,
            Connected::Worker(s) => s,
        }
    }
}

impl<'a> Placements<'a> {
    /// The placements of `table` under `layout` (the run's, resolved once): on the workers,
    /// connected to each worker that holds a shard; otherwise the table on `client`.
    /// With `scope` (--api-key-id) on a table distributed by one of the scope's columns, only
    /// the shard that holds the scope's rows.
    pub(super) async fn connect(
        ctx: &Context,
        client: &'a Session,
        table: &'a KeyTable,
        layout: Option<&Layout>,
        scope: Option<&str>,
    ) -> Result<Placements<'a>> {
        let cluster = if let Some(layout) = layout.filter(|l| on_workers(Some(l))) {
            let only = routed_shard(client, table, layout, scope).await?;
            let cluster = shards::connect_to(ctx, client, table, 1, only)
                .await
                .context(crate::report::failure::Step::ReachShards)?;
            Some((cluster, only.is_some()))
        } else {
            None
        };
        Ok(Placements {
            here: client,
            table,
            routed: cluster.as_ref().is_some_and(|(_, routed)| *routed),
            cluster: cluster.map(|(c, _)| c),
        })
    }

    /// The node of the one shard the scope routed the run to, if it did.
    pub(super) fn routed_node(&self) -> Option<Node<'_>> {
        if !self.routed {
            return None;
        }
        self.nodes().into_iter().find(|n| !n.shards.is_empty())
    }

    /// The nodes, each with its shards, in the order the batches visit them.
    pub(super) fn nodes(&self) -> Vec<Node<'_>> {
        let Some(cluster) = &self.cluster else {
            return vec![Node {
                on: On::Here(self.here),
                shards: vec![Shard {
                    id: None,
                    table: self.table,
                }],
            }];
        };
        cluster
            .nodes
            .iter()
            .map(|n| Node {
                on: On::Worker(n),
                shards: n
                    .shards
                    .iter()
                    .map(|s| Shard {
                        id: Some(s.id),
                        table: &s.table,
                    })
                    .collect(),
            })
            .collect()
    }

    /// Whether some node holds the shard `id` (a plain server's one shard, `None`, always).
    pub(super) fn holds(&self, id: Option<i64>) -> bool {
        match (&self.cluster, id) {
            (None, None) => true,
            (Some(c), Some(id)) => c.nodes.iter().any(|n| n.shards.iter().any(|s| s.id == id)),
            _ => false,
        }
    }
}

impl Node<'_> {
    /// The session the node's batches run on: the run's own (already set up by
    /// `writing::begin_writes`), or a new one on the worker with reclaim's lock_timeout.
    pub(super) async fn session(&self) -> Result<Connected<'_>> {
        let node = match self.on {
            On::Here(session) => return Ok(Connected::Here(session)),
            On::Worker(node) => node,
        };
        let session = node.session().await?;
        crate::db::batch::limit_row_waits(&session, ROW_LOCK_WAIT)
            .await
            .with_context(|| {
                output::worker_session_unset(&crate::output::names::worker(&node.host, node.port))
            })?;
        Ok(Connected::Worker(session))
    }
}

//! Working on a Citus-distributed key table shard by shard: the coordinator's metadata says where
//! each shard is; idemctl connects to each worker directly (same user, database, password source
//! and TLS settings as for the coordinator, host and port from `pg_dist_node`) and runs its
//! ordinary statements on the shard, an ordinary table there. Every statement then stays a
//! one-node, index-backed statement under idemctl's own session limits, with no distributed plan
//! and no distributed transaction. See docs/citus.md for why.

use anyhow::{Context as _, Result};

use crate::conn::Route;
use crate::context::Context;
use crate::db::citus;
use crate::db::{KeyTable, Session};
use crate::report::rows::{Layout, Placement};

/// A worker and the shards of the key table it holds (the output layer names it, `Node::name`).
pub(crate) struct Node {
    pub host: String,
    pub port: u16,
    pub pool: crate::conn::Pool,
    pub target: crate::conn::Target,
    pub shards: Vec<Shard>,
}

/// One shard, resolved on its worker.
#[derive(Clone, Debug)]
pub(crate) struct Shard {
    pub id: i64,
    /// The shard as a table on its worker (its own oid, columns and indexes).
    pub table: KeyTable,
}

impl Node {
    /// A session on this worker, with idemctl's session limits.
    pub(crate) async fn session(&self) -> Result<Session> {
        let client = self.target.connect(&self.pool).await.with_context(|| {
            crate::output::names::worker_unreachable(&crate::output::names::worker(
                &self.host, self.port,
            ))
        })?;
        let pooled = !self.pool.route().is_some_and(Route::owns_session);
        let line = self.pool.line(&client).await;
        Ok(Session::new(
            client,
            pooled,
            self.pool.session_settings(),
            line,
        ))
    }
}

/// The workers holding a distributed key table's shards.
pub(crate) struct Cluster {
    pub nodes: Vec<Node>,
}

/// Where the key table's rows are, resolved once per run. A plain server is one node holding one
/// placement, the table itself, read on the run's own session; on Citus the placements are the
/// shards on the workers (a reference or Citus local table: its first placement), each an ordinary
/// table on its worker. The commands read each placement with the same statements and add up what
/// they find.
pub(crate) struct Placements {
    /// How Citus manages the table (None: not at all).
    pub layout: Option<Layout>,
    /// The workers and their shards (None: the table on the run's session).
    pub cluster: Option<Cluster>,
}

impl Placements {
    /// The placements of `table`: its layout read from the metadata (once), then each worker
    /// holding a placement reached.
    pub(crate) async fn resolve(
        ctx: &Context,
        client: &Session,
        table: &KeyTable,
    ) -> Result<Placements> {
        let layout = citus::layout(client, table).await?;
        Placements::of(ctx, client, table, layout).await
    }

    /// The placements of `table` as `layout` has them.
    pub(crate) async fn of(
        ctx: &Context,
        client: &Session,
        table: &KeyTable,
        layout: Option<Layout>,
    ) -> Result<Placements> {
        let Some(layout) = layout else {
            return Ok(Placements {
                layout: None,
                cluster: None,
            });
        };
        // A reference table has a copy on every node, a Citus local table one on the
        // coordinator: its figures are those of one placement (the first the metadata lists), not
        // of the coordinator's empty shell.
        let one = matches!(layout, Layout::Reference | Layout::CitusLocal);
        let cluster = connect_placements(ctx, client, table, 1, one)
            .await
            .context(crate::report::failure::Step::ReachShards)?;
        Ok(Placements {
            layout: Some(layout),
            cluster: Some(cluster),
        })
    }

    /// Whether the rows are in shards on the workers rather than in the table itself.
    pub(crate) fn in_shards(&self) -> bool {
        self.cluster.is_some()
    }
}

/// The layout of a table whose rows Citus keeps on the workers, which the commands work on shard by
/// shard: a hash-distributed table, or a single-shard one (a table of a distributed schema, or
/// distributed without a column), whose one shard is on one node. Through the coordinator, a
/// statement on such a table runs on the worker without idemctl's session limits there (Citus does
/// not pass lock_timeout on), so evict's batches would wait on a row a live request holds. `None`
/// for any other table, Citus-managed or not (reference and local tables are one table on the node
/// idemctl is connected to, where the ordinary statements work; evict's batches on them pass their
/// lock_timeout on to the workers, see `db::citus::bound_row_waits`).
pub(crate) async fn distributed(client: &Session, table: &KeyTable) -> Result<Option<Layout>> {
    Ok(citus::layout(client, table)
        .await?
        .filter(|l| matches!(l, Layout::Distributed { .. } | Layout::SingleShard)))
}

/// Connect to every worker holding a shard of the hash-distributed `table` and resolve its shards
/// there; `pool_size` sessions per worker at most.
pub(crate) async fn connect(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    pool_size: usize,
) -> Result<Cluster> {
    connect_to(ctx, client, table, pool_size, None).await
}

/// Like [`connect`]; with `first_only`, only the first placement the metadata lists (a reference
/// table's copy on one node, or a Citus local table's shard).
pub(crate) async fn connect_placements(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    pool_size: usize,
    first_only: bool,
) -> Result<Cluster> {
    if !first_only {
        return connect(ctx, client, table, pool_size).await;
    }
    let first = citus::placements(client, table)
        .await?
        .first()
        .map(|p| (p.node.clone(), p.port));
    connect_where(ctx, client, table, pool_size, &|p: &Placement| {
        first
            .as_ref()
            .is_some_and(|(node, port)| p.node == *node && p.port == *port)
    })
    .await
}

/// Like [`connect`], with only the shard `only` when given.
pub(crate) async fn connect_to(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    pool_size: usize,
    only: Option<i64>,
) -> Result<Cluster> {
    connect_where(ctx, client, table, pool_size, &|p: &Placement| {
        only.is_none_or(|id| id == p.shard_id)
    })
    .await
}

/// Like [`connect`], with only the placements `keep` keeps.
async fn connect_where(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    pool_size: usize,
    keep: &(dyn Fn(&Placement) -> bool + Sync),
) -> Result<Cluster> {
    let placements = citus::placements(client, table).await?;
    let mut nodes: Vec<Node> = Vec::new();
    for placement in placements {
        if !keep(&placement) {
            continue;
        }
        let index = match nodes
            .iter()
            .position(|n| n.host == placement.node && n.port == placement.port)
        {
            Some(i) => i,
            None => {
                nodes.push(open_node(ctx, &placement, pool_size)?);
                nodes.len() - 1
            }
        };
        let node = &mut nodes[index];
        let session = node.session().await?;
        let shard = citus::resolve_shard(&session, table, &placement).await?;
        node.shards.push(Shard {
            id: placement.shard_id,
            table: shard,
        });
    }
    Ok(Cluster { nodes })
}

fn open_node(ctx: &Context, placement: &Placement, pool_size: usize) -> Result<Node> {
    let (target, pool) = ctx
        .node(&placement.node, placement.port, pool_size)
        .with_context(|| crate::output::names::worker_unprepared(&placement.node_name()))?;
    Ok(Node {
        host: placement.node.clone(),
        port: placement.port,
        pool,
        target,
        shards: Vec::new(),
    })
}

/// The one shard that holds a scope's rows, when the table is hash-distributed by one of its scope
/// columns and that column's value is among `values` (each scope column's value in the mapping's
/// order, None where not given): Citus places every row with that value on that shard. None when
/// the rows may be on any shard (another layout, another distribution column, its value not
/// given).
pub(crate) async fn shard_of_scope(
    client: &Session,
    table: &KeyTable,
    layout: &Layout,
    values: &[Option<&str>],
) -> Result<Option<i64>> {
    let Layout::Distributed { column, .. } = layout else {
        return Ok(None);
    };
    let Some(at) = table.profile.tenant.iter().position(|c| c == column) else {
        return Ok(None);
    };
    match values.get(at).copied().flatten() {
        Some(value) => Ok(Some(citus::shard_for(client, table, value).await?)),
        None => Ok(None),
    }
}

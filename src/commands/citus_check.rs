//! `check` on a table Citus hash-distributes: what the commands need on the workers, where they
//! work shard by shard. idemctl must reach every worker with this connection's settings (the same
//! role and password source, the worker's host and port from the coordinator's metadata); every
//! shard must carry the table's indexes; the role's grants must have reached every shard. What is
//! found is returned as typed outcomes; src/output/citus.rs words them as check's findings, with
//! the fixes (statements run on the coordinator, which Citus applies to every shard).

use super::shards::{self, Cluster};
use crate::context::Context;
use crate::db::profile::Action;
use crate::db::table::{Job, Privileges};
use crate::db::{KeyTable, Session};
pub(crate) use crate::report::citus::Worker;
pub(crate) use crate::report::citus::{Outcome, ShardLacks};
use crate::report::rows::Layout;

/// The Citus checks of the distributed `table`, in the order check reports them.
pub(crate) async fn findings(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    layout: &Layout,
    coordinator: &Privileges,
) -> Vec<Outcome> {
    let mut out = vec![distribution(table, layout)];
    let cluster = match shards::connect(ctx, client, table, 1).await {
        Ok(c) => c,
        Err(e) => {
            out.push(Outcome::Unreachable {
                error: crate::domain::one_line(&e),
            });
            return out;
        }
    };
    out.push(workers(&cluster));
    out.push(indexes(table, &cluster));
    match shard_privileges(table, coordinator, &cluster).await {
        Ok(f) => out.push(f),
        Err(e) => out.push(Outcome::PrivilegesUnread {
            error: crate::domain::one_line(&e),
        }),
    }
    out
}

/// How the table is distributed: by the tenant column of the identity index, or not.
fn distribution(table: &KeyTable, layout: &Layout) -> Outcome {
    let tenant_local = match layout {
        Layout::Distributed { column, .. } => {
            table.profile.tenant.as_slice() == std::slice::from_ref(column)
                && table
                    .identity_index()
                    .is_some_and(|i| i.columns.iter().any(|c| c == column))
        }
        _ => false,
    };
    Outcome::Layout {
        layout: layout.clone(),
        tenant_local,
    }
}

fn workers(cluster: &Cluster) -> Outcome {
    Outcome::Workers {
        workers: cluster
            .nodes
            .iter()
            .map(|n| Worker {
                host: n.host.clone(),
                port: n.port,
                shards: n.shards.len(),
            })
            .collect(),
    }
}

/// Every shard carries the expiry and identity indexes, and the in_progress index when the
/// coordinator's table has it.
fn indexes(table: &KeyTable, cluster: &Cluster) -> Outcome {
    let want_stuck = table.stuck_index().is_some();
    let mut missing = Vec::new();
    let mut shards = 0;
    for node in &cluster.nodes {
        for shard in &node.shards {
            shards += 1;
            let t = &shard.table;
            let mut lacks = Vec::new();
            if t.expiry_index().is_none() {
                lacks.push("expiry".to_owned());
            }
            if t.identity_index().is_none() {
                lacks.push("identity".to_owned());
            }
            if want_stuck && t.stuck_index().is_none() {
                lacks.push("in_progress".to_owned());
            }
            if !lacks.is_empty() {
                missing.push(ShardLacks {
                    shard: shard.id,
                    host: node.host.clone(),
                    port: node.port,
                    lacks,
                });
            }
        }
    }
    let lost = |what: &str| missing.iter().any(|m| m.lacks.iter().any(|l| l == what));
    let mut fixes = Vec::new();
    if lost("expiry") {
        fixes.push(crate::db::citus::recreate_index(
            table,
            table.expiry_index(),
            &table.expiry_index_fix(),
        ));
    }
    if lost("in_progress") {
        fixes.push(crate::db::citus::recreate_index(
            table,
            table.stuck_index(),
            &table.stuck_index_fix(),
        ));
    }
    let identity = lost("identity").then(|| {
        (
            table
                .identity_index()
                .map_or_else(String::new, |i| i.name.clone()),
            table.identity_columns_text(),
        )
    });
    Outcome::Indexes {
        shards,
        want_stuck,
        missing,
        table: table.quoted.clone(),
        fixes,
        identity,
    }
}

/// The role's grants on every shard: each grant the commands need that the role has on the
/// coordinator's table must have reached every shard (what it lacks on the coordinator is reported
/// by the privilege checks above).
async fn shard_privileges(
    table: &KeyTable,
    coordinator: &Privileges,
    cluster: &Cluster,
) -> anyhow::Result<Outcome> {
    let jobs = [Job::Read, Job::Evict, Job::Reclaim(Action::Delete)];
    let wanted: Vec<String> = jobs
        .iter()
        .flat_map(|job| table.privilege_needs(coordinator, *job))
        .filter(|(_, has)| *has)
        .map(|(g, _)| g)
        .collect();
    let mut short = Vec::new();
    let mut shards = 0;
    for node in &cluster.nodes {
        let session = node.session().await?;
        for shard in &node.shards {
            shards += 1;
            crate::db::citus::begin_catalog_reads(&session).await?;
            let p = shard.table.privileges(&session).await;
            crate::db::citus::end_catalog_reads(&session).await?;
            let p = p?;
            let mut lacks: Vec<String> = Vec::new();
            for job in jobs {
                for (grant, has) in shard.table.privilege_needs(&p, job) {
                    if !has && wanted.contains(&grant) && !lacks.contains(&grant) {
                        lacks.push(grant);
                    }
                }
            }
            if !lacks.is_empty() {
                short.push(ShardLacks {
                    shard: shard.id,
                    host: node.host.clone(),
                    port: node.port,
                    lacks,
                });
            }
        }
    }
    Ok(Outcome::Privileges {
        role: coordinator.role.clone(),
        shards,
        wanted,
        short,
        table: table.quoted.clone(),
    })
}

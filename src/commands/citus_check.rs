//! `check` on a table Citus hash-distributes: what the commands need on the workers, where they
//! work shard by shard. idemctl must reach every worker with this connection's settings (the same
//! role and password source, the worker's host and port from the coordinator's metadata); every
//! shard must carry the table's indexes; the role's grants must have reached every shard. The
//! fixes are statements run on the coordinator, which Citus applies to every shard.

use super::check::{Finding, Status};
use super::shards::{self, Cluster};
use crate::context::Context;
use crate::db::citus::Layout;
use crate::db::profile::Action;
use crate::db::table::{Job, Privileges};
use crate::db::{KeyTable, Session};
use crate::output::sanitize;

fn finding(check: &str, status: Status, detail: String, fix: Option<String>) -> Finding {
    Finding {
        check: check.to_owned(),
        status,
        detail,
        fix,
    }
}

/// The Citus findings for the distributed `table`.
pub async fn findings(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    layout: &Layout,
    coordinator: &Privileges,
) -> Vec<Finding> {
    let mut out = vec![distribution(table, layout)];
    let cluster = match shards::connect(ctx, client, table, 1).await {
        Ok(c) => c,
        Err(e) => {
            out.push(finding(
                "citus workers",
                Status::Fail,
                format!(
                    "cannot work on the shards: {}",
                    crate::one_line(&e)
                ),
                Some("evict, reclaim, inspect and stats connect to each worker with this connection's role, password source (password, ~/.pgpass, service file) and TLS settings, at the host and port the coordinator's pg_dist_node names: let that role connect to every worker (pg_hba.conf, a ~/.pgpass line per worker host)".into()),
            ));
            return out;
        }
    };
    out.push(workers(&cluster));
    out.push(indexes(table, &cluster));
    match shard_privileges(table, coordinator, &cluster).await {
        Ok(f) => out.push(f),
        Err(e) => out.push(finding(
            "citus shard privileges",
            Status::Fail,
            format!(
                "cannot read the role's privileges on the shards: {}",
                crate::one_line(&e)
            ),
            None,
        )),
    }
    out
}

/// How the table is distributed, and what that means for the commands.
fn distribution(table: &KeyTable, layout: &Layout) -> Finding {
    let Layout::Distributed { column, .. } = layout else {
        return finding("citus layout", Status::Ok, layout.describe(), None);
    };
    let by_tenant = table.profile.tenant.as_deref() == Some(column.as_str());
    let in_identity = table
        .identity_index()
        .is_some_and(|i| i.columns.iter().any(|c| c == column));
    if by_tenant && in_identity {
        finding(
            "citus layout",
            Status::Ok,
            format!(
                "{}; the distribution column is in the primary key, so a tenant's keys live on one shard",
                layout.describe()
            ),
            None,
        )
    } else {
        finding(
            "citus layout",
            Status::Note,
            format!(
                "{}, not by the tenant column: evict, stats, inspect and the reclaim sweep work shard by shard whatever the column; inspect --api-key-id reads every shard; reclaim --apply is refused (it sends each plan row to its tenant's shard)",
                layout.describe()
            ),
            None,
        )
    }
}

fn workers(cluster: &Cluster) -> Finding {
    let names: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("{} ({} shards)", n.name(), n.shards.len()))
        .collect();
    finding(
        "citus workers",
        Status::Ok,
        format!(
            "reached every worker holding shards with this connection's settings: {}",
            names.join(", ")
        ),
        None,
    )
}

/// Every shard carries the expiry and identity indexes, and the in_progress index when the
/// coordinator's table has it.
fn indexes(table: &KeyTable, cluster: &Cluster) -> Finding {
    let want_stuck = table.stuck_index().is_some();
    let mut missing: Vec<String> = Vec::new();
    let mut count = 0;
    for node in &cluster.nodes {
        for shard in &node.shards {
            count += 1;
            let t = &shard.table;
            let mut lacks = Vec::new();
            if t.expiry_index().is_none() {
                lacks.push("expiry");
            }
            if t.identity_index().is_none() {
                lacks.push("identity");
            }
            if want_stuck && t.stuck_index().is_none() {
                lacks.push("in_progress");
            }
            if !lacks.is_empty() {
                missing.push(format!(
                    "shard {} on {} lacks the {} index",
                    shard.id,
                    node.name(),
                    lacks.join(" and ")
                ));
            }
        }
    }
    if missing.is_empty() {
        return finding(
            "citus shard indexes",
            Status::Ok,
            format!(
                "all {count} shards carry the expiry and identity indexes{}",
                if want_stuck {
                    " and the in_progress index"
                } else {
                    ""
                }
            ),
            None,
        );
    }
    finding(
        "citus shard indexes",
        Status::Fail,
        missing.join("; "),
        Some(format!(
            "Citus creates a distributed table's indexes on every shard: on the coordinator, drop the index and create it again (DROP INDEX CONCURRENTLY ...; then the CREATE INDEX CONCURRENTLY ... ON {} check shows for it)",
            table.quoted
        )),
    )
}

/// The role's grants on every shard: each grant the commands need that the role has on the
/// coordinator's table must have reached every shard (what it lacks on the coordinator is reported
/// by the privilege checks above).
async fn shard_privileges(
    table: &KeyTable,
    coordinator: &Privileges,
    cluster: &Cluster,
) -> anyhow::Result<Finding> {
    let jobs = [Job::Read, Job::Evict, Job::Reclaim(Action::Delete)];
    let wanted: Vec<String> = jobs
        .iter()
        .flat_map(|job| table.privilege_needs(coordinator, *job))
        .filter(|(_, has)| *has)
        .map(|(g, _)| g)
        .collect();
    let mut short: Vec<String> = Vec::new();
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
                short.push(format!(
                    "shard {} on {}: {}",
                    shard.id,
                    node.name(),
                    lacks.join(", ")
                ));
            }
        }
    }
    let role = sanitize(&coordinator.role);
    if short.is_empty() {
        return Ok(finding(
            "citus shard privileges",
            Status::Ok,
            format!(
                "{role} has on all {shards} shards the grants it has on the coordinator's table"
            ),
            None,
        ));
    }
    Ok(finding(
        "citus shard privileges",
        Status::Fail,
        format!(
            "{role} lacks on {} of {shards} shards grants it has on the coordinator's table, so the commands that work on the shards fail there: {}",
            short.len(),
            short.join("; ")
        ),
        Some(format!(
            "GRANT {} ON {} TO {}; -- on the coordinator: Citus passes grants on a distributed table to every shard",
            wanted.join(", "),
            table.quoted,
            crate::db::table::quote_ident(&coordinator.role)
        )),
    ))
}

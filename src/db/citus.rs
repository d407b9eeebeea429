//! The key table on a Citus cluster: how the coordinator's metadata says it is distributed, where
//! its shards are, and each shard as a key table of its own on the worker that holds it.

use std::time::Duration;

use anyhow::{Context as _, Result};

use super::session::p;
use super::table::ProfileChoice;
use super::{KeyTable, Session};
use crate::domain::TableName;
use crate::exit::{Exit, refuse};
use crate::report::db::{Refusal, Step};
pub(crate) use crate::report::rows::{DistributedReference, Layout, Placement};

const PROPAGATE_SET_LOCAL_SQL: &str = include_str!("../../sql/citus_propagate_set_local.sql");
const CUSTOM_PLAN_LOCAL_SQL: &str = include_str!("../../sql/citus_custom_plan_local.sql");

impl Layout {
    /// Whether Citus keeps the table's rows on the workers, where idemctl works on it shard by
    /// shard: a hash-distributed table, or a single-shard one (a table of a distributed schema).
    pub(crate) fn sharded(&self) -> bool {
        matches!(self, Layout::Distributed { .. } | Layout::SingleShard)
    }

    /// Whether idemctl writes the table through the coordinator to placements on the workers (a
    /// reference table: a copy on every node), rather than shard by shard on the workers or on
    /// the coordinator alone (a Citus local table, written as on one server).
    pub(crate) fn written_through_coordinator(&self) -> bool {
        matches!(self, Layout::Reference)
    }

    /// Whether the statements that lock rows and then change them must find those rows again by
    /// the key's identity rather than by physical address: a reference table or a Citus local
    /// table, whose statements idemctl runs through the coordinator. Citus plans a statement whose
    /// rows are locked in a `WITH` (`FOR UPDATE SKIP LOCKED`) by running that part first and
    /// feeding its rows to the change, and it refuses a change matched by `ctid` then ("Recursively
    /// planned distributed modifications with ctid on where clause are not supported"); see
    /// [`rows_by_identity`].
    pub(crate) fn matches_rows_by_identity(&self) -> bool {
        matches!(self, Layout::Reference | Layout::CitusLocal)
    }
}

/// A statement template that locks rows in a `candidates` CTE and then changes them by physical
/// address (`ctid`, and `tableoid` for a partition), rewritten to find them by the columns that name
/// one row (`{identity_row}`: the identity index's, whatever its width, or the primary key's)
/// instead, for a table Citus runs through the coordinator
/// ([`Layout::matches_rows_by_identity`]). The identity is unique there (the caller requires the
/// identity index), so the change touches exactly the rows the `WITH` locked, and re-checks on each
/// what the template re-checks. `None` when the template does not have the shape this rewrites (a
/// line other than a comment still naming `ctid`), so a changed template is never run half
/// rewritten.
pub fn rows_by_identity(template: &str) -> Option<String> {
    let mut out = String::with_capacity(template.len());
    // A join's locking SELECT is wrapped in a subquery: Citus (13.2) hands the rows of a
    // `SELECT ... JOIN ... FOR UPDATE OF t` in a `WITH` to the change that follows incomplete
    // ("missing data for column"), and those of a plain SELECT over it intact.
    let mut wrapped = false;
    for line in template.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        let code = line.trim();
        // A statement's markers for other parts (`/*{candidate_keys}*/`, `/*{ready}*/`) are kept.
        let rewritten = if let Some(rest) = code.strip_prefix("SELECT tableoid, ctid") {
            format!("SELECT {{identity_as}}{rest}")
        } else if code == "SELECT t.tableoid, t.ctid" {
            wrapped = true;
            "SELECT {identity_ids} FROM (SELECT {t.identity_as}".to_owned()
        } else if code == "FOR UPDATE OF t SKIP LOCKED" && wrapped {
            wrapped = false;
            "FOR UPDATE OF t SKIP LOCKED) AS locked".to_owned()
        } else if let Some(from) = code
            .strip_prefix("WHERE ctid = ANY (ARRAY(SELECT ctid FROM ")
            .and_then(|r| r.strip_suffix("candidates))"))
        {
            format!("WHERE {{identity_row}} IN (SELECT {{identity_ids}} FROM {from}candidates)")
        } else if code.starts_with("AND (tableoid, ctid) IN (SELECT tableoid, ctid FROM ")
            && code.ends_with("candidates)")
        {
            continue;
        } else if code == "WHEN t.ctid IS NULL THEN 'gone'" {
            "WHEN {t.key} IS NULL THEN 'gone'".to_owned()
        } else if !code.starts_with("--") && code.contains("ctid") {
            return None;
        } else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        out.push_str(indent);
        out.push_str(&rewritten);
        out.push('\n');
    }
    (!wrapped).then_some(out)
}

/// Inside a transaction of `session` that writes through the coordinator: keep this
/// transaction's row (and table) waits to `wait` on every node it writes on. Citus passes a
/// session's `lock_timeout` to no worker connection; a `SET LOCAL` made after
/// `SET LOCAL citus.propagate_set_commands = 'local'` reaches every worker connection of the
/// transaction. Each is its own message: Citus passes on the text of the message the `SET LOCAL`
/// came in.
pub(crate) async fn bound_row_waits(session: &Session, wait: Duration) -> Result<()> {
    session
        .batch_execute(PROPAGATE_SET_LOCAL_SQL)
        .await
        .context(Step::PassSettingsToWorkers)?;
    session
        .set_local("lock_timeout", &format!("{}ms", wait.as_millis()))
        .await
        .context(Step::SetBatchLockTimeout)
}

/// Inside a batch's transaction on a table Citus plans on the coordinator
/// ([`Layout::matches_rows_by_identity`]): plan the statements with their parameters' values
/// (`SET LOCAL`: nothing outlives the transaction). Citus cannot plan a statement that locks rows
/// in a `WITH` and changes them from a generic plan, which evict's sessions ask for.
pub(crate) async fn plan_with_values(session: &Session) -> Result<()> {
    session
        .batch_execute(CUSTOM_PLAN_LOCAL_SQL)
        .await
        .context(Step::PlanWithValues)
}

#[cfg(test)]
mod tests {
    use super::rows_by_identity;

    /// Every template that changes the rows it locked by ctid has the shape the rewrite knows, and
    /// the rewrite leaves no ctid outside the comments.
    #[test]
    fn every_ctid_template_is_rewritten_to_the_identity() {
        let templates = [
            include_str!("../../sql/reclaim_delete.sql"),
            include_str!("../../sql/reclaim_fail.sql"),
            include_str!("../../sql/reclaim_release.sql"),
            include_str!("../../sql/reclaim_apply_delete.sql"),
            include_str!("../../sql/reclaim_apply_fail.sql"),
            include_str!("../../sql/reclaim_apply_release.sql"),
            include_str!("../../sql/evict_batch_skip_locked.sql"),
        ];
        for t in templates {
            let r = rows_by_identity(t).expect("a template of the known shape");
            let code: Vec<&str> = r
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect();
            assert!(
                !code
                    .iter()
                    .any(|l| l.contains("ctid") || l.contains("tableoid")),
                "{r}"
            );
            assert!(r.contains("IN (SELECT {identity_ids} FROM "), "{r}");
        }
        assert!(rows_by_identity("SELECT ctid FROM t").is_none());
    }
}

/// `None` when Citus is not installed in the database or does not manage the table.
pub(crate) async fn layout(client: &Session, table: &KeyTable) -> Result<Option<Layout>> {
    let installed: bool = client
        .query_one(include_str!("../../sql/citus_installed.sql"), &[])
        .await
        .context(Step::CheckCitus)?
        .get("installed");
    if !installed {
        return Ok(None);
    }
    let Some(row) = client
        .query_opt(
            include_str!("../../sql/citus_distribution.sql"),
            &[p(&table.oid)],
        )
        .await
        .context(Step::ReadDistribution)?
    else {
        return Ok(None);
    };
    let method: String = row.get("method");
    let replication: String = row.get("replication");
    let colocation: i64 = row.get("colocation_id");
    Ok(Some(match method.as_str() {
        "h" => Layout::Distributed {
            column: row.get::<_, Option<String>>("column").unwrap_or_default(),
            shards: row.get("shards"),
        },
        _ if replication == "t" => Layout::Reference,
        _ if colocation > 0 => Layout::SingleShard,
        _ => Layout::CitusLocal,
    }))
}

/// The global pids of this node's sessions whose distributed queries are not the foreground: Citus's
/// background processes of the database and idemctl's own sessions (sql/citus_not_foreground.sql).
/// `node` names the node in the error.
pub(crate) async fn not_foreground(client: &Session, node: &str) -> Result<Vec<i64>> {
    Ok(client
        .query_one(include_str!("../../sql/citus_not_foreground.sql"), &[])
        .await
        .with_context(|| Step::ReadCitusSessions(node.to_owned()))?
        .get("gpids"))
}

/// The statements, run on the coordinator, that give every shard of a distributed table an index
/// again that some shard lost (dropped on its worker): drop the coordinator's index (`existing`)
/// where it still is (`IF EXISTS`: Citus passes the drop to every shard, and a plain drop fails on
/// the shard without it, leaving the coordinator's index invalid), then `create` it, which Citus
/// creates on every shard.
pub(crate) fn recreate_index(
    table: &KeyTable,
    existing: Option<&super::table::Index>,
    create: &str,
) -> String {
    let drop = existing.map_or_else(String::new, |i| {
        format!(
            "DROP INDEX CONCURRENTLY IF EXISTS {}.{}; ",
            crate::ident::quote_ident(&table.schema),
            crate::ident::quote_ident(&i.name)
        )
    });
    format!("{drop}{create}")
}

/// What the current role may do on one shard (sql/citus_shard_privileges.sql).
#[derive(Clone, Debug)]
pub(crate) struct ShardGrants {
    pub role: String,
    pub select: bool,
    pub delete: bool,
    pub lock_rows: bool,
    /// May call the function evict's durable points call on this worker.
    pub confirm: bool,
    /// That function as a GRANT names it.
    pub confirm_function: Option<String>,
}

/// The role's grants on the shards `oids` of one worker, in one catalog lookup on that worker.
pub(crate) async fn shard_grants(client: &Session, oids: &Vec<i64>) -> Result<Vec<ShardGrants>> {
    let rows = client
        .query(
            include_str!("../../sql/citus_shard_privileges.sql"),
            &[p(oids)],
        )
        .await
        .context(Step::ReadShardPrivileges)?;
    rows.iter()
        .map(|r| {
            Ok(ShardGrants {
                role: r.try_get("role")?,
                select: r.try_get("can_select")?,
                delete: r.try_get("can_delete")?,
                lock_rows: r.try_get("can_lock_rows")?,
                confirm: r.try_get("can_confirm")?,
                confirm_function: r.try_get("confirm_function")?,
            })
        })
        .collect()
}

/// The foreign keys that reference each of `shards` (shards of one worker, resolved there), read
/// from that worker's catalog in one read-only transaction that shows the shards: on a worker, a
/// shard of the key table is referenced by the colocated shards of the distributed tables that
/// reference the key table, which are what a batch's DELETE there checks or changes. In the order
/// of `shards`.
pub(crate) async fn shard_referencing_keys(
    client: &Session,
    shards: &[&KeyTable],
) -> Result<Vec<Vec<super::queries::ReferencingKey>>> {
    begin_catalog_reads(client).await?;
    let mut keys = Vec::with_capacity(shards.len());
    let mut read = Ok(());
    for shard in shards {
        match super::queries::referencing_keys(client, shard).await {
            Ok(k) => keys.push(k),
            Err(e) => {
                read = Err(e);
                break;
            }
        }
    }
    // A read that failed on a lost connection is what the line names, not the end that follows.
    let ended = end_catalog_reads(client).await;
    read?;
    ended.map(|()| keys)
}

/// The foreign keys with ON DELETE NO ACTION / RESTRICT that reference the reference table `table`
/// from a distributed table, from the coordinator's catalog.
pub(crate) async fn distributed_blocking_references(
    client: &Session,
    table: &KeyTable,
) -> Result<Vec<DistributedReference>> {
    let rows = client
        .query(
            include_str!("../../sql/citus_distributed_referencing.sql"),
            &[p(&table.oid)],
        )
        .await
        .context(Step::ReadDistributedReferences)?;
    rows.iter()
        .map(|r| {
            Ok(DistributedReference {
                name: r.try_get("name")?,
                referencing_table: r.try_get("referencing_table")?,
                on_delete: r.try_get("on_delete")?,
            })
        })
        .collect()
}

/// Every shard of a distributed table with its node, ordered by node then shard.
pub(crate) async fn placements(client: &Session, table: &KeyTable) -> Result<Vec<Placement>> {
    let rows = client
        .query(include_str!("../../sql/citus_shards.sql"), &[p(&table.oid)])
        .await
        .context(Step::ListShards)?;
    rows.iter()
        .map(|r| {
            let port: i32 = r.get("port");
            let node: String = r.get("node");
            let Ok(tcp_port) = u16::try_from(port) else {
                return Err(refuse(Exit::Failure, Refusal::NodePort { node, port }));
            };
            Ok(Placement {
                shard_id: r.get("shard_id"),
                node,
                port: tcp_port,
            })
        })
        .collect()
}

/// The shard of the hash-distributed `table` that holds the rows whose distribution column is
/// `value`.
pub(crate) async fn shard_for(client: &Session, table: &KeyTable, value: &str) -> Result<i64> {
    Ok(client
        .query_one(
            include_str!("../../sql/citus_shard_for_tenant.sql"),
            &[p(&table.oid), p(&value)],
        )
        .await
        .context(Step::FindTenantShard)?
        .get("shard_id"))
}

/// The shard holding each of `values` (distribution-column values), in their order.
pub(crate) async fn shards_for(
    client: &Session,
    table: &KeyTable,
    values: &Vec<&str>,
) -> Result<Vec<i64>> {
    let rows = client
        .query(
            include_str!("../../sql/citus_shards_for_tenants.sql"),
            &[p(&table.oid), p(values)],
        )
        .await
        .context(Step::FindPlanShards)?;
    Ok(rows.iter().map(|r| r.get("shard_id")).collect())
}

/// The shard's table name on its worker: Citus appends `_<shard id>` to the table's name.
fn shard_name(table: &KeyTable, shard_id: i64) -> TableName {
    TableName {
        schema: Some(table.schema.clone()),
        name: format!("{}_{shard_id}", table.name),
    }
}

/// The shard as a key table of its own, read from the worker's catalog (its own oid, columns and
/// indexes). Citus hides shards from client sessions' catalog queries, so the lookup runs in a
/// read-only transaction that shows them (`SET LOCAL`: nothing outlives it).
pub(crate) async fn resolve_shard(
    client: &Session,
    table: &KeyTable,
    placement: &Placement,
) -> Result<KeyTable> {
    let name = shard_name(table, placement.shard_id);
    let reading = || Step::ReadShard {
        shard_id: placement.shard_id,
        node: placement.node.clone(),
        port: placement.port,
    };
    begin_catalog_reads(client).await.with_context(reading)?;
    // The shard has the table's columns: it plays the same profile.
    let choice = ProfileChoice {
        mapping: Some(table.profile.clone()),
        ..ProfileChoice::default()
    };
    let resolved = KeyTable::resolve(client, &name, &choice).await;
    // A read that failed on a lost connection is what the line names, not the end that follows.
    if let Err(ended) = end_catalog_reads(client).await {
        return Err(resolved.err().unwrap_or(ended).context(reading()));
    }
    resolved.map_err(|e| {
        refuse(
            Exit::NotFound,
            Refusal::ShardMissing {
                shard_id: placement.shard_id,
                table: table.qualified_name(),
                shard: name.to_string(),
                node: placement.node.clone(),
                port: placement.port,
                // Not found: the shard's table is not on the node, which the line says.
                why: (crate::exit::classify(&e) != Exit::NotFound)
                    .then(|| crate::domain::one_line(&e)),
            },
        )
    })
}

/// Start a read-only transaction whose catalog queries see the shards; end it with
/// [`end_catalog_reads`].
pub(crate) async fn begin_catalog_reads(client: &Session) -> Result<()> {
    client
        .begin("BEGIN READ ONLY")
        .await
        .context(Step::StartWorkerReads)?;
    client
        .batch_execute(include_str!("../../sql/citus_show_shards.sql"))
        .await
        .context(Step::ShowShards)
}

/// Ends [`begin_catalog_reads`].
pub(crate) async fn end_catalog_reads(client: &Session) -> Result<()> {
    client.commit().await.context(Step::EndWorkerReads)
}

//! The leaf partitions of a partitioned key table, from the catalog, and the statements that let
//! `evict --drop-partitions` detach and drop one whole (probe under the detach's lock, then drop).

use crate::db::{Session, p};
use crate::report::timestamp::Timestamp;
use anyhow::{Context as _, Result};
use time::OffsetDateTime;

use super::KeyTable;
use crate::ident::quote_ident;
use crate::report::db::Step;
pub(crate) use crate::report::rows::Partition;

/// Lists every leaf partition with its bounds (catalog only).
pub(crate) const LIST_SQL: &str = include_str!("../../sql/table_partitions.sql");
/// Decides, on a detached partition, whether it may be dropped.
pub(crate) const PROBE_SQL: &str = include_str!("../../sql/evict_partition_probe.sql");
/// The probe where the partition's bound proves its keys expired (no expiry index to read).
pub(crate) const PROBE_IN_FLIGHT_SQL: &str =
    include_str!("../../sql/evict_partition_probe_in_flight.sql");
/// Detaches a partition from the key table.
pub(crate) const DETACH_SQL: &str = include_str!("../../sql/evict_partition_detach.sql");
/// Drops a detached partition.
pub(crate) const DROP_SQL: &str = include_str!("../../sql/evict_partition_drop.sql");

/// Every leaf partition of `table` (empty for a plain table), ordered by lower bound, the default
/// partition last.
pub(crate) async fn list(client: &Session, table: &KeyTable) -> Result<Vec<Partition>> {
    if !table.partitioned {
        return Ok(Vec::new());
    }
    let timestamp_bounds = table.range_key().is_some();
    let rows = client
        .query(LIST_SQL, &[p(&table.oid), p(&timestamp_bounds)])
        .await
        .context(Step::ListPartitions)?;
    Ok(rows
        .iter()
        .map(|r| {
            let schema: String = r.get("schema");
            let name: String = r.get("name");
            Partition {
                name: format!("{schema}.{name}"),
                quoted: format!("{}.{}", quote_ident(&schema), quote_ident(&name)),
                bound: r.get("bound"),
                is_default: r.get("is_default"),
                direct: r.get("direct"),
                estimated_rows: r.get("estimated_rows"),
                never_analyzed: r.get("never_analyzed"),
                total_bytes: r.get("total_bytes"),
                owned: r.get("owned"),
                range_from: r.get("range_from"),
                range_to: r.get("range_to"),
                db_now: r.get("db_now"),
            }
        })
        .collect())
}

impl Partition {
    /// Substitute the key table and this partition into a statement from `sql/`.
    pub(crate) fn sql(&self, table: &KeyTable, template: &str) -> String {
        table.sql(template).replace("{partition}", &self.quoted)
    }
}

/// What the probe found in a partition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Probe {
    pub holds_in_progress: bool,
    pub newest_expiry: Option<Timestamp>,
    pub db_now: OffsetDateTime,
}

impl Probe {
    /// Every row expired by the database clock and none in_progress (an empty partition qualifies).
    pub(crate) fn droppable(&self) -> bool {
        !self.holds_in_progress
            && self
                .newest_expiry
                .is_none_or(|t| t < Timestamp::At(self.db_now))
    }
}

/// Run the probe on `partition` (two index probes). `bound_expiry`: the latest expiry the
/// partition's bound allows, given where the table has no expiry index to find it through; the
/// probe then only looks for an in_progress key (one index probe).
pub(crate) async fn probe(
    client: &Session,
    table: &KeyTable,
    partition: &Partition,
    bound_expiry: Option<Timestamp>,
) -> Result<Probe> {
    let sql = match bound_expiry {
        Some(_) => PROBE_IN_FLIGHT_SQL,
        None => PROBE_SQL,
    };
    let row = client
        .query_one(&partition.sql(table, sql), &[])
        .await
        .with_context(|| Step::ProbePartition(partition.name.clone()))?;
    Ok(Probe {
        holds_in_progress: row.get("holds_in_progress"),
        newest_expiry: match bound_expiry {
            Some(t) => Some(t),
            None => row.get("newest_expiry"),
        },
        db_now: row.get("db_now"),
    })
}

/// The transaction's lock_timeout (the DDL below must not queue behind the API's statements). An
/// interval literal from an integer: nothing from the command line is spliced as text.
pub(crate) async fn set_local_lock_timeout(
    client: &Session,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let millis = timeout.as_millis().max(1);
    client
        .set_local("lock_timeout", &format!("{millis}ms"))
        .await
}

/// Detach `partition` from the key table (inside the caller's transaction).
pub(crate) async fn detach(
    client: &Session,
    table: &KeyTable,
    partition: &Partition,
) -> anyhow::Result<()> {
    client
        .batch_execute(&partition.sql(table, DETACH_SQL))
        .await
}

/// Drop a partition detached in the same transaction.
pub(crate) async fn drop_detached(
    client: &Session,
    table: &KeyTable,
    partition: &Partition,
) -> anyhow::Result<()> {
    client.batch_execute(&partition.sql(table, DROP_SQL)).await
}

/// Start the transaction that detaches, proves and drops one partition.
pub(crate) async fn begin(client: &Session) -> anyhow::Result<()> {
    client.begin("BEGIN").await
}

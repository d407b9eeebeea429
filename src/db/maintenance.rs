//! What follows eviction: autovacuum's settings and counts for the key table (each leaf partition),
//! and the TTL of recent keys. Catalog reads and one bounded, index-backed statement.

use anyhow::{Context as _, Result};

use crate::db::{KeyTable, Session, p};
use crate::report::db::Step;
pub(crate) use crate::report::rows::{AutovacuumRel, RecentTtl, TtlBucket};

/// The autovacuum statement (catalog only).
pub(crate) const AUTOVACUUM_SQL: &str = include_str!("../../sql/stats_autovacuum.sql");
/// The recent-TTL statement (the key table, index-backed).
pub(crate) const RECENT_TTL_SQL: &str = include_str!("../../sql/stats_recent_ttl.sql");

/// Autovacuum's settings and counts for the table, or each of its leaf partitions.
pub(crate) async fn autovacuum(client: &Session, table: &KeyTable) -> Result<Vec<AutovacuumRel>> {
    let rows = client
        .query(AUTOVACUUM_SQL, &[p(&table.oid)])
        .await
        .context(Step::ReadAutovacuumSettings)?;
    Ok(rows
        .iter()
        .map(|r| {
            let schema: String = r.get("schema_name");
            let name: String = r.get("relation");
            AutovacuumRel {
                relation: format!(
                    "{}.{}",
                    crate::ident::quote_ident_if_needed(&schema),
                    crate::ident::quote_ident_if_needed(&name)
                ),
                reltuples: r.get("reltuples"),
                live_tuples: r.get("live_tuples"),
                dead_tuples: r.get("dead_tuples"),
                base_threshold: r.get("base_threshold"),
                scale_factor: r.get("scale_factor"),
                own_settings: r.get("own_settings"),
                enabled: r.get::<_, bool>("server_enabled") && r.get::<_, bool>("table_enabled"),
                last_vacuum: r.get("last_vacuum"),
            }
        })
        .collect())
}

/// The upper bounds of the TTL histogram's buckets, as sql/stats_recent_ttl.sql counts them:
/// 1 minute, 10 minutes, 1 hour, 6 hours, 1 day, 7 days.
pub(crate) const TTL_BUCKETS: [f64; 6] = [60.0, 600.0, 3_600.0, 21_600.0, 86_400.0, 604_800.0];

/// Keys sampled from each end of the expiry index.
pub(crate) const TTL_SAMPLE: i64 = 500;

/// The TTL of recent keys: with an expiry column, the `TTL_SAMPLE` keys that expire next and the
/// `TTL_SAMPLE` that expire last (None for an empty table); without one, the TTL every key has.
pub(crate) async fn recent_ttl(
    client: &Session,
    table: &KeyTable,
    below_seconds: Option<f64>,
) -> Result<Option<RecentTtl>> {
    if let crate::db::profile::Expiry::CreatedPlusTtl { ttl_seconds, .. } = &table.profile.expiry {
        return Ok(ttl_seconds.map(|t| RecentTtl {
            source: "ttl",
            keys: 0,
            min_seconds: t,
            p10_seconds: t,
            p50_seconds: t,
            p90_seconds: t,
            max_seconds: t,
            newest_created_at: None,
            keys_below: 0,
            histogram: Vec::new(),
        }));
    }
    let r = client
        .query_one(
            &table.sql(RECENT_TTL_SQL),
            &[p(&TTL_SAMPLE), p(&below_seconds)],
        )
        .await
        .context(Step::SampleTtl)?;
    let keys: i64 = r.get("keys");
    if keys == 0 {
        return Ok(None);
    }
    Ok(Some(RecentTtl {
        source: "sample",
        keys,
        min_seconds: r.get("min_seconds"),
        p10_seconds: r.get("p10_seconds"),
        p50_seconds: r.get("p50_seconds"),
        p90_seconds: r.get("p90_seconds"),
        max_seconds: r.get("max_seconds"),
        newest_created_at: r.get("newest_created_at"),
        keys_below: r.get("keys_below"),
        histogram: histogram(&r.get::<_, Vec<i64>>("buckets")),
    }))
}

/// The statement's bucket counts with their bounds.
fn histogram(counts: &[i64]) -> Vec<TtlBucket> {
    counts
        .iter()
        .enumerate()
        .map(|(n, &keys)| TtlBucket {
            under_seconds: TTL_BUCKETS.get(n).copied(),
            keys,
        })
        .collect()
}

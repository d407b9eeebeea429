//! idemctl on a real Citus 13 cluster (a coordinator and two workers, `support/citus.rs`): the key
//! table of sql/schema.sql distributed by api_key_id, and as a reference table and a plain table on
//! the coordinator for comparison. Every command keeps its guarantees there.

use std::collections::BTreeMap;

use crate::fixtures::{Mix, Seen, evictable, load_sql, snapshot_of};
use crate::support::citus::{CitusDb, Layout, skipped};

const MIX: Mix = Mix {
    expired: 3000,
    live: 800,
    fresh: 50,
    stuck: 40,
    expired_in_progress: 30,
};

/// More tenants than the fixtures' seven, so both workers hold keys (before distributing: Citus
/// refuses to change a distribution column).
const MORE_TENANTS: &str =
    "UPDATE idempotency_keys SET api_key_id = api_key_id || '_' || (hashtext(key) & 7)";

/// The key table loaded with [`MIX`] (56 tenants), then handed to Citus as `layout`; `None` when
/// the Citus tests are explicitly turned off (`IDEMCTL_TEST_CITUS=skip`).
async fn loaded(layout: Layout, test: &str) -> Option<CitusDb> {
    if skipped(test) {
        return None;
    }
    let db = CitusDb::new(None).await;
    db.exec(include_str!("../../sql/schema.sql")).await;
    db.exec(&load_sql(MIX)).await;
    db.exec(MORE_TENANTS).await;
    db.distribute(layout).await;
    Some(db)
}

async fn snapshot(db: &CitusDb) -> BTreeMap<(String, String), Seen> {
    snapshot_of(&db.client().await).await
}

/// Rows per worker node of the distributed table (shard placements on each node).
async fn rows_per_node(db: &CitusDb) -> Vec<i64> {
    let client = db.client().await;
    let rows = client
        .query(
            "SELECT nodeport, sum((result)::bigint)::bigint FROM run_command_on_shards('idempotency_keys', \
             $$SELECT count(*) FROM %s$$) r JOIN citus_shards s ON s.shardid = r.shardid \
             GROUP BY nodeport ORDER BY nodeport",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(1)).collect()
}

async fn evicts_exactly_the_expired_completed_rows(layout: Layout) {
    let Some(db) = loaded(layout, &format!("citus evict ({layout:?})")).await else {
        return;
    };
    if layout == Layout::ByTenant {
        let per_node = rows_per_node(&db).await;
        assert!(
            per_node.len() == 2 && per_node.iter().all(|n| *n > 0),
            "both workers must hold keys: {per_node:?}"
        );
    }
    let before = snapshot(&db).await;
    let run = db.idemctl().args(["evict", "-o", "json"]).run();
    run.assert_code(0);
    let report = run.json();
    let after = snapshot(&db).await;
    let expected: Vec<_> = before.iter().filter(|(_, s)| !evictable(s)).collect();
    assert_eq!(
        after.len(),
        expected.len(),
        "rows left after evict: {report}"
    );
    for (k, seen) in expected {
        assert_eq!(after.get(k), Some(seen), "row {k:?} was deleted or changed");
    }
    assert_eq!(report["rows_evicted"], MIX.expired, "{report}");
    assert_eq!(report["end_reason"], "drained", "{report}");
    assert_eq!(report["backlog_left"]["count"], 0, "{report}");
    // Counted as the batches pass over them; a range walked twice (a retried batch) counts its
    // in_progress keys again, so this is a lower bound here. The snapshot above proves they stay.
    let in_progress_left = report["expired_in_progress_left"]["count"]
        .as_i64()
        .unwrap();
    assert!(in_progress_left >= MIX.expired_in_progress, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_deletes_exactly_expired_completed_rows_of_a_reference_table() {
    evicts_exactly_the_expired_completed_rows(Layout::Reference).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_deletes_exactly_expired_completed_rows_of_a_local_table() {
    evicts_exactly_the_expired_completed_rows(Layout::Local).await;
}

//! Refusals and failures that only a Citus cluster can cause, each provoked for real on the test
//! cluster and asserted as the whole line with its exit code: a table whose rows the coordinator
//! cannot name, a plan row whose shard lost its placement, and workers idemctl cannot reach or set
//! up. Each test works in a database of its own (the metadata Citus keeps per database), or on a
//! cluster of its own when it stops or cuts a node.

use crate::citus::{IN_PROGRESS_INDEX, MIX, snapshot};
use crate::fixtures::load_sql;
use crate::support::citus::{CitusDb, Layout, skipped};

/// reclaim on a Citus reference table with no unique index on the key's identity: Citus changes
/// the rows of such a table only when they are named by their identity, so the sweep is refused
/// before any change (exit 2) with the index to create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_reclaim_refuses_a_reference_table_without_an_identity_index() {
    if skipped("citus reclaim without an identity index") {
        return;
    }
    let db = CitusDb::new(None).await;
    db.exec(include_str!("../../sql/schema.sql")).await;
    db.exec("ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey")
        .await;
    db.exec(IN_PROGRESS_INDEX).await;
    db.exec(&load_sql(MIX)).await;
    db.distribute(Layout::Reference).await;
    let before = snapshot(&db).await;
    db.idemctl()
        .args(["reclaim", "--yes", "--older-than", "30m"])
        .run()
        .assert_error(2, "table public.idempotency_keys is a reference table: Citus changes its rows only when they are named by their identity (api_key_id, key), which needs a unique index on exactly those columns on a table that is not partitioned; nothing was changed: create it with: CREATE UNIQUE INDEX CONCURRENTLY \"idempotency_keys_scope\" ON \"public\".\"idempotency_keys\" (api_key_id, key);");
    assert_eq!(snapshot(&db).await, before);
}

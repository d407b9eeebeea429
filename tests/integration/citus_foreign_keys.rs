//! Tables that reference the key table on a Citus cluster. On a table distributed by the tenant,
//! evict runs each batch on one shard on its worker, where the colocated shards of a referencing
//! distributed table are what the foreign key checks: a key a NO ACTION / RESTRICT row still
//! references is left behind and counted there too (never a failed run), and an ON DELETE CASCADE
//! deletes the referencing shard's rows within the batch, skipping a key whose referencing row a
//! live transaction holds. On a reference table and a Citus local table (written through the
//! coordinator) referenced keys are left and counted as well; a reference table that a distributed
//! table references with NO ACTION is refused before any change.

use crate::citus::loaded_with;
use crate::fixtures::Mix;
use crate::support::citus::{CitusDb, Layout};

const MIX: Mix = Mix {
    expired: 1500,
    live: 300,
    fresh: 10,
    stuck: 10,
    expired_in_progress: 10,
};

/// `table`, referencing the key table by (api_key_id, key) ON DELETE `action` (indexed) and handed
/// to Citus by `make` (`{table}` stands for its name); one row on the oldest expired completed key
/// and one on the first live key of each of `tenants` tenants from the `offset`-th on.
async fn referencing_as(
    db: &CitusDb,
    table: &str,
    action: &str,
    make: &str,
    tenants: i64,
    offset: i64,
) {
    let pick = |expired: &str| {
        format!(
            "INSERT INTO {table} (api_key_id, idem_key) \
               SELECT api_key_id, key FROM ( \
                 SELECT DISTINCT ON (api_key_id) api_key_id, key FROM idempotency_keys \
                  WHERE expires_at {expired} now() AND state = 'completed' \
                  ORDER BY api_key_id, expires_at) o \
                ORDER BY api_key_id OFFSET {offset} LIMIT {tenants}"
        )
    };
    // One statement at a time: Citus refuses some of them in a multi-statement string.
    for sql in [
        format!(
            "CREATE TABLE {table} (id bigserial, api_key_id text NOT NULL, idem_key text, \
                                   PRIMARY KEY (api_key_id, id), \
                                   FOREIGN KEY (api_key_id, idem_key) \
                                     REFERENCES idempotency_keys (api_key_id, key) \
                                     ON DELETE {action})"
        ),
        format!("CREATE INDEX ON {table} (api_key_id, idem_key)"),
        make.replace("{table}", table),
        pick("<"),
        pick(">"),
    ] {
        db.exec(&sql).await;
    }
}

/// Like [`referencing_as`], distributed by the tenant and colocated with the key table.
async fn referencing(db: &CitusDb, table: &str, action: &str, tenants: i64, offset: i64) {
    let make = "SELECT create_distributed_table('{table}', 'api_key_id', \
                                                colocate_with => 'idempotency_keys')";
    referencing_as(db, table, action, make, tenants, offset).await;
}

async fn count(db: &CitusDb, sql: &str) -> i64 {
    db.client().await.query_one(sql, &[]).await.unwrap().get(0)
}

const EXPIRED_COMPLETED: &str =
    "SELECT count(*) FROM idempotency_keys WHERE expires_at < now() AND state = 'completed'";

/// The keys `table`'s rows reference that are still in the key table.
fn still_there(table: &str) -> String {
    format!(
        "SELECT count(*) FROM {table} c JOIN idempotency_keys k \
           ON k.api_key_id = c.api_key_id AND k.key = c.idem_key"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_leaves_keys_a_colocated_no_action_or_restrict_row_references() {
    let Some(db) = loaded_with(Layout::ByTenant, MIX, "citus evict beside NO ACTION keys").await
    else {
        return;
    };
    referencing(&db, "charges", "NO ACTION", 6, 0).await;
    referencing(&db, "refunds", "RESTRICT", 6, 6).await;
    // The preview, made on the coordinator, counts them and says so for each foreign key.
    let dry = db
        .idemctl()
        .args(["evict", "--dry-run", "-o", "json"])
        .run();
    dry.assert_code(0);
    let notes = dry.json()["notes"].clone();
    let notes: Vec<&str> = notes
        .as_array()
        .unwrap_or_else(|| panic!("{dry}"))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), 2, "{dry}");
    for (n, (t, on_delete)) in notes
        .iter()
        .zip([("charges", "NO ACTION"), ("refunds", "RESTRICT")])
    {
        assert_eq!(
            *n,
            format!(
                "would evict includes the expired keys {t} (api_key_id, idem_key) still references ON DELETE {on_delete}: on Citus the preview does not tell them apart; the run leaves them and counts them as skipped_referenced"
            ),
            "{dry}"
        );
    }
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--batch-size", "40"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["end_reason"], "drained", "{j}");
    assert_eq!(j["skipped_referenced"], 12, "{j}");
    assert_eq!(j["rows_evicted"], MIX.expired - 12, "{j}");
    assert_eq!(j["backlog_left"]["count"], 12, "{j}");
    let nodes = j["citus"]["nodes"].as_array().unwrap();
    let per_node: Vec<i64> = nodes
        .iter()
        .map(|n| n["skipped_referenced"].as_i64().unwrap())
        .collect();
    assert_eq!(per_node.iter().sum::<i64>(), 12, "{j}");
    assert!(per_node.iter().all(|n| *n > 0), "on both workers: {j}");
    for n in nodes {
        assert_eq!(n["shards_drained"], n["shards"], "{j}");
    }
    assert_eq!(count(&db, EXPIRED_COMPLETED).await, 12);
    for table in ["charges", "refunds"] {
        assert_eq!(count(&db, &still_there(table)).await, 12, "{table}");
    }
    // The next run leaves them again, and says so per worker.
    let again = db.idemctl().args(["evict", "-o", "plain"]).run();
    again.assert_code(0);
    assert!(
        again.stdout.matches("skipped (still referenced)").count() >= 2,
        "{again}"
    );
    // Once nothing references them, they go.
    db.exec("DELETE FROM charges; DELETE FROM refunds").await;
    let run = db.idemctl().args(["evict", "-o", "json"]).run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], 12, "{run}");
    assert_eq!(run.json()["skipped_referenced"], 0, "{run}");
    assert_eq!(count(&db, EXPIRED_COMPLETED).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_cascades_to_colocated_rows_and_skips_a_key_whose_referencing_row_is_held() {
    let Some(db) = loaded_with(Layout::ByTenant, MIX, "citus evict with CASCADE").await else {
        return;
    };
    referencing(&db, "charges", "CASCADE", 6, 0).await;
    // A live transaction holds one referencing row of an expired key (routed to its worker).
    let live = db.client().await;
    let held = live
        .query_one(
            "SELECT c.api_key_id, c.idem_key FROM charges c JOIN idempotency_keys k \
               ON k.api_key_id = c.api_key_id AND k.key = c.idem_key \
             WHERE k.expires_at < now() ORDER BY c.api_key_id LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (tenant, key): (String, String) = (held.get(0), held.get(1));
    live.batch_execute("BEGIN").await.unwrap();
    live.execute(
        "SELECT 1 FROM charges WHERE api_key_id = $1 AND idem_key = $2 FOR UPDATE",
        &[&tenant, &key],
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--batch-size", "40"])
        .run_async()
        .await;
    let took = started.elapsed();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["end_reason"], "drained", "{j}");
    assert_eq!(j["skipped_locked"], 1, "{j}");
    assert_eq!(j["skipped_referenced"], 0, "{j}");
    assert_eq!(j["rows_evicted"], MIX.expired - 1, "{j}");
    assert!(took < std::time::Duration::from_secs(30), "{took:?}");
    // The cascade took the expired keys' rows; the held one and the live keys' rows stay.
    assert_eq!(count(&db, "SELECT count(*) FROM charges").await, 7);
    assert_eq!(count(&db, &still_there("charges")).await, 7);
    live.batch_execute("COMMIT").await.unwrap();
    let run = db.idemctl().args(["evict", "-o", "json"]).run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], 1, "{run}");
    assert_eq!(count(&db, "SELECT count(*) FROM charges").await, 6);
    assert_eq!(count(&db, EXPIRED_COMPLETED).await, 0);
}

/// On a reference table and on a Citus local table, written through the coordinator, evict leaves
/// the keys a NO ACTION row of a reference table (a Citus local table) still references too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_leaves_keys_a_no_action_row_references_on_a_reference_or_citus_local_table() {
    let cases = [
        (
            Layout::Reference,
            "SELECT create_reference_table('{table}')",
        ),
        (
            Layout::CitusLocal,
            "SELECT citus_add_local_table_to_metadata('{table}')",
        ),
    ];
    for (layout, make) in cases {
        let test = format!("citus evict beside NO ACTION keys ({layout:?})");
        let Some(db) = loaded_with(layout, MIX, &test).await else {
            return;
        };
        referencing_as(&db, "charges", "NO ACTION", make, 3, 0).await;
        // On the Citus local table a live request holds an expired key that nothing references,
        // among the referenced ones: the SKIP LOCKED fallback (rows found by identity) leaves out
        // both kinds.
        let live = db.client().await;
        let held = layout == Layout::CitusLocal;
        if held {
            live.batch_execute(
                "BEGIN; SELECT 1 FROM idempotency_keys k \
                  WHERE expires_at < now() AND state = 'completed' \
                    AND NOT EXISTS (SELECT 1 FROM charges c \
                                     WHERE c.api_key_id = k.api_key_id AND c.idem_key = k.key) \
                  ORDER BY expires_at LIMIT 1 FOR UPDATE",
            )
            .await
            .unwrap();
        }
        let run = db
            .idemctl()
            .args(["evict", "-o", "json", "--batch-size", "40"])
            .run_async()
            .await;
        run.assert_code(0);
        let j = run.json();
        let locked = i64::from(held);
        assert_eq!(j["end_reason"], "drained", "{layout:?}: {j}");
        assert_eq!(j["skipped_referenced"], 3, "{layout:?}: {j}");
        assert_eq!(j["skipped_locked"], locked, "{layout:?}: {j}");
        assert_eq!(
            j["rows_evicted"],
            MIX.expired - 3 - locked,
            "{layout:?}: {j}"
        );
        live.batch_execute("COMMIT").await.unwrap();
        assert_eq!(
            count(&db, EXPIRED_COMPLETED).await,
            3 + locked,
            "{layout:?}"
        );
        assert_eq!(count(&db, &still_there("charges")).await, 6, "{layout:?}");
    }
}

/// A reference key table that a distributed table references with ON DELETE NO ACTION: Citus cannot
/// plan a DELETE on the reference table that reads the distributed one, so evict refuses it before
/// any change, naming the foreign key and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_refuses_a_reference_table_a_distributed_no_action_row_references() {
    let test = "citus evict on a reference table referenced by a distributed table";
    let Some(db) = loaded_with(Layout::Reference, MIX, test).await else {
        return;
    };
    let make = "SELECT create_distributed_table('{table}', 'api_key_id')";
    referencing_as(&db, "charges", "NO ACTION", make, 3, 0).await;
    db.idemctl().args(["evict"]).run().assert_error(
        2,
        "foreign key charges_api_key_id_idem_key_fkey of distributed table charges references public.idempotency_keys (a Citus reference table) with ON DELETE NO ACTION: evict would have to leave out the keys it still references, and Citus cannot plan a DELETE on a reference table that reads a distributed table; nothing was changed: distribute public.idempotency_keys by the tenant, colocated with charges (evict then leaves those keys on each shard), or make the foreign key ON DELETE CASCADE",
    );
    assert_eq!(count(&db, EXPIRED_COMPLETED).await, MIX.expired);
    // With CASCADE instead, the run deletes the keys and their referencing rows.
    db.exec("ALTER TABLE charges DROP CONSTRAINT charges_api_key_id_idem_key_fkey")
        .await;
    db.exec(
        "ALTER TABLE charges ADD CONSTRAINT charges_api_key_id_idem_key_fkey \
           FOREIGN KEY (api_key_id, idem_key) REFERENCES idempotency_keys (api_key_id, key) \
           ON DELETE CASCADE",
    )
    .await;
    let run = db.idemctl().args(["evict", "-o", "json"]).run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], MIX.expired, "{run}");
    assert_eq!(count(&db, "SELECT count(*) FROM charges").await, 3);
}

//! idemctl on a real Citus 13 cluster (a coordinator and two workers, `support/citus.rs`): the key
//! table of sql/schema.sql distributed by api_key_id, and as a reference table and a plain table on
//! the coordinator for comparison. Every command keeps its guarantees there.

use std::collections::BTreeMap;

use crate::fixtures::{Mix, Seen, evictable, load_sql, snapshot_of};
use crate::support::citus::{CitusDb, Layout, skipped};

pub(crate) const MIX: Mix = Mix {
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
    loaded_with(layout, MIX, test).await
}

/// Like [`loaded`], with the rows of `mix`.
pub(crate) async fn loaded_with(layout: Layout, mix: Mix, test: &str) -> Option<CitusDb> {
    if skipped(test) {
        return None;
    }
    let db = CitusDb::new(None).await;
    db.exec(include_str!("../../sql/schema.sql")).await;
    db.exec(&load_sql(mix)).await;
    db.exec(MORE_TENANTS).await;
    db.distribute(layout).await;
    Some(db)
}

pub(crate) async fn snapshot(db: &CitusDb) -> BTreeMap<(String, String), Seen> {
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
    if matches!(layout, Layout::ByTenant | Layout::ByKey) {
        let per_node = rows_per_node(&db).await;
        assert!(
            per_node.len() == 2 && per_node.iter().all(|n| *n > 0),
            "both workers must hold keys: {per_node:?}"
        );
    }
    // The dry run runs through the coordinator (read-only; Citus merges the shards' answers).
    let dry = db
        .idemctl()
        .args(["evict", "--dry-run", "-o", "json"])
        .run();
    dry.assert_code(0);
    assert_eq!(dry.json()["would_evict"]["count"], MIX.expired, "{dry}");
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
    if matches!(layout, Layout::ByTenant | Layout::ByKey) {
        // Shard by shard on the workers: each worker reports its part, and the parts add up.
        let nodes = report["citus"]["nodes"]
            .as_array()
            .expect("per-worker figures");
        assert_eq!(nodes.len(), 2, "{report}");
        let mut rows = 0;
        for n in nodes {
            assert!(n["rows_evicted"].as_i64().unwrap() > 0, "{report}");
            assert_eq!(n["shards_drained"], n["shards"], "{report}");
            assert_eq!(n["backlog_left"]["count"], 0, "{report}");
            rows += n["rows_evicted"].as_i64().unwrap();
        }
        assert_eq!(rows, MIX.expired, "{report}");
        let column = if layout == Layout::ByKey {
            "key"
        } else {
            "api_key_id"
        };
        assert_eq!(report["citus"]["layout"]["column"], column, "{report}");
    } else {
        assert!(report.get("citus").is_none(), "{report}");
    }
    // Counted as the batches pass over them; a range walked twice (a retried batch) counts its
    // in_progress keys again, so this is a lower bound here. The snapshot above proves they stay.
    let in_progress_left = report["expired_in_progress_left"]["count"]
        .as_i64()
        .unwrap();
    assert!(in_progress_left >= MIX.expired_in_progress, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_deletes_exactly_expired_completed_rows_of_a_distributed_table() {
    evicts_exactly_the_expired_completed_rows(Layout::ByTenant).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_deletes_exactly_expired_completed_rows_of_a_reference_table() {
    evicts_exactly_the_expired_completed_rows(Layout::Reference).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_deletes_exactly_expired_completed_rows_of_a_local_table() {
    evicts_exactly_the_expired_completed_rows(Layout::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_deletes_exactly_expired_completed_rows_of_a_citus_local_table() {
    evicts_exactly_the_expired_completed_rows(Layout::CitusLocal).await;
}

/// A live request holds an expired completed key (its retry's `SELECT ... FOR UPDATE`, routed by the
/// coordinator to the shard's worker): the run on that worker skips the row within its lock
/// timeout instead of waiting, deletes the rest of every shard, and the next run takes the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_skips_a_row_a_live_request_holds_on_a_worker() {
    skips_a_row_a_live_request_holds(Layout::ByTenant).await;
}

/// The same on a Citus local table, whose statements Citus plans on the coordinator: the SKIP
/// LOCKED fallback finds the rows it locked by the key's identity (Citus cannot plan it by ctid
/// there), skips the held row and deletes the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_skips_a_row_a_live_request_holds_on_a_citus_local_table() {
    skips_a_row_a_live_request_holds(Layout::CitusLocal).await;
}

async fn skips_a_row_a_live_request_holds(layout: Layout) {
    let Some(db) = loaded(
        layout,
        &format!("citus evict beside a held row ({layout:?})"),
    )
    .await
    else {
        return;
    };
    let live = db.client().await;
    let row = live
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys \
             WHERE expires_at < now() AND state = 'completed' ORDER BY expires_at, key OFFSET 700 LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (tenant, key): (String, String) = (row.get(0), row.get(1));
    live.batch_execute("BEGIN").await.unwrap();
    live.execute(
        "SELECT 1 FROM idempotency_keys WHERE api_key_id = $1 AND key = $2 FOR UPDATE",
        &[&tenant, &key],
    )
    .await
    .unwrap();

    let started = std::time::Instant::now();
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--batch-size", "200"])
        .run_async()
        .await;
    let took = started.elapsed();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], MIX.expired - 1, "{j}");
    assert_eq!(j["skipped_locked"], 1, "{j}");
    assert_eq!(j["backlog_left"]["count"], 1, "{j}");
    assert!(j["lock_fallbacks"].as_u64().unwrap() >= 1, "{j}");
    assert!(
        took < std::time::Duration::from_secs(20),
        "evict took {took:?} next to a held row"
    );
    live.batch_execute("COMMIT").await.unwrap();
    let count = |sql: &'static str| {
        let db = &db;
        async move {
            db.client()
                .await
                .query_one(sql, &[])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    let held: i64 = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE api_key_id = $1 AND key = $2",
            &[&tenant, &key],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, 1, "the held row must survive this run");
    db.idemctl().args(["evict"]).run().assert_code(0);
    assert_eq!(
        count(
            "SELECT count(*) FROM idempotency_keys WHERE expires_at < now() AND state = 'completed'"
        )
        .await,
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM idempotency_keys WHERE expires_at < now() AND state = 'in_progress'")
            .await,
        MIX.expired_in_progress
    );
}

/// A reference table next to a row a live request holds (its `SELECT ... FOR UPDATE` through the
/// coordinator). Citus serializes every write to a reference table behind that transaction (an
/// exclusive lock on the table's shard), so no batch can proceed until it ends, whichever rows it
/// touches. evict's batches pass their lock_timeout on to the workers' connections: no session on
/// any node waits on a lock for more than a second while the run goes on, the run gives up within
/// a few seconds with an error that says why, every row is as it was on every placement, and the
/// next run, once the request has ended, evicts every expired completed row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_never_waits_on_a_reference_table_a_live_request_holds() {
    let Some(db) = loaded(Layout::Reference, "citus evict beside a held reference row").await
    else {
        return;
    };
    let before = snapshot(&db).await;
    let live = db.client().await;
    let row = live
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys \
             WHERE expires_at < now() AND state = 'completed' ORDER BY expires_at, key OFFSET 700 LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (tenant, key): (String, String) = (row.get(0), row.get(1));
    live.batch_execute("BEGIN").await.unwrap();
    live.execute(
        "SELECT 1 FROM idempotency_keys WHERE api_key_id = $1 AND key = $2 FOR UPDATE",
        &[&tenant, &key],
    )
    .await
    .unwrap();

    // Patience cut to --max-runtime: the run ends after about 3 s of tries, none of which made
    // any session wait on a lock.
    let started = std::time::Instant::now();
    let cmd = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--batch-size",
            "200",
            "--max-runtime",
            "3s",
        ])
        .timeout(std::time::Duration::from_secs(60));
    let (run, (longest_wait, looks)) = watching_lock_waits(&db, cmd).await;
    let took = started.elapsed();
    run.assert_code(1)
        .assert_stderr("idemctl: a batch failed and was rolled back: a live transaction held a row of this Citus reference table for more than 3 s, and Citus lets no other write to a reference table proceed until that transaction ends; no request waited on idemctl longer than its lock_timeout; run it again once that transaction has ended\n");
    assert!(
        took >= std::time::Duration::from_millis(2500) && took < std::time::Duration::from_secs(15),
        "evict took {took:?} next to a held row, with --max-runtime 3s"
    );
    assert!(looks >= 1, "the lock waits were never looked at");
    assert!(
        longest_wait < 1.0,
        "a session waited {longest_wait:.1} s on a lock while evict ran"
    );
    assert_eq!(
        snapshot(&db).await,
        before,
        "no row changed while the table was held"
    );
    // Every placement of the reference table holds the same rows.
    let per_placement: Vec<String> = db
        .client()
        .await
        .query(
            "SELECT result FROM run_command_on_placements('idempotency_keys', \
             $$SELECT count(*) || '/' || sum(hashtext(api_key_id || key)) FROM %s$$)",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(per_placement.len() >= 2, "{per_placement:?}");
    assert!(
        per_placement.iter().all(|p| p == &per_placement[0]),
        "the placements differ: {per_placement:?}"
    );

    // A request that ends while evict tries: the run waits it out (each try bounded) and drains.
    let cmd = db
        .idemctl()
        .args(["evict", "-o", "json", "--catch-up", "--max-runtime", "30s"])
        .timeout(std::time::Duration::from_secs(60));
    let release = async {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        live.batch_execute("COMMIT").await.unwrap();
    };
    let ((run, (longest_wait, _)), ()) = tokio::join!(watching_lock_waits(&db, cmd), release);
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], MIX.expired, "{}", run.json());
    assert_eq!(run.json()["end_reason"], "drained", "{}", run.json());
    assert!(
        longest_wait < 1.0,
        "a session waited {longest_wait:.1} s on a lock while evict waited out the request"
    );
    let count = |sql: String| {
        let db = &db;
        async move {
            db.client()
                .await
                .query_one(&sql, &[])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!(
        count(format!(
            "SELECT count(*) FROM idempotency_keys WHERE api_key_id = '{tenant}' AND key = '{key}'"
        ))
        .await,
        0
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM idempotency_keys WHERE expires_at < now() AND state = 'completed'"
                .to_owned()
        )
        .await,
        0
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM idempotency_keys WHERE expires_at < now() AND state = 'in_progress'"
                .to_owned()
        )
        .await,
        MIX.expired_in_progress
    );
}

/// Run `cmd` while every node's client sessions of the test's database are looked at every 50 ms
/// (the shared cluster's other databases are other tests'): its outcome, the longest lock wait of
/// any session meanwhile (seconds), and how many looks were taken.
async fn watching_lock_waits(
    db: &CitusDb,
    cmd: crate::support::cmd::Cmd,
) -> (crate::support::cmd::Run, (f64, u32)) {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut nodes = Vec::new();
    for node in 0..db.cluster().nodes.len() {
        nodes.push(db.node_client(node).await);
    }
    let watch = {
        let done = done.clone();
        async move {
            let mut longest = 0.0f64;
            let mut looks = 0u32;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                for node in &nodes {
                    let waited: f64 = node
                        .query_one(
                            "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - query_start)), 0)::float8 \
                             FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND state = 'active' \
                               AND datname = current_database() AND backend_type = 'client backend'",
                            &[],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    longest = longest.max(waited);
                }
                looks += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            (longest, looks)
        }
    };
    let evict = async move {
        let run = cmd.run_async().await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        run
    };
    tokio::join!(evict, watch)
}

/// One run per table: the advisory lock is the coordinator's, so a second run through the
/// coordinator is refused (exit 7) before it touches a shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_is_one_run_per_distributed_table() {
    let Some(db) = loaded(Layout::ByTenant, "citus evict lock").await else {
        return;
    };
    let before = snapshot(&db).await;
    let other = db.client().await;
    other
        .batch_execute(
            "SET application_name = 'other-evict'; \
             SELECT pg_advisory_lock(31377153, 'idempotency_keys'::regclass::oid::int)",
        )
        .await
        .unwrap();
    let run = db.idemctl().args(["evict"]).run();
    run.assert_code(7);
    assert_eq!(
        snapshot(&db).await,
        before,
        "a refused run must change nothing"
    );
    other
        .batch_execute("SELECT pg_advisory_unlock_all()")
        .await
        .unwrap();
    // The summary names the layout and shows each worker's part.
    let run = db.idemctl().args(["evict", "-o", "table"]).run();
    run.assert_code(0);
    eprintln!("{}", run.stdout);
    assert!(
        run.stdout
            .contains("Citus workers (table distributed by api_key_id over 32 shards)"),
        "{run}"
    );
    assert_eq!(run.stdout.matches("16 / 16").count(), 2, "{run}");
}

/// Insert a key through the coordinator.
async fn insert_key(db: &CitusDb, tenant: &str, key: &str, state: &str) {
    db.client()
        .await
        .execute(
            "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
             request_fingerprint, state, response_status, response_body, locked_at, created_at, expires_at) \
             VALUES ($2, $1, 'POST', '/v1/charges', sha256(convert_to($2, 'UTF8')), $3, \
             CASE WHEN $3 = 'completed' THEN 201 END, CASE WHEN $3 = 'completed' THEN '{\"ok\": true}'::jsonb END, \
             CASE WHEN $3 = 'in_progress' THEN now() - interval '2 hours' END, \
             now() - interval '2 hours', now() + interval '1 day')",
            &[&tenant, &key, &state],
        )
        .await
        .unwrap();
}

/// inspect on a distributed table reads the shards on their workers: a key under several tenants
/// (on both workers) is listed, never guessed (exit 2, as on a single server); --api-key-id reads the
/// tenant's one shard; a key found once is shown; a missing key is exit 3; a row a live request
/// holds is reported held (the check runs on the worker that holds the row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_inspect_finds_keys_across_tenants_and_lists_ambiguity() {
    if skipped("citus inspect") {
        return;
    }
    let db = CitusDb::new(Some(Layout::ByTenant)).await;
    let tenants: Vec<String> = (0..6).map(|n| format!("tenant_{n}")).collect();
    for t in &tenants {
        insert_key(&db, t, "shared-key", "completed").await;
        insert_key(&db, t, &format!("own-{t}"), "completed").await;
    }
    insert_key(&db, "tenant_held", "held-key", "in_progress").await;
    let ports: std::collections::BTreeSet<i32> = {
        let client = db.client().await;
        let mut ports = std::collections::BTreeSet::new();
        for t in &tenants {
            let row = client
                .query_one(
                    "SELECT nodeport FROM citus_shards WHERE shardid = \
                     get_shard_id_for_distribution_column('idempotency_keys', $1::text)",
                    &[t],
                )
                .await
                .unwrap();
            ports.insert(row.get(0));
        }
        ports
    };
    assert_eq!(ports.len(), 2, "the tenants must span both workers");

    let run = db
        .idemctl()
        .args(["inspect", "shared-key", "-o", "json"])
        .run();
    run.assert_code(2)
        .assert_stderr_contains("exists under 6 tenants; pass --api-key-id");
    let j = run.json();
    assert_eq!(j["ambiguous"], true, "{j}");
    let listed: Vec<&str> = j["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["api_key_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        tenants.iter().map(String::as_str).collect::<Vec<_>>()
    );

    let run = db
        .idemctl()
        .args([
            "inspect",
            "shared-key",
            "--api-key-id",
            "tenant_4",
            "-o",
            "json",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["api_key_id"], "tenant_4", "{j}");
    assert_eq!(j["state"], "completed", "{j}");
    assert_eq!(j["response_body"]["ok"], true, "{j}");

    let run = db
        .idemctl()
        .args(["inspect", "own-tenant_2", "-o", "json"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["api_key_id"], "tenant_2");
    db.idemctl()
        .args(["inspect", "no-such-key"])
        .run()
        .assert_code(3);
    db.idemctl()
        .args(["inspect", "shared-key", "--api-key-id", "tenant_none"])
        .run()
        .assert_code(3);

    // A live request holds its in_progress key: inspect sees the holder on the worker.
    let live = db.client().await;
    live.batch_execute(
        "BEGIN; SELECT 1 FROM idempotency_keys WHERE api_key_id = 'tenant_held' AND key = 'held-key' FOR UPDATE",
    )
    .await
    .unwrap();
    for args in [
        vec!["inspect", "held-key", "-o", "json"],
        vec![
            "inspect",
            "held-key",
            "--api-key-id",
            "tenant_held",
            "-o",
            "json",
        ],
    ] {
        let run = db.idemctl().args(args).run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(j["held"], true, "{j}");
        assert_eq!(j["state"], "in_progress", "{j}");
    }
    live.batch_execute("ROLLBACK").await.unwrap();
    let run = db
        .idemctl()
        .args(["inspect", "held-key", "-o", "json"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["held"], false);
}

/// stats on a distributed table adds up the shards (the coordinator's table is an empty shell):
/// row estimates, sizes (checked against Citus's own citus_total_relation_size), the backlog, the
/// eviction lag, stuck keys and dead tuples, with each worker's part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_stats_adds_up_the_shards_with_each_workers_part() {
    let Some(db) = loaded(Layout::ByTenant, "citus stats").await else {
        return;
    };
    let total = MIX.expired + MIX.live + MIX.fresh + MIX.stuck + MIX.expired_in_progress;
    let client = db.client().await;
    let truth = client
        .query_one(
            "SELECT citus_total_relation_size('idempotency_keys')::bigint, \
             (SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' \
                AND coalesce(locked_at, created_at) < now() - interval '30 minutes')::bigint, \
             (SELECT extract(epoch FROM now() - min(expires_at))::float8 FROM idempotency_keys \
               WHERE expires_at < now() AND state = 'completed')",
            &[],
        )
        .await
        .unwrap();
    let (size, stuck, lag): (i64, i64, f64) = (truth.get(0), truth.get(1), truth.get(2));
    let run = db
        .idemctl()
        .args([
            "stats",
            "-o",
            "json",
            "--allow-scan",
            "--stuck-after",
            "30m",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["sizes"]["estimated_rows"], total, "{j}");
    assert_eq!(j["sizes"]["total_bytes"], size, "{j}");
    assert_eq!(j["expired_backlog"]["count"], MIX.expired, "{j}");
    assert_eq!(j["expired_backlog"]["at_least"], false, "{j}");
    assert_eq!(j["stuck"]["count"]["count"], stuck, "{j}");
    assert!(stuck >= MIX.stuck, "{j}");
    let seen = j["eviction_lag_seconds"].as_f64().unwrap();
    assert!((seen - lag).abs() < 30.0, "lag {seen} vs {lag}: {j}");
    let nodes = j["citus"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{j}");
    let sum = |field: &str| {
        nodes
            .iter()
            .map(|n| n[field].as_i64().unwrap())
            .sum::<i64>()
    };
    assert_eq!(sum("estimated_rows"), total, "{j}");
    assert_eq!(sum("total_bytes"), size, "{j}");
    assert_eq!(sum("shards"), 32, "{j}");
    // Autovacuum's outlook: each shard is vacuumed on its own; the TTL sample spans the shards.
    assert_eq!(
        j["maintenance"]["relations"].as_array().unwrap().len(),
        32,
        "{j}"
    );
    assert!(j["recent_ttl"]["keys"].as_i64().unwrap() > 0, "{j}");
    let backlog: i64 = nodes
        .iter()
        .map(|n| n["expired_backlog"]["count"].as_i64().unwrap())
        .sum();
    assert_eq!(backlog, MIX.expired, "{j}");
    assert!(
        nodes
            .iter()
            .all(|n| n["estimated_rows"].as_i64().unwrap() > 0),
        "{j}"
    );

    // The cap is shared out over the shards: the whole run counts at most the cap.
    let run = db
        .idemctl()
        .args(["stats", "-o", "json", "--backlog-cap", "1000"])
        .run();
    run.assert_code(0);
    let j = run.json();
    // Each shard after the cap is spent still counts the one row it examines (at least 1).
    let total = j["expired_backlog"]["count"].as_i64().unwrap();
    assert!((1000..=1032).contains(&total), "{j}");
    assert_eq!(j["expired_backlog"]["at_least"], true, "{j}");
    for n in j["citus"]["nodes"].as_array().unwrap() {
        assert!(n["expired_backlog"]["count"].as_i64().unwrap() >= 1, "{j}");
    }
    // And the planner's estimate over the shards, as on one server.
    let estimate = j["expired_backlog_estimate"].as_i64().expect("an estimate");
    assert!(
        (MIX.expired / 3..=MIX.expired * 3).contains(&estimate),
        "{j}"
    );

    // After an evict the shards' dead tuples show up (the statistics arrive within a second or so);
    // autovacuum is held off (Citus passes the setting to the shards) so that it cannot clear them
    // first.
    db.exec("ALTER TABLE idempotency_keys SET (autovacuum_enabled = false)")
        .await;
    db.idemctl().args(["evict"]).run().assert_code(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let run = db.idemctl().args(["stats", "-o", "json"]).run();
        run.assert_code(0);
        let j = run.json();
        let dead = j["vacuum"]["dead_tuples"].as_i64().unwrap();
        let per_node: i64 = j["citus"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["dead_tuples"].as_i64().unwrap())
            .sum();
        assert_eq!(dead, per_node, "{j}");
        assert_eq!(j["expired_backlog"]["count"], 0, "{j}");
        if dead >= MIX.expired / 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no dead tuples after evict: {j}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let run = db.idemctl().args(["stats", "-o", "table"]).run();
    run.assert_code(0)
        .assert_stdout_contains("Citus workers (table distributed by api_key_id over 32 shards)");
}

/// The optional in_progress index, created on the coordinator (Citus creates it on every shard).
pub(crate) const IN_PROGRESS_INDEX: &str = "CREATE INDEX idempotency_keys_in_progress ON idempotency_keys \
     ((coalesce(locked_at, created_at))) WHERE state = 'in_progress'";

/// reclaim on a distributed table: the preview and the plan through the coordinator, --apply and
/// the sweep shard by shard on the workers. Apply reclaims exactly the plan's unchanged keys across
/// both workers and leaves a key a live request holds ("held") and one its owner took again since
/// the plan ("changed"); the sweep then takes the held one once it is free. Completed keys and
/// every other row stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_reclaim_preview_plan_apply_and_sweep_on_the_workers() {
    let Some(db) = loaded(Layout::ByTenant, "citus reclaim").await else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    let stuck_sql = "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' \
                     AND coalesce(locked_at, created_at) < now() - interval '30 minutes'";
    let client = db.client().await;
    let stuck: i64 = client.query_one(stuck_sql, &[]).await.unwrap().get(0);
    assert!(stuck >= MIX.stuck, "fixture: {stuck}");

    let run = db
        .idemctl()
        .args(["reclaim", "--dry-run", "--older-than", "30m", "-o", "json"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["would_reclaim"]["count"], stuck, "{run}");

    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let plan_arg = plan.to_str().unwrap();
    db.idemctl()
        .args([
            "reclaim",
            "--plan",
            plan_arg,
            "--older-than",
            "30m",
            "-o",
            "json",
        ])
        .run()
        .assert_code(0);
    let planned: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let rows = planned["rows"].as_array().unwrap();
    assert_eq!(rows.len() as i64, stuck);
    let pick = |n: usize| {
        (
            rows[n]["api_key_id"].as_str().unwrap().to_owned(),
            rows[n]["key"].as_str().unwrap().to_owned(),
        )
    };
    let (held, changed) = (pick(3), pick(11));
    let before = snapshot(&db).await;
    // The changed key's owner took it again after the plan was made.
    client
        .execute(
            "UPDATE idempotency_keys SET locked_at = now() WHERE api_key_id = $1 AND key = $2",
            &[&changed.0, &changed.1],
        )
        .await
        .unwrap();
    let live = db.client().await;
    live.batch_execute("BEGIN").await.unwrap();
    live.execute(
        "SELECT 1 FROM idempotency_keys WHERE api_key_id = $1 AND key = $2 FOR UPDATE",
        &[&held.0, &held.1],
    )
    .await
    .unwrap();

    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--yes",
            "-o",
            "json",
            "--batch-size",
            "7",
            "--apply",
            plan_arg,
        ])
        .run_async()
        .await;
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], stuck - 2, "{j}");
    let mut left: Vec<(String, String, String)> = j["left_alone"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["api_key_id"].as_str().unwrap().to_owned(),
                l["key"].as_str().unwrap().to_owned(),
                l["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    left.sort();
    let mut want = vec![
        (held.0.clone(), held.1.clone(), "held".to_owned()),
        (changed.0.clone(), changed.1.clone(), "changed".to_owned()),
    ];
    want.sort();
    assert_eq!(left, want, "{j}");
    live.batch_execute("COMMIT").await.unwrap();

    // The sweep takes the key that was held; the changed one is not stuck any more.
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--older-than", "30m"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], 1, "{j}");
    assert_eq!(j["reclaimed"][0]["key"], held.1.as_str(), "{j}");
    assert_eq!(j["stuck_left"]["count"], 0, "{j}");
    let stuck_now: i64 = client.query_one(stuck_sql, &[]).await.unwrap().get(0);
    assert_eq!(stuck_now, 0);

    // Every row but the reclaimed (deleted) ones is as it was, apart from the changed key.
    let after = snapshot(&db).await;
    let planned_keys: std::collections::BTreeSet<(String, String)> =
        (0..rows.len()).map(pick).collect();
    for (k, seen) in &before {
        if *k == changed {
            assert!(after.contains_key(k), "the changed key must stay");
        } else if planned_keys.contains(k) {
            assert!(!after.contains_key(k), "{k:?} should have been reclaimed");
        } else {
            assert_eq!(after.get(k), Some(seen), "row {k:?} was deleted or changed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_deletes_exactly_expired_completed_rows_of_a_table_distributed_by_key() {
    evicts_exactly_the_expired_completed_rows(Layout::ByKey).await;
}

/// A table distributed by `key` rather than the tenant: inspect --api-key-id reads every shard (the
/// tenant's keys are spread over them), reclaim --apply is refused before any change (it routes plan
/// rows by tenant), the sweep works, and check says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_table_distributed_by_another_column() {
    let Some(db) = loaded(Layout::ByKey, "citus distributed by key").await else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    let client = db.client().await;
    let row = client
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys WHERE state = 'completed' ORDER BY key LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (tenant, key): (String, String) = (row.get(0), row.get(1));
    let run = db
        .idemctl()
        .args(["inspect", &key, "--api-key-id", &tenant, "-o", "json"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["key"], key.as_str());
    let run = db.idemctl().args(["inspect", &key, "-o", "json"]).run();
    run.assert_code(0);
    assert_eq!(run.json()["api_key_id"], tenant.as_str());

    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let plan_arg = plan.to_str().unwrap();
    db.idemctl()
        .args(["reclaim", "--plan", plan_arg, "--older-than", "30m"])
        .run()
        .assert_code(0);
    let before = snapshot(&db).await;
    let shards: i64 = client
        .query_one(
            "SELECT shard_count FROM citus_tables WHERE table_name = 'idempotency_keys'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    db.idemctl()
        .args(["reclaim", "--yes", "--apply", plan_arg])
        .run()
        .assert_error(2, &format!("reclaim --apply sends each plan row to the shard that holds its tenant, but public.idempotency_keys is distributed by key over {shards} shards, not by its tenant column; nothing was changed: run the sweep (reclaim without --apply), which works shard by shard whatever the column"));
    assert_eq!(snapshot(&db).await, before);
    let stuck: i64 = client
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' \
             AND coalesce(locked_at, created_at) < now() - interval '30 minutes'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--older-than", "30m"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], stuck, "{run}");

    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    let layout = finding(&j, "citus layout");
    assert_eq!(layout["status"], "note", "{j}");
    assert!(
        layout["detail"]
            .as_str()
            .unwrap()
            .contains("distributed by key over 32 shards, not by the tenant column"),
        "{j}"
    );
}

/// A login role named `prefix` and the database's suffix, granted SELECT, DELETE and UPDATE on the
/// key table on the coordinator (Citus passes the grants on to every shard).
async fn maintenance_role(db: &CitusDb, prefix: &str) -> String {
    let role = format!("{prefix}_{}", &db.name[db.name.len() - 8..]);
    db.exec_alone(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO {role}"
    ))
    .await;
    role
}

/// The worker holding shard `id`, as idemctl names it (`host:port` from the metadata).
async fn placed(db: &CitusDb, id: &str) -> String {
    db.client()
        .await
        .query_one(
            &format!("SELECT nodename || ':' || nodeport FROM citus_shards WHERE shardid = {id}"),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// idemctl pointed at the coordinator as `role`.
fn as_role(db: &CitusDb, role: &str) -> crate::support::cmd::Cmd {
    crate::support::cmd::Cmd::new().env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", role)]))
}

/// The finding of `check -o json` named `name`.
fn finding<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == name)
        .unwrap_or_else(|| panic!("no finding {name}: {j}"))
}

/// check on a distributed table: the workers are reached, every shard carries the indexes and the
/// grants, and the thresholds are judged on the shards' figures (the coordinator's empty table
/// would show no lag). A shard that lost an index fails the check, naming the shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_check_verifies_the_shards() {
    let Some(db) = loaded(Layout::ByTenant, "citus check").await else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    for name in [
        "citus layout",
        "citus workers",
        "citus shard indexes",
        "citus shard privileges",
    ] {
        assert_eq!(finding(&j, name)["status"], "ok", "{name}: {j}");
    }
    assert!(
        finding(&j, "citus shard indexes")["detail"]
            .as_str()
            .unwrap()
            .contains(
                "all 32 shards carry the expiry and identity indexes and the in_progress index"
            ),
        "{j}"
    );
    // The lag is the shards' (days), so a one-hour threshold is breached.
    db.idemctl()
        .args(["check", "--max-eviction-lag", "1h"])
        .run()
        .assert_code(4);

    // Drop the expiry index of one shard on its worker.
    let worker = db.node_client(1).await;
    worker
        .batch_execute("SET citus.override_table_visibility = off")
        .await
        .unwrap();
    let index: String = worker
        .query_one(
            "SELECT c.oid::regclass::text FROM pg_class c \
             WHERE c.relkind = 'i' AND c.relname LIKE 'idempotency_keys_expiry_%' ORDER BY c.relname LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    worker
        .batch_execute(&format!(
            "SET citus.enable_manual_changes_to_shards = on; DROP INDEX {index}"
        ))
        .await
        .unwrap();
    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(4);
    let j = run.json();
    let f = finding(&j, "citus shard indexes");
    assert_eq!(f["status"], "fail", "{j}");
    assert!(
        f["detail"]
            .as_str()
            .unwrap()
            .contains("lacks the expiry index"),
        "{j}"
    );
    // The fix is the statements to run on the coordinator, as printed: each statement in turn
    // (CONCURRENTLY runs outside a transaction block, as psql runs a script), then check passes.
    let fix = f["fix"].as_str().unwrap();
    let (statements, comment) = fix.split_once(" -- ").expect("statements, then a comment");
    assert!(
        statements.starts_with(
            "DROP INDEX CONCURRENTLY IF EXISTS \"public\".\"idempotency_keys_expiry\"; \
             CREATE INDEX CONCURRENTLY"
        ),
        "{j}"
    );
    assert!(comment.starts_with("on the coordinator"), "{j}");
    for statement in statements
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        db.exec(statement).await;
    }
    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(finding(&j, "citus shard indexes")["status"], "ok", "{j}");
}

/// check with a role of its own: on a distributed table it reaches the workers as that role and
/// verifies that the role's grants reached every shard; a grant missing on one shard (revoked there)
/// fails the check, naming the shard, with the GRANT to run on the coordinator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_check_verifies_the_grants_reached_every_shard() {
    let Some(db) = loaded(Layout::ByTenant, "citus check privileges").await else {
        return;
    };
    let role = maintenance_role(&db, "maint").await;
    let check = || as_role(&db, &role).args(["check", "-o", "json"]).run();
    let run = check();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(finding(&j, "citus workers")["status"], "ok", "{j}");
    let f = finding(&j, "citus shard privileges");
    assert_eq!(f["status"], "ok", "{j}");
    assert!(
        f["detail"].as_str().unwrap().contains("on all 32 shards"),
        "{j}"
    );

    // One shard loses DELETE on its worker.
    let (worker, shard) = shard_on_worker(&db, "").await;
    worker
        .batch_execute(&format!("REVOKE DELETE ON {shard} FROM {role}"))
        .await
        .unwrap();
    let run = check();
    run.assert_code(4);
    let j = run.json();
    let f = finding(&j, "citus shard privileges");
    assert_eq!(f["status"], "fail", "{j}");
    let id = shard.trim_start_matches("idempotency_keys_");
    let detail = f["detail"].as_str().unwrap();
    assert!(
        detail.contains("on 1 of 32 shards") && detail.contains(&format!("shard {id} on ")),
        "{j}"
    );
    assert!(detail.ends_with(": DELETE"), "{j}");
    // The fix grants only what the shard lacks, once, and only what the role has on the
    // coordinator's table: run as printed, it changes no privilege there and the check passes.
    let fix = f["fix"].as_str().unwrap();
    assert!(
        fix.starts_with(&format!(
            "GRANT DELETE ON \"public\".\"idempotency_keys\" TO \"{role}\"; -- "
        )),
        "{j}"
    );
    let acl_sql = "SELECT coalesce(c.relacl::text, '') || ' ' || coalesce((SELECT string_agg(a.attname || '=' || a.attacl::text, ',' ORDER BY a.attnum) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attacl IS NOT NULL), '') FROM pg_class c WHERE c.oid = 'idempotency_keys'::regclass";
    let coordinator = db.client().await;
    let acl_before: String = coordinator.query_one(acl_sql, &[]).await.unwrap().get(0);
    db.exec(fix).await;
    let acl_after: String = coordinator.query_one(acl_sql, &[]).await.unwrap().get(0);
    assert_eq!(
        acl_after, acl_before,
        "the fix changed the coordinator's grants"
    );
    let run = check();
    run.assert_code(0);
    assert_eq!(
        finding(&run.json(), "citus shard privileges")["status"],
        "ok"
    );
}

/// --max-rows and --max-batches hold exactly across the shards (they are taken one at a time), and
/// the leftover count covers the shards the run did not reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_budgets_hold_across_the_shards() {
    let Some(db) = loaded(Layout::ByTenant, "citus evict budgets").await else {
        return;
    };
    let run = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--max-rows",
            "500",
            "--batch-size",
            "70",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], 500, "{j}");
    assert_eq!(j["end_reason"], "row_budget", "{j}");
    assert_eq!(j["backlog_left"]["count"], MIX.expired - 500, "{j}");
    let run = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--max-batches",
            "3",
            "--batch-size",
            "20",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["batches"], 3, "{j}");
    assert_eq!(j["end_reason"], "batch_budget", "{j}");
    let left = MIX.expired - 500 - j["rows_evicted"].as_i64().unwrap();
    assert_eq!(j["backlog_left"]["count"], left, "{j}");
    let count: i64 = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE expires_at < now() AND state = 'completed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, left);
}

/// What evict does not support on a distributed table is refused before any change (exit 2),
/// naming the flag and the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_refuses_unsupported_flags_before_any_change() {
    let Some(db) = loaded(Layout::ByTenant, "citus evict refusals").await else {
        return;
    };
    let before = snapshot(&db).await;
    let shards: i64 = db
        .client()
        .await
        .query_one(
            "SELECT shard_count FROM citus_tables WHERE table_name = 'idempotency_keys'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for args in [
        &["--max-rate", "1000"][..],
        &["--max-wal-rate", "1000000"],
        &["--max-replica-lag", "10s"],
        &["--vacuum"],
        &["--drop-partitions"],
    ] {
        let flag = args[0];
        db.idemctl().arg("evict").args(args).run().assert_error(
            2,
            &format!(
                "{flag} is not supported on table public.idempotency_keys, which Citus manages (distributed by api_key_id over {shards} shards); evict it without {flag}"
            ),
        );
    }
    assert_eq!(
        snapshot(&db).await,
        before,
        "a refused run must change nothing"
    );
}

/// On a terminal, the progress bar counts the rows evicted on every shard against the backlog
/// counted on every shard (the coordinator's own table is empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_draws_progress_over_all_shards_on_a_terminal() {
    let Some(db) = loaded(Layout::ByTenant, "citus evict progress").await else {
        return;
    };
    let cmd = format!(
        "{} evict --batch-size 20 --pause 5ms",
        crate::support::IDEMCTL
    );
    let run = crate::support::Cmd::of("script")
        .env("IDEMCTL_DATABASE_URL", db.url())
        .args(["-qec", cmd.as_str(), "/dev/null"])
        .run();
    run.assert_code(0)
        .assert_stdout_contains("rows/s, about")
        .assert_stdout_contains("rows evicted");
    // The length drawn is the shards' counts added up: every expired completed key.
    let expired = MIX.expired as u64;
    let lengths: Vec<u64> = run
        .stdout
        .split(" of ")
        .skip(1)
        .filter_map(|s| s.split(' ').next())
        .filter_map(|n| n.replace(',', "").parse().ok())
        .collect();
    assert_eq!(lengths.first(), Some(&expired), "{run}");
    let positions: Vec<u64> = run
        .stdout
        .split("evicted ")
        .skip(1)
        .filter_map(|s| s.split(' ').next())
        .filter_map(|n| n.replace(',', "").parse().ok())
        .collect();
    assert!(
        positions.iter().any(|p| *p > expired / 2),
        "the bar adds up the shards' rows: {positions:?} {run}"
    );
}

/// The adaptive pace's insert-rate floor on a distributed table: each worker's pace measures the
/// inserts into the shards it holds, and however far the live traffic makes it back off, its rests
/// are cut so that it keeps removing keys faster than its shards gain them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_a_backed_off_evict_still_outpaces_the_inserts_on_every_worker() {
    let backlog = Mix {
        expired: 60_000,
        live: 100,
        fresh: 0,
        stuck: 0,
        expired_in_progress: 0,
    };
    let Some(db) = loaded_with(Layout::ByTenant, backlog, "citus pace insert floor").await else {
        return;
    };
    // The rows the live requests contend for: one on each worker.
    db.exec(
        "CREATE TABLE busy (id int PRIMARY KEY); SELECT create_distributed_table('busy', 'id'); \
         INSERT INTO busy SELECT generate_series(1, 64)",
    )
    .await;
    let client = db.client().await;
    let busy: Vec<i32> = client
        .query(
            "SELECT min(b.id) FROM busy b JOIN citus_shards s \
               ON s.shardid = get_shard_id_for_distribution_column('busy', b.id) \
             GROUP BY s.nodeport ORDER BY s.nodeport",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(busy.len(), 2, "one busy row on each worker: {busy:?}");
    // The API keeps adding keys through the coordinator, 20 every 100 ms over 20 tenants (both
    // workers get some)...
    let (stop, inserting) = crate::support::inserts::insert_steadily(
        db.client().await,
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, locked_at, expires_at) \
         SELECT gen_random_uuid()::text, 'tenant-new-' || g, 'POST', '/v1/charges', \
         '\\x00', 'in_progress', now(), now() + interval '1 day' \
         FROM generate_series(1, 20) g",
        20,
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // ... while a request holds each busy row, and once evict has measured the foreground, three
    // more on each worker start waiting on it, so every worker's pace backs off.
    let holder = db.client().await;
    holder.batch_execute("BEGIN").await.unwrap();
    for id in &busy {
        holder
            .execute("SELECT * FROM busy WHERE id = $1 FOR UPDATE", &[id])
            .await
            .unwrap();
    }
    let expired = async || -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM idempotency_keys WHERE expires_at < now()",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    };
    let backlog = expired().await;
    let started = std::time::Instant::now();
    let mut evict = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--max-runtime",
            "6s",
            "--batch-size",
            "10",
        ])
        .timeout(std::time::Duration::from_secs(60))
        .spawn();
    // Evict has measured the foreground a second after its first batches deleted keys, however
    // long it took to get there.
    while expired().await >= backlog && !evict.has_exited() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "evict deleted no key"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let mut waiters = Vec::new();
    for id in busy.iter().flat_map(|id| [*id; 3]) {
        let c = db.client().await;
        waiters.push(tokio::spawn(async move {
            let _ = c
                .execute("SELECT * FROM busy WHERE id = $1 FOR UPDATE", &[&id])
                .await;
        }));
    }
    let run = evict.wait_async().await;
    let took = started.elapsed().as_secs_f64();
    holder.batch_execute("COMMIT").await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let inserted_per_s = inserting.await.unwrap();
    run.assert_success();
    let j = run.json();
    let pace = &j["pace"];
    assert_eq!(pace["mode"], "adaptive", "{run}");
    let measured = pace["insert_rate"].as_f64().unwrap_or(0.0);
    assert!(
        measured > inserted_per_s / 2.0 && measured < inserted_per_s * 2.0,
        "the workers measured {measured:.0} inserts/s in all, the API made {inserted_per_s:.0}/s: {run}"
    );
    let nodes = j["citus"]["nodes"].as_array().expect("per-worker figures");
    assert_eq!(nodes.len(), 2, "{run}");
    for n in nodes {
        let p = &n["pace"];
        let node = &n["node"];
        assert!(
            p["backoff_seconds"].as_f64().unwrap() > 0.0,
            "worker {node} never backed off: {run}"
        );
        assert!(
            p["signals"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s.as_str().unwrap().contains("inserted-row counter")),
            "{run}"
        );
        let rate = p["insert_rate"].as_f64().unwrap_or(0.0);
        assert!(rate > 0.0, "worker {node} measured no inserts: {run}");
        assert!(
            p["floor_cut_seconds"].as_f64().unwrap() > 0.0,
            "the floor never cut a rest on worker {node}: {run}"
        );
        let removed = n["rows_evicted"].as_f64().unwrap() / took;
        assert!(
            removed > rate * 2.0,
            "worker {node} removed {removed:.0} keys/s while its shards gained {rate:.0}/s: {run}"
        );
    }
}

/// Each worker's pace counts the live requests the coordinator routes there (they arrive on Citus's
/// own connections) as its foreground, but not Citus's housekeeping (on the test cluster, the
/// maintenance daemons' distributed deadlock detection queries every node every 200 ms) nor the
/// distributed queries of idemctl's own sessions (the application_name idemctl runs under). A
/// cluster of its own, so that no other test's sessions are on the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_worker_paces_count_routed_requests_but_not_citus_housekeeping_or_idemctl() {
    if skipped("citus pace foreground") {
        return;
    }
    let db = CitusDb::private(None).await;
    db.exec(include_str!("../../sql/schema.sql")).await;
    db.exec(&load_sql(Mix {
        expired: 30_000,
        ..MIX
    }))
    .await;
    db.exec(MORE_TENANTS).await;
    db.distribute(Layout::ByTenant).await;
    let client = db.client().await;
    // A tenant on each worker.
    let tenants: Vec<String> = client
        .query(
            "SELECT min(k.api_key_id) FROM idempotency_keys k JOIN citus_shards s \
               ON s.shardid = get_shard_id_for_distribution_column('idempotency_keys', k.api_key_id) \
             GROUP BY s.nodeport ORDER BY s.nodeport",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(tenants.len(), 2, "a tenant on each worker: {tenants:?}");
    // Look-ups of both tenants through the coordinator, every 20 ms, by a session named `name`,
    // until `stop`.
    let traffic = |name: &'static str| {
        let url = format!(
            "{} application_name={name}",
            db.url_with(&[("sslmode", "disable")])
        );
        let tenants = tenants.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut n = 0u64;
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                for t in &tenants {
                    c.query(
                        "SELECT count(*) FROM idempotency_keys WHERE api_key_id = $1",
                        &[t],
                    )
                    .await
                    .unwrap();
                    n += 1;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            n
        });
        (stop, task)
    };
    let paces = |run: &crate::support::Run| -> Vec<serde_json::Value> {
        let nodes = run.json()["citus"]["nodes"].as_array().unwrap().clone();
        assert_eq!(nodes.len(), 2, "{run}");
        nodes.iter().map(|n| n["pace"].clone()).collect()
    };

    // The API's requests reach both workers: neither worker's pace ever runs unpaced.
    let (stop, api) = traffic("api");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--max-runtime", "3s"])
        .timeout(std::time::Duration::from_secs(60))
        .run_async()
        .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(api.await.unwrap() > 50);
    run.assert_success();
    for p in paces(&run) {
        assert_eq!(p["mode"], "adaptive", "{run}");
        assert_eq!(
            p["full_seconds"], 0.0,
            "a worker ran unpaced beside live requests: {run}"
        );
        assert!(p["paced_seconds"].as_f64().unwrap() > 0.0, "{run}");
    }

    // The same look-ups from a session named as idemctl is: only Citus's housekeeping and
    // idemctl's own queries reach the workers, and both run unpaced.
    let (stop, own) = traffic("idemctl");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let run = db
        .idemctl()
        .args(["evict", "-o", "json"])
        .timeout(std::time::Duration::from_secs(60))
        .run_async()
        .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(own.await.unwrap() > 50);
    run.assert_success();
    assert_eq!(run.json()["end_reason"], "drained", "{run}");
    for p in paces(&run) {
        assert!(
            p["full_seconds"].as_f64().unwrap() > 0.0,
            "a worker was paced with no live request: {run}"
        );
        assert_eq!(p["backoff_seconds"], 0.0, "{run}");
    }
}

/// Schema-based sharding: the key table in a distributed schema is a single-shard table on one
/// worker, and every command works on that shard there, as on a hash-distributed table's shards.
/// evict skips a row a live request holds within its lock timeout (through the coordinator its
/// batches would wait: Citus does not pass lock_timeout on to the worker); stats reads the shard's
/// figures; check reaches the worker and finds the shard's indexes; inspect finds a key with and
/// without --api-key-id; the reclaim sweep works; reclaim --apply is refused before any change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_schema_based_sharding_works_on_the_one_shard() {
    let Some(db) = loaded(Layout::Schema, "citus schema-based sharding").await else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    let client = db.client().await;
    let shards: Vec<(String, i32)> = client
        .query(
            "SELECT citus_table_type, nodeport FROM citus_shards \
              WHERE table_name = 'keys.idempotency_keys'::regclass",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(shards.len(), 1, "{shards:?}");
    assert_eq!(shards[0].0, "schema", "{shards:?}");
    let total = MIX.expired + MIX.live + MIX.fresh + MIX.stuck + MIX.expired_in_progress;

    let run = db.idemctl().args(["stats", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["table"], "keys.idempotency_keys", "{j}");
    assert_eq!(j["sizes"]["estimated_rows"], total, "{j}");
    assert_eq!(j["expired_backlog"]["count"], MIX.expired, "{j}");
    assert_eq!(j["citus"]["layout"]["type"], "single_shard", "{j}");
    assert_eq!(j["citus"]["nodes"].as_array().unwrap().len(), 1, "{j}");

    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    let layout = finding(&j, "citus layout");
    assert_eq!(layout["status"], "note", "{j}");
    let detail = layout["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("a single-shard table of a distributed schema: ")
            && detail.contains("reclaim --apply is refused"),
        "{j}"
    );
    db.idemctl()
        .args(["stats", "-o", "table"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("Citus workers (a single-shard table of a distributed schema)");
    assert_eq!(finding(&j, "citus shard indexes")["status"], "ok", "{j}");

    let row = client
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys WHERE state = 'completed' \
             AND expires_at > now() ORDER BY key LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (tenant, key): (String, String) = (row.get(0), row.get(1));
    for args in [vec![], vec!["--api-key-id", tenant.as_str()]] {
        let run = db
            .idemctl()
            .args(["inspect", &key, "-o", "json"])
            .args(&args)
            .run();
        run.assert_code(0);
        assert_eq!(run.json()["api_key_id"], tenant.as_str(), "{run}");
    }

    // reclaim: --apply is refused before any change, the sweep takes every stuck key.
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let plan_arg = plan.to_str().unwrap();
    db.idemctl()
        .args(["reclaim", "--plan", plan_arg, "--older-than", "30m"])
        .run()
        .assert_code(0);
    let before = snapshot(&db).await;
    db.idemctl()
        .args(["reclaim", "--yes", "--apply", plan_arg])
        .run()
        .assert_code(2)
        .assert_stderr_contains(
            "is a single-shard table of a distributed schema, which has none; nothing was changed",
        );
    assert_eq!(snapshot(&db).await, before);
    let stuck: i64 = client
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' \
             AND coalesce(locked_at, created_at) < now() - interval '30 minutes'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(stuck >= MIX.stuck);
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--older-than", "30m"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], stuck, "{run}");

    // evict beside a live request holding an expired completed key.
    let dry = db
        .idemctl()
        .args(["evict", "--dry-run", "-o", "json"])
        .run();
    dry.assert_code(0);
    assert_eq!(dry.json()["would_evict"]["count"], MIX.expired, "{dry}");
    let live = db.client().await;
    let held = live
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys \
             WHERE expires_at < now() AND state = 'completed' ORDER BY expires_at, key OFFSET 700 LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let held: (String, String) = (held.get(0), held.get(1));
    live.batch_execute("BEGIN").await.unwrap();
    live.execute(
        "SELECT 1 FROM idempotency_keys WHERE api_key_id = $1 AND key = $2 FOR UPDATE",
        &[&held.0, &held.1],
    )
    .await
    .unwrap();
    let before = snapshot(&db).await;
    let started = std::time::Instant::now();
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--batch-size", "200"])
        .run_async()
        .await;
    let took = started.elapsed();
    live.batch_execute("COMMIT").await.unwrap();
    run.assert_code(0);
    let j = run.json();
    assert!(
        took < std::time::Duration::from_secs(20),
        "evict took {took:?} next to a held row"
    );
    assert_eq!(j["rows_evicted"], MIX.expired - 1, "{j}");
    assert_eq!(j["skipped_locked"], 1, "{j}");
    assert_eq!(j["citus"]["layout"]["type"], "single_shard", "{j}");
    let nodes = j["citus"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{j}");
    assert_eq!(
        nodes[0]["node"],
        format!("127.0.0.1:{}", shards[0].1),
        "{j}"
    );
    let after = snapshot(&db).await;
    for (k, seen) in &before {
        if evictable(seen) && *k != held {
            assert!(!after.contains_key(k), "{k:?} should have been evicted");
        } else {
            assert_eq!(after.get(k), Some(seen), "row {k:?} was deleted or changed");
        }
    }
}

/// Stuck keys as reclaim's default cutoff-free tests count them (held longer than 30 minutes).
const STUCK_SQL: &str = "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' \
                         AND coalesce(locked_at, created_at) < now() - interval '30 minutes'";

/// reclaim on a table Citus runs through the coordinator (a reference table, a Citus local
/// table): every writing mode works — a plan applied, the sweep, `--action fail`, `--archive` —
/// each taking exactly the keys it names or finds, every other row unchanged. (Citus refuses a
/// change matched by ctid there: each mode failed at its first batch.)
async fn reclaims_in_every_mode_through_the_coordinator(layout: Layout) {
    let Some(db) = loaded(layout, &format!("citus reclaim ({layout:?})")).await else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    let client = db.client().await;
    let stuck: i64 = client.query_one(STUCK_SQL, &[]).await.unwrap().get(0);
    assert!(stuck >= 40, "fixture: {stuck}");
    let before = snapshot(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let plan_arg = plan.to_str().unwrap();
    let archive = dir.path().join("archive.jsonl");
    let archive_arg = archive.to_str().unwrap();
    db.idemctl()
        .args([
            "reclaim",
            "--plan",
            plan_arg,
            "--older-than",
            "30m",
            "--limit",
            "10",
        ])
        .run()
        .assert_code(0);
    let mut taken: Vec<(String, String, &str)> = Vec::new();
    let mut record = |j: &serde_json::Value, how: &'static str| {
        for k in j["reclaimed"].as_array().unwrap() {
            taken.push((
                k["api_key_id"].as_str().unwrap().to_owned(),
                k["key"].as_str().unwrap().to_owned(),
                how,
            ));
        }
    };
    let runs: [(&[&str], &'static str); 4] = [
        (&["--apply", plan_arg], "delete"),
        (&["--older-than", "30m", "--limit", "10"], "delete"),
        (
            &["--older-than", "30m", "--limit", "10", "--action", "fail"],
            "fail",
        ),
        (&["--older-than", "30m", "--archive", archive_arg], "delete"),
    ];
    let mut total = 0;
    for (flags, how) in runs {
        let run = db
            .idemctl()
            .args(["reclaim", "--yes", "-o", "json", "--batch-size", "4"])
            .args(flags)
            .run();
        run.assert_code(0);
        let j = run.json();
        let n = j["rows_reclaimed"].as_i64().unwrap();
        let want = if flags.contains(&"--archive") {
            stuck - total
        } else {
            10
        };
        assert_eq!(n, want, "{flags:?}: {j}");
        total += n;
        record(&j, how);
    }
    assert_eq!(total, stuck);
    assert_eq!(
        client
            .query_one(STUCK_SQL, &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0
    );
    let archived = std::fs::read_to_string(&archive).unwrap();
    assert!(
        archived.lines().count() as i64 >= stuck - 30,
        "the archive holds the swept keys:\n{archived}"
    );
    let after = snapshot(&db).await;
    for (k, seen) in &before {
        match taken.iter().find(|t| t.0 == k.0 && t.1 == k.1) {
            Some((_, _, "delete")) => assert!(!after.contains_key(k), "{k:?} should be gone"),
            Some(_) => {
                let now = after.get(k).expect("a failed key stays");
                assert_eq!(now.state, "completed", "{k:?}");
            }
            None => assert_eq!(after.get(k), Some(seen), "row {k:?} was deleted or changed"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_reclaim_every_mode_on_a_reference_table() {
    reclaims_in_every_mode_through_the_coordinator(Layout::Reference).await;
}

/// reclaim on a reference table while a live request holds one of the stuck keys (`SELECT ... FOR
/// UPDATE` through the coordinator): Citus lets no write to the table proceed until that
/// transaction ends, so reclaim cannot skip the row as it does on one server. Each batch tries
/// again with its lock waits bounded on every node: while the request stays, the run ends after
/// about ten seconds with an error that says why, no session waited on a lock for a second, and
/// no row changed; a request that ends while reclaim tries is waited out and every stuck key is
/// reclaimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_reclaim_waits_out_a_live_request_on_a_reference_table_within_bounds() {
    let Some(db) = loaded(
        Layout::Reference,
        "citus reclaim beside a held reference row",
    )
    .await
    else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    let stuck: i64 = db
        .client()
        .await
        .query_one(STUCK_SQL, &[])
        .await
        .unwrap()
        .get(0);
    let before = snapshot(&db).await;
    let live = db.client().await;
    live.batch_execute(
        "BEGIN; SELECT 1 FROM idempotency_keys WHERE state = 'in_progress' \
         AND coalesce(locked_at, created_at) < now() - interval '30 minutes' \
         ORDER BY api_key_id, key LIMIT 1 FOR UPDATE",
    )
    .await
    .unwrap();
    let reclaim = || {
        db.idemctl()
            .args(["reclaim", "--yes", "-o", "json", "--older-than", "30m"])
            .timeout(std::time::Duration::from_secs(60))
    };
    let started = std::time::Instant::now();
    let (run, (longest_wait, looks)) = watching_lock_waits(&db, reclaim()).await;
    let took = started.elapsed();
    run.assert_code(1)
        .assert_stderr("idemctl: batch 1 was rolled back (0 keys were reclaimed by earlier batches): a live transaction held a row of this Citus reference table for more than 10 s, and Citus lets no other write to a reference table proceed until that transaction ends; no request waited on idemctl longer than its lock_timeout; run it again once that transaction has ended\n");
    assert!(
        took >= std::time::Duration::from_secs(9) && took < std::time::Duration::from_secs(30),
        "reclaim took {took:?} next to a held row"
    );
    assert!(looks >= 1, "the lock waits were never looked at");
    assert!(
        longest_wait < 1.0,
        "a session waited {longest_wait:.1} s on a lock while reclaim ran"
    );
    assert_eq!(
        snapshot(&db).await,
        before,
        "a row changed while the table was held"
    );

    // Interrupted while it waits: it stops at once, says it was interrupted (exit 130), and
    // changes nothing.
    let waiting = reclaim().spawn();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let signalled = std::time::Instant::now();
    waiting.signal("INT");
    let run = waiting.wait_async().await;
    run.assert_code(130);
    assert!(
        signalled.elapsed() < std::time::Duration::from_secs(3),
        "reclaim took {:?} to stop after SIGINT: {run}",
        signalled.elapsed()
    );
    assert_eq!(
        snapshot(&db).await,
        before,
        "an interrupted run changed a row"
    );

    let release = async {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        live.batch_execute("COMMIT").await.unwrap();
    };
    let ((run, (longest_wait, _)), ()) = tokio::join!(watching_lock_waits(&db, reclaim()), release);
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], stuck, "{run}");
    assert!(
        longest_wait < 1.0,
        "a session waited {longest_wait:.1} s on a lock while reclaim ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_reclaim_every_mode_on_a_citus_local_table() {
    reclaims_in_every_mode_through_the_coordinator(Layout::CitusLocal).await;
}

/// stats' recent-TTL sample on a distributed table counts every key once, however many share a
/// physical address in their shards: 1,000 keys inserted in bulk, 500 with a one-day TTL and 500
/// with a two-day TTL (so rows of different shards share a ctid, a creation time and an expiry), are
/// 1,000 keys in the sample (the 500 that expire next and the 500 that expire last), not the few
/// dozen distinct (ctid, created_at, expires_at).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_stats_recent_ttl_sample_counts_each_key_once_across_shards() {
    if skipped("citus stats recent TTL") {
        return;
    }
    let db = CitusDb::new(Some(Layout::ByTenant)).await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, response_status, response_body, created_at, expires_at) \
         SELECT 'k' || g, 'tenant_' || (g % 97), 'POST', '/v1/payments', '\\x00', 'completed', 201, \
         '{}', now(), now() + CASE WHEN g <= 500 THEN interval '1 day' ELSE interval '2 days' END \
         FROM generate_series(1, 1000) g; ANALYZE idempotency_keys",
    )
    .await;
    let run = db.idemctl().args(["stats", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["recent_ttl"]["keys"], 1000, "{j}");
}

/// `--max-batches` on a table whose expired keys are all in the last shards (by worker and shard
/// id, the order the shards are listed in): a shard with nothing to evict is probed, not counted
/// as a batch, and the budget goes to the shards that have keys, oldest first, so each of three
/// runs of `--max-batches 10` evicts 10 batches' worth (every shard before them being empty used to
/// spend the whole budget: 0 rows, 10 batches, every run). `--max-rows 100` in batches of 20 runs
/// exactly 5 batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_budget_is_spent_on_shards_with_keys_not_on_empty_ones() {
    if skipped("citus evict budget past empty shards") {
        return;
    }
    let db = CitusDb::new(Some(Layout::ByTenant)).await;
    db.exec(
        "WITH last AS (
             SELECT s.shardid FROM pg_dist_shard s
               JOIN pg_dist_placement p ON p.shardid = s.shardid
               JOIN pg_dist_node n ON n.groupid = p.groupid
              WHERE s.logicalrelid = 'idempotency_keys'::regclass
              ORDER BY n.nodename DESC, n.nodeport DESC, s.shardid DESC LIMIT 4
         ), tenants AS (
             SELECT array_agg('tenant_' || g) AS t FROM generate_series(1, 3000) g
              WHERE get_shard_id_for_distribution_column('idempotency_keys', 'tenant_' || g)
                    IN (SELECT shardid FROM last)
         )
         INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path,
             request_fingerprint, state, response_status, response_body, created_at, expires_at)
         SELECT 'k' || g, t[1 + g % cardinality(t)], 'POST', '/v1/payments', '\\x00', 'completed',
                201, '{}', now() - interval '2 days', now() - interval '1 day' + g * interval '1 second'
           FROM tenants, generate_series(1, 2000) g;
         ANALYZE idempotency_keys",
    )
    .await;
    let client = db.client().await;
    let expired = || async {
        client
            .query_one(
                "SELECT count(*) FROM idempotency_keys WHERE expires_at < now() AND state = 'completed'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(expired().await, 2000);
    let budgeted = |budget: &[&str]| {
        let run = db
            .idemctl()
            .args(["evict", "-o", "json", "--batch-size", "20"])
            .args(budget)
            .run();
        run.assert_code(0);
        run.json()
    };
    for run_no in 1..=3 {
        let j = budgeted(&["--max-batches", "10"]);
        assert_eq!(j["batches"], 10, "run {run_no}: {j}");
        assert_eq!(j["rows_evicted"], 200, "run {run_no}: {j}");
        assert_eq!(j["end_reason"], "batch_budget", "run {run_no}: {j}");
        assert_eq!(expired().await, 2000 - 200 * run_no, "run {run_no}");
    }
    let j = budgeted(&["--max-rows", "100"]);
    assert_eq!(j["rows_evicted"], 100, "{j}");
    assert_eq!(j["batches"], 5, "{j}");
}

/// evict on a distributed table as a role that cannot see other sessions (no pg_monitor): the pace
/// falls back to its fixed duty cycle on every worker, and the warning says so once per run, not
/// once per worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_says_the_pace_fallback_once_per_run() {
    let Some(db) = loaded(Layout::ByTenant, "citus evict pace fallback once").await else {
        return;
    };
    let role = maintenance_role(&db, "evictor").await;
    let run = as_role(&db, &role).args(["evict", "-o", "json"]).run();
    run.assert_code(0);
    let said = run
        .stderr
        .matches("cannot see other sessions' activity")
        .count();
    assert_eq!(said, 1, "{run}");
    let j = run.json();
    assert_eq!(j["rows_evicted"], MIX.expired, "{j}");
    for n in j["citus"]["nodes"].as_array().unwrap() {
        assert_eq!(n["pace"]["mode"], "fixed", "{j}");
    }
}

/// The first shard (by name; the last with `order` "DESC") on the first worker, and a session there
/// with `SET citus.override_table_visibility = off` and manual changes to shards allowed.
async fn shard_on_worker(db: &CitusDb, order: &str) -> (tokio_postgres::Client, String) {
    let worker = db.node_client(1).await;
    worker
        .batch_execute(
            "SET citus.override_table_visibility = off; SET citus.enable_manual_changes_to_shards = on",
        )
        .await
        .unwrap();
    let shard: String = worker
        .query_one(
            &format!(
                "SELECT c.relname::text FROM pg_class c WHERE c.relkind = 'r' \
                 AND c.relname ~ '^idempotency_keys_[0-9]+$' ORDER BY c.relname {order} LIMIT 1"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    (worker, shard)
}

/// evict on a distributed table one of whose shards lost its expiry index on its worker: refused
/// before any change (exit 2), naming the shard, instead of scanning that shard whole every batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_refuses_a_shard_without_its_expiry_index() {
    let Some(db) = loaded(Layout::ByTenant, "citus evict shard index").await else {
        return;
    };
    let (worker, shard) = shard_on_worker(&db, "").await;
    let id = shard.trim_start_matches("idempotency_keys_").to_owned();
    worker
        .batch_execute(&format!("DROP INDEX idempotency_keys_expiry_{id}"))
        .await
        .unwrap();
    let before = snapshot(&db).await;
    let placed = placed(&db, &id).await;
    db.idemctl().args(["evict", "-o", "json"]).run().assert_code(2).assert_stderr(&format!(
        "idemctl: shard {id} of public.idempotency_keys on worker {placed} has no expiry index (it was dropped on the worker), so every evict batch there would scan the shard whole; nothing was changed: recreate the index on the coordinator, which Citus creates on every shard (`idemctl check` prints the statements)\n"
    ));
    assert_eq!(snapshot(&db).await, before);
}

/// evict as a role whose DELETE was revoked on one shard on its worker: refused before any change
/// with the permission-denied exit code (6), naming the shard and the GRANT to run on the
/// coordinator (it used to delete from the shards before it, then fail on that one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_checks_the_grants_on_every_shard_before_any_change() {
    let Some(db) = loaded(Layout::ByTenant, "citus evict shard grants").await else {
        return;
    };
    let role = maintenance_role(&db, "shardless").await;
    let (_, first) = shard_on_worker(&db, "").await;
    let id = first.trim_start_matches("idempotency_keys_").to_owned();
    // The last shard in the order evict takes them, so the shards before it would be evicted first.
    let (worker, last) = shard_on_worker(&db, "DESC").await;
    let last_id = last.trim_start_matches("idempotency_keys_").to_owned();
    assert_ne!(id, last_id);
    worker
        .batch_execute(&format!("REVOKE DELETE ON {last} FROM {role}"))
        .await
        .unwrap();
    let before = snapshot(&db).await;
    let placed = placed(&db, &last_id).await;
    let run = as_role(&db, &role).args(["evict", "-o", "json"]).run();
    run.assert_code(6).assert_stderr(&format!(
        "idemctl: permission denied: role {role} lacks DELETE on shard {last_id} of public.idempotency_keys on worker {placed}, which evict needs; nothing was changed: grant it on the coordinator, which Citus passes on to every shard: GRANT DELETE ON \"public\".\"idempotency_keys\" TO \"{role}\";\n"
    ));
    assert_eq!(snapshot(&db).await, before);
}

/// evict as a role that may not call, on one worker, the function its durable points call there
/// (function grants are per database, and the worker's was taken from PUBLIC): refused before any
/// change with the permission-denied exit code (6), naming the worker and the GRANT to run there.
/// Before, the run deleted on that worker, then failed at its first durable point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_checks_each_workers_durable_point_grant_before_any_change() {
    let Some(db) = loaded(Layout::ByTenant, "citus evict worker durable grant").await else {
        return;
    };
    let role = maintenance_role(&db, "nowal").await;
    let (worker, shard) = shard_on_worker(&db, "").await;
    let id = shard.trim_start_matches("idempotency_keys_").to_owned();
    worker
        .batch_execute(
            "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text) \
             FROM PUBLIC",
        )
        .await
        .unwrap();
    let before = snapshot(&db).await;
    let placed = placed(&db, &id).await;
    let run = as_role(&db, &role).args(["evict", "-o", "json"]).run();
    run.assert_error(6, &format!(
        "permission denied: role {role} may not execute pg_catalog.pg_logical_emit_message(boolean, text, text) on worker {placed}, which evict calls there once a second to make its deletes durable; nothing was changed: grant it on that worker (function grants stay in the database where they are made): GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text) TO \"{role}\";"
    ));
    assert_eq!(snapshot(&db).await, before);
    // check names it too, with the same grant.
    let check = as_role(&db, &role).args(["check", "-o", "json"]).run();
    let j = check.json();
    let shards = finding(&j, "citus shard privileges");
    assert_eq!(shards["status"], "fail", "{check}");
    assert_eq!(
        shards["detail"],
        format!(
            "{role} may not execute pg_catalog.pg_logical_emit_message(boolean, text, text) on worker {placed}, which evict calls there once a second to make its deletes durable"
        ),
        "{check}"
    );
    assert_eq!(
        shards["fix"],
        format!(
            "GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text) TO \"{role}\"; -- on worker {placed}: function grants stay in the database where they are made"
        ),
        "{check}"
    );
}

/// With a worker down, the commands that run through the coordinator fail with the cannot-connect
/// exit code (5) and one clean line:
/// Citus's text of the failed worker connection ("Connection refused" and, on the next line,
/// indented, "Is the server running ...") reads as one sentence, with no escaped tab or line break.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_a_worker_down_fails_with_one_clean_line() {
    if skipped("citus worker down") {
        return;
    }
    let db = CitusDb::private(Some(Layout::ByTenant)).await;
    db.exec(&load_sql(MIX)).await;
    db.exec(IN_PROGRESS_INDEX).await;
    db.stop_node(2).await;
    for args in [
        &["evict", "--dry-run"][..],
        &["reclaim", "--dry-run", "--older-than", "30m"],
        &["reclaim", "--yes", "--older-than", "30m"],
    ] {
        let run = db.idemctl().args(args).run();
        assert_eq!(run.code, 5, "{args:?}: the cannot-connect exit code: {run}");
        let line = run.stderr.trim_end();
        assert!(!line.contains('\n'), "{args:?}: more than one line: {run}");
        assert!(
            !line.contains("\\t") && !line.contains('\t') && !line.contains("\\n"),
            "{args:?}: {run}"
        );
        assert!(line.starts_with("idemctl: "), "{args:?}: {run}");
        assert!(
            line.contains("Connection refused Is the server running"),
            "{args:?}: {run}"
        );
    }
}

/// stats on a reference table and on a Citus local table reads the figures of the table's
/// placement (a reference table's copy on the first node the metadata lists, named in the per-node
/// figures), not the coordinator's empty shell (0 estimated rows, 24 kB).
async fn stats_read_one_placement(layout: Layout) {
    let Some(db) = loaded(layout, &format!("citus stats ({layout:?})")).await else {
        return;
    };
    let total = MIX.expired + MIX.live + MIX.fresh + MIX.stuck + MIX.expired_in_progress;
    let run = db.idemctl().args(["stats", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["sizes"]["estimated_rows"], total, "{j}");
    assert!(
        j["sizes"]["total_bytes"].as_i64().unwrap() > 1024 * 1024,
        "{j}"
    );
    assert_eq!(j["expired_backlog"]["count"], MIX.expired, "{j}");
    let nodes = j["citus"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{j}");
    assert_eq!(nodes[0]["shards"], 1, "{j}");
    assert_eq!(nodes[0]["estimated_rows"], total, "{j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_stats_reads_a_reference_tables_placement() {
    stats_read_one_placement(Layout::Reference).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_stats_reads_a_citus_local_tables_placement() {
    stats_read_one_placement(Layout::CitusLocal).await;
}

/// A scope of two columns on a table distributed by one of them (api_key_id): given that column's
/// value, inspect reads only the shard that holds it (proved with every other shard unreadable by
/// the role: the routed lookups succeed, one that must read every shard does not), and reclaim's
/// preview and sweep of that scope count, list and take its stuck key on that shard alone. The
/// scope is shown column by column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_a_scope_column_that_distributes_the_table_routes_to_its_shard() {
    if skipped("citus scope routing") {
        return;
    }
    let db = CitusDb::new(Some(Layout::ByTenant)).await;
    for n in 0..6 {
        insert_key(&db, &format!("tenant_{n}"), "shared-key", "completed").await;
    }
    insert_key(&db, "tenant_4", "stuck-key", "in_progress").await;
    insert_key(&db, "tenant_5", "stuck-key", "in_progress").await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(
        &config,
        "table = \"idempotency_keys\"\n\n[profiles.scoped]\nkey = \"key\"\n\
         tenant = [\"request_method\", \"api_key_id\"]\nexpires_at = \"expires_at\"\n\
         locked_at = \"locked_at\"\nrequest_path = \"request_path\"\n\
         response_status = \"response_status\"\nresponse_body = \"response_body\"\n\
         in_flight = { column = \"state\", values = [\"in_progress\"], done = [\"completed\"] }\n\
         actions = [\"delete\"]\n",
    )
    .unwrap();
    // The identity index the whole scope is looked up by.
    db.exec_alone("CREATE INDEX ON idempotency_keys (request_method, api_key_id, key)")
        .await;
    let role = maintenance_role(&db, "routed").await;
    // Every shard but tenant_4's is unreadable by the role, on its worker.
    let keep: i64 = db
        .client()
        .await
        .query_one(
            "SELECT get_shard_id_for_distribution_column('idempotency_keys', 'tenant_4')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for node in 1..=2 {
        let worker = db.node_client(node).await;
        worker
            .batch_execute("SET citus.override_table_visibility = off")
            .await
            .unwrap();
        for r in worker
            .query(
                "SELECT relname::text FROM pg_class WHERE relkind = 'r' \
                 AND relname ~ '^idempotency_keys_[0-9]+$' AND relname <> 'idempotency_keys_' || $1::text",
                &[&keep.to_string()],
            )
            .await
            .unwrap()
        {
            let shard: String = r.get(0);
            worker
                .batch_execute(&format!("REVOKE ALL ON {shard} FROM {role}"))
                .await
                .unwrap();
        }
    }
    let idemctl = || as_role(&db, &role).args(["--config", &config.to_string_lossy()]);
    let run = idemctl()
        .args([
            "-o",
            "json",
            "inspect",
            "shared-key",
            "--scope",
            "api_key_id=tenant_4",
        ])
        .run();
    run.assert_success();
    assert_eq!(
        run.json()["scope"],
        serde_json::json!({"request_method": "POST", "api_key_id": "tenant_4"}),
        "{run}"
    );
    let run = idemctl()
        .args(["inspect", "shared-key", "--api-key-id", "{POST,tenant_4}"])
        .run();
    run.assert_success()
        .assert_stdout_contains("request_method   POST")
        .assert_stdout_contains("api_key_id       tenant_4");
    // Without the distribution column's value every shard is read, and the role cannot.
    let run = idemctl()
        .args(["inspect", "shared-key", "--scope", "request_method=POST"])
        .run();
    assert_ne!(run.code, 0, "{run}");
    // reclaim's preview of the scope lists and counts its stuck keys on that shard alone (as the
    // role, which cannot read the others); without the distribution column's value it cannot.
    let run = idemctl()
        .args([
            "-o",
            "json",
            "reclaim",
            "--dry-run",
            "--allow-scan",
            "--older-than",
            "30m",
        ])
        .args(["--api-key-id", "{POST,tenant_4}"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["would_reclaim"]["count"], 1, "{run}");
    assert_eq!(
        run.json()["rows"][0]["api_key_id"],
        "{POST,tenant_4}",
        "{run}"
    );
    let run = idemctl()
        .args([
            "reclaim",
            "--dry-run",
            "--allow-scan",
            "--older-than",
            "30m",
        ])
        .run();
    assert_ne!(run.code, 0, "{run}");
    // reclaim's sweep of the scope runs its batches and counts its stuck keys on that shard alone
    // (as the role, which cannot read the others); the other scope's stuck key stays.
    let run = idemctl()
        .args([
            "-o",
            "json",
            "reclaim",
            "--yes",
            "--allow-scan",
            "--older-than",
            "30m",
        ])
        .args(["--api-key-id", "{POST,tenant_4}"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["rows_reclaimed"], 1, "{run}");
    assert_eq!(run.json()["stuck_left"]["count"], 0, "{run}");
    assert_eq!(
        run.json()["reclaimed"][0]["scope"],
        serde_json::json!({"request_method": "POST", "api_key_id": "tenant_4"}),
        "{run}"
    );
    let left: Vec<String> = db
        .client()
        .await
        .query(
            "SELECT api_key_id FROM idempotency_keys WHERE key = 'stuck-key' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["tenant_5"]);
}

/// Keys half an hour either side of the cut-off, added through the coordinator to every tenant's
/// shard: the walk deletes exactly the ones past it.
const NEAR_THE_CUTOFF: &str = "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
     request_fingerprint, state, response_status, response_body, created_at, expires_at) \
     SELECT 'near-' || g || '-' || s.side, t.api_key_id, 'POST', '/p', '\\x00', 'completed', 201, '{}', \
            now() - interval '1 day', now() + s.side * interval '30 minutes' \
       FROM generate_series(1, 3) g, (VALUES (-1), (1)) s(side), \
            (SELECT DISTINCT api_key_id FROM idempotency_keys) t";

/// A distributed table without an index on its expiry column: evict walks each shard's copy of the
/// primary key on its worker, in pages, one path over the placements as the expiry index's batches
/// take; exactly the expired completed rows go (those half an hour past the cut-off included, half
/// an hour short of it not), every row is examined once, each worker reports its part; a row
/// budget holds across the shards. A shard that lost its copy of the primary key is refused
/// before any change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_walks_each_shards_primary_key_without_an_expiry_index() {
    let Some(db) = loaded(Layout::ByTenant, "citus evict walk").await else {
        return;
    };
    db.exec(NEAR_THE_CUTOFF).await;
    db.exec("DROP INDEX idempotency_keys_expiry").await;
    db.exec("ANALYZE idempotency_keys").await;
    // stats reads each shard on its worker without the index: the planner's estimates.
    let stats = db.idemctl().args(["stats", "-o", "json"]).run();
    stats.assert_code(0);
    let sj = stats.json();
    assert_eq!(sj["expiry_figures"], "estimated", "{stats}");
    assert_eq!(
        sj["eviction_lag_seconds"],
        serde_json::Value::Null,
        "{stats}"
    );
    let truth: f64 = db
        .client()
        .await
        .query_one(
            "SELECT extract(epoch FROM now() - min(expires_at))::float8 FROM idempotency_keys",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let estimate = sj["eviction_lag_estimated_seconds"].as_f64().unwrap();
    assert!(
        (truth - 60.0..=truth + 5.0).contains(&estimate),
        "estimate {estimate}, oldest expiry waits {truth}: {stats}"
    );
    assert!(
        sj["expired_backlog_estimate"].as_u64().unwrap() > 0,
        "{stats}"
    );
    // check finds nothing amiss with the shards' indexes: they mirror the coordinator's, and the
    // expiry index is the coordinator's finding.
    let check = db.idemctl().args(["check", "-o", "json"]).run();
    let cj = check.json();
    let shards = crate::fixtures::finding(&cj, "citus shard indexes");
    assert_eq!(shards["status"], "ok", "{check}");
    assert_eq!(
        shards["detail"], "all 32 shards carry the identity index",
        "{check}"
    );
    assert_eq!(
        crate::fixtures::finding(&cj, "expiry index")["status"],
        "warn",
        "{check}"
    );
    let before = snapshot(&db).await;
    let expired = before.values().filter(|s| evictable(s)).count();
    let near_past = before
        .iter()
        .filter(|((_, k), s)| k.ends_with("--1") && evictable(s))
        .count();
    assert!(
        near_past > 0 && expired > MIX.expired as usize,
        "{near_past} {expired}"
    );
    // The dry run reads the pages through the coordinator, changing nothing.
    let dry = db
        .idemctl()
        .args(["evict", "--dry-run", "--batch-size", "40", "-o", "json"])
        .run();
    dry.assert_code(0);
    assert_eq!(dry.json()["would_evict"]["count"], expired, "{dry}");
    assert_eq!(
        dry.json()["plan"],
        serde_json::json!([
            "(not shown: a run walks each shard's copy of the index on its worker, one page at a time; the coordinator cannot plan the page over the distributed table)"
        ]),
        "{dry}"
    );
    assert_eq!(snapshot(&db).await, before, "a dry run changes nothing");

    // A row budget holds across the shards' walks, whichever shards it reaches.
    let run = db
        .idemctl()
        .args([
            "evict",
            "--batch-size",
            "40",
            "--max-rows",
            "50",
            "-o",
            "json",
        ])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], 50, "{run}");
    assert_eq!(run.json()["end_reason"], "row_budget", "{run}");
    let budgeted = before.len() - snapshot(&db).await.len();
    assert_eq!(budgeted, 50, "{run}");

    let run = db
        .idemctl()
        .args(["evict", "--batch-size", "40", "-o", "json"])
        .run();
    run.assert_code(0);
    let report = run.json();
    let after = snapshot(&db).await;
    let expected: BTreeMap<_, _> = before
        .iter()
        .filter(|(_, s)| !evictable(s))
        .map(|(k, s)| (k.clone(), s.clone()))
        .collect();
    assert_eq!(after, expected, "rows left after the walk: {report}");
    assert_eq!(report["rows_evicted"], expired - 50, "{report}");
    assert_eq!(report["end_reason"], "drained", "{report}");
    assert_eq!(report["walk"]["index"], "idempotency_keys_pkey", "{report}");
    assert_eq!(
        report["walk"]["rows_examined"],
        before.len() - 50,
        "{report}"
    );
    let nodes = report["citus"]["nodes"]
        .as_array()
        .expect("per-worker figures");
    assert_eq!(nodes.len(), 2, "{report}");
    let mut rows = 0;
    for n in nodes {
        assert!(n["rows_evicted"].as_i64().unwrap() > 0, "{report}");
        assert_eq!(n["shards_drained"], n["shards"], "{report}");
        rows += n["rows_evicted"].as_i64().unwrap();
    }
    assert_eq!(rows, expired as i64 - 50, "{report}");
    run.assert_stderr(
        "idemctl: note: table public.idempotency_keys has no index on expires_at: evict walks \
         idempotency_keys_pkey in pages of 40 entries, reading every key to find the expired \
         ones; the index would let each batch read only expired keys: CREATE INDEX CONCURRENTLY \
         \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (expires_at);\n",
    );

    // A shard whose copy of the primary key was dropped on its worker.
    let (worker, shard) = shard_on_worker(&db, "").await;
    let id = shard.trim_start_matches("idempotency_keys_").to_owned();
    worker
        .batch_execute(&format!(
            "ALTER TABLE {shard} DROP CONSTRAINT idempotency_keys_pkey_{id} CASCADE"
        ))
        .await
        .unwrap();
    db.exec(
        "UPDATE idempotency_keys SET expires_at = now() - interval '1 hour' WHERE key LIKE 'near-%'",
    )
    .await;
    let before = snapshot(&db).await;
    let placed: String = db
        .client()
        .await
        .query_one(
            &format!("SELECT nodename || ':' || nodeport FROM citus_shards WHERE shardid = {id}"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    db.idemctl().args(["evict"]).run().assert_error(
        2,
        &format!(
            "shard {id} of public.idempotency_keys on worker {placed} has neither an expiry index nor a unique index of plain NOT NULL columns to walk (dropped on the worker), so every evict batch there would scan the shard whole; nothing was changed: drop and create that index again on the coordinator, which Citus then creates on every shard"
        ),
    );
    assert_eq!(snapshot(&db).await, before, "a refused run changes nothing");
}

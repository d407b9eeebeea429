//! Key tables partitioned as pg_partman lays them out (daily RANGE partitions on expires_at or on
//! created_at, plus a default partition): check, stats, inspect, evict and reclaim work on them, and
//! `evict --drop-partitions` drops exactly the partitions whose keys have all expired, none
//! in_progress, never waiting on live traffic.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::fixtures::{self, Mix, evictable, scalar_i64, snapshot};
use crate::support::TestDb;
use crate::support::partman::{self, PartitionBy};

const MIX: Mix = Mix {
    expired: 3000,
    live: 800,
    fresh: 50,
    stuck: 40,
    expired_in_progress: 30,
};

const BOTH: [PartitionBy; 2] = [PartitionBy::ExpiresAt, PartitionBy::CreatedAt];

async fn partitioned(by: PartitionBy, with_stuck_index: bool, mix: Mix) -> TestDb {
    let db = TestDb::new().await;
    partman::create(&db, by, with_stuck_index).await;
    fixtures::load(&db, mix).await;
    db
}

fn qualified(names: &[String]) -> BTreeSet<String> {
    names.iter().map(|n| format!("public.{n}")).collect()
}

fn names(list: &serde_json::Value) -> BTreeSet<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Every row evict may delete is gone, every other row is untouched.
async fn assert_only_evictable_rows_gone(
    db: &TestDb,
    before: &std::collections::BTreeMap<(String, String), fixtures::Seen>,
) {
    let after = snapshot(db).await;
    let expected: Vec<_> = before.iter().filter(|(_, s)| !evictable(s)).collect();
    assert_eq!(after.len(), expected.len(), "rows left after evict");
    for (k, seen) in expected {
        assert_eq!(after.get(k), Some(seen), "row {k:?} was deleted or changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_accepts_partitioned_tables_and_explains_cross_partition_uniqueness() {
    for by in BOTH {
        let db = partitioned(by, true, MIX).await;
        let run = db.idemctl().args(["check", "-o", "json"]).run();
        run.assert_code(0);
        let j = run.json();
        let finding = |name: &str| fixtures::finding(&j, name).clone();
        let identity = finding("identity index");
        assert_eq!(identity["status"], "note", "{j}");
        let detail = identity["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("(api_key_id, key, {})", by.column()))
                && detail.contains("the API's business"),
            "{detail}"
        );
        let partitioning = finding("partitioning");
        assert_eq!(partitioning["status"], "ok");
        assert!(
            partitioning["detail"]
                .as_str()
                .unwrap()
                .starts_with(&format!("RANGE ({}), 14 leaf partitions", by.column())),
            "{partitioning}"
        );
        assert_eq!(finding("evict --drop-partitions")["status"], "ok", "{j}");
        assert_eq!(finding("expiry index")["status"], "ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_on_a_partitioned_table_without_the_in_progress_index_says_drop_partitions_needs_it()
{
    let db = partitioned(PartitionBy::ExpiresAt, false, Mix::default()).await;
    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    let drop = fixtures::finding(&j, "evict --drop-partitions").clone();
    assert_eq!(drop["status"], "note");
    let fix = drop["fix"].as_str().unwrap();
    // A partitioned table refuses CREATE INDEX CONCURRENTLY: the fix must not suggest it.
    assert!(
        fix.starts_with(
            "CREATE INDEX \"idempotency_keys_in_progress\" ON \"public\".\"idempotency_keys\""
        ),
        "{fix}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_lists_every_partition_with_bounds_rows_and_size() {
    for by in BOTH {
        let db = partitioned(by, true, MIX).await;
        let run = db.idemctl().args(["stats", "-o", "json"]).run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(j["expired_backlog"]["count"], 3000, "{j}");
        assert_eq!(
            j["partitioning"]["definition"],
            format!("RANGE ({})", by.column())
        );
        let parts = j["partitions"].as_array().unwrap();
        assert_eq!(parts.len(), 14, "{j}");
        let rows: i64 = parts
            .iter()
            .map(|p| p["estimated_rows"].as_i64().unwrap())
            .sum();
        assert_eq!(rows, j["sizes"]["estimated_rows"].as_i64().unwrap());
        assert_eq!(rows, 3920, "the fixture's rows, all analyzed");
        for p in &parts[..13] {
            assert_eq!(p["is_default"], false);
            let from = p["range_from"].as_str().unwrap();
            let to = p["range_to"].as_str().unwrap();
            assert!(from < to && to.ends_with("Z"), "{p}");
            assert!(p["total_bytes"].as_i64().unwrap() > 0);
        }
        let default = &parts[13];
        assert_eq!(default["name"], "public.idempotency_keys_default");
        assert!(default["range_from"].is_null() && default["range_to"].is_null());

        let run = db
            .idemctl()
            .args(["stats", "--partitions", "-o", "plain"])
            .run();
        run.assert_code(0)
            .assert_stdout_contains("partition\tbounds\testimated rows\ttotal size\n")
            .assert_stdout_contains("public.idempotency_keys_default\tDEFAULT\t")
            .assert_stdout_contains(&format!("14 leaf partitions, RANGE ({})", by.column()));
        let run = db.idemctl().args(["stats", "-o", "prometheus"]).run();
        run.assert_code(0).assert_stdout_contains(&format!(
            "idemctl_table_partitions{{database=\"{}\",table=\"public.idempotency_keys\"}} 14\n",
            db.name()
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_finds_a_key_in_a_partitioned_table_with_and_without_its_tenant() {
    for by in BOTH {
        let db = partitioned(
            by,
            true,
            Mix {
                expired: 50,
                live: 50,
                ..Mix::default()
            },
        )
        .await;
        let row = db
            .client()
            .await
            .query_one(
                "SELECT api_key_id, key FROM idempotency_keys WHERE expires_at > now() LIMIT 1",
                &[],
            )
            .await
            .unwrap();
        let (tenant, key): (String, String) = (row.get(0), row.get(1));
        for args in [vec!["--api-key-id", tenant.as_str()], vec![]] {
            let run = db
                .idemctl()
                .args(["inspect", key.as_str(), "-o", "json"])
                .args(&args)
                .run();
            run.assert_code(0);
            assert_eq!(run.json()["api_key_id"], tenant.as_str());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_deletes_exactly_expired_completed_rows_on_partitioned_tables() {
    for by in BOTH {
        for jobs in ["1", "3"] {
            let db = partitioned(by, false, MIX).await;
            let before = snapshot(&db).await;
            let run = db
                .idemctl()
                .args(["evict", "-o", "json", "--batch-size", "300", "--jobs", jobs])
                .args(["--duty-cycle", "100"])
                .run();
            run.assert_code(0);
            let j = run.json();
            assert_eq!(j["rows_evicted"], 3000, "{by:?} {j}");
            assert_eq!(j["end_reason"], "drained");
            assert_eq!(j["expired_in_progress_left"]["count"], 30);
            assert_eq!(j["dropped_partitions"], serde_json::json!([]));
            assert_only_evictable_rows_gone(&db, &before).await;
        }
    }
}

/// Holds one expired completed row the way a retry of that key does (SELECT ... FOR UPDATE).
async fn hold_an_expired_row(db: &TestDb, offset: i64) -> (tokio_postgres::Client, String, String) {
    let live = db.client().await;
    let row = live
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys WHERE expires_at < now() AND state = 'completed' \
             ORDER BY expires_at OFFSET $1 LIMIT 1",
            &[&offset],
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
    (live, tenant, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_skips_a_row_held_by_a_live_request_on_a_partitioned_table() {
    // The skip-locked fallback deletes by (tableoid, ctid): every partition has a row at each of the
    // small ctids, so matching the ctid alone would delete rows of other partitions.
    let db = partitioned(
        PartitionBy::ExpiresAt,
        false,
        Mix {
            expired: 2000,
            live: 300,
            ..Mix::default()
        },
    )
    .await;
    let (live, tenant, key) = hold_an_expired_row(&db, 700).await;
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--batch-size", "250"])
        .run_async()
        .await;
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], 1999, "{j}");
    assert_eq!(j["skipped_locked"], 1, "{j}");
    assert!(j["lock_fallbacks"].as_u64().unwrap() >= 1, "{j}");
    live.batch_execute("COMMIT").await.unwrap();
    let left = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FILTER (WHERE api_key_id = $1 AND key = $2), count(*) FROM idempotency_keys",
            &[&tenant, &key],
        )
        .await
        .unwrap();
    assert_eq!((left.get::<_, i64>(0), left.get::<_, i64>(1)), (1, 301));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_drop_partitions_drops_expired_partitions_and_evicts_the_rest_in_batches() {
    let db = partitioned(PartitionBy::ExpiresAt, true, MIX).await;
    let before = snapshot(&db).await;
    let expected = partman::droppable(&db).await;
    // Days -9 .. -1 have passed; yesterday's partition holds the expired in_progress keys.
    assert!(expected.len() >= 6, "{expected:?}");
    let kept_by_probe = "SELECT tableoid::regclass::text FROM idempotency_keys WHERE state = 'in_progress' AND expires_at < now() LIMIT 1";
    let in_progress_partition = db
        .client()
        .await
        .query_one(kept_by_probe, &[])
        .await
        .unwrap()
        .get::<_, String>(0);
    assert!(!expected.contains(&in_progress_partition));

    let dry = db
        .idemctl()
        .args(["evict", "--dry-run", "--drop-partitions", "-o", "json"])
        .run();
    dry.assert_code(0);
    let dj = dry.json();
    assert_eq!(
        names(&dj["would_drop_partitions"]),
        qualified(&expected),
        "{dj}"
    );
    assert_eq!(
        partman::partition_names(&db).await.len(),
        14,
        "the dry run dropped something"
    );
    assert_eq!(snapshot(&db).await, before);

    let run = db
        .idemctl()
        .args([
            "evict",
            "--drop-partitions",
            "-o",
            "json",
            "--batch-size",
            "400",
            "--drop-lock-timeout",
            "5s",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(names(&j["dropped_partitions"]), qualified(&expected), "{j}");
    let kept = &j["partitions_kept"];
    assert_eq!(
        names(kept),
        qualified(&[in_progress_partition]),
        "only the partition with in_progress keys is kept: {j}"
    );
    assert_eq!(kept[0]["reason"], "it holds an in_progress key");
    let dropped_rows: i64 = j["rows_dropped_estimate"].as_i64().unwrap();
    let evicted = j["rows_evicted"].as_i64().unwrap();
    assert_eq!(j["end_reason"], "drained");
    assert!(dropped_rows > 0 && evicted > 0, "{j}");
    assert_eq!(
        dropped_rows + evicted,
        3000,
        "estimates are exact after ANALYZE: {j}"
    );

    let left: BTreeSet<String> = partman::partition_names(&db).await.into_iter().collect();
    assert!(left.contains("idempotency_keys_default"));
    assert!(expected.iter().all(|p| !left.contains(p)), "{left:?}");
    assert_eq!(left.len(), 14 - expected.len());
    assert_only_evictable_rows_gone(&db, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_drop_partitions_on_a_created_at_layout_keeps_partitions_with_live_or_in_progress_keys()
 {
    let db = partitioned(PartitionBy::CreatedAt, true, MIX).await;
    // Created three days ago: one key still live (a 7-day TTL), its neighbours expired.
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, request_fingerprint, \
         state, response_status, response_body, created_at, expires_at) \
         SELECT 'three-days-' || g, 't', 'POST', '/p', '\\x00', 'completed', 201, '{}', \
                now() - interval '3 days', now() + CASE WHEN g = 1 THEN interval '4 days' ELSE -interval '2 days' END \
           FROM generate_series(1, 20) g; ANALYZE idempotency_keys",
    )
    .await;
    let partition_of =
        async |sql: &str| -> String { db.client().await.query_one(sql, &[]).await.unwrap().get(0) };
    let live_partition = partition_of(
        "SELECT tableoid::regclass::text FROM idempotency_keys WHERE key = 'three-days-1'",
    )
    .await;
    // Every daily partition wholly in the past that holds an in_progress key is kept: the
    // fixtures' in_progress keys were created over the last hours, so shortly after midnight they
    // sit in two such partitions, otherwise in one.
    let in_progress_partitions: Vec<String> = db
        .client()
        .await
        .query(
            "SELECT DISTINCT tableoid::regclass::text FROM idempotency_keys \
              WHERE state = 'in_progress' \
                AND created_at < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .filter(|p: &String| *p != live_partition)
        .collect();
    assert!(!in_progress_partitions.is_empty());
    let before = snapshot(&db).await;
    let expected = partman::droppable(&db).await;
    assert!(!expected.is_empty());

    let run = db
        .idemctl()
        .args([
            "evict",
            "--drop-partitions",
            "-o",
            "json",
            "--drop-lock-timeout",
            "5s",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(names(&j["dropped_partitions"]), qualified(&expected), "{j}");
    let reasons: BTreeSet<(String, String)> = j["partitions_kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_owned(),
                k["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut expect_kept = BTreeSet::from([(
        format!("public.{live_partition}"),
        "it holds a key that has not expired".to_owned(),
    )]);
    for p in &in_progress_partitions {
        expect_kept.insert((
            format!("public.{p}"),
            "it holds an in_progress key".to_owned(),
        ));
    }
    assert_eq!(reasons, expect_kept, "{j}");
    assert_only_evictable_rows_gone(&db, &before).await;
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE key LIKE 'three-days-%'"
        )
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_drop_partitions_falls_back_to_batches_when_a_live_request_holds_the_table() {
    let db = partitioned(
        PartitionBy::ExpiresAt,
        true,
        Mix {
            expired: 2000,
            live: 100,
            ..Mix::default()
        },
    )
    .await;
    let expected = partman::droppable(&db).await;
    let (live, tenant, key) = hold_an_expired_row(&db, 10).await;
    let started = Instant::now();
    let run = db
        .idemctl()
        .args([
            "evict",
            "--drop-partitions",
            "-o",
            "json",
            "--drop-lock-timeout",
            "20ms",
        ])
        .run_async()
        .await;
    let took = started.elapsed();
    run.assert_code(0);
    let j = run.json();
    // The live transaction's lock on the table refuses every detach; three misses and the rest are
    // not even tried, and the batches take every row but the held one.
    assert_eq!(j["dropped_partitions"], serde_json::json!([]), "{j}");
    let kept = j["partitions_kept"].as_array().unwrap();
    assert_eq!(names(&j["partitions_kept"]), qualified(&expected));
    let reasons: Vec<&str> = kept.iter().map(|k| k["reason"].as_str().unwrap()).collect();
    for r in &reasons[..3] {
        assert_eq!(
            *r, "its locks were not granted within 20ms (a live request was using the table)",
            "{j}"
        );
    }
    for r in &reasons[3..] {
        assert_eq!(
            *r,
            "not tried: the locks of the partitions before it were not granted (the table is busy)",
            "{j}"
        );
    }
    assert_eq!(j["rows_evicted"], 1999, "{j}");
    assert_eq!(j["skipped_locked"], 1);
    assert!(took < Duration::from_secs(20), "{took:?}");
    // The live request was never blocked: it can still work on the table in its transaction.
    live.execute(
        "UPDATE idempotency_keys SET locked_at = now() WHERE api_key_id = $1 AND key = $2",
        &[&tenant, &key],
    )
    .await
    .unwrap();
    live.batch_execute("COMMIT").await.unwrap();

    // With the table quiet again, the next run drops them (now empty but for the released row).
    // Autovacuum may have just started on a partition the batches emptied; it gives way to a
    // waiting DETACH after deadlock_timeout (1 s), so this run may wait that long.
    let run = db
        .idemctl()
        .args([
            "evict",
            "--drop-partitions",
            "-o",
            "json",
            "--drop-lock-timeout",
            "5s",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(names(&j["dropped_partitions"]), qualified(&expected), "{j}");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        100
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_drop_partitions_is_refused_where_it_cannot_prove_or_drop_anything() {
    // No in_progress index: the proof would scan a partition while the table is locked.
    let db = partitioned(
        PartitionBy::ExpiresAt,
        false,
        Mix {
            expired: 10,
            ..Mix::default()
        },
    )
    .await;
    let run = db.idemctl().args(["evict", "--drop-partitions"]).run();
    run.assert_error(2, "--drop-partitions proves a partition holds no in_progress key with the optional in_progress index, which table public.idempotency_keys lacks (without it the proof would scan the partition while the whole table is locked); create it with: CREATE INDEX \"idempotency_keys_in_progress\" ON \"public\".\"idempotency_keys\" ((coalesce(locked_at, created_at))) WHERE state = 'in_progress'; -- blocks writes while it builds; to avoid that, CREATE INDEX ... ON ONLY the table, CREATE INDEX CONCURRENTLY on each partition, then ALTER INDEX ... ATTACH PARTITION each");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        10
    );

    // A role that may delete but does not own the table.
    db.exec(&partman::stuck_index_ddl()).await;
    // Roles are cluster-wide: a name of its own, so concurrent tests cannot collide.
    let role = format!(
        "evictor_{}",
        &db.name()[crate::support::pg::DB_PREFIX.len()..]
    );
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT, DELETE, UPDATE (expires_at) ON idempotency_keys TO {role}"
    ))
    .await;
    let run = db
        .idemctl()
        .args(["evict", "--drop-partitions", "-d"])
        .arg(db.url_with(&[("user", role.as_str())]))
        .run();
    run.assert_error(
        6,
        &format!(
            "permission denied: role {role} does not own table public.idempotency_keys (nor \
             belong to its owner role), which DETACH PARTITION needs; run --drop-partitions as \
             the owner, or evict without it"
        ),
    );
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;

    // A plain table has no partitions to drop.
    let plain = TestDb::new().await;
    fixtures::table_with(
        &plain,
        fixtures::Schema::Corrected,
        Mix {
            expired: 10,
            ..Mix::default()
        },
    )
    .await;
    let run = plain.idemctl().args(["evict", "--drop-partitions"]).run();
    run.assert_code(2).assert_stderr_contains(
        "table public.idempotency_keys is not partitioned; --drop-partitions needs a table range-partitioned on expires_at or created_at",
    );
    // --drop-lock-timeout means nothing without it.
    let run = plain
        .idemctl()
        .args(["evict", "--drop-lock-timeout", "10ms"])
        .run();
    run.assert_code(2)
        .assert_stderr_contains("--drop-partitions");
}

// --- reclaim on range-partitioned tables: every partition has rows at the same small ctids. ---

/// A plan of the stuck keys of one partition, then the same ctids stuck in another partition: apply
/// must reclaim only what it planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_apply_on_an_expires_at_partitioned_table_touches_only_planned_rows() {
    let db = TestDb::new().await;
    partman::create(&db, PartitionBy::ExpiresAt, true).await;
    let stuck = |expires: &str, prefix: &str| {
        format!(
            "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, request_fingerprint, \
             state, locked_at, created_at, expires_at) \
             SELECT '{prefix}' || g, 't', 'POST', '/p', '\\x00', 'in_progress', now() - interval '1 hour', \
                    now() - interval '1 hour', {expires} FROM generate_series(1, 5) g"
        )
    };
    db.exec(&stuck("current_date + interval '1 day 1 hour'", "a"))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run()
        .assert_code(0);
    db.exec(&stuck("current_date + interval '2 days 1 hour'", "b"))
        .await;
    let same_ctids = "SELECT count(DISTINCT ctid) FROM idempotency_keys";
    assert_eq!(
        scalar_i64(&db, same_ctids).await,
        5,
        "both partitions use ctids (0,1)..(0,5)"
    );
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--apply"])
        .arg(&plan)
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], 5, "{run}");
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE key LIKE 'b%'"
        )
        .await,
        5,
        "apply reached past its plan into another partition"
    );
    // The sweep with a limit takes exactly that many, wherever they are.
    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--yes",
            "-o",
            "json",
            "--limit",
            "2",
            "--batch-size",
            "2",
        ])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], 2, "{run}");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_fail_on_a_created_at_partitioned_table_skips_a_live_owner_in_another_partition() {
    let db = TestDb::new().await;
    partman::create(&db, PartitionBy::CreatedAt, true).await;
    for (prefix, created) in [
        ("a", "now() - interval '2 days'"),
        ("b", "now() - interval '1 hour'"),
    ] {
        db.exec(&format!(
            "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, request_fingerprint, \
             state, locked_at, created_at, expires_at) \
             SELECT '{prefix}' || g, 't', 'POST', '/p', '\\x00', 'in_progress', {created}, {created}, \
                    now() + interval '1 day' FROM generate_series(1, 5) g"
        ))
        .await;
    }
    // b1 sits at (0,1) of today's partition, a1 at (0,1) of the one two days back.
    let owner = db.client().await;
    owner.batch_execute("BEGIN").await.unwrap();
    owner
        .execute(
            "SELECT 1 FROM idempotency_keys WHERE key = 'b1' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
    let started = Instant::now();
    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--action",
            "fail",
            "--yes",
            "-o",
            "json",
            "--batch-size",
            "3",
        ])
        .run_async()
        .await;
    run.assert_code(0);
    assert!(started.elapsed() < Duration::from_secs(20));
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], 9, "{j}");
    assert_eq!(j["skipped_live_owner"]["count"], 1, "{j}");
    owner.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress'"
        )
        .await,
        1
    );
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' AND key = 'b1'"
        )
        .await,
        1
    );
}

/// Without an index on the expiry column, `--drop-partitions` still drops the partitions of an
/// expires_at layout whose keys have all expired: a partition's upper bound proves it, and the
/// probe only looks for an in_progress key (through the in_progress index). The rest is walked in
/// pages of the primary key, and exactly the evictable rows go. On a created_at layout with an
/// expiry column of its own, the bound proves nothing, and the run is refused in one line before
/// any change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_drop_partitions_without_an_expiry_index_drops_by_the_bounds_and_walks_the_rest() {
    let db = partitioned(PartitionBy::ExpiresAt, true, MIX).await;
    db.exec("DROP INDEX idempotency_keys_expiry").await;
    let before = snapshot(&db).await;
    let expected = partman::droppable(&db).await;
    assert!(expected.len() >= 6, "{expected:?}");
    let in_progress_partition: String = db
        .client()
        .await
        .query_one(
            "SELECT tableoid::regclass::text FROM idempotency_keys WHERE state = 'in_progress' AND expires_at < now() LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);

    let dry = db
        .idemctl()
        .args(["evict", "--dry-run", "--drop-partitions", "-o", "json"])
        .run();
    dry.assert_code(0);
    let dj = dry.json();
    assert_eq!(
        names(&dj["would_drop_partitions"]),
        qualified(&expected),
        "{dj}"
    );
    assert_eq!(dj["walk"]["index"], "idempotency_keys_pkey", "{dj}");
    assert_eq!(snapshot(&db).await, before, "the dry run changed something");

    // Nothing here holds the table, but autovacuum may be at a freshly loaded partition; it gives
    // way to a waiting lock after deadlock_timeout (1s), which 5ms would not wait for.
    let run = db
        .idemctl()
        .args([
            "evict",
            "--drop-partitions",
            "-o",
            "json",
            "--batch-size",
            "400",
            "--drop-lock-timeout",
            "5s",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(names(&j["dropped_partitions"]), qualified(&expected), "{j}");
    assert_eq!(
        names(&j["partitions_kept"]),
        qualified(&[in_progress_partition]),
        "{j}"
    );
    assert_eq!(
        j["partitions_kept"][0]["reason"],
        "it holds an in_progress key"
    );
    let dropped_rows = j["rows_dropped_estimate"].as_i64().unwrap();
    let evicted = j["rows_evicted"].as_i64().unwrap();
    assert_eq!(j["end_reason"], "drained", "{j}");
    assert!(dropped_rows > 0 && evicted > 0, "{j}");
    assert_eq!(dropped_rows + evicted, 3000, "{j}");
    // The walk read every row the drops left, once.
    let left_after_drops = before.len() as i64 - dropped_rows;
    assert_eq!(j["walk"]["rows_examined"], left_after_drops, "{j}");
    let left: BTreeSet<String> = partman::partition_names(&db).await.into_iter().collect();
    assert_eq!(left.len(), 14 - expected.len());
    assert_only_evictable_rows_gone(&db, &before).await;

    let db = partitioned(PartitionBy::CreatedAt, true, MIX).await;
    db.exec("DROP INDEX idempotency_keys_expiry").await;
    let before = snapshot(&db).await;
    db.idemctl()
        .args(["evict", "--drop-partitions"])
        .run()
        .assert_error(2, "table public.idempotency_keys is partitioned on created_at, which does not bound expires_at, and has no index on expires_at, so --drop-partitions cannot prove a partition's keys have all expired without reading the partition while it holds the table's lock; nothing was changed: run evict without --drop-partitions (it walks the table's unique index), or create the index with: CREATE INDEX \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (expires_at); -- blocks writes while it builds; to avoid that, CREATE INDEX ... ON ONLY the table, CREATE INDEX CONCURRENTLY on each partition, then ALTER INDEX ... ATTACH PARTITION each");
    // check says the same, with the index that lifts it.
    let run = db.idemctl().args(["check", "-o", "json"]).run();
    let j = run.json();
    let drop = fixtures::finding(&j, "evict --drop-partitions");
    assert_eq!(drop["status"], "note", "{j}");
    assert_eq!(
        drop["detail"],
        "not available without the index on expires_at: the partitions are bounded on created_at, which does not bound expires_at, and only that index proves a partition's keys have all expired without reading it under the table's lock; evict walks the table meanwhile",
        "{j}"
    );
    assert_eq!(
        drop["fix"],
        "CREATE INDEX \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (expires_at); -- blocks writes while it builds; to avoid that, CREATE INDEX ... ON ONLY the table, CREATE INDEX CONCURRENTLY on each partition, then ALTER INDEX ... ATTACH PARTITION each",
        "{j}"
    );
    assert_eq!(snapshot(&db).await, before);
}

/// The explainer's table (no expiry column: keys expire a TTL after created_at) partitioned by day
/// on created_at, with the in-flight index and no index on created_at: a partition whose upper
/// bound is a TTL past holds only expired keys, so `--drop-partitions` drops it unless a key in it
/// is still in flight, and walks the rest; exactly the expired finished keys go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_drop_partitions_without_a_created_at_index_drops_partitions_a_ttl_past_their_bound()
{
    let ddl = crate::profiles::EXPLAINER_DDL
        .replace("key             text        PRIMARY KEY,", "key             text        NOT NULL,")
        .replace(
            "    locked_at       timestamptz\n);",
            "    locked_at       timestamptz,\n    PRIMARY KEY (key, created_at)\n) PARTITION BY RANGE (created_at);",
        );
    assert!(ddl.contains("PARTITION BY RANGE (created_at)"), "{ddl}");
    let db = TestDb::new().await;
    db.exec(&ddl).await;
    db.exec(
        "DO $$ DECLARE d date; BEGIN \
           FOR d IN SELECT generate_series(current_date - 9, current_date + 1, interval '1 day')::date LOOP \
             EXECUTE format('CREATE TABLE %I PARTITION OF idempotency_keys FOR VALUES FROM (%L) TO (%L)', \
                            'idempotency_keys_p' || to_char(d, 'YYYYMMDD'), d::timestamptz, (d + 1)::timestamptz); \
           END LOOP; END $$; \
         CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT; \
         CREATE INDEX idempotency_keys_in_progress ON idempotency_keys ((coalesce(locked_at, created_at))) \
           WHERE response_status = 202 AND response_body = '{\"status\": \"processing\"}'::jsonb;",
    )
    .await;
    db.exec(&crate::profiles::explainer_rows(5)).await;
    // Keys of every day back to a week ago, done long since.
    db.exec(
        "INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at) \
         SELECT 'week-' || g, md5(g::text), 201, '{}', now() - g * interval '7 hours' \
         FROM generate_series(1, 24) g; ANALYZE idempotency_keys",
    )
    .await;
    /// Every row (key, digest) and whether evict may delete it (expired a day after creation,
    /// not in flight).
    async fn seen(db: &TestDb) -> Vec<(String, String, bool)> {
        let rows = "SELECT key, md5(t::text), created_at < now() - interval '1 day' \
                      AND NOT (response_status = 202 AND response_body = '{\"status\": \"processing\"}'::jsonb) \
                    FROM idempotency_keys t ORDER BY key";
        db.client()
            .await
            .query(rows, &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }
    let before = seen(&db).await;
    // The partitions whose upper bound has passed: dropped when it is a day (the TTL) past and no
    // key in them is in flight, else kept, saying why.
    let ended = "SELECT relid::regclass::text, \
                   EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.tableoid = relid \
                            AND response_status = 202 AND response_body = '{\"status\": \"processing\"}'::jsonb), \
                   (substring(relid::regclass::text from 19)::date + 1)::timestamptz + interval '1 day' < now() \
                 FROM pg_partition_tree('idempotency_keys') \
                WHERE isleaf AND relid::regclass::text <> 'idempotency_keys_default' \
                  AND (substring(relid::regclass::text from 19)::date + 1)::timestamptz <= now() \
                ORDER BY 1";
    let parts = db.client().await.query(ended, &[]).await.unwrap();
    let name = |r: &tokio_postgres::Row| format!("public.{}", r.get::<_, String>(0));
    let droppable: BTreeSet<String> = parts
        .iter()
        .filter(|r| !r.get::<_, bool>(1) && r.get::<_, bool>(2))
        .map(name)
        .collect();
    let kept: Vec<(String, &str)> = parts
        .iter()
        .filter(|r| r.get::<_, bool>(1) || !r.get::<_, bool>(2))
        .map(|r| {
            let why = match r.get::<_, bool>(1) {
                true => "it holds an in_progress key",
                false => "it holds a key that has not expired",
            };
            (name(r), why)
        })
        .collect();
    assert!(
        droppable.len() >= 4 && kept.iter().any(|k| k.1 == "it holds an in_progress key"),
        "{droppable:?} {kept:?}"
    );

    let run = db
        .idemctl()
        .args([
            "--ttl",
            "1d",
            "-o",
            "json",
            "evict",
            "--drop-partitions",
            "--batch-size",
            "7",
            "--drop-lock-timeout",
            "5s",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(names(&j["dropped_partitions"]), droppable, "{j}");
    let reasons: Vec<(String, &str)> = j["partitions_kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_owned(),
                k["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(reasons, kept, "{j}");
    assert_eq!(j["end_reason"], "drained", "{j}");
    assert_eq!(j["walk"]["index"], "idempotency_keys_pkey", "{j}");
    let expected: Vec<_> = before.iter().filter(|r| !r.2).cloned().collect();
    assert_eq!(seen(&db).await, expected, "{j}");
}

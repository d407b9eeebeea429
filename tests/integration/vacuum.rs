//! `evict --vacuum`: VACUUM (ANALYZE) after a run that evicted more than --vacuum-min-rows keys, on
//! the table or each leaf partition, outside any transaction (through a transaction pooler too),
//! reported and timed in the summary and the metrics; refused before any change for a role that may
//! not vacuum the table; the database's owner may.

use std::time::Duration;

use crate::fixtures::{self, Mix, Schema, scalar_i64};
use crate::support::cluster::PrivateCluster;
use crate::support::partman::{self, PartitionBy};
use crate::support::pgbouncer::{Mode, PgBouncer};
use crate::support::{Cmd, TestDb, ident};

const MIX: Mix = Mix {
    expired: 3_000,
    live: 200,
    fresh: 0,
    stuck: 0,
    expired_in_progress: 0,
};

/// Relations vacuumed by hand (not autovacuum) since the test began: (name, vacuum_count,
/// analyze_count).
async fn manual_vacuums(db: &TestDb) -> Vec<(String, i64, i64)> {
    let client = db.client().await;
    // The counters reach pg_stat_all_tables within a second of the VACUUM.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    client
        .query(
            "SELECT relname::text, vacuum_count, analyze_count FROM pg_stat_all_tables \
              WHERE relname LIKE 'idempotency_keys%' AND vacuum_count > 0 ORDER BY relname",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_vacuum_runs_vacuum_analyze_after_a_run_that_evicted_enough() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, MIX).await;
    db.exec("ALTER TABLE idempotency_keys SET (autovacuum_enabled = off)")
        .await;
    // Below the threshold: nothing vacuumed, and the summary says why.
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--vacuum", "--max-rows", "500"])
        .run_async()
        .await;
    run.assert_success();
    let v = &run.json()["vacuum"];
    assert_eq!(v["ran"], false, "{run}");
    assert_eq!(
        v["skipped"], "500 keys evicted, not more than --vacuum-min-rows 10000",
        "{run}"
    );
    assert!(manual_vacuums(&db).await.is_empty());
    db.exec("CREATE EXTENSION IF NOT EXISTS pg_visibility")
        .await;
    let visible = scalar_i64(
        &db,
        "SELECT all_visible::bigint FROM pg_visibility_map_summary('idempotency_keys')",
    )
    .await;
    assert_eq!(visible, 0);

    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("evict.prom");
    let run = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--vacuum",
            "--vacuum-min-rows",
            "1000",
        ])
        .arg("--textfile")
        .arg(&prom)
        .run_async()
        .await;
    run.assert_success();
    let j = run.json();
    assert_eq!(j["rows_evicted"], 2500, "{run}");
    let v = &j["vacuum"];
    assert_eq!(v["ran"], true, "{run}");
    assert_eq!(v["relations"][0]["relation"], "public.idempotency_keys");
    assert_eq!(v["relations"][0]["error"], serde_json::Value::Null, "{run}");
    assert!(v["seconds"].as_f64().unwrap() > 0.0, "{run}");
    // One VACUUM, and its ANALYZE after the fixture's own.
    assert_eq!(
        manual_vacuums(&db).await,
        vec![("idempotency_keys".to_owned(), 1, 2)]
    );
    let text = std::fs::read_to_string(&prom).unwrap();
    let sample = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.parse::<f64>().unwrap())
    };
    assert_eq!(sample("idemctl_evict_vacuum_ran"), Some(1.0), "{text}");
    assert_eq!(
        sample("idemctl_evict_vacuum_relations"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample("idemctl_evict_vacuum_failed_relations"),
        Some(0.0),
        "{text}"
    );
    assert!(
        sample("idemctl_evict_vacuum_seconds").unwrap() > 0.0,
        "{text}"
    );

    // The text summary.
    fixtures::load(&db, MIX).await;
    let run = db
        .idemctl()
        .args(["evict", "-o", "plain", "--vacuum", "--vacuum-min-rows", "1"])
        .run_async()
        .await;
    run.assert_success()
        .assert_stdout_contains("VACUUM (ANALYZE) of 1 of 1 relation in ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_vacuum_vacuums_each_partition_of_a_partitioned_table() {
    let db = TestDb::new().await;
    partman::create(&db, PartitionBy::ExpiresAt, false).await;
    fixtures::load(&db, MIX).await;
    let leaves = partman::partition_names(&db).await;
    let run = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--vacuum",
            "--vacuum-min-rows",
            "100",
        ])
        .run_async()
        .await;
    run.assert_success();
    let v = &run.json()["vacuum"];
    let vacuumed: Vec<String> = v["relations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["error"], serde_json::Value::Null, "{run}");
            r["relation"]
                .as_str()
                .unwrap()
                .trim_start_matches("public.")
                .to_owned()
        })
        .collect();
    let mut expected = leaves.clone();
    expected.sort();
    assert_eq!(vacuumed, expected, "{run}");
    let seen: Vec<String> = manual_vacuums(&db).await.into_iter().map(|r| r.0).collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_vacuum_is_refused_before_any_change_without_the_right_to_vacuum() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, MIX).await;
    let role = format!("{}_evictor", db.name());
    db.exec(&format!(
        "CREATE ROLE {r} LOGIN; GRANT USAGE ON SCHEMA public TO {r}; \
         GRANT SELECT, DELETE, UPDATE (expires_at) ON idempotency_keys TO {r}",
        r = ident(&role)
    ))
    .await;
    let before = scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await;
    let url = db.url_with(&[("user", &role)]);
    let run = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["evict", "--vacuum"])
        .run_async()
        .await;
    let owner: String = db
        .client()
        .await
        .query_one(
            "SELECT tableowner::text FROM pg_tables WHERE tablename = 'idempotency_keys'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    run.assert_error(
        6,
        &format!(
            "evict --vacuum: this role may not VACUUM public.idempotency_keys (only the owner, a \
             superuser or the database's owner may), nothing was changed; run without --vacuum, \
             or as the owner: GRANT {owner} TO <this role>"
        ),
    );
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        before
    );
    // Without --vacuum the same role evicts.
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["evict"])
        .run_async()
        .await
        .assert_success();
    // The database's owner may vacuum every table in it.
    fixtures::load(&db, MIX).await;
    db.exec(&format!(
        "ALTER DATABASE {} OWNER TO {}",
        ident(db.name()),
        ident(&role)
    ))
    .await;
    let run = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args([
            "evict",
            "-o",
            "json",
            "--vacuum",
            "--vacuum-min-rows",
            "100",
        ])
        .run_async()
        .await;
    run.assert_success();
    assert_eq!(
        run.json()["vacuum"]["relations"][0]["error"],
        serde_json::Value::Null,
        "{run}"
    );
    db.exec(&format!(
        "ALTER DATABASE {} OWNER TO CURRENT_USER",
        ident(db.name())
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_vacuum_works_through_a_transaction_pooler() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, MIX).await;
    let bouncer = PgBouncer::start(&db, Mode::Transaction, 2, &[]).await;
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", bouncer.url())
        .args([
            "evict",
            "-o",
            "json",
            "--pool-mode",
            "transaction",
            "--vacuum",
        ])
        .args(["--vacuum-min-rows", "100"])
        .run_async()
        .await;
    run.assert_success();
    let v = &run.json()["vacuum"];
    assert_eq!(v["ran"], true, "{run}");
    assert_eq!(v["relations"][0]["error"], serde_json::Value::Null, "{run}");
    // One VACUUM, and its ANALYZE after the fixture's own.
    assert_eq!(
        manual_vacuums(&db).await,
        vec![("idempotency_keys".to_owned(), 1, 2)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vacuum_that_cannot_lock_the_table_is_reported_and_the_run_still_succeeds() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, MIX).await;
    // Another maintenance command holds the lock VACUUM needs (deletes still go through).
    let holder = db.client().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN SHARE UPDATE EXCLUSIVE MODE")
        .await
        .unwrap();
    let run = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--vacuum",
            "--vacuum-min-rows",
            "100",
        ])
        .args(["--lock-timeout", "200ms"])
        .run_async()
        .await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    run.assert_success();
    assert_eq!(
        crate::snapshots::normalise(&run.stderr, false),
        "idemctl: warning: evict --vacuum: VACUUM (ANALYZE) of 0 of 1 relation in <DUR>; \
         public.idempotency_keys failed: canceling statement due to lock timeout\n",
        "{run}"
    );
    let j = run.json();
    assert_eq!(j["rows_evicted"], 3000, "{run}");
    assert_eq!(
        j["vacuum"]["relations"][0]["error"], "canceling statement due to lock timeout",
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_evict_vacuum_the_pages_are_all_visible_again() {
    // A cluster of its own: a transaction or a replication slot anywhere in the shared cluster could
    // hold back what VACUUM may clean.
    let server = PrivateCluster::start().await;
    let client = server.client().await;
    // Nothing else may hold a snapshot while evict's VACUUM runs (an autovacuum worker's ANALYZE
    // of a catalog would).
    client
        .batch_execute("ALTER SYSTEM SET autovacuum = off")
        .await
        .unwrap();
    client
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    client.batch_execute(Schema::Corrected.ddl()).await.unwrap();
    client
        .batch_execute(&fixtures::load_sql(MIX))
        .await
        .unwrap();
    client
        .batch_execute(
            "ALTER TABLE idempotency_keys SET (autovacuum_enabled = off); \
             CREATE EXTENSION pg_visibility",
        )
        .await
        .unwrap();
    let summary = "SELECT (SELECT all_visible FROM pg_visibility_map_summary('idempotency_keys'))::bigint, \
                   (pg_relation_size('idempotency_keys') / current_setting('block_size')::int)::bigint";
    let evict = |args: &'static [&'static str]| server.idemctl().args(args).run_async();
    // Without --vacuum, the pages the run emptied are not all-visible.
    evict(&["evict", "--max-rows", "1000"])
        .await
        .assert_success();
    let r = client.query_one(summary, &[]).await.unwrap();
    let (visible, pages): (i64, i64) = (r.get(0), r.get(1));
    assert!(pages > 0 && visible == 0, "{visible} of {pages}");
    let run = evict(&[
        "evict",
        "-o",
        "json",
        "--vacuum",
        "--vacuum-min-rows",
        "1000",
    ])
    .await;
    run.assert_success();
    assert_eq!(run.json()["vacuum"]["ran"], true, "{run}");
    let r = client.query_one(summary, &[]).await.unwrap();
    let (visible, pages): (i64, i64) = (r.get(0), r.get(1));
    // Nearly every page is all-visible after evict's VACUUM (the pages of the 200 live keys are
    // sometimes left to the next one).
    assert!(visible * 10 >= pages * 9, "{visible} of {pages}\n{run}");
}

/// A relation's name in the --vacuum line reaches the terminal escaped: a leaf partition named with
/// quotes, a newline and an escape sequence, whose VACUUM cannot lock it, is named in the summary
/// and the warning in SQL's Unicode-escape form (`U&"...\000A\001B..."`, the name as a statement
/// would write it), never as the raw bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_relation_name_in_the_vacuum_line_is_escaped() {
    let db = TestDb::new().await;
    partman::create(&db, PartitionBy::ExpiresAt, false).await;
    fixtures::load(&db, MIX).await;
    let hostile = "keys\"q'\n\u{1b}[2J";
    db.exec(&format!(
        "ALTER TABLE idempotency_keys_default RENAME TO {}",
        ident(hostile)
    ))
    .await;
    let holder = db.client().await;
    holder
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE",
            ident(hostile)
        ))
        .await
        .unwrap();
    let run = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "plain",
            "--vacuum",
            "--vacuum-min-rows",
            "100",
        ])
        .args(["--lock-timeout", "200ms"])
        .run_async()
        .await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    let shown =
        "public.U&\"keys\"\"q'\\000A\\001B[2J\" failed: canceling statement due to lock timeout";
    run.assert_success()
        .assert_stdout_contains(shown)
        .assert_stderr_contains("idemctl: warning: evict --vacuum: VACUUM (ANALYZE) of ")
        .assert_stderr_contains(shown);
    for (name, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
        assert!(!text.contains('\u{1b}'), "a raw ESC on {name}: {run}");
        assert!(
            !text.contains("q'\n"),
            "a raw newline in the name on {name}: {run}"
        );
    }
}

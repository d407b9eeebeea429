//! `idemctl stats` and `idemctl check`: figures from the catalog and bounded, index-backed
//! statements; Prometheus output; thresholds that make cron page.

use crate::fixtures::{self, Mix, Schema, scalar_i64};
use crate::support::TestDb;

async fn with_known_ages(schema: Schema) -> TestDb {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        schema,
        Mix {
            expired: 40,
            live: 60,
            fresh: 5,
            stuck: 7,
            expired_in_progress: 3,
        },
    )
    .await;
    // The oldest expired completed key expired exactly 8 days ago.
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, request_fingerprint, \
         state, response_status, response_body, created_at, expires_at) \
         VALUES ('oldest', 'tenant_z', 'POST', '/p', '\\x00', 'completed', 201, '{}', \
         now() - interval '9 days', now() - interval '8 days'); ANALYZE idempotency_keys",
    )
    .await;
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_reports_lag_backlog_and_sizes() {
    let db = with_known_ages(Schema::Reference).await;
    let run = db.idemctl().args(["stats", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["expired_backlog"]["count"], 41);
    assert_eq!(j["expired_backlog"]["at_least"], false);
    let lag = j["eviction_lag_seconds"].as_f64().unwrap();
    assert!(
        (8.0 * 86400.0..8.0 * 86400.0 + 120.0).contains(&lag),
        "lag {lag}"
    );
    assert_eq!(j["oldest_expired"]["key"], "oldest");
    assert_eq!(j["sizes"]["estimated_rows"], 116);
    assert!(j["sizes"]["index_bytes"].as_i64().unwrap() > 0);
    assert!(j["sizes"]["toast_bytes"].as_i64().is_some());
    assert!(
        j["stuck"].is_null(),
        "no stuck count without the index: {j}"
    );
    assert!(
        j["notes"][0]
            .as_str()
            .unwrap()
            .contains("CREATE INDEX CONCURRENTLY"),
        "{j}"
    );
    assert!(
        j["oldest_live"]["seconds"].as_f64().unwrap() >= 3000.0,
        "{j}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_counts_stuck_keys_with_the_optional_index_or_an_explicit_scan() {
    let db = with_known_ages(Schema::Corrected).await;
    let run = db
        .idemctl()
        .args(["stats", "-o", "json", "--allow-scan"])
        .run();
    run.assert_code(0);
    // 7 taken an hour ago, 3 taken two days ago (expired); the 5 fresh ones are not stuck.
    assert_eq!(run.json()["stuck"]["count"]["count"], 10);
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    let run = db
        .idemctl()
        .args(["stats", "-o", "json", "--stuck-after", "1d"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["stuck"]["count"]["count"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_backlog_is_capped() {
    let db = with_known_ages(Schema::Corrected).await;
    let run = db
        .idemctl()
        .args(["stats", "-o", "json", "--backlog-cap", "10"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["expired_backlog"]["count"], 10);
    assert_eq!(j["expired_backlog"]["at_least"], true);
    // Beyond the cap, the planner's estimate (the table was analyzed with 41 expired keys).
    let estimate = j["expired_backlog_estimate"].as_u64().unwrap();
    assert!((20..=80).contains(&estimate), "{j}");
    let run = db.idemctl().args(["stats", "--backlog-cap", "10"]).run();
    run.assert_stdout_contains("at least 10 (about ");
    // Under the cap, the count is exact and no estimate is shown.
    let run = db.idemctl().args(["stats", "-o", "json"]).run();
    assert_eq!(run.json()["expired_backlog"]["count"], 41, "{run}");
    assert!(
        run.json().get("expired_backlog_estimate").is_none(),
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_prometheus_output_and_textfile() {
    let db = with_known_ages(Schema::Corrected).await;
    let run = db.idemctl().args(["stats", "-o", "prometheus"]).run();
    run.assert_code(0)
        .assert_stdout_contains("# HELP idemctl_eviction_lag_seconds ")
        .assert_stdout_contains(&format!("# TYPE idemctl_expired_backlog_keys gauge\nidemctl_expired_backlog_keys{{database=\"{}\",table=\"public.idempotency_keys\"}} 41\n", db.name()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemctl.prom");
    db.idemctl()
        .args(["stats", "-q", "--textfile"])
        .arg(&path)
        .run()
        .assert_code(0)
        .assert_stdout_empty();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(&format!(
            "idemctl_table_total_bytes{{database=\"{}\",table=\"public.idempotency_keys\"}} ",
            db.name()
        )),
        "{text}"
    );
    assert!(text.ends_with('\n'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_on_a_healthy_table_and_explains_the_optional_index() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            live: 10,
            ..Mix::default()
        },
    )
    .await;
    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(0);
    let optional = fixtures::finding(&run.json(), "in_progress index").clone();
    assert_eq!(optional["status"], "note");
    assert!(
        optional["detail"].as_str().unwrap().contains("HOT"),
        "{optional}"
    );
    assert!(
        optional["fix"]
            .as_str()
            .unwrap()
            .starts_with("CREATE INDEX CONCURRENTLY")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_prints_the_fix_for_a_missing_expiry_index() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Reference,
        Mix {
            live: 10,
            ..Mix::default()
        },
    )
    .await;
    db.exec("DROP INDEX idempotency_keys_expiry").await;
    let run = db.idemctl().args(["check"]).run();
    run.assert_success()
        .assert_stdout_contains("CREATE INDEX CONCURRENTLY \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (expires_at);")
        .assert_stdout_contains("evict walks idempotency_keys_pkey instead");
    // evict walks the primary key in bounded pages, saying once what the index would save; its
    // dry run reads the same pages without changing anything.
    let run = db.idemctl().args(["-o", "json", "evict"]).run();
    run.assert_success().assert_stderr_contains(
        "has no index on expires_at: evict walks idempotency_keys_pkey in pages of 2000 entries",
    );
    assert_eq!(run.json()["walk"]["rows_examined"], 10, "{run}");
    db.idemctl()
        .args(["evict", "--dry-run"])
        .run()
        .assert_success()
        .assert_stdout_contains("would walk        idempotency_keys_pkey (10 index entries in 1 page, to the end of the index; no index on the expiry column)\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_thresholds_page_on_lag_and_stuck_keys() {
    let db = with_known_ages(Schema::Corrected).await;
    db.idemctl()
        .args(["check", "--max-eviction-lag", "9d"])
        .run()
        .assert_code(0);
    let run = db
        .idemctl()
        .args(["check", "--max-eviction-lag", "1h"])
        .run();
    run.assert_code(4).assert_stderr_contains("eviction lag 8d");
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    let run = db.idemctl().args(["check", "--max-stuck", "5"]).run();
    run.assert_code(4)
        .assert_stderr_contains("10 stuck in_progress keys exceed --max-stuck 5");
    db.idemctl()
        .args(["check", "--max-stuck", "10"])
        .run()
        .assert_code(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_missing_privileges_with_the_grant() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            live: 10,
            ..Mix::default()
        },
    )
    .await;
    let role = format!("ro_{}", &db.name()[10..]);
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT ON idempotency_keys TO {role};"
    ))
    .await;
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["check", "-o", "json"])
        .run();
    run.assert_code(0);
    let j = run.json();
    let evict = fixtures::finding(&j, "privileges: evict").clone();
    assert_eq!(evict["status"], "note");
    assert!(
        evict["fix"].as_str().unwrap().contains(&format!(
            "GRANT DELETE ON \"public\".\"idempotency_keys\" TO \"{role}\";"
        )),
        "{evict}"
    );
    // And the read-only role really cannot evict: a clear permission error, nothing deleted.
    db.exec("INSERT INTO idempotency_keys SELECT 'x', 't', 'POST', '/p', '\\x00', 'completed', 201, '{}', NULL, now() - interval '2 days', now() - interval '1 day'").await;
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["evict"])
        .run();
    run.assert_code(6)
        .assert_stderr_contains("permission denied: role")
        .assert_stderr_contains(
            "lacks DELETE, UPDATE (expires_at) on public.idempotency_keys, which evict needs",
        );
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys WHERE key = 'x'").await,
        1
    );
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_notes_are_part_of_the_report_so_cron_stays_quiet_with_q() {
    let db = with_known_ages(Schema::Corrected).await;
    let run = db.idemctl().args(["stats"]).run();
    run.assert_code(0)
        .assert_stderr_empty()
        .assert_stdout_contains("note: stuck in_progress keys not counted");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemctl.prom");
    db.idemctl()
        .args(["stats", "-q", "--textfile"])
        .arg(&path)
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
}

/// Without an index on the expiry column the eviction lag is estimated from the planner's
/// statistics, apart from the measured lag: before any ANALYZE there is nothing to estimate from
/// (unknown, no gauge, never a 0); after it the lowest expiry ANALYZE sampled (on a small table,
/// every row) gives the wait of the oldest expired key, as SQL finds it; once evict has walked the
/// table and it is analyzed again, nothing expired waits and the estimate is 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_expiry_index_the_lag_is_the_planners_estimate() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    db.exec(
        "DROP INDEX idempotency_keys_expiry; \
         ALTER TABLE idempotency_keys SET (autovacuum_enabled = false)",
    )
    .await;
    let rows = fixtures::load_sql(Mix {
        expired: 40,
        live: 60,
        fresh: 5,
        stuck: 0,
        expired_in_progress: 0,
    });
    db.exec(&rows.replace("ANALYZE idempotency_keys;", ""))
        .await;
    let lag_line = |db: &TestDb| {
        let run = db.idemctl().arg("stats").run();
        run.assert_success();
        run.stdout
            .lines()
            .find(|l| l.starts_with("eviction lag "))
            .unwrap_or_else(|| panic!("no lag line: {run}"))
            .to_owned()
    };
    let gauges = |db: &TestDb| {
        let run = db.idemctl().args(["stats", "-o", "prometheus"]).run();
        run.assert_success();
        crate::metrics::promtool_check_metrics(&run.stdout);
        run.stdout
            .lines()
            .filter(|l| l.starts_with("idemctl_eviction_lag_"))
            .map(|l| l.split('{').next().unwrap().to_owned() + " " + l.rsplit(' ').next().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        lag_line(&db),
        "eviction lag              unknown (no index on expiry to find it, and no planner statistics to estimate it from until the table is analyzed)"
    );
    assert_eq!(gauges(&db), ["idemctl_eviction_lag_known 0"]);
    let run = db.idemctl().args(["stats", "-o", "json"]).run();
    run.assert_success();
    assert!(
        !run.stdout.contains("eviction_lag_estimated_seconds"),
        "{run}"
    );

    db.exec("ANALYZE idempotency_keys").await;
    let run = db.idemctl().args(["stats", "-o", "json"]).run();
    run.assert_success();
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
    let j = run.json();
    assert_eq!(j["eviction_lag_seconds"], serde_json::Value::Null, "{run}");
    let estimate = j["eviction_lag_estimated_seconds"].as_f64().unwrap();
    assert!(truth > 86_400.0, "{truth}");
    assert!(
        (truth - 30.0..=truth).contains(&estimate),
        "estimate {estimate}, oldest expiry waits {truth}: {run}"
    );
    let samples = gauges(&db);
    assert_eq!(samples[0], "idemctl_eviction_lag_known 0");
    let gauge: f64 = samples[1]
        .strip_prefix("idemctl_eviction_lag_estimated_seconds ")
        .unwrap_or_else(|| panic!("{samples:?}"))
        .parse()
        .unwrap();
    assert!(
        (truth - 30.0..=truth + 30.0).contains(&gauge),
        "{samples:?}"
    );
    assert_eq!(samples.len(), 2, "{samples:?}");
    assert!(
        lag_line(&db).starts_with("eviction lag              about "),
        "{}",
        lag_line(&db)
    );

    db.idemctl().args(["-q", "evict"]).run().assert_success();
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE expires_at < now()"
        )
        .await,
        0
    );
    db.exec("ANALYZE idempotency_keys").await;
    assert_eq!(
        lag_line(&db),
        "eviction lag              about 0s (estimated: the planner's statistics as of the last analyze, no index on expiry)"
    );
    assert_eq!(
        gauges(&db),
        [
            "idemctl_eviction_lag_known 0",
            "idemctl_eviction_lag_estimated_seconds 0"
        ]
    );
}

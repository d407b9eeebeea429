//! What follows eviction: stats reports the dead-tuple ratio, autovacuum's threshold (the table's own
//! storage parameters over the server's), when autovacuum next vacuums the table and the TTL of
//! recent keys; check warns with an ALTER TABLE that really clears the warning, and --min-ttl
//! alerts when recent keys live shorter than the retry window. Tables without an expiry column
//! report the --ttl every key has.

use std::time::Duration;

use crate::fixtures::{self, Schema, finding};
use crate::profiles;
use crate::support::TestDb;

const INSERT: &str = "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
    request_fingerprint, state, response_status, response_body, locked_at, created_at, expires_at) ";

/// `n` completed keys with a 24 h TTL created over the last day, and `short` keys with a 30 s TTL
/// created in the last 20 s.
async fn day_ttl_table(db: &TestDb, n: i64, short: i64) {
    fixtures::create(db, Schema::Corrected).await;
    db.exec(&format!(
        "{INSERT} SELECT 'day-' || g, 'tenant_' || (g % 7), 'POST', '/v1/payments', \
           sha256(g::text::bytea), 'completed', 201, '{{}}'::jsonb, c, c, c + interval '24 hours' \
           FROM generate_series(1, {n}) AS g, LATERAL (SELECT now() - (g * interval '86000 seconds' / {n}) AS c) t; \
         {INSERT} SELECT 'short-' || g, 'tenant_1', 'POST', '/v1/payments', \
           sha256(g::text::bytea), 'completed', 201, '{{}}'::jsonb, c, c, c + interval '30 seconds' \
           FROM generate_series(1, {short}) AS g, LATERAL (SELECT now() - (g * interval '20 seconds' / {short}) AS c) t; \
         ANALYZE idempotency_keys"
    ))
    .await;
}

/// pg_stat_all_tables' live and dead tuples, once the inserts' and deletes' counts have reached it.
async fn wait_for_counts(db: &TestDb, live_at_least: i64, at_least: i64) -> (i64, i64) {
    let client = db.client().await;
    for _ in 0..600 {
        let r = client
            .query_one(
                "SELECT n_live_tup, n_dead_tup FROM pg_stat_all_tables WHERE relid = 'idempotency_keys'::regclass",
                &[],
            )
            .await
            .unwrap();
        let (live, dead): (i64, i64) = (r.get(0), r.get(1));
        if dead >= at_least && live >= live_at_least {
            return (live, dead);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the dead tuples never showed in pg_stat_all_tables");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_reports_dead_tuples_autovacuum_and_the_ttl_of_recent_keys() {
    let db = TestDb::new().await;
    day_ttl_table(&db, 4000, 100).await;
    // The table's own settings, and thresholds far enough that autovacuum does not run meanwhile:
    // neither for the dead tuples, nor for the load's inserts (which alone call for a vacuum, one
    // that would clear the dead tuples and count reltuples anew), nor to analyze it. A vacuum
    // already under way is ended by the ALTER's lock, held through the DELETE.
    db.exec(
        "ALTER TABLE idempotency_keys SET (autovacuum_vacuum_scale_factor = 0.05, \
         autovacuum_vacuum_threshold = 1000000, autovacuum_vacuum_insert_threshold = 1000000, \
         autovacuum_analyze_threshold = 1000000); \
         DELETE FROM idempotency_keys WHERE key IN (SELECT 'day-' || g FROM generate_series(1, 400) g)",
    )
    .await;
    let (live, dead) = wait_for_counts(&db, 3700, 400).await;
    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("stats.prom");
    let run = db
        .idemctl()
        .args(["stats", "-o", "json", "--textfile"])
        .arg(&prom)
        .run_async()
        .await;
    run.assert_success();
    let j = run.json();
    let m = &j["maintenance"];
    let ratio = m["dead_tuple_ratio"].as_f64().unwrap();
    let want = dead as f64 / (live + dead) as f64;
    assert!((ratio - want).abs() < 1e-9, "{ratio} vs {want}\n{run}");
    let rel = &m["relations"][0];
    assert_eq!(rel["relation"], "public.idempotency_keys", "{run}");
    assert_eq!(rel["scale_factor"], 0.05, "{run}");
    assert_eq!(rel["base_threshold"], 1_000_000, "{run}");
    assert_eq!(rel["own_settings"], true, "{run}");
    assert_eq!(rel["enabled"], true, "{run}");
    let reltuples = rel["reltuples"].as_f64().unwrap();
    assert_eq!(reltuples, 4100.0, "{run}");
    let threshold = rel["threshold"].as_f64().unwrap();
    assert_eq!(threshold, 1_000_000.0 + 0.05 * reltuples, "{run}");

    // The TTL sample: the 100 short-lived keys expire first, so they are in it; the newest
    // day-long keys expire last.
    let ttl = &j["recent_ttl"];
    assert_eq!(ttl["source"], "sample", "{run}");
    assert_eq!(ttl["keys"], 1000, "{run}");
    assert_eq!(ttl["min_seconds"], 30.0, "{run}");
    assert_eq!(ttl["max_seconds"], 86400.0, "{run}");
    assert_eq!(ttl["p50_seconds"], 86400.0, "{run}");
    assert!(ttl["p10_seconds"].as_f64().unwrap() < 86400.0, "{run}");

    // When autovacuum comes: (threshold − dead) at reltuples ÷ median TTL rows a second.
    let turnover = m["turnover_rows_per_second"].as_f64().unwrap();
    assert!((turnover - reltuples / 86400.0).abs() < 1e-9, "{run}");
    let next = m["next_autovacuum_seconds"].as_f64().unwrap();
    let expected = (threshold - dead as f64) / turnover;
    assert!((next - expected).abs() < 1.0, "{next} vs {expected}\n{run}");
    assert_eq!(m["next_autovacuum_relation"], "public.idempotency_keys");

    let text = std::fs::read_to_string(&prom).unwrap();
    for series in [
        "idemctl_table_dead_tuple_ratio{",
        "idemctl_autovacuum_enabled{",
        "idemctl_autovacuum_threshold_dead_tuples{",
        "idemctl_autovacuum_next_seconds{",
        "idemctl_recent_ttl_median_seconds{",
        "idemctl_recent_ttl_max_seconds{",
    ] {
        assert!(text.contains(series), "{series} missing:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("idemctl_recent_ttl_min_seconds{") && l.ends_with(" 30")),
        "{text}"
    );

    let run = db
        .idemctl()
        .args(["stats", "-o", "plain"])
        .run_async()
        .await;
    run.assert_success()
        .assert_stdout_contains("the table's own settings")
        .assert_stdout_contains("min 30s");

    // Autovacuum off for the table: never, and check says how to turn it on.
    db.exec("ALTER TABLE idempotency_keys SET (autovacuum_enabled = off)")
        .await;
    let run = db.idemctl().args(["stats", "-o", "json"]).run_async().await;
    let m = &run.json()["maintenance"];
    assert_eq!(m["autovacuum_enabled"], false, "{run}");
    assert_eq!(
        m["next_autovacuum_seconds"],
        serde_json::Value::Null,
        "{run}"
    );
    let run = db.idemctl().args(["check", "-o", "json"]).run_async().await;
    let f = finding(&run.json(), "autovacuum").clone();
    assert_eq!(f["status"], "warn", "{run}");
    assert_eq!(
        f["fix"], "ALTER TABLE public.idempotency_keys SET (autovacuum_enabled = on);",
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_warns_when_autovacuum_lags_eviction_and_its_alter_table_fixes_it() {
    let db = TestDb::new().await;
    day_ttl_table(&db, 20_000, 0).await;
    // Server defaults (scale factor 0.2): a day's TTL turns over 20,000 rows a day, so autovacuum
    // comes about every 4.8 hours, while evict runs every 5 minutes.
    let run = db.idemctl().args(["check", "-o", "json"]).run_async().await;
    let j = run.json();
    let f = finding(&j, "autovacuum");
    assert_eq!(f["status"], "warn", "{run}");
    let detail = f["detail"].as_str().unwrap();
    assert!(detail.contains("about 4h 51m"), "{detail}");
    let fix = f["fix"].as_str().unwrap().to_owned();
    assert!(
        fix.starts_with(
            "ALTER TABLE public.idempotency_keys SET (autovacuum_vacuum_scale_factor = "
        ),
        "{run}"
    );
    // A warning, not a failure.
    assert_eq!(run.code, 0, "{run}");
    db.exec(&fix).await;
    let run = db.idemctl().args(["check", "-o", "json"]).run_async().await;
    let f = finding(&run.json(), "autovacuum").clone();
    assert_eq!(f["status"], "ok", "{fix}\n{run}");
    // A slower eviction schedule tolerates the server's defaults.
    db.exec("ALTER TABLE idempotency_keys RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold)")
        .await;
    let run = db
        .idemctl()
        .args(["check", "-o", "json", "--evict-interval", "1h"])
        .run_async()
        .await;
    assert_eq!(finding(&run.json(), "autovacuum")["status"], "ok", "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_min_ttl_alerts_when_recent_keys_live_shorter_than_the_retry_window() {
    let db = TestDb::new().await;
    day_ttl_table(&db, 2000, 100).await;
    let run = db
        .idemctl()
        .args(["check", "-o", "json", "--min-ttl", "1m"])
        .run_async()
        .await;
    run.assert_code(4);
    let f = finding(&run.json(), "recent TTL").clone();
    assert_eq!(f["status"], "breached", "{run}");
    let detail = f["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("100 of 1000 recent keys sampled live less than --min-ttl 1m"),
        "{run}"
    );
    run.assert_stderr_contains("recent TTL");
    let run = db
        .idemctl()
        .args(["check", "-o", "json", "--min-ttl", "20s"])
        .run_async()
        .await;
    assert_eq!(finding(&run.json(), "recent TTL")["status"], "ok", "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_an_expiry_column_reports_the_ttl_it_was_given() {
    let db = TestDb::new().await;
    db.exec(profiles::EXPLAINER_DDL).await;
    db.exec(profiles::EXPLAINER_INDEXES).await;
    db.exec(&profiles::explainer_rows(50)).await;
    let run = db
        .idemctl()
        .args(["stats", "-o", "json", "--ttl", "24h"])
        .run_async()
        .await;
    run.assert_success();
    let ttl = &run.json()["recent_ttl"];
    assert_eq!(ttl["source"], "ttl", "{run}");
    assert_eq!(ttl["min_seconds"], 86400.0, "{run}");
    let run = db
        .idemctl()
        .args(["check", "-o", "json", "--ttl", "30s", "--min-ttl", "1m"])
        .run_async()
        .await;
    run.assert_code(4);
    let f = finding(&run.json(), "recent TTL").clone();
    assert_eq!(f["status"], "breached", "{run}");
    assert!(
        f["detail"]
            .as_str()
            .unwrap()
            .starts_with("keys live 30s (--ttl)"),
        "{run}"
    );
}

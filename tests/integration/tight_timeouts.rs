//! A tight statement_timeout: batches that exceed it are made smaller and done again, and only a
//! batch of one row that still exceeds it ends the run, in one line naming the setting. A
//! role-level statement_timeout does not apply to idemctl's sessions (its --statement-timeout
//! does), so it neither ends nor slows a run.

use crate::fixtures::{self, Mix, Schema};
use crate::support::TestDb;

/// Every deleted row costs `ms` of server time (a trigger), so batches take as long as the test
/// needs.
async fn slow_deletes(db: &TestDb, expired: i64, ms: u32) {
    let mix = Mix {
        expired,
        live: 20,
        ..Mix::default()
    };
    fixtures::table_with(db, Schema::Corrected, mix).await;
    db.exec(&format!(
        "CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep({}); RETURN OLD; END $$; \
         CREATE TRIGGER slow_delete BEFORE DELETE ON idempotency_keys \
         FOR EACH ROW EXECUTE FUNCTION slow_delete();",
        f64::from(ms) / 1000.0
    ))
    .await;
}

const EXPIRED: &str =
    "SELECT count(*) FROM idempotency_keys WHERE state = 'completed' AND expires_at < now()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_that_exceed_statement_timeout_shrink_and_the_run_drains() {
    let db = TestDb::new().await;
    slow_deletes(&db, 200, 2).await;
    let run = db
        .idemctl()
        .args([
            "--statement-timeout",
            "50ms",
            "--lock-timeout",
            "1ms",
            "evict",
            "--catch-up",
            "--batch-size",
            "100",
            "-o",
            "json",
        ])
        .run_async()
        .await;
    run.assert_code(0).assert_stderr_empty();
    assert_eq!(run.json()["rows_evicted"], 200, "{run}");
    assert_eq!(fixtures::scalar_i64(&db, EXPIRED).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_alone_exceeds_statement_timeout_ends_the_run_in_one_line() {
    let db = TestDb::new().await;
    slow_deletes(&db, 20, 200).await;
    let run = db
        .idemctl()
        .args(["--statement-timeout", "50ms", "evict", "--batch-size", "8"])
        .run_async()
        .await;
    run.assert_code(1);
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    assert!(
        run.stderr.contains(
            "a batch of one row exceeded statement_timeout (50ms, set by --statement-timeout) \
             after the batches were made smaller; nothing of it was deleted: raise \
             --statement-timeout"
        ),
        "{run}"
    );
    assert_eq!(fixtures::scalar_i64(&db, EXPIRED).await, 20, "no row lost");
    db.exec("DROP TRIGGER slow_delete ON idempotency_keys")
        .await;
    db.idemctl()
        .args(["evict", "-q"])
        .run_async()
        .await
        .assert_code(0);
    assert_eq!(fixtures::scalar_i64(&db, EXPIRED).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_level_statement_timeout_does_not_end_the_run() {
    let db = TestDb::new().await;
    slow_deletes(&db, 100, 1).await;
    db.exec(&format!(
        "CREATE ROLE tight_evictor LOGIN; GRANT pg_monitor TO tight_evictor; GRANT SELECT, UPDATE, DELETE ON idempotency_keys TO \
         tight_evictor; ALTER ROLE tight_evictor IN DATABASE {} SET statement_timeout = '5ms'",
        crate::support::ident(db.name())
    ))
    .await;
    let run = db
        .idemctl()
        .env(
            "IDEMCTL_DATABASE_URL",
            db.url_with(&[("user", "tight_evictor")]),
        )
        .args(["evict", "--batch-size", "50", "-o", "json"])
        .run_async()
        .await;
    run.assert_code(0).assert_stderr_empty();
    assert_eq!(run.json()["rows_evicted"], 100, "{run}");
    db.exec("DROP OWNED BY tight_evictor; DROP ROLE tight_evictor")
        .await;
}

/// Stuck keys whose delete costs `ms` of server time each (a trigger).
async fn slow_reclaims(stuck: i64, ms: u32) -> TestDb {
    let db = crate::support::stuck::db_with_stuck(stuck, 10).await;
    db.exec(&format!(
        "CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep({}); RETURN OLD; END $$; \
         CREATE TRIGGER slow_delete BEFORE DELETE ON idempotency_keys \
         FOR EACH ROW EXECUTE FUNCTION slow_delete();",
        f64::from(ms) / 1000.0
    ))
    .await;
    db
}

async fn stuck_left(db: &TestDb) -> usize {
    crate::support::stuck::stuck_keys(db).await.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_batches_that_exceed_statement_timeout_shrink_and_the_sweep_drains() {
    let db = slow_reclaims(200, 2).await;
    let run = db
        .idemctl()
        .args([
            "--statement-timeout",
            "50ms",
            "reclaim",
            "--yes",
            "--action",
            "delete",
            "--batch-size",
            "100",
            "-o",
            "json",
        ])
        .run_async()
        .await;
    run.assert_code(0).assert_stderr_empty();
    let report = run.json();
    assert_eq!(report["rows_reclaimed"], 200, "{run}");
    // 100 rows cost 200 ms, over the 50 ms: the batches were made smaller.
    assert!(report["batches"].as_u64().unwrap() > 4, "{run}");
    assert_eq!(stuck_left(&db).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_apply_batches_that_exceed_statement_timeout_shrink_and_the_plan_is_applied() {
    let db = slow_reclaims(200, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--action", "delete", "--plan"])
        .arg(&plan)
        .run_async()
        .await
        .assert_code(0);
    let run = db
        .idemctl()
        .args([
            "--statement-timeout",
            "50ms",
            "reclaim",
            "--yes",
            "--batch-size",
            "100",
            "-o",
            "json",
            "--apply",
        ])
        .arg(&plan)
        .run_async()
        .await;
    run.assert_code(0).assert_stderr_empty();
    let report = run.json();
    assert_eq!(report["rows_reclaimed"], 200, "{run}");
    assert_eq!(report["left_alone"], serde_json::json!([]), "{run}");
    assert!(report["batches"].as_u64().unwrap() > 4, "{run}");
    assert_eq!(stuck_left(&db).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_alone_exceeds_statement_timeout_ends_reclaim_in_one_line() {
    let db = slow_reclaims(20, 200).await;
    let run = db
        .idemctl()
        .args([
            "--statement-timeout",
            "50ms",
            "reclaim",
            "--yes",
            "--action",
            "delete",
            "--batch-size",
            "8",
        ])
        .run_async()
        .await;
    run.assert_error(
        1,
        "a batch of one key exceeded statement_timeout (50ms, set by --statement-timeout) after \
         the batches were made smaller; nothing of it was reclaimed (0 keys were reclaimed by \
         earlier batches): raise --statement-timeout: canceling statement due to statement \
         timeout",
    );
    assert_eq!(stuck_left(&db).await, 20, "no key lost");
    db.exec("DROP TRIGGER slow_delete ON idempotency_keys")
        .await;
    db.idemctl()
        .args(["reclaim", "--yes", "-q", "--action", "delete"])
        .run_async()
        .await
        .assert_code(0);
    assert_eq!(stuck_left(&db).await, 0);
}

//! A tight statement_timeout: batches that exceed it are made smaller and done again, and only a
//! batch of one row that still exceeds it ends the run, in one line naming the setting and what
//! set it. Without --statement-timeout, a role- or database-level statement_timeout shorter than
//! idemctl's default is kept on its sessions (and the client's deadline follows it); the flag,
//! given, holds over it.

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

/// A role `role` (roles are the cluster's: each test has its own) whose statement_timeout, in
/// this database, is `timeout`.
async fn role_with_statement_timeout(db: &TestDb, role: &str, timeout: &str) -> String {
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT pg_monitor TO {role}; GRANT SELECT, UPDATE, DELETE ON \
         idempotency_keys TO {role}; ALTER ROLE {role} IN DATABASE {} SET statement_timeout = \
         '{timeout}'",
        crate::support::ident(db.name())
    ))
    .await;
    db.url_with(&[("user", role)])
}

/// A role-level statement_timeout shorter than idemctl's default applies to its sessions:
/// batches that exceed it shrink and the run drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_role_level_statement_timeout_shrinks_the_batches_and_the_run_drains() {
    let db = TestDb::new().await;
    slow_deletes(&db, 60, 20).await;
    let url = role_with_statement_timeout(&db, "tight_evictor", "500ms").await;
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", url)
        .args(["evict", "--batch-size", "50", "-o", "json"])
        .run_async()
        .await;
    run.assert_code(0).assert_stderr_empty();
    assert_eq!(run.json()["rows_evicted"], 60, "{run}");
    assert_eq!(fixtures::scalar_i64(&db, EXPIRED).await, 0);
    db.exec("DROP OWNED BY tight_evictor; DROP ROLE tight_evictor")
        .await;
}

/// Without --statement-timeout, the role's shorter statement_timeout is the one in force, and the
/// line that ends the run names it and where it was set; --statement-timeout given wins over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_role_level_statement_timeout_is_kept_and_named_unless_the_flag_is_given() {
    let db = TestDb::new().await;
    slow_deletes(&db, 3, 1000).await;
    let url = role_with_statement_timeout(&db, "tight_evictor_named", "500ms").await;
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["evict", "--batch-size", "2"])
        .run_async()
        .await;
    run.assert_error(
        1,
        "a batch of one row exceeded statement_timeout (500ms, set by ALTER ROLE ... IN DATABASE \
         ... SET statement_timeout) after the batches were made smaller; nothing of it was \
         deleted: raise --statement-timeout: canceling statement due to statement timeout",
    );
    assert_eq!(fixtures::scalar_i64(&db, EXPIRED).await, 3, "no row lost");
    // The flag, given, holds over the role's setting: rows of 1 s each are deleted.
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args([
            "--statement-timeout",
            "5s",
            "evict",
            "--batch-size",
            "2",
            "-o",
            "json",
        ])
        .run_async()
        .await;
    run.assert_code(0).assert_stderr_empty();
    assert_eq!(run.json()["rows_evicted"], 3, "{run}");
    db.exec("DROP OWNED BY tight_evictor_named; DROP ROLE tight_evictor_named")
        .await;
}

/// The client's deadline follows the statement_timeout kept: with the role's 1 s, a statement whose
/// answer a dead path swallows is given up 11 s after it began (not 40 s, the default's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_follows_a_shorter_role_level_statement_timeout() {
    use crate::support::blackhole::BlackHole;
    use std::time::{Duration, Instant};
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, Mix::default()).await;
    let url = role_with_statement_timeout(&db, "tight_reader", "1s").await;
    let port: u16 = crate::support::pg::server()
        .admin
        .get("port")
        .and_then(|p| p.parse().ok())
        .expect("the server's port");
    let proxy = BlackHole::to_socket_dir(&db.socket_dir().expect("a local server"), port);
    // stats waits on a lock the test holds; the path dies while it waits.
    let holder = db.client().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let child = crate::support::Cmd::new()
        .env(
            "IDEMCTL_DATABASE_URL",
            format!("{url} host=127.0.0.1 port={}", proxy.port()),
        )
        .args(["--lock-timeout", "60s", "stats"])
        .timeout(Duration::from_secs(120))
        .spawn();
    let watcher = db.client().await;
    let waiting = "SELECT count(*) > 0 FROM pg_stat_activity WHERE usename = 'tight_reader' \
                   AND wait_event_type = 'Lock'";
    let started = Instant::now();
    while !watcher
        .query_one(waiting, &[])
        .await
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "stats never waited"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.cut();
    let run = child.wait_async().await;
    holder.batch_execute("COMMIT").await.unwrap();
    run.assert_code(1);
    assert!(
        run.stderr.contains(
            "no answer from the server within 11s (statement_timeout plus 10s); the connection \
             was given up"
        ),
        "{run}"
    );
    db.exec("DROP OWNED BY tight_reader; DROP ROLE tight_reader")
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

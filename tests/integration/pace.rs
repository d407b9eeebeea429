//! evict's default pace: unpaced while no other session is active, backing off with a reason
//! when other sessions' statements start waiting, the fixed 20 % duty cycle (said once) for a
//! role that cannot see other sessions, and flags that fix the pace.

use std::time::Duration;

use crate::fixtures::{self, Mix, Schema};
use crate::support::cluster::PrivateCluster;
use crate::support::{Cmd, TestDb, ident};

const BACKLOG: Mix = Mix {
    expired: 20_000,
    live: 100,
    fresh: 0,
    stuck: 0,
    expired_in_progress: 0,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_runs_unpaced_while_no_other_session_is_active() {
    // The harness's cluster is shared by every test of the process, so no session there is ever
    // alone: this one has a cluster of its own.
    let server = PrivateCluster::start().await;
    let client = server.client().await;
    client.batch_execute(Schema::Corrected.ddl()).await.unwrap();
    client
        .batch_execute(&fixtures::expired_rows_sql(100_000))
        .await
        .unwrap();
    drop(client);

    let run = server
        .idemctl()
        .args(["evict", "-o", "json"])
        .timeout(Duration::from_secs(120))
        .run_async()
        .await;
    run.assert_success().assert_stderr_empty();
    let j = run.json();
    assert_eq!(j["rows_evicted"], 100_000, "{run}");
    let pace = &j["pace"];
    assert_eq!(pace["mode"], "adaptive", "{run}");
    assert!(pace["full_seconds"].as_f64().unwrap() > 0.0, "{run}");
    assert_eq!(pace["backoff_seconds"], 0.0, "{run}");
    assert_eq!(pace["backoffs_by_reason"], serde_json::json!({}), "{run}");

    // Small batches, so the run outlasts the insert-rate window: the table gains nothing and
    // nothing else runs, so the ceiling (20x the inserts) does not apply and the run never rests.
    client_reload(&server, 200_000).await;
    let run = server
        .idemctl()
        .args(["evict", "-o", "json", "--batch-size", "20"])
        .timeout(Duration::from_secs(120))
        .run_async()
        .await;
    run.assert_success();
    let j = run.json();
    assert_eq!(j["rows_evicted"], 200_000, "{run}");
    let pace = &j["pace"];
    // Measured (the run outlasted the window): nothing inserted.
    assert_eq!(pace["insert_rate"], 0.0, "{run}");
    assert_eq!(pace["ceiling_added_seconds"], 0.0, "{run}");
    assert!(
        pace["paced_seconds"].as_f64().unwrap() < 0.5,
        "rested while alone: {run}"
    );
}

async fn client_reload(server: &PrivateCluster, rows: i64) {
    server
        .client()
        .await
        .batch_execute(&fixtures::expired_rows_sql(rows))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_backs_off_when_other_sessions_start_waiting_and_says_why() {
    let db = TestDb::new().await;
    let backlog = Mix {
        expired: 60_000,
        ..BACKLOG
    };
    fixtures::table_with(&db, Schema::Corrected, backlog).await;
    db.exec("CREATE TABLE busy (id int PRIMARY KEY); INSERT INTO busy VALUES (1)")
        .await;
    // A foreground session runs a statement throughout (it is never idle)...
    let runner = db.client().await;
    let running = tokio::spawn(async move {
        runner
            .batch_execute("SELECT pg_sleep(30)")
            .await
            .map_err(|e| e.to_string())
    });
    // ... and, once evict has measured it, three more start waiting on a row lock.
    let run = evict_while_sessions_start_waiting(&db, "4s").await;
    running.abort();
    run.assert_success();
    let pace = &run.json()["pace"];
    assert_eq!(pace["mode"], "adaptive", "{run}");
    assert_eq!(pace["full_seconds"], 0.0, "{run}");
    let reasons = pace["backoffs_by_reason"].as_object().unwrap();
    assert!(!reasons.is_empty(), "{run}");
    for reason in reasons.keys() {
        assert!(
            ["foreground_waiting", "foreground_slower", "batches_slower"]
                .contains(&reason.as_str()),
            "{run}"
        );
    }
    assert!(pace["backoff_seconds"].as_f64().unwrap() > 0.0, "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_cannot_see_other_sessions_keeps_the_fixed_duty_cycle_and_says_so_once() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, BACKLOG).await;
    let role = format!("{}_blind", db.name());
    db.exec(&format!(
        "CREATE ROLE {r} LOGIN; GRANT USAGE ON SCHEMA public TO {r}; \
         GRANT SELECT, DELETE, UPDATE (expires_at) ON idempotency_keys TO {r}",
        r = ident(&role)
    ))
    .await;
    let run = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["evict", "-o", "json"])
        .timeout(Duration::from_secs(120))
        .run_async()
        .await;
    run.assert_success();
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{run}");
    assert!(
        lines[0].contains("fixed 20% duty cycle") && lines[0].contains("pg_monitor"),
        "{run}"
    );
    let j = run.json();
    assert_eq!(j["rows_evicted"], 20_000, "{run}");
    assert_eq!(j["pace"]["mode"], "fixed", "{run}");
    assert_eq!(j["pace"]["duty_cycle"], 20, "{run}");
    run.assert_stderr(&format!(
        "idemctl: warning: evict paces itself at the fixed 20% duty cycle: role {role} cannot see \
         other sessions' activity (grant it pg_monitor); --duty-cycle 20 keeps this pace without \
         the warning
"
    ));
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["evict", "--max-replica-lag", "10s"])
        .run_async()
        .await
        .assert_error(
            6,
            &format!(
                "permission denied: --max-replica-lag reads the replicas' replay positions from \
                 pg_stat_replication, which role {role} cannot see (it needs the privileges of \
                 pg_read_all_stats); grant them with: GRANT pg_monitor TO \"{role}\";"
            ),
        );
    db.exec(&format!(
        "DROP OWNED BY {r}; DROP ROLE {r}",
        r = ident(&role)
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duty_cycle_catch_up_and_pause_fix_the_pace() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, BACKLOG).await;
    for (args, duty) in [
        (&["--duty-cycle", "50"][..], 50),
        (&["--catch-up"][..], 100),
        (&["--pause", "0s"][..], 20),
        (&["--pause", "1ms", "--duty-cycle", "30"][..], 30),
    ] {
        let run = db
            .idemctl()
            .args(["evict", "-o", "json", "--max-batches", "3"])
            .args(args)
            .run_async()
            .await;
        run.assert_success().assert_stderr_empty();
        let pace = &run.json()["pace"];
        assert_eq!(pace["mode"], "fixed", "{args:?}: {run}");
        assert_eq!(pace["duty_cycle"], duty, "{args:?}: {run}");
        assert_eq!(pace["fallback"], serde_json::Value::Null, "{args:?}: {run}");
    }
}

/// However far the foreground makes evict back off, its rests are cut so that it keeps removing
/// keys at least ten times as fast as the table gains them, and it reports the insert rate it
/// measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backed_off_evict_still_outpaces_the_tables_inserts() {
    let db = TestDb::new().await;
    let backlog = Mix {
        expired: 60_000,
        ..BACKLOG
    };
    fixtures::table_with(&db, Schema::Corrected, backlog).await;
    db.exec("CREATE TABLE busy (id int PRIMARY KEY); INSERT INTO busy VALUES (1)")
        .await;
    // The API keeps adding keys, 20 every 100 ms...
    let (stop, inserting) = insert_steadily(&db).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // ... while sessions start waiting on a row lock, so the pace backs off.
    let run = evict_while_sessions_start_waiting(&db, "6s").await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let inserted_per_s = inserting.await.unwrap();
    run.assert_success();
    let pace = &run.json()["pace"];
    assert_eq!(pace["mode"], "adaptive", "{run}");
    assert!(pace["backoff_seconds"].as_f64().unwrap() > 0.0, "{run}");
    let measured = pace["insert_rate"].as_f64().unwrap_or(0.0);
    assert!(
        measured > inserted_per_s / 2.0 && measured < inserted_per_s * 2.0,
        "evict measured {measured:.0} inserts/s, the API made {inserted_per_s:.0}/s: {run}"
    );
    assert!(
        pace["floor_cut_seconds"].as_f64().unwrap() > 0.0,
        "the floor never cut a rest: {run}"
    );
    assert_eq!(
        pace["signals"],
        serde_json::json!([
            "pg_stat_activity: other sessions' activity, waits and statement age",
            "evict's own batch time per row",
            "every 200 ms",
            "the table's inserted-row counter: removal kept at >= 10x its rate, <= 20x while others are active",
        ]),
        "{run}"
    );
}

/// 20 new keys every 100 ms on a session of its own, until the flag is set.
async fn insert_steadily(
    db: &TestDb,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<f64>,
) {
    crate::support::inserts::insert_steadily(
        db.client().await,
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, locked_at, expires_at) \
         SELECT gen_random_uuid()::text, 'tenant-new', 'POST', '/v1/charges', \
         '\\x00', 'in_progress', now(), now() + interval '1 day' \
         FROM generate_series(1, 20)",
        20,
    )
}

/// While other sessions are active, the adaptive pace removes keys at most about 20 times as fast
/// as the table gains them (or, where batches are very fast, what a 2 % duty cycle removes),
/// however much backlog there is: it lengthens its rests for that and says so. The rate is read from the expired backlog between 2.5 s and 6 s into the run (the
/// first second runs before the insert rate is known).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_an_active_api_evict_removes_at_most_twenty_times_the_inserts() {
    let db = TestDb::new().await;
    let backlog = Mix {
        expired: 150_000,
        ..BACKLOG
    };
    fixtures::table_with(&db, Schema::Corrected, backlog).await;
    let (stop, inserting) = insert_steadily(&db).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counter = db.client().await;
    let expired = || async {
        let row = counter
            .query_one(
                "SELECT count(*) FROM idempotency_keys WHERE expires_at < now()",
                &[],
            )
            .await
            .unwrap();
        (std::time::Instant::now(), row.get::<_, i64>(0))
    };
    let evicting = db
        .idemctl()
        .args(["evict", "-o", "json", "--max-runtime", "7s"])
        .run_async();
    let watching = async {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let (t0, n0) = expired().await;
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let (t1, n1) = expired().await;
        (n0 - n1) as f64 / t1.duration_since(t0).as_secs_f64()
    };
    let (run, removal) = tokio::join!(evicting, watching);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let inserted_per_s = inserting.await.unwrap();
    run.assert_success();
    let doc = run.json();
    let pace = &doc["pace"];
    assert_eq!(pace["mode"], "adaptive", "{run}");
    assert_ne!(doc["end_reason"], "drained", "the backlog ran out: {run}");
    assert!(
        pace["ceiling_added_seconds"].as_f64().unwrap() > 0.0,
        "the ceiling never lengthened a rest: {run}"
    );
    // The ceiling never rests the worker below a 2 % duty cycle: where batches are so fast that
    // 2 % of the time removes more than 20 times the inserts, that rate is the bound (still a
    // fifth to a tenth of what the 10-20 % duty cycle alone would remove).
    let batch_seconds = doc["batch_ms_p50"].as_f64().unwrap() / 1000.0;
    let batch_rows = doc["batch_rows_p50"].as_f64().unwrap();
    let at_min_duty = batch_rows / (batch_seconds / 0.02);
    let ceiling = (20.0 * inserted_per_s).max(at_min_duty);
    assert!(
        removal < 1.5 * ceiling,
        "removed {removal:.0} rows/s beside {inserted_per_s:.0} inserts/s \
         (ceiling {ceiling:.0} rows/s): {run}"
    );
    assert!(
        removal > 0.5 * 10.0 * inserted_per_s,
        "removed {removal:.0} rows/s beside {inserted_per_s:.0} inserts/s: {run}"
    );
}

/// Run `evict -o json --max-runtime RUNTIME --batch-size 10` while a session holds the one row of
/// table `busy`; once evict has measured the foreground (a second after its first batch deleted
/// keys, however long it took to get there), three more sessions start waiting on that row, so
/// the pace has a reason to back off. Every session is released after.
async fn evict_while_sessions_start_waiting(db: &TestDb, runtime: &str) -> crate::support::Run {
    let holder = db.client().await;
    holder
        .batch_execute("BEGIN; SELECT * FROM busy FOR UPDATE")
        .await
        .unwrap();
    let counter = db.client().await;
    let expired = async || -> i64 {
        counter
            .query_one(
                "SELECT count(*) FROM idempotency_keys WHERE expires_at < now()",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    };
    let backlog = expired().await;
    let mut evict = db
        .idemctl()
        .args(["evict", "-o", "json", "--max-runtime", runtime])
        .args(["--batch-size", "10"])
        .timeout(Duration::from_secs(60))
        .spawn();
    let started = std::time::Instant::now();
    while expired().await >= backlog && !evict.has_exited() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "evict deleted no key"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let c = db.client().await;
        waiters.push(tokio::spawn(async move {
            let _ = c.batch_execute("SELECT * FROM busy FOR UPDATE").await;
        }));
    }
    let run = evict.wait_async().await;
    holder.batch_execute("COMMIT").await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    run
}

//! `idemctl evict`: exactly the expired completed rows go, live requests are never waited on, one
//! run per table, budgets, dry run, signals, and a server that goes away.

use std::time::{Duration, Instant};

use crate::fixtures::{self, Mix, Schema, evictable, scalar_i64, snapshot};
use crate::support::TestDb;

const MIX: Mix = Mix {
    expired: 3000,
    live: 800,
    fresh: 50,
    stuck: 40,
    expired_in_progress: 30,
};

async fn evicts_exactly_the_expired_completed_rows(schema: Schema, args: &[&str]) {
    let db = TestDb::new().await;
    fixtures::table_with(&db, schema, MIX).await;
    let before = snapshot(&db).await;

    let run = db.idemctl().arg("evict").args(args).run();
    // Under cron (no terminal) a successful run is silent.
    run.assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();

    let after = snapshot(&db).await;
    let expected: Vec<_> = before.iter().filter(|(_, s)| !evictable(s)).collect();
    assert_eq!(after.len(), expected.len(), "rows left after evict");
    for (k, seen) in expected {
        assert_eq!(after.get(k), Some(seen), "row {k:?} was deleted or changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_deletes_exactly_expired_completed_rows_on_the_corrected_table() {
    evicts_exactly_the_expired_completed_rows(Schema::Corrected, &["--batch-size", "700"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_deletes_exactly_expired_completed_rows_on_the_reference_table() {
    evicts_exactly_the_expired_completed_rows(Schema::Reference, &["--batch-size", "700"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_with_parallel_jobs_deletes_exactly_the_same_rows() {
    let args = ["--batch-size", "100", "--jobs", "3", "--duty-cycle", "100"];
    evicts_exactly_the_expired_completed_rows(Schema::Reference, &args).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_json_summary_reports_counts_and_leftover_in_progress() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, MIX).await;
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--batch-size", "1000"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], 3000);
    assert_eq!(j["end_reason"], "drained");
    assert_eq!(j["expired_in_progress_left"]["count"], 30);
    assert_eq!(j["backlog_left"]["count"], 0);
    assert_eq!(j["skipped_locked"], 0);
    assert!(j["batches"].as_u64().unwrap() >= 3, "{j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_skips_rows_locked_by_live_requests() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Reference,
        Mix {
            expired: 2000,
            live: 100,
            ..Mix::default()
        },
    )
    .await;
    let live = db.client().await;
    let row = live
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys WHERE expires_at < now() \
             ORDER BY expires_at OFFSET 500 LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (tenant, key): (String, String) = (row.get(0), row.get(1));
    // A retry of that expired key holds its row, as the API's SELECT ... FOR UPDATE does.
    live.batch_execute("BEGIN").await.unwrap();
    live.execute(
        "SELECT 1 FROM idempotency_keys WHERE api_key_id = $1 AND key = $2 FOR UPDATE",
        &[&tenant, &key],
    )
    .await
    .unwrap();

    let started = Instant::now();
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--batch-size", "300"])
        .run_async()
        .await;
    let took = started.elapsed();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], 1999, "{j}");
    assert_eq!(j["skipped_locked"], 1, "{j}");
    assert!(j["lock_fallbacks"].as_u64().unwrap() >= 1, "{j}");
    assert!(
        took < Duration::from_secs(20),
        "evict took {took:?} next to a held row"
    );

    live.batch_execute("COMMIT").await.unwrap();
    let still: i64 = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE api_key_id = $1 AND key = $2",
            &[&tenant, &key],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(still, 1, "the held row must survive this run");
    // The next run takes it.
    db.idemctl().args(["evict"]).run().assert_code(0);
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE expires_at < now()"
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_exits_with_lock_busy_when_another_run_holds_the_table() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 100,
            ..Mix::default()
        },
    )
    .await;
    let other = db.client().await;
    other
        .batch_execute(
            "SET application_name = 'other-evict'; \
             SELECT pg_advisory_lock(31377153, 'idempotency_keys'::regclass::oid::int)",
        )
        .await
        .unwrap();
    let run = db.idemctl().args(["evict"]).run();
    run.assert_code(7)
        .assert_stdout_empty()
        .assert_stderr_contains("another evict run holds the lock")
        .assert_stderr_contains("other-evict");
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        100
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_evicts_started_together_never_both_work() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 20_000,
            live: 10,
            ..Mix::default()
        },
    )
    .await;
    let a = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--batch-size",
            "500",
            "--pause",
            "5ms",
        ])
        .spawn();
    let b = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--batch-size",
            "500",
            "--pause",
            "5ms",
        ])
        .spawn();
    let (ra, rb) = (a.wait_async().await, b.wait_async().await);
    let codes = [ra.code, rb.code];
    assert!(codes.contains(&0), "{ra}\n{rb}");
    let evicted: u64 = [&ra, &rb]
        .iter()
        .filter(|r| r.code == 0)
        .map(|r| r.json()["rows_evicted"].as_u64().unwrap())
        .sum();
    assert_eq!(evicted, 20_000, "every expired row deleted exactly once");
    for r in [&ra, &rb] {
        assert!(r.code == 0 || r.code == 7, "{r}");
    }
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        10
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_honours_row_and_batch_budgets() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 1000,
            ..Mix::default()
        },
    )
    .await;
    let j = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--batch-size",
            "100",
            "--max-batches",
            "2",
        ])
        .run();
    j.assert_code(0);
    let j = j.json();
    assert_eq!(
        (j["rows_evicted"].as_u64(), j["batches"].as_u64()),
        (Some(200), Some(2))
    );
    assert_eq!(j["end_reason"], "batch_budget");
    assert_eq!(j["backlog_left"]["count"], 800);

    let j = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--batch-size",
            "100",
            "--max-rows",
            "150",
        ])
        .run();
    j.assert_code(0);
    let j = j.json();
    assert_eq!(j["rows_evicted"], 150);
    assert_eq!(j["end_reason"], "row_budget");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        650
    );
}

/// --max-rows holds exactly with several sessions whose batches delete fewer rows than their
/// ranges hold (every other expired key is in_progress): rows a batch reserved and did not delete
/// are claimed again, even after another session saw the budget fully reserved and stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_row_budget_is_exact_with_several_sessions_and_in_progress_keys_in_the_ranges() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, locked_at, created_at, expires_at) \
         SELECT 'k' || g, 'tenant_' || (g % 7), 'POST', '/v1/payments', sha256(g::text::bytea), \
         CASE WHEN g % 2 = 0 THEN 'completed' ELSE 'in_progress' END, now() - interval '2 days', \
         now() - interval '2 days', now() - make_interval(secs => g) \
         FROM generate_series(1, 4000) g; ANALYZE idempotency_keys",
    )
    .await;
    for _ in 0..3 {
        let before = scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await;
        let run = db
            .idemctl()
            .args(["evict", "-o", "json", "--jobs", "2", "--batch-size", "50"])
            .args(["--max-rows", "300"])
            .run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(j["rows_evicted"], 300, "{run}");
        assert_eq!(j["end_reason"], "row_budget", "{run}");
        assert_eq!(
            scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
            before - 300
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_honours_pause_and_time_budget() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 1000,
            ..Mix::default()
        },
    )
    .await;
    let run = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--batch-size",
            "10",
            "--pause",
            "200ms",
            "--max-runtime",
            "1s",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["end_reason"], "time_budget");
    let batches = j["batches"].as_u64().unwrap();
    // Each batch is followed by a 200 ms pause, so one second allows at most 6 batches.
    assert!((2..=6).contains(&batches), "{j}");
    assert_eq!(j["rows_evicted"].as_u64().unwrap(), batches * 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_dry_run_changes_nothing() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Reference, MIX).await;
    let before = snapshot(&db).await;
    let n_tup_del = async |db: &TestDb| {
        scalar_i64(
            db,
            "SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'idempotency_keys'",
        )
        .await
    };
    let del_before = n_tup_del(&db).await;
    let run = db
        .idemctl()
        .args(["evict", "--dry-run", "-o", "json"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["would_evict"]["count"], 3000);
    assert!(j["statement"].as_str().unwrap().contains("DELETE FROM"));
    assert!(
        j["plan"].to_string().contains("idempotency_keys_expiry"),
        "{j}"
    );
    assert_eq!(snapshot(&db).await, before);
    // A backend hands its counts over as it exits, which comes after idemctl has: wait until the
    // run's session is gone, then give the hand-over a moment.
    let admin = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while crate::chaos::idemctl_sessions(&admin).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the dry run's session never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(n_tup_del(&db).await, del_before, "dry run deleted rows");
    // The same measurement sees a real run, once its counts have arrived.
    db.idemctl().args(["evict"]).run().assert_code(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut deleted = n_tup_del(&db).await;
    while deleted < del_before + 3000 {
        assert!(
            Instant::now() < deadline,
            "the real run's deletes never reached the statistics ({deleted} of {del_before} + 3000)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        deleted = n_tup_del(&db).await;
    }
    assert_eq!(deleted, del_before + 3000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_min_age_keeps_young_rows_and_reports_them() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 200,
            ..Mix::default()
        },
    )
    .await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, request_fingerprint, \
         state, response_status, response_body, created_at, expires_at) \
         SELECT 'short-ttl-' || g, 't', 'POST', '/p', '\\x00', 'completed', 201, '{}', \
         now() - interval '10 minutes', now() - interval '5 minutes' FROM generate_series(1, 25) g",
    )
    .await;
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--min-age", "1h"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], 200);
    assert_eq!(j["skipped_min_age"], 25);
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE key LIKE 'short-ttl-%'"
        )
        .await,
        25
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_handles_more_rows_than_a_batch_sharing_one_expiry() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, request_fingerprint, \
         state, response_status, created_at, expires_at) \
         SELECT 'k' || g, 't', 'POST', '/p', '\\x00', CASE WHEN g % 10 = 0 THEN 'in_progress' ELSE 'completed' END, \
         201, '2026-01-01', '2026-01-02' FROM generate_series(1, 2500) g; ANALYZE idempotency_keys",
    )
    .await;
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--batch-size", "100"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], 2250, "{j}");
    assert_eq!(j["end_reason"], "drained");
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress'"
        )
        .await,
        250
    );
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        250
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_sigterm_finishes_the_batch_and_exits_interrupted() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 20_000,
            live: 500,
            fresh: 20,
            ..Mix::default()
        },
    )
    .await;
    let before = snapshot(&db).await;
    let child = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--batch-size",
            "200",
            "--pause",
            "50ms",
        ])
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    while scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await > 19_000 {
        assert!(Instant::now() < deadline, "evict made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.signal("TERM");
    let run = child.wait_async().await;
    run.assert_code(130);
    let j = run.json();
    assert_eq!(j["end_reason"], "interrupted");
    let evicted = j["rows_evicted"].as_u64().unwrap();
    assert!(evicted > 0 && evicted < 20_000, "{j}");
    let left = scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await;
    assert_eq!(
        left as u64,
        20_520 - evicted,
        "the summary matches the table"
    );
    // Live rows untouched; the next run finishes the job.
    db.idemctl().args(["evict"]).run().assert_code(0);
    let after = snapshot(&db).await;
    let expected: Vec<_> = before.iter().filter(|(_, s)| !evictable(s)).collect();
    assert_eq!(after.len(), expected.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_reports_a_lost_connection_and_the_next_run_finishes() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 20_000,
            live: 100,
            ..Mix::default()
        },
    )
    .await;
    let child = db
        .idemctl()
        .args(["evict", "--batch-size", "100", "--pause", "20ms"])
        .spawn();
    let admin = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await >= 20_100 {
        assert!(Instant::now() < deadline, "evict made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'idemctl' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1, "the idemctl session");
    let run = child.wait_async().await;
    assert_eq!(run.code, 1, "{run}");
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    assert!(run.stderr.contains("connection"), "{run}");
    db.idemctl().args(["evict"]).run().assert_code(0);
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        100
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_writes_prometheus_textfile() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 300,
            live: 5,
            ..Mix::default()
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemctl_evict.prom");
    db.idemctl()
        .args(["evict", "--textfile"])
        .arg(&path)
        .run()
        .assert_code(0)
        .assert_stdout_empty();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("# TYPE idemctl_evict_rows_evicted gauge"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "idemctl_evict_rows_evicted{{database=\"{}\",table=\"public.idempotency_keys\"}} 300\n",
            db.name()
        )),
        "{text}"
    );
    assert!(
        text.contains(
            &format!("idemctl_evict_end_reason{{database=\"{}\",table=\"public.idempotency_keys\",reason=\"drained\"}} 1\n", db.name())
        ),
        "{text}"
    );
    assert!(
        text.contains("idemctl_evict_last_success_timestamp_seconds"),
        "{text}"
    );
    assert!(
        text.contains(&format!("idemctl_evict_backlog_left_keys{{database=\"{}\",table=\"public.idempotency_keys\"}} 0\n", db.name())),
        "{text}"
    );
}

/// Run idemctl on a pseudo-terminal (util-linux `script`), as an operator at a terminal would.
fn on_terminal(db: &TestDb, args: &str) -> crate::support::Run {
    let cmd = format!("{} {args}", crate::support::IDEMCTL);
    db.command("script")
        .args(["-qec", cmd.as_str(), "/dev/null"])
        .run()
}

/// The bar's length is the backlog counted when the run starts, not the planner's estimate:
/// statistics gathered while the table was nearly empty would put it far off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_progress_counts_towards_the_backlog_counted_at_the_start() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 10,
            ..Mix::default()
        },
    )
    .await;
    db.exec(
        "ALTER TABLE idempotency_keys SET (autovacuum_enabled = off); ANALYZE idempotency_keys",
    )
    .await;
    fixtures::load(
        &db,
        Mix {
            expired: 3990,
            live: 100,
            ..Mix::default()
        },
    )
    .await;
    // A wide terminal, so the bar's message is drawn whole.
    let cmd = format!(
        "stty cols 250; {} evict --batch-size 100 --pause 20ms",
        crate::support::IDEMCTL
    );
    let run = db.command("script").args(["-qec", &cmd, "/dev/null"]).run();
    run.assert_code(0);
    let drawn: Vec<(u64, String)> = run
        .stdout
        .split("evicted ")
        .skip(1)
        .filter_map(|s| {
            let (pos, rest) = s.split_once(" of ")?;
            let (len, rest) = rest.split_once(" rows [")?;
            let pos = pos.replace(',', "").parse().ok()?;
            Some((pos, format!("{len} rows [{}", rest.lines().next()?)))
        })
        .collect();
    assert!(drawn.len() > 1, "a bar drawn more than once: {run}");
    for (pos, rest) in &drawn {
        assert!(rest.starts_with("4,000 rows ["), "{pos}: {rest}");
        // Once rows are evicted, the time left is the rows left at the rate so far.
        if (1..4000).contains(pos) {
            assert!(rest.contains(" rows/s, about "), "{pos}: {rest}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_draws_progress_only_on_an_attended_terminal() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 5000,
            ..Mix::default()
        },
    )
    .await;
    let run = on_terminal(&db, "evict --batch-size 200 --pause 5ms");
    run.assert_code(0)
        .assert_stdout_contains("rows/s, about")
        .assert_stdout_contains(" rows [");
    assert!(
        run.stdout.contains("rows evicted"),
        "summary on a terminal: {run}"
    );

    fixtures::load(
        &db,
        Mix {
            expired: 2000,
            ..Mix::default()
        },
    )
    .await;
    let run = on_terminal(&db, "evict --quiet --batch-size 200");
    run.assert_code(0).assert_stdout_empty();
    fixtures::load(
        &db,
        Mix {
            expired: 2000,
            ..Mix::default()
        },
    )
    .await;
    let run = on_terminal(&db, "evict -o json --batch-size 200");
    run.assert_code(0);
    assert!(
        !run.stdout.contains(" rows ["),
        "no progress bar with -o json: {run}"
    );
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_catch_up_drains_with_parallel_unpaced_sessions() {
    let args = ["--catch-up", "--batch-size", "200"];
    evicts_exactly_the_expired_completed_rows(Schema::Corrected, &args).await;
    let run = crate::support::Cmd::new()
        .args(["evict", "--catch-up", "--duty-cycle", "50"])
        .run();
    run.assert_code(2).assert_stderr_contains("--duty-cycle");
}

/// The expired rows of a fresh table of `expired` expired completed rows (and a few of each other
/// kind), after an `evict -o json` with `args`; returns its summary.
async fn drain_json(expired: i64, args: &[&str]) -> serde_json::Value {
    let db = TestDb::new().await;
    let mix = Mix { expired, ..MIX };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    let run = db.idemctl().args(["evict", "-o", "json"]).args(args).run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"].as_i64(), Some(expired), "{j}");
    assert_eq!(j["end_reason"], "drained", "{j}");
    assert_eq!(j["backlog_left"]["count"], 0, "{j}");
    j
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_sizes_batches_by_statement_time_unless_the_size_is_fixed() {
    // A short target keeps batches small; a long one lets them grow (at most doubling each time)
    // towards the 10,000-row ceiling. Both start at 100 rows.
    let short = drain_json(20_000, &["--duty-cycle", "100", "--batch-time", "1ms"]).await;
    let long = drain_json(20_000, &["--duty-cycle", "100", "--batch-time", "200ms"]).await;
    let max = |j: &serde_json::Value| j["batch_rows_max"].as_u64().unwrap();
    let p50 = |j: &serde_json::Value| j["batch_rows_p50"].as_u64().unwrap();
    assert!(max(&short) < max(&long), "short: {short}\nlong: {long}");
    assert!(
        max(&long) >= 3200,
        "a 200 ms target doubles 100 -> 200 -> ... -> 3200 at least: {long}"
    );
    assert!(short["batches"].as_u64() > long["batches"].as_u64());

    // Three workers share one adaptive size and still delete every row exactly once.
    let jobs = drain_json(20_000, &["--jobs", "3", "--duty-cycle", "100"]).await;
    assert!(max(&jobs) > 100, "grew from the first 100 rows: {jobs}");

    // --batch-size fixes the size.
    let fixed = drain_json(1000, &["--batch-size", "70"]).await;
    assert_eq!((p50(&fixed), max(&fixed)), (70, 70), "{fixed}");
    assert!(fixed["batches"].as_u64().unwrap() >= 15, "{fixed}");

    let run = crate::support::Cmd::new()
        .args(["evict", "--batch-size", "100", "--batch-time", "5ms"])
        .run();
    run.assert_code(2).assert_stderr_contains("--batch-time");
    for bad in ["0ms", "-5ms", "5"] {
        let run = crate::support::Cmd::new()
            .args(["evict", "--batch-time", bad])
            .run();
        run.assert_code(2).assert_stderr_contains("--batch-time");
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_batches_commit_asynchronously_and_wait_at_most_a_millisecond_for_a_row() {
    // A statement trigger records the settings each deleting statement ran under.
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, MIX).await;
    db.exec(
        "CREATE TABLE seen (sync text, lock_timeout text); \
         CREATE FUNCTION note_settings() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           INSERT INTO seen VALUES (current_setting('synchronous_commit'), \
                                    current_setting('lock_timeout')); \
           RETURN NULL; END $$; \
         CREATE TRIGGER note_settings AFTER DELETE ON idempotency_keys \
           FOR EACH STATEMENT EXECUTE FUNCTION note_settings()",
    )
    .await;
    let run = db
        .idemctl()
        .args(["evict", "--batch-size", "500", "-o", "json"])
        .run();
    run.assert_code(0);
    let client = db.client().await;
    let rows = client
        .query("SELECT DISTINCT sync, lock_timeout FROM seen", &[])
        .await
        .unwrap();
    let seen: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(seen, vec![("off".to_owned(), "1ms".to_owned())]);
    assert!(
        scalar_i64(&db, "SELECT count(*) FROM seen").await >= 6,
        "one row per batch"
    );
}

/// On a direct connection (idemctl owns its sessions) the session limits are set once per
/// connection, in the same round trip that tells a server from a pooler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_session_runs_under_the_limits_given_on_the_command_line() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, MIX).await;
    db.exec(
        "CREATE TABLE seen (st text, idle text, app text); \
         CREATE FUNCTION note_limits() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           INSERT INTO seen VALUES (current_setting('statement_timeout'), \
                                    current_setting('idle_in_transaction_session_timeout'), \
                                    current_setting('application_name')); \
           RETURN NULL; END $$; \
         CREATE TRIGGER note_limits AFTER DELETE ON idempotency_keys \
           FOR EACH STATEMENT EXECUTE FUNCTION note_limits()",
    )
    .await;
    let run = db
        .idemctl()
        .args(["evict", "--batch-size", "500", "--jobs", "2", "-q"])
        .args([
            "--statement-timeout",
            "7s",
            "--idle-in-transaction-timeout",
            "9s",
        ])
        .run();
    run.assert_code(0);
    let client = db.client().await;
    let rows = client
        .query("SELECT DISTINCT st, idle, app FROM seen", &[])
        .await
        .unwrap();
    let seen: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        seen,
        vec![("7s".to_owned(), "9s".to_owned(), "idemctl".to_owned())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_dry_run_samples_the_keys_it_would_evict_and_those_min_age_holds_back() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 30,
            live: 20,
            ..Mix::default()
        },
    )
    .await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, request_fingerprint, \
         state, response_status, response_body, created_at, expires_at) \
         SELECT 'short-ttl-' || g, 't', 'POST', '/p', '\\x00', 'completed', 201, '{}', \
         now() - interval '10 minutes', now() - interval '5 minutes' FROM generate_series(1, 3) g",
    )
    .await;
    let run = db
        .idemctl()
        .args(["evict", "--dry-run", "--min-age", "1h", "-o", "json"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["would_evict"]["count"], 30);
    assert_eq!(j["held_back_by_min_age"], 3);
    let sample = j["sample"].as_array().unwrap();
    assert_eq!(sample.len(), 10);
    for k in sample {
        assert!(k["api_key_id"].is_string() && k["key"].is_string() && k["expires_at"].is_string());
        assert!(!k["key"].as_str().unwrap().starts_with("short-ttl-"));
    }
    // The three share one expires_at, so their order within the sample is the server's.
    let mut held: Vec<&str> = j["held_back_sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect();
    held.sort_unstable();
    assert_eq!(held, ["short-ttl-1", "short-ttl-2", "short-ttl-3"]);
    let run = db
        .idemctl()
        .args(["evict", "--dry-run", "--min-age", "1h", "-o", "plain"])
        .run();
    run.assert_code(0)
        .assert_stdout_contains("The first keys it would evict (oldest expiry first):\napi_key_id\tkey\texpires_at\tcreated_at\n")
        .assert_stdout_contains("The first keys --min-age holds back (created too recently):\n")
        .assert_stdout_contains("\tshort-ttl-2\t");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_summary_has_no_batch_figures_when_nothing_was_evicted() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            live: 20,
            ..Mix::default()
        },
    )
    .await;
    let run = db.idemctl().args(["evict", "-o", "plain"]).run();
    run.assert_code(0).assert_stdout_contains("rows evicted");
    assert!(
        !run.stdout.contains("rows per batch") && !run.stdout.contains("batch latency"),
        "{run}"
    );
    let run = db.idemctl().args(["evict", "-o", "json"]).run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], 0);
    assert_eq!(run.json()["batch_rows_p50"], 0);
    assert_eq!(run.json()["batch_rows_max"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_interrupted_under_cron_says_so_in_one_line() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 20_000,
            ..Mix::default()
        },
    )
    .await;
    let child = db
        .idemctl()
        .args(["evict", "--batch-size", "200", "--pause", "50ms"])
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    while scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await > 19_000 {
        assert!(Instant::now() < deadline, "evict made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.signal("INT");
    let run = child.wait_async().await;
    run.assert_code(130).assert_stdout_empty();
    let evicted = 20_000 - scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await;
    assert_eq!(
        run.stderr,
        format!(
            "idemctl: evict interrupted by a signal after {evicted} rows in {} batches; the next run continues\n",
            evicted / 200
        ),
        "{run}"
    );
}

/// A private cluster (synchronous_standby_names is the whole server's) with 200 expired keys and
/// `settings` applied by ALTER SYSTEM, among them a synchronous standby that never answers; an
/// `evict -o json` started on it, and the pid of its session once that session waits for the
/// standby at a durable point.
async fn evict_waiting_for_a_standby(
    settings: &[&str],
) -> (
    crate::support::cluster::PrivateCluster,
    tokio_postgres::Client,
    crate::support::cmd::Spawned,
    i32,
) {
    let server = crate::support::cluster::PrivateCluster::start().await;
    let client = server.client().await;
    client.batch_execute(Schema::Corrected.ddl()).await.unwrap();
    client
        .batch_execute(&fixtures::expired_rows_sql(200))
        .await
        .unwrap();
    for setting in settings {
        client
            .batch_execute(&format!("ALTER SYSTEM SET {setting}"))
            .await
            .unwrap();
    }
    client
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    let evict = server
        .idemctl()
        .args(["evict", "-o", "json"])
        .timeout(Duration::from_secs(60))
        .spawn();
    let waiting = "SELECT pid FROM pg_stat_activity \
                    WHERE application_name = 'idemctl' AND wait_event = 'SyncRep'";
    let started = Instant::now();
    let pid: i32 = loop {
        if let Some(row) = client.query_opt(waiting, &[]).await.unwrap() {
            break row.get(0);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "evict's durable point never waited for the synchronous standby"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    (server, client, evict, pid)
}

/// evict's durable point is a commit the server makes durable, and with a synchronous standby
/// waits for it: a run whose standby does not answer does not end while its deletes are not
/// confirmed, and ends once they are, with none left unconfirmed. (A transaction that only takes
/// a transaction id writes no WAL, and PostgreSQL commits it asynchronously whatever
/// synchronous_commit says: such a point would confirm nothing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicts_durable_point_waits_for_a_synchronous_standby() {
    let (_server, client, evict, _) =
        evict_waiting_for_a_standby(&["synchronous_standby_names = 'nobody'"]).await;
    // The standby is given up on: the waiting commit goes through, and the run ends.
    for sql in [
        "ALTER SYSTEM RESET synchronous_standby_names",
        "SELECT pg_reload_conf()",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    let run = evict.wait_async().await;
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], 200, "{run}");
    assert_eq!(j["rows_unconfirmed"], 0, "{run}");
}

/// A durable point whose wait for the synchronous standby is cancelled (`pg_cancel_backend`, as
/// an operator or a pooler's query timeout does) commits with a WARNING only: the server has the
/// deletes, no standby is known to. The run ends there (exit 1) naming the step and the server's
/// warning, and counts the rows it deleted as unconfirmed instead of confirmed; also where the
/// server sends clients only errors (client_min_messages).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_for_the_synchronous_standby_confirms_nothing() {
    let (_server, client, evict, pid) = evict_waiting_for_a_standby(&[
        "synchronous_standby_names = 'nobody'",
        "client_min_messages = 'error'",
    ])
    .await;
    client
        .execute("SELECT pg_cancel_backend($1)", &[&pid])
        .await
        .unwrap();
    let run = evict.wait_async().await;
    run.assert_code(1).assert_stderr(
        "idemctl: failed to make the deleted rows durable: the server warned \"canceling wait for \
         synchronous replication due to user request\" (SQLSTATE 01000): the deletes are committed \
         on this server but not known to have reached a synchronous standby, so they are counted \
         as unconfirmed\n",
    );
    let j = run.json();
    assert_eq!(j["end_reason"], "error", "{run}");
    assert_eq!(j["rows_evicted"], 200, "{run}");
    assert_eq!(j["rows_unconfirmed"], 200, "{run}");
}

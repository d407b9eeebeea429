//! evict's rate caps: `--max-rate` holds the rows deleted per second, by every session together, and
//! `--max-wal-rate` the WAL written per second, within 10 % over a run of a few seconds on a backlog
//! that an uncapped run would clear much faster; both appear in the summary, the JSON and the
//! metrics, and the WAL measured by evict agrees with the server's own WAL position.

use std::time::{Duration, Instant};

use crate::fixtures::{self, Mix, Schema};
use crate::support::cluster::PrivateCluster;
use crate::support::{Cmd, TestDb};

const RUNTIME_SECS: f64 = 4.0;

/// How much shorter than the run's time budget the stretch the cap held may be: it ends with the
/// last batch, which may end a slot (50 ms of the cap), a look at the schedule and one batch's time
/// before the budget does, and on a loaded machine one batch alone can take a few hundred ms.
const STRETCH_SHORT_BY_SECS: f64 = 0.5;

async fn count(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM idempotency_keys", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rate_holds_the_rows_per_second_of_all_sessions_together() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 40_000,
        live: 100,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    let client = db.client().await;
    let before = count(&client).await;
    let cap = 2000.0;
    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("evict.prom");
    let t0 = Instant::now();
    // Unpaced (--duty-cycle 100) on two sessions: the cap is what holds the rate.
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--jobs", "2", "--duty-cycle", "100"])
        .args(["--max-rate", "2000/s", "--max-runtime", "4s", "--textfile"])
        .arg(&prom)
        .timeout(Duration::from_secs(60))
        .run_async()
        .await;
    let wall = t0.elapsed().as_secs_f64();
    run.assert_success();
    let j = run.json();
    assert_eq!(j["end_reason"], "time_budget", "{run}");
    let rows = j["rows_evicted"].as_u64().unwrap();
    let elapsed = j["elapsed_seconds"].as_f64().unwrap();
    assert_eq!(count(&client).await, before - rows as i64, "{run}");
    // Over the whole command (the test's own clock, longer than the run): never above the cap.
    let upper = rows as f64 / wall;
    assert!(
        upper <= cap * 1.1,
        "{upper:.0} rows/s over {wall:.2}s\n{run}"
    );
    // Over the run: at the cap (an uncapped run clears 40,000 rows in far less than 4 s).
    assert!(elapsed >= RUNTIME_SECS, "{run}");
    // Over the stretch the cap held (the first claim to the end of the last batch; the run's
    // elapsed time adds the counts after it).
    let rate = &j["rate_limit"];
    let seconds = rate["seconds"].as_f64().unwrap();
    assert!(
        seconds >= RUNTIME_SECS - STRETCH_SHORT_BY_SECS && seconds <= elapsed,
        "{run}"
    );
    let achieved = rows as f64 / seconds;
    eprintln!(
        "--max-rate {cap}: {rows} rows in {seconds:.2}s = {achieved:.0} rows/s; {upper:.0} rows/s over the command"
    );
    assert!(
        achieved >= cap * 0.9 && achieved <= cap * 1.1,
        "{achieved:.0} rows/s\n{run}"
    );
    assert!(
        (rate["rows_per_second"].as_f64().unwrap() - achieved).abs() < 1.0,
        "{run}"
    );
    assert_eq!(rate["max_rows_per_second"], 2000.0, "{run}");
    assert_eq!(rate["max_wal_bytes_per_second"], serde_json::Value::Null);
    assert_eq!(rate["wal_bytes"], serde_json::Value::Null);
    assert!(rate["waits"].as_u64().unwrap() > 0, "{run}");
    assert!(rate["wait_seconds"].as_f64().unwrap() > 1.0, "{run}");
    // Batches are cut to a fraction of a second's budget.
    assert!(j["batch_rows_max"].as_u64().unwrap() <= 100, "{run}");
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("idemctl_evict_max_rows_per_second{") && l.ends_with(" 2000")),
        "{text}"
    );
    assert!(
        text.contains("idemctl_evict_rate_limit_wait_seconds{"),
        "{text}"
    );

    // The text summary says both caps and what the run achieved under them (caps it never
    // reached: it did not wait).
    let run = db
        .idemctl()
        .args(["evict", "-o", "plain", "--max-rows", "500"])
        .args(["--max-rate", "1000000", "--max-wal-rate", "1GB/s"])
        .run_async()
        .await;
    run.assert_success();
    let summary = crate::snapshots::normalise(&run.stdout, false);
    let line = summary.lines().find(|l| l.starts_with("rate limit"));
    assert_eq!(
        line,
        Some(
            "rate limit  max <X> rows/s (achieved <X> rows/s); max <SIZE>/s WAL (wrote <SIZE>, \
             <SIZE>/s); over <DUR> of batches; waited 0 times, <DUR> in all"
        ),
        "{run}"
    );
    assert!(
        run.stdout.contains("max 1000000 rows/s (achieved "),
        "{run}"
    );
    assert!(run.stdout.contains("max 1.0 GiB/s WAL (wrote "), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stricter_pace_wins_over_a_loose_rate_cap() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 20_000,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    // 1 % duty cycle with 50-row batches: far below 1,000,000 rows/s.
    let run = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--duty-cycle",
            "1",
            "--batch-size",
            "50",
        ])
        .args(["--max-rate", "1000000", "--max-runtime", "2s"])
        .timeout(Duration::from_secs(60))
        .run_async()
        .await;
    run.assert_success();
    let j = run.json();
    assert_eq!(j["end_reason"], "time_budget", "{run}");
    // At 1 % the batches run for about 20 ms of the 2 s: well under 20,000 rows.
    let rows = j["rows_evicted"].as_u64().unwrap();
    assert!(rows > 0 && rows < 20_000, "{run}");
    assert_eq!(j["rate_limit"]["waits"], 0, "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_wal_rate_holds_the_wal_written_per_second() {
    // The WAL position is the whole server's: a cluster of its own, with nothing else writing.
    let server = PrivateCluster::start().await;
    let client = server.client().await;
    client.batch_execute(Schema::Corrected.ddl()).await.unwrap();
    client
        .batch_execute(&fixtures::expired_rows_sql(100_000))
        .await
        .unwrap();
    // Autovacuum would write WAL of its own while the run deletes.
    client
        .batch_execute("ALTER TABLE idempotency_keys SET (autovacuum_enabled = off); CHECKPOINT")
        .await
        .unwrap();
    let before = count(&client).await;
    let position = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint";
    let cap = 512.0 * 1024.0;
    let start: i64 = client.query_one(position, &[]).await.unwrap().get(0);
    let t0 = Instant::now();
    let run = server
        .idemctl()
        .args(["evict", "-o", "json", "--catch-up"])
        .args(["--max-wal-rate", "512kB/s", "--max-runtime", "4s"])
        .timeout(Duration::from_secs(60))
        .run_async()
        .await;
    let wall = t0.elapsed().as_secs_f64();
    let end: i64 = client.query_one(position, &[]).await.unwrap().get(0);
    run.assert_success();
    let j = run.json();
    assert_eq!(j["end_reason"], "time_budget", "{run}");
    let rows = j["rows_evicted"].as_u64().unwrap();
    assert!(rows > 0, "{run}");
    assert_eq!(count(&client).await, before - rows as i64, "{run}");
    let rate = &j["rate_limit"];
    assert_eq!(rate["max_wal_bytes_per_second"], cap, "{run}");
    let measured = rate["wal_bytes"].as_u64().unwrap();
    let server = u64::try_from(end - start).unwrap();
    // evict counts the batches' WAL, which is (nearly) all the WAL the server wrote meanwhile.
    assert!(measured <= server, "{measured} > {server}\n{run}");
    assert!(
        measured as f64 >= server as f64 * 0.9,
        "{measured} of {server}\n{run}"
    );
    // Over the whole command by the server's count: never above the cap.
    let upper = server as f64 / wall;
    assert!(upper <= cap * 1.1, "{upper:.0} B/s over {wall:.2}s\n{run}");
    // Over the run: at the cap.
    let elapsed = j["elapsed_seconds"].as_f64().unwrap();
    let seconds = rate["seconds"].as_f64().unwrap();
    assert!(
        seconds >= RUNTIME_SECS - STRETCH_SHORT_BY_SECS && seconds <= elapsed,
        "{run}"
    );
    let achieved = measured as f64 / seconds;
    eprintln!(
        "--max-wal-rate {cap}: {measured} B in {seconds:.2}s = {achieved:.0} B/s; server wrote {server} B, {upper:.0} B/s over the command; {rows} rows"
    );
    assert!(
        achieved >= cap * 0.9 && achieved <= cap * 1.1,
        "{achieved:.0} B/s\n{run}"
    );
    let reported = rate["wal_bytes_per_second"].as_f64().unwrap();
    assert!((reported - achieved).abs() <= cap * 0.01, "{run}");
    // An uncapped run would have deleted all 100,000 rows in 4 s of catch-up; the cap held it back.
    assert!(j["backlog_left"]["count"].as_i64().unwrap() > 0, "{run}");
}

#[tokio::test]
async fn rate_caps_refuse_nonsense_before_connecting() {
    for (flag, value) in [
        ("--max-rate", "0"),
        ("--max-rate", "fast"),
        ("--max-wal-rate", "8 parsecs"),
        ("--max-wal-rate", "-1MB"),
    ] {
        let run = Cmd::new()
            .env("IDEMCTL_DATABASE_URL", "host=/nonexistent")
            .args(["evict", flag, value])
            .run();
        run.assert_code(2);
        run.assert_stderr_contains(flag);
    }
}

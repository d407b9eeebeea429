//! `evict --max-replica-lag`: against a real streaming standby (started by the harness on unix
//! sockets, apart from the shared cluster) whose replay is paused, evict pauses between batches without
//! holding a transaction open, ends with the `replica_lag` reason when the replica does not recover in
//! time, and carries on once replay resumes. A role that cannot read the replay positions is refused.

use std::time::{Duration, Instant};

use crate::fixtures::{self, Mix, Schema, scalar_i64};
use crate::support::replica::ReplicaPair;
use crate::support::{Cmd, TestDb, connect};

const ROWS: i64 = 6_000;

fn evict(pair: &ReplicaPair, extra: &[&str]) -> Cmd {
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", pair.primary_url())
        .args([
            "evict",
            "-o",
            "json",
            "--batch-size",
            "50",
            "--pause",
            "20ms",
        ])
        .args(["--duty-cycle", "100"])
        .args(["--max-replica-lag", "1s"])
        .args(extra)
}

async fn count(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM idempotency_keys", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_pauses_for_a_lagging_replica_ends_with_replica_lag_and_resumes_when_replay_does() {
    let pair = ReplicaPair::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start a primary and a standby: {e}"));
    let primary = connect(&pair.primary_url()).await;
    primary
        .batch_execute(Schema::Corrected.ddl())
        .await
        .unwrap();
    primary
        .batch_execute(&format!(
            "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
             request_fingerprint, state, response_status, response_body, created_at, expires_at) \
             SELECT 'k' || g, 't' || g % 5, 'POST', '/p', '\\x00', 'completed', 201, '{{}}', \
                    now() - interval '2 days', now() - interval '1 day' + g * interval '1 ms' \
               FROM generate_series(1, {ROWS}) g; ANALYZE idempotency_keys"
        ))
        .await
        .unwrap();
    pair.wait_caught_up(&primary).await;
    let standby = connect(&pair.standby_url()).await;
    standby
        .batch_execute("SELECT pg_wal_replay_pause()")
        .await
        .unwrap();

    // Replay stays paused: the run stops writing once the standby is 1 s behind, and gives up when
    // --max-runtime runs out while it waits.
    let dir = tempfile::tempdir().unwrap();
    let textfile = dir.path().join("evict.prom");
    let run = evict(&pair, &["--max-runtime", "3s", "--textfile"])
        .arg(&textfile)
        .run_async()
        .await;
    run.assert_code(0);
    // The standby's primary_conninfo names no application_name: PostgreSQL calls it walreceiver.
    assert_eq!(
        crate::snapshots::normalise(&run.stderr, false),
        "idemctl: warning: stopped before the backlog was drained: replica walreceiver is <DUR> behind \
         (<SIZE> of WAL not replayed) after waiting <DUR>; the next run continues\n",
        "{run}"
    );
    let j = run.json();
    assert_eq!(j["end_reason"], "replica_lag", "{run}");
    assert_eq!(j["replica_lag_waits"], 1, "{j}");
    let waited = j["replica_lag_wait_seconds"].as_f64().unwrap();
    assert!((0.5..2.5).contains(&waited), "{j}");
    assert!(j["replica_lag_max_seconds"].as_f64().unwrap() > 1.0, "{j}");
    let first = j["rows_evicted"].as_i64().unwrap();
    assert!(first > 0 && first < ROWS / 2, "{j}");
    assert_eq!(count(&primary).await, ROWS - first);
    let text = std::fs::read_to_string(&textfile).unwrap();
    assert!(
        text.contains(
            "idemctl_evict_end_reason{database=\"postgres\",table=\"public.idempotency_keys\",reason=\"replica_lag\"} 1\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("idemctl_evict_replica_lag_waits{database=\"postgres\",table=\"public.idempotency_keys\"} 1\n"),
        "{text}"
    );

    // The next run pauses too; while it waits its sessions hold no transaction open. Once replay
    // resumes, it carries on and drains the table.
    let child = evict(&pair, &["--max-runtime", "60s"]).spawn();
    let spawned = Instant::now();
    // Deletions stop (at once, or after a second of batches when PostgreSQL's replay_lag has not yet
    // noticed the stuck standby): it is paused. Meanwhile its session holds no transaction open.
    let open_transactions = "SELECT count(*) FILTER (WHERE state LIKE 'idle in transaction%'), count(*) \
                               FROM pg_stat_activity WHERE application_name = 'idemctl'";
    let mut seen = count(&primary).await;
    loop {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let now = count(&primary).await;
        let row = primary.query_one(open_transactions, &[]).await.unwrap();
        let (idle_in_transaction, sessions): (i64, i64) = (row.get(0), row.get(1));
        assert_eq!(idle_in_transaction, 0, "the pause holds a transaction open");
        if now == seen && sessions >= 1 && spawned.elapsed() > Duration::from_millis(1500) {
            break;
        }
        assert!(
            spawned.elapsed() < Duration::from_secs(20),
            "the second run never paused for the lagging standby"
        );
        seen = now;
    }
    standby
        .batch_execute("SELECT pg_wal_replay_resume()")
        .await
        .unwrap();
    let run = child.wait_async().await;
    run.assert_code(0).assert_stderr_empty();
    let j = run.json();
    assert_eq!(j["end_reason"], "drained", "{run}");
    assert!(j["replica_lag_waits"].as_u64().unwrap() >= 1, "{j}");
    assert!(
        j["replica_lag_wait_seconds"].as_f64().unwrap() >= 0.5,
        "{j}"
    );
    assert_eq!(j["rows_evicted"].as_i64().unwrap(), ROWS - first);
    assert_eq!(count(&primary).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_max_replica_lag_refuses_a_role_that_cannot_see_replay_positions() {
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
    // Roles are cluster-wide: a name of its own, so concurrent tests cannot collide.
    let role = format!(
        "lagwatch_{}",
        &db.name()[crate::support::pg::DB_PREFIX.len()..]
    );
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT, DELETE, UPDATE (expires_at) ON idempotency_keys TO {role}"
    ))
    .await;
    let as_role = db.url_with(&[("user", role.as_str())]);
    let run = db
        .idemctl()
        .args(["evict", "--max-replica-lag", "10s", "-d", as_role.as_str()])
        .run();
    run.assert_code(6).assert_stdout_empty().assert_stderr_contains(&format!(
        "--max-replica-lag reads the replicas' replay positions from pg_stat_replication, which role {role} cannot see"
    ));
    assert!(
        run.stderr
            .contains(&format!("GRANT pg_monitor TO \"{role}\";")),
        "{run}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        100,
        "changed before refusing"
    );

    // With pg_monitor, and no replica streaming from the shared cluster, nothing pauses.
    db.exec(&format!("GRANT pg_monitor TO {role}")).await;
    let run = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--max-replica-lag",
            "10s",
            "-d",
            as_role.as_str(),
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["end_reason"], "drained");
    assert_eq!(j["rows_evicted"], 100);
    assert_eq!(j["replica_lag_waits"], 0);
    assert_eq!(j["replica_lag_limit_seconds"], 10.0);
    let run = db
        .idemctl()
        .args([
            "evict",
            "--dry-run",
            "-o",
            "json",
            "--max-replica-lag",
            "10s",
            "-d",
            as_role.as_str(),
        ])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["replicas"], serde_json::json!([]));
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
}

//! Key tables as frameworks create them: `timestamp without time zone` read in a declared zone,
//! with the clock converted to the columns' type (never the column); each command end to end, and
//! evict checked by SQL to remove exactly the expired rows, half an hour either side of the cut-off.

use crate::fixtures::{loaded, scalar_i64};
use crate::support::TestDb;

/// The storage table with `timestamp without time zone` columns, as Rails, Ecto and JDBC write them.
fn storage_naive_ddl() -> String {
    include_str!("../../sql/schema.sql").replace("timestamptz", "timestamp(6)")
}

/// Rows of the storage table, written in local time of `zone` as an application in that zone
/// would: `near-old` expired 30 minutes ago, `near-new` expiring in 30 minutes, `done-old` expired
/// a day ago, `busy-old` in flight and expired a day ago.
fn storage_naive_rows(zone: &str) -> String {
    let local = |at: &str| format!("(({at}) AT TIME ZONE '{zone}')");
    let row = |kind: &str, state: &str, expires: &str| {
        format!(
            "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, request_fingerprint, \
             state, response_status, response_body, locked_at, created_at, expires_at) \
             SELECT '{kind}-' || g, 'tenant_' || g % 3, 'POST', '/v1/payments', sha256(g::text::bytea), '{state}', \
             CASE WHEN '{state}' = 'completed' THEN 201 END, CASE WHEN '{state}' = 'completed' THEN '{{}}'::jsonb END, \
             {}, {}, {} FROM generate_series(1, 4) AS g;",
            local("now() - interval '2 days'"),
            local("now() - interval '2 days'"),
            local(expires),
        )
    };
    [
        row("near-old", "completed", "now() - interval '30 minutes'"),
        row("near-new", "completed", "now() + interval '30 minutes'"),
        row("done-old", "completed", "now() - interval '1 day'"),
        row("busy-old", "in_progress", "now() - interval '1 day'"),
    ]
    .concat()
}

/// The keys left, in order, by kind prefix.
pub async fn kinds_left(db: &TestDb, table: &str, key: &str) -> Vec<(String, i64)> {
    let rows = db
        .client()
        .await
        .query(
            &format!(
                "SELECT split_part({key}::text, '-', 1) || '-' || split_part({key}::text, '-', 2) AS kind, count(*) \
                 FROM {table} GROUP BY 1 ORDER BY 1"
            ),
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// A database whose sessions default to a zone far from the one the application writes in, so a
/// statement that read the columns in the session's zone would evict the wrong rows.
async fn far_session_zone(db: &TestDb) {
    db.exec(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET timezone = %L', current_database(), 'Asia/Tokyo'); END $$",
    )
    .await;
}

/// Without a declared zone every command refuses, naming the key that declares it; with a zone the
/// server does not know, too, before anything is read or changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamp_without_time_zone_needs_a_declared_zone() {
    let db = loaded(&storage_naive_ddl(), &storage_naive_rows("UTC"), None).await;
    for command in [
        &["stats"][..],
        &["evict"],
        &["inspect", "near-old-1", "--api-key-id", "tenant_1"],
        &["reclaim", "--dry-run"],
    ] {
        db.idemctl().args(command).run().assert_code(2).assert_stderr_contains(
            "table public.idempotency_keys: column created_at, column locked_at, column expires_at is timestamp without time zone, which holds no zone: declare the zone the application writes it in with time_zone = \"UTC\" in a config file, --time-zone or IDEMCTL_TIME_ZONE (any IANA name, e.g. UTC); nothing was changed",
        );
    }
    let run = db.idemctl().args(["check"]).run();
    run.assert_code(4)
        .assert_stdout_contains("is timestamp without time zone, which holds no zone");
    assert!(!run.stdout.contains("{held_since}"), "{run}");
    let run = db
        .idemctl()
        .args(["--time-zone", "Nowhere/Else", "evict"])
        .run();
    run.assert_code(2).assert_stderr_contains(
        "time zone \"Nowhere/Else\" (given by --time-zone) is not one the server knows; give an IANA name as pg_timezone_names lists it, e.g. UTC or Europe/Paris; nothing was changed",
    );
    db.idemctl()
        .args(["--time-zone", "UTC; DROP TABLE x", "evict"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("is not a time zone name");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        16
    );
}

/// With the zone declared (flag, environment), evict removes exactly the expired completed rows,
/// those expired 30 minutes ago included and those expiring in 30 minutes not, whatever zone the
/// session defaults to; stats, inspect and reclaim read the same times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_zone_reads_timestamp_columns_in_that_zone() {
    let zone = "America/New_York";
    let db = loaded(&storage_naive_ddl(), &storage_naive_rows(zone), None).await;
    far_session_zone(&db).await;
    let run = db
        .idemctl()
        .env("IDEMCTL_TIME_ZONE", zone)
        .args(["-o", "json", "stats"])
        .run();
    run.assert_success();
    let stats = run.json();
    assert_eq!(stats["expired_backlog"]["count"], 8, "{run}");
    let run = db
        .idemctl()
        .args([
            "--time-zone",
            zone,
            "-o",
            "json",
            "inspect",
            "near-new-1",
            "--api-key-id",
            "tenant_1",
        ])
        .run();
    run.assert_success();
    let record = run.json();
    assert_eq!(record["state"], "completed", "{run}");
    assert_eq!(record["time_zone"], zone, "{run}");
    let expires = time::OffsetDateTime::parse(
        record["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let now = time::OffsetDateTime::now_utc();
    let ahead = (expires - now).whole_minutes();
    assert!((25..=31).contains(&ahead), "expires in {ahead} min: {run}");
    let run = db
        .idemctl()
        .args([
            "--time-zone",
            zone,
            "inspect",
            "near-new-1",
            "--api-key-id",
            "tenant_1",
        ])
        .run();
    run.assert_success()
        .assert_stdout_contains("completed and live, expires in")
        .assert_stdout_contains("times stored without zone, read as America/New_York");
    db.idemctl()
        .args(["--time-zone", zone, "-q", "evict"])
        .run()
        .assert_success();
    assert_eq!(
        kinds_left(&db, "idempotency_keys", "key").await,
        [("busy-old".to_owned(), 4), ("near-new".to_owned(), 4)]
    );
    let run = db
        .idemctl()
        .args([
            "--time-zone",
            zone,
            "-o",
            "json",
            "reclaim",
            "--dry-run",
            "--allow-scan",
        ])
        .run();
    run.assert_success();
    assert_eq!(run.json()["would_reclaim"]["count"], 4, "{run}");
}

//! Hostile but legal values in the key table: times of `'infinity'` and `'-infinity'`, years
//! PostgreSQL holds that RFC 3339 cannot write (294276 AD, 4713 BC), TTLs no interval holds, and
//! empty texts as key and scope. Every command reads them, shows them as PostgreSQL holds them and
//! figures with them (an infinite figure is infinity: null in JSON, +Inf in metrics, past any
//! threshold), on `timestamptz` and `timestamp without time zone` tables alike; evict never
//! deletes a key that expires at `'infinity'` and deletes expired completed keys of `'-infinity'`.

use crate::fixtures::loaded;
use crate::support::TestDb;

/// The storage table, with `timestamp without time zone` columns when `naive`.
fn ddl(naive: bool) -> String {
    let ddl = include_str!("../../sql/schema.sql").to_owned();
    if naive {
        ddl.replace("timestamptz", "timestamp(6)")
    } else {
        ddl
    }
}

/// The in_progress index, so stuck keys are counted and listed.
const INDEXES: Option<&str> = Some(include_str!("../../sql/maintenance_indexes.sql"));

/// One row: key, scope, state, then locked_at, created_at and expires_at as SQL.
fn row(key: &str, scope: &str, state: &str, times: [&str; 3]) -> String {
    let [locked, created, expires] = times;
    let body = if state == "completed" {
        "201, '{}'"
    } else {
        "NULL, NULL"
    };
    format!(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, request_fingerprint, \
         state, response_status, response_body, locked_at, created_at, expires_at) \
         VALUES ('{key}', '{scope}', 'POST', '/p', '\\x00', '{state}', {body}, {locked}, {created}, {expires});"
    )
}

/// A day ago and a day from now, in the columns' type.
const AGO: &str = "now() - interval '1 day'";
const AHEAD: &str = "now() + interval '1 day'";

/// Keys expiring at the infinities and at the ends of PostgreSQL's range, beside ordinary ones:
/// `never` (completed, expires at infinity), `always-1..3` (completed, -infinity throughout),
/// `always-busy` (in flight, -infinity throughout), `far` (completed, created 4713 BC, expires
/// 294276 AD), `old` (completed, expired a day ago) and `live` (completed, expires in a day).
fn odd_rows() -> String {
    let inf = "'infinity'";
    let minus = "'-infinity'";
    [
        row("never", "t", "completed", [AGO, AGO, inf]),
        row("always-1", "t", "completed", [minus, minus, minus]),
        row("always-2", "t", "completed", [minus, minus, minus]),
        row("always-3", "t", "completed", [minus, minus, minus]),
        row("always-busy", "t", "in_progress", [minus, minus, minus]),
        row(
            "far",
            "t",
            "completed",
            [AGO, "'4713-01-01 00:00:00 BC'", "'294276-12-31 00:00:00'"],
        ),
        row(
            "old",
            "t",
            "completed",
            [AGO, "now() - interval '2 days'", AGO],
        ),
        row("live", "t", "completed", [AGO, AGO, AHEAD]),
    ]
    .concat()
}

async fn odd_table(naive: bool) -> TestDb {
    loaded(&ddl(naive), &odd_rows(), INDEXES).await
}

/// idemctl on `db`, reading `timestamp` columns in UTC.
fn idemctl(db: &TestDb) -> crate::support::cmd::Cmd {
    db.idemctl().env("IDEMCTL_TIME_ZONE", "UTC")
}

async fn keys_left(db: &TestDb) -> Vec<String> {
    let rows = db
        .client()
        .await
        .query("SELECT key FROM idempotency_keys ORDER BY key", &[])
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// inspect shows each time as PostgreSQL holds it, with no age for an infinity, and says a key
/// that expires at infinity never expires; JSON carries the same texts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_infinite_and_far_times_as_the_table_holds_them() {
    for naive in [false, true] {
        let db = odd_table(naive).await;
        idemctl(&db)
            .args(["inspect", "never", "--api-key-id", "t"])
            .run()
            .assert_code(0)
            .assert_stdout_contains(
                "\nstate            completed and live, never expires (expiry infinity)\n",
            )
            .assert_stdout_contains("\nexpires_at       infinity\n");
        idemctl(&db)
            .args(["inspect", "always-1", "--api-key-id", "t"])
            .run()
            .assert_code(0)
            .assert_stdout_contains(
                "\nstate            completed, expired at -infinity, waiting for eviction\n",
            )
            .assert_stdout_contains("\ncreated_at       -infinity\nlocked_at        -infinity\nexpires_at       -infinity\n");
        idemctl(&db)
            .args(["inspect", "always-busy", "--api-key-id", "t"])
            .run()
            .assert_code(0)
            .assert_stdout_contains("\nstate            in_progress since -infinity; no running transaction holds the row; reclaim would take it (older than 5m); expired at -infinity\n");
        idemctl(&db)
            .args(["inspect", "far", "--api-key-id", "t"])
            .run()
            .assert_code(0)
            .assert_stdout_contains("\ncreated_at       -004712-01-01T00:00:00Z (")
            .assert_stdout_contains("\nexpires_at       +294276-12-31T00:00:00Z (in ");
        let run = idemctl(&db)
            .args(["-o", "json", "inspect", "far", "--api-key-id", "t"])
            .run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(
            j["created_at"], "-004712-01-01T00:00:00.000000000Z",
            "{run}"
        );
        assert_eq!(
            j["expires_at"], "+294276-12-31T00:00:00.000000000Z",
            "{run}"
        );
        let run = idemctl(&db)
            .args(["-o", "json", "inspect", "always-busy", "--api-key-id", "t"])
            .run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(
            (
                &j["locked_at"],
                &j["created_at"],
                &j["expires_at"],
                &j["stuck"]
            ),
            (
                &serde_json::json!("-infinity"),
                &serde_json::json!("-infinity"),
                &serde_json::json!("-infinity"),
                &serde_json::json!(true)
            ),
            "{run}"
        );
    }
}

/// stats, check and top read a key expired at -infinity as an infinite eviction lag: infinity in
/// words, null in JSON, +Inf in metrics, and past any --max-eviction-lag (exit 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_eviction_lag_is_infinity_and_breaches_its_threshold() {
    for naive in [false, true] {
        let db = odd_table(naive).await;
        idemctl(&db)
            .args(["stats"])
            .run()
            .assert_code(0)
            .assert_stdout_contains(
                "\neviction lag              infinity (oldest expired: t/always-1, expired -infinity)\n",
            )
            .assert_stdout_contains("\nexpired backlog           4\n")
            .assert_stdout_contains("\nstuck in_progress (> 5m)  1 (oldest held since -infinity)\n");
        let run = idemctl(&db).args(["-o", "json", "stats"]).run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(j["eviction_lag_seconds"], serde_json::Value::Null, "{run}");
        assert_eq!(j["oldest_expired"]["expires_at"], "-infinity", "{run}");
        assert_eq!(j["expired_backlog"]["count"], 4, "{run}");
        assert_eq!(j["stuck"]["oldest_since"], "-infinity", "{run}");
        let lag = format!(
            "idemctl_eviction_lag_seconds{{database=\"{}\",table=\"public.idempotency_keys\"}} +Inf\n",
            db.name()
        );
        idemctl(&db)
            .args(["-o", "prometheus", "stats"])
            .run()
            .assert_code(0)
            .assert_stdout_contains(&lag);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idemctl.prom");
        idemctl(&db)
            .args(["stats", "-q", "--textfile"])
            .arg(&path)
            .run()
            .assert_code(0);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(&lag), "{text}");
        idemctl(&db)
            .args(["check", "--max-eviction-lag", "1d"])
            .run()
            .assert_code(4)
            .assert_stdout_contains("\neviction lag\tBREACHED\teviction lag infinity exceeds --max-eviction-lag 1d; is the evict job running?\t\n")
            .assert_stderr("idemctl: check failed: eviction lag: eviction lag infinity exceeds --max-eviction-lag 1d; is the evict job running?\n");
        let run = idemctl(&db)
            .args(["-o", "json", "check", "--max-eviction-lag", "1d"])
            .run();
        run.assert_code(4);
        assert_eq!(
            crate::fixtures::finding(&run.json(), "eviction lag")["status"],
            "breached"
        );
        idemctl(&db)
            .args(["top", "--once"])
            .run()
            .assert_code(0)
            .assert_stdout_contains("│lag                infinity ")
            .assert_stdout_contains("│oldest stuck  infinity t/always-busy");
    }
}

/// A key that lives for ever (expires at infinity, or 294276 AD after being created 4713 BC)
/// counts in the recent TTL as infinity or its length, never as an interval out of range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_no_interval_holds_is_figured_not_failed() {
    for naive in [false, true] {
        let db = odd_table(naive).await;
        let run = idemctl(&db).args(["-o", "json", "stats"]).run();
        run.assert_code(0);
        let ttl = &run.json()["recent_ttl"];
        // never (infinity), far (294276 AD - 4713 BC), live (2 days), old (1 day); the keys of
        // -infinity throughout have no TTL (infinity less infinity).
        assert_eq!(ttl["keys"], 4, "{run}");
        assert_eq!(ttl["min_seconds"], 86400.0, "{run}");
        assert_eq!(ttl["max_seconds"], serde_json::Value::Null, "{run}");
        assert_eq!(ttl["p90_seconds"], serde_json::Value::Null, "{run}");
        // Half way between live's 2 days and far's 299,000 years or so.
        let p50 = ttl["p50_seconds"].as_f64().unwrap();
        assert!((4.6e12..4.8e12).contains(&p50), "{run}");
        idemctl(&db)
            .args(["stats"])
            .run()
            .assert_code(0)
            .assert_stdout_contains(" / max infinity (4 keys: the next and the last to expire)\n");
    }
}

/// evict deletes the expired completed keys of -infinity (several at that one instant, a batch
/// at a time), never the one of infinity nor the far one, and counts the in-flight key of
/// -infinity it leaves; its dry run names the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_deletes_keys_of_minus_infinity_and_never_those_of_infinity() {
    for naive in [false, true] {
        let db = odd_table(naive).await;
        idemctl(&db)
            .args(["evict", "--dry-run"])
            .run()
            .assert_code(0)
            .assert_stdout_contains("\nwould evict       4\noldest candidate  -infinity\n");
        let run = idemctl(&db)
            .args(["-o", "json", "evict", "--dry-run"])
            .run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(j["oldest_candidate"], "-infinity", "{run}");
        assert_eq!(j["sample"][0]["expires_at"], "-infinity", "{run}");
        assert_eq!(j["sample"][0]["created_at"], "-infinity", "{run}");
        let run = idemctl(&db)
            .args(["-o", "json", "evict", "--batch-size", "1"])
            .run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(j["rows_evicted"], 4, "{run}");
        assert_eq!(j["end_reason"], "drained", "{run}");
        assert_eq!(j["backlog_left"]["count"], 0, "{run}");
        assert_eq!(j["expired_in_progress_left"]["count"], 1, "{run}");
        assert_eq!(
            keys_left(&db).await,
            ["always-busy", "far", "live", "never"],
            "naive: {naive}"
        );
    }
}

/// reclaim lists, plans and reclaims a key held since -infinity, its age infinity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_takes_a_key_held_since_minus_infinity() {
    for naive in [false, true] {
        let db = odd_table(naive).await;
        idemctl(&db)
            .args(["reclaim", "--dry-run"])
            .run()
            .assert_code(0)
            .assert_stdout_contains("\nt\talways-busy\tPOST\t/p\t-infinity\tlocked_at\tinfinity\n");
        let run = idemctl(&db)
            .args(["-o", "json", "reclaim", "--dry-run"])
            .run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(j["rows"][0]["held_since"], "-infinity", "{run}");
        assert_eq!(
            j["rows"][0]["age_seconds"],
            serde_json::Value::Null,
            "{run}"
        );
        let dir = tempfile::tempdir().unwrap();
        let plan = dir.path().join("plan.json");
        idemctl(&db)
            .args(["reclaim", "--plan"])
            .arg(&plan)
            .run()
            .assert_code(0);
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
        assert_eq!(written["rows"][0]["locked_at"], "-infinity");
        let run = idemctl(&db)
            .args(["reclaim", "--yes", "-o", "json", "--apply"])
            .arg(&plan)
            .run();
        run.assert_code(0);
        assert_eq!(run.json()["rows_reclaimed"], 1, "{run}");
        assert!(!keys_left(&db).await.contains(&"always-busy".to_owned()));
    }
}

/// An empty key and an empty scope are shown as "", apart from NULL; an in-flight key never
/// locked says its time comes from created_at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_key_and_scope_are_shown_as_empty_quotes() {
    let db = loaded(
        &ddl(false),
        &row(
            "",
            "",
            "in_progress",
            ["NULL", "now() - interval '2 hours'", AHEAD],
        ),
        INDEXES,
    )
    .await;
    idemctl(&db)
        .args(["inspect", "", "--api-key-id", ""])
        .run()
        .assert_code(0)
        .assert_stdout_contains("api_key_id       \"\"\nkey              \"\"\nstate            in_progress for 2h (since created_at: locked_at is NULL); ")
        .assert_stdout_contains("\nkey                                \"\"\napi_key_id (tenant)                \"\"\n");
    idemctl(&db)
        .args(["stats"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("\noldest live key           \"\"/\"\" age 2h");
    idemctl(&db)
        .args(["reclaim", "--dry-run"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("\n\"\"\t\"\"\tPOST\t/p\t");
}

/// On a table whose keys expire a TTL after creation (Rocket Rides: no expiry column), a key
/// created within the TTL of the last instant PostgreSQL holds expires at infinity instead of
/// failing the read; one created at -infinity expired at -infinity and is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_past_the_last_instant_expires_at_infinity() {
    let rows = "INSERT INTO users (email, stripe_customer_id) VALUES ('a', 'b'); \
        INSERT INTO idempotency_keys (created_at, idempotency_key, locked_at, request_method, \
          request_params, request_path, response_code, response_body, recovery_point, user_id) \
        SELECT c::timestamptz, k, NULL, 'POST', '{}', '/p', 201, '{}', 'finished', 1 \
          FROM (VALUES ('294276-12-31 12:00:00+00', 'far'), ('infinity', 'never'), \
                       ('-infinity', 'always'), ('2001-01-01 00:00:00+00', 'old')) AS v(c, k);";
    let db = loaded(
        include_str!("../fixtures/rocket_rides_schema.sql"),
        rows,
        Some("CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at)"),
    )
    .await;
    let ttl = || db.idemctl().args(["--ttl", "1d"]);
    ttl()
        .args(["inspect", "far", "--api-key-id", "1"])
        .run()
        .assert_code(0)
        .assert_stdout_contains(
            "\nstate            completed and live, never expires (expiry infinity)\n",
        )
        .assert_stdout_contains("\nexpires_at       infinity\n");
    ttl()
        .args(["inspect", "always", "--api-key-id", "1"])
        .run()
        .assert_code(0)
        .assert_stdout_contains(
            "\ncreated_at       -infinity\nlocked_at        -\nexpires_at       -infinity\n",
        );
    let run = ttl().args(["-o", "json", "evict"]).run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], 2, "{run}");
    let left = db
        .client()
        .await
        .query(
            "SELECT idempotency_key FROM idempotency_keys ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let left: Vec<String> = left.iter().map(|r| r.get(0)).collect();
    assert_eq!(left, ["far", "never"]);
}

/// Partitions bounded by the infinities are listed with those bounds; evict --drop-partitions
/// drops the one whose keys all expired at -infinity and never touches the one of infinity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_bounded_by_the_infinities_are_listed_and_dropped_as_they_are() {
    let ddl = include_str!("../../sql/schema.sql")
        .replace(
            "PRIMARY KEY (api_key_id, key)",
            "PRIMARY KEY (api_key_id, key, expires_at)",
        )
        .replace("\n);", "\n) PARTITION BY RANGE (expires_at);")
        + "CREATE TABLE p_old PARTITION OF idempotency_keys FOR VALUES FROM ('-infinity') TO ('2001-01-01 00:00:00+00');
           CREATE TABLE p_rest PARTITION OF idempotency_keys FOR VALUES FROM ('2001-01-01 00:00:00+00') TO ('infinity');
           CREATE TABLE p_inf PARTITION OF idempotency_keys FOR VALUES FROM ('infinity') TO (MAXVALUE);
           CREATE INDEX idempotency_keys_in_progress ON idempotency_keys ((coalesce(locked_at, created_at)))
             WHERE state = 'in_progress';";
    let rows = [
        row("always", "t", "completed", [AGO, AGO, "'-infinity'"]),
        row("never", "t", "completed", [AGO, AGO, "'infinity'"]),
        row("live", "t", "completed", [AGO, AGO, AHEAD]),
    ]
    .concat();
    let db = loaded(&ddl, &rows, None).await;
    db.idemctl()
        .args(["stats", "--partitions"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("\npublic.p_old\t-infinity .. 2001-01-01T00:00:00Z\t")
        .assert_stdout_contains("\npublic.p_rest\t2001-01-01T00:00:00Z .. infinity\t")
        .assert_stdout_contains("\npublic.p_inf\tinfinity .. -\t");
    let run = db
        .idemctl()
        .args(["-o", "json", "evict", "--drop-partitions"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["dropped_partitions"][0]["name"], "public.p_old", "{run}");
    assert_eq!(
        j["dropped_partitions"].as_array().unwrap().len(),
        1,
        "{run}"
    );
    assert_eq!(keys_left(&db).await, ["live", "never"]);
}

/// Local times a `timestamp without time zone` table holds at a DST change of its zone are the
/// instants PostgreSQL makes of them: 02:30 on the morning New York skips it as 07:30 UTC, the
/// 01:30 it lives twice as the later one (standard time, 06:30 UTC); evict removes them once
/// expired, and stats measures the lag of a key of summer time (noon, 16:00 UTC) from that
/// instant, not from its wall clock, which is an hour off while the zone keeps standard time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_times_at_a_dst_change_are_the_instants_postgresql_makes_of_them() {
    let rows = [
        row(
            "gap",
            "t",
            "completed",
            ["NULL", "'2026-03-08 02:30:00'", "'2026-03-08 02:30:00'"],
        ),
        row(
            "overlap",
            "t",
            "completed",
            ["NULL", "'2026-11-01 01:30:00'", "'2026-11-01 01:30:00'"],
        ),
        row(
            "summer",
            "t",
            "completed",
            ["NULL", "'2025-07-01 12:00:00'", "'2025-07-01 12:00:00'"],
        ),
    ]
    .concat();
    let db = loaded(&ddl(true), &rows, INDEXES).await;
    let zone = || db.idemctl().env("IDEMCTL_TIME_ZONE", "America/New_York");
    zone()
        .args(["inspect", "gap", "--api-key-id", "t"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("\nexpires_at       2026-03-08T07:30:00Z (");
    zone()
        .args(["inspect", "overlap", "--api-key-id", "t"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("\nexpires_at       2026-11-01T06:30:00Z (");
    let run = zone().args(["-o", "json", "stats"]).run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(
        j["oldest_expired"]["expires_at"], "2025-07-01T16:00:00Z",
        "{run}"
    );
    let measured = j["eviction_lag_seconds"].as_f64().unwrap();
    let expected = crate::fixtures::scalar_text(
        &db,
        "SELECT (extract(epoch FROM now()) - extract(epoch FROM timestamptz '2025-07-01 16:00:00+00'))::text",
    )
    .await
    .parse::<f64>()
    .unwrap();
    assert!((measured - expected).abs() < 60.0, "{measured} {expected}");
    let run = zone().args(["-o", "json", "evict"]).run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], 3, "{run}");
}

//! Table profiles end to end: the explainer article's table and the rocket-rides table (with its
//! referencing `rides` table) are detected, checked, inspected, evicted and reclaimed with the
//! profile's own columns and actions; a table no profile fits is refused with what each profile
//! missed, and check never proposes changing the application's table.

use std::collections::BTreeSet;

use crate::fixtures::{finding, loaded, scalar_i64};
use crate::support::TestDb;

pub(crate) const EXPLAINER_DDL: &str = include_str!("../fixtures/explainer_schema.sql");
pub(crate) const ROCKET_RIDES_DDL: &str = include_str!("../fixtures/rocket_rides_schema.sql");

/// The indexes idemctl recommends on the explainer's table: created_at (expiry by TTL) and the
/// optional in-flight index.
pub(crate) const EXPLAINER_INDEXES: &str = "CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at); \
     CREATE INDEX idempotency_keys_in_progress ON idempotency_keys ((coalesce(locked_at, created_at))) \
     WHERE response_status = 202 AND response_body = '{\"status\": \"processing\"}'::jsonb;";

/// The same for rocket-rides.
pub(crate) const ROCKET_RIDES_INDEXES: &str = "CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at); \
     CREATE INDEX idempotency_keys_in_progress ON idempotency_keys ((coalesce(locked_at, created_at))) \
     WHERE recovery_point <> 'finished' AND locked_at IS NOT NULL;";

/// Explainer rows, `n` of each kind, keys named by kind: `done-old-*` (completed 2 to 6 days ago),
/// `done-new-*` (completed within 12 h), `stuck-*` (placeholder taken 1 h ago), `fresh-*`
/// (placeholder taken 10 s ago), `stuck-old-*` (placeholder from 3 days ago: expired, in flight).
pub(crate) fn explainer_rows(n: i64) -> String {
    let row = |kind: &str, status: &str, body: &str, created: &str, locked: &str| {
        format!(
            "INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at, locked_at) \
             SELECT '{kind}-' || g, encode(sha256(g::text::bytea), 'hex'), {status}, {body}, {created}, {locked} \
             FROM generate_series(1, {n}) AS g;"
        )
    };
    let done = "jsonb_build_object('id', 'ch_' || g)";
    let processing = "'{\"status\": \"processing\"}'::jsonb";
    [
        row(
            "done-old",
            "201",
            done,
            "now() - interval '2 days' - g * interval '1 minute'",
            "NULL",
        ),
        row(
            "done-new",
            "200",
            done,
            "now() - interval '12 hours' + g * interval '1 minute'",
            "NULL",
        ),
        row(
            "stuck",
            "202",
            processing,
            "now() - interval '1 hour'",
            "now() - interval '1 hour'",
        ),
        row(
            "fresh",
            "202",
            processing,
            "now() - interval '10 seconds'",
            "now() - interval '10 seconds'",
        ),
        row(
            "stuck-old",
            "202",
            processing,
            "now() - interval '3 days'",
            "NULL",
        ),
    ]
    .concat()
}

/// rocket-rides rows, `n` of each kind, user_id 1..7: `finished-old-*` (4 days old, a ride
/// references each), `released-old-*` (4 days old, unfinished, lock cleared), `held-old-*` (4 days
/// old, unfinished and locked: stuck), `finished-new-*` (1 h old).
pub(crate) fn rocket_rides_rows(n: i64) -> String {
    let row = |kind: &str, created: &str, locked: &str, point: &str| {
        format!(
            "INSERT INTO idempotency_keys (created_at, idempotency_key, last_run_at, locked_at, request_method, \
             request_params, request_path, response_code, response_body, recovery_point, user_id) \
             SELECT {created}, '{kind}-' || g, {created}, {locked}, 'POST', '{{}}'::jsonb, '/rides', \
             CASE WHEN '{point}' = 'finished' THEN 201 END, \
             CASE WHEN '{point}' = 'finished' THEN jsonb_build_object('id', g) END, '{point}', 1 + g % 7 \
             FROM generate_series(1, {n}) AS g;"
        )
    };
    let old = "now() - interval '4 days' - g * interval '1 second'";
    [
        row("finished-old", old, "NULL", "finished"),
        row("released-old", old, "NULL", "ride_created"),
        row("held-old", old, old, "started"),
        row("finished-new", "now() - interval '1 hour'", "NULL", "finished"),
        "INSERT INTO rides (idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon, user_id) \
         SELECT id, 0, 0, 1, 1, user_id FROM idempotency_keys WHERE idempotency_key LIKE 'finished-old-%';"
            .to_owned(),
    ]
    .concat()
}

/// The explainer's table with its response body in a `json` column (no equality operator), and
/// the indexes check recommends for it (the placeholder compared as jsonb).
pub(crate) fn explainer_json_ddl() -> String {
    EXPLAINER_DDL.replace("response_body   jsonb", "response_body   json")
}

pub(crate) const EXPLAINER_JSON_INDEXES: &str = "CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at); \
     CREATE INDEX idempotency_keys_in_progress ON idempotency_keys ((coalesce(locked_at, created_at))) \
     WHERE response_status = 202 AND response_body::jsonb = '{\"status\": \"processing\"}'::jsonb;";

pub(crate) async fn explainer_db(n: i64, indexes: bool) -> TestDb {
    let indexes = indexes.then_some(EXPLAINER_INDEXES);
    loaded(EXPLAINER_DDL, &explainer_rows(n), indexes).await
}

async fn rocket_rides_db(n: i64, indexes: bool) -> TestDb {
    let indexes = indexes.then_some(ROCKET_RIDES_INDEXES);
    loaded(ROCKET_RIDES_DDL, &rocket_rides_rows(n), indexes).await
}

async fn count_like(db: &TestDb, column: &str, prefix: &str) -> i64 {
    scalar_i64(
        db,
        &format!("SELECT count(*) FROM idempotency_keys WHERE {column} LIKE '{prefix}-%'"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_the_explainer_profile_and_asks_for_a_ttl_not_new_columns() {
    let db = explainer_db(3, false).await;
    let run = db.idemctl().args(["-o", "json", "check"]).run();
    run.assert_code(4);
    let json = run.json();
    assert!(
        finding(&json, "profile")["detail"]
            .as_str()
            .unwrap()
            .starts_with("explainer: the table has the columns"),
        "{run}"
    );
    assert_eq!(finding(&json, "expiry")["status"], "fail", "{run}");
    assert!(
        finding(&json, "expiry")["fix"]
            .as_str()
            .unwrap()
            .contains("--ttl"),
        "{run}"
    );
    assert!(!run.stdout.contains("ALTER TABLE"), "{run}");
    // With a TTL, the missing created_at index is what remains, with the statement that makes it.
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "24h", "check"])
        .run();
    let json = run.json();
    assert_eq!(finding(&json, "expiry index")["status"], "warn", "{run}");
    assert!(
        finding(&json, "expiry index")["fix"]
            .as_str()
            .unwrap()
            .contains("(created_at)"),
        "{run}"
    );
    // With what the index costs the API's writes, as for the in_progress index.
    assert!(
        finding(&json, "expiry index")["detail"]
            .as_str()
            .unwrap()
            .contains("creating the index costs one more index entry per insert"),
        "{run}"
    );
    assert!(!run.stdout.contains("ALTER TABLE"), "{run}");
    db.exec(EXPLAINER_INDEXES).await;
    db.idemctl()
        .args(["-q", "--ttl", "24h", "check"])
        .run()
        .assert_success();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_and_stats_on_a_table_without_expiry_need_a_ttl() {
    let db = explainer_db(3, true).await;
    db.idemctl()
        .arg("evict")
        .run()
        .assert_code(2)
        .assert_stderr_contains("needs --ttl DUR");
    // stats reports what needs no expiry, and says the rest needs --ttl.
    db.idemctl()
        .arg("stats")
        .run()
        .assert_success()
        .assert_stdout_contains("need --ttl DUR (or IDEMCTL_TTL)");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        15
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_on_the_explainer_table_deletes_expired_answers_and_keeps_placeholders() {
    let db = explainer_db(40, true).await;
    db.idemctl()
        .args(["-q", "evict"])
        .env("IDEMCTL_TTL", "24h")
        .run()
        .assert_success();
    assert_eq!(count_like(&db, "key", "done-old").await, 0);
    assert_eq!(count_like(&db, "key", "done-new").await, 40);
    assert_eq!(
        count_like(&db, "key", "stuck").await,
        80,
        "stuck and stuck-old"
    );
    assert_eq!(count_like(&db, "key", "fresh").await, 40);
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "24h", "stats"])
        .run();
    run.assert_success();
    let json = run.json();
    assert_eq!(json["expired_backlog"]["count"], 0, "{run}");
    // No tenant: null in JSON, the key alone in text.
    assert!(json["oldest_live"]["api_key_id"].is_null(), "{run}");
    let key = json["oldest_live"]["key"].as_str().unwrap().to_owned();
    let run = db.idemctl().args(["--ttl", "24h", "stats"]).run();
    run.assert_success();
    assert!(!run.stdout.contains(&format!("/{key}")), "{run}");
    assert!(run.stdout.contains(&key), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_on_the_explainer_table_reads_the_placeholder_as_in_flight() {
    let db = explainer_db(2, true).await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "24h", "inspect", "stuck-1"])
        .run();
    run.assert_success();
    let json = run.json();
    assert_eq!(json["state"], "in_progress", "{run}");
    assert_eq!(json["stuck"], true, "{run}");
    assert_eq!(json["request_fingerprint"].as_str().unwrap().len(), 64);
    // No tenant: null in JSON, no row in text, no tenant in the not-found line.
    assert!(json["api_key_id"].is_null(), "{run}");
    let run = db
        .idemctl()
        .args(["--ttl", "24h", "inspect", "stuck-1"])
        .run();
    run.assert_success();
    assert!(!run.stdout.contains("api_key_id"), "{run}");
    let run = db.idemctl().args(["inspect", "no-such-key"]).run();
    run.assert_code(3);
    assert_eq!(run.stderr, "idemctl: key no-such-key not found\n", "{run}");
    db.idemctl()
        .args(["inspect", "done-old-1", "--api-key-id", "x"])
        .run()
        .assert_error(2, "table public.idempotency_keys has no tenant column (profile explainer), so --api-key-id does not apply; look the key up alone");
}

/// A `json` response body: the placeholder is compared as jsonb, so every command works, and check
/// proposes (and then recognises) the in-flight index with that cast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explainer_table_with_a_json_response_body() {
    let db = loaded(&explainer_json_ddl(), &explainer_rows(4), None).await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "24h", "check"])
        .run();
    let json = run.json();
    let fix = finding(&json, "in_progress index")["fix"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(fix.contains("response_body::jsonb = "), "{run}");
    db.exec(EXPLAINER_JSON_INDEXES).await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "24h", "check"])
        .run();
    assert_eq!(
        finding(&run.json(), "in_progress index")["status"],
        "ok",
        "{run}"
    );
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "24h", "inspect", "stuck-1"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["state"], "in_progress", "{run}");
    db.idemctl()
        .args(["-q", "--ttl", "24h", "stats"])
        .run()
        .assert_success();
    db.idemctl()
        .args(["-q", "--ttl", "24h", "evict"])
        .run()
        .assert_success();
    assert_eq!(count_like(&db, "key", "done-old").await, 0);
    assert_eq!(count_like(&db, "key", "stuck").await, 8);
    db.idemctl()
        .args(["-q", "reclaim", "--yes", "--action", "fail"])
        .run()
        .assert_success();
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE key LIKE 'stuck%' AND response_status = 500"
        )
        .await,
        8
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_on_the_explainer_table_deletes_stuck_placeholders() {
    let db = explainer_db(5, true).await;
    db.idemctl()
        .args(["-q", "reclaim", "--yes"])
        .run()
        .assert_success();
    assert_eq!(count_like(&db, "key", "stuck").await, 0);
    assert_eq!(count_like(&db, "key", "fresh").await, 5);
    assert_eq!(count_like(&db, "key", "done-old").await, 5);
}

/// The whole table as one digest, to show a refused run changed nothing.
async fn digest(db: &TestDb) -> String {
    db.client()
        .await
        .query_one(
            "SELECT md5(string_agg(t::text, ',' ORDER BY key)) FROM idempotency_keys t",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The keys of a JSON array of rows, each asserted to carry `api_key_id` as null (present, not
/// missing, not "").
fn keys_without_tenant(rows: &serde_json::Value) -> BTreeSet<String> {
    rows.as_array()
        .unwrap_or_else(|| panic!("not an array: {rows}"))
        .iter()
        .map(|r| {
            assert_eq!(r.get("api_key_id"), Some(&serde_json::Value::Null), "{r}");
            r["key"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn stuck_names(n: i64) -> BTreeSet<String> {
    (1..=n)
        .flat_map(|g| [format!("stuck-{g}"), format!("stuck-old-{g}")])
        .collect()
}

/// No tenant column: evict's dry-run sample lists keys with a null tenant (not ""), and its text
/// has no api_key_id column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_dry_run_on_the_explainer_table_samples_keys_without_a_tenant() {
    let db = explainer_db(40, true).await;
    // done-old-g was created 2 days and g minutes ago: --min-age 2d 20m holds back g < 20.
    let args = ["--ttl", "24h", "evict", "--dry-run", "--min-age", "2900m"];
    let run = db.idemctl().args(args).args(["-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    let sample = keys_without_tenant(&j["sample"]);
    assert!(!sample.is_empty(), "{run}");
    assert!(sample.iter().all(|k| k.starts_with("done-old-")), "{run}");
    let held = keys_without_tenant(&j["held_back_sample"]);
    assert_eq!(j["held_back_by_min_age"], 19, "{run}");
    assert!(held.contains("done-old-19"), "{run}");
    let run = db.idemctl().args(args).args(["-o", "plain"]).run();
    run.assert_code(0)
        .assert_stdout_contains(
            "The first keys it would evict (oldest expiry first):\nkey\texpires_at\tcreated_at\n",
        )
        .assert_stdout_contains(
            "The first keys --min-age holds back (created too recently):\nkey\texpires_at\tcreated_at\n",
        );
    assert!(!run.stdout.contains("api_key_id"), "{run}");
}

/// No tenant column: reclaim's preview and plan carry a null tenant, apply takes exactly the plan's
/// rows (its report naming them with a null tenant), and a plan row given a tenant is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_plan_and_apply_on_the_explainer_table_carry_no_tenant() {
    let db = explainer_db(3, true).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let before = digest(&db).await;
    let run = db
        .idemctl()
        .args(["reclaim", "--dry-run", "-o", "json", "--plan"])
        .arg(&plan)
        .run();
    run.assert_code(0);
    assert_eq!(
        keys_without_tenant(&run.json()["rows"]),
        stuck_names(3),
        "{run}"
    );
    // No method or path columns either: null, not "".
    for row in run.json()["rows"].as_array().unwrap() {
        assert!(row["request_method"].is_null(), "{run}");
        assert!(row["request_path"].is_null(), "{run}");
    }
    let text = std::fs::read_to_string(&plan).unwrap();
    let written: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        keys_without_tenant(&written["rows"]),
        stuck_names(3),
        "{text}"
    );
    let run = db
        .idemctl()
        .args(["reclaim", "--dry-run", "-o", "plain"])
        .run();
    run.assert_code(0)
        .assert_stdout_contains("\nkey\tmethod\tpath\theld since\tfrom\tage\n")
        .assert_stdout_contains("stuck-old-1\t");
    assert!(!run.stdout.contains("api_key_id"), "{run}");
    assert_eq!(digest(&db).await, before, "the preview changed the table");

    // A row given a tenant was made for another table or edited: refused, one line.
    let mut edited = written.clone();
    edited["rows"][0]["api_key_id"] = serde_json::json!("t42");
    let path = dir.path().join("edited.json");
    std::fs::write(&path, edited.to_string()).unwrap();
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "--apply"])
        .arg(&path)
        .run();
    run.assert_code(2)
        .assert_stderr_contains("edited.json is not a valid reclaim plan")
        .assert_stderr_contains("has api_key_id \"t42\", but table public.idempotency_keys (profile explainer) has no tenant column");
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    // A key listed twice, once with null and once with an earlier release's "": the same key.
    let mut twice = written.clone();
    let mut row = twice["rows"][0].clone();
    row["api_key_id"] = serde_json::json!("");
    twice["rows"].as_array_mut().unwrap().push(row);
    std::fs::write(&path, twice.to_string()).unwrap();
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "--apply"])
        .arg(&path)
        .run();
    run.assert_code(2).assert_stderr_contains("is listed twice");
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    assert_eq!(
        digest(&db).await,
        before,
        "a refused plan changed the table"
    );

    // One planned key goes before apply: it is left alone as gone, the others are reclaimed. The
    // plan is applied as an earlier release wrote it, each row's tenant "": read as none.
    db.exec("DELETE FROM idempotency_keys WHERE key = 'stuck-old-1'")
        .await;
    let mut earlier = written.clone();
    for row in earlier["rows"].as_array_mut().unwrap() {
        row["api_key_id"] = serde_json::json!("");
    }
    std::fs::write(&plan, earlier.to_string()).unwrap();
    let archive = dir.path().join("archive.jsonl");
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--archive"])
        .arg(&archive)
        .arg("--apply")
        .arg(&plan)
        .run();
    run.assert_code(0);
    let j = run.json();
    let mut reclaimed = stuck_names(3);
    reclaimed.remove("stuck-old-1");
    assert_eq!(j["rows_reclaimed"], 5, "{run}");
    assert_eq!(keys_without_tenant(&j["reclaimed"]), reclaimed, "{run}");
    assert_eq!(
        keys_without_tenant(&j["left_alone"]),
        BTreeSet::from(["stuck-old-1".to_owned()]),
        "{run}"
    );
    assert_eq!(j["left_alone"][0]["reason"], "gone", "{run}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&archive)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &serde_json::Value| l["type"] == "key")
        .collect();
    assert_eq!(
        keys_without_tenant(&serde_json::Value::Array(lines)),
        reclaimed,
        "the archive"
    );
    assert_eq!(count_like(&db, "key", "stuck").await, 0);
    assert_eq!(count_like(&db, "key", "fresh").await, 3);
    assert_eq!(count_like(&db, "key", "done-old").await, 3);
    assert_eq!(count_like(&db, "key", "done-new").await, 3);
    // Applied again, every row is gone; the text names them by the key alone.
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "plain", "--apply"])
        .arg(&plan)
        .run();
    run.assert_code(0)
        .assert_stdout_contains("Plan rows left alone:\nkey\twhy\n")
        .assert_stdout_contains("stuck-1\tgone: deleted since the plan\n");
    assert!(!run.stdout.contains("api_key_id"), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_on_rocket_rides_deletes_settled_keys_and_detaches_their_rides() {
    let db = rocket_rides_db(30, true).await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "72h", "check"])
        .run();
    let json = run.json();
    let fk = finding(&json, "referencing key");
    assert_eq!(fk["status"], "ok", "{run}");
    assert!(
        fk["detail"]
            .as_str()
            .unwrap()
            .starts_with("rides (idempotency_key_id) references the table ON DELETE SET NULL"),
        "{run}"
    );
    assert!(
        finding(&json, "profile")["detail"]
            .as_str()
            .unwrap()
            .starts_with("rocket-rides: "),
        "{run}"
    );
    assert!(!run.stdout.contains("ALTER TABLE"), "{run}");
    db.idemctl()
        .args(["-q", "--ttl", "72h", "evict"])
        .run()
        .assert_success();
    let column = "idempotency_key";
    assert_eq!(count_like(&db, column, "finished-old").await, 0);
    assert_eq!(count_like(&db, column, "released-old").await, 0);
    assert_eq!(count_like(&db, column, "held-old").await, 30, "in flight");
    assert_eq!(count_like(&db, column, "finished-new").await, 30);
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM rides WHERE idempotency_key_id IS NULL"
        )
        .await,
        30,
        "ON DELETE SET NULL ran for every evicted key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_flags_a_referencing_column_without_an_index() {
    let db = rocket_rides_db(2, true).await;
    db.exec("CREATE TABLE receipts (id bigserial PRIMARY KEY, key_id bigint REFERENCES idempotency_keys ON DELETE CASCADE)")
        .await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "72h", "check"])
        .run();
    run.assert_code(4);
    let json = run.json();
    let fk = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "referencing key" && f["status"] == "fail")
        .unwrap_or_else(|| panic!("{run}"));
    assert_eq!(
        fk["fix"], "CREATE INDEX CONCURRENTLY ON \"public\".\"receipts\" (\"key_id\");",
        "{run}"
    );
}

/// inspect judges a key by the profile's own in-flight and done definitions: a released
/// rocket-rides key (unfinished, lock cleared) is released, not completed; a finished one is
/// completed; a held one is in progress with the held/stuck analysis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_on_rocket_rides_tells_released_keys_from_completed_ones() {
    let db = rocket_rides_db(2, true).await;
    for (key, state) in [
        ("released-old-1", "released"),
        ("finished-old-1", "completed"),
        ("held-old-1", "in_progress"),
    ] {
        let run = db
            .idemctl()
            .args(["-o", "json", "--ttl", "72h", "inspect", key])
            .run();
        run.assert_success();
        assert_eq!(run.json()["state"], state, "{run}");
    }
    let run = db
        .idemctl()
        .args(["--ttl", "72h", "inspect", "released-old-1"])
        .run();
    run.assert_success()
        .assert_stdout_contains("released: not finished");
    let run = db
        .idemctl()
        .args(["--ttl", "72h", "inspect", "held-old-1"])
        .run();
    run.assert_success()
        .assert_stdout_contains("reclaim would take it");
}

/// inspect refuses, with one line and exit 2, what the table cannot hold: --method and --path on a
/// table without those columns, a tenant its bigint column cannot hold, a key its uuid column
/// cannot hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_refuses_what_the_table_cannot_hold() {
    let db = explainer_db(1, true).await;
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, "{}").unwrap();
    for flags in [["--method", "POST"], ["--path", "/charges"]] {
        let run = db
            .idemctl()
            .args(["inspect", "done-old-1", "--body"])
            .arg(&body)
            .args(flags)
            .run();
        let what = if flags[0] == "--method" {
            "request method"
        } else {
            "request path"
        };
        run.assert_error(
            2,
            &format!(
                "{flag} does not apply to table public.idempotency_keys (profile explainer): it \
                 has no {what} column to compare with; drop {flag}",
                flag = flags[0]
            ),
        );
    }
    let db = rocket_rides_db(1, true).await;
    for tenant in ["t42", "99999999999999999999"] {
        let run = db
            .idemctl()
            .args(["inspect", "finished-old-1", "--api-key-id", tenant])
            .run();
        run.assert_error(2, &format!(
            "--api-key-id \"{tenant}\" cannot be a tenant of table public.idempotency_keys: its tenant column is of type bigint"
        ));
    }
    db.exec(crate::config_file::JOBS_DDL).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, crate::config_file::JOBS_CONFIG).unwrap();
    let run = db
        .idemctl()
        .arg("--config")
        .arg(&config)
        .args(["inspect", "not-a-uuid"])
        .run();
    run.assert_code(2).assert_stderr_contains(
        "the key \"not-a-uuid\" cannot be a key of table public.jobs_keys: its key column is of type uuid",
    );
}

/// Messages name where a setting came from: a profile named by IDEMCTL_PROFILE or by the config
/// file, a connection string from the config file. An empty IDEMCTL_CONFIG or IDEMCTL_PROFILE (an
/// environment template's unset value) is no file and no profile, as an empty connection string is
/// none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_name_the_source_of_a_setting_and_empty_variables_are_unset() {
    let db = explainer_db(1, true).await;
    let profile_detail = |run: &crate::support::cmd::Run| {
        finding(&run.json(), "profile")["detail"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let run = db
        .idemctl()
        .env("IDEMCTL_PROFILE", "explainer")
        .args(["-o", "json", "--ttl", "1d", "check"])
        .run();
    assert_eq!(
        profile_detail(&run),
        "explainer: chosen by IDEMCTL_PROFILE",
        "{run}"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "profile = \"explainer\"\n").unwrap();
    let run = db
        .idemctl()
        .arg("--config")
        .arg(&config)
        .args(["-o", "json", "--ttl", "1d", "check"])
        .run();
    assert_eq!(
        profile_detail(&run),
        format!(
            "explainer: chosen by profile in config file {}",
            config.display()
        ),
        "{run}"
    );
    std::fs::write(&config, "database_url = \"host=/tmp port=99999\"\n").unwrap();
    crate::support::cmd::Cmd::new()
        .arg("--config")
        .arg(&config)
        .arg("stats")
        .run()
        .assert_code(2)
        .assert_stderr_contains(&format!(
            "invalid port in database_url in config file {}: ",
            config.display()
        ));
    let run = db
        .idemctl()
        .env("IDEMCTL_CONFIG", "")
        .env("IDEMCTL_PROFILE", "")
        .args(["-o", "json", "--ttl", "1d", "stats"])
        .run();
    run.assert_success();
}

/// On a table without an expiry column, reclaim --action fail makes no claim about how long a
/// failed key is kept: --keep-failed-for is refused, and a warning says a failed key goes with
/// the next evict once created_at + TTL has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_keys_on_a_table_without_expiry_says_what_keeps_them() {
    let db = explainer_db(2, true).await;
    db.idemctl()
        .args([
            "reclaim",
            "--yes",
            "--action",
            "fail",
            "--keep-failed-for",
            "1d",
        ])
        .run()
        .assert_error(2, "--keep-failed-for does not apply to table public.idempotency_keys (profile explainer): it has no expiry column to move, so a failed key goes with the first evict after created_at + TTL; drop --keep-failed-for");
    let run = db
        .idemctl()
        .args(["--ttl", "24h", "reclaim", "--yes", "--action", "fail"])
        .run();
    run.assert_success().assert_stderr("idemctl: warning: table public.idempotency_keys has no expiry column: a failed key is kept only until created_at + the TTL (1d), so a key created longer ago than that goes with the next evict, and a retry after it runs as a new request\n");
    assert!(!run.stdout.contains("kept at least"), "{run}");
    assert!(run.stdout.contains("kept until created_at + TTL"), "{run}");
}

/// A built-in profile on `timestamp without time zone` columns: refused in one line naming the key
/// that declares their zone; read in the zone the config file's `time_zone` declares; a table that
/// mixes both kinds of timestamp is refused, naming the odd column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamp_without_time_zone_is_read_in_the_declared_zone() {
    let ddl = EXPLAINER_DDL.replace(" timestamptz", " timestamp");
    let rows = explainer_rows(2)
        .replace("now() - interval", "localtimestamp - interval")
        .replace("now() + interval", "localtimestamp + interval");
    let db = loaded(&ddl, &rows, Some(EXPLAINER_INDEXES)).await;
    let run = db.idemctl().args(["--ttl", "1d", "stats"]).run();
    run.assert_code(2).assert_stderr_contains(
        "table public.idempotency_keys: column created_at, column locked_at is timestamp without time zone, which holds no zone: declare the zone the application writes it in with time_zone = \"UTC\" in a config file, --time-zone or IDEMCTL_TIME_ZONE",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    let zone: String = db
        .client()
        .await
        .query_one("SELECT current_setting('TimeZone')", &[])
        .await
        .unwrap()
        .get(0);
    std::fs::write(&config, format!("ttl = \"1d\"\ntime_zone = \"{zone}\"\n")).unwrap();
    let config = config.to_string_lossy().into_owned();
    db.idemctl()
        .args(["--config", &config, "check"])
        .run()
        .assert_success();
    db.idemctl()
        .args(["--config", &config, "-q", "evict"])
        .run()
        .assert_success();
    assert_eq!(count_like(&db, "key", "done-old").await, 0);
    assert_eq!(count_like(&db, "key", "done-new").await, 2);
    assert_eq!(count_like(&db, "key", "stuck-old").await, 2);
    let mixed = EXPLAINER_DDL.replace("created_at      timestamptz", "created_at      timestamp");
    let db = loaded(&mixed, "", None).await;
    db.idemctl()
        .args(["--time-zone", "UTC", "--ttl", "1d", "stats"])
        .run()
        .assert_code(2)
        .assert_stderr_contains(
            "column created_at is timestamp without time zone while the other time columns are timestamp with time zone",
        );
}

/// Types as frameworks declare them: a modifier (`varchar(255)`, `timestamptz(6)`, `timestamptz(0)`)
/// is accepted wherever its base type is, for detection and for every command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_modifiers_are_accepted_wherever_the_base_type_is() {
    let ddl = EXPLAINER_DDL
        .replace("key             text", "key             varchar(255)")
        .replace(
            "created_at      timestamptz NOT NULL",
            "created_at      timestamptz(6) NOT NULL",
        )
        .replace(
            "locked_at       timestamptz\n",
            "locked_at       timestamptz(0)\n",
        );
    assert_ne!(ddl, EXPLAINER_DDL);
    let db = loaded(&ddl, &explainer_rows(3), Some(EXPLAINER_INDEXES)).await;
    db.idemctl()
        .args(["--ttl", "1d", "check"])
        .run()
        .assert_success();
    db.idemctl()
        .args(["--ttl", "1d", "inspect", "done-old-1"])
        .run()
        .assert_success();
    db.idemctl()
        .args(["-q", "--ttl", "1d", "evict"])
        .run()
        .assert_success();
    assert_eq!(count_like(&db, "key", "done-old").await, 0);
    assert_eq!(count_like(&db, "key", "done-new").await, 3);
}

/// A forced profile whose columns the table lacks is refused, naming them all, instead of
/// findings and fixes about columns that do not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_profile_the_table_lacks_columns_for_is_refused() {
    let db = explainer_db(1, true).await;
    let run = db.idemctl().args(["--profile", "storage", "check"]).run();
    run.assert_code(2).assert_stderr_contains(
        "table public.idempotency_keys has no column api_key_id, column request_method, column request_path, column expires_at, column state, column request_fingerprint, which profile storage needs (chosen by --profile)",
    );
    assert!(!run.stdout.contains("GRANT"), "{run}");
    assert!(!run.stdout.contains("identifies a row"), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_on_rocket_rides_releases_the_lock_and_refuses_delete() {
    let db = rocket_rides_db(6, true).await;
    db.idemctl()
        .args(["reclaim", "--yes", "--action", "delete"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("it allows release");
    db.idemctl()
        .args(["-q", "reclaim", "--yes"])
        .run()
        .assert_success();
    assert_eq!(count_like(&db, "idempotency_key", "held-old").await, 6);
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE locked_at IS NOT NULL"
        )
        .await,
        0
    );
    // inspect finds a user's key through the (user_id, idempotency_key) index.
    let run = db
        .idemctl()
        .args(["-o", "json", "inspect", "held-old-1", "--api-key-id", "2"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["request_path"], "/rides", "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_no_profile_fits_is_refused_naming_what_each_profile_missed() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE idempotency_keys (token text PRIMARY KEY, made timestamptz)")
        .await;
    let run = db.idemctl().args(["check"]).run();
    run.assert_code(2)
        .assert_stderr_contains("matches no table profile")
        .assert_stderr_contains("rocket-rides needs")
        .assert_stderr_contains("force one with --profile");
    assert!(!run.stderr.contains("ALTER TABLE"), "{run}");
    db.idemctl()
        .args(["--profile", "nosuch", "stats"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("unknown profile nosuch");
}

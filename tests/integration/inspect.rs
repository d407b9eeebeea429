//! `idemctl inspect`: the whole record, its state by the database clock, ambiguity across tenants,
//! not-found, and escaping of hostile keys.

use crate::fixtures::{self, Mix, Schema};
use crate::support::TestDb;

async fn insert(db: &TestDb, tenant: &str, key: &str, state: &str, extra: &str) {
    let client = db.client().await;
    let sql = format!(
        "INSERT INTO idempotency_keys (api_key_id, key, request_method, request_path, request_fingerprint, \
         state, response_status, response_body, locked_at, created_at, expires_at) \
         VALUES ($1, $2, 'POST', '/v1/payments', '\\xdeadbeef', $3, {extra})"
    );
    client
        .execute(&sql, &[&tenant, &key, &state])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_whole_record_as_json() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Reference,
        Mix {
            live: 50,
            ..Mix::default()
        },
    )
    .await;
    insert(&db, "tenant_a", "key-1", "completed",
        "201, '{\"id\":\"pay_1\",\"amount\":42}', now() - interval '1 hour', now() - interval '1 hour', now() + interval '23 hours'").await;
    let run = db.idemctl().args(["inspect", "key-1", "-o", "json"]).run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["api_key_id"], "tenant_a");
    assert_eq!(j["request_fingerprint"], "deadbeef");
    assert_eq!(j["response_body"]["amount"], 42);
    assert_eq!(j["response_status"], 201);
    assert_eq!(j["stuck"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_describes_state_by_the_database_clock() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    insert(
        &db,
        "t",
        "stuck",
        "in_progress",
        "NULL, NULL, NULL, now() - interval '2 hours', now() + interval '22 hours'",
    )
    .await;
    insert(
        &db,
        "t",
        "old",
        "completed",
        "200, '{}', NULL, now() - interval '3 days', now() - interval '2 days'",
    )
    .await;
    let run = db
        .idemctl()
        .args(["inspect", "stuck", "--api-key-id", "t"])
        .run();
    run.assert_code(0)
        .assert_stdout_contains("in_progress for 2h")
        .assert_stdout_contains("reclaim would take it");
    let run = db
        .idemctl()
        .args(["inspect", "old", "--api-key-id", "t"])
        .run();
    run.assert_code(0)
        .assert_stdout_contains("expired 2days ago, waiting for eviction");
    let run = db
        .idemctl()
        .args([
            "inspect",
            "stuck",
            "--api-key-id",
            "t",
            "--stuck-after",
            "3h",
        ])
        .run();
    run.assert_code(0)
        .assert_stdout_contains("reclaim would leave it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_tenants_when_a_key_is_ambiguous() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            live: 300,
            ..Mix::default()
        },
    )
    .await;
    for t in ["tenant_x", "tenant_y"] {
        insert(
            &db,
            t,
            "shared-key",
            "completed",
            "201, '{}', NULL, now(), now() + interval '1 day'",
        )
        .await;
    }
    let run = db.idemctl().args(["inspect", "shared-key"]).run();
    run.assert_code(2)
        .assert_stdout_contains("tenant_x")
        .assert_stdout_contains("tenant_y")
        .assert_stderr_contains("exists under 2 tenants; pass --api-key-id");
    let run = db
        .idemctl()
        .args([
            "inspect",
            "shared-key",
            "--api-key-id",
            "tenant_y",
            "-o",
            "json",
        ])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["api_key_id"], "tenant_y");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_of_a_missing_key_exits_3_with_one_line() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            live: 10,
            ..Mix::default()
        },
    )
    .await;
    let long = "k".repeat(10_000);
    for args in [
        vec!["inspect", "nope"],
        vec!["inspect", "nope", "--api-key-id", "t"],
        vec!["inspect", long.as_str()],
    ] {
        let run = db.idemctl().args(args).run();
        run.assert_code(3).assert_stdout_empty();
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_escapes_control_characters() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    let key = "evil\x1b[2J\nkey";
    insert(
        &db,
        "t",
        key,
        "completed",
        "201, '{\"msg\":\"\\u001b[31mred\"}', NULL, now(), now() + interval '1 day'",
    )
    .await;
    let run = db
        .idemctl()
        .args(["inspect", key, "--api-key-id", "t"])
        .run();
    run.assert_code(0)
        .assert_stdout_contains("evil\\x1b[2J\\nkey");
    assert!(
        !run.stdout.contains('\x1b'),
        "raw escape reached the output: {run}"
    );
}

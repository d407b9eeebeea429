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
        .assert_stdout_contains("expired 2d ago, waiting for eviction");
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

/// The sha256 hex digest Python computes for `body` (tests/fixtures/fingerprint.py): the explainer's
/// json.dumps(sort_keys=True), an independent RFC 8785 canonicaliser, or the raw bytes.
fn python_fingerprint(how: &str, body: &std::path::Path) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fingerprint.py");
    let run = crate::support::Cmd::of("python3")
        .args([script, how])
        .arg(body)
        .run();
    run.assert_code(0);
    run.stdout.trim().to_owned()
}

/// Request bodies with nested objects, unicode (escaped and raw, astral and BMP keys whose UTF-16
/// and code point orders differ), escapes, and numbers at the edges of both canonical forms.
const BODIES: &[&str] = &[
    r#"{"b":[1,2.50,1e16,0.00001,-0,18446744073709551617],"a":"caf\u00e9 \ud83d\ude00 \"q\" C:\\temp\n","\ufb01":1,"\ud83d\ude00":{"z":null,"y":[true,false,{}]}}"#,
    "{\"amount\": 12345678901234567890.123456789, \"n\": 1e-7, \"big\": 1e21, \"x\": 0.1,\n \"neg\": -1.5e-300, \"m\": 333333333.33333329, \"é\": \"ü\u{7f}\\u001f\\/\"}",
    r#"[{"customer": {"id": "cus_1", "tags": ["a", "b"], "meta": {"z": 1, "A": 2, "_": 3}}}, "x\ty", 0, 1.0, 100, 5e-324]"#,
];

async fn insert_with_fingerprint(db: &TestDb, table: &str, key: &str, fingerprint: &str) {
    let value = if table == "idempotency_keys" {
        format!("decode('{fingerprint}', 'hex')")
    } else {
        format!("'{fingerprint}'")
    };
    db.exec(&format!(
        "INSERT INTO {table} (api_key_id, key, request_method, request_path, request_fingerprint, \
         state, response_status, response_body, created_at, expires_at) \
         VALUES ('t', '{key}', 'POST', '/v1/payments', {value}, 'completed', 201, '{{}}', now(), \
         now() + interval '1 day')"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_body_computes_the_fingerprint_as_the_application_does() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    // The explainer's table keeps a hex digest in a text column.
    db.exec(
        "CREATE TABLE hex_keys (LIKE idempotency_keys INCLUDING ALL); \
         ALTER TABLE hex_keys ALTER request_fingerprint TYPE text",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    for (n, body) in BODIES.iter().enumerate() {
        let file = dir.path().join(format!("body{n}.json"));
        std::fs::write(&file, body).unwrap();
        // (table, --canonical given, form the table's application used)
        for (table, flag, how) in [
            ("idempotency_keys", None, "jcs"),
            ("idempotency_keys", Some("raw"), "raw"),
            ("idempotency_keys", Some("sorted-keys"), "sorted-keys"),
            ("hex_keys", None, "sorted-keys"),
            ("hex_keys", Some("jcs"), "jcs"),
        ] {
            let expected = python_fingerprint(how, &file);
            let key = format!("k{n}-{how}");
            insert_with_fingerprint(&db, table, &key, &expected).await;
            let mut cmd = db
                .idemctl()
                .args(["-t", table, "inspect", &key, "--api-key-id", "t", "--body"])
                .arg(&file);
            if let Some(flag) = flag {
                cmd = cmd.args(["--canonical", flag]);
            }
            let run = cmd.args(["-o", "json"]).run();
            run.assert_code(0);
            let j = run.json();
            assert_eq!(j["computed"], expected, "{how} of body {n}: {run}");
            assert_eq!(j["canonical"], how);
            assert_eq!(j["matches"], true);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_body_mismatch_exits_4_showing_both_fingerprints() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    let dir = tempfile::tempdir().unwrap();
    let sent = dir.path().join("sent.json");
    std::fs::write(&sent, r#"{"amount": 42, "currency": "eur"}"#).unwrap();
    let stored = python_fingerprint("jcs", &sent);
    insert_with_fingerprint(&db, "idempotency_keys", "k", &stored).await;

    // The same body with members reordered and spaced differently matches, from stdin too.
    let run = db
        .idemctl()
        .args(["inspect", "k", "--api-key-id", "t", "--body", "-"])
        .args(["--method", "POST", "--path", "/v1/payments"])
        .stdin_bytes(&b"{ \"currency\":\"eur\",\n\"amount\":42 }"[..])
        .run();
    run.assert_code(0)
        .assert_stdout_contains("fingerprint  match\n")
        .assert_stdout_contains(&format!(
            "stored       {stored} (request_fingerprint, bytea)"
        ))
        .assert_stdout_contains("method       match (POST)");

    let other = dir.path().join("other.json");
    std::fs::write(&other, r#"{"amount": 43, "currency": "eur"}"#).unwrap();
    let computed = python_fingerprint("jcs", &other);
    let run = db
        .idemctl()
        .args(["inspect", "k", "--api-key-id", "t", "--body"])
        .arg(&other)
        .run();
    run.assert_code(4)
        .assert_stdout_contains("fingerprint  mismatch\n")
        .assert_stdout_contains(&stored)
        .assert_stdout_contains(&format!(
            "computed     {computed} (sha256 of the body as jcs)"
        ));

    // Same body, another endpoint: reported, and not the same request.
    let run = db
        .idemctl()
        .args(["inspect", "k", "--api-key-id", "t", "--body"])
        .arg(&sent)
        .args(["--method", "PUT", "--path", "/v1/payments"])
        .run();
    run.assert_code(4)
        .assert_stdout_contains("fingerprint  match\n")
        .assert_stdout_contains("method       mismatch: stored POST, given PUT")
        .assert_stdout_contains("path         match (/v1/payments)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_body_that_is_not_json_is_hashed_only_as_raw() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    let dir = tempfile::tempdir().unwrap();
    let form = dir.path().join("form.txt");
    std::fs::write(&form, "amount=42&currency=eur").unwrap();
    let raw = python_fingerprint("raw", &form);
    insert_with_fingerprint(&db, "idempotency_keys", "k", &raw).await;
    let run = db
        .idemctl()
        .args(["inspect", "k", "--api-key-id", "t", "--body"])
        .arg(&form)
        .run();
    run.assert_code(2)
        .assert_stdout_empty()
        .assert_stderr_contains("the body is not JSON")
        .assert_stderr_contains("use --canonical raw");
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    // Refused before connecting when the form is given.
    let run = crate::support::Cmd::new()
        .args([
            "-d",
            "host=/nonexistent dbname=x",
            "inspect",
            "k",
            "--canonical",
            "jcs",
            "--body",
        ])
        .arg(&form)
        .run();
    run.assert_code(2)
        .assert_stderr_contains("the body is not JSON");
    let run = db
        .idemctl()
        .args([
            "inspect",
            "k",
            "--api-key-id",
            "t",
            "--canonical",
            "raw",
            "--body",
        ])
        .arg(&form)
        .run();
    run.assert_code(0).assert_stdout_contains(&raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_stored_body_exactly() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let body = format!(
        r#"{{"big": 18446744073709551617, "dec": 12345678901234567890.123456789, "huge": 1e400, "deep": {deep}, "quote": "say \"hi\"", "path": "C:\\temp", "esc": "\u001b[31m\u202e"}}"#
    );
    let client = db.client().await;
    client
        .execute(
            "INSERT INTO idempotency_keys (api_key_id, key, request_method, request_path, \
             request_fingerprint, state, response_status, response_body, created_at, expires_at) \
             VALUES ('t', 'k', 'POST', '/p', '\\x00', 'completed', 201, $1::text::jsonb, now(), \
             now() + interval '1 day')",
            &[&body],
        )
        .await
        .unwrap();
    let huge: String = client
        .query_one(
            "SELECT (response_body->'huge')::text FROM idempotency_keys",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(huge.starts_with("1000000000") && huge.len() == 401);
    for format in ["plain", "table"] {
        let run = db
            .idemctl()
            .args(["inspect", "k", "--api-key-id", "t", "-o", format])
            .run();
        run.assert_code(0)
            .assert_stdout_contains("\"big\": 18446744073709551617,")
            .assert_stdout_contains("\"dec\": 12345678901234567890.123456789,")
            .assert_stdout_contains(&format!("\"huge\": {huge},"))
            .assert_stdout_contains(r#""quote": "say \"hi\"""#)
            .assert_stdout_contains(r#""path": "C:\\temp""#)
            // Controls are escaped once, as JSON escapes, never raw.
            .assert_stdout_contains(r#""esc": "\u001b[31m\u202e""#);
        assert!(
            !run.stdout.contains('\x1b') && !run.stdout.contains('\u{202e}'),
            "{run}"
        );
    }
    // JSON output keeps the body a JSON value, however deep or large its numbers: Python (which
    // reads any depth up to its recursion limit and integers exactly) reads back the stored value.
    let run = db
        .idemctl()
        .args(["inspect", "k", "--api-key-id", "t", "-o", "json"])
        .run();
    run.assert_code(0);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    std::fs::write(&out, &run.stdout).unwrap();
    let stored = dir.path().join("stored.json");
    std::fs::write(&stored, &body).unwrap();
    let check = crate::support::Cmd::of("python3")
        .args([
            "-c",
            "import json,sys; from decimal import Decimal as D; \
             l=lambda p: json.load(open(p), parse_float=D); \
             a=l(sys.argv[1])['response_body']; b=l(sys.argv[2]); \
             sys.exit(0 if a == b and type(a) is dict else 'differs')",
        ])
        .arg(&out)
        .arg(&stored)
        .run();
    check.assert_code(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_tells_a_key_held_by_a_live_session_from_one_reclaim_would_take() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    for key in ["held", "sub", "dead"] {
        insert(
            &db,
            "t",
            key,
            "in_progress",
            "NULL, NULL, now() - interval '2 hours', now() - interval '2 hours', now() + interval '22 hours'",
        )
        .await;
    }
    // One owner holds its row as the storage design's handler does; another inside a savepoint, as
    // nested ORM transactions do.
    let owner = db.client().await;
    owner
        .batch_execute(
            "BEGIN; SELECT 1 FROM idempotency_keys WHERE key = 'held' FOR UPDATE; \
             SAVEPOINT s; SELECT 1 FROM idempotency_keys WHERE key = 'sub' FOR UPDATE",
        )
        .await
        .unwrap();
    for key in ["held", "sub"] {
        // Runs to completion while the lock is held: inspect neither waits nor takes a lock.
        let run = db
            .idemctl()
            .args(["inspect", key, "--api-key-id", "t", "--lock-timeout", "1h"])
            .run();
        run.assert_code(0)
            .assert_stdout_contains("held by a live session")
            .assert_stdout_contains("reclaim would skip it");
        assert!(!run.stdout.contains("would take it"), "{run}");
    }
    let run = db
        .idemctl()
        .args(["inspect", "dead", "--api-key-id", "t", "-o", "json"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["held"], false);
    assert_eq!(run.json()["stuck"], true);
    // reclaim agrees: it takes the dead key and skips the held ones.
    db.idemctl()
        .args(["reclaim", "--allow-scan", "--yes", "-q"])
        .run()
        .assert_code(0);
    let left = fixtures::scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await;
    assert_eq!(left, 2);
    owner.batch_execute("COMMIT").await.unwrap();
    let run = db
        .idemctl()
        .args(["inspect", "held", "--api-key-id", "t"])
        .run();
    run.assert_code(0)
        .assert_stdout_contains("no running transaction holds the row; reclaim would take it");
}

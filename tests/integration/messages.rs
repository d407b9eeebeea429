//! Refusals and errors worded by `src/output/`, each asserted exactly: the one stderr line, the
//! exit code and nothing on stdout. The list in `layers.rs` names the messages no test holds yet.

use crate::fixtures::{self, Mix, Schema};
use crate::support::{Cmd, TestDb};

/// A conninfo nothing listens on: a refusal seen with it was made before connecting.
const NOWHERE: &str = "host=/nonexistent/idemctl-test port=1 dbname=none connect_timeout=1";

fn nowhere() -> Cmd {
    Cmd::new().env("IDEMCTL_DATABASE_URL", NOWHERE)
}

#[test]
fn reclaim_refuses_bad_flags_before_connecting_in_exact_words() {
    nowhere()
        .args(["reclaim", "--dry-run", "--method", "post me"])
        .run()
        .assert_error(2, "--method \"post me\" is not an HTTP method: a method is a token of letters, digits and !#$%&'*+-.^_`|~ (RFC 9110), compared exactly with the stored one (POST, not post)");
    nowhere()
        .args(["reclaim", "--dry-run", "--path", "/v1/a\tb"])
        .run()
        .assert_error(2, "--path \"/v1/a\\tb\" holds a control character (a newline, tab or the like), which no stored value has; nothing was changed");
    nowhere()
        .args(["reclaim", "--action", "delete", "--yes", "--status", "500"])
        .run()
        .assert_error(
            2,
            "--status only applies to --action fail; drop it or pass --action fail",
        );
    nowhere()
        .args(["reclaim", "--older-than", "59s", "--dry-run"])
        .run()
        .assert_error(2, "--older-than 59s is under 1m: a key held that briefly may belong to a request still running, which would then execute twice; use a value above the longest handler duration including downstream timeouts, or pass --force to override");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let not_json = dir.path().join("not.json");
    std::fs::write(&not_json, "{oops").unwrap();
    let array = dir.path().join("array.json");
    std::fs::write(&array, "[1, 2]").unwrap();
    let body_file = |path: &std::path::Path, expected: String| {
        nowhere()
            .args(["reclaim", "--action", "fail", "--yes", "--body-file"])
            .arg(path)
            .run()
            .assert_error(2, &expected);
    };
    body_file(
        &missing,
        format!(
            "cannot read --body-file {}: No such file or directory (os error 2)",
            missing.display()
        ),
    );
    body_file(
        &not_json,
        format!(
            "--body-file {} is not valid JSON (key must be a string at line 1 column 2); the \
             stored body must be a JSON object",
            not_json.display()
        ),
    );
    body_file(
        &array,
        format!(
            "--body-file {} holds a JSON array, but the stored response body must be a JSON object",
            array.display()
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_refusals_are_worded_exactly() {
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
    db.idemctl()
        .args(["inspect", "nope"])
        .run()
        .assert_error(3, "key nope not found under any tenant");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    db.idemctl()
        .args(["inspect", "nope", "--api-key-id", "t", "--body"])
        .arg(&missing)
        .run()
        .assert_error(
            2,
            &format!(
                "cannot read the request body from {}: No such file or directory (os error 2)",
                missing.display()
            ),
        );
    let large = dir.path().join("large.json");
    std::fs::File::create(&large)
        .unwrap()
        .set_len(64 * 1024 * 1024 + 1)
        .unwrap();
    db.idemctl()
        .args(["inspect", "nope", "--api-key-id", "t", "--body"])
        .arg(&large)
        .run()
        .assert_error(
            2,
            &format!(
                "the request body in {} is larger than 64 MiB; pass the body the client sent",
                large.display()
            ),
        );
    db.exec(
        "ALTER TABLE idempotency_keys ALTER COLUMN request_fingerprint DROP NOT NULL; \
         INSERT INTO idempotency_keys (api_key_id, key, request_method, request_path, \
         state, response_status, created_at, expires_at) \
         VALUES ('t', 'nofp', 'POST', '/v1/payments', 'completed', 200, now(), now() + interval '1 day'), \
         ('t', 'fp', 'POST', '/v1/payments', 'completed', 200, now(), now() + interval '1 day')",
    )
    .await;
    db.exec("UPDATE idempotency_keys SET request_fingerprint = '\\xdeadbeef' WHERE key = 'fp'")
        .await;
    let body = dir.path().join("body.json");
    std::fs::write(&body, "{\"a\": 1}").unwrap();
    db.idemctl()
        .args(["inspect", "nofp", "--api-key-id", "t", "--body"])
        .arg(&body)
        .run()
        .assert_error(2, "key nofp has no stored request fingerprint (request_fingerprint is NULL), so --body cannot be checked");
    let huge = dir.path().join("huge.json");
    std::fs::write(&huge, "{\"a\": 1e400}").unwrap();
    db.idemctl()
        .args(["inspect", "fp", "--api-key-id", "t", "--body"])
        .arg(&huge)
        .run()
        .assert_error(2, "number 1e400 is beyond the IEEE 754 double range JCS allows; use --canonical raw or sorted-keys (--canonical jcs was chosen from the fingerprint column's type)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_on_a_table_without_the_maintenance_indexes_are_worded_exactly() {
    let db = crate::support::stuck::db_with(
        Schema::Reference,
        Mix {
            expired: 5,
            live: 5,
            stuck: 5,
            ..Mix::default()
        },
        false,
    )
    .await;
    db.idemctl()
        .args(["reclaim", "--dry-run"])
        .run()
        .assert_error(2, "table public.idempotency_keys has no index on in_progress keys, so finding stuck keys means reading the whole table; create it with: CREATE INDEX CONCURRENTLY \"idempotency_keys_in_progress\" ON \"public\".\"idempotency_keys\" ((coalesce(locked_at, created_at))) WHERE state = 'in_progress'; (its cost to the API: sql/maintenance_indexes.sql), or pass --allow-scan");
    db.idemctl()
        .args(["reclaim", "--dry-run", "--allow-scan"])
        .run()
        .assert_code(0)
        .assert_stderr("idemctl: warning: table public.idempotency_keys has no index on in_progress keys: reading the whole table (each statement bounded by --statement-timeout)\n");
    db.idemctl()
        .args(["evict", "--drop-partitions"])
        .run()
        .assert_error(2, "table public.idempotency_keys is not partitioned; --drop-partitions needs a table range-partitioned on expires_at or created_at");
    db.idemctl()
        .args(["inspect", "k", "--api-key-id", "t"])
        .run()
        .assert_error(3, "key k not found for api_key_id t");
    db.exec(
        "DROP INDEX idempotency_keys_expiry; \
         CREATE TABLE held (key text NOT NULL REFERENCES idempotency_keys (key)); \
         INSERT INTO held SELECT key FROM idempotency_keys LIMIT 1",
    )
    .await;
    db.idemctl().args(["evict"]).run().assert_error(2, "table public.idempotency_keys has no index on expires_at, so evict would walk its unique index, which does not handle a NO ACTION / RESTRICT foreign key referencing the table yet; nothing was changed; create the index with: CREATE INDEX CONCURRENTLY \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (expires_at);");
    db.exec("DROP TABLE held").await;
    let walk = db.idemctl().args(["evict"]).run();
    walk.assert_code(0).assert_stderr(
        "idemctl: note: table public.idempotency_keys has no index on expires_at: evict walks \
         idempotency_keys_pkey in pages of 2000 entries, reading every key to find the expired \
         ones; the index would let each batch read only expired keys: CREATE INDEX CONCURRENTLY \
         \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (expires_at);\n",
    );
    let stats = db.idemctl().args(["stats", "-o", "json"]).run();
    stats.assert_success();
    assert_eq!(
        stats.json()["notes"],
        serde_json::json!([
            "table public.idempotency_keys has no index on expires_at: the expired backlog and the eviction lag are estimated from the planner's statistics, and the oldest live key is unknown (finding it would read the whole table); evict walks the table's unique index meanwhile. The index makes them exact: CREATE INDEX CONCURRENTLY \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (expires_at);",
            "stuck in_progress keys not counted: that needs the optional index (CREATE INDEX CONCURRENTLY \"idempotency_keys_in_progress\" ON \"public\".\"idempotency_keys\" ((coalesce(locked_at, created_at))) WHERE state = 'in_progress';) or --allow-scan, which reads the whole table",
        ]),
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_partitions_refusals_on_a_plain_table_are_worded_exactly() {
    let db = crate::support::stuck::db_with(
        Schema::Corrected,
        Mix {
            expired: 5,
            live: 5,
            ..Mix::default()
        },
        true,
    )
    .await;
    db.idemctl()
        .args(["evict", "--drop-partitions"])
        .run()
        .assert_error(2, "table public.idempotency_keys is not partitioned; --drop-partitions needs a table range-partitioned on expires_at or created_at");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_plan_refusals_are_worded_exactly() {
    let db = crate::support::stuck::db_with(
        Schema::Corrected,
        Mix {
            live: 5,
            stuck: 5,
            ..Mix::default()
        },
        true,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let reclaim = || db.idemctl().current_dir(dir.path()).arg("reclaim");
    reclaim()
        .args(["--plan", "plan.json", "--path", "/v1/payments"])
        .run()
        .assert_code(0);
    let text = std::fs::read_to_string(dir.path().join("plan.json")).unwrap();
    let before = fixtures::snapshot(&db).await;

    std::fs::write(dir.path().join("truncated.json"), "{\"rows\": [").unwrap();
    reclaim()
        .args(["--yes", "--apply", "truncated.json"])
        .run()
        .assert_error(2, "plan truncated.json is not a valid reclaim plan (EOF while parsing a list at line 1 column 10); nothing was changed, make a new one with --plan");

    db.exec("CREATE TABLE other_keys (LIKE idempotency_keys INCLUDING ALL)")
        .await;
    reclaim()
        .args(["--yes", "-t", "other_keys", "--apply", "plan.json"])
        .run()
        .assert_error(2, "plan plan.json was made for table public.idempotency_keys, not public.other_keys; pass --table public.idempotency_keys or make a new plan; nothing was changed");

    reclaim()
        .args(["--yes", "--apply", "plan.json", "--path", "/v1/refunds"])
        .run()
        .assert_error(2, "--path \"/v1/refunds\" differs from the plan's filter \"/v1/payments\": its rows were chosen by that one; drop --path, or make a new plan with it; nothing was changed");
    reclaim()
        .args(["--yes", "--apply", "plan.json", "--status", "503"])
        .run()
        .assert_error(2, "--status differs from the plan: --apply takes action, status, body, cutoff and --keep-failed-for from the plan file; drop --status, or make a new plan with it");

    let mut plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    plan.as_object_mut().unwrap().remove("database");
    std::fs::write(dir.path().join("nodb.json"), plan.to_string()).unwrap();
    reclaim()
        .args(["--yes", "--apply", "nodb.json"])
        .run()
        .assert_error(2, "plan nodb.json does not record which database it was made on; make a new one with --plan; nothing was changed");

    let mut plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cluster = plan["database"]["system_identifier"]
        .as_str()
        .unwrap()
        .to_owned();
    plan["database"]["name"] = "elsewhere".into();
    std::fs::write(dir.path().join("otherdb.json"), plan.to_string()).unwrap();
    reclaim()
        .args(["--yes", "--apply", "otherdb.json"])
        .run()
        .assert_error(
            2,
            &format!(
                "plan otherdb.json was made on database elsewhere of cluster {cluster}, not on {} \
                 of cluster {cluster}; connect to that database or make a new plan; nothing was \
                 changed",
                db.name()
            ),
        );
    reclaim()
        .args(["--yes", "--archive", "missing/archive.jsonl"])
        .run()
        .assert_error(2, "--archive missing/archive.jsonl: cannot open it for appending (No such file or directory (os error 2)); nothing was changed");
    db.exec("ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey")
        .await;
    reclaim()
        .args(["--yes", "--apply", "plan.json"])
        .run()
        .assert_error(2, "table public.idempotency_keys has no index on (api_key_id, key), so plan rows cannot be found without a scan; create it with: CREATE INDEX CONCURRENTLY \"idempotency_keys_scope\" ON \"public\".\"idempotency_keys\" (api_key_id, key);");
    db.idemctl()
        .args(["inspect", "k", "--api-key-id", "t"])
        .run()
        .assert_error(2, "table public.idempotency_keys has no index on its scope and key (api_key_id, key), so a key cannot be looked up without a scan; create it with: CREATE INDEX CONCURRENTLY \"idempotency_keys_scope\" ON \"public\".\"idempotency_keys\" (api_key_id, key);");
    assert_eq!(fixtures::snapshot(&db).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_refuses_max_wal_rate_where_the_wal_position_is_hidden_in_exact_words() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 5,
            ..Mix::default()
        },
    )
    .await;
    let role = format!("{}_walless", db.name());
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA public TO {role}; \
         GRANT SELECT, DELETE, UPDATE (expires_at) ON idempotency_keys TO {role}; \
         REVOKE EXECUTE ON FUNCTION pg_current_wal_insert_lsn() FROM PUBLIC"
    ))
    .await;
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["evict", "--max-wal-rate", "1MB/s"])
        .run()
        .assert_error(1, "--max-wal-rate needs the server's WAL position (pg_current_wal_insert_lsn()), which this server does not give (failed to read the server's WAL position: db error: ERROR: permission denied for function pg_current_wal_insert_lsn); run without --max-wal-rate, or cap rows with --max-rate");
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
}

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
    // A plan path that names a directory: the finished plan cannot replace it.
    std::fs::create_dir(dir.path().join("plans")).unwrap();
    reclaim().args(["--plan", "plans"]).run().assert_error(
        1,
        "failed to write plan plans: failed to replace plans: Is a directory (os error 21)",
    );
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

/// The tables the database layer's refusals are seen on: the storage table, one no profile fits,
/// an explainer table (no expiry column), one whose expiry column alone holds no zone, one whose
/// times all hold none, and one mapped by a config file.
const REFUSED_TABLES: &str = "\
    CREATE TABLE odd (key text PRIMARY KEY, expires_at timestamptz); \
    CREATE TABLE expl (key text PRIMARY KEY, request_hash text, response_status integer, \
        response_body jsonb, created_at timestamptz NOT NULL, locked_at timestamptz); \
    CREATE TABLE mixed (LIKE idempotency_keys INCLUDING ALL); \
    ALTER TABLE mixed ALTER expires_at TYPE timestamp; \
    CREATE TABLE naive (LIKE idempotency_keys INCLUDING ALL); \
    ALTER TABLE naive ALTER expires_at TYPE timestamp, ALTER created_at TYPE timestamp, \
        ALTER locked_at TYPE timestamp; \
    CREATE TABLE jobs (tok uuid PRIMARY KEY, born timestamptz NOT NULL, \"Phase\" text, \
        code smallint, answer json)";

const JOBS_MAPPING: &str = r#"[profiles.jobs]
key = "tok"
created_at = "born"
response_status = "code"
response_body = "answer"
in_flight = { column = "phase", values = ["running"], done = ["error", "ok"] }
actions = ["fail"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_layers_refusals_are_worded_exactly() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 3,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    db.exec(REFUSED_TABLES).await;
    let before = fixtures::snapshot(&db).await;
    let run = |args: &[&str]| db.idemctl().args(args).run();
    run(&["--table", "nope", "stats"]).assert_error(3, "table nope does not exist (or is not visible on search_path); check --table, or create it from sql/schema.sql");
    run(&["check", "--profile", "bogus"]).assert_error(2, "unknown profile bogus (named by --profile): expected one of storage, explainer, rocket-rides, or a [profiles.NAME] mapping in a config file (--config)");
    run(&["check", "--profile", "rocket-rides"]).assert_error(2, "table public.idempotency_keys has no column idempotency_key, column user_id, column response_code, which profile rocket-rides needs (chosen by --profile); drop --profile to detect the table's profile, or map its columns in a config file (--config)");
    run(&["-t", "odd", "evict"]).assert_error(2, "table public.odd matches no table profile (storage needs tenant column api_key_id, creation time column created_at, fingerprint column request_fingerprint, in-flight state column state; rocket-rides needs creation time column created_at, key column idempotency_key, lock time column locked_at, recovery point column recovery_point, response body column response_body, response status column response_code, tenant column user_id; explainer needs creation time column created_at, lock time column locked_at, fingerprint column request_hash, response body column response_body, response status column response_status); force one with --profile, or map the table's columns in a config file with --config (docs/profiles.md)");
    run(&["-t", "expl", "evict"]).assert_error(2, "table public.expl has no expiry column (profile explainer): keys expire a TTL after created_at, so evict needs --ttl DUR (or IDEMCTL_TTL), e.g. --ttl 24h");
    run(&["-t", "expl", "evict", "--ttl", "5m"]).assert_error(2, "the TTL 5m (from --ttl) is under 1h: table public.expl has no expiry column, so evict would take every answered key created over 5m ago as expired; give the time the API keeps keys for (e.g. 24h), or pass --force (or allow_short_ttl = true in the config file) if 5m is meant");
    run(&["-t", "expl", "reclaim", "--path", "/x", "--dry-run"]).assert_error(2, "--path does not apply to table public.expl (profile explainer): it has no request path column, so reclaim cannot tell its keys apart by it; drop --path");
    run(&["-t", "mixed", "evict"]).assert_error(2, "table public.mixed: column expires_at is timestamp without time zone while the other time columns are timestamp with time zone; idemctl reads a table's times in one kind: map columns of one kind; nothing was changed");
    run(&["-t", "naive", "evict", "--time-zone", "Nowhere/Else"]).assert_error(2, "time zone \"Nowhere/Else\" (given by --time-zone) is not one the server knows; give an IANA name as pg_timezone_names lists it, e.g. UTC or Europe/Paris; nothing was changed");
    let profile = run(&["check", "-o", "json"]).json()["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "profile")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        profile["detail"],
        "storage: the table has the columns api_key_id, created_at, expires_at, key, request_fingerprint, state",
        "{profile}"
    );

    // A config file's mapping: a column named but for case, then a predicate it cannot parse.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(&config, JOBS_MAPPING).unwrap();
    let bad = dir.path().join("bad.toml");
    let predicate = JOBS_MAPPING
        .lines()
        .filter(|l| !l.starts_with("in_flight"))
        .collect::<Vec<_>>()
        .join("\n")
        + "\nin_flight.predicate = \"code = (\"\n";
    std::fs::write(&bad, predicate).unwrap();
    let with = |file: &std::path::Path| {
        db.idemctl()
            .args(["-t", "jobs", "--config"])
            .arg(file)
            .args(["evict", "--ttl", "1d"])
            .run()
    };
    with(&config).assert_error(2, &format!("table public.jobs has no column phase but has \"Phase\": names are matched exactly, and a predicate folds an unquoted name to lower case as SQL does, so write it there with double quotes, which profile jobs needs; the mapping in config file {}, [profiles.jobs] names it; correct the mapping", config.display()));
    with(&bad).assert_error(2, &format!("config file {}: profiles.jobs.in_flight.predicate: expected a literal ('text', a number, true or false), found `(`; write column IS [NOT] NULL, column = 'text' or 42, column [NOT] IN ('a', 'b'), joined by AND, OR, NOT and parentheses", bad.display()));

    // A role without evict's grants, and one whose sessions cannot write.
    let reader = format!("{}_reader", db.name());
    let read_only = format!("{}_ro", db.name());
    db.exec(&format!(
        "CREATE ROLE {reader} LOGIN; GRANT USAGE ON SCHEMA public TO {reader}; \
         GRANT SELECT ON idempotency_keys TO {reader}; \
         CREATE ROLE {read_only} LOGIN; GRANT USAGE ON SCHEMA public TO {read_only}; \
         GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO {read_only}; \
         ALTER ROLE {read_only} SET default_transaction_read_only = on"
    ))
    .await;
    let as_role = |role: &str| {
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", role)]))
            .args(["evict"])
            .run()
    };
    as_role(&reader).assert_error(6, &format!("permission denied: role {reader} lacks DELETE, UPDATE (expires_at) on public.idempotency_keys, which evict needs; grant it with: GRANT DELETE, UPDATE (expires_at) ON \"public\".\"idempotency_keys\" TO \"{reader}\";"));
    as_role(&read_only).assert_error(6, "evict cannot run here, nothing was changed: the session is read-only (default_transaction_read_only is on for this role, database or server); connect as a role without it");

    // A database that took the durable points' function from PUBLIC (per database, as function
    // grants are).
    let no_wal = format!("{}_nowal", db.name());
    db.exec(&format!(
        "CREATE ROLE {no_wal} LOGIN; GRANT USAGE ON SCHEMA public TO {no_wal}; \
         GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO {no_wal}; \
         REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC"
    ))
    .await;
    as_role(&no_wal).assert_error(6, &format!("permission denied: role {no_wal} may not execute pg_catalog.pg_logical_emit_message(boolean, text, text), which evict calls once a second to make its deletes durable (and wait for synchronous standbys); grant it with: GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text) TO \"{no_wal}\";"));
    // The doctor says so first, with the same grant.
    let check = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &no_wal)]))
        .args(["check", "-o", "json"])
        .run();
    check.assert_code(0);
    let evict = fixtures::finding(&check.json(), "privileges: evict").clone();
    assert_eq!(evict["status"], "note", "{check}");
    assert_eq!(
        evict["detail"],
        format!(
            "{no_wal} may SELECT, DELETE and lock rows, but may not execute pg_catalog.pg_logical_emit_message(boolean, text, text), which evict calls once a second to make its deletes durable"
        ),
        "{check}"
    );
    assert_eq!(
        evict["fix"],
        format!(
            "GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text) TO \"{no_wal}\";"
        ),
        "{check}"
    );
    db.exec("GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) TO PUBLIC")
        .await;

    // Another session holds evict's maintenance lock on the table.
    let holder = db.client().await;
    let pid: i32 = holder
        .query_one(
            "SELECT pg_advisory_lock(x'1dec701'::int, 'idempotency_keys'::regclass::oid::int), \
                    pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(1);
    run(&["evict"]).assert_error(7, &format!("another evict run holds the lock on public.idempotency_keys (pid {pid}, application_name , user postgres, client local socket); this run did nothing, try again when it has finished"));
    drop(holder);
    assert_eq!(fixtures::snapshot(&db).await, before);
}

/// A database that took a catalog read idemctl needs away from PUBLIC (a hardening some
/// databases apply) ends the run at that read, naming it, with the server's words and the
/// permission-denied exit code; nothing is changed. Catalog grants are per database, so each
/// revoke stays in this test's database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_read_the_database_does_not_allow_is_named_in_exact_words() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 20,
        live: 20,
        stuck: 5,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    db.exec(
        "CREATE INDEX idempotency_keys_in_progress ON idempotency_keys \
         ((coalesce(locked_at, created_at))) WHERE state = 'in_progress'",
    )
    .await;
    let before = fixtures::snapshot(&db).await;
    let role = format!("{}_hardened", db.name());
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA public TO {role}; \
         GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO {role}"
    ))
    .await;
    let cases: &[(&str, &str, &[&str], &str)] = &[
        (
            "TABLE pg_catalog.pg_enum",
            "SELECT",
            &["stats"],
            "failed to read the key table's columns: permission denied for table pg_enum",
        ),
        (
            "TABLE pg_catalog.pg_index",
            "SELECT",
            &["stats"],
            "failed to read the key table's indexes: permission denied for table pg_index",
        ),
        (
            "FUNCTION pg_catalog.pg_control_system()",
            "EXECUTE",
            &["reclaim", "--plan", "/dev/null"],
            "failed to read which database this is: permission denied for function pg_control_system",
        ),
    ];
    for (object, privilege, args, line) in cases {
        db.exec(&format!("REVOKE {privilege} ON {object} FROM PUBLIC"))
            .await;
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
            .args(*args)
            .run()
            .assert_error(6, line);
        db.exec(&format!("GRANT {privilege} ON {object} TO PUBLIC"))
            .await;
    }
    assert_eq!(fixtures::snapshot(&db).await, before);
}

/// `idemctl stats` against `conninfo`, which it refuses before connecting.
fn stats_with(conninfo: &str) -> crate::support::Run {
    Cmd::new()
        .args([
            "stats",
            "--connect-timeout",
            "1s",
            "--database-url",
            conninfo,
        ])
        .run()
}

#[test]
fn connection_strings_are_refused_before_connecting_in_exact_words() {
    stats_with("mysql://u@h/db").assert_error(
        2,
        "invalid --database-url: unsupported URI scheme (use postgresql:// or postgres://)",
    );
    stats_with("host=/nonexistent bogus_opt=1")
        .assert_error(2, "unknown connection option \"bogus_opt\" in --database-url; see the libpq connection parameters");
    // A key that does not look like a keyword is not echoed: it may be a password's text.
    stats_with("host=/nonexistent s3cr3t!pw=1")
        .assert_error(2, "unknown connection option (not a valid keyword) in --database-url; see the libpq connection parameters");
    stats_with("host=a,b hostaddr=10.0.0.1,").assert_error(
        2,
        "invalid hostaddr in --database-url: expected an address for every host, or no hostaddr",
    );
    stats_with("host=/nonexistent ssl_min_protocol_version=TLSv1.3 ssl_max_protocol_version=TLSv1.2")
        .assert_error(2, "invalid ssl_min_protocol_version in --database-url: expected a version not above ssl_max_protocol_version");
    stats_with("host=/nonexistent sslmode=disable channel_binding=require")
        .assert_error(2, "channel_binding in --database-url: channel binding required, but SSL not in use; use sslmode=require (or verify-ca, verify-full), or remove channel_binding=require");
    stats_with("host=/nonexistent require_auth=md5,!password")
        .assert_error(2, "require_auth in --database-url: negative require_auth method \"!password\" cannot be mixed with non-negative methods");
    stats_with("host=localhost sslmode=verify-full sslrootcert=/nonexistent/root.crt")
        .assert_error(2, "root certificate file \"/nonexistent/root.crt\" does not exist; either provide the file, use the system's trusted roots (sslrootcert=system), or change sslmode");
}

/// A connection string's refusal names where the string came from: a variable or the config file.
#[test]
fn a_connection_strings_refusal_names_where_it_came_from() {
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", "host=/nonexistent bogus_opt=1")
        .args(["stats", "--connect-timeout", "1s"])
        .run()
        .assert_error(
            2,
            "unknown connection option \"bogus_opt\" in IDEMCTL_DATABASE_URL; see the libpq \
             connection parameters",
        );
    Cmd::new()
        .env("DATABASE_URL", "mysql://u@h/db")
        .args(["stats", "--connect-timeout", "1s"])
        .run()
        .assert_error(
            2,
            "invalid DATABASE_URL: unsupported URI scheme (use postgresql:// or postgres://)",
        );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "database_url = \"host=/tmp port=99999\"\n").unwrap();
    Cmd::new()
        .arg("--config")
        .arg(&config)
        .arg("stats")
        .run()
        .assert_error(
            2,
            &format!(
                "invalid port in database_url in config file {}: expected port numbers from 1 to \
                 65535",
                config.display()
            ),
        );
}

/// A user id no line of /etc/passwd names.
fn uid_without_passwd_entry() -> u32 {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let taken: Vec<&str> = passwd.lines().filter_map(|l| l.split(':').nth(2)).collect();
    (4242..)
        .find(|uid: &u32| !taken.contains(&uid.to_string().as_str()))
        .unwrap()
}

/// Without `user` in the connection string, PGUSER, USER or LOGNAME, the OS user comes from the
/// passwd file; a process whose uid has no line there (a container's arbitrary uid) is refused
/// before connecting. The uid is given by a user namespace (`unshare --user`), which needs no
/// root.
#[test]
fn a_user_id_without_a_name_is_refused_before_connecting_in_exact_words() {
    let uid = uid_without_passwd_entry().to_string();
    let run = Cmd::of("unshare")
        .args([
            "--user",
            &format!("--map-user={uid}"),
            &format!("--map-group={uid}"),
            crate::support::cmd::IDEMCTL,
            "stats",
            "--connect-timeout",
            "1s",
            "--database-url",
            NOWHERE,
        ])
        .env_remove("USER")
        .env_remove("LOGNAME")
        .run();
    assert!(
        !run.stderr.starts_with("unshare:"),
        "this test runs idemctl as uid {uid} in a user namespace, which `unshare --user` could not \
         make here (enable unprivileged user namespaces, e.g. sysctl \
         kernel.unprivileged_userns_clone=1, or run the tests as root)\n{run}"
    );
    run.assert_error(
        2,
        "cannot determine the OS user name; set PGUSER or user= in --database-url",
    );
}

#[test]
fn service_files_and_client_keys_are_refused_before_connecting_in_exact_words() {
    let dir = tempfile::tempdir().unwrap();
    let services = dir.path().join("pg_service.conf");
    std::fs::write(&services, "[outer]\nservice=inner\n").unwrap();
    Cmd::new()
        .env("PGSERVICEFILE", &services)
        .args(["stats", "--database-url", "service=outer"])
        .run()
        .assert_error(
            2,
            &format!(
                "nested service specifications not supported in service file \"{}\", line 2",
                services.display()
            ),
        );

    use std::os::unix::fs::PermissionsExt;
    let testdata = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/conn/testdata");
    let key = dir.path().join("client.key");
    std::fs::copy(testdata.join("client.key"), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let conninfo = format!(
        "host=localhost sslmode=require sslcert={} sslkey={}",
        testdata.join("client.crt").display(),
        key.display()
    );
    stats_with(&conninfo).assert_error(
        2,
        &format!(
            "private key file \"{}\" has group or world access; permissions should be u=rw (0600) or less if owned by the current user, or u=rw,g=r (0640) or less if owned by root",
            key.display()
        ),
    );
}

#[test]
fn an_unsafe_password_file_is_skipped_with_a_warning_and_the_failed_connection_named() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let passfile = dir.path().join("pgpass");
    std::fs::write(&passfile, "*:*:*:*:secret-pw\n").unwrap();
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = stats_with(&format!(
        "host=/nonexistent/idemctl-test port=1 user=u dbname=none passfile={}",
        passfile.display()
    ));
    run.assert_code(5).assert_stderr(&format!(
        "idemctl: warning: password file \"{}\" has group or world access; permissions should be u=rw (0600) or less; ignoring it\n\
         idemctl: cannot connect to user \"u\" at socket directory \"/nonexistent/idemctl-test\" port 1, database \"none\": no server socket found (is the server running?) (retried for 1s)\n",
        passfile.display()
    ));
}

#[test]
fn config_files_are_refused_before_connecting_in_exact_words() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let run = nowhere().arg("--config").arg(&path).args(["stats"]).run();
        (run, path.display().to_string())
    };
    let mapping = "[profiles.billing]\nkey = \"request_id\"\n";
    let (r, file) = run(
        "fail.toml",
        &format!(
            "{mapping}response_status = \"status\"\nresponse_body = \"body\"\nin_flight.predicate = \"done_at IS NULL\"\nactions = [\"fail\"]\n"
        ),
    );
    r.assert_error(2, &"config file <file>: profiles.billing.actions: fail writes the response columns, which the in-flight predicate does not read, so a failed key would stay in flight; make the predicate read response_status or response_body, or drop fail".replace("<file>", &file));
    let (r, file) = run(
        "several.toml",
        &format!("{mapping}[profiles.ledger]\nkey = \"id\"\n"),
    );
    r.assert_error(2, &"config file <file> maps several profiles (billing, ledger); choose one with --profile, IDEMCTL_PROFILE or profile = \"NAME\" in the file".replace("<file>", &file));
    let (r, file) = run(
        "both.toml",
        &format!(
            "{mapping}in_flight.column = \"state\"\nin_flight.values = [\"running\"]\nin_flight.done = [\"running\", \"done\"]\n"
        ),
    );
    r.assert_error(2, &"config file <file>: profiles.billing.in_flight: state \"running\" is listed both in values (in flight) and in done; a key in it would be evicted while in flight: list it in one of them".replace("<file>", &file));
    let (r, file) = run(
        "predicate.toml",
        &format!("{mapping}in_flight.predicate = \"done_at IS NULL;\"\n"),
    );
    r.assert_error(2, &"config file <file>: profiles.billing.in_flight.predicate: unexpected `;`; write column IS [NOT] NULL, column = 'text' or 42, column [NOT] IN ('a', 'b'), joined by AND, OR, NOT and parentheses".replace("<file>", &file));
}

/// The `user ... at ..., database ...` words idemctl names a connection string's target by (a
/// key=value conninfo with a socket directory, as the test cluster's).
fn target_words(conninfo: &str) -> String {
    let get = |key: &str| {
        conninfo
            .split_whitespace()
            .find_map(|p| p.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .to_owned()
    };
    format!(
        "user {:?} at socket directory {:?} port {}, database {:?}",
        get("user"),
        get("host"),
        get("port"),
        get("dbname")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_does_not_fit_target_session_attrs_is_refused_in_exact_words() {
    let db = TestDb::new().await;
    let url = db.url_with(&[
        ("options", "-c default_transaction_read_only=on"),
        ("target_session_attrs", "read-write"),
    ]);
    let run = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["stats", "--connect-timeout", "5s"])
        .run_async()
        .await;
    run.assert_error(
        5,
        &format!(
            "cannot connect to {}: session is read-only (target_session_attrs=read-write): list a writable server, connect as a role without default_transaction_read_only, or change target_session_attrs",
            target_words(&db.url())
        ),
    );
}

/// A key looked up without its tenant on a table with more tenants than inspect probes: the key
/// found among those probed is shown, and a warning says the search stopped there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_past_the_tenants_inspect_probes_is_worded_exactly() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, response_status, response_body, expires_at) \
         SELECT CASE WHEN g = 1 THEN 'only' ELSE 'k' END, 'tenant-' || lpad(g::text, 5, '0'), \
         'POST', '/v1/x', '\\x00', 'completed', 200, '{}', now() + interval '1 day' \
         FROM generate_series(1, 10001) g; \
         ANALYZE idempotency_keys",
    )
    .await;
    let run = db.idemctl().args(["inspect", "only", "-o", "json"]).run();
    run.assert_code(0).assert_stderr(
        "idemctl: warning: searched only the first 10000 tenants; pass --api-key-id for an exact lookup\n",
    );
    assert_eq!(run.json()["api_key_id"], "tenant-00001", "{run}");
}

/// A partition whose DROP the server refuses for a reason other than a lock or a dependent object
/// (here an event trigger guarding DDL) ends `evict --drop-partitions` naming the partition and the
/// server's words; its transaction rolls back, so the partition is still attached and every row
/// is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_the_server_will_not_drop_ends_evict_in_exact_words() {
    use crate::support::partman::{self, PartitionBy};
    let db = TestDb::new().await;
    partman::create(&db, PartitionBy::ExpiresAt, true).await;
    fixtures::load(
        &db,
        Mix {
            expired: 300,
            live: 50,
            ..Mix::default()
        },
    )
    .await;
    db.exec(
        "CREATE FUNCTION no_drops() RETURNS event_trigger LANGUAGE plpgsql AS \
         $$BEGIN RAISE EXCEPTION 'tables are not dropped here' USING HINT = 'ask the DBA'; END$$; \
         CREATE EVENT TRIGGER no_drops ON ddl_command_start WHEN TAG IN ('DROP TABLE') \
         EXECUTE FUNCTION no_drops()",
    )
    .await;
    let before = fixtures::snapshot(&db).await;
    let partitions = partman::partition_names(&db).await;
    // The oldest partition whose keys have all expired is the first evict tries.
    let first = partman::droppable(&db).await.into_iter().min().unwrap();
    let run = db
        .idemctl()
        .args([
            "evict",
            "--drop-partitions",
            "-o",
            "json",
            "--drop-lock-timeout",
            "5s",
        ])
        .run_async()
        .await;
    run.assert_code(1).assert_stderr(&format!(
        "idemctl: failed to drop partition public.{first}: tables are not dropped here; hint: ask \
         the DBA\n"
    ));
    let j = run.json();
    assert_eq!(j["end_reason"], "error", "{run}");
    assert_eq!(j["dropped_partitions"], serde_json::json!([]), "{run}");
    assert_eq!(partman::partition_names(&db).await, partitions);
    assert_eq!(fixtures::snapshot(&db).await, before);
}

/// A run whose sessions are terminated after a batch committed since its last durable point says
/// how many of the keys it deleted were made durable and how many more were not yet, then the step
/// it was at (claiming the next range: no batch was in flight) and the server's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_that_loses_its_connection_between_durable_points_says_so_exactly() {
    use std::time::{Duration, Instant};
    let db = TestDb::new().await;
    let expired = Mix {
        expired: 3000,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, expired).await;
    let client = db.client().await;
    let evict = db
        .idemctl()
        .args([
            "evict",
            "-o",
            "json",
            "--batch-size",
            "20",
            "--pause",
            "100ms",
        ])
        .timeout(Duration::from_secs(60))
        .spawn();
    // What each idemctl session ran last: a durable point ends with a COMMIT sent on its own (the
    // batches are single statements, so no other COMMIT is sent here), which stays the session's
    // last statement through the pause after it; a batch by the comment it starts with (the server
    // keeps a statement's first 1 kB); and whether it has finished.
    let watch = "SELECT state = 'idle', btrim(query, E' \\n') = 'COMMIT', \
                        query LIKE '-- evict: one batch,%' \
                   FROM pg_stat_activity \
                  WHERE application_name = 'idemctl' AND datname = current_database()";
    let started = Instant::now();
    // When the last durable point was first seen: the next comes a second after it.
    let mut durable_point: Option<Instant> = None;
    let mut in_durable_point = false;
    loop {
        let rows = client.query(watch, &[]).await.unwrap();
        let seen = |column: usize| {
            rows.iter()
                .any(|r| r.get::<_, Option<bool>>(column) == Some(true))
        };
        let batch_done = rows.iter().any(|r| {
            r.get::<_, Option<bool>>(0) == Some(true) && r.get::<_, Option<bool>>(2) == Some(true)
        });
        let now_durable = seen(1);
        if now_durable && !in_durable_point {
            durable_point = Some(Instant::now());
        }
        in_durable_point = now_durable;
        if !now_durable
            && batch_done
            && durable_point.is_some_and(|at| at.elapsed() < Duration::from_millis(400))
        {
            // A batch committed after the durable point, well before the next. Hold evict still
            // (SIGSTOP) and look again, so that its sessions are ended while it pauses, however
            // late this sees it.
            let pid = evict.pid().to_string();
            let signal = |name: &str| {
                Cmd::of("kill")
                    .args(["-s", name, &pid])
                    .run()
                    .assert_code(0);
            };
            signal("STOP");
            let rows = client.query(watch, &[]).await.unwrap();
            let still = rows.iter().all(|r| {
                r.get::<_, Option<bool>>(0) == Some(true)
                    && r.get::<_, Option<bool>>(2) == Some(true)
            });
            if still && !rows.is_empty() {
                client
                    .batch_execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                          WHERE application_name = 'idemctl' AND datname = current_database()",
                    )
                    .await
                    .unwrap();
                signal("CONT");
                break;
            }
            signal("CONT");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "evict never committed a batch after a durable point"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let run = evict.wait_async().await;
    let j = run.json();
    let evicted = j["rows_evicted"].as_u64().unwrap();
    let unconfirmed = j["rows_unconfirmed"].as_u64().unwrap();
    assert!(unconfirmed > 0 && unconfirmed < evicted, "{run}");
    run.assert_code(1).assert_stderr(&format!(
        "idemctl: evict lost its connection: {} keys deleted and confirmed durable, {unconfirmed} \
         more deleted since the last durable point (a crash or failover may bring them back; the \
         next run deletes them again): failed to find the next batch's range: the server ended \
         the connection: terminating connection due to administrator command (SQLSTATE 57P01)\n",
        evicted - unconfirmed
    ));
    assert_eq!(
        fixtures::scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        3000 - evicted as i64
    );
}

/// On a terminal, reclaim asks before it writes, naming the action (here the status `--action
/// fail` stores), the count, the table and the filters; an answer other than yes changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaims_question_and_a_no_are_worded_exactly() {
    let asked = answered_no(6, "--action fail --status 503 --path /v1/payments").await;
    assert_eq!(
        asked,
        [
            "reclaim: mark completed with status 503 6 in_progress keys of \
             public.idempotency_keys (path /v1/payments) held longer than 5m? [y/N] n",
            "idemctl: reclaim not confirmed; nothing was changed",
            "EXIT=2",
        ]
    );
    // One key is one key.
    let asked = answered_no(1, "--action delete").await;
    assert_eq!(
        asked,
        [
            "reclaim: delete 1 in_progress key of public.idempotency_keys held longer than 5m? \
             [y/N] n",
            "idemctl: reclaim not confirmed; nothing was changed",
            "EXIT=2",
        ]
    );
}

/// The lines of a terminal where reclaim with `args` was answered no, on a table with `stuck`
/// stuck keys, which the answer left unchanged.
async fn answered_no(stuck: i64, args: &str) -> Vec<String> {
    use crate::top::Tmux;
    use std::time::Duration;
    let db = crate::support::stuck::db_with_stuck(stuck, 10).await;
    let before = fixtures::snapshot(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("reclaim.sh");
    std::fs::write(
        &script,
        format!(
            "'{}' -d '{}' reclaim {args}\necho \"EXIT=$?\"\nsleep 600\n",
            crate::support::IDEMCTL,
            db.url()
        ),
    )
    .unwrap();
    let terminal = Tmux::start(&script);
    terminal.wait_for("the question", Duration::from_secs(30), |s| {
        s.contains("[y/N]")
    });
    terminal.keys("n");
    terminal.keys("Enter");
    terminal.wait_for("the exit status", Duration::from_secs(30), |s| {
        s.contains("EXIT=")
    });
    let mut lines = terminal.lines();
    lines.retain(|l| !l.is_empty());
    assert_eq!(fixtures::snapshot(&db).await, before);
    lines
}

/// evict on a distributed table whose adaptive pace cannot read the activity on one worker (its
/// database revoked a function the pace's sample calls, which the other nodes still allow) ends
/// naming that worker and the server's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pace_that_cannot_be_set_up_on_a_worker_is_worded_exactly() {
    use crate::support::citus::Layout;
    let Some(db) = crate::citus::loaded_with(
        Layout::ByTenant,
        crate::citus::MIX,
        "citus evict pace set-up",
    )
    .await
    else {
        return;
    };
    // A role that sees other sessions on every node (the adaptive pace's condition).
    let role = format!("pacer_{}", &db.name[db.name.len() - 8..]);
    db.exec_alone(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO {role}"
    ))
    .await;
    for node in 0..3 {
        db.node_client(node)
            .await
            .batch_execute(&format!("GRANT pg_monitor TO {role}"))
            .await
            .unwrap();
    }
    db.node_client(1)
        .await
        .batch_execute(
            "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_partition_tree(regclass) FROM PUBLIC",
        )
        .await
        .unwrap();
    let worker = format!("127.0.0.1:{}", db.cluster().workers()[0].port);
    let before = crate::citus::snapshot(&db).await.len();
    let run = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["evict", "-o", "json"])
        .run_async()
        .await;
    run.assert_code(6).assert_stderr(&format!(
        "idemctl: failed to set up evict's pace on worker {worker}: failed to sample the other \
         sessions' activity: permission denied for function pg_partition_tree\n"
    ));
    // The other worker's batches stopped at the error; what they deleted is what the run says.
    let j = run.json();
    assert_eq!(j["end_reason"], "error", "{run}");
    let gone = before - crate::citus::snapshot(&db).await.len();
    assert_eq!(j["rows_evicted"], gone, "{run}");
}

/// The same on one server: the pace's sample is refused there, before any batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pace_that_cannot_be_set_up_is_worded_exactly() {
    let db = TestDb::new().await;
    let expired = Mix {
        expired: 50,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, expired).await;
    let role = format!("{}_pacer", db.name());
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN IN ROLE pg_monitor; GRANT USAGE ON SCHEMA public TO {role}; \
         GRANT SELECT, DELETE, UPDATE (expires_at) ON idempotency_keys TO {role}; \
         REVOKE EXECUTE ON FUNCTION pg_catalog.pg_partition_tree(regclass) FROM PUBLIC"
    ))
    .await;
    let before = fixtures::snapshot(&db).await;
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["evict"])
        .run()
        .assert_code(6)
        .assert_stderr(
            "idemctl: failed to set up evict's pace: failed to sample the other sessions' \
             activity: permission denied for function pg_partition_tree\n",
        );
    assert_eq!(fixtures::snapshot(&db).await, before);
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
}

//! Key tables as frameworks create them: `timestamp without time zone` read in a declared zone,
//! with the clock converted to the columns' type (never the column); each command end to end, and
//! evict checked by SQL to remove exactly the expired rows, half an hour either side of the cut-off.

use crate::fixtures::{loaded, scalar_i64, scalar_text};
use crate::support::TestDb;
use serde_json::json;

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
pub(crate) async fn kinds_left(db: &TestDb, table: &str, key: &str) -> Vec<(String, i64)> {
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

/// A framework's table and mapping as docs/profiles.md prints them (its `### NAME` section's first
/// sql and toml blocks), loaded with `rows` and analyzed, the mapping in a file.
struct Shape {
    db: TestDb,
    dir: tempfile::TempDir,
}

/// The first ```lang block of docs/profiles.md's `### name` section.
pub(crate) fn doc_block(name: &str, lang: &str) -> String {
    let doc = crate::config_file::profiles_doc();
    let section = doc
        .split(&format!("\n### {name}\n"))
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .and_then(|s| s.split("\n### ").next())
        .unwrap_or_else(|| panic!("docs/profiles.md has no section ### {name}"));
    section
        .split(&format!("```{lang}\n"))
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .unwrap_or_else(|| panic!("### {name} has no {lang} block"))
        .to_owned()
}

impl Shape {
    async fn new(name: &str, rows: &str) -> Shape {
        let db = loaded(&doc_block(name, "sql"), rows, None).await;
        far_session_zone(&db).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("idemctl.toml"), doc_block(name, "toml")).unwrap();
        Shape { db, dir }
    }

    fn idemctl(&self) -> crate::support::cmd::Cmd {
        let config = self.dir.path().join("idemctl.toml");
        self.db
            .idemctl()
            .args(["--config", &config.to_string_lossy()])
    }

    /// Rows left, counted by the kind `expr` yields (`near-old`, ...).
    async fn kinds(&self, table: &str, expr: &str) -> Vec<(String, i64)> {
        let rows = self
            .db
            .client()
            .await
            .query(
                &format!("SELECT {expr} AS kind, count(*) FROM {table} GROUP BY 1 ORDER BY 1"),
                &[],
            )
            .await
            .unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    }

    /// check, stats (its backlog), then evict: exactly the `kept` kinds stay. `backlog`: the
    /// expired backlog stats counts through the expiry index; None on a table without one, where
    /// the backlog is estimated and evict walks the primary key in pages of 5 entries, reading each
    /// row once, after a dry run that reads the same pages and counts exactly what it deletes.
    async fn evicts_exactly(
        &self,
        table: &str,
        kind: &str,
        backlog: Option<i64>,
        kept: &[(&str, i64)],
    ) {
        let run = self.idemctl().arg("check").run();
        run.assert_success();
        let run = self.idemctl().args(["-o", "json", "stats"]).run();
        run.assert_success();
        match backlog {
            Some(n) => assert_eq!(run.json()["expired_backlog"]["count"], n, "{run}"),
            None => {
                assert_eq!(run.json()["expiry_figures"], "estimated", "{run}");
                assert!(run.stdout.contains("\"expired_backlog_estimate\""), "{run}");
            }
        }
        let rows = scalar_i64(&self.db, &format!("SELECT count(*) FROM {table}")).await;
        // On a walk, the dry run reads the same pages first: it counts what the run deletes.
        let would = match backlog {
            Some(_) => None,
            None => {
                let run = self
                    .idemctl()
                    .args(["-o", "json", "evict", "--batch-size", "5", "--dry-run"])
                    .run();
                run.assert_success();
                assert_eq!(run.json()["walk"]["rows_examined"], rows, "{run}");
                Some(run.json()["would_evict"]["count"].as_i64().unwrap())
            }
        };
        let run = self
            .idemctl()
            .args(["-o", "json", "evict", "--batch-size", "5"])
            .run();
        run.assert_success();
        let report = run.json();
        if let Some(would) = would {
            let left = scalar_i64(&self.db, &format!("SELECT count(*) FROM {table}")).await;
            assert_eq!(rows - left, would, "{run}");
        }
        if backlog.is_none() {
            assert!(
                run.stderr.contains("evict walks") && run.stderr.contains("CREATE INDEX"),
                "{run}"
            );
            assert_eq!(report["walk"]["rows_examined"], rows, "{run}");
        } else {
            assert!(report.get("walk").is_none(), "{run}");
        }
        let kept: Vec<(String, i64)> = kept.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect();
        assert_eq!(self.kinds(table, kind).await, kept);
    }
}

/// The clock in UTC as a `timestamp without time zone` application writes it, shifted by `by`.
fn utc(by: &str) -> String {
    format!("((now() AT TIME ZONE 'UTC') + interval '{by}')")
}

/// TypeORM: character varying, jsonb, timestamp without time zone, no expiry column, no in-flight
/// marker: evict removes every key older than the TTL (30 minutes past it included, 30 minutes
/// short of it not); reclaim has nothing to do; inspect and check say there is no marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typeorm_table_is_maintained_as_shipped() {
    let row = |kind: &str, created: &str| {
        format!(
            "INSERT INTO idempotency_key (\"key\", \"userId\", \"statusCode\", response, \"createdAt\") \
             SELECT '{kind}-' || g, 'user-' || g % 2, 201, jsonb_build_object('id', g), {created} \
             FROM generate_series(1, 4) g;"
        )
    };
    let rows = [
        row("near-old", &utc("-24 hours -30 minutes")),
        row("near-new", &utc("-23 hours -30 minutes")),
        row("done-old", &utc("-3 days")),
    ]
    .concat();
    let s = Shape::new("TypeORM", &rows).await;
    let stats = s.idemctl().args(["stats", "-o", "json"]).run();
    let notes = stats.json()["notes"].clone();
    assert_eq!(notes.as_array().map(Vec::len), Some(2), "{stats}");
    assert_eq!(
        notes[0],
        "table public.idempotency_key has no index on createdAt: the expired backlog and the eviction lag are estimated from the planner's statistics, and the oldest live key is unknown (finding it would read the whole table); evict walks the table's unique index meanwhile. The index makes them exact: CREATE INDEX CONCURRENTLY \"idempotency_key_expiry\" ON \"public\".\"idempotency_key\" (\"createdAt\");",
        "{stats}"
    );
    assert_eq!(
        notes[1],
        "table public.idempotency_key has no in-flight marker (profile typeorm maps no in_flight): no key is ever in flight, so none is stuck, reclaim has nothing to do and no in_progress index is needed; evict removes every expired key no live transaction holds",
        "{stats}"
    );
    let run = s.idemctl().arg("check").run();
    run.assert_success()
        .assert_stdout_contains("has no in-flight marker (profile typeorm maps no in_flight)")
        .assert_stdout_contains("evict walks \"PK_idempotency_key_id\" instead")
        .assert_stdout_contains("CREATE INDEX CONCURRENTLY \"idempotency_key_expiry\" ON \"public\".\"idempotency_key\" (\"createdAt\");");
    // No in-flight index is proposed: the table has no marker.
    assert!(!run.stdout.contains(" WHERE "), "{run}");
    let run = s
        .idemctl()
        .args([
            "-o",
            "json",
            "inspect",
            "near-new-1",
            "--api-key-id",
            "user-1",
        ])
        .run();
    run.assert_success();
    let j = run.json();
    assert_eq!(j["state"], "unmarked", "{run}");
    assert_eq!(j["response_body"]["id"], 1, "{run}");
    assert_eq!(j["response_body_encoding"], "json", "{run}");
    s.idemctl()
        .args(["inspect", "near-old-1", "--api-key-id", "user-1"])
        .run()
        .assert_success()
        .assert_stdout_contains("no in-flight marker (the table has none, so idemctl takes every key as finished), expired");
    s.idemctl()
        .args(["reclaim", "--dry-run"])
        .run()
        .assert_success()
        .assert_stdout_contains(
            "nothing to reclaim: table public.idempotency_key has no in-flight marker",
        );
    s.idemctl()
        .args(["reclaim", "--yes"])
        .run()
        .assert_error(2, "table public.idempotency_key has no in-flight marker (profile typeorm maps no in_flight): no key is ever in flight, so there is nothing to reclaim; nothing was changed");
    s.evicts_exactly(
        "idempotency_key",
        "split_part(\"key\", '-', 1) || '-' || split_part(\"key\", '-', 2)",
        None,
        &[("near-new", 4)],
    )
    .await;
}

/// JDBC/Flyway: TIMESTAMP columns, a three-column primary key mapped as a scope of two columns
/// (request_type, client_id), a state column and a bytea result: check takes the primary key as the
/// identity; inspect looks a key up by its whole scope and lists the scopes holding it when given
/// part of it or none; reclaim (a filtered sweep, then a plan applied) removes exactly the stuck
/// rows; evict keeps in-flight and live keys (30 minutes short of expiry kept, 30 minutes past it
/// removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jdbc_table_is_maintained_as_shipped() {
    let row = |kind: &str, ty: &str, status: &str, created: &str, expires: &str| {
        format!(
            "INSERT INTO idempotency_record (idempotency_key, request_type, client_id, status, result, created_at, expires_at) \
             SELECT '{kind}-' || g, '{ty}', 'client-' || g % 2, '{status}', \
             CASE WHEN '{status}' = 'COMPLETED' THEN convert_to('{{\"ok\": ' || g || ', \"type\": \"{ty}\"}}', 'UTF8') END, \
             {created}, {expires} FROM generate_series(1, 3) g;"
        )
    };
    // Each key under two request types of the same client: unique only within the whole scope.
    let rows: String = ["payment", "refund"]
        .iter()
        .flat_map(|ty| {
            [
                row(
                    "near-old",
                    ty,
                    "COMPLETED",
                    &utc("-2 days"),
                    &utc("-30 minutes"),
                ),
                row(
                    "near-new",
                    ty,
                    "COMPLETED",
                    &utc("-2 days"),
                    &utc("30 minutes"),
                ),
                row("done-old", ty, "COMPLETED", &utc("-2 days"), &utc("-1 day")),
                row(
                    "busy-old",
                    ty,
                    "IN_PROGRESS",
                    &utc("-2 days"),
                    &utc("-1 day"),
                ),
                row(
                    "busy-new",
                    ty,
                    "IN_PROGRESS",
                    &utc("-1 minute"),
                    &utc("1 day"),
                ),
            ]
        })
        .collect();
    let s = Shape::new("JDBC (Flyway)", &rows).await;
    let run = s.idemctl().arg("check").run();
    run.assert_success().assert_stdout_contains(
        "pk_idempotency_record is unique on (idempotency_key, request_type, client_id), so (request_type, client_id, idempotency_key) identifies a row",
    );
    assert!(!run.stdout.contains("CREATE UNIQUE INDEX"), "{run}");

    // The whole scope: one record.
    let run = s
        .idemctl()
        .args(["inspect", "near-new-1", "--scope", "client_id=client-1"])
        .args(["--scope", "request_type=refund"])
        .run();
    run.assert_success()
        .assert_stdout_contains("response_body (bytea, shown as JSON)")
        .assert_stdout_contains("\"type\": \"refund\"");
    let run = s
        .idemctl()
        .args(["-o", "json", "inspect", "near-new-1"])
        .args([
            "--scope",
            "request_type=payment",
            "--scope",
            "client_id=client-1",
        ])
        .run();
    run.assert_success();
    assert_eq!(run.json()["api_key_id"], "{payment,client-1}", "{run}");
    assert_eq!(
        run.json()["scope"],
        serde_json::json!({"request_type": "payment", "client_id": "client-1"}),
        "{run}"
    );
    assert_eq!(
        run.json()["response_body"],
        "{\"ok\": 1, \"type\": \"payment\"}",
        "{run}"
    );
    s.idemctl()
        .args(["inspect", "near-new-1", "--scope", "request_type=payment"])
        .args(["--scope", "client_id=client-0"])
        .run()
        .assert_error(
            3,
            "key near-new-1 not found for request_type=payment client_id=client-0",
        );
    // Part of the scope, or none: the scopes holding the key are listed, never guessed.
    for part in [&["--scope", "client_id=client-1"][..], &[]] {
        let run = s.idemctl().args(["inspect", "near-new-1"]).args(part).run();
        run.assert_code(2)
            .assert_stdout_contains("The key exists under several scopes:")
            .assert_stdout_contains("request_type")
            .assert_stdout_contains("client_id")
            .assert_stderr("idemctl: key near-new-1 exists under 2 scopes; pass --scope COLUMN=VALUE for each of request_type, client_id to choose one\n");
    }
    let run = s
        .idemctl()
        .args([
            "-o",
            "json",
            "inspect",
            "near-new-1",
            "--scope",
            "request_type=refund",
        ])
        .run();
    run.assert_success();
    assert_eq!(run.json()["api_key_id"], "{refund,client-1}", "{run}");
    s.idemctl()
        .args(["inspect", "near-new-2", "--scope", "request_type=void"])
        .run()
        .assert_error(
            3,
            "key near-new-2 not found under any scope with request_type=void",
        );

    // Reclaim: the stuck keys of one scope (the filter takes the scope as reclaim prints it), then
    // the rest through a reviewed plan; the keys taken a minute ago stay.
    let run = s
        .idemctl()
        .args(["-o", "json", "reclaim", "--dry-run", "--allow-scan"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["would_reclaim"]["count"], 6, "{run}");
    let run = s
        .idemctl()
        .args(["-o", "json", "reclaim", "--yes", "--allow-scan"])
        .args(["--api-key-id", "{refund,client-1}"])
        .run();
    run.assert_success();
    let busy = "SELECT coalesce(string_agg(r, ' ' ORDER BY r), '') FROM (SELECT idempotency_key \
                || '/' || request_type || '/' || client_id AS r FROM idempotency_record \
                WHERE idempotency_key LIKE 'busy-old-%') rows";
    assert_eq!(
        scalar_text(&s.db, busy).await,
        "busy-old-1/payment/client-1 busy-old-2/payment/client-0 busy-old-2/refund/client-0 \
         busy-old-3/payment/client-1",
        "{run}"
    );
    let plan = s.dir.path().join("plan.json");
    s.idemctl()
        .args(["reclaim", "--allow-scan", "--plan"])
        .arg(&plan)
        .run()
        .assert_success();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let scopes: Vec<&str> = written["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["api_key_id"].as_str().unwrap())
        .collect();
    assert!(scopes.contains(&"{refund,client-0}"), "{written}");
    let run = s
        .idemctl()
        .args(["-o", "json", "reclaim", "--yes", "--allow-scan", "--apply"])
        .arg(&plan)
        .run();
    run.assert_success();
    assert_eq!(run.json()["rows_reclaimed"], 4, "{run}");
    assert_eq!(scalar_text(&s.db, busy).await, "", "{run}");
    s.evicts_exactly(
        "idempotency_record",
        "split_part(idempotency_key, '-', 1) || '-' || split_part(idempotency_key, '-', 2)",
        None,
        &[("busy-new", 6), ("near-new", 6)],
    )
    .await;
}

/// A multi-column scope is shown column by column: inspect's text names each scope column with its
/// value, `-o json` carries them as an object beside the one-text `api_key_id`, and so do
/// reclaim's preview and evict's sample. Values holding a comma, a quote, a brace, a backslash or
/// the word NULL come back exactly, and the one text printed is accepted back by --api-key-id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_of_several_columns_is_shown_column_by_column_exactly() {
    let awkward = [
        ("a,b", "c-1"),
        ("say \"hi\"", "{x}"),
        ("NULL", "back\\slash"),
        ("", " spaced "),
    ];
    let rows: String = awkward
        .iter()
        .map(|(ty, client)| {
            format!(
                "INSERT INTO idempotency_record VALUES ('k', {}, {}, 'IN_PROGRESS', NULL, \
                 (now() AT TIME ZONE 'UTC') - interval '2 days', (now() AT TIME ZONE 'UTC') - interval '1 day');",
                sql_literal(ty),
                sql_literal(client)
            )
        })
        .collect();
    let s = Shape::new("JDBC (Flyway)", &rows).await;
    for (ty, client) in awkward {
        let run = s
            .idemctl()
            .args(["-o", "json", "inspect", "k"])
            .arg("--scope")
            .arg(format!("request_type={ty}"))
            .arg("--scope")
            .arg(format!("client_id={client}"))
            .run();
        run.assert_success();
        let j = run.json();
        assert_eq!(
            j["scope"],
            serde_json::json!({"request_type": ty, "client_id": client}),
            "{run}"
        );
        // The one text is the server's text array, and is taken back as it is printed.
        let text = j["api_key_id"].as_str().unwrap().to_owned();
        let again = s
            .idemctl()
            .args(["-o", "json", "inspect", "k", "--api-key-id", &text])
            .run();
        again.assert_success();
        assert_eq!(again.json()["scope"], j["scope"], "{again}");
        let run = s
            .idemctl()
            .args(["inspect", "k", "--api-key-id", &text])
            .run();
        run.assert_success();
        // Each scope column on its own line, by its name, with its value.
        for (column, value) in [("request_type", ty), ("client_id", client)] {
            let shown = run
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{column} ")))
                .map(|v| v.trim_start_matches(' '));
            // Escaped for the terminal: a backslash is shown doubled; a text that reads NULL, and
            // the empty text, are shown in double quotes, told apart from a NULL.
            let mut escaped = value.trim_start().replace('\\', "\\\\");
            if escaped.is_empty() || escaped.eq_ignore_ascii_case("null") {
                escaped = format!("\"{escaped}\"");
            }
            assert_eq!(shown, Some(escaped.as_str()), "{run}");
        }
        assert!(!run.stdout.contains("api_key_id"), "{run}");
    }
    // Part of the scope: the listing names each column.
    let run = s.idemctl().args(["-o", "json", "inspect", "k"]).run();
    run.assert_code(2);
    let listed: Vec<serde_json::Value> = run.json()["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["scope"].clone())
        .collect();
    assert_eq!(listed.len(), awkward.len(), "{run}");
    for (ty, client) in awkward {
        let want = serde_json::json!({"request_type": ty, "client_id": client});
        assert!(listed.contains(&want), "{want} in {run}");
    }
    // reclaim's preview and evict's sample carry the same object per key.
    let run = s
        .idemctl()
        .args(["-o", "json", "reclaim", "--dry-run", "--allow-scan"])
        .run();
    run.assert_success();
    let previewed: Vec<serde_json::Value> = run.json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["scope"].clone())
        .collect();
    for (ty, client) in awkward {
        let want = serde_json::json!({"request_type": ty, "client_id": client});
        assert!(previewed.contains(&want), "{want} in {run}");
    }
    let run = s
        .idemctl()
        .args(["reclaim", "--dry-run", "--allow-scan"])
        .run();
    run.assert_success()
        .assert_stdout_contains("request_type")
        .assert_stdout_contains("client_id")
        .assert_stdout_contains("say \"hi\"");
    // evict's sample: the expired keys (every one here) with their scope objects.
    s.db.exec(
        "UPDATE idempotency_record SET status = 'COMPLETED'; \
         CREATE INDEX ON idempotency_record (expires_at);",
    )
    .await;
    let run = s.idemctl().args(["-o", "json", "evict", "--dry-run"]).run();
    run.assert_success();
    let sampled: Vec<serde_json::Value> = run.json()["sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["scope"].clone())
        .collect();
    for (ty, client) in awkward {
        let want = serde_json::json!({"request_type": ty, "client_id": client});
        assert!(sampled.contains(&want), "{want} in {run}");
    }
}

/// Rails 7: timestamp(6) without time zone, a bytea digest key given as psql prints it, a bytea
/// body (text or binary), a recovery point released by reclaim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rails_table_is_maintained_as_shipped() {
    let row = |kind: &str, point: &str, created: &str, locked: &str, body: &str| {
        format!(
            "INSERT INTO idempotency_keys (account_id, key_digest, request_method, request_path, recovery_point, \
             locked_at, response_code, response_body, created_at, updated_at) \
             SELECT g % 2, sha256(('{kind}-' || g)::bytea), 'POST', '/charges/{kind}', '{point}', {locked}, \
             CASE WHEN '{point}' = 'finished' THEN 201 END, {body}, {created}, {created} \
             FROM generate_series(1, 4) g;"
        )
    };
    let json = "convert_to('{\"charge\": ' || g || '}', 'UTF8')";
    let rows = [
        row(
            "near-old",
            "finished",
            &utc("-24 hours -30 minutes"),
            "NULL",
            json,
        ),
        row(
            "near-new",
            "finished",
            &utc("-23 hours -30 minutes"),
            "NULL",
            "'\\xfffe00'::bytea",
        ),
        row("done-old", "finished", &utc("-3 days"), "NULL", json),
        row(
            "busy-old",
            "started",
            &utc("-3 days"),
            &utc("-3 days"),
            "NULL",
        ),
    ]
    .concat();
    let s = Shape::new("Rails 7", &rows).await;
    let digest: String =
        s.db.client()
            .await
            .query_one(
                "SELECT '\\x' || encode(sha256('near-new-1'::bytea), 'hex')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
    let run = s
        .idemctl()
        .args(["-o", "json", "inspect", &digest, "--api-key-id", "1"])
        .run();
    run.assert_success();
    let j = run.json();
    assert_eq!(j["key"], digest.as_str(), "{run}");
    assert_eq!(j["response_body"], "fffe00", "{run}");
    assert_eq!(j["response_body_encoding"], "hex", "{run}");
    assert_eq!(j["time_zone"], "UTC", "{run}");
    let row = j["row"].as_array().unwrap();
    let column = |name: &str| row.iter().find(|c| c["column"] == name).unwrap().clone();
    assert_eq!(column("recovery_point")["role"], "in_flight", "{run}");
    assert_eq!(column("recovery_point")["value"], "finished", "{run}");
    assert_eq!(
        column("updated_at")["role"],
        serde_json::Value::Null,
        "{run}"
    );
    assert_eq!(column("key_digest")["role"], "key", "{run}");
    assert_eq!(column("key_digest")["value"], digest.as_str(), "{run}");
    assert_eq!(column("response_body")["value"], "\\xfffe00", "{run}");
    s.idemctl()
        .args(["inspect", &digest, "--api-key-id", "1"])
        .run()
        .assert_success()
        .assert_stdout_contains("response_body (bytea, 3 bytes, not UTF-8, shown as hex):\nfffe00")
        .assert_stdout_contains("recovery_point (in_flight)")
        .assert_stdout_contains("updated_at");
    s.idemctl()
        .args(["inspect", "near-new-1", "--api-key-id", "1"])
        .run()
        .assert_code(2);
    s.evicts_exactly(
        "idempotency_keys",
        "split_part(request_path, '/', 3)",
        Some(8),
        &[("busy-old", 4), ("near-new", 4)],
    )
    .await;
    s.idemctl()
        .args(["-q", "reclaim", "--yes", "--allow-scan"])
        .run()
        .assert_success();
    assert_eq!(
        scalar_i64(
            &s.db,
            "SELECT count(*) FROM idempotency_keys WHERE locked_at IS NOT NULL"
        )
        .await,
        0
    );
}

/// Ecto: varchar(255), utc_datetime_usec (timestamp), an opaque bytea state and no in-flight
/// marker: every expired key goes; inspect shows the binary state as hex with its size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ecto_table_is_maintained_as_shipped() {
    let row = |kind: &str, expires: &str| {
        format!(
            "INSERT INTO idempotency_keys (scope, \"key\", state, expires_at, inserted_at, updated_at) \
             SELECT 'scope-' || g % 2, '{kind}-' || g, '\\x836803'::bytea || int4send(g), {expires}, {now}, {now} \
             FROM generate_series(1, 4) g;",
            now = utc("-2 days")
        )
    };
    let rows = [
        row("near-old", &utc("-30 minutes")),
        row("near-new", &utc("30 minutes")),
        row("done-old", &utc("-1 day")),
    ]
    .concat();
    let s = Shape::new("Ecto", &rows).await;
    let run = s
        .idemctl()
        .args([
            "-o",
            "json",
            "inspect",
            "near-new-1",
            "--api-key-id",
            "scope-1",
        ])
        .run();
    run.assert_success();
    assert_eq!(run.json()["response_body"], "83680300000001", "{run}");
    assert_eq!(run.json()["response_body_encoding"], "hex", "{run}");
    s.idemctl()
        .args(["reclaim", "--dry-run"])
        .run()
        .assert_success()
        .assert_stdout_contains("nothing to reclaim");
    s.evicts_exactly(
        "idempotency_keys",
        "split_part(\"key\", '-', 1) || '-' || split_part(\"key\", '-', 2)",
        None,
        &[("near-new", 4)],
    )
    .await;
}

/// sqlx: a composite (uuid, text) primary key, timestamptz, a bytea body and a NULL status while in
/// flight: evict keeps in-flight keys; reclaim --action fail writes its JSON error into the bytea
/// body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlx_table_is_maintained_as_shipped() {
    let row = |kind: &str, status: &str, created: &str| {
        format!(
            "INSERT INTO idempotency (user_id, idempotency_key, response_status_code, response_headers, response_body, created_at) \
             SELECT ('00000000-0000-0000-0000-00000000000' || g % 2)::uuid, '{kind}-' || g, {status}, \
             CASE WHEN {status} IS NOT NULL THEN ARRAY[ROW('content-type', 'text/plain'::bytea)::header_pair] END, \
             CASE WHEN {status} IS NOT NULL THEN convert_to('paid ' || g, 'UTF8') END, {created} \
             FROM generate_series(1, 4) g;"
        )
    };
    let rows = [
        row("near-old", "200", "now() - interval '24 hours 30 minutes'"),
        row("near-new", "200", "now() - interval '23 hours 30 minutes'"),
        row("done-old", "200", "now() - interval '3 days'"),
        row("busy-old", "NULL", "now() - interval '3 days'"),
    ]
    .concat();
    let s = Shape::new("sqlx", &rows).await;
    s.idemctl()
        .args([
            "inspect",
            "near-new-1",
            "--api-key-id",
            "00000000-0000-0000-0000-000000000001",
        ])
        .run()
        .assert_success()
        .assert_stdout_contains("response_body (bytea, shown as text):\npaid 1");
    s.evicts_exactly(
        "idempotency",
        "split_part(idempotency_key, '-', 1) || '-' || split_part(idempotency_key, '-', 2)",
        None,
        &[("busy-old", 4), ("near-new", 4)],
    )
    .await;
    s.idemctl()
        .args(["-q", "reclaim", "--yes", "--action", "fail", "--allow-scan"])
        .run()
        .assert_success();
    assert_eq!(
        scalar_i64(
            &s.db,
            "SELECT count(*) FROM idempotency WHERE idempotency_key LIKE 'busy-old-%' \
             AND response_status_code = 500 AND convert_from(response_body, 'UTF8')::jsonb ? 'type'"
        )
        .await,
        4
    );
}

/// The explainer's and rocket-rides' tables exactly as printed (no index on created_at): evict
/// walks the primary key and removes exactly the expired finished keys; on rocket-rides, whose
/// key is a bigserial (it follows age), the walk stops at the first page in which nothing has
/// expired, before the end of the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_tables_as_printed_are_evicted_without_an_index() {
    use crate::profiles::{EXPLAINER_DDL, ROCKET_RIDES_DDL, explainer_rows, rocket_rides_rows};
    let db = loaded(EXPLAINER_DDL, &explainer_rows(3), None).await;
    let run = db
        .idemctl()
        .args(["--ttl", "1d", "-o", "json", "evict", "--batch-size", "4"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["walk"]["rows_examined"], 15, "{run}");
    assert_eq!(run.json()["walk"]["stopped_early"], false, "{run}");
    assert_eq!(
        kinds_left(&db, "idempotency_keys", "key").await,
        [
            ("done-new".to_owned(), 3),
            ("fresh-1".to_owned(), 1),
            ("fresh-2".to_owned(), 1),
            ("fresh-3".to_owned(), 1),
            ("stuck-1".to_owned(), 1),
            ("stuck-2".to_owned(), 1),
            ("stuck-3".to_owned(), 1),
            ("stuck-old".to_owned(), 3),
        ]
    );
    let db = loaded(ROCKET_RIDES_DDL, &rocket_rides_rows(4), None).await;
    db.exec(
        "INSERT INTO idempotency_keys (created_at, idempotency_key, last_run_at, request_method, request_params, \
         request_path, recovery_point, user_id) \
         SELECT now(), 'later-' || g, now(), 'POST', '{}', '/rides', 'finished', 1 FROM generate_series(1, 20) g",
    )
    .await;
    let run = db
        .idemctl()
        .args(["--ttl", "1d", "-o", "json", "evict", "--batch-size", "5"])
        .run();
    run.assert_success();
    run.assert_stderr(
        "idemctl: note: table public.idempotency_keys has no index on created_at: evict walks idempotency_keys_pkey in pages of 5 entries, reading every key to find the expired ones (it stops at the first page in which nothing has expired: the key follows age); the index would let each batch read only expired keys: CREATE INDEX CONCURRENTLY \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (created_at);\n",
    );
    let report = run.json();
    assert_eq!(report["walk"]["stopped_early"], true, "{run}");
    assert_eq!(report["walk"]["rows_examined"], 20, "{run}");
    assert_eq!(report["rows_evicted"], 8, "{run}");
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE idempotency_key ~ '^(finished-old|released-old)-'"
        )
        .await,
        0
    );
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        4 + 4 + 20
    );
}

/// The walk is one kind of batch: --max-rows bounds the keys it deletes, --max-batches its pages,
/// and the rate caps and the replica lag pace its pages like any batch; runs that stop early
/// leave the rest to the next run, which removes exactly the expired finished keys.
/// --drop-partitions on this table, which is not partitioned, is refused with one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walk_keeps_the_budgets_caps_and_replica_lag_of_any_batch() {
    use crate::profiles::{EXPLAINER_DDL, explainer_rows};
    let db = loaded(EXPLAINER_DDL, &explainer_rows(3), None).await;
    let total = "SELECT count(*) FROM idempotency_keys";
    // The table is not partitioned: --drop-partitions has nothing to drop, and is refused before
    // anything changes, as with the index.
    db.idemctl()
        .args(["--ttl", "1d", "evict", "--drop-partitions"])
        .run()
        .assert_error(2, "table public.idempotency_keys is not partitioned; --drop-partitions needs a table range-partitioned on expires_at or created_at");
    assert_eq!(scalar_i64(&db, total).await, 15);
    let evict = |extra: &[&str]| {
        let mut args = vec!["--ttl", "1d", "-o", "json", "evict", "--batch-size", "4"];
        args.extend_from_slice(extra);
        db.idemctl().args(&args).run()
    };
    let run = evict(&["--max-rows", "1"]);
    run.assert_success();
    assert_eq!(run.json()["rows_evicted"], 1, "{run}");
    assert_eq!(run.json()["end_reason"], "row_budget", "{run}");
    assert_eq!(scalar_i64(&db, total).await, 14);
    let run = evict(&["--max-batches", "1"]);
    run.assert_success();
    assert_eq!(run.json()["batches"], 1, "{run}");
    assert_eq!(run.json()["walk"]["rows_examined"], 4, "{run}");
    assert_eq!(run.json()["end_reason"], "batch_budget", "{run}");
    let before = scalar_i64(&db, total).await;
    let run = evict(&[
        "--max-rate",
        "1000/s",
        "--max-wal-rate",
        "10MB/s",
        "--max-replica-lag",
        "10s",
    ]);
    run.assert_success();
    let report = run.json();
    assert_eq!(report["end_reason"], "drained", "{run}");
    assert_eq!(report["walk"]["rows_examined"], before, "{run}");
    assert!(report["rate_limit"].is_object(), "{run}");
    assert_eq!(report["replica_lag_waits"], 0, "{run}");
    assert_eq!(
        kinds_left(&db, "idempotency_keys", "key").await,
        [
            ("done-new".to_owned(), 3),
            ("fresh-1".to_owned(), 1),
            ("fresh-2".to_owned(), 1),
            ("fresh-3".to_owned(), 1),
            ("stuck-1".to_owned(), 1),
            ("stuck-2".to_owned(), 1),
            ("stuck-3".to_owned(), 1),
            ("stuck-old".to_owned(), 3),
        ]
    );
}

/// The dry run of a walk reads the pages the run would take, with a statement that changes
/// nothing, under the same budgets: its count is exactly what the following run deletes (checked
/// by SQL), with --max-rows, with --max-batches and to the end; on rocket-rides (a bigserial key)
/// it stops where the run stops, at the first page in which nothing has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walks_dry_run_counts_what_the_run_deletes() {
    use crate::profiles::{EXPLAINER_DDL, ROCKET_RIDES_DDL, explainer_rows, rocket_rides_rows};
    let db = loaded(EXPLAINER_DDL, &explainer_rows(3), None).await;
    let total = "SELECT count(*) FROM idempotency_keys";
    let run = db
        .idemctl()
        .args(["--ttl", "1d", "evict", "--dry-run", "--batch-size", "4"])
        .run();
    run.assert_success();
    run.assert_stdout_contains("would walk        idempotency_keys_pkey (15 index entries in 4 pages, to the end of the index; no index on the expiry column)\n");
    run.assert_stdout_contains("batch size        pages of 4 index entries\n");
    run.assert_stdout_contains(
        "The first keys it would evict (in the order of idempotency_keys_pkey):",
    );
    run.assert_stdout_contains("statement (per page: $1 = the index entries a page reads, $2 = min-age seconds, $3... = the previous page's last key; plan of the first page):");
    for budget in [
        &["--max-rows", "2"][..],
        &["--max-batches", "1"][..],
        &["--max-runtime", "1h"][..],
    ] {
        let mut args = vec!["--ttl", "1d", "-o", "json", "evict", "--batch-size", "4"];
        args.extend_from_slice(budget);
        db.exec(&format!("TRUNCATE idempotency_keys; {}", explainer_rows(3)))
            .await;
        let before = scalar_i64(&db, total).await;
        let mut dry = args.clone();
        dry.push("--dry-run");
        let run = db.idemctl().args(&dry).run();
        run.assert_success();
        let preview = run.json();
        assert_eq!(preview["would_evict"]["at_least"], false, "{run}");
        let would = preview["would_evict"]["count"].as_i64().unwrap();
        assert!(would > 0, "{run}");
        assert_eq!(scalar_i64(&db, total).await, before, "the dry run deleted");
        let run = db.idemctl().args(&args).run();
        run.assert_success();
        let report = run.json();
        assert_eq!(before - scalar_i64(&db, total).await, would, "{run}");
        assert_eq!(report["rows_evicted"], would, "{run}");
        assert_eq!(preview["walk"]["pages"], report["batches"], "{run}");
        assert_eq!(
            preview["walk"]["rows_examined"],
            report["walk"]["rows_examined"]
        );
        assert_eq!(preview["walk"]["end_reason"], report["end_reason"], "{run}");
    }
    let run = db
        .idemctl()
        .args(["--ttl", "1d", "-o", "json", "evict", "--dry-run"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["would_evict"]["count"], 0, "{run}");
    assert_eq!(run.json()["walk"]["end_reason"], "drained", "{run}");
    // A role that may only read previews the walk; the page's plan needs the right to delete.
    let role = format!("ro_{}", &db.name()[10..]);
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT ON idempotency_keys TO {role};"
    ))
    .await;
    db.exec(&format!("TRUNCATE idempotency_keys; {}", explainer_rows(3)))
        .await;
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["--ttl", "1d", "evict", "--dry-run"])
        .run();
    run.assert_success()
        .assert_stdout_contains("would evict       3\n")
        .assert_stdout_contains("plan:\n(not shown: explaining the page's DELETE needs the DELETE privilege and the right to lock rows (UPDATE on a column), which this role lacks)");
    let db = loaded(ROCKET_RIDES_DDL, &rocket_rides_rows(4), None).await;
    db.exec(
        "INSERT INTO idempotency_keys (created_at, idempotency_key, last_run_at, request_method, request_params, \
         request_path, recovery_point, user_id) \
         SELECT now(), 'later-' || g, now(), 'POST', '{}', '/rides', 'finished', 1 FROM generate_series(1, 20) g",
    )
    .await;
    let run = db
        .idemctl()
        .args([
            "--ttl",
            "1d",
            "-o",
            "json",
            "evict",
            "--batch-size",
            "5",
            "--dry-run",
        ])
        .run();
    run.assert_success();
    let preview = run.json();
    assert_eq!(preview["walk"]["stopped_early"], true, "{run}");
    assert_eq!(preview["walk"]["rows_examined"], 20, "{run}");
    assert_eq!(preview["would_evict"]["count"], 8, "{run}");
}

/// --min-age on a walked table: a key created less than --min-age ago stays even if expired, and
/// is counted; the dry run says the same beforehand. --vacuum runs after the walk. Expiry by a one-hour TTL, --min-age 1d: keys
/// created half an hour either side of a day ago go and stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walk_keeps_keys_younger_than_min_age() {
    use crate::profiles::EXPLAINER_DDL;
    let row = |kind: &str, status: i32, body: &str, created: &str| {
        format!(
            "INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at) \
             SELECT '{kind}-' || g, md5(g::text), {status}, {body}, now() - interval '{created}' \
             FROM generate_series(1, 3) g;"
        )
    };
    let done = "'{\"id\": 1}'";
    let processing = "'{\"status\": \"processing\"}'";
    let rows = [
        row("old-done", 200, done, "24 hours 30 minutes"),
        row("young-done", 200, done, "23 hours 30 minutes"),
        row("fresh-done", 200, done, "30 minutes"),
        row("old-busy", 202, processing, "3 days"),
    ]
    .concat();
    let db = loaded(EXPLAINER_DDL, &rows, None).await;
    let args = [
        "--ttl",
        "1h",
        "-o",
        "json",
        "evict",
        "--batch-size",
        "5",
        "--min-age",
        "1d",
    ];
    let mut dry = args.to_vec();
    dry.push("--dry-run");
    let run = db.idemctl().args(&dry).run();
    run.assert_success();
    let preview = run.json();
    assert_eq!(preview["would_evict"]["count"], 3, "{run}");
    assert_eq!(preview["held_back_by_min_age"], 3, "{run}");
    let kept: Vec<&str> = preview["held_back_sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect();
    assert!(kept.iter().all(|k| k.starts_with("young-done-")), "{run}");
    db.idemctl()
        .args(["--ttl", "1h", "evict", "--dry-run", "--min-age", "1d"])
        .run()
        .assert_success()
        .assert_stdout_contains("held back by --min-age  3\n")
        .assert_stdout_contains(
            "The first keys --min-age holds back (created too recently; in the order of idempotency_keys_pkey):\n",
        );
    let mut run_args = args.to_vec();
    run_args.extend(["--vacuum", "--vacuum-min-rows", "0"]);
    let run = db.idemctl().args(&run_args).run();
    run.assert_success();
    assert_eq!(run.json()["rows_evicted"], 3, "{run}");
    assert_eq!(run.json()["skipped_min_age"], 3, "{run}");
    // VACUUM after a walk, as after any run.
    assert_eq!(run.json()["vacuum"]["ran"], true, "{run}");
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT vacuum_count + autovacuum_count FROM pg_stat_user_tables WHERE relname = 'idempotency_keys'"
        )
        .await
        .min(1),
        1
    );
    assert_eq!(
        kinds_left(&db, "idempotency_keys", "key").await,
        [
            ("fresh-done".to_owned(), 3),
            ("old-busy".to_owned(), 3),
            ("young-done".to_owned(), 3),
        ]
    );
}

/// Without an expiry index, check recommends it with the walk's cost measured beside it: the walked
/// index's entries (the planner's count, here every row), the pages of a full walk, the expired
/// share as the planner estimates it and one page read and timed; in text and as typed fields in
/// JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_measures_the_walk_beside_the_index_it_recommends() {
    use crate::profiles::EXPLAINER_DDL;
    let rows = "INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at) \
         SELECT 'k-' || g, md5(g::text), 200, '{}', \
                CASE WHEN g % 3 = 0 THEN now() - interval '3 days' ELSE now() END \
         FROM generate_series(1, 3000) g;";
    let db = loaded(EXPLAINER_DDL, rows, None).await;
    db.exec("VACUUM ANALYZE idempotency_keys").await;
    let run = db
        .idemctl()
        .args(["--ttl", "1d", "-o", "json", "check"])
        .run();
    run.assert_success();
    let findings = run.json()["findings"].as_array().unwrap().clone();
    let expiry = findings
        .iter()
        .find(|f| f["check"] == "expiry index")
        .unwrap_or_else(|| panic!("{run}"));
    assert_eq!(expiry["status"], "warn", "{run}");
    let cost = &expiry["walk_cost"];
    assert_eq!(cost["index"], "idempotency_keys_pkey", "{run}");
    assert_eq!(cost["index_entries"], 3000, "{run}");
    assert_eq!(cost["page_size"], 2000, "{run}");
    assert_eq!(cost["pages_per_run"], 2, "{run}");
    assert_eq!(cost["follows_age"], false, "{run}");
    let expired = cost["expired_estimate"].as_i64().unwrap();
    assert!((1..=3000).contains(&expired), "{run}");
    let fraction = cost["expired_fraction"].as_f64().unwrap();
    assert!(fraction > 0.0 && fraction <= 1.0, "{run}");
    assert_eq!(cost["timed_entries"], 3000, "{run}");
    assert!(
        cost["full_walk_seconds_estimate"].as_f64().unwrap() > 0.0,
        "{run}"
    );
    let run = db.idemctl().args(["--ttl", "1d", "check"]).run();
    run.assert_success();
    run.assert_stdout_contains("measured (planner's estimates, one page timed): a full walk reads about 3000 entries of idempotency_keys_pkey (");
    run.assert_stdout_contains(") each run, in 2 pages of 2000; about ");
    run.assert_stdout_contains("one page of 3000 entries read in ");
}

/// A mapping that allows no reclaim action: the dry run still lists the stuck keys and says none is
/// allowed; a run refuses. stats works on a table without an expiry column and no --ttl, reporting
/// the figures that need none and marking the others unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_without_an_action_and_stats_without_a_ttl() {
    let rows = format!(
        "INSERT INTO idempotency_record SELECT 'busy-' || g, 'payment', 'client-1', 'IN_PROGRESS', NULL, {}, {} \
         FROM generate_series(1, 3) g;",
        utc("-1 hour"),
        utc("1 day")
    );
    let s = Shape::new("JDBC (Flyway)", &rows).await;
    let config = doc_block("JDBC (Flyway)", "toml").replace("actions = [\"delete\"]\n", "");
    std::fs::write(s.dir.path().join("idemctl.toml"), config).unwrap();
    let run = s
        .idemctl()
        .args(["reclaim", "--dry-run", "--allow-scan"])
        .run();
    run.assert_success().assert_stdout_contains(
        "none allowed: the profile lists no reclaim action (set actions in the mapping); this preview only lists the keys",
    );
    let run = s
        .idemctl()
        .args(["-o", "json", "reclaim", "--dry-run", "--allow-scan"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["action"], serde_json::Value::Null, "{run}");
    assert_eq!(run.json()["would_reclaim"]["count"], 3, "{run}");
    s.idemctl()
        .args(["reclaim", "--yes", "--allow-scan"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("its mapping lists none");

    let db = loaded(
        crate::profiles::EXPLAINER_DDL,
        &crate::profiles::explainer_rows(2),
        None,
    )
    .await;
    let run = db
        .idemctl()
        .args(["-o", "json", "stats", "--allow-scan"])
        .run();
    run.assert_success();
    let j = run.json();
    assert_eq!(j["expiry_figures"], "unknown", "{run}");
    assert_eq!(j["stuck"]["count"]["count"], 4, "{run}");
    assert!(j["sizes"]["total_bytes"].as_i64().unwrap() > 0, "{run}");
    db.idemctl()
        .args(["stats"])
        .run()
        .assert_success()
        .assert_stdout_contains("unknown (no expiry column and no --ttl)");
}

/// A scope given wrongly is refused with one line (exit 2) naming what was wrong, before anything
/// is read: a column outside the scope, a column without a value, a column twice, a value its
/// column's type cannot hold, and a one-text scope value that is not one value per column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_given_wrongly_is_refused_with_one_line() {
    let s = Shape::new("JDBC (Flyway)", "").await;
    let table = "public.idempotency_record";
    s.idemctl()
        .args(["inspect", "k", "--scope", "tenant=client-1"])
        .run()
        .assert_error(
            2,
            &format!("--scope names column tenant, which is not in the scope of table {table} (profile jdbc): its scope is (request_type, client_id); name those columns"),
        );
    s.idemctl()
        .args(["inspect", "k", "--scope", "client_id"])
        .run()
        .assert_error(
            2,
            "--scope \"client_id\" gives no value: write --scope COLUMN=VALUE (an empty value is COLUMN=)",
        );
    s.idemctl()
        .args([
            "inspect",
            "k",
            "--scope",
            "client_id=a",
            "--scope",
            "client_id=b",
        ])
        .run()
        .assert_error(
            2,
            "--scope names column client_id twice: give each scope column once",
        );
    s.idemctl()
        .args(["inspect", "k", "--api-key-id", "client-1"])
        .run()
        .assert_error(
            2,
            &format!("--api-key-id \"client-1\" is not a scope of table {table}: its scope is the 2 columns (request_type, client_id), given as one text array of their values in that order, as idemctl prints it ({{VALUE,VALUE}})"),
        );
    s.idemctl()
        .args(["reclaim", "--dry-run", "--allow-scan", "--api-key-id", "{payment}"])
        .run()
        .assert_error(
            2,
            &format!("--api-key-id \"{{payment}}\" is not a scope of table {table}: its scope is the 2 columns (request_type, client_id), given as one text array of their values in that order, as idemctl prints it ({{VALUE,VALUE}}); nothing was changed"),
        );

    // A scope with a bigint column: a value it cannot hold.
    let db = loaded(
        &doc_block("JDBC (Flyway)", "sql")
            .replace("client_id       VARCHAR(64)", "client_id       BIGINT"),
        "",
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(&config, doc_block("JDBC (Flyway)", "toml")).unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    idemctl()
        .args(["inspect", "k", "--scope", "request_type=payment", "--scope", "client_id=c-1"])
        .run()
        .assert_error(
            2,
            &format!("--scope client_id=c-1 cannot be a scope of table {table}: its column client_id is of type bigint"),
        );
    idemctl()
        .args(["reclaim", "--dry-run", "--allow-scan", "--api-key-id", "{payment,c-1}"])
        .run()
        .assert_error(
            2,
            &format!("--api-key-id \"{{payment,c-1}}\" cannot be a scope of table {table}: its column client_id is of type bigint, which cannot hold \"c-1\"; nothing was changed"),
        );
    // The same scope given rightly finds nothing (exit 3), by both forms.
    idemctl()
        .args([
            "inspect",
            "k",
            "--scope",
            "request_type=payment",
            "--scope",
            "client_id=7",
        ])
        .run()
        .assert_error(3, "key k not found for request_type=payment client_id=7");
}

/// check never proposes a unique index: with the whole scope mapped the primary key is the
/// identity (ok); a mapping narrower than the primary key is a warning naming it, with no fix; a
/// table with no unique index over the scope gets a plain lookup index, never a unique one, and
/// inspect without the scope names the index led by the key that would find it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_never_proposes_a_unique_index_over_part_of_the_identity() {
    let s = Shape::new("JDBC (Flyway)", "").await;
    let narrower = doc_block("JDBC (Flyway)", "toml").replace(
        "tenant = [\"request_type\", \"client_id\"]",
        "tenant = \"client_id\"",
    );
    std::fs::write(s.dir.path().join("idemctl.toml"), narrower).unwrap();
    let run = s.idemctl().arg("check").run();
    run.assert_success().assert_stdout_contains(
        "pk_idempotency_record makes a key unique only within (idempotency_key, request_type, client_id), wider than the mapping's (client_id, idempotency_key)",
    );
    assert!(!run.stdout.contains("UNIQUE"), "{run}");

    let ddl = doc_block("JDBC (Flyway)", "sql").replace(
        ",\n    CONSTRAINT pk_idempotency_record PRIMARY KEY (idempotency_key, request_type, client_id)",
        "",
    );
    let db = loaded(&ddl, "", None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(&config, doc_block("JDBC (Flyway)", "toml")).unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    let run = idemctl().arg("check").run();
    run.assert_stdout_contains("no valid unique index makes (request_type, client_id, idempotency_key) name one row")
        .assert_stdout_contains(
            "CREATE INDEX CONCURRENTLY \"idempotency_record_scope\" ON \"public\".\"idempotency_record\" (request_type, client_id, idempotency_key);",
        );
    assert!(!run.stdout.contains("UNIQUE"), "{run}");
    idemctl()
        .args(["inspect", "k", "--scope", "client_id=c-1"])
        .run()
        .assert_error(
            2,
            "table public.idempotency_record has no index led by its key or by scope columns before it, so a key cannot be found without its whole scope; pass --scope COLUMN=VALUE for each of request_type, client_id, or create: CREATE INDEX CONCURRENTLY \"idempotency_record_key\" ON \"public\".\"idempotency_record\" (idempotency_key);",
        );
}

/// On the JDBC table with its primary key listing the scope before the key (request_type,
/// client_id, idempotency_key) and no index led by the key, inspect finds a key from part of its
/// scope or none of it by walking the scopes through the primary key: it lists the scopes holding
/// the key, or shows the one record the part given selects, and says when a key is nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_walks_the_scopes_when_no_index_is_led_by_the_key() {
    let ddl = doc_block("JDBC (Flyway)", "sql").replace(
        "PRIMARY KEY (idempotency_key, request_type, client_id)",
        "PRIMARY KEY (request_type, client_id, idempotency_key)",
    );
    let rows = "INSERT INTO idempotency_record SELECT 'k-' || g % 10, ty, 'client-' || g / 10, \
                'COMPLETED', NULL, now() AT TIME ZONE 'UTC', (now() AT TIME ZONE 'UTC') + interval '1 day' \
                FROM generate_series(0, 29) g, unnest(ARRAY['payment', 'refund']) ty;";
    let db = loaded(&ddl, rows, None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(&config, doc_block("JDBC (Flyway)", "toml")).unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    // None of the scope: every scope holding the key (2 types x 3 clients).
    let run = idemctl().args(["-o", "json", "inspect", "k-3"]).run();
    run.assert_code(2).assert_stderr("idemctl: key k-3 exists under 6 scopes; pass --scope COLUMN=VALUE for each of request_type, client_id to choose one\n");
    assert_eq!(run.json()["matches"].as_array().unwrap().len(), 6, "{run}");
    // The leading column, or the other one: the scopes narrowed to it.
    let run = idemctl()
        .args([
            "-o",
            "json",
            "inspect",
            "k-3",
            "--scope",
            "client_id=client-2",
        ])
        .run();
    run.assert_code(2);
    let scopes: Vec<serde_json::Value> = run.json()["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["scope"].clone())
        .collect();
    assert_eq!(
        scopes,
        [
            serde_json::json!({"request_type": "payment", "client_id": "client-2"}),
            serde_json::json!({"request_type": "refund", "client_id": "client-2"}),
        ],
        "{run}"
    );
    // Both columns, in either order: the one record, through the primary key.
    for scope in [
        &[
            "--scope",
            "request_type=refund",
            "--scope",
            "client_id=client-1",
        ][..],
        &[
            "--scope",
            "client_id=client-1",
            "--scope",
            "request_type=refund",
        ][..],
    ] {
        let run = idemctl()
            .args(["-o", "json", "inspect", "k-3"])
            .args(scope)
            .run();
        run.assert_success();
        assert_eq!(run.json()["api_key_id"], "{refund,client-1}", "{run}");
    }
    idemctl()
        .args(["inspect", "k-3", "--scope", "client_id=client-9"])
        .run()
        .assert_error(
            3,
            "key k-3 not found under any scope with client_id=client-9",
        );
    idemctl().args(["inspect", "k-77"]).run().assert_code(3);
}

/// Prisma: TIMESTAMP(3) columns, the state as a PostgreSQL enum type, a key unique within its
/// method and endpoint (a column in two roles) and an expiry index: every command runs; evict
/// removes exactly the expired finished keys (30 minutes past expiry removed, 30 minutes short
/// kept, in-flight kept); reclaim --action fail sets the enum's first done value; a mapped value
/// the enum lacks is refused before anything is read, naming the enum's values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prisma_table_with_an_enum_state_is_maintained_as_shipped() {
    let row = |kind: &str, status: &str, code: &str, body: &str, expires: &str| {
        format!(
            "INSERT INTO idempotency_keys (id, \"key\", method, endpoint, status, payload_hash, response_status, \
             response_body, expires_at, created_at) \
             SELECT md5('{kind}' || g), '{kind}-' || g, 'POST', '/wallets/w' || g % 2 || '/topup', '{status}', \
             encode(sha256(g::text::bytea), 'hex'), {code}, {body}, {at}, ({at} - interval '1 day') FROM generate_series(1, 4) g;",
            at = utc(expires),
        )
    };
    let rows = [
        row(
            "near-old",
            "COMPLETED",
            "201",
            "'{\"balance\": 10}'",
            "-30 minutes",
        ),
        row(
            "near-new",
            "COMPLETED",
            "201",
            "'{\"balance\": 10}'",
            "30 minutes",
        ),
        row(
            "done-old",
            "FAILED",
            "409",
            "'{\"error\": \"limit\"}'",
            "-2 days",
        ),
        row("busy-old", "IN_PROGRESS", "NULL", "NULL", "-2 days"),
    ]
    .concat();
    let s = Shape::new("Prisma", &rows).await;
    s.idemctl()
        .arg("check")
        .run()
        .assert_success()
        .assert_stdout_contains(
            "idempotency_keys_key_method_endpoint_key is unique on (key, method, endpoint)",
        );
    let run = s
        .idemctl()
        .args([
            "inspect",
            "near-new-1",
            "--scope",
            "method=POST",
            "--scope",
            "endpoint=/wallets/w1/topup",
        ])
        .run();
    run.assert_success()
        .assert_stdout_contains("completed and live, expires in")
        .assert_stdout_contains("status (in_flight)          COMPLETED");
    let kind = "split_part(\"key\", '-', 1) || '-' || split_part(\"key\", '-', 2)";
    s.evicts_exactly(
        "idempotency_keys",
        kind,
        Some(8),
        &[("busy-old", 4), ("near-new", 4)],
    )
    .await;
    s.idemctl()
        .args(["-q", "reclaim", "--yes", "--action", "fail", "--allow-scan"])
        .run()
        .assert_success();
    assert_eq!(
        scalar_i64(
            &s.db,
            "SELECT count(*) FROM idempotency_keys WHERE \"key\" LIKE 'busy-old-%' \
             AND status = 'COMPLETED' AND response_status = 500 AND response_body ? 'type'"
        )
        .await,
        4
    );

    let config = doc_block("Prisma", "toml").replace(
        "done = [\"COMPLETED\", \"FAILED\"]",
        "done = [\"COMPLETED\", \"FAILED\", \"DONE\"]",
    );
    std::fs::write(s.dir.path().join("idemctl.toml"), config).unwrap();
    let config_path = s.dir.path().join("idemctl.toml").display().to_string();
    for command in [&["evict"][..], &["reclaim", "--dry-run", "--allow-scan"]] {
        s.idemctl()
            .args(command)
            .run()
            .assert_error(
                2,
                &format!(
                    "table public.idempotency_keys column status is \"IdempotencyStatus\", whose values ('IN_PROGRESS', 'COMPLETED', 'FAILED') do not include 'DONE', expected text or character varying or an enum holding every value the mapping names, which profile prisma needs; the mapping in config file {config_path}, [profiles.prisma] names it; correct the mapping"
                ),
            );
    }
    s.idemctl()
        .arg("check")
        .run()
        .assert_code(4)
        .assert_stdout_contains(
            "whose values ('IN_PROGRESS', 'COMPLETED', 'FAILED') do not include 'DONE'",
        );
    assert_eq!(
        scalar_i64(&s.db, "SELECT count(*) FROM idempotency_keys").await,
        8
    );
}

/// MassTransit's inbox (EF Core): quoted column names, a uuid key within a uuid consumer, keys
/// expiring a window after `Delivered` (NULL while in flight) through its own index, and outbox
/// rows referencing inbox rows ON DELETE NO ACTION: evict removes exactly the expired delivered
/// keys nothing references. An unquoted predicate column (folded to lower case) is refused naming
/// the column the table has, by check (FAIL, exit 4) as by the other commands (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masstransit_inbox_is_maintained_as_shipped() {
    // The MessageId's first digit is the kind: 1 expired 30 minutes ago, 2 expiring in 30
    // minutes, 3 expired long ago, 4 in flight (not delivered), 5 expired but still referenced.
    let row = |digit: u8, delivered: &str| {
        format!(
            "INSERT INTO \"InboxState\" (\"MessageId\", \"ConsumerId\", \"LockId\", \"Received\", \"ReceiveCount\", \
             \"Consumed\", \"Delivered\") SELECT ('{digit}0000000-0000-0000-0000-00000000000' || g)::uuid, \
             '11111111-1111-1111-1111-111111111111', gen_random_uuid(), now() - interval '20 days', 1, {delivered}, \
             {delivered} FROM generate_series(1, 4) g;"
        )
    };
    let rows = [
        row(1, "now() - interval '7 days 30 minutes'"),
        row(2, "now() - interval '6 days 23 hours 30 minutes'"),
        row(3, "now() - interval '19 days'"),
        row(4, "NULL"),
        row(5, "now() - interval '19 days'"),
        "INSERT INTO \"OutboxMessage\" (\"SentTime\", \"InboxMessageId\", \"InboxConsumerId\", \"MessageId\", \"Body\") \
         SELECT now(), \"MessageId\", \"ConsumerId\", gen_random_uuid(), '{}' FROM \"InboxState\" \
         WHERE \"MessageId\"::text LIKE '5%';"
            .to_owned(),
    ]
    .concat();
    let s = Shape::new("EF Core (MassTransit inbox)", &rows).await;
    s.idemctl()
        .arg("check")
        .run()
        .assert_success()
        .assert_stdout_contains(
            "\"AK_InboxState_MessageId_ConsumerId\" is unique on (\"MessageId\", \"ConsumerId\")",
        )
        .assert_stdout_contains("\"IX_InboxState_Delivered\" orders keys by Delivered")
        .assert_stdout_contains("references the table ON DELETE NO ACTION");
    s.idemctl()
        .args([
            "inspect",
            "20000000-0000-0000-0000-000000000001",
            "--api-key-id",
            "11111111-1111-1111-1111-111111111111",
        ])
        .run()
        .assert_success()
        .assert_stdout_contains("completed and live, expires in")
        .assert_stdout_contains("Delivered (created_at)");
    s.evicts_exactly(
        "\"InboxState\"",
        "left(\"MessageId\"::text, 1)",
        Some(12),
        &[("2", 4), ("4", 4), ("5", 4)],
    )
    .await;

    let config = doc_block("EF Core (MassTransit inbox)", "toml")
        .replace("'\"Delivered\" IS NULL'", "'Delivered IS NULL'");
    std::fs::write(s.dir.path().join("idemctl.toml"), config).unwrap();
    let hint = "has \"Delivered\": names are matched exactly, and a predicate folds an unquoted name to lower case as SQL does, so write it there with double quotes";
    s.idemctl()
        .arg("check")
        .run()
        .assert_code(4)
        .assert_stdout_contains(&format!(
            "column delivered (profile masstransit) is missing, but the table {hint}"
        ));
    s.idemctl()
        .arg("evict")
        .run()
        .assert_code(2)
        .assert_stderr_contains(&format!(
            "table public.InboxState has no column delivered but {hint}, which profile masstransit needs"
        ));
    assert_eq!(
        scalar_i64(&s.db, "SELECT count(*) FROM \"InboxState\"").await,
        12
    );
}

/// Laravel: timestamp(0) columns and `timestamps()` that allow NULL. Keys written without
/// created_at are read everywhere (check, stats, the dry run, inspect), their age unknown and
/// their TTL left out of stats' sample; evict removes exactly the expired keys. Mapped to expire a TTL after created_at, such a key never
/// expires, and inspect says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_laravel_table_with_null_timestamps_is_maintained_as_shipped() {
    let row = |kind: &str, expires: &str, created: &str| {
        format!(
            "INSERT INTO idempotency_keys (\"key\", response, expires_at, created_at, updated_at) \
             SELECT '{kind}-' || g, '{{\"order\": 1}}', date_trunc('second', {}), {created}, {created} \
             FROM generate_series(1, 4) g;",
            utc(expires)
        )
    };
    let rows = [
        row("near-old", "-30 minutes", "NULL"),
        row("near-new", "30 minutes", "NULL"),
        row(
            "done-old",
            "-3 days",
            &format!("date_trunc('second', {})", utc("-4 days")),
        ),
    ]
    .concat();
    let s = Shape::new("Laravel", &rows).await;
    let run = s.idemctl().args(["-o", "json", "stats"]).run();
    run.assert_success();
    assert_eq!(run.json()["oldest_live"]["key"], "near-new-1", "{run}");
    assert_eq!(
        run.json()["oldest_live"]["seconds"],
        serde_json::Value::Null,
        "{run}"
    );
    s.idemctl()
        .args(["evict", "--dry-run"])
        .run()
        .assert_success()
        .assert_stdout_contains("would evict       8");
    s.idemctl()
        .args(["inspect", "near-new-1"])
        .run()
        .assert_success()
        .assert_stdout_contains("created_at       -\n");

    let by_ttl = s.dir.path().join("ttl.toml");
    std::fs::write(
        &by_ttl,
        format!(
            "ttl = \"24h\"\n{}\n",
            doc_block("Laravel", "toml").replace("expires_at = \"expires_at\"\n", "")
        ),
    )
    .unwrap();
    s.db.idemctl()
        .args([
            "--config",
            &by_ttl.to_string_lossy(),
            "inspect",
            "near-old-1",
        ])
        .run()
        .assert_success()
        .assert_stdout_contains("no expiry (created_at is NULL), so evict never removes it")
        .assert_stdout_contains("expires_at       - (created_at is NULL)");

    let kind = "split_part(\"key\", '-', 1) || '-' || split_part(\"key\", '-', 2)";
    s.evicts_exactly("idempotency_keys", kind, Some(8), &[("near-new", 4)])
        .await;
    // Every key left has a NULL created_at: none has a TTL to sample.
    s.idemctl()
        .arg("stats")
        .run()
        .assert_success()
        .assert_stdout_contains("recent TTL                no keys to sample");
}

/// A unique index over a column that allows NULL (a TypeORM migration's optional `scope`) is not
/// walked: NULLs let it hold duplicates and end keyset pagination's row comparison. evict refuses
/// before deleting anything (exit 2) instead of failing after its first page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_index_over_a_nullable_column_is_not_walked() {
    let ddl = "CREATE TABLE idempotency_keys (idempotency_key uuid NOT NULL, endpoint text NOT NULL, scope text, \
               status varchar(20) NOT NULL DEFAULT 'PROCESSING', created_at timestamp DEFAULT now()); \
               CREATE UNIQUE INDEX idx_idempotency_key_scope ON idempotency_keys (idempotency_key, endpoint, scope);";
    let rows = format!(
        "INSERT INTO idempotency_keys SELECT gen_random_uuid(), '/orders', CASE WHEN g % 2 = 0 THEN NULL ELSE 'user-' || g END, \
         'COMPLETED', {} FROM generate_series(1, 12) g;",
        utc("-3 days")
    );
    let db = loaded(ddl, &rows, None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(
        &config,
        "ttl = \"24h\"\n[profiles.typeorm]\nkey = \"idempotency_key\"\ntenant = [\"endpoint\", \"scope\"]\n\
         in_flight = { column = \"status\", values = [\"PROCESSING\"], done = [\"COMPLETED\", \"FAILED\"] }\n\
         time_zone = \"UTC\"\n",
    )
    .unwrap();
    db.idemctl()
        .args(["--config", &config.to_string_lossy(), "evict", "--batch-size", "5"])
        .run()
        .assert_error(
            2,
            "table public.idempotency_keys has no index on created_at and no unique index of plain NOT NULL columns to walk, so expired keys cannot be found in bounded batches; create the index with: CREATE INDEX CONCURRENTLY \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (created_at);",
        );
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        12
    );
}

/// Without an index on the expiry column (TypeORM ships none) the eviction lag cannot be measured,
/// and is never a 0 that reads as "nothing waits": null in JSON and `idemctl_eviction_lag_known 0`
/// in the metrics, with the planner's estimate beside it, marked so (here the keys' one creation
/// time, 3 days ago, is the most common value ANALYZE saw: their expiry, a 24h TTL later, is 2 days
/// past); with the index it is measured again, and the estimate is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_lag_stats_cannot_measure_is_estimated_apart_never_zero() {
    let rows = format!(
        "INSERT INTO idempotency_key (\"key\", \"userId\", \"statusCode\", response, \"createdAt\") \
         SELECT 'old-' || g, 'user-1', 201, '{{}}', {} FROM generate_series(1, 4) g;",
        utc("-3 days")
    );
    let s = Shape::new("TypeORM", &rows).await;
    let run = s.idemctl().args(["-o", "json", "stats"]).run();
    run.assert_success();
    assert_eq!(run.json()["expiry_figures"], "estimated", "{run}");
    assert_eq!(
        run.json()["eviction_lag_seconds"],
        serde_json::Value::Null,
        "{run}"
    );
    let estimate = run.json()["eviction_lag_estimated_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no estimate: {run}"));
    assert!(
        (172_800.0..172_800.0 + 600.0).contains(&estimate),
        "{estimate}: {run}"
    );
    s.idemctl()
        .arg("stats")
        .run()
        .assert_success()
        .assert_stdout_contains(
            "eviction lag              about 2d (estimated: the planner's statistics as of the last analyze, no index on expiry)\n",
        );
    let lag_samples = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("idemctl_eviction_lag_"))
            .map(|l| l.split('{').next().unwrap().to_owned() + " " + l.rsplit(' ').next().unwrap())
            .collect::<Vec<_>>()
    };
    let run = s.idemctl().args(["stats", "-o", "prometheus"]).run();
    run.assert_success();
    let samples = lag_samples(&run.stdout);
    assert_eq!(samples[0], "idemctl_eviction_lag_known 0", "{run}");
    let gauge: f64 = samples[1]
        .strip_prefix("idemctl_eviction_lag_estimated_seconds ")
        .unwrap_or_else(|| panic!("no estimate gauge: {run}"))
        .parse()
        .unwrap();
    assert!((172_800.0..172_800.0 + 600.0).contains(&gauge), "{run}");
    assert_eq!(samples.len(), 2, "{run}");
    // Nor is the backlog a 0 when it cannot be counted: the planner's estimate has its own gauge.
    let backlog_samples = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("idemctl_expired_backlog_"))
            .map(|l| l.split('{').next().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        backlog_samples(&run.stdout),
        ["idemctl_expired_backlog_estimated_keys"],
        "{run}"
    );
    crate::metrics::promtool_check_metrics(&run.stdout);

    s.db.client()
        .await
        .batch_execute("CREATE INDEX ON idempotency_key (\"createdAt\"); ANALYZE idempotency_key;")
        .await
        .unwrap();
    let run = s.idemctl().args(["stats", "-o", "prometheus"]).run();
    run.assert_success();
    let samples = lag_samples(&run.stdout);
    assert!(
        samples.iter().any(|l| l == "idemctl_eviction_lag_known 1"),
        "{run}"
    );
    assert!(
        !samples
            .iter()
            .any(|l| l.starts_with("idemctl_eviction_lag_estimated_")),
        "{run}"
    );
    let lag: f64 = samples
        .iter()
        .find_map(|l| l.strip_prefix("idemctl_eviction_lag_seconds "))
        .unwrap_or_else(|| panic!("no lag gauge: {run}"))
        .parse()
        .unwrap();
    assert!(lag > 86_400.0, "{run}");
    assert_eq!(
        backlog_samples(&run.stdout),
        [
            "idemctl_expired_backlog_keys",
            "idemctl_expired_backlog_capped"
        ],
        "{run}"
    );
}

/// On a table with no response column (MassTransit's inbox) inspect says so instead of "no stored
/// response", in text and JSON; the whole row's timestamptz values are in UTC like every time above
/// them, whatever the session's zone (Asia/Tokyo here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_says_a_table_has_no_response_column_and_shows_the_row_in_utc() {
    let rows = "INSERT INTO \"InboxState\" (\"MessageId\", \"ConsumerId\", \"LockId\", \"Received\", \"ReceiveCount\", \
                \"Consumed\", \"Delivered\") VALUES ('10000000-0000-0000-0000-000000000001', \
                '11111111-1111-1111-1111-111111111111', gen_random_uuid(), '2026-01-02 03:04:05.25+00', 1, \
                '2026-01-02 03:04:06+00', now() - interval '1 day');";
    let s = Shape::new("EF Core (MassTransit inbox)", rows).await;
    let args = [
        "inspect",
        "10000000-0000-0000-0000-000000000001",
        "--api-key-id",
        "11111111-1111-1111-1111-111111111111",
    ];
    let run = s.idemctl().args(args).run();
    run.assert_success()
        .assert_stdout_contains("response_body: - (the table has no response column)\n")
        .assert_stdout_contains("2026-01-02T03:04:05.25Z\n")
        .assert_stdout_contains("2026-01-02T03:04:06Z\n");
    assert!(!run.stdout.contains("no stored response"), "{run}");
    assert!(!run.stdout.contains("+09:00"), "{run}");
    let run = s.idemctl().args(["-o", "json"]).args(args).run();
    run.assert_success();
    let j = run.json();
    assert_eq!(j["response_column"], serde_json::Value::Null, "{run}");
    assert_eq!(j["response_body"], serde_json::Value::Null, "{run}");
    let value = |column: &str| {
        j["row"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["column"] == column)
            .map(|c| c["value"].clone())
    };
    assert_eq!(
        value("Received"),
        Some("2026-01-02T03:04:05.25Z".into()),
        "{run}"
    );
    assert_eq!(
        value("ExpirationTime"),
        Some(serde_json::Value::Null),
        "{run}"
    );
}

/// A nullable created_at (Laravel's, Alembic's `timestamptz NULL`): reclaim lists a stuck key whose
/// created_at is NULL (its locked_at says how long it is held), writes the NULL into the plan, and
/// --apply takes exactly that row; a plan row whose created_at was set since is "changed", not taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_takes_stuck_keys_whose_created_at_is_null() {
    let ddl = "CREATE TABLE idempotency_keys (key varchar(255) PRIMARY KEY, response_code integer, \
               locked_at timestamptz, created_at timestamptz NULL, expires_at timestamptz NOT NULL); \
               CREATE INDEX ON idempotency_keys (expires_at);";
    let rows = "INSERT INTO idempotency_keys SELECT 'stuck-' || g, NULL, now() - interval '1 hour', \
                CASE WHEN g = 1 THEN now() - interval '1 hour' END, now() + interval '1 day' \
                FROM generate_series(1, 3) g; \
                INSERT INTO idempotency_keys VALUES ('done-1', 200, NULL, NULL, now() + interval '1 day');";
    let db = loaded(ddl, rows, None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(
        &config,
        "[profiles.nullable]\nkey = \"key\"\nlocked_at = \"locked_at\"\nexpires_at = \"expires_at\"\n\
         response_status = \"response_code\"\nactions = [\"delete\"]\n\
         in_flight.predicate = 'response_code IS NULL'\n",
    )
    .unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    let run = idemctl()
        .args(["-o", "json", "reclaim", "--dry-run", "--allow-scan"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["would_reclaim"]["count"], 3, "{run}");
    let plan = dir.path().join("plan.json");
    idemctl()
        .args(["reclaim", "--allow-scan", "--plan"])
        .arg(&plan)
        .run()
        .assert_success();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let nulls = written["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["created_at"].is_null())
        .count();
    assert_eq!(nulls, 2, "{written}");
    db.exec("UPDATE idempotency_keys SET created_at = now() WHERE key = 'stuck-3'")
        .await;
    let run = idemctl()
        .args(["-o", "json", "reclaim", "--yes", "--allow-scan", "--apply"])
        .arg(&plan)
        .run();
    run.assert_success();
    assert_eq!(run.json()["rows_reclaimed"], 2, "{run}");
    assert!(run.stdout.contains("\"changed\""), "{run}");
    assert_eq!(
        scalar_text(
            &db,
            "SELECT string_agg(key, ' ' ORDER BY key) FROM idempotency_keys"
        )
        .await,
        "done-1 stuck-3"
    );
}

/// A unique index over a scope column that allows NULL does not identify a row (NULLs let it hold
/// duplicates): check does not call it the identity index, batches name rows by the primary key,
/// and reclaim refuses to write or apply a plan (which would report NULL-scope keys as gone) before
/// reading anything, while a sweep takes them where they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nullable_scope_is_not_an_identity_and_reclaim_plans_refuse_it() {
    let ddl = "CREATE TABLE idempotency_keys (id serial PRIMARY KEY, idempotency_key uuid NOT NULL, endpoint text NOT NULL, \
               scope text, status varchar(20) NOT NULL DEFAULT 'PROCESSING', created_at timestamptz NOT NULL DEFAULT now()); \
               CREATE UNIQUE INDEX idx_idempotency_key_scope ON idempotency_keys (idempotency_key, endpoint, scope); \
               CREATE INDEX ON idempotency_keys (created_at);";
    let rows = "INSERT INTO idempotency_keys (idempotency_key, endpoint, scope, created_at) \
                SELECT gen_random_uuid(), '/orders', CASE WHEN g % 2 = 0 THEN NULL ELSE 'user-' || g END, \
                now() - interval '1 hour' FROM generate_series(1, 4) g;";
    let db = loaded(ddl, rows, None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(
        &config,
        "ttl = \"24h\"\n[profiles.nullscope]\nkey = \"idempotency_key\"\ntenant = [\"endpoint\", \"scope\"]\n\
         actions = [\"delete\"]\n\
         in_flight = { column = \"status\", values = [\"PROCESSING\"], done = [\"COMPLETED\"] }\n",
    )
    .unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    idemctl().arg("check").run().assert_stdout_contains(
        "identity index\tWARN\tno valid unique index makes (endpoint, scope, idempotency_key) name one row",
    );
    let refusal = "table public.idempotency_keys has scope columns that allow NULL (scope) and no unique index that keeps a key unique under a NULL scope, so a plan row could name several rows: --plan and --apply refuse; reclaim without a plan (--dry-run, then --yes) takes such keys where they are, or make the unique index NULLS NOT DISTINCT (PostgreSQL 15+) or the columns NOT NULL";
    let plan = dir.path().join("plan.json");
    idemctl()
        .args(["reclaim", "--allow-scan", "--plan"])
        .arg(&plan)
        .run()
        .assert_error(2, refusal);
    assert!(!plan.exists());
    let run = idemctl()
        .args(["-o", "json", "reclaim", "--yes", "--allow-scan"])
        .run();
    run.assert_success();
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        0,
        "{run}"
    );
}

/// A TypeORM-shaped table whose unique index over an optional `scope` column is made NULLS NOT
/// DISTINCT (PostgreSQL 15+): keys under a NULL scope are unique too. Two rows per state differ
/// only in a NULL scope and the string 'NULL'.
const NULLS_NOT_DISTINCT_DDL: &str = "CREATE TABLE idempotency_keys (id serial PRIMARY KEY, idempotency_key text NOT NULL, \
    endpoint text NOT NULL, scope text, status varchar(20) NOT NULL DEFAULT 'PROCESSING', \
    created_at timestamptz NOT NULL DEFAULT now()); \
    CREATE UNIQUE INDEX idx_idempotency_key_scope ON idempotency_keys (idempotency_key, endpoint, scope) NULLS NOT DISTINCT; \
    CREATE INDEX ON idempotency_keys (created_at);";

/// The rows of the nullable-scope fixtures: under each of the scopes NULL, 'NULL' and 'user-1',
/// a stuck key `k-stuck`, a completed `k-done` and a young in-flight `k-young`.
const NULLABLE_SCOPE_ROWS: &str = "INSERT INTO idempotency_keys (idempotency_key, endpoint, scope, status, created_at) \
    SELECT k, '/orders', s, CASE WHEN k = 'k-done' THEN 'COMPLETED' ELSE 'PROCESSING' END, \
           CASE WHEN k = 'k-young' THEN now() ELSE now() - interval '1 hour' END \
      FROM unnest(ARRAY[NULL, 'NULL', 'user-1']) s, unnest(ARRAY['k-stuck', 'k-done', 'k-young']) k;";

/// The mapping of the nullable-scope fixtures.
const NULLABLE_SCOPE_MAPPING: &str = "ttl = \"24h\"\n[profiles.nullscope]\nkey = \"idempotency_key\"\n\
    tenant = [\"endpoint\", \"scope\"]\nactions = [\"delete\"]\n\
    in_flight = { column = \"status\", values = [\"PROCESSING\"], done = [\"COMPLETED\"] }\n";

/// A unique index made NULLS NOT DISTINCT over a nullable scope column identifies a row: check
/// calls it the identity index (the fixture's index refuses a second NULL-scope key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nulls_not_distinct_index_over_a_nullable_scope_is_the_identity() {
    let db = loaded(NULLS_NOT_DISTINCT_DDL, NULLABLE_SCOPE_ROWS, None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(&config, NULLABLE_SCOPE_MAPPING).unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    idemctl().arg("check").run().assert_stdout_contains(
        "identity index\tok\tidx_idempotency_key_scope is unique on (idempotency_key, endpoint, scope), so (endpoint, scope, idempotency_key) identifies a row",
    );
    let duplicate = db
        .client()
        .await
        .execute(
            "INSERT INTO idempotency_keys (idempotency_key, endpoint, scope) VALUES ('k-stuck', '/orders', NULL)",
            &[],
        )
        .await;
    assert!(
        duplicate.is_err(),
        "the fixture's index must refuse a second NULL-scope key"
    );
}

/// inspect names a NULL scope value with --scope-null (selected with IS NULL), told apart from
/// the text 'NULL' (--scope scope=NULL), with the whole scope given or only part of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_tells_a_null_scope_from_the_text_null() {
    let db = loaded(NULLS_NOT_DISTINCT_DDL, NULLABLE_SCOPE_ROWS, None).await;
    db.exec("UPDATE idempotency_keys SET status = 'COMPLETED-' || coalesce(scope, 'sql-null') WHERE idempotency_key = 'k-done'")
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(&config, NULLABLE_SCOPE_MAPPING).unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    let state_of = |run: &crate::support::Run| {
        let json = run.json();
        let status = json["row"]
            .as_array()
            .and_then(|r| r.iter().find(|c| c["column"] == "status"))
            .map(|c| c["value"].clone());
        (json["scope"]["scope"].clone(), status)
    };
    let null = idemctl()
        .args([
            "-o",
            "json",
            "inspect",
            "k-done",
            "--scope",
            "endpoint=/orders",
            "--scope-null",
            "scope",
        ])
        .run();
    null.assert_success();
    assert_eq!(
        state_of(&null),
        (
            serde_json::Value::Null,
            Some(serde_json::json!("COMPLETED-sql-null"))
        ),
        "{null}"
    );
    let text = idemctl()
        .args([
            "-o",
            "json",
            "inspect",
            "k-done",
            "--scope",
            "endpoint=/orders",
            "--scope",
            "scope=NULL",
        ])
        .run();
    text.assert_success();
    assert_eq!(
        state_of(&text),
        (
            serde_json::json!("NULL"),
            Some(serde_json::json!("COMPLETED-NULL"))
        ),
        "{text}"
    );
    // Part of the scope: through the index led by the key.
    let part = idemctl()
        .args(["-o", "json", "inspect", "k-done", "--scope-null", "scope"])
        .run();
    part.assert_success();
    assert_eq!(
        state_of(&part).1,
        Some(serde_json::json!("COMPLETED-sql-null")),
        "{part}"
    );
    idemctl()
        .args([
            "inspect",
            "k-done",
            "--scope",
            "endpoint=/orders",
            "--scope-null",
            "scope",
        ])
        .run()
        .assert_success()
        .assert_stdout_contains("\nscope            NULL\n")
        .assert_stdout_contains("\nscope (tenant)         NULL\n");
    idemctl()
        .args([
            "inspect",
            "k-done",
            "--scope",
            "endpoint=/orders",
            "--scope",
            "scope=NULL",
        ])
        .run()
        .assert_success()
        .assert_stdout_contains("\nscope            \"NULL\"\n")
        .assert_stdout_contains("\nscope (tenant)         \"NULL\"\n");
    idemctl()
        .args([
            "inspect",
            "k-gone",
            "--scope",
            "endpoint=/orders",
            "--scope-null",
            "scope",
        ])
        .run()
        .assert_error(3, "key k-gone not found for endpoint=/orders scope IS NULL");
    idemctl()
        .args(["inspect", "k-gone", "--scope-null", "scope"])
        .run()
        .assert_error(3, "key k-gone not found under any scope with scope IS NULL");
    idemctl()
        .args([
            "inspect",
            "k-done",
            "--scope",
            "scope=x",
            "--scope-null",
            "scope",
        ])
        .run()
        .assert_error(
            2,
            "--scope names column scope twice: give each scope column once",
        );
    idemctl()
        .args(["inspect", "k-done", "--scope-null", "nope"])
        .run()
        .assert_error(2, "--scope names column nope, which is not in the scope of table public.idempotency_keys (profile nullscope): its scope is (endpoint, scope); name those columns");
}

/// With no index led by the key, inspect finds a key without its whole scope by walking the scope
/// values through an index, which never visits NULL: --scope-null for a walked column is refused
/// (exit 2) rather than answered "not found", while the whole scope, NULL included, is looked up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_scope_the_walk_would_miss_is_refused_not_reported_missing() {
    let ddl = NULLS_NOT_DISTINCT_DDL.replace(
        "(idempotency_key, endpoint, scope) NULLS NOT DISTINCT",
        "(endpoint, scope, idempotency_key) NULLS NOT DISTINCT",
    );
    let db = loaded(&ddl, NULLABLE_SCOPE_ROWS, None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(&config, NULLABLE_SCOPE_MAPPING).unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    idemctl()
        .args(["inspect", "k-stuck", "--scope-null", "scope"])
        .run()
        .assert_error(
            2,
            "--scope-null scope cannot be looked up without the whole scope on table public.idempotency_keys: with no index led by its key, inspect walks the values of scope through an index, which never visits NULL; give every scope column (--scope or --scope-null), or create: CREATE INDEX CONCURRENTLY \"idempotency_keys_key\" ON \"public\".\"idempotency_keys\" (idempotency_key);",
        );
    let run = idemctl()
        .args([
            "-o",
            "json",
            "inspect",
            "k-stuck",
            "--scope",
            "endpoint=/orders",
            "--scope-null",
            "scope",
        ])
        .run();
    run.assert_success();
    assert_eq!(
        run.json()["scope"],
        json!({"endpoint": "/orders", "scope": null}),
        "{run}"
    );
    // Part of the scope, the nullable column not given: the walk finds k-done under 'NULL' and
    // 'user-1', and says that a key under a NULL there was not looked at.
    let part = idemctl()
        .args(["inspect", "k-done", "--scope", "endpoint=/orders"])
        .run();
    part.assert_code(2).assert_stderr(
        "idemctl: warning: keys stored with NULL in scope column scope were not searched: with no index led by the key, inspect walks the scope's values through an index, which never visits NULL; give the whole scope (--scope, and --scope-null for each NULL) to look one up\n\
         idemctl: key k-done exists under 2 scopes; pass --scope COLUMN=VALUE for each of endpoint, scope to choose one\n",
    );
}

/// The stuck keys left, as `scope/key` with `<null>` for a NULL scope, in order.
async fn stuck_left(db: &crate::support::TestDb) -> String {
    scalar_text(
        db,
        "SELECT coalesce(string_agg(coalesce(scope, '<null>') || '/' || idempotency_key, ' ' \
         ORDER BY scope NULLS FIRST, idempotency_key), '') FROM idempotency_keys WHERE status = 'PROCESSING'",
    )
    .await
}

/// reclaim --plan / --apply on a nullable scope made unique by a NULLS NOT DISTINCT index: the
/// plan carries a NULL scope as null and the text 'NULL' as "NULL" (version 2), apply finds each
/// row exactly (IS NULL for the NULL one) and leaves the other alone, and a version 1 plan is still
/// applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_plans_name_a_null_scope_apart_from_the_text_null() {
    let db = loaded(NULLS_NOT_DISTINCT_DDL, NULLABLE_SCOPE_ROWS, None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(&config, NULLABLE_SCOPE_MAPPING).unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    let plan = dir.path().join("plan.json");
    idemctl()
        .args(["reclaim", "--allow-scan", "--plan"])
        .arg(&plan)
        .run()
        .assert_success();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(written["schema_version"], 2, "{written}");
    let scopes: Vec<(serde_json::Value, serde_json::Value)> = written["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["scope"].clone(), r["key"].clone()))
        .collect();

    assert_eq!(
        scopes,
        vec![
            (json!(["/orders", null]), json!("k-stuck")),
            (json!(["/orders", "NULL"]), json!("k-stuck")),
            (json!(["/orders", "user-1"]), json!("k-stuck")),
        ],
        "{written}"
    );
    // A row whose api_key_id is edited apart from its scope is refused before anything changes.
    let mut edited = written.clone();
    edited["rows"][0]["api_key_id"] = json!("{/orders,user-2}");
    let edited_path = dir.path().join("edited.json");
    std::fs::write(&edited_path, edited.to_string()).unwrap();
    idemctl()
        .args(["reclaim", "--yes", "--allow-scan", "--apply"])
        .arg(&edited_path)
        .run()
        .assert_error(
            2,
            &format!(
                "plan {} is not a valid reclaim plan (the row of key k-stuck has api_key_id \"{{/orders,user-2}}\", which is not a scope of table public.idempotency_keys (endpoint, scope) written as its scope field holds it); nothing was changed, make a new one with --plan",
                edited_path.display()
            ),
        );
    assert_eq!(stuck_left(&db).await.matches("k-stuck").count(), 3);
    // A version 1 plan (no `scope`, the scope as one text array) of the user-1 row is applied.
    let mut v1 = written.clone();
    v1["schema_version"] = json!(1);
    let rows = v1["rows"].as_array_mut().unwrap();
    rows.retain(|r| r["scope"][1] == "user-1");
    rows[0].as_object_mut().unwrap().remove("scope");
    assert_eq!(rows[0]["api_key_id"], "{/orders,user-1}");
    let old = dir.path().join("v1.json");
    std::fs::write(&old, v1.to_string()).unwrap();
    let run = idemctl()
        .args(["-o", "json", "reclaim", "--yes", "--allow-scan", "--apply"])
        .arg(&old)
        .run();
    run.assert_success();
    assert_eq!(run.json()["rows_reclaimed"], 1, "{run}");
    assert_eq!(
        stuck_left(&db).await,
        "<null>/k-stuck <null>/k-young NULL/k-stuck NULL/k-young user-1/k-young"
    );
    // The text 'NULL' row is taken again after the plan: apply leaves it as changed and reclaims
    // the NULL one, whose record goes to the archive.
    db.exec("UPDATE idempotency_keys SET created_at = created_at + interval '1 second' WHERE scope = 'NULL' AND idempotency_key = 'k-stuck'")
        .await;
    let archive = dir.path().join("archive.jsonl");
    let run = idemctl()
        .args([
            "-o",
            "json",
            "reclaim",
            "--yes",
            "--allow-scan",
            "--archive",
        ])
        .arg(&archive)
        .arg("--apply")
        .arg(&plan)
        .run();
    run.assert_success();
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], 1, "{run}");
    let reasons: Vec<(serde_json::Value, serde_json::Value)> = j["left_alone"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["api_key_id"].clone(), l["reason"].clone()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (json!("{/orders,\"NULL\"}"), json!("changed")),
            (json!("{/orders,user-1}"), json!("gone")),
        ],
        "{run}"
    );
    assert_eq!(
        stuck_left(&db).await,
        "<null>/k-young NULL/k-stuck NULL/k-young user-1/k-young"
    );
    let archived = std::fs::read_to_string(&archive).unwrap();
    assert!(
        archived.contains("\"scope\":{\"endpoint\":\"/orders\",\"scope\":null}"),
        "{archived}"
    );
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        7
    );
}

/// A plain nullable one-column scope (NULLs distinct in its unique index, so two rows may share a
/// key under a NULL scope): inspect --scope-null lists both, --api-key-id NULL names the text, a
/// plan is refused, and a sweep takes the stuck keys under every scope, NULL included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_nullable_scope_is_inspected_and_swept_but_not_planned() {
    let ddl = NULLS_NOT_DISTINCT_DDL.replace(" NULLS NOT DISTINCT", "");
    let rows = format!(
        "{NULLABLE_SCOPE_ROWS} INSERT INTO idempotency_keys (idempotency_key, endpoint, scope, status, created_at) \
         VALUES ('k-stuck', '/refunds', NULL, 'PROCESSING', now() - interval '1 hour');"
    );
    let db = loaded(&ddl, &rows, None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(
        &config,
        NULLABLE_SCOPE_MAPPING.replace("tenant = [\"endpoint\", \"scope\"]", "tenant = \"scope\""),
    )
    .unwrap();
    let idemctl = || db.idemctl().args(["--config", &config.to_string_lossy()]);
    let listed = idemctl()
        .args(["-o", "json", "inspect", "k-stuck", "--scope-null", "scope"])
        .run();
    listed.assert_code(2).assert_stderr(
        "idemctl: key k-stuck exists under 2 tenants; pass --api-key-id to choose one\n",
    );
    let matches: Vec<serde_json::Value> = listed.json()["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["scope"].clone())
        .collect();
    assert_eq!(
        matches,
        vec![serde_json::json!({"scope": null}); 2],
        "{listed}"
    );
    let text = idemctl()
        .args(["-o", "json", "inspect", "k-stuck", "--api-key-id", "NULL"])
        .run();
    text.assert_success();
    assert_eq!(
        text.json()["scope"],
        serde_json::json!({"scope": "NULL"}),
        "{text}"
    );
    let plan = dir.path().join("plan.json");
    idemctl()
        .args(["reclaim", "--allow-scan", "--plan"])
        .arg(&plan)
        .run()
        .assert_error(
            2,
            "table public.idempotency_keys has scope columns that allow NULL (scope) and no unique index that keeps a key unique under a NULL scope, so a plan row could name several rows: --plan and --apply refuse; reclaim without a plan (--dry-run, then --yes) takes such keys where they are, or make the unique index NULLS NOT DISTINCT (PostgreSQL 15+) or the columns NOT NULL",
        );
    assert!(!plan.exists());
    let run = idemctl()
        .args(["-o", "json", "reclaim", "--yes", "--allow-scan"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["rows_reclaimed"], 4, "{run}");
    assert_eq!(
        stuck_left(&db).await,
        "<null>/k-young NULL/k-young user-1/k-young"
    );
}

/// `value` as an SQL string literal.
fn sql_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

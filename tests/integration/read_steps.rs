//! The steps of stats, check, inspect, top and reclaim, each made to fail for real: the run's
//! connection is broken by a [`Tripwire`] as the run sends the step's statement (the server never
//! sees it), and the one stderr line naming the step and the exit code are asserted exactly, with
//! the table as it was before the run.

use crate::fixtures::{self, Mix, Schema};
use crate::support::stuck::db_with_stuck;
use crate::support::tripwire::Tripwire;
use crate::support::{Cmd, Run, TestDb};

/// What every broken step below meets: its connection closed, without a word from the server.
const LOST: &str = "the connection was closed without a reason";

/// The head of the line of a writing reclaim whose first batch lost its connection where it may
/// have committed (at its COMMIT, or its one statement).
const RECLAIM_LOST: &str = "reclaim lost its connection: 0 keys reclaimed by batches whose \
                            commit the server confirmed; the batch in flight (500 keys at most) \
                            may or may not have committed: run reclaim again, which takes what is \
                            still stuck";

/// The same where it lost its connection inside its transaction, before its COMMIT was sent.
const RECLAIM_LOST_UNCOMMITTED: &str = "reclaim lost its connection: 0 keys reclaimed by batches \
                                        whose commit the server confirmed; the batch in flight \
                                        never committed (its COMMIT was not sent, so the server \
                                        rolls it back): run reclaim again, which takes what is \
                                        still stuck";

/// One run broken at one statement: the command's arguments, a fragment of the statement's text,
/// and the step the run names for it.
struct Case<'a> {
    args: &'a [&'a str],
    sent: &'static [u8],
    step: &'a str,
}

/// A run of `args` through a [`Tripwire`] that breaks its connection when it sends `sent` for
/// the `nth` time; asserts it was sent that often.
async fn broken_at(db: &TestDb, sent: &'static [u8], nth: usize, args: &[&str]) -> Run {
    let port: u16 = crate::support::pg::server()
        .admin
        .get("port")
        .expect("the server's port")
        .parse()
        .expect("a port number");
    let dir = db.socket_dir().expect("a local server");
    let wire = Tripwire::to_socket_dir(&dir, port, sent, nth);
    let url = db.url_with(&[
        ("host", "127.0.0.1"),
        ("port", &wire.port().to_string()),
        ("sslmode", "disable"),
    ]);
    let run = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", url)
        .args(args)
        .run_async()
        .await;
    assert!(
        wire.seen() >= nth,
        "{args:?} sent {:?} {} times, not {nth}:\n{run}",
        String::from_utf8_lossy(sent),
        wire.seen()
    );
    run
}

/// Each case's run, broken at its statement, ends with `idemctl: failed to <step>: <LOST>`, exit
/// 1, and leaves the table as it was.
async fn each_names_its_step(db: &TestDb, cases: &[Case<'_>]) {
    let before = fixtures::snapshot(db).await;
    for case in cases {
        eprintln!(
            "{:?} broken at {:?}",
            case.args,
            String::from_utf8_lossy(case.sent)
        );
        broken_at(db, case.sent, 1, case.args)
            .await
            .assert_error(1, &format!("failed to {}: {LOST}", case.step));
    }
    assert_eq!(fixtures::snapshot(db).await, before);
}

/// The key table with stuck keys and reclaim's index, and an in_progress key `k1` of tenant_1
/// whose row a finished transaction locked, so inspect asks whether that transaction still runs.
async fn table() -> TestDb {
    let db = db_with_stuck(20, 20).await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
           request_fingerprint, state, locked_at, created_at, expires_at) \
         VALUES ('k1', 'tenant_1', 'POST', '/v1/payments', '\\x00', 'in_progress', now(), now(), \
           now() + interval '1 day'); \
         BEGIN; SELECT 1 FROM idempotency_keys WHERE key = 'k1' FOR UPDATE; COMMIT;",
    )
    .await;
    db
}

/// Every catalog read and figure of stats, check's own reads, inspect's lookups (by the whole
/// identity, and through the tenants' index without the tenant) and its holder check, and top's
/// readings, each broken at its statement: the run names the step, exit 1, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_read_of_stats_check_inspect_and_top_names_its_step_when_its_connection_breaks() {
    let db = table().await;
    let stats: &[&str] = &["stats"];
    let check: &[&str] = &["check"];
    let by_tenant: &[&str] = &["inspect", "--api-key-id", "tenant_1", "k1"];
    let top: &[&str] = &["top", "--once", "--stuck-after", "5m"];
    let cases = [
        Case {
            args: stats,
            sent: b"-- Resolve --table to one relation",
            step: "look up the key table in the catalog",
        },
        Case {
            args: stats,
            sent: b"-- Columns of the key table and their types",
            step: "read the key table's columns",
        },
        Case {
            args: stats,
            sent: b"-- Indexes of the key table",
            step: "read the key table's indexes",
        },
        Case {
            args: stats,
            sent: b"-- What the current role may do on the key table",
            step: "read the role's privileges",
        },
        Case {
            args: stats,
            sent: b"-- reclaim: whether the current role may UPDATE each column",
            step: "read the role's column privileges",
        },
        Case {
            args: stats,
            sent: b"-- stats: estimated rows and sizes",
            step: "read table sizes",
        },
        Case {
            args: stats,
            sent: b"-- stats: dead tuples",
            step: "read vacuum statistics",
        },
        Case {
            args: stats,
            sent: b"-- stats: the live key that expires next",
            step: "find the oldest live key",
        },
        Case {
            args: stats,
            sent: b"-- stats: eviction lag, i.e.",
            step: "find the oldest expired key",
        },
        Case {
            args: stats,
            sent: b"-- stats / evict: expired completed keys still present",
            step: "count the expired backlog",
        },
        Case {
            args: stats,
            sent: b"-- stats: when autovacuum next vacuums",
            step: "read the autovacuum settings",
        },
        Case {
            args: stats,
            sent: b"-- stats / check: in_progress keys whose owner",
            step: "count stuck in_progress keys",
        },
        Case {
            args: stats,
            sent: b"-- stats: the TTL (expires_at - created_at) of recent keys",
            step: "sample the TTL of recent keys",
        },
        Case {
            args: check,
            sent: b"-- Whether this session may write",
            step: "check whether the session can write",
        },
        Case {
            args: check,
            sent: b"-- stats: the TTL (expires_at - created_at) of recent keys",
            step: "sample the TTL of recent keys",
        },
        Case {
            args: &["inspect", "k1"],
            sent: b"-- inspect without the whole scope, on a table",
            step: "read the key",
        },
        Case {
            args: by_tenant,
            sent: b"-- inspect: one key of one tenant",
            step: "read the key",
        },
        Case {
            args: by_tenant,
            sent: b"-- inspect: is the transaction that last locked",
            step: "check whether a running transaction holds the key",
        },
        Case {
            args: top,
            sent: b"-- top: the in_progress key held longest",
            step: "find the oldest stuck key",
        },
        Case {
            args: top,
            sent: b"-- top: the other sessions of idemctl",
            step: "list idemctl's sessions",
        },
        Case {
            args: top,
            sent: b"-- top: sessions waiting for a row",
            step: "list the sessions waiting for a key's row",
        },
    ];
    each_names_its_step(&db, &cases).await;
}

/// reclaim's preview (`--dry-run`, `--plan FILE`) broken at each statement of its read-only
/// snapshot, and at the read of the database's identity a plan records: the run names the step,
/// exit 1, nothing changed and no plan written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_step_of_reclaims_preview_names_itself_when_its_connection_breaks() {
    let db = table().await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let preview: &[&str] = &["reclaim", "--dry-run"];
    let cases = [
        Case {
            args: preview,
            sent: b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
            step: "start the preview's read-only transaction",
        },
        Case {
            args: preview,
            sent: b"-- The database clock",
            step: "read the database clock",
        },
        Case {
            args: preview,
            sent: b"-- reclaim --dry-run / --plan: the in_progress keys",
            step: "list stuck in_progress keys",
        },
        Case {
            args: preview,
            sent: b"-- reclaim: the stuck keys a run would take",
            step: "count stuck in_progress keys",
        },
        Case {
            args: preview,
            sent: b"COMMIT",
            step: "end the preview's transaction",
        },
        Case {
            args: &["reclaim", "--plan", plan.to_str().unwrap()],
            sent: b"-- Which cluster and database",
            step: "read which database this is",
        },
    ];
    each_names_its_step(&db, &cases).await;
    assert!(!plan.exists(), "a plan was written");
}

/// A writing reclaim broken before its first batch (setting the session's lock_timeout, counting
/// the stuck keys), at its one-statement batch, and at each statement of an archived batch's
/// transaction: the run names what failed, exit 1, and says the batch in flight may have
/// committed only where it may have (its one statement, its COMMIT); nothing is reclaimed, as no
/// COMMIT reached the server; an archive holds a batch's keys only once its change ran, and never
/// its commit line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_step_of_a_writing_reclaim_names_itself_when_its_connection_breaks() {
    let db = table().await;
    let before = fixtures::snapshot(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive.jsonl");
    let sweep: &[&str] = &["reclaim", "--yes"];
    let archived: &[&str] = &["reclaim", "--yes", "--archive", archive.to_str().unwrap()];
    let batch = b"-- reclaim --action delete: one batch";
    let cases: [(&[&str], &'static [u8], String, usize); 7] = [
        (
            sweep,
            b"SET lock_timeout",
            format!(
                "failed to set up the reclaim session: failed to set the session's lock_timeout: \
                 {LOST}"
            ),
            0,
        ),
        (
            sweep,
            b"-- reclaim: the stuck keys a run would take",
            format!("failed to count stuck in_progress keys: {LOST}"),
            0,
        ),
        (sweep, batch, format!("{RECLAIM_LOST}: {LOST}"), 0),
        (
            archived,
            b"BEGIN",
            format!(
                "{RECLAIM_LOST_UNCOMMITTED}: failed to start an archived batch's transaction: \
                 {LOST}"
            ),
            0,
        ),
        (
            archived,
            b"-- reclaim --archive: the first statement",
            format!(
                "{RECLAIM_LOST_UNCOMMITTED}: failed to read the records of a batch's keys for \
                 the archive: {LOST}"
            ),
            0,
        ),
        (
            archived,
            batch,
            format!(
                "{RECLAIM_LOST_UNCOMMITTED}: failed to change an archived batch's keys: {LOST}"
            ),
            0,
        ),
        (
            archived,
            b"COMMIT",
            format!(
                "{RECLAIM_LOST}: failed to commit a batch (its keys are in the archive): {LOST}"
            ),
            20,
        ),
    ];
    for (args, sent, line, archived_keys) in cases {
        eprintln!("{args:?} broken at {:?}", String::from_utf8_lossy(sent));
        let _ = std::fs::remove_file(&archive);
        broken_at(&db, sent, 1, args).await.assert_error(1, &line);
        assert_eq!(fixtures::snapshot(&db).await, before);
        let lines = std::fs::read_to_string(&archive).unwrap_or_default();
        let kinds: Vec<String> = lines
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string())
            .collect();
        assert_eq!(
            kinds,
            vec!["\"key\"".to_owned(); archived_keys],
            "{args:?} {lines}"
        );
    }
}

/// reclaim --apply of a reviewed plan (its 20 stuck keys), broken at its first batch: the line
/// says what is known (nothing confirmed, the batch in flight unknown), exit 1, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_apply_whose_batch_loses_its_connection_says_what_may_have_committed() {
    let db = table().await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run_async()
        .await
        .assert_code(0);
    let before = fixtures::snapshot(&db).await;
    broken_at(
        &db,
        b"-- reclaim --apply with --action delete: one batch",
        1,
        &["reclaim", "--yes", "--apply", plan.to_str().unwrap()],
    )
    .await
    .assert_error(
        1,
        "reclaim lost its connection: 0 keys reclaimed by batches whose commit the server \
         confirmed; the batch in flight (20 keys at most) may or may not have committed: run \
         reclaim again, which takes what is still stuck: the connection was closed without a \
         reason",
    );
    assert_eq!(fixtures::snapshot(&db).await, before);
}

/// stats on a table without the expiry index estimates the lag from the column's statistics;
/// on a table a foreign key references, stats and check read that key first; on the storage
/// reference's table (its primary key the key alone) inspect finds a key without its tenant
/// through that index: each read broken names its step, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reads_of_other_table_shapes_name_their_steps_when_their_connection_breaks() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 20,
        live: 20,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    db.exec(
        "CREATE TABLE charges (id bigint PRIMARY KEY, api_key_id text NOT NULL, key text NOT NULL, \
           FOREIGN KEY (api_key_id, key) REFERENCES idempotency_keys ON DELETE CASCADE); \
         CREATE INDEX ON charges (api_key_id, key);",
    )
    .await;
    let references = b"-- check and evict: the foreign keys that reference the key table";
    let cases = [
        Case {
            args: &["stats"],
            sent: references,
            step: "read the foreign keys that reference the table",
        },
        Case {
            args: &["check"],
            sent: references,
            step: "read the foreign keys that reference the table",
        },
    ];
    each_names_its_step(&db, &cases).await;
    db.exec("DROP TABLE charges; DROP INDEX idempotency_keys_expiry; ANALYZE idempotency_keys")
        .await;
    let cases = [Case {
        args: &["stats", "--ttl", "1d"],
        sent: b"-- stats on a table without an index on its expiry column",
        step: "read the expiry column's statistics",
    }];
    each_names_its_step(&db, &cases).await;
    let reference = TestDb::new().await;
    fixtures::table_with(&reference, Schema::Reference, mix).await;
    let key = fixtures::scalar_text(&reference, "SELECT min(key) FROM idempotency_keys").await;
    let cases = [Case {
        args: &["inspect", &key],
        sent: b"-- inspect without the whole scope (--api-key-id",
        step: "read the key",
    }];
    each_names_its_step(&reference, &cases).await;
}

/// A stderr that cannot take the error line (a full device) loses the line, never the exit code:
/// a refused run and refused arguments still end with their documented codes (3 and 2), where
/// writing the line used to panic twice and abort (134).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_line_stderr_cannot_take_keeps_the_runs_exit_code() {
    let db = TestDb::new().await;
    for (args, code) in [("stats --table nope", 3), ("stats --bogus", 2)] {
        db.command("sh")
            .args([
                "-c",
                &format!("exec \"$0\" {args} 2>/dev/full"),
                crate::support::IDEMCTL,
            ])
            .run_async()
            .await
            .assert_code(code)
            .assert_stdout_empty()
            .assert_stderr_empty();
    }
}

/// The metrics file's directory, checked writable before the run, runs out of inodes while the
/// run waits for a lock: the run's report stands, and the line says the metrics were not written
/// because no temporary file could be created there (without the random name it tried), exit 8,
/// with the earlier run's file left whole. A directory out of inodes before the run is refused
/// before it (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_whose_directory_cannot_take_a_new_file_say_so_and_exit_8() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 10,
        live: 10,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    let disk = crate::support::tmpfs::Tmpfs::mount("64k");
    let prom = disk.join("stats.prom");
    let stats = || {
        db.idemctl()
            .args(["stats", "--lock-timeout", "5m", "--textfile"])
            .arg(&prom)
    };
    stats().run_async().await.assert_code(0);
    let earlier = std::fs::read_to_string(&prom).unwrap();
    let holder = db.client().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let child = stats().spawn();
    let watcher = db.client().await;
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE application_name LIKE 'idemctl%' AND wait_event_type = 'Lock' \
                     AND datname = current_database()";
    let mut polls = 0;
    while watcher
        .query_one(waiting, &[])
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        polls += 1;
        assert!(polls < 1200, "stats never waited for the table's lock");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let out = std::process::Command::new("mount")
        .args(["-o", "remount,nr_inodes=8"])
        .arg(disk.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut filler = 0;
    while std::fs::File::create(disk.join(&format!("f{filler}"))).is_ok() {
        filler += 1;
    }
    holder.batch_execute("COMMIT").await.unwrap();
    let run = child.wait_async().await;
    let dir = disk.path().display().to_string();
    assert_eq!(
        run.stderr,
        format!(
            "idemctl: stats ran, end reason completed; its metrics were not written: --textfile \
             {}: failed to create a temporary file in {dir}: No space left on device (os error \
             28); the file still holds an earlier run's\n",
            prom.display()
        )
    );
    run.assert_code(8);
    assert_eq!(std::fs::read_to_string(&prom).unwrap(), earlier);
    stats().run_async().await.assert_error(
        2,
        &format!(
            "cannot write metrics to {}: cannot create a file in {dir}: No space left on device \
             (os error 28)",
            prom.display()
        ),
    );
    assert_eq!(std::fs::read_to_string(&prom).unwrap(), earlier);
}

/// A table whose key column allows NULL (as a Rails migration leaves it), holding rows without a
/// key beside a stuck row with one. No client can retry a row without a key, so reclaim's preview
/// lists only the keyed row and the sweep takes only it; stats, check and top count as stuck only
/// what reclaim would take. Every read that shows a key shows a missing one as NULL (null in JSON)
/// rather than failing: stats' oldest keys, top's, evict's preview sample; and evict removes the
/// expired completed row without a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_without_a_key_are_shown_as_null_and_never_counted_stuck_or_reclaimed() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    db.exec(
        "ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey; \
         CREATE UNIQUE INDEX idempotency_keys_identity ON idempotency_keys (api_key_id, key); \
         ALTER TABLE idempotency_keys ALTER key DROP NOT NULL; \
         INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
           request_fingerprint, state, locked_at, created_at, expires_at) \
         VALUES (NULL, 'tenant_1', 'POST', '/v1/payments', '\\x00', 'in_progress', \
           now() - interval '3 hours', now() - interval '2 hours', now() + interval '1 day'), \
                (NULL, 'tenant_1', 'POST', '/v1/payments', '\\x00', 'completed', \
           NULL, now() - interval '4 hours', now() - interval '1 hour'), \
                (NULL, 'tenant_1', 'POST', '/v1/payments', '\\x00', 'completed', \
           NULL, now() - interval '3 hours', now() + interval '1 hour'), \
                ('k-1', 'tenant_1', 'POST', '/v1/payments', '\\x00', 'in_progress', \
           now() - interval '2 hours', now() - interval '2 hours', now() + interval '1 day');",
    )
    .await;
    let stats = db.idemctl().args(["stats", "-o", "json"]).run_async().await;
    stats.assert_code(0);
    let s = stats.json();
    assert_eq!(s["stuck"]["count"]["count"], 1, "{stats}");
    assert_eq!(
        s["oldest_expired"]["key"],
        serde_json::Value::Null,
        "{stats}"
    );
    assert_eq!(s["oldest_expired"]["api_key_id"], "tenant_1", "{stats}");
    assert_eq!(s["oldest_live"]["key"], serde_json::Value::Null, "{stats}");
    let human = db.idemctl().args(["stats"]).run_async().await;
    human.assert_code(0);
    assert!(
        human
            .stdout
            .lines()
            .any(|l| l.starts_with("oldest live ") && l.contains(" tenant_1/NULL age 3h")),
        "{human}"
    );
    let top = db
        .idemctl()
        .args(["top", "--once", "-o", "json", "--interval", "500ms"])
        .run_async()
        .await;
    top.assert_code(0);
    let t = top.json();
    assert_eq!(t["stuck"]["count"], 1, "{top}");
    assert_eq!(t["oldest_stuck"]["key"], "k-1", "{top}");
    assert_eq!(t["oldest_live"]["key"], serde_json::Value::Null, "{top}");
    let check = db.idemctl().args(["check"]).run_async().await;
    check.assert_code(0);
    let dry = db
        .idemctl()
        .args(["evict", "--dry-run", "-o", "json"])
        .run_async()
        .await;
    dry.assert_code(0);
    let sample = &dry.json()["sample"];
    assert_eq!(sample.as_array().map(Vec::len), Some(1), "{dry}");
    assert_eq!(sample[0]["key"], serde_json::Value::Null, "{dry}");
    let shown = db.idemctl().args(["evict", "--dry-run"]).run_async().await;
    shown.assert_code(0);
    assert!(
        shown
            .stdout
            .lines()
            .any(|l| l.starts_with("tenant_1\tNULL\t")),
        "{shown}"
    );

    let preview = db
        .idemctl()
        .args(["reclaim", "--dry-run", "-o", "json"])
        .run_async()
        .await;
    preview.assert_code(0);
    let keys: Vec<_> = preview.json()["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("{preview}"))
        .iter()
        .map(|k| k["key"].clone())
        .collect();
    assert_eq!(keys, [serde_json::json!("k-1")], "{preview}");
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json"])
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], 1, "{run}");
    db.idemctl()
        .args(["evict"])
        .run_async()
        .await
        .assert_code(0);
    // Left: the row without a key in flight, and the live completed one.
    assert_eq!(
        fixtures::scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys \
              WHERE key IS NULL AND (state = 'in_progress' OR expires_at > now())"
        )
        .await,
        2
    );
    assert_eq!(
        fixtures::scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        2
    );
}

/// A stuck key whose created_at holds a date BC (RFC 3339 writes years 0000-9999 only): inspect's
/// JSON (which used to panic, exit 70), stats' JSON and the preview (which failed with the
/// formatter's words, naming no step) give its time in ISO 8601's expanded form; a plan holds it
/// (it failed to encode) and its apply reads it back and reclaims the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_taken_in_a_year_bc_is_inspected_planned_and_reclaimed() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
           request_fingerprint, state, locked_at, created_at, expires_at) \
         VALUES ('ancient', 'tenant_1', 'POST', '/v1/payments', '\\x00', 'in_progress', NULL, \
           '0100-01-01 00:00:00+00 BC', now() + interval '1 day');",
    )
    .await;
    let expanded = "-000099-01-01T00:00:00.000000000Z";
    let run = db
        .idemctl()
        .args([
            "inspect",
            "-o",
            "json",
            "--api-key-id",
            "tenant_1",
            "ancient",
        ])
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(run.json()["created_at"], expanded, "{run}");
    let run = db.idemctl().args(["stats", "-o", "json"]).run_async().await;
    run.assert_code(0);
    assert_eq!(run.json()["stuck"]["oldest_since"], expanded, "{run}");
    let run = db
        .idemctl()
        .args(["reclaim", "--dry-run", "-o", "json"])
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(run.json()["rows"][0]["held_since"], expanded, "{run}");
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run_async()
        .await
        .assert_code(0);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(written["rows"][0]["created_at"], expanded);
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--apply"])
        .arg(&plan)
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], 1, "{run}");
    assert_eq!(
        fixtures::scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        0
    );
}

/// reclaim asks on a terminal it may not write to (a job whose shell has gone, the terminal set
/// to `tostop`, where writing fails with EIO): it cannot ask, so nothing changes and the run exits
/// 1. Its line (`failed to ask for confirmation: Input/output error`) goes to the same terminal
/// and is lost there too: the terminal shows nothing, where the lost line used to panic twice and
/// abort the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_that_cannot_be_asked_ends_reclaim_with_exit_1_and_nothing_changed() {
    let db = table().await;
    let before = fixtures::snapshot(&db).await;
    let (shown, code, _) = crate::faults::orphaned_in_a_terminal_set(
        &["tostop"],
        &format!(
            "\"{}\" -d \"{}\" reclaim --action delete --older-than 30m",
            crate::support::IDEMCTL,
            db.url()
        ),
    )
    .await;
    assert_eq!((code, shown.as_str()), (1, ""));
    assert_eq!(fixtures::snapshot(&db).await, before);
}

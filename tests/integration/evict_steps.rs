//! Each step of `idemctl evict` (and of the reads `stats` and `check` share with it) made to fail
//! for real: a [`Tripwire`] breaks the connection when the run sends the step's statement, and the
//! run must end with the one line that names that step, with its exit code, and leave the table as
//! it was. Also the reasons --drop-partitions gives for a partition it leaves, each met for real.

use crate::fixtures::{self, Mix, Schema, snapshot};
use crate::support::partman::{self, PartitionBy};
use crate::support::tripwire::Tripwire;
use crate::support::{Run, TestDb};

/// Why the server's answer never came: the proxy closed the connection.
const CLOSED: &str = "the connection was closed without a reason";
/// The head of the line of a run that lost its connection before it deleted anything.
const LOST: &str = "evict lost its connection: 0 keys deleted and confirmed durable";

/// 300 expired keys (one batch of --batch-size 1000 deletes them all), a few live and in_progress.
const MIX: Mix = Mix {
    expired: 300,
    live: 50,
    fresh: 0,
    stuck: 5,
    expired_in_progress: 5,
};

/// A table with expired, live and in_progress keys (sql/schema.sql, with its expiry index).
async fn loaded() -> TestDb {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, MIX).await;
    db
}

/// The same table without its expiry index: evict walks the primary key instead.
async fn walked() -> TestDb {
    let db = loaded().await;
    db.exec("DROP INDEX idempotency_keys_expiry").await;
    db
}

/// The same table, three of its oldest expired keys referenced by an indexed NO ACTION foreign key.
async fn referenced() -> TestDb {
    let db = loaded().await;
    db.exec(
        "CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
         api_key_id text NOT NULL, key text NOT NULL, \
         FOREIGN KEY (api_key_id, key) REFERENCES idempotency_keys (api_key_id, key)); \
         CREATE INDEX orders_key ON orders (api_key_id, key); \
         INSERT INTO orders (api_key_id, key) SELECT api_key_id, key FROM idempotency_keys \
         WHERE state = 'completed' AND expires_at < now() ORDER BY expires_at LIMIT 3; \
         ANALYZE orders",
    )
    .await;
    db
}

/// The same table with `timestamp without time zone` columns (the zone is declared to idemctl).
async fn naive() -> TestDb {
    let db = loaded().await;
    db.exec(
        "ALTER TABLE idempotency_keys ALTER COLUMN created_at TYPE timestamp, \
         ALTER COLUMN locked_at TYPE timestamp, ALTER COLUMN expires_at TYPE timestamp",
    )
    .await;
    db
}

/// The keys in daily partitions on expires_at (9 days back, 3 ahead), with the in_progress index.
async fn partitioned() -> TestDb {
    let db = TestDb::new().await;
    partman::create(&db, PartitionBy::ExpiresAt, true).await;
    fixtures::load(&db, MIX).await;
    db
}

/// `args` run with the connection URL through a tripwire that breaks the connection the `nth`
/// time (over all the run's connections) a message holding `pattern` is sent. Returns the run and
/// how often the pattern was sent.
fn broken_at(db: &TestDb, pattern: &'static [u8], nth: usize, args: &[&str]) -> (Run, usize) {
    let wire = Tripwire::to_socket_dir(
        &db.socket_dir().expect("a local server"),
        server_port(),
        pattern,
        nth,
    );
    let run = through(db, &wire, args);
    (run, wire.seen())
}

/// The port of the test server (its Unix socket's name holds it).
fn server_port() -> u16 {
    crate::support::pg::server()
        .admin
        .get("port")
        .expect("the server's port")
        .parse()
        .expect("a port number")
}

/// `args` run through `wire` (plain TCP, as the tripwire reads what is sent).
fn through(db: &TestDb, wire: &Tripwire, args: &[&str]) -> Run {
    let url = db.url_with(&[
        ("host", "127.0.0.1"),
        ("port", &wire.port().to_string()),
        ("sslmode", "disable"),
    ]);
    crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", url)
        .args(args)
        .run()
}

/// One step broken: the command, a fragment of the step's statement, which sending of it breaks
/// the connection, the exit code and the line expected before the reason.
struct Case {
    args: &'static [&'static str],
    pattern: &'static [u8],
    nth: usize,
    code: i32,
    line: &'static str,
}

/// Run each case on a fresh table made by `setup`: the run must end with `idemctl: LINE: CLOSED`
/// and its exit code, nothing on stdout, the statement sent `nth` times, and the table unchanged.
/// Every mismatch is reported, named by its case's pattern.
async fn check_cases<F, Fut>(setup: F, cases: &[Case])
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = TestDb>,
{
    let mut wrong = Vec::new();
    for case in cases {
        let db = setup().await;
        let before = snapshot(&db).await;
        let (run, seen) = broken_at(&db, case.pattern, case.nth, case.args);
        let expected = format!("idemctl: {}: {CLOSED}\n", case.line);
        let changed = snapshot(&db).await != before;
        if run.code != case.code
            || run.stderr != expected
            || !run.stdout.is_empty()
            || seen != case.nth
            || changed
        {
            wrong.push(format!(
                "case {:?} (nth {}, sent {seen} times, table changed: {changed}): expected exit \
                 {} and {expected:?}\n{run}",
                String::from_utf8_lossy(case.pattern),
                case.nth,
                case.code,
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// A run broken at each statement it sends before its first batch commits (the lock, the lock's
/// idle bound, the evict session's settings, the round trip, the first batch itself, the WAL
/// position of --max-wal-rate, the vacuum rights of --vacuum, the replicas of --max-replica-lag):
/// its line names the step, says no key was deleted, and mentions a batch in flight only when the
/// connection was lost under one; the table is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_names_the_step_it_lost_its_connection_at_before_deleting_anything() {
    let one = &["evict", "--duty-cycle", "100"];
    check_cases(
        loaded,
        &[
            Case {
                args: &["evict"],
                pattern: b"take the table's maintenance lock for this session",
                nth: 1,
                code: 1,
                line: "failed to take the maintenance lock",
            },
            Case {
                args: &["evict"],
                pattern: b"On the session that holds the per-table maintenance lock",
                nth: 1,
                code: 1,
                line: "failed to bound how long the maintenance lock outlives a silent run",
            },
            Case {
                args: one,
                pattern: b"SET synchronous_commit = 'off'",
                nth: 1,
                code: 1,
                line: "evict lost its connection: 0 keys deleted and confirmed durable: failed to \
                       set up the evict session",
            },
            Case {
                args: one,
                pattern: b"evict's round trip to the server",
                nth: 1,
                code: 1,
                line: "evict lost its connection: 0 keys deleted and confirmed durable: failed to \
                       measure the round trip to the server",
            },
            Case {
                args: one,
                pattern: b"evict: one batch, one short statement",
                nth: 1,
                code: 1,
                line: "evict lost its connection: 0 keys deleted and confirmed durable; the batch \
                       in flight may or may not have committed: a batch lost its connection",
            },
            Case {
                args: &["evict", "--duty-cycle", "100", "--max-wal-rate", "100MB"],
                pattern: b"The server's WAL insert position",
                nth: 1,
                code: 1,
                line: "failed to read the server's WAL position",
            },
            Case {
                args: &["evict", "--duty-cycle", "100", "--max-wal-rate", "100MB"],
                pattern: b"The server's WAL insert position",
                nth: 2,
                code: 1,
                line: "evict lost its connection: 0 keys deleted and confirmed durable: failed to \
                       read the server's WAL position",
            },
            Case {
                args: &["evict", "--vacuum"],
                pattern: b"evict --vacuum: the relations VACUUM processes",
                nth: 1,
                code: 1,
                line: "failed to read who may vacuum the table",
            },
            Case {
                args: &["evict", "--max-replica-lag", "10s"],
                pattern: b"may this role read the replay positions",
                nth: 1,
                code: 1,
                line: "failed to check whether this role may read pg_stat_replication",
            },
            Case {
                args: &["evict", "--max-replica-lag", "10s"],
                pattern: b"every physical standby streaming from this primary",
                nth: 1,
                code: 1,
                line: "evict lost its connection: 0 keys deleted and confirmed durable: failed to \
                       read replica lag from pg_stat_replication",
            },
        ],
    )
    .await;
}

/// A dry run broken at each of its reads: the preview's counts, the first batch's range, the
/// EXPLAIN of the batch statement (its script and its commit), the sample, the replicas; a dry
/// run on a table without an expiry index, at the page of its walk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_dry_run_names_the_read_it_lost_its_connection_at() {
    let dry = &["evict", "--dry-run"];
    check_cases(
        loaded,
        &[
            Case {
                args: dry,
                pattern: b"what a run would delete, counted up to a cap",
                nth: 1,
                code: 1,
                line: "failed to preview the eviction",
            },
            Case {
                args: dry,
                pattern: b"claim the next batch range",
                nth: 1,
                code: 1,
                line: "failed to size the first batch",
            },
            Case {
                args: dry,
                pattern: b"PREPARE idemctl_evict_batch",
                nth: 1,
                code: 1,
                line: "failed to explain the batch statement",
            },
            Case {
                args: dry,
                pattern: b"COMMIT",
                nth: 1,
                code: 1,
                line: "failed to explain the batch statement",
            },
            Case {
                args: dry,
                pattern: b"a sample of the keys a run would delete",
                nth: 1,
                code: 1,
                line: "failed to sample the keys the run would evict",
            },
            Case {
                args: &["evict", "--dry-run", "--max-replica-lag", "10s"],
                pattern: b"every physical standby streaming from this primary",
                nth: 1,
                code: 1,
                line: "failed to read replica lag from pg_stat_replication",
            },
        ],
    )
    .await;
    check_cases(
        walked,
        &[Case {
            args: dry,
            pattern: b"one page of the unique index",
            nth: 1,
            code: 1,
            line: "failed to read a page of the walk",
        }],
    )
    .await;
}

/// The reads of the eviction lag and backlog (stats), and of the expired keys still referenced
/// (stats and check, with a NO ACTION foreign key), broken: each names its read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_check_name_the_eviction_read_they_lost_their_connection_at() {
    check_cases(
        loaded,
        &[
            Case {
                args: &["stats"],
                pattern: b"eviction lag, i.e. how long the oldest expired",
                nth: 1,
                code: 1,
                line: "failed to find the oldest expired key",
            },
            Case {
                args: &["stats"],
                pattern: b"expired completed keys still present",
                nth: 1,
                code: 1,
                line: "failed to count the expired backlog",
            },
        ],
    )
    .await;
    check_cases(
        referenced,
        &[
            Case {
                args: &["stats"],
                pattern: b"the eviction lag of the oldest",
                nth: 1,
                code: 1,
                line: "failed to find the oldest expired key evict can delete",
            },
            Case {
                args: &["check"],
                pattern: b"check: of the oldest $1 expired completed keys",
                nth: 1,
                code: 1,
                line: "failed to count the expired keys still referenced",
            },
        ],
    )
    .await;
}

/// The check of a declared time zone (a table of `timestamp without time zone` columns) broken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_names_the_time_zone_check_it_lost_its_connection_at() {
    check_cases(
        naive,
        &[Case {
            args: &["--time-zone", "UTC", "evict"],
            pattern: b"The zone a table's `timestamp without time zone` columns",
            nth: 1,
            code: 1,
            line: "failed to check the declared time zone",
        }],
    )
    .await;
}

/// On a partitioned table: the read of its partitioning, and, with --drop-partitions, the list of
/// its partitions, the probe of the first one (in a run, inside the transaction that detached it:
/// the detach is undone, every partition is still there) and the statements of its drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_names_the_partition_step_it_lost_its_connection_at() {
    check_cases(
        partitioned,
        &[
            Case {
                args: &["evict"],
                pattern: b"How a partitioned key table is partitioned",
                nth: 1,
                code: 1,
                line: "failed to read how the key table is partitioned",
            },
            Case {
                args: &["evict", "--drop-partitions"],
                pattern: b"every leaf partition of the key table",
                nth: 1,
                code: 1,
                line: "evict lost its connection: 0 keys deleted and confirmed durable: failed to \
                       list the key table's partitions",
            },
        ],
    )
    .await;
    let probe: &[u8] = b"may this partition go whole?";
    for dry_run in [false, true] {
        let db = partitioned().await;
        let names = partman::partition_names(&db).await;
        // names[0] is the default partition; the dated ones follow, oldest first.
        let oldest = format!("public.{}", names[1]);
        let mut args = vec!["evict", "--drop-partitions", "--drop-lock-timeout", "5s"];
        if dry_run {
            args.push("--dry-run");
        }
        let (run, seen) = broken_at(&db, probe, 1, &args);
        let head = if dry_run {
            String::new()
        } else {
            format!("{LOST}: ")
        };
        run.assert_error(
            1,
            &format!("{head}failed to probe partition {oldest}: {CLOSED}"),
        );
        assert_eq!(seen, 1);
        assert_eq!(partman::partition_names(&db).await, names);
    }
    // The drop's own transaction: lost before its COMMIT, the server rolls it back; lost at the
    // COMMIT, the line cannot know whether the server committed it first (here it never came).
    let drops: [(&[u8], &str); 3] = [
        (b"BEGIN", "failed to drop partition"),
        (b"DROP TABLE", "failed to drop partition"),
        (b"COMMIT", "the drop of partition"),
    ];
    for (pattern, words) in drops {
        let db = partitioned().await;
        let names = partman::partition_names(&db).await;
        let oldest = format!("public.{}", names[1]);
        let (run, seen) = broken_at(
            &db,
            pattern,
            1,
            &["evict", "--drop-partitions", "--drop-lock-timeout", "5s"],
        );
        let tail = match pattern {
            b"COMMIT" => " may or may not have committed",
            _ => "",
        };
        run.assert_error(1, &format!("{LOST}: {words} {oldest}{tail}: {CLOSED}"));
        assert_eq!(seen, 1, "{words}");
        assert_eq!(partman::partition_names(&db).await, names, "{words}");
    }
}

/// The partition dated `days_ago` days before today, as the summary names it.
async fn partition_of(db: &TestDb, days_ago: i32) -> String {
    fixtures::scalar_text(
        db,
        &format!(
            "SELECT 'public.idempotency_keys_p' || to_char(current_date - {days_ago}, 'YYYYMMDD')"
        ),
    )
    .await
}

/// What --drop-partitions left, by name, with the reasons as the JSON summary gives them.
fn kept(json: &serde_json::Value) -> Vec<(String, String)> {
    json["partitions_kept"]
        .as_array()
        .expect("partitions_kept")
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_owned(),
                k["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Why --drop-partitions left the partition `name`, as the JSON summary says.
fn reason_kept(json: &serde_json::Value, name: &str) -> String {
    kept(json)
        .into_iter()
        .find_map(|(n, why)| (n == name).then_some(why))
        .unwrap_or_else(|| panic!("{name} is not among the partitions kept: {json}"))
}

/// A partition that a view depends on cannot be dropped: the run keeps it, attached (the detach is
/// undone), says "other objects depend on it", evicts its keys in batches and ends well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_drop_partitions_keeps_a_partition_a_view_depends_on() {
    let db = partitioned().await;
    let viewed = partition_of(&db, 5).await;
    db.exec(&format!("CREATE VIEW old_keys AS SELECT * FROM {viewed}"))
        .await;
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
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(
        reason_kept(&j, &viewed),
        "other objects depend on it",
        "{j}"
    );
    assert_eq!(j["end_reason"], "drained");
    let names = partman::partition_names(&db).await;
    assert!(
        names.contains(&viewed["public.".len()..].to_owned()),
        "{names:?}"
    );
    let left = format!("SELECT count(*) FROM {viewed} WHERE state = 'completed'");
    assert_eq!(fixtures::scalar_i64(&db, &left).await, 0);
}

/// A role that owns the table but not one of its expired partitions leaves that partition: "the
/// role does not own it, so it cannot drop it"; it drops the others and evicts the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_drop_partitions_keeps_a_partition_the_role_does_not_own() {
    let db = partitioned().await;
    let role = format!(
        "evict_owner_{}",
        &db.name()[crate::support::pg::DB_PREFIX.len()..]
    );
    let foreign = partition_of(&db, 5).await;
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; ALTER TABLE idempotency_keys OWNER TO {role}; \
         DO $$ DECLARE p regclass; BEGIN \
           FOR p IN SELECT relid FROM pg_partition_tree('idempotency_keys') WHERE isleaf LOOP \
             EXECUTE format('ALTER TABLE %s OWNER TO {role}', p); \
           END LOOP; END $$; \
         ALTER TABLE {foreign} OWNER TO CURRENT_USER"
    ))
    .await;
    let run = db
        .idemctl()
        .args([
            "evict",
            "--drop-partitions",
            "--drop-lock-timeout",
            "5s",
            "-o",
            "json",
            "-d",
        ])
        .arg(db.url_with(&[("user", role.as_str())]))
        .run();
    db.exec(&format!("ALTER TABLE {foreign} OWNER TO {role}"))
        .await;
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
    run.assert_code(0);
    let j = run.json();
    assert_eq!(
        reason_kept(&j, &foreign),
        "the role does not own it, so it cannot drop it",
        "{j}"
    );
    assert_eq!(j["end_reason"], "drained");
    assert!(
        !j["dropped_partitions"].as_array().unwrap().is_empty(),
        "{j}"
    );
}

/// A run whose --max-runtime has passed before the drop phase reaches a partition tries none:
/// each expired partition is kept as "not tried: the run stopped first", none is dropped, no key
/// is deleted, and the run ends on its time budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_drop_partitions_tries_no_partition_once_the_run_must_stop() {
    let db = partitioned().await;
    let names = partman::partition_names(&db).await;
    let before = snapshot(&db).await;
    let run = db
        .idemctl()
        .args([
            "evict",
            "--drop-partitions",
            "--max-runtime",
            "1ns",
            "-o",
            "json",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    let kept = kept(&j);
    // Days -9 .. -1 have ended.
    assert_eq!(kept.len(), 9, "{j}");
    for (name, reason) in &kept {
        assert_eq!(reason, "not tried: the run stopped first", "{name}: {j}");
    }
    assert_eq!(j["dropped_partitions"], serde_json::json!([]), "{j}");
    assert_eq!(j["end_reason"], "time_budget", "{j}");
    assert_eq!(partman::partition_names(&db).await, names);
    assert_eq!(snapshot(&db).await, before);
}

/// A reference table on Citus: each batch is a transaction of its own on the coordinator, planned
/// with its values and with its row waits passed on to the workers. The connection broken at each
/// of its statements (BEGIN, the custom plan, passing the SET LOCALs on, the lock_timeout,
/// COMMIT): the line names that step under the lost batch, and the table is unchanged (a commit
/// the server never received is rolled back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_names_the_step_of_a_reference_table_batch_it_lost_its_connection_at() {
    use crate::support::citus::{CitusDb, Layout};
    use crate::support::tripwire::Upstream;
    let cases: [(&[u8], &str); 5] = [
        (b"BEGIN", "failed to start a batch's transaction"),
        (
            b"citus.propagate_set_commands",
            "failed to pass the batch's settings on to the Citus workers",
        ),
        (
            b"SET LOCAL plan_cache_mode = force_custom_plan",
            "failed to plan the batch with its values",
        ),
        (
            b"SET LOCAL lock_timeout",
            "failed to set the batch's lock_timeout",
        ),
        (b"COMMIT", "failed to commit a batch"),
    ];
    if crate::support::citus::skipped("citus evict steps of a reference table") {
        return;
    }
    for (pattern, step) in cases {
        let db = CitusDb::new(None).await;
        db.exec(include_str!("../../sql/schema.sql")).await;
        db.exec(&fixtures::load_sql(MIX)).await;
        db.distribute(Layout::Reference).await;
        let before = fixtures::snapshot_of(&db.client().await).await;
        let wire = Tripwire::start(Upstream::Tcp(db.cluster().coordinator().port), pattern, 1);
        let port = wire.port().to_string();
        let run = crate::support::Cmd::new()
            .env(
                "IDEMCTL_DATABASE_URL",
                db.url_with(&[("port", &port), ("sslmode", "disable")]),
            )
            .args(["evict", "--duty-cycle", "100"])
            .run();
        run.assert_error(
            1,
            &format!(
                "evict lost its connection: 0 keys deleted and confirmed durable; the batch in \
                 flight may or may not have committed: a batch lost its connection: {step}: \
                 {CLOSED}"
            ),
        );
        assert_eq!(wire.seen(), 1, "{step}");
        assert_eq!(
            fixtures::snapshot_of(&db.client().await).await,
            before,
            "{step}"
        );
    }
}

/// The counts of what a run left (on a session of their own, after the last durable point) are
/// figures of the summary, not work: broken at their session's setting or at either count, the
/// run still ends drained with exit 0, every expired completed key deleted, and the summary gives
/// both counts as unknown (null) rather than a wrong number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_whose_final_counts_break_reports_them_unknown() {
    let cases: [(&[u8], usize); 3] = [
        (b"SET plan_cache_mode = 'force_generic_plan'", 2),
        (b"expired completed keys left after a run", 1),
        (
            b"expired keys not completed (in_progress: reclaim's business)",
            1,
        ),
    ];
    for (pattern, nth) in cases {
        let db = loaded().await;
        let (run, seen) = broken_at(
            &db,
            pattern,
            nth,
            &["evict", "--duty-cycle", "100", "-o", "json"],
        );
        let case = String::from_utf8_lossy(pattern);
        run.assert_code(0).assert_stderr_empty();
        assert_eq!(seen, nth, "{case}");
        let j = run.json();
        assert_eq!(j["end_reason"], "drained", "{case}: {j}");
        assert_eq!(j["rows_evicted"], MIX.expired, "{case}: {j}");
        assert_eq!(j["backlog_left"], serde_json::Value::Null, "{case}: {j}");
        assert_eq!(
            j["expired_in_progress_left"],
            serde_json::Value::Null,
            "{case}: {j}"
        );
        let left = "SELECT count(*) FROM idempotency_keys WHERE state = 'completed' AND expires_at < now()";
        assert_eq!(fixtures::scalar_i64(&db, left).await, 0, "{case}");
    }
}

/// The foreign keys that reference the table, read before the batches, broken: the line names
/// the read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_names_the_read_of_the_foreign_keys_it_lost_its_connection_at() {
    check_cases(
        referenced,
        &[Case {
            args: &["evict", "--duty-cycle", "100"],
            pattern: b"check and evict: the foreign keys that reference the key table",
            nth: 1,
            code: 1,
            line: "failed to read the foreign keys that reference the table",
        }],
    )
    .await;
}

/// A count after a batch broken: on which table, with which flags, at which statement, how many
/// keys the batch deleted, and the step the line names.
struct AfterBatch {
    referenced: bool,
    extra: &'static [&'static str],
    pattern: &'static [u8],
    deleted: u64,
    step: &'static str,
}

/// A count made after a batch's statement returned (what --min-age kept back, what a foreign key
/// still references, the in_progress keys of its range), broken: that batch's deletes are
/// committed, so the line counts them as deleted since the last durable point, then names the
/// count; the keys it deleted are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_that_loses_its_connection_counting_after_a_batch_counts_the_batch() {
    let one_batch = ["evict", "--duty-cycle", "100", "--batch-size", "1000"];
    let cases = [
        AfterBatch {
            referenced: false,
            extra: &["--min-age", "1h"],
            pattern: b"that the guard kept",
            deleted: 300,
            step: "failed to count rows kept back by --min-age",
        },
        AfterBatch {
            referenced: true,
            extra: &[],
            pattern: b"still references, which the batch",
            deleted: 297,
            step: "failed to count the keys a batch left because they are still referenced",
        },
        AfterBatch {
            referenced: false,
            extra: &[],
            pattern: b"evict: the expired rows of a range [$1, $2)",
            deleted: 300,
            step: "failed to count the expired in_progress keys of a batch's range",
        },
    ];
    for AfterBatch {
        referenced: with_reference,
        extra,
        pattern,
        deleted,
        step,
    } in cases
    {
        let db = match with_reference {
            true => referenced().await,
            false => loaded().await,
        };
        let args: Vec<&str> = one_batch.iter().chain(extra).copied().collect();
        let (run, seen) = broken_at(&db, pattern, 1, &args);
        run.assert_error(
            1,
            &format!(
                "{LOST}, {deleted} more deleted since the last durable point (a crash or failover \
                 may bring them back; the next run deletes them again): {step}: {CLOSED}"
            ),
        );
        assert_eq!(seen, 1, "{step}");
        let left = "SELECT count(*) FROM idempotency_keys \
                    WHERE state = 'completed' AND expires_at < now()";
        let expected = MIX.expired - i64::try_from(deleted).unwrap();
        assert_eq!(fixtures::scalar_i64(&db, left).await, expected, "{step}");
    }
}

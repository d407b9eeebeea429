//! idemctl behind a real PgBouncer, in transaction and session pool mode, beside API-like clients
//! that share the pooler's few server connections. Each API transaction records every setting
//! idemctl touches, the named prepared statements and the advisory locks its server connection
//! holds: whatever idemctl left on a pooled server connection shows up there.
//!
//! Checked: 0 foreign settings seen by the API, 0 prepared statements or advisory locks left,
//! 0 prepared-statement errors, every expired row deleted exactly once (two evicts at once, evict
//! beside reclaim, an evict killed with SIGKILL mid-run), and idemctl's connections ending with
//! Terminate (PgBouncer logs "client close request", not "client unexpected eof").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::fixtures::{self, Mix, Schema, scalar_i64};
use crate::support::pgbouncer::{Mode, PgBouncer};
use crate::support::{Run, TestDb};

/// Every setting idemctl sets, read by the API in each of its transactions.
const SETTINGS: &[&str] = &[
    "lock_timeout",
    "statement_timeout",
    "idle_in_transaction_session_timeout",
    "synchronous_commit",
    "plan_cache_mode",
    "application_name",
    "default_transaction_read_only",
    "transaction_isolation",
];

const EXPIRED_COMPLETED: &str =
    "SELECT count(*) FROM idempotency_keys WHERE state = 'completed' AND expires_at < now()";

/// What the API clients saw.
#[derive(Debug, Default)]
struct Seen {
    transactions: u64,
    /// Samples whose settings differed from the API's own (with the values).
    foreign: Vec<String>,
    /// Samples where the server connection held named prepared statements.
    prepared: Vec<String>,
    /// Samples where the server connection held advisory locks.
    advisory: u64,
    errors: Vec<String>,
}

/// API-like clients through the pooler: each transaction takes a new key and records the settings.
struct Api {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Seen>>,
}

impl Api {
    /// `clients` API clients; with `reconnect`, each transaction is a new client connection (so
    /// that behind a session pooler it takes whichever server connection is free, idemctl's too).
    async fn start(bouncer: &PgBouncer, clients: usize, reconnect: bool) -> Api {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        let url = format!("{} application_name=api", bouncer.url());
        // The API's own view, taken before any idemctl run.
        let baseline = Arc::new(read_settings(&crate::support::connect(&url).await).await);
        let probe = format!(
            "SELECT {}, (SELECT string_agg(name, ',') FROM pg_catalog.pg_prepared_statements), \
             (SELECT count(*) FROM pg_catalog.pg_locks \
               WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid())::text",
            settings_list()
        );
        for n in 0..clients {
            let mut client = crate::support::connect(&url).await;
            let (stop, baseline, probe, url) =
                (stop.clone(), baseline.clone(), probe.clone(), url.clone());
            tasks.push(tokio::spawn(async move {
                let mut seen = Seen::default();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    if reconnect && i > 1 {
                        client = crate::support::connect(&url).await;
                    }
                    let script = format!(
                        "BEGIN; {probe}; \
                         INSERT INTO idempotency_keys (key, api_key_id, request_method, \
                           request_path, request_fingerprint, state, locked_at, created_at, \
                           expires_at) \
                         VALUES ('api-{n}-{i}', 'tenant_api', 'POST', '/v1/payments', \
                           sha256('{n}-{i}'::bytea), 'in_progress', now(), now(), \
                           now() + interval '1 day'); \
                         COMMIT"
                    );
                    match client.simple_query(&script).await {
                        Ok(messages) => {
                            seen.transactions += 1;
                            let row = messages
                                .iter()
                                .find_map(|m| match m {
                                    tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
                                    _ => None,
                                })
                                .expect("the probe returns a row");
                            let values: Vec<String> = (0..SETTINGS.len())
                                .map(|c| row.get(c).unwrap_or("").to_owned())
                                .collect();
                            if values != *baseline {
                                seen.foreign.push(format!("{values:?} (own: {baseline:?})"));
                            }
                            if let Some(names) = row.get(SETTINGS.len()) {
                                seen.prepared.push(names.to_owned());
                            }
                            if row.get(SETTINGS.len() + 1) != Some("0") {
                                seen.advisory += 1;
                            }
                        }
                        Err(e) => {
                            seen.errors.push(crate::support::pg_error_text(&e));
                            let _ = client.simple_query("ROLLBACK").await;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                seen
            }));
        }
        Api { stop, tasks }
    }

    async fn stop(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Seen::default();
        for task in self.tasks {
            let s = task.await.expect("an API client panicked");
            all.transactions += s.transactions;
            all.foreign.extend(s.foreign);
            all.prepared.extend(s.prepared);
            all.advisory += s.advisory;
            all.errors.extend(s.errors);
        }
        all
    }
}

fn settings_list() -> String {
    SETTINGS
        .iter()
        .map(|s| format!("pg_catalog.current_setting('{s}')"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn read_settings(client: &tokio_postgres::Client) -> Vec<String> {
    let sql = format!("SELECT {}", settings_list());
    let messages = client.simple_query(&sql).await.expect("read the settings");
    messages
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..SETTINGS.len())
                    .map(|c| r.get(c).unwrap_or("").to_owned())
                    .collect(),
            ),
            _ => None,
        })
        .expect("a row")
}

/// The API's checks after the runs: nothing of idemctl's seen, no error.
fn assert_untouched(seen: &Seen) {
    assert!(seen.transactions > 20, "too little API traffic: {seen:?}");
    assert!(
        seen.foreign.is_empty(),
        "the API saw idemctl's settings: {:?}",
        seen.foreign
    );
    assert!(
        seen.prepared.is_empty(),
        "prepared statements left: {:?}",
        seen.prepared
    );
    assert_eq!(
        seen.advisory, 0,
        "the API's server connections held advisory locks"
    );
    assert!(seen.errors.is_empty(), "API errors: {:?}", seen.errors);
}

/// No lock of any kind held by any other client session of the test database (the pooler's server
/// connections included), read directly on the server; autovacuum's workers, which come and go on
/// their own, are not counted. A lock can outlive its session by the moment the server takes to
/// end a backend whose client was killed, or be a pooler's own momentary health-check query, so
/// the count must reach 0 within 30 s (a loaded machine ends a backend late) and stay there for
/// three reads; what is left after that is named.
async fn assert_no_locks_left(db: &TestDb) {
    let from = format!(
        "FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a USING (pid) \
          WHERE a.datname = '{}' AND a.backend_type = 'client backend' \
            AND l.pid <> pg_catalog.pg_backend_pid()",
        db.name()
    );
    let count = format!("SELECT count(*) {from}");
    let started = std::time::Instant::now();
    let mut clear = 0;
    while clear < 3 && started.elapsed() < Duration::from_secs(30) {
        if scalar_i64(db, &count).await == 0 {
            clear += 1;
        } else {
            clear = 0;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if clear < 3 {
        let detail = format!(
            "SELECT string_agg(format('%s %s %s by pid %s (%s, %s: %s)', l.locktype, l.mode, \
             CASE WHEN l.granted THEN 'held' ELSE 'awaited' END, l.pid, a.application_name, \
             a.state, left(a.query, 80)), '; ') {from}"
        );
        let rows = db.client().await.query(&detail, &[]).await.unwrap();
        let listed: Option<String> = rows.first().and_then(|r| r.get(0));
        panic!("locks left after idemctl exited: {listed:?}");
    }
}

fn assert_no_prepared_errors(run: &Run) {
    assert!(!run.stderr.contains("prepared statement"), "{run}");
    assert!(!run.stderr.contains("bind message"), "{run}");
}

/// A database whose own default for synchronous_commit differs from the test cluster's (off),
/// so that idemctl's `off` would be visible to the API if it leaked.
async fn database(mix: Mix) -> TestDb {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    db.exec(&format!(
        "ALTER DATABASE {} SET synchronous_commit = on",
        crate::support::ident(db.name())
    ))
    .await;
    db
}

async fn every_command_leaves_the_api_untouched(mode: Mode) {
    let db = database(Mix {
        expired: 3_000,
        live: 500,
        stuck: 50,
        ..Mix::default()
    })
    .await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, response_status, response_body, locked_at, created_at, \
         expires_at) VALUES ('known', 't', 'POST', '/v1/p', sha256('k'::bytea), 'completed', 201, \
         '{}', now(), now(), now() + interval '1 day')",
    )
    .await;
    // Transaction pooling: 2 server connections shared by everyone. Session pooling: enough for
    // an API client and an evict, and the API reconnects for every transaction.
    let (pool, reconnect) = match mode {
        Mode::Transaction => (2, false),
        Mode::Session => (4, true),
    };
    let bouncer = PgBouncer::start(&db, mode, pool, &[]).await;
    let api = Api::start(&bouncer, if reconnect { 1 } else { 3 }, reconnect).await;
    let idemctl = |args: &[&str]| {
        db.idemctl()
            .env("IDEMCTL_DATABASE_URL", bouncer.url())
            .args(args.iter().copied())
    };
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["check"],
        vec!["stats"],
        vec!["inspect", "known", "--api-key-id", "t"],
        vec!["evict", "--dry-run"],
        vec!["reclaim", "--dry-run", "--allow-scan"],
        vec!["reclaim", "--yes", "--allow-scan", "--action", "fail"],
        vec!["evict", "-o", "json", "--batch-size", "100"],
    ];
    if mode == Mode::Session {
        // Session-level settings and the per-table lock, which the pooler's DISCARD ALL clears.
        commands.insert(
            3,
            vec!["evict", "--pool-mode", "session", "--max-batches", "2"],
        );
    }
    let mut runs = Vec::new();
    for args in &commands {
        let run = idemctl(args).run_async().await;
        assert_no_prepared_errors(&run);
        assert!(run.code == 0, "{args:?} through a {mode:?} pooler:\n{run}");
        runs.push(run);
    }
    let last = runs.last().unwrap().json();
    assert!(last["rows_evicted"].as_u64().unwrap() > 0, "{last}");
    assert_eq!(scalar_i64(&db, EXPIRED_COMPLETED).await, 0);
    // Every idemctl connection has closed by now; the API's are still open.
    let closes = bouncer.client_closes();
    assert!(
        closes.iter().all(|l| l.contains("client close request")),
        "connections closed without Terminate:\n{}",
        closes.join("\n")
    );
    assert!(closes.len() >= commands.len(), "{}", bouncer.log());
    let seen = api.stop().await;
    assert_untouched(&seen);
    assert_no_locks_left(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_through_a_transaction_pooler_leaves_the_api_sessions_untouched() {
    every_command_leaves_the_api_untouched(Mode::Transaction).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_through_a_session_pooler_leaves_the_api_sessions_untouched() {
    every_command_leaves_the_api_untouched(Mode::Session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_statement_behind_a_transaction_pooler_says_so_and_check_reports_it() {
    let db = database(Mix {
        expired: 10,
        ..Mix::default()
    })
    .await;
    let bouncer = PgBouncer::start(&db, Mode::Transaction, 2, &[]).await;
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", bouncer.url())
        .args(["check", "-o", "plain"])
        .run_async()
        .await;
    run.assert_stdout_contains("connection\tnote\tthrough a connection pooler");
    let evict = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", bouncer.url())
        .args(["evict"])
        .run_async()
        .await;
    evict.assert_code(0).assert_stderr(
        "idemctl: note: connected through a connection pooler (transaction pooling assumed): this \
         evict run holds no lock beyond its own transactions, so another evict run on this table \
         is not kept out; overlapping runs share the rows, none is changed twice and no request \
         waits on them longer than lock_timeout (--pool-mode session behind a session pooler \
         keeps runs apart; --pool-mode transaction silences this note)\n",
    );
    let quiet = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", bouncer.url())
        .args(["evict", "--pool-mode", "transaction"])
        .run_async()
        .await;
    quiet.assert_code(0).assert_stderr_empty();
}

/// Two evicts at once, evict beside reclaim, and an evict killed mid-run, through a transaction
/// pooler beside the API: every expired row is deleted exactly once, nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_and_killed_runs_through_a_transaction_pooler_delete_each_row_once() {
    let db = database(Mix {
        expired: 20_000,
        live: 2_000,
        stuck: 300,
        ..Mix::default()
    })
    .await;
    let bouncer = PgBouncer::start(&db, Mode::Transaction, 2, &[]).await;
    let api = Api::start(&bouncer, 3, false).await;
    let idemctl = |args: &[&str]| {
        db.idemctl()
            .env("IDEMCTL_DATABASE_URL", bouncer.url())
            .args(args.iter().copied())
    };

    // Killed mid-run: whatever its committed batches deleted is gone, nothing else is left.
    let mut killed = idemctl(&["evict", "--batch-size", "50", "--pause", "20ms"]).spawn();
    let before = scalar_i64(&db, EXPIRED_COMPLETED).await;
    let mut waited = 0;
    while scalar_i64(&db, EXPIRED_COMPLETED).await == before && waited < 200 {
        tokio::time::sleep(Duration::from_millis(25)).await;
        waited += 1;
    }
    assert!(!killed.has_exited(), "the evict to kill finished too soon");
    killed.signal("KILL");
    let killed = killed.wait_async().await;
    assert_no_prepared_errors(&killed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = scalar_i64(&db, EXPIRED_COMPLETED).await;
    assert!(left > 0 && left < 20_000, "{left} expired rows left");

    // Two evicts and a reclaim at once: all work, none blocks another or the API.
    let evict = ["evict", "-o", "json", "--batch-size", "200"];
    let reclaim = [
        "reclaim",
        "--yes",
        "--allow-scan",
        "--action",
        "fail",
        "-o",
        "json",
    ];
    let runs = [
        idemctl(&evict).spawn(),
        idemctl(&evict).spawn(),
        idemctl(&reclaim).spawn(),
    ];
    let mut done = Vec::new();
    for run in runs {
        done.push(run.wait_async().await);
    }
    let last = idemctl(&evict).run_async().await;
    done.push(last);
    for run in &done {
        assert_no_prepared_errors(run);
        run.assert_code(0);
    }
    let evicted: u64 = [&done[0], &done[1], &done[3]]
        .iter()
        .map(|r| r.json()["rows_evicted"].as_u64().unwrap())
        .sum();
    assert_eq!(
        evicted, left as u64,
        "rows evicted by the runs vs expired rows left"
    );
    assert_eq!(scalar_i64(&db, EXPIRED_COMPLETED).await, 0);
    assert_eq!(done[2].json()["rows_reclaimed"].as_u64().unwrap(), 300);

    let seen = api.stop().await;
    assert_untouched(&seen);
    assert_no_locks_left(&db).await;
}

/// PgBouncer refuses a startup `options` parameter it does not know; psql shows its reason, and
/// idemctl adds what to do (one line, exit 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_refusing_startup_options_is_explained() {
    let db = TestDb::new().await;
    db.exec(Schema::Corrected.ddl()).await;
    let bouncer = PgBouncer::start(&db, Mode::Transaction, 2, &[]).await;
    let conninfo = format!("{} options='-c work_mem=8MB'", bouncer.url());
    let theirs = crate::support::Cmd::of("/usr/bin/psql")
        .args(["-X", "-w", "-c", "select 1", "-d", &conninfo])
        .run();
    assert_ne!(theirs.code, 0, "{theirs}");
    assert!(
        theirs.stderr.contains("unsupported startup parameter"),
        "{theirs}"
    );
    let ours = crate::support::Cmd::new()
        .args(["stats", "--connect-timeout", "5s", "-d", &conninfo])
        .run();
    ours.assert_code(5)
        .assert_stderr_contains("unsupported startup parameter")
        .assert_stderr_contains("ignore_startup_parameters");
    assert_eq!(ours.stderr.lines().count(), 1, "{ours}");
}

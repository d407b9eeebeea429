//! A network path that dies silently: every command run through a proxy that stops forwarding
//! without closing a socket (`support::blackhole`), on one server and behind PgBouncer. Each run
//! ends within its documented bound (docs/reliability.md: one round trip's deadline, the
//! statement_timeout plus 10 s, plus the time to close) with exit 1 and one line naming the
//! deadline; no row is lost, and a direct run right after works within the guard's bound.
//!
//! The runs use `--statement-timeout 2s` (a deadline of 12 s) and `--idle-in-transaction-timeout
//! 10s` (the guard's idle limit) so the tests stay short; the behaviour is the same with the
//! defaults (30 s and 60 s). Each test prints a `measured:` line (time from the
//! cut to the exit, and until the table's guard was free), the figures of docs/reliability.md:
//!
//! ```text
//! cargo test --test integration dead_network:: -- --nocapture --test-threads 1
//! ```

use std::time::{Duration, Instant};

use crate::chaos;
use crate::fixtures::{self, Mix, Schema};
use crate::support::blackhole::BlackHole;
use crate::support::pgbouncer::{Mode, PgBouncer};
use crate::support::{Run, TestDb};

/// The statement_timeout of the runs cut off, and the deadline of a round trip it makes.
const STATEMENT_TIMEOUT: &str = "2s";
const DEADLINE_SECS: u64 = 12;
/// What the documentation promises after the deadline: the other sessions' own deadlines started
/// a little later, the summary, closing the connections (2 s). Generous for a loaded machine.
const AFTER_DEADLINE: Duration = Duration::from_secs(25);
/// The idle limits of the runs cut off (the guard's session is ended after this much silence).
const IDLE_TIMEOUT: &str = "10s";
/// The guard's documented bound after a dead run (docs/reliability.md: statement_timeout plus the
/// idle limit, 12 s here), with a margin for a loaded machine.
const GUARD_BOUND: Duration = Duration::from_secs(12 + 20);

/// The exact message of a run whose round trip went unanswered.
const NO_ANSWER: &str = "no answer from the server within 12s (statement_timeout plus 10s); \
                         the connection was given up";

async fn expired_table(db: &TestDb, expired: i64) {
    let mix = Mix {
        expired,
        live: 50,
        stuck: 20,
        ..Mix::default()
    };
    fixtures::table_with(db, Schema::Corrected, mix).await;
}

/// `args` through `proxy` (connecting as `url` does, with host and port replaced); the path is cut
/// once `ready` says the run is under way (or right away when `ready` is None). Returns the run and
/// the time from the cut to the exit.
async fn cut_during(
    url: &str,
    proxy: &BlackHole,
    args: &[&str],
    watcher: &tokio_postgres::Client,
    ready: Option<&str>,
) -> (Run, Duration) {
    let url = format!("{url} host=127.0.0.1 port={}", proxy.port());
    let mut all = vec![
        "--statement-timeout",
        STATEMENT_TIMEOUT,
        "--idle-in-transaction-timeout",
        IDLE_TIMEOUT,
    ];
    all.extend_from_slice(args);
    let child = crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", url)
        .args(all)
        .timeout(Duration::from_secs(300))
        .spawn();
    let waiting = Instant::now();
    if let Some(condition) = ready {
        loop {
            let row = watcher.query_one(condition, &[]).await.expect("watch");
            if row.get::<_, bool>(0) {
                break;
            }
            assert!(
                waiting.elapsed() < Duration::from_secs(60),
                "the run never got under way ({condition})"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    proxy.cut();
    let cut = Instant::now();
    let run = child.wait_async().await;
    (run, cut.elapsed())
}

/// A run cut off ends with exit 1 and the one line, within the bound.
fn assert_gave_up(what: &str, run: &Run, took: Duration) {
    run.assert_code(1);
    assert_eq!(
        run.stderr.lines().count(),
        1,
        "{what}: one line on stderr\n{run}"
    );
    assert!(run.stderr.contains(NO_ANSWER), "{what}\n{run}");
    let bound = Duration::from_secs(DEADLINE_SECS) + AFTER_DEADLINE;
    assert!(took < bound, "{what}: took {took:?} after the cut\n{run}");
}

/// Run `args` directly until the table's guard is free (exit other than 7); how long it took.
async fn next_run_works(db: &TestDb, args: &[&str]) -> (Run, Duration) {
    let started = Instant::now();
    loop {
        let run = db.idemctl().args(args).run_async().await;
        if run.code != 7 {
            return (run, started.elapsed());
        }
        assert!(
            started.elapsed() < GUARD_BOUND,
            "the dead run's guard outlived it by {:?}\n{run}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

const SOME_EVICTED: &str = "SELECT count(*) < 3000 FROM idempotency_keys WHERE state = 'completed' \
                            AND expires_at < now()";

async fn evict_cut_off(pace: &[&str], what: &str) {
    let db = TestDb::new().await;
    expired_table(&db, 3000).await;
    let watcher = db.client().await;
    let before = fixtures::snapshot(&db).await;
    let proxy = BlackHole::to_socket_dir(&db.socket_dir().expect("a local server"), db_port(&db));
    let mut args = vec!["evict", "-o", "json"];
    args.extend_from_slice(pace);
    let (run, took) = cut_during(&db.url(), &proxy, &args, &watcher, Some(SOME_EVICTED)).await;
    assert_gave_up(what, &run, took);
    let summary = run.json();
    assert_eq!(summary["end_reason"], "error", "{what}\n{run}");
    let (next, freed) = next_run_works(&db, &["evict", "-q"]).await;
    next.assert_code(0).assert_stderr_empty();
    let after = fixtures::snapshot(&db).await;
    for (key, seen) in &before {
        if !fixtures::evictable(seen) {
            assert_eq!(after.get(key), Some(seen), "{what}: a live row changed");
        }
    }
    assert_eq!(
        after.values().filter(|s| fixtures::evictable(s)).count(),
        0,
        "{what}: the next run drained"
    );
    println!(
        "measured: {what}: exit 1 {:.1} s after the cut; guard free {:.1} s after the exit",
        took.as_secs_f64(),
        freed.as_secs_f64()
    );
}

fn db_port(db: &TestDb) -> u16 {
    crate::support::pg::server()
        .admin
        .get("port")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port for {}", db.name()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_at_its_default_pace_gives_up_a_dead_path_within_the_deadline() {
    evict_cut_off(&["--max-rate", "300"], "evict, adaptive pace").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_catching_up_gives_up_a_dead_path_within_the_deadline() {
    evict_cut_off(&["--catch-up", "--max-rate", "300"], "evict --catch-up").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_at_a_fixed_pace_gives_up_a_dead_path_within_the_deadline() {
    evict_cut_off(
        &["--batch-size", "20", "--pause", "50ms"],
        "evict, fixed pace",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_commands_give_up_a_dead_path_within_the_deadline() {
    let db = TestDb::new().await;
    expired_table(&db, 100).await;
    let watcher = db.client().await;
    let socket = db.socket_dir().expect("a local server");
    for args in [
        &["stats"][..],
        &["check"],
        &["inspect", "no-such-key"],
        &["reclaim", "--dry-run"],
    ] {
        // Cut before the run starts: its connection is accepted and never answered.
        let proxy = BlackHole::to_socket_dir(&socket, db_port(&db));
        let (run, took) = cut_during(&db.url(), &proxy, args, &watcher, None).await;
        let what = args.join(" ");
        run.assert_code(5);
        assert!(
            run.stderr.contains("cannot connect") && run.stderr.contains("timed out"),
            "{what}\n{run}"
        );
        assert!(took < AFTER_DEADLINE, "{what}: took {took:?}\n{run}");
        println!(
            "measured: {what}, path dead before login: exit 5 {:.1} s after the cut",
            took.as_secs_f64()
        );
    }
    // Cut mid-statement: the run's statement waits on a lock the test holds, the path dies, the
    // lock is let go, and the answer goes nowhere.
    for args in [&["stats"][..], &["check"], &["inspect", "no-such-key"]] {
        let proxy = BlackHole::to_socket_dir(&socket, db_port(&db));
        // Its own session: pg_stat_activity stays as first read within a transaction.
        let holder = db.client().await;
        holder
            .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        let mut all = vec!["--lock-timeout", "60s"];
        all.extend_from_slice(args);
        let waiting = "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = \
                       'idemctl' AND wait_event_type = 'Lock'";
        let release = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            holder.batch_execute("COMMIT").await.unwrap();
        };
        let url = db.url();
        let ((run, took), ()) = tokio::join!(
            cut_during(&url, &proxy, &all, &watcher, Some(waiting)),
            release
        );
        let what = format!("{} cut off mid-statement", args.join(" "));
        assert_gave_up(&what, &run, took);
        println!(
            "measured: {what}: exit 1 {:.1} s after the cut",
            took.as_secs_f64()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_behind_pgbouncer_gives_up_a_dead_path_within_the_deadline() {
    let db = TestDb::new().await;
    expired_table(&db, 3000).await;
    let watcher = db.client().await;
    let bouncer = PgBouncer::start(&db, Mode::Transaction, 4, &[]).await;
    let proxy = BlackHole::to_socket_dir(&bouncer.dir, 6432);
    let url = bouncer.url();
    let (run, took) = cut_during(
        &url,
        &proxy,
        &["evict", "-q", "--max-rate", "300"],
        &watcher,
        Some(SOME_EVICTED),
    )
    .await;
    assert_gave_up("evict behind PgBouncer", &run, took);
    // No guard behind a transaction pooler: the next run works at once.
    db.idemctl()
        .args(["evict", "-q"])
        .run_async()
        .await
        .assert_code(0)
        .assert_stderr_empty();
    println!(
        "measured: evict behind PgBouncer: exit 1 {:.1} s after the cut",
        took.as_secs_f64()
    );
    let _ = chaos::advisory_locks(&watcher).await;
}

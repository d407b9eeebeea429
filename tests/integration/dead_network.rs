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

const EXPIRED_LEFT: &str = "SELECT count(*) FROM idempotency_keys WHERE state = 'completed' \
                            AND expires_at < now()";

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
    assert!(
        run.stderr
            .starts_with("idemctl: evict lost its connection: "),
        "{what}\n{run}"
    );
    // Never more claimed durable than is gone.
    let evicted = summary["rows_evicted"].as_u64().unwrap();
    let unconfirmed = summary["rows_unconfirmed"].as_u64().unwrap();
    let gone = 3000 - fixtures::scalar_i64(&db, EXPIRED_LEFT).await as u64;
    assert!(
        unconfirmed <= evicted && evicted - unconfirmed <= gone,
        "{what}: {evicted} evicted, {unconfirmed} unconfirmed, {gone} gone\n{run}"
    );
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
        "measured: {what}: exit 1 {:.1} s after the cut; guard free {:.1} s after the exit; {}",
        took.as_secs_f64(),
        freed.as_secs_f64(),
        run.stderr.trim_end()
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
                       'idemctl' AND wait_event_type = 'Lock' AND datname = current_database()";
        // The lock is let go once the path is dead (however long the run took to start waiting),
        // so that the answer has nowhere to go.
        let release = async {
            let started = Instant::now();
            while !proxy.is_cut() {
                assert!(
                    started.elapsed() < Duration::from_secs(90),
                    "the path was never cut"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
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

async fn reclaim_cut_off(apply: bool) {
    let what = if apply { "reclaim --apply" } else { "reclaim" };
    let db = crate::support::stuck::db_with_stuck(2000, 20).await;
    let before = crate::support::stuck::stuck_keys(&db).await;
    let watcher = db.client().await;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive.jsonl");
    let plan = dir.path().join("plan.json");
    if apply {
        db.idemctl()
            .args(["reclaim", "--plan"])
            .arg(&plan)
            .run_async()
            .await
            .assert_code(0);
    }
    let proxy = BlackHole::to_socket_dir(&db.socket_dir().expect("a local server"), db_port(&db));
    let archive_arg = archive.display().to_string();
    let plan_arg = plan.display().to_string();
    let mut args = vec![
        "reclaim",
        "--yes",
        "-q",
        "--batch-size",
        "1",
        "--archive",
        &archive_arg,
    ];
    if apply {
        args.extend(["--apply", &plan_arg]);
    }
    let some_reclaimed = "SELECT count(*) < 2000 FROM idempotency_keys WHERE state = 'in_progress'";
    let (run, took) = cut_during(&db.url(), &proxy, &args, &watcher, Some(some_reclaimed)).await;
    assert_gave_up(what, &run, took);
    // Every line of the archive parses, and every key reclaimed has its line.
    let text = std::fs::read_to_string(&archive).unwrap();
    assert!(text.ends_with('\n'), "{what}: a torn archive");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let archived = crate::support::stuck::keys_in(lines.iter().filter(|l| l["type"] == "key"));
    let left = crate::support::stuck::stuck_keys(&db).await;
    let reclaimed: std::collections::BTreeSet<_> = before.difference(&left).cloned().collect();
    assert!(!reclaimed.is_empty(), "{what}: cut mid-run");
    // The line says what the committed batches reclaimed, and that the batch in flight (one key)
    // may or may not have committed (cut at its COMMIT or at its one statement), or never did (cut
    // before its COMMIT was sent): never more than was reclaimed, never a key unaccounted for.
    let head = "reclaim lost its connection: ";
    let said: usize = run
        .stderr
        .split_once(head)
        .and_then(|(_, rest)| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{what}: the line says what was reclaimed\n{run}"));
    let keys = if said == 1 { "key" } else { "keys" };
    let confirmed =
        format!("{head}{said} {keys} reclaimed by batches whose commit the server confirmed");
    let never = run.stderr.contains(&format!(
        "{confirmed}; the batch in flight never committed (its COMMIT was not sent, so the server \
         rolls it back)"
    ));
    assert!(
        never
            || run.stderr.contains(&format!(
                "{confirmed}; the batch in flight (1 key at most) may or may not have committed"
            )),
        "{what}\n{run}"
    );
    let in_flight = usize::from(!never);
    assert!(
        said <= reclaimed.len() && reclaimed.len() <= said + in_flight,
        "{what}: said {said}, reclaimed {}\n{run}",
        reclaimed.len()
    );
    assert!(
        archived.is_superset(&reclaimed),
        "{what}: a reclaimed key without its line"
    );
    let mut next = vec!["reclaim", "--yes", "-q", "--archive", &archive_arg];
    if apply {
        next.extend(["--apply", &plan_arg]);
    }
    let (next_run, freed) = next_run_works(&db, &next).await;
    next_run.assert_code(0);
    assert!(
        crate::support::stuck::stuck_keys(&db).await.is_empty(),
        "{what}: drained"
    );
    println!(
        "measured: {what} --batch-size 1 --archive: exit 1 {:.1} s after the cut; guard free \
         {:.1} s after the exit",
        took.as_secs_f64(),
        freed.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_sweeping_with_an_archive_gives_up_a_dead_path_within_the_deadline() {
    reclaim_cut_off(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_applying_a_plan_gives_up_a_dead_path_within_the_deadline() {
    reclaim_cut_off(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_across_an_immediate_stop_and_a_promoted_standby_claims_no_more_than_is_durable() {
    use crate::support::replica::ReplicaPair;
    let pair = ReplicaPair::start().await.unwrap_or_else(|e| panic!("{e}"));
    let primary = crate::support::connect(&pair.primary_url()).await;
    primary
        .batch_execute(fixtures::Schema::Corrected.ddl())
        .await
        .unwrap();
    primary
        .batch_execute(&fixtures::expired_rows_sql(3000))
        .await
        .unwrap();
    // Synchronous replication: a durable point is on the standby too.
    for sql in [
        "ALTER SYSTEM SET synchronous_standby_names = '*'",
        "SELECT pg_reload_conf()",
    ] {
        primary.batch_execute(sql).await.unwrap();
    }
    pair.wait_caught_up(&primary).await;
    let child = crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", pair.primary_url())
        .args(["evict", "-o", "json", "--max-rate", "600"])
        .timeout(Duration::from_secs(120))
        .spawn();
    let started = Instant::now();
    loop {
        let left: i64 = primary.query_one(EXPIRED_LEFT, &[]).await.unwrap().get(0);
        if left < 2000 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "evict never got going"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pair.pg_ctl("primary", &["-m", "immediate", "-w", "stop"]);
    let stopped = Instant::now();
    pair.pg_ctl("standby", &["-w", "promote"]);
    let run = child.wait_async().await;
    let took = stopped.elapsed();
    run.assert_code(1);
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    assert!(
        run.stderr
            .starts_with("idemctl: evict lost its connection: "),
        "{run}"
    );
    let summary = run.json();
    let evicted = summary["rows_evicted"].as_u64().unwrap();
    let unconfirmed = summary["rows_unconfirmed"].as_u64().unwrap();
    let promoted = crate::support::connect(&pair.standby_url()).await;
    let left: i64 = promoted.query_one(EXPIRED_LEFT, &[]).await.unwrap().get(0);
    let gone = 3000 - left as u64;
    assert!(
        unconfirmed <= evicted && evicted - unconfirmed <= gone,
        "{evicted} evicted, {unconfirmed} unconfirmed, {gone} gone on the promoted standby\n{run}"
    );
    crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", pair.standby_url())
        .args(["evict", "-q"])
        .run_async()
        .await
        .assert_code(0)
        .assert_stderr_empty();
    let left: i64 = promoted.query_one(EXPIRED_LEFT, &[]).await.unwrap().get(0);
    assert_eq!(left, 0, "the next run drained on the promoted standby");
    println!(
        "measured: evict across an immediate stop and a promoted standby: exit 1 {:.1} s after \
         the stop; {evicted} keys reported deleted, {unconfirmed} of them unconfirmed, {gone} gone \
         on the promoted standby",
        took.as_secs_f64()
    );
}

/// Resumes stopped server processes when dropped, whatever the test did meanwhile.
struct Stopped(Vec<i32>);

impl Drop for Stopped {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-s", "CONT", &pid.to_string()])
                .status();
        }
    }
}

/// On Citus evict works shard by shard on the workers, each over a connection of its own: a worker
/// whose sessions stop answering (their processes stopped, the sockets open: what a silent network
/// looks like from the client) ends the run at the same deadline as on one server, with the same
/// line; no row is lost, and the next run drains the table once the worker answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_gives_up_a_silent_worker_within_the_deadline() {
    use crate::support::citus::{CitusDb, Layout, skipped};
    if skipped("citus evict with a silent worker") {
        return;
    }
    let db = CitusDb::new(None).await;
    db.exec(include_str!("../../sql/schema.sql")).await;
    db.exec(&fixtures::load_sql(Mix {
        expired: 6000,
        live: 200,
        ..Mix::default()
    }))
    .await;
    db.exec("UPDATE idempotency_keys SET api_key_id = api_key_id || '_' || (hashtext(key) & 7)")
        .await;
    db.distribute(Layout::ByTenant).await;
    let child = db
        .idemctl()
        .args([
            "--statement-timeout",
            STATEMENT_TIMEOUT,
            "--idle-in-transaction-timeout",
            IDLE_TIMEOUT,
            "evict",
            "--batch-size",
            "50",
        ])
        .timeout(Duration::from_secs(300))
        .spawn();
    // The worker's sessions of this run, once they have run a statement there (node 1).
    let worker = db.node_client(1).await;
    let waiting = Instant::now();
    let pids: Vec<i32> = loop {
        let rows = worker
            .query(
                "SELECT pid FROM pg_stat_activity \
                  WHERE datname = current_database() AND application_name = 'idemctl' \
                    AND pid <> pg_backend_pid() AND query <> ''",
                &[],
            )
            .await
            .expect("worker sessions");
        if !rows.is_empty() {
            break rows.iter().map(|r| r.get(0)).collect();
        }
        assert!(
            waiting.elapsed() < Duration::from_secs(60),
            "evict never connected to the worker"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stopped = Stopped(pids.clone());
    for pid in &pids {
        let status = std::process::Command::new("kill")
            .args(["-s", "STOP", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "stop worker session {pid}");
    }
    let cut = Instant::now();
    let run = child.wait_async().await;
    let took = cut.elapsed();
    eprintln!(
        "measured: citus evict, silent worker: exit {} after {took:?}",
        run.code
    );
    drop(stopped);
    // Where the silence finds the run decides which of the two documented endings it meets: a
    // round trip on an open session goes unanswered (exit 1, past the statement deadline), or a
    // session the run opens after it never completes its login (exit 5, past --connect-timeout),
    // as a new connection over a silent network would not.
    match run.code {
        1 => assert!(run.stderr.contains(NO_ANSWER), "{run}"),
        5 => assert!(
            run.stderr
                .contains("failed to connect to Citus worker 127.0.0.1:")
                && run.stderr.contains("timed out after 10s"),
            "{run}"
        ),
        _ => panic!(
            "expected exit 1 (no answer) or 5 (no login), got {}\n{run}",
            run.code
        ),
    }
    let bound = Duration::from_secs(DEADLINE_SECS) + AFTER_DEADLINE;
    assert!(
        took < bound,
        "took {took:?} after the worker went silent\n{run}"
    );
    // The worker answers again: the next runs drain exactly the expired completed rows.
    let started = Instant::now();
    loop {
        let again = db.idemctl().args(["evict", "--catch-up"]).run_async().await;
        if again.code == 0 {
            break;
        }
        assert_eq!(again.code, 7, "{again}");
        assert!(
            started.elapsed() < GUARD_BOUND,
            "guard outlived the run\n{again}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let client = db.client().await;
    let left: i64 = client.query_one(EXPIRED_LEFT, &[]).await.unwrap().get(0);
    assert_eq!(left, 0, "the expired completed rows are all gone");
    let live: i64 = client
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE expires_at > now()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(live, 200, "no live row was touched");
}

/// A duration as `ss -o` prints a timer, in seconds: `119min`, `1min39sec`, `684ms`, and below a
/// minute with a fraction `8.476ms` (iproute2 6.1: seconds with milliseconds, "ms" the unit).
fn ss_duration(text: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let units = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(units);
        let value: f64 = number.parse().ok()?;
        total += match unit {
            "min" => value * 60.0,
            "sec" => value,
            "ms" if number.contains('.') => value,
            "ms" => value / 1000.0,
            _ => return None,
        };
        rest = next;
    }
    Some(total)
}

/// The keepalive timers (`ss -o`) of the established TCP sockets whose local port is `local` and
/// whose peer port is one of `peers` (empty: any peer), in seconds.
fn keepalive_timers(local: u16, peers: &[u16]) -> Vec<(u16, f64)> {
    let out = crate::support::Cmd::of("ss")
        .args(["-tnoH", "state", "established"])
        .run();
    out.assert_code(0);
    let mut timers = Vec::new();
    for line in out.stdout.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let port_of = |addr: &str| addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        let (Some(own), Some(peer)) = (
            fields.get(2).and_then(|a| port_of(a)),
            fields.get(3).and_then(|a| port_of(a)),
        ) else {
            continue;
        };
        if own != local || !(peers.is_empty() || peers.contains(&peer)) {
            continue;
        }
        let Some(timer) = line.split("timer:(keepalive,").nth(1) else {
            continue;
        };
        let value = timer.split(',').next().unwrap_or("");
        if let Some(seconds) = ss_duration(value) {
            timers.push((peer, seconds));
        }
    }
    timers
}

/// On a direct TCP connection idemctl asks the server for keepalives suited to a cron job (idle
/// 10 s by default, `keepalives_idle` honoured), so that the server notices a dead run within
/// seconds rather than the system's two hours: the server's end of idemctl's own connections runs
/// a keepalive timer of at most that, while the server's other sessions keep the system default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_end_of_a_direct_connection_probes_a_silent_idemctl_within_seconds() {
    use crate::support::tcp::{PASSWORD, TcpDb, Transport};
    std::process::Command::new("ss")
        .arg("-V")
        .output()
        .expect("ss reads the sockets' keepalive timers: apt-get install iproute2");
    let db = TcpDb::new(Transport::NoTls).await;
    db.exec(include_str!("../../sql/schema.sql")).await;
    db.exec(&fixtures::load_sql(Mix {
        expired: 3000,
        live: 10,
        ..Mix::default()
    }))
    .await;
    let server = db.port();
    for (idle, bound) in [(None, 10.0), (Some("4"), 4.0)] {
        let mut settings = vec![("host", "127.0.0.1")];
        if let Some(idle) = idle {
            settings.push(("keepalives_idle", idle));
        }
        let run = db
            .idemctl()
            .env("PGPASSWORD", PASSWORD)
            .env("IDEMCTL_DATABASE_URL", db.conninfo(&settings))
            .args(["evict", "-q", "--max-rate", "100"])
            .timeout(Duration::from_secs(120))
            .spawn();
        // idemctl's own sockets to the server, then the server's ends of them.
        let started = Instant::now();
        let timers = loop {
            let own = crate::support::Cmd::of("ss")
                .args(["-tnpH", "state", "established"])
                .run();
            let pid = format!("pid={},", run.pid());
            let ports: Vec<u16> = own
                .stdout
                .lines()
                .filter(|l| l.contains(&pid) && l.contains(&format!(":{server} ")))
                .filter_map(|l| {
                    l.split_whitespace()
                        .nth(2)
                        .and_then(|a| a.rsplit(':').next())
                        .and_then(|p| p.parse().ok())
                })
                .collect();
            let timers = if ports.is_empty() {
                Vec::new()
            } else {
                keepalive_timers(server, &ports)
            };
            // A connection is seen before its session settings are: wait for them.
            if !timers.is_empty() && timers.iter().all(|(_, s)| *s <= bound) {
                // From then on every reading stays within the bound.
                let mut seen = timers;
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(150));
                    let later = keepalive_timers(server, &ports);
                    assert!(
                        later.iter().all(|(_, s)| *s <= bound),
                        "the server's end of idemctl's connections probes after more than \
                         {bound} s: {later:?}"
                    );
                    seen.extend(later);
                }
                seen.sort_by(|a, b| b.1.total_cmp(&a.1));
                seen.truncate(3);
                break seen;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the server's end of idemctl's connections does not probe within {bound} s: \
                 {timers:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        println!(
            "measured: keepalives_idle {idle:?}: longest server-side keepalive timers {timers:?}"
        );
        drop(run);
    }
    // A connection that is not idemctl's keeps the server's default (the system's two hours).
    let (other, connection) = tokio_postgres::connect(
        &format!(
            "{} password={PASSWORD}",
            db.conninfo(&[("host", "127.0.0.1")])
        ),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect over TCP");
    tokio::spawn(connection);
    other.simple_query("SELECT 1").await.unwrap();
    let mine: u16 = other
        .query_one("SELECT inet_client_port()", &[])
        .await
        .unwrap()
        .get::<_, i32>(0)
        .try_into()
        .unwrap();
    let timers = keepalive_timers(server, &[mine]);
    assert!(
        timers.iter().all(|(_, s)| *s > 60.0),
        "another session's keepalive changed: {timers:?}"
    );
}

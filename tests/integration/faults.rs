//! Faults: `evict` and `reclaim` killed with SIGKILL at random moments, evict's backend terminated
//! mid-run, and the server restarted or stopped under evict. After each: no live or in_progress row
//! is missing, no row is half-changed, nothing is left held, and a normal run finishes the job.
//! And faults at one step: evict's batch the server refuses, a statement after a batch that fails
//! (a privilege revoked while the batch ran), an extra --jobs session that cannot be opened;
//! reclaim's confirmation and top's terminal set-up on a terminal that fails them; each ends the
//! run in one line naming the step.
//!
//! Sizes come from the environment, with small defaults so `cargo test` stays fast:
//! `IDEMCTL_FAULT_ROWS` (rows loaded, default 20000), `IDEMCTL_FAULT_TRIALS` (kills per test,
//! default 20), `IDEMCTL_FAULT_SEED` (the xorshift seed; printed by every run). The heavy variant
//! of README's Reliability section:
//!
//! ```text
//! IDEMCTL_FAULT_ROWS=200000 cargo test --test integration faults:: -- --nocapture
//! ```
//!
//! Every test prints a `figures:` line with what it did. The restart test stops and starts a
//! private cluster of its own (the harness's is shared by all tests), so it needs the server
//! binaries even when `IDEMCTL_TEST_DATABASE_URL` points the other tests elsewhere.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::chaos::{
    self, Change, Diff, EVICTABLE, Key, STUCK, Seen, Snapshot, XorShift, brief, diff, env_usize,
    kill, ledger, snapshot, wait_released,
};
use crate::fixtures::{self, Mix, Schema};
use crate::support::TestDb;
use crate::support::cluster::PrivateCluster;

/// reclaim's default --older-than, in seconds.
const CUTOFF: f64 = 300.0;
/// How long a killed run's session may outlive it (the backend notices the closed socket at
/// once when idle, or at the end of the statement in flight).
const RELEASE_LIMIT: Duration = Duration::from_secs(10);

/// A kill lands at a random moment up to this long after the start: startup and the first
/// batches take longer on a bigger table.
fn max_delay_ms(rows: usize) -> u64 {
    250 + rows as u64 / 400
}

fn sizes() -> (usize, usize) {
    (
        env_usize("IDEMCTL_FAULT_ROWS", 20_000),
        env_usize("IDEMCTL_FAULT_TRIALS", 20),
    )
}

/// What a series of faults did, for the figures line.
#[derive(Default)]
struct Tally {
    faults: usize,
    /// Faults that landed after the run had changed at least one row.
    mid_run: usize,
    /// Runs that finished before their fault arrived.
    finished_first: usize,
    rows_checked: usize,
    rows_changed: usize,
    release_ms: Vec<f64>,
    /// When loading the table ended (for the timing in the figures).
    loaded_at: Option<Instant>,
}

impl Tally {
    fn print(&self, what: &str, rows: usize, started: Instant, extra: &str) {
        let (_, _, release_max) = chaos::percentiles(&self.release_ms);
        let load = self.loaded_at.map_or(0.0, |t| (t - started).as_secs_f64());
        eprintln!(
            "figures: {what}: table {rows} rows, {} faults ({} mid-run after >= 1 committed batch, \
             {} runs finished first), {} row checks, {} rows changed by idemctl, rows lost 0, \
             half-changed 0, session+lock gone within {release_max:.1} ms max{extra}; \
             {:.1} s ({load:.1} s loading)",
            self.faults,
            self.mid_run,
            self.finished_first,
            self.rows_checked,
            self.rows_changed,
            started.elapsed().as_secs_f64()
        );
    }
}

/// The corrected table filled by the sample generator (live, expired, fresh and stuck rows), with
/// the ledger installed.
async fn sample_table(db: &TestDb, client: &Client, rows: usize) {
    fixtures::create(db, Schema::Corrected).await;
    let spec = idemctl::sample::Spec {
        rows: rows as i64,
        ..idemctl::sample::Spec::default()
    };
    idemctl::sample::generate(client, "idempotency_keys", &spec, |_| {})
        .await
        .expect("sample data");
    client
        .batch_execute("ANALYZE idempotency_keys")
        .await
        .unwrap();
    chaos::install_ledger(client).await;
}

/// After an evict was stopped: every row left is exactly as before (same row version), and every
/// row gone was completed and expired (by the database clock, at the latest at `now`, when the
/// check ran). Returns the rows deleted.
fn check_evict(what: &str, d: &Diff, now: f64) -> usize {
    assert!(
        d.appeared.is_empty(),
        "{what}: rows appeared: {}",
        brief(&d.appeared)
    );
    assert!(
        d.changed.is_empty(),
        "{what}: rows changed (half-changed?): {}",
        brief(&d.changed)
    );
    for (k, b) in &d.gone {
        assert!(
            b.evictable_at(now),
            "{what}: row {k:?} is missing but was not evictable: {b:?}"
        );
    }
    d.gone.len()
}

/// Take the next snapshot and remember its rows (`full`: with content digests).
async fn snap(client: &Client, full: bool) -> Snapshot {
    let s = snapshot(client, full).await;
    chaos::remember(client, &s).await;
    s
}

/// Every row that ever existed compared with the table at the end: unchanged or deleted, and the
/// ledger says each deletion was an evict batch's, once, of a row completed and expired at the
/// time (by the deleting statement's own clock), and of the row as first seen.
async fn check_evict_end(client: &Client, last: &Snapshot) {
    let d = diff(client, &chaos::history(last.now), last).await;
    assert!(
        d.appeared.is_empty(),
        "rows appeared: {}",
        brief(&d.appeared)
    );
    assert!(d.changed.is_empty(), "rows changed: {}", brief(&d.changed));
    let gone: HashMap<&Key, &Seen> = d.gone.iter().map(|(k, s)| (k, s)).collect();
    let changes = ledger(client).await;
    let mine: Vec<&Change> = changes.iter().collect();
    for c in &mine {
        assert!(
            c.by_evict() && c.op == "DELETE",
            "a change not by an evict batch: {c:?}"
        );
        assert!(
            c.old_state == "completed" && c.old_expires < c.stmt_now,
            "evict deleted a row that was not expired and completed at the time: {c:?}"
        );
        assert_eq!(
            Some(&c.old_digest),
            gone.get(&c.key).and_then(|s| s.digest.as_ref()),
            "a deleted row that had been changed first, or is still there: {c:?}"
        );
    }
    assert_eq!(chaos::repeated(&mine), Vec::<Key>::new(), "deleted twice");
    assert_eq!(
        mine.len(),
        gone.len(),
        "rows gone without an evict deleting them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_killed_at_random_moments_loses_no_live_row_and_the_next_run_drains() {
    let started = Instant::now();
    let (rows, trials) = sizes();
    let mut rng = XorShift::from_env("evict SIGKILL");
    let db = TestDb::new().await;
    let client = db.client().await;
    sample_table(&db, &client, rows).await;
    let mut before = snap(&client, true).await;
    let floor = 2_000;
    let mut tally = Tally {
        loaded_at: Some(Instant::now()),
        ..Tally::default()
    };
    for trial in 1..=trials {
        if before.count(&client, EVICTABLE).await < floor {
            let more = Mix {
                expired: 2 * floor as i64,
                ..Mix::default()
            };
            fixtures::load(&db, more).await;
            before.drop_table(&client).await;
            before = snap(&client, true).await;
        }
        let jobs = rng.between(1, 4).to_string();
        let delay = Duration::from_millis(rng.between(0, max_delay_ms(rows)));
        let child = db
            .idemctl()
            .args(["evict", "--batch-size", "50", "--pause", "5ms", "--jobs"])
            .arg(&jobs)
            .spawn();
        tokio::time::sleep(delay).await;
        let run = kill(child).await;
        let what = format!("trial {trial}: evict --jobs {jobs} killed after {delay:?}");
        // 137 = killed; 0 = it finished first; anything else (7: a lock left by the last kill) fails.
        assert!(run.code == 137 || run.code == 0, "{what}\n{run}");
        tally.faults += 1;
        tally.finished_first += usize::from(run.code == 0);
        tally
            .release_ms
            .push(chaos::ms(wait_released(&client, RELEASE_LIMIT).await));
        tally.rows_checked += before.rows;
        let deleted = check_evict(&what, &before.advance(&client).await, before.now);
        tally.rows_changed += deleted;
        tally.mid_run += usize::from(deleted > 0);
    }

    let run = db.idemctl().args(["evict", "-o", "json"]).run_async().await;
    run.assert_code(0);
    assert_eq!(run.json()["end_reason"], "drained", "{run}");
    let start = before.now;
    tally.rows_checked += before.rows;
    tally.rows_changed += check_evict("the final run", &before.advance(&client).await, before.now);
    let last = snap(&client, true).await;
    assert_eq!(
        last.count_at(&client, EVICTABLE, start).await,
        0,
        "expired completed rows left after the final run"
    );
    check_evict_end(&client, &last).await;
    tally.print("evict SIGKILL", rows, started, "");
}

/// Load the reclaim table: the fixtures' mix (stuck rows held 1 h or 2 days, fresh ones 10 s),
/// scaled to `rows`, with the ledger.
async fn reclaim_table(db: &TestDb, client: &Client, rows: usize) {
    let part = |pct: usize| (rows * pct / 100) as i64;
    let mix = Mix {
        expired: part(30),
        live: part(30),
        fresh: part(10),
        stuck: part(25),
        expired_in_progress: part(5),
    };
    fixtures::table_with(db, Schema::Corrected, mix).await;
    chaos::install_ledger(client).await;
}

/// After a reclaim was stopped: a row changed or gone was stuck, and with `fail` it is completed
/// with the stored error; every other row is exactly as before (same row version). Returns the
/// rows reclaimed.
fn check_reclaim(what: &str, fail: bool, d: &Diff, now: f64) -> usize {
    assert!(
        d.appeared.is_empty(),
        "{what}: rows appeared: {}",
        brief(&d.appeared)
    );
    for (k, b, a) in &d.changed {
        assert!(
            fail && b.stuck_at(now, CUTOFF),
            "{what}: row {k:?} changed though not stuck: {b:?} -> {a:?}"
        );
        // The rest of the row (what --action fail must keep) is compared in the ledger.
        assert!(
            a.state == "completed" && a.status == Some(500) && a.has_body,
            "{what}: row {k:?} half-changed by reclaim --action fail: {b:?} -> {a:?}"
        );
    }
    for (k, b) in &d.gone {
        assert!(
            !fail && b.stuck_at(now, CUTOFF),
            "{what}: row {k:?} is missing but was not stuck: {b:?}"
        );
    }
    d.changed.len() + d.gone.len()
}

/// Every row that ever existed compared with the table at the end: the stuck ones reclaimed (gone,
/// or failed into the stored error), once each, by reclaim, while stuck by the changing statement's
/// own clock; every other row as first seen. Returns how many rows were stuck.
async fn check_reclaim_end(client: &Client, fail: bool, last: &Snapshot) -> usize {
    let first = chaos::history(last.now);
    let stuck = first.keys(client, STUCK).await;
    let d = diff(client, &first, last).await;
    assert!(d.appeared.is_empty(), "{}", brief(&d.appeared));
    let touched: HashSet<Key> = if fail {
        assert!(d.gone.is_empty(), "rows lost: {}", brief(&d.gone));
        d.changed.iter().map(|(k, _, _)| k.clone()).collect()
    } else {
        assert!(d.changed.is_empty(), "rows changed: {}", brief(&d.changed));
        d.gone.iter().map(|(k, _)| k.clone()).collect()
    };
    assert_eq!(touched, stuck, "exactly the stuck rows were reclaimed");

    let changes = ledger(client).await;
    let mine: Vec<&Change> = changes.iter().collect();
    let op = if fail { "UPDATE" } else { "DELETE" };
    for c in &mine {
        assert!(
            c.by_reclaim() && c.op == op,
            "a change not by reclaim: {c:?}"
        );
        assert!(
            c.old_state == "in_progress" && c.old_held < c.stmt_now - CUTOFF,
            "reclaim changed a row that was not stuck at the time: {c:?}"
        );
        if fail {
            assert!(
                c.new_state.as_deref() == Some("completed")
                    && c.new_status == Some(500)
                    && c.new_ident.as_ref() == Some(&c.old_ident),
                "reclaim --action fail wrote something else: {c:?}"
            );
        }
    }
    assert_eq!(chaos::repeated(&mine), Vec::<Key>::new(), "reclaimed twice");
    let changed: HashSet<Key> = mine.iter().map(|c| c.key.clone()).collect();
    assert_eq!(
        changed, stuck,
        "the ledger shows every stuck row reclaimed, once"
    );
    if fail {
        let bodies: HashSet<_> = mine.iter().map(|c| c.new_body.clone()).collect();
        assert_eq!(bodies.len(), 1, "one stored error for all: {bodies:?}");
        let body: serde_json::Value = client
            .query_one(
                "SELECT response_body FROM idempotency_keys WHERE response_status = 500 LIMIT 1",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(body["status"], 500, "{body}");
        assert!(
            body["type"].is_string() && body["detail"].is_string(),
            "{body}"
        );
    }
    stuck.len()
}

async fn reclaim_killed_at_random_moments(action: &str) {
    let started = Instant::now();
    let fail = action == "fail";
    let (rows, trials) = sizes();
    let mut rng = XorShift::from_env(&format!("reclaim --action {action} SIGKILL"));
    let db = TestDb::new().await;
    let client = db.client().await;
    reclaim_table(&db, &client, rows).await;
    let mut before = snap(&client, true).await;
    let floor = 1_000;
    let mut tally = Tally {
        loaded_at: Some(Instant::now()),
        ..Tally::default()
    };
    for trial in 1..=trials {
        if before.count(&client, STUCK).await < floor {
            let more = Mix {
                stuck: 2 * floor as i64,
                ..Mix::default()
            };
            fixtures::load(&db, more).await;
            before.drop_table(&client).await;
            before = snap(&client, true).await;
        }
        let delay = Duration::from_millis(rng.between(0, max_delay_ms(rows)));
        let child = db
            .idemctl()
            .args(["reclaim", "--yes", "--allow-scan", "--batch-size", "10"])
            .args(["--action", action])
            .spawn();
        tokio::time::sleep(delay).await;
        let run = kill(child).await;
        let what = format!("trial {trial}: reclaim --action {action} killed after {delay:?}");
        assert!(run.code == 137 || run.code == 0, "{what}\n{run}");
        tally.faults += 1;
        tally.finished_first += usize::from(run.code == 0);
        tally
            .release_ms
            .push(chaos::ms(wait_released(&client, RELEASE_LIMIT).await));
        tally.rows_checked += before.rows;
        let reclaimed = check_reclaim(&what, fail, &before.advance(&client).await, before.now);
        tally.rows_changed += reclaimed;
        tally.mid_run += usize::from(reclaimed > 0);
    }

    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--yes",
            "--allow-scan",
            "-o",
            "json",
            "--action",
            action,
        ])
        .run_async()
        .await;
    run.assert_code(0);
    tally.rows_checked += before.rows;
    let d = before.advance(&client).await;
    tally.rows_changed += check_reclaim("the final run", fail, &d, before.now);
    let last = snap(&client, true).await;
    assert_eq!(
        last.count(&client, STUCK).await,
        0,
        "stuck rows left after the final run\n{run}"
    );
    let stuck = check_reclaim_end(&client, fail, &last).await;
    let extra = format!(", {stuck} stuck rows reclaimed exactly once");
    tally.print(
        &format!("reclaim --action {action} SIGKILL"),
        rows,
        started,
        &extra,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_delete_killed_at_random_moments_touches_only_stuck_rows_once() {
    reclaim_killed_at_random_moments("delete").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_fail_killed_at_random_moments_leaves_no_half_failed_row() {
    reclaim_killed_at_random_moments("fail").await;
}

/// Terminate idemctl's backend (what a failover, an admin or a pooler restart does to it).
async fn terminate_idemctl(client: &Client) -> i64 {
    client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
              WHERE datname = current_database() AND application_name = 'idemctl'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_whose_backend_is_terminated_exits_1_with_one_line_and_the_next_run_drains() {
    let started = Instant::now();
    let (rows, trials) = sizes();
    let trials = (trials / 4).max(5);
    let mut rng = XorShift::from_env("evict backend terminated");
    let db = TestDb::new().await;
    let client = db.client().await;
    // The fixtures' mix this time (the SIGKILL test uses the sample generator).
    let part = |pct: usize| (rows * pct / 100) as i64;
    let mix = Mix {
        expired: part(50),
        live: part(35),
        fresh: part(5),
        stuck: part(5),
        expired_in_progress: part(5),
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    chaos::install_ledger(&client).await;
    let mut before = snap(&client, true).await;
    let mut tally = Tally {
        loaded_at: Some(Instant::now()),
        ..Tally::default()
    };
    let mut summary_behind = 0;
    for trial in 1..=trials {
        let ledger_before = chaos::ledger_len(&client).await;
        let child = db
            .idemctl()
            .args([
                "evict",
                "-o",
                "json",
                "--batch-size",
                "50",
                "--pause",
                "5ms",
            ])
            .spawn();
        let deadline = Instant::now() + Duration::from_secs(20);
        while chaos::idemctl_sessions(&client).await == 0 {
            assert!(Instant::now() < deadline, "evict never connected");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let delay = Duration::from_millis(rng.between(0, 300));
        tokio::time::sleep(delay).await;
        let terminated = terminate_idemctl(&client).await;
        let run = child.wait_async().await;
        let what = format!("trial {trial}: backend terminated {delay:?} after login");
        if terminated == 0 || run.code == 0 {
            tally.finished_first += 1;
        } else {
            // 1: lost mid-run; 5: cut off while still setting up its session.
            assert!(run.code == 1 || run.code == 5, "{what}\n{run}");
            assert_eq!(run.stderr.lines().count(), 1, "{what}: one line\n{run}");
            assert!(run.stderr.contains("connection"), "{what}\n{run}");
            // The server's reason and SQLSTATE, whether a statement was waiting or not.
            if run.code == 1 {
                assert!(
                    run.stderr
                        .contains("terminating connection due to administrator command")
                        && run.stderr.contains("SQLSTATE 57P01"),
                    "{what}\n{run}"
                );
            }
        }
        tally.faults += 1;
        tally
            .release_ms
            .push(chaos::ms(wait_released(&client, RELEASE_LIMIT).await));
        tally.rows_checked += before.rows;
        let deleted = check_evict(&what, &before.advance(&client).await, before.now);
        // The summary printed on the way out counts only batches whose answer arrived.
        if let Some(reported) = serde_json::from_str::<serde_json::Value>(&run.stdout)
            .ok()
            .and_then(|j| j["rows_evicted"].as_u64())
        {
            let committed = (chaos::ledger_len(&client).await - ledger_before) as u64;
            assert_eq!(committed as usize, deleted, "{what}");
            summary_behind += usize::from(reported != committed);
            assert!(
                committed.abs_diff(reported) <= 50,
                "{what}: summary says {reported}, {committed} committed\n{run}"
            );
        }
        tally.rows_changed += deleted;
        tally.mid_run += usize::from(deleted > 0);
    }
    db.idemctl()
        .args(["evict"])
        .run_async()
        .await
        .assert_code(0)
        .assert_stderr_empty();
    let start = before.now;
    tally.rows_checked += before.rows;
    tally.rows_changed += check_evict("the final run", &before.advance(&client).await, before.now);
    let last = snap(&client, true).await;
    assert_eq!(last.count_at(&client, EVICTABLE, start).await, 0);
    check_evict_end(&client, &last).await;
    let extra = format!(", {summary_behind} summaries differing from the committed count");
    tally.print("evict backend terminated", rows, started, &extra);
}

fn server_log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_under_a_server_restart_or_stop_fails_clearly_and_the_next_run_drains() {
    let started = Instant::now();
    // Three faults need less backlog than twenty.
    let rows = sizes().0 / 4;
    let server = PrivateCluster::start().await;
    let client = server.client().await;
    // The harness's clusters trade durability for speed; an immediate stop is a crash, and this
    // test wants committed batches to survive it as they would in production.
    for sql in [
        "ALTER SYSTEM SET synchronous_commit = on",
        "SELECT pg_reload_conf()",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    client.batch_execute(Schema::Corrected.ddl()).await.unwrap();
    let spec = idemctl::sample::Spec {
        rows: rows as i64,
        ..idemctl::sample::Spec::default()
    };
    idemctl::sample::generate(&client, "idempotency_keys", &spec, |_| {})
        .await
        .expect("sample data");
    client
        .batch_execute("ANALYZE idempotency_keys")
        .await
        .unwrap();
    chaos::install_ledger(&client).await;
    drop(client);

    let faults: [(&str, &[&str], Option<Duration>); 3] = [
        ("restart -m fast", &["restart", "-m", "fast"], None),
        (
            "stop -m immediate, 2 s down",
            &["stop", "-m", "immediate"],
            Some(Duration::from_secs(2)),
        ),
        (
            "restart -m immediate",
            &["restart", "-m", "immediate"],
            None,
        ),
    ];
    let limit = Duration::from_secs(5 + 3 + 2);
    let mut tally = Tally {
        loaded_at: Some(Instant::now()),
        ..Tally::default()
    };
    let mut exits = Vec::new();
    for (name, args, down) in faults {
        let client = server.client().await;
        let mut before = snap(&client, true).await;
        let committed = chaos::ledger_len(&client).await;
        let child = server
            .idemctl()
            .args([
                "evict",
                "-o",
                "json",
                "--batch-size",
                "50",
                "--pause",
                "10ms",
            ])
            .args(["--statement-timeout", "5s", "--connect-timeout", "3s"])
            .spawn();
        // Strike once it is deleting.
        let deadline = Instant::now() + Duration::from_secs(20);
        while chaos::ledger_len(&client).await == committed {
            assert!(Instant::now() < deadline, "evict made no progress");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(client);
        let struck = Instant::now();
        server.pg_ctl(args).await;
        let run = child.wait_async().await;
        let took = struck.elapsed();
        if let Some(down) = down {
            tokio::time::sleep(down).await;
            server.pg_ctl(&["start"]).await;
        }
        let what = format!(
            "{name}: {run}\n--- server log ---\n{}",
            server_log_tail(&server.cluster.log_path())
        );
        assert_eq!(run.code, 1, "{what}");
        assert_eq!(run.stderr.lines().count(), 1, "one line: {what}");
        assert!(took < limit, "exited {took:?} after the fault: {what}");
        exits.push(format!(
            "{name}: exit {} after {:.0} ms: {}",
            run.code,
            chaos::ms(took),
            run.stderr.trim()
        ));

        let client = server.client().await;
        tally
            .release_ms
            .push(chaos::ms(wait_released(&client, RELEASE_LIMIT).await));
        tally.rows_checked += before.rows;
        let deleted = check_evict(name, &before.advance(&client).await, before.now);
        before.drop_table(&client).await;
        tally.faults += 1;
        tally.mid_run += usize::from(deleted > 0);
        tally.rows_changed += deleted;
    }

    let client = server.client().await;
    let mut before = snap(&client, false).await;
    let run = server
        .idemctl()
        .args(["evict", "-o", "json"])
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(run.json()["end_reason"], "drained");
    let start = before.now;
    tally.rows_checked += before.rows;
    let d = before.advance(&client).await;
    tally.rows_changed += check_evict("the run after the faults", &d, before.now);
    let last = snap(&client, true).await;
    assert_eq!(last.count_at(&client, EVICTABLE, start).await, 0);
    check_evict_end(&client, &last).await;
    for line in &exits {
        eprintln!("server fault: {line}");
    }
    tally.print("evict server restart/stop", rows, started, "");
}

/// A role that may run evict on the test's table (and nothing else), created in the test.
async fn evicter(db: &TestDb) -> String {
    let role = format!("{}_evicter", db.name());
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA public TO {role}; \
         GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO {role}"
    ))
    .await;
    role
}

/// Each statement evict sends after a batch's DELETE, failing for real: the role's SELECT on the
/// table is revoked while the DELETE runs (held there by a trigger until the revoke is done). The
/// run ends in one line naming the step it was at, exit 6, and the batch before it committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_after_a_batch_that_fails_ends_evict_naming_the_step() {
    let cases: [(&[&str], &str, i64); 3] = [
        (
            &["--min-age", "1s"],
            "failed to count rows kept back by --min-age",
            0,
        ),
        (
            &[],
            "failed to count the expired in_progress keys of a batch's range",
            0,
        ),
        (
            &["--batch-size", "5"],
            "failed to find the next batch's range",
            15,
        ),
    ];
    for (args, step, left) in cases {
        let db = TestDb::new().await;
        let mix = Mix {
            expired: 20,
            live: 5,
            ..Mix::default()
        };
        fixtures::table_with(&db, Schema::Corrected, mix).await;
        let role = evicter(&db).await;
        fixtures::hold_deletes(&db).await;
        let evict = crate::support::Cmd::new()
            .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
            .args(["evict", "--duty-cycle", "20"])
            .args(args)
            .spawn();
        let revoke = format!("REVOKE SELECT ON idempotency_keys FROM {role}");
        fixtures::while_a_delete_is_held(&db, &role, &revoke).await;
        let run = evict.wait_async().await;
        db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
            .await;
        run.assert_error(
            6,
            &format!("{step}: permission denied for table idempotency_keys"),
        );
        let expired = fixtures::scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE expires_at < now()",
        )
        .await;
        assert_eq!(expired, left, "{args:?}\n{run}");
    }
}

/// `--jobs 2` for a role that may open one connection: the second batch session cannot be
/// opened (the server's refusal is retried until --connect-timeout, as at the start), and the run
/// ends in one line naming that step, exit 5, before any batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_jobs_session_that_cannot_be_opened_ends_evict_naming_the_step() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 20,
        live: 5,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    let role = evicter(&db).await;
    db.exec(&format!("ALTER ROLE {role} CONNECTION LIMIT 1"))
        .await;
    let run = crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["evict", "--duty-cycle", "20", "--jobs", "2"])
        .args(["--connect-timeout", "1s"])
        .run_async()
        .await;
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
    let url = db.url();
    let setting = |key: &str| {
        url.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
    };
    let host = setting("host").expect("the test database's conninfo names its host");
    let port = setting("port").unwrap_or_else(|| "5432".to_owned());
    let place = match host.starts_with('/') {
        true => format!("socket directory {host:?} port {port}"),
        false => format!("host {host:?} port {port}"),
    };
    // How long the refusal was retried is the one figure not fixed in advance: read it back.
    let retried = run
        .stderr
        .rsplit_once(" (retried for ")
        .map_or("", |(_, r)| r.trim_end().trim_end_matches(')'));
    assert!(
        retried.ends_with('s')
            && retried
                .trim_end_matches("ms")
                .trim_end_matches('s')
                .parse::<u32>()
                .is_ok(),
        "{run}"
    );
    run.assert_error(
        5,
        &format!(
            "failed to open a session for an extra --jobs worker: cannot connect to user \
             {role:?} at {place}, database {:?}: too many connections for role {role:?} \
             (retried for {retried})",
            db.name()
        ),
    );
    let expired = fixtures::scalar_i64(
        &db,
        "SELECT count(*) FROM idempotency_keys WHERE expires_at < now()",
    )
    .await;
    assert_eq!(expired, 20, "{run}");
}

/// A batch the server refuses (a trigger of the API's raises an error on DELETE) is rolled back
/// and ends the run in one line naming it and giving the server's words, exit 1: nothing deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_server_refuses_is_rolled_back_and_ends_evict_naming_it() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 20,
        live: 5,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    let role = evicter(&db).await;
    db.exec(
        "CREATE FUNCTION keep_keys() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'keys are kept for the audit'; END $$; \
         CREATE TRIGGER keep_keys BEFORE DELETE ON idempotency_keys \
           FOR EACH ROW EXECUTE FUNCTION keep_keys();",
    )
    .await;
    let run = crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["evict", "--duty-cycle", "20"])
        .run_async()
        .await;
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
    run.assert_error(
        1,
        "a batch failed and was rolled back: keys are kept for the audit",
    );
    let expired = fixtures::scalar_i64(
        &db,
        "SELECT count(*) FROM idempotency_keys WHERE expires_at < now()",
    )
    .await;
    assert_eq!(expired, 20, "{run}");
}

/// Run `command` (shell words) in a terminal of its own (a pty from util-linux `script`), in a
/// background process group that no shell of the terminal's session controls any more (an
/// orphaned one), with stdin, stdout and stderr on the terminal: what POSIX gives a job whose
/// shell has gone. Its reads from the terminal, and any change of the terminal's settings, fail
/// there with EIO. Returns what the terminal showed (line breaks as `\n`), the exit status and
/// the terminal's settings afterwards (`stty -a`).
async fn orphaned_in_a_terminal(command: &str) -> (String, i32, String) {
    orphaned_in_a_terminal_set(&[], command).await
}

/// [`orphaned_in_a_terminal`] with the terminal's settings changed first by `stty SETTINGS`
/// (`tostop`: then a write to the terminal fails there with EIO as well).
pub(crate) async fn orphaned_in_a_terminal_set(
    settings: &[&str],
    command: &str,
) -> (String, i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let stty = match settings {
        [] => String::new(),
        _ => format!("stty {}\n", settings.join(" ")),
    };
    // The job waits for `go` until its shell has exited and the terminal's shell has taken the
    // foreground back, so it is orphaned before it starts.
    let script = format!(
        "set -m\n\
         {stty}\
         mkfifo {d}/go\n\
         sh -c '(read x < {d}/go; {command} < /dev/tty; echo $? > {d}/code) &'\n\
         echo go > {d}/go\n\
         while [ ! -s {d}/code ]; do sleep 0.1; done\n\
         stty -a > {d}/stty\n"
    );
    let file = dir.path().join("orphaned.sh");
    std::fs::write(&file, script).unwrap();
    let shown = format!("sh {}", file.display());
    let run = crate::support::Cmd::of("script")
        .args(["-qec", shown.as_str(), "/dev/null"])
        .env("TERM", "xterm")
        .run_async()
        .await;
    run.assert_code(0);
    let code = std::fs::read_to_string(dir.path().join("code")).unwrap();
    let settings = std::fs::read_to_string(dir.path().join("stty")).unwrap();
    (
        run.stdout.replace("\r\n", "\n"),
        code.trim().parse().unwrap(),
        settings,
    )
}

/// The terminal is in canonical mode with echo on: as before the run.
#[track_caller]
fn assert_terminal_as_it_was(settings: &str) {
    let words: Vec<&str> = settings
        .split(|c: char| c.is_whitespace() || c == ';')
        .collect();
    for on in ["icanon", "echo", "isig"] {
        assert!(words.contains(&on), "{on} is not on: {settings}");
    }
}

/// reclaim asks on the terminal before it writes; a terminal it cannot read (a job whose shell
/// has gone, where a read fails with EIO) ends the run in one line naming the step, exit 1, with
/// nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_that_cannot_be_read_ends_reclaim_naming_the_step() {
    let db = TestDb::new().await;
    let mix = Mix {
        live: 5,
        stuck: 4,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    let before = fixtures::snapshot(&db).await;
    let (shown, code, settings) = orphaned_in_a_terminal(&format!(
        "\"{}\" -d \"{}\" reclaim --action delete --older-than 30m",
        crate::support::IDEMCTL,
        db.url()
    ))
    .await;
    let (question, after) = shown
        .split_once(" [y/N] ")
        .unwrap_or_else(|| panic!("no question asked:\n{shown}"));
    assert!(question.starts_with("reclaim: delete 4 "), "{shown}");
    assert_eq!(
        after,
        "idemctl: failed to read the confirmation: Input/output error (os error 5)\n"
    );
    assert_eq!(code, 1, "{shown}");
    assert_terminal_as_it_was(&settings);
    assert_eq!(fixtures::snapshot(&db).await, before);
}

/// top's live view needs the terminal in raw mode; a terminal whose settings it may not change (a
/// job whose shell has gone, where that fails with EIO) ends top in one line naming the step,
/// exit 1, the terminal left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_top_cannot_set_up_ends_it_naming_the_step() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 5,
        live: 5,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    let (shown, code, settings) = orphaned_in_a_terminal(&format!(
        "\"{}\" -d \"{}\" top",
        crate::support::IDEMCTL,
        db.url()
    ))
    .await;
    assert_eq!(
        shown,
        "idemctl: failed to set up the terminal for the live view: Input/output error (os error \
         5)\n"
    );
    assert_eq!(code, 1, "{shown}");
    assert_terminal_as_it_was(&settings);
}

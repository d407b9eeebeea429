//! Concurrency: four evicts started together, and evicts beside reclaims, while live API traffic
//! takes new keys and retries existing ones (aimed at the very rows idemctl is about to change).
//! The traffic must see no error and no deadlock; every row idemctl should change is changed once
//! (by a committed statement, recorded in the ledger), nothing else is; and every lock wait of a
//! live request on idemctl is measured, from pg_stat_activity samples and from the server log.
//!
//! Sizes: `IDEMCTL_LIVE_ROWS` (default 20000), `IDEMCTL_LIVE_SECS` (traffic duration, default 5),
//! `IDEMCTL_FAULT_SEED`. Every test prints `figures:` lines.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::chaos::{
    self, Change, Diff, EVICTABLE, Key, STUCK, Snapshot, XorShift, diff, env_usize, ledger,
    snapshot,
};
use crate::fixtures::{self, Mix, Schema};
use crate::support::pgbouncer::{Mode as PoolMode, PgBouncer};
use crate::support::{Run, Spawned, TestDb};
use crate::workload::{self, Live, Watched, Watcher};

/// reclaim's default --older-than, in seconds.
const CUTOFF: f64 = 300.0;
/// A live request may wait on an idemctl batch (a row the batch is deleting stays locked until
/// it commits) for at most this long: evict's batches are sized to take about 2 ms and give up
/// on a held row after 1 ms, and the rest is margin for a loaded machine. On a machine so loaded
/// that idemctl's own batches take longer, the limit is twice the longest batch its summaries
/// report: a live request may wait for one batch, never for more.
const WAIT_LIMIT_MS: f64 = 25.0;
const WATCH_EVERY: Duration = Duration::from_millis(20);

const FRONT_OF_EVICTION: &str = "SELECT api_key_id, key FROM idempotency_keys \
    WHERE expires_at < now() AND state = 'completed' ORDER BY expires_at LIMIT 40";
const OLDEST_STUCK: &str = "SELECT api_key_id, key FROM idempotency_keys \
    WHERE state = 'in_progress' AND coalesce(locked_at, created_at) < now() - interval '5 minutes' \
    ORDER BY coalesce(locked_at, created_at) LIMIT 40";

/// Rows whose expiry cannot change class during the run: expired at least a few seconds before
/// it (the fixtures' expired rows, and "just expired" ones at the end of the eviction walk), live
/// ones an hour or more away, in_progress fresh (10 s) or stuck (1 h, 2 days).
async fn load(db: &TestDb, rows: usize) {
    let part = |pct: usize| (rows * pct / 100) as i64;
    let mix = Mix {
        expired: part(45),
        live: part(30),
        fresh: part(3),
        stuck: part(7),
        expired_in_progress: part(3),
    };
    fixtures::table_with(db, Schema::Corrected, mix).await;
    db.exec(&format!(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, response_status, response_body, locked_at, created_at, \
         expires_at) \
         SELECT 'just-expired-' || g, 'tenant_' || (g % 7), 'POST', '/v1/payments', \
                sha256(g::text::bytea), 'completed', 201, jsonb_build_object('id', 'pay_' || g), \
                now() - interval '1 day', now() - interval '1 day', \
                now() - make_interval(secs => 5 + random() * 50) \
           FROM generate_series(1, {}) AS g; \
         ANALYZE idempotency_keys",
        part(12)
    ))
    .await;
}

/// Keys the retries aim at besides the hot ones: the just-expired rows, and a sample of live,
/// in_progress and expired in_progress rows.
async fn targets(client: &Client, before: &Snapshot) -> Vec<Key> {
    let mut keys: Vec<Key> = before
        .keys(
            client,
            "key LIKE 'just-expired-%' \
             OR (NOT (state = 'completed' AND expires < $1) AND random() < 0.05)",
        )
        .await
        .into_iter()
        .collect();
    keys.sort();
    keys
}

/// Wait for every run, then keep the traffic going until `secs` have passed since it started.
async fn finish(runs: Vec<Spawned>, live: &Live, secs: u64) -> Vec<Run> {
    let mut out = Vec::new();
    for run in runs {
        out.push(run.wait_async().await);
    }
    let end = live.started + Duration::from_secs(secs);
    tokio::time::sleep_until(tokio::time::Instant::from_std(
        end.max(Instant::now() + Duration::from_millis(300)),
    ))
    .await;
    out
}

/// Exit codes 0 or 7 only (7: another run held the lock, said in one line); the sum of a JSON
/// field over the runs that worked.
fn sum_of(runs: &[Run], field: &str, busy: &str) -> u64 {
    assert!(runs.iter().any(|r| r.code == 0), "no run worked");
    let mut total = 0;
    for r in runs {
        match r.code {
            0 => {
                total += r.json()[field]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{field}\n{r}"))
            }
            7 => {
                assert!(r.stderr.contains(busy), "{r}");
                assert_eq!(r.stderr.lines().count(), 1, "{r}");
            }
            _ => panic!("exit codes must be 0 or 7\n{r}"),
        }
    }
    total
}

/// What the live traffic suffered from idemctl: no error, no deadlock, no lock held by idemctl
/// between statements, no wait on an idemctl session longer than WAIT_LIMIT_MS (or one batch).
/// Prints the figures.
#[expect(
    clippy::too_many_arguments,
    reason = "each figure of the traffic is its own input to the verdict, named at the call"
)]
fn judge_traffic(
    what: &str,
    pooled: bool,
    log: &workload::Log,
    watched: &Watched,
    live_pids: &HashSet<i32>,
    changes: &[Change],
    server_log: &str,
    runs: &[&Run],
) {
    assert!(
        log.errors.is_empty(),
        "{what}: the live workload saw errors: {:#?}",
        log.errors
    );
    assert!(watched.errors.is_empty(), "{:?}", watched.errors);
    let mut idemctl: HashSet<i32> = watched.idemctl_pids.clone();
    idemctl.extend(
        changes
            .iter()
            .filter(|c| c.app == "idemctl")
            .map(|c| c.backend),
    );

    let sampled: Vec<&workload::Episode> = watched
        .episodes
        .values()
        .filter(|e| e.app == workload::APP && !e.blockers.is_disjoint(&idemctl))
        .collect();
    let idemctl_waiting = watched
        .episodes
        .values()
        .filter(|e| idemctl.contains(&e.waiter))
        .count();
    let logged: Vec<workload::LoggedWait> = workload::logged_waits(server_log, live_pids)
        .into_iter()
        .filter(|w| w.holders.iter().any(|h| idemctl.contains(h)))
        .collect();
    let mut everyone = live_pids.clone();
    everyone.extend(&idemctl);
    let deadlocks = workload::logged_deadlocks(server_log, &everyone);
    for r in runs {
        assert!(
            !r.stderr.contains("40P01") && !r.stderr.contains("deadlock"),
            "{r}"
        );
    }
    assert!(deadlocks.is_empty(), "{what}: deadlocks: {deadlocks:#?}");

    let sampled_ms: Vec<f64> = sampled.iter().map(|e| e.ms).collect();
    let logged_ms: Vec<f64> = logged.iter().map(|w| w.ms).collect();
    let (s50, _, smax) = chaos::percentiles(&sampled_ms);
    let (l50, l99, lmax) = chaos::percentiles(&logged_ms);
    eprintln!(
        "figures: {what}: {} requests ({} retries found the row, {} found it gone, {} aimed at \
         rows idemctl was about to change), {} keys created, 0 errors, 0 deadlocks; \
         {} pg_stat_activity samples every {} ms: {} live waits on idemctl seen (p50 {s50:.1} ms, \
         max {smax:.1} ms), idemctl seen waiting {} times; server log (live sessions at \
         deadlock_timeout=1ms): {} live waits on idemctl > 1 ms (p50 {l50:.1}, p99 {l99:.1}, max \
         {lmax:.1} ms)",
        log.requests,
        log.retries_found,
        log.retries_absent,
        log.hot_retries,
        log.created.len(),
        watched.samples,
        WATCH_EVERY.as_millis(),
        sampled.len(),
        idemctl_waiting,
        logged.len(),
    );
    let mut kinds: Vec<_> = log.latencies.iter().collect();
    kinds.sort_by_key(|(k, _)| **k);
    for (kind, v) in kinds {
        let (p50, p99, max) = chaos::percentiles(v);
        eprintln!(
            "figures: {what}: live {kind}: {} statements, p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms",
            v.len()
        );
    }
    if let Some(e) = sampled.iter().max_by(|a, b| a.ms.total_cmp(&b.ms)) {
        eprintln!(
            "figures: {what}: longest sampled wait: {:.1} ms, pid {} blocked by {:?}: {}",
            e.ms, e.waiter, e.blockers, e.query
        );
    }
    if let Some(w) = logged.iter().max_by(|a, b| a.ms.total_cmp(&b.ms)) {
        eprintln!(
            "figures: {what}: longest logged wait: {:.1} ms, pid {} on {} held by {:?} (acquired: {})",
            w.ms, w.waiter, w.lock, w.holders, w.acquired
        );
    }
    // idemctl holds row locks only inside one statement: a session of it that blocks a live
    // request is always running that statement, never idle in a transaction. Behind a transaction
    // pooler a batch is BEGIN; SET LOCAL ...; statement; COMMIT sent at once: between the
    // statement and the COMMIT already on its way the server shows "idle in transaction" for an
    // instant, or "idle in transaction (aborted)" when the statement gave up on a row after its
    // lock_timeout and the COMMIT on its way rolls it back; the waits below bound what that costs.
    let states: Vec<&String> = watched.blocker_states.keys().collect();
    let allowed: &[&str] = if pooled {
        &[
            "active",
            "idle in transaction",
            "idle in transaction (aborted)",
        ]
    } else {
        &["active"]
    };
    assert!(
        states.iter().all(|s| allowed.contains(&s.as_str())),
        "{what}: idemctl held locks outside a statement: {:?}",
        watched.blocker_states
    );
    let batch_max = runs
        .iter()
        .filter(|r| r.code == 0)
        .filter_map(|r| r.json()["batch_ms_max"].as_f64())
        .fold(0.0, f64::max);
    for r in runs.iter().filter(|r| r.code == 0) {
        let j = r.json();
        if j.get("batch_rows_p50").is_some() {
            eprintln!(
                "figures: {what}: an evict run: {} batches, rows per batch p50 {} / max {}, \
                 {} lock_timeout fallbacks, {} rows skipped as held",
                j["batches"],
                j["batch_rows_p50"],
                j["batch_rows_max"],
                j["lock_fallbacks"],
                j["skipped_locked"]
            );
        }
    }
    let limit = WAIT_LIMIT_MS.max(2.0 * batch_max);
    eprintln!(
        "figures: {what}: idemctl sessions seen blocking: {:?}; wait limit {limit:.0} ms \
         (longest evict batch {batch_max:.1} ms)",
        watched.blocker_states
    );
    for e in &sampled {
        assert!(
            e.ms < limit,
            "{what}: a live request waited on idemctl: {e:?}"
        );
    }
    for w in &logged {
        assert!(
            w.ms < limit,
            "{what}: a live request waited on idemctl: {w:?}"
        );
    }
}

/// The rows that appeared are exactly the ones the live traffic created, all completed.
fn check_created(log: &workload::Log, d: &Diff) {
    for (k, s) in &d.appeared {
        assert_eq!(s.state, "completed", "live key {k:?}");
    }
    let appeared: HashSet<&Key> = d.appeared.iter().map(|(k, _)| k).collect();
    let created: HashSet<&Key> = log.created.iter().collect();
    assert_eq!(
        appeared, created,
        "the live traffic's keys, and only they, are new"
    );
}

/// The ledger's evict deletions: each of a row completed and expired at the time, none twice.
fn evict_changes(changes: &[Change]) -> Vec<&Change> {
    let mine: Vec<&Change> = changes
        .iter()
        .filter(|c| c.app == "idemctl" && !c.by_reclaim())
        .collect();
    for c in &mine {
        assert!(c.by_evict() && c.op == "DELETE", "{c:?}");
        assert!(
            c.old_state == "completed" && c.old_expires < c.stmt_now,
            "evict deleted a row not expired and completed at the time: {c:?}"
        );
    }
    assert_eq!(chaos::repeated(&mine), Vec::<Key>::new(), "deleted twice");
    mine
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_evicts_beside_live_traffic_delete_each_expired_row_once_and_stall_no_request() {
    let rows = env_usize("IDEMCTL_LIVE_ROWS", 20_000);
    let secs = env_usize("IDEMCTL_LIVE_SECS", 5) as u64;
    // The evicts run while the traffic does; the run after it drains what they left.
    let runtime = format!("{secs}s");
    let mut rng = XorShift::from_env("four evicts beside live traffic");
    let db = TestDb::new().await;
    load(&db, rows).await;
    let client = db.client().await;
    chaos::install_ledger(&client).await;
    let log_path = db.server_log();
    let log_from = log_path.as_deref().map_or(0, workload::log_offset);
    let before = snapshot(&client, true).await;
    let expected = before.keys(&client, EVICTABLE).await;

    let config = workload::Config {
        writers: 2,
        retriers: 4,
        targets: targets(&client, &before).await,
        hot_queries: vec![FRONT_OF_EVICTION],
        seed: rng.next_u64(),
    };
    let live = Live::start(&db, config).await;
    let watcher = Watcher::start(&db, WATCH_EVERY).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let evicts: Vec<Spawned> = (0..4)
        .map(|_| {
            db.idemctl()
                .args(["evict", "-o", "json", "--pause", "100ms", "--jobs", "2"])
                .args(["--max-runtime", &runtime])
                .spawn()
        })
        .collect();
    let runs = finish(evicts, &live, secs).await;
    let live_pids = live.pids.clone();
    let log = live.stop().await;
    let watched = watcher.stop().await;

    // Rows a live request held when their batch passed are left for the next run.
    let last_run = db.idemctl().args(["evict", "-o", "json"]).run_async().await;
    last_run.assert_code(0);
    let mut all_runs: Vec<Run> = runs.clone();
    all_runs.push(last_run.clone());
    let evicted = sum_of(
        &all_runs,
        "rows_evicted",
        "another evict run holds the lock",
    );
    let changes = ledger(&client).await;
    let last = snapshot(&client, true).await;

    let deleted: HashSet<Key> = evict_changes(&changes)
        .iter()
        .map(|c| c.key.clone())
        .collect();
    assert_eq!(
        deleted, expected,
        "exactly the rows expired at the start were deleted"
    );
    assert_eq!(evicted as usize, expected.len(), "the summaries add up");
    let d = diff(&client, &before, &last).await;
    assert!(
        d.changed.is_empty(),
        "rows changed: {}",
        chaos::brief(&d.changed)
    );
    let gone: HashSet<Key> = d.gone.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        gone, expected,
        "the rows gone are the rows expired at the start"
    );
    check_created(&log, &d);
    let server_log = log_path
        .as_deref()
        .map_or_else(String::new, |p| workload::log_since(p, log_from));
    let refs: Vec<&Run> = all_runs.iter().collect();
    judge_traffic(
        "four evicts",
        false,
        &log,
        &watched,
        &live_pids,
        &changes,
        &server_log,
        &refs,
    );
    let codes: Vec<i32> = runs.iter().map(|r| r.code).collect();
    let skipped: u64 = runs
        .iter()
        .filter(|r| r.code == 0)
        .map(|r| r.json()["skipped_locked"].as_u64().unwrap_or(0))
        .sum();
    eprintln!(
        "figures: four evicts: exit codes {codes:?}, {} rows expired at start, each deleted once \
         ({} by the final run; {skipped} skipped as held by live requests), {} other rows intact",
        expected.len(),
        last_run.json()["rows_evicted"],
        before.rows - expected.len()
    );
}

/// The same traffic with two evicts through a PgBouncer in transaction mode (no per-table lock
/// there: the runs share the rows): each expired row deleted once, and no live request waits on
/// a batch longer than the bound, as on a direct connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_evicts_through_a_transaction_pooler_beside_live_traffic_stall_no_request() {
    let rows = env_usize("IDEMCTL_LIVE_ROWS", 20_000);
    let secs = env_usize("IDEMCTL_LIVE_SECS", 5) as u64;
    let runtime = format!("{secs}s");
    let mut rng = XorShift::from_env("two evicts through a transaction pooler");
    let db = TestDb::new().await;
    load(&db, rows).await;
    let client = db.client().await;
    chaos::install_ledger(&client).await;
    let log_path = db.server_log();
    let log_from = log_path.as_deref().map_or(0, workload::log_offset);
    let before = snapshot(&client, true).await;
    let expected = before.keys(&client, EVICTABLE).await;
    let bouncer = PgBouncer::start(&db, PoolMode::Transaction, 4, &[]).await;

    let config = workload::Config {
        writers: 2,
        retriers: 4,
        targets: targets(&client, &before).await,
        hot_queries: vec![FRONT_OF_EVICTION],
        seed: rng.next_u64(),
    };
    let live = Live::start(&db, config).await;
    let watcher = Watcher::start(&db, WATCH_EVERY).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let evicts: Vec<Spawned> = (0..2)
        .map(|_| {
            db.idemctl()
                .env("IDEMCTL_DATABASE_URL", bouncer.url())
                .args(["evict", "-o", "json", "--pause", "100ms", "--jobs", "2"])
                .args(["--pool-mode", "transaction", "--max-runtime", &runtime])
                .spawn()
        })
        .collect();
    let runs = finish(evicts, &live, secs).await;
    let live_pids = live.pids.clone();
    let log = live.stop().await;
    let watched = watcher.stop().await;

    let last_run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", bouncer.url())
        .args(["evict", "-o", "json", "--pool-mode", "transaction"])
        .run_async()
        .await;
    last_run.assert_code(0);
    let mut all_runs: Vec<Run> = runs.clone();
    all_runs.push(last_run.clone());
    for r in &all_runs {
        r.assert_code(0);
    }
    let evicted = sum_of(
        &all_runs,
        "rows_evicted",
        "no lock behind a transaction pooler",
    );
    let changes = ledger(&client).await;
    let deleted: Vec<Key> = evict_changes(&changes)
        .iter()
        .map(|c| c.key.clone())
        .collect();
    let once: HashSet<Key> = deleted.iter().cloned().collect();
    assert_eq!(once.len(), deleted.len(), "a row was deleted twice");
    assert_eq!(
        once, expected,
        "exactly the rows expired at the start were deleted"
    );
    assert_eq!(evicted as usize, expected.len(), "the summaries add up");
    let last = snapshot(&client, true).await;
    let d = diff(&client, &before, &last).await;
    assert!(
        d.changed.is_empty(),
        "rows changed: {}",
        chaos::brief(&d.changed)
    );
    check_created(&log, &d);
    let server_log = log_path
        .as_deref()
        .map_or_else(String::new, |p| workload::log_since(p, log_from));
    let refs: Vec<&Run> = all_runs.iter().collect();
    judge_traffic(
        "two evicts through a transaction pooler",
        true,
        &log,
        &watched,
        &live_pids,
        &changes,
        &server_log,
        &refs,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_and_reclaim_beside_each_other_and_live_traffic_change_only_their_rows_once() {
    let rows = env_usize("IDEMCTL_LIVE_ROWS", 20_000);
    let secs = env_usize("IDEMCTL_LIVE_SECS", 5) as u64;
    let mut rng = XorShift::from_env("evict and reclaim beside live traffic");
    let db = TestDb::new().await;
    load(&db, rows).await;
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    let client = db.client().await;
    chaos::install_ledger(&client).await;
    let log_path = db.server_log();
    let log_from = log_path.as_deref().map_or(0, workload::log_offset);
    let before = snapshot(&client, true).await;
    let stuck = before.keys(&client, STUCK).await;
    // reclaim --action fail keeps the keys it fails (expired ones too) for --keep-failed-for, in
    // the same statement: evict never sees them expired, so it takes exactly the evictable rows.
    let expected_deleted = before.keys(&client, EVICTABLE).await;

    let config = workload::Config {
        writers: 2,
        retriers: 4,
        targets: targets(&client, &before).await,
        hot_queries: vec![FRONT_OF_EVICTION, OLDEST_STUCK],
        seed: rng.next_u64(),
    };
    let live = Live::start(&db, config).await;
    let watcher = Watcher::start(&db, WATCH_EVERY).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reclaim = [
        "reclaim",
        "--yes",
        "--allow-scan",
        "--action",
        "fail",
        "-o",
        "json",
    ];
    let runtime = format!("{secs}s");
    let evict = [
        "evict",
        "-o",
        "json",
        "--pause",
        "100ms",
        "--max-runtime",
        runtime.as_str(),
    ];
    let children: Vec<Spawned> = (0..4)
        .map(|i| match i % 2 {
            0 => db.idemctl().args(evict).spawn(),
            _ => db
                .idemctl()
                .args(reclaim)
                .args(["--batch-size", "5"])
                .spawn(),
        })
        .collect();
    let runs = finish(children, &live, secs).await;
    let live_pids = live.pids.clone();
    let log = live.stop().await;
    let watched = watcher.stop().await;

    // What live requests held when a batch passed is taken by one more run of each.
    let last_reclaim = db.idemctl().args(reclaim).run_async().await;
    last_reclaim.assert_code(0);
    let last_evict = db.idemctl().args(["evict", "-o", "json"]).run_async().await;
    last_evict.assert_code(0);
    let (mut evict_runs, mut reclaim_runs) = (vec![last_evict.clone()], vec![last_reclaim.clone()]);
    for (i, r) in runs.iter().enumerate() {
        match i % 2 {
            0 => evict_runs.push(r.clone()),
            _ => reclaim_runs.push(r.clone()),
        }
    }
    let evicted = sum_of(
        &evict_runs,
        "rows_evicted",
        "another evict run holds the lock",
    );
    let reclaimed = sum_of(
        &reclaim_runs,
        "rows_reclaimed",
        "another reclaim run holds the lock",
    );
    let changes = ledger(&client).await;
    let last = snapshot(&client, true).await;

    let deleted: HashSet<Key> = evict_changes(&changes)
        .iter()
        .map(|c| c.key.clone())
        .collect();
    assert_eq!(
        deleted, expected_deleted,
        "evict deleted exactly the expired completed rows"
    );
    assert_eq!(
        evicted as usize,
        expected_deleted.len(),
        "evict's summaries add up"
    );
    let failed: Vec<&Change> = changes.iter().filter(|c| c.by_reclaim()).collect();
    for c in &failed {
        assert!(
            c.op == "UPDATE"
                && c.old_state == "in_progress"
                && c.old_held < c.stmt_now - CUTOFF
                && c.new_state.as_deref() == Some("completed")
                && c.new_status == Some(500)
                && c.new_ident.as_ref() == Some(&c.old_ident),
            "reclaim changed a row it should not have, or wrongly: {c:?}"
        );
    }
    assert_eq!(
        chaos::repeated(&failed),
        Vec::<Key>::new(),
        "reclaimed twice"
    );
    let failed_keys: HashSet<Key> = failed.iter().map(|c| c.key.clone()).collect();
    assert_eq!(failed_keys, stuck, "reclaim failed exactly the stuck rows");
    assert_eq!(
        reclaimed as usize,
        stuck.len(),
        "reclaim's summaries add up"
    );
    let d = diff(&client, &before, &last).await;
    let gone: HashSet<Key> = d.gone.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        gone, expected_deleted,
        "the rows gone are the ones evict had to delete"
    );
    for (k, b, a) in &d.changed {
        assert!(
            stuck.contains(k) && a.state == "completed" && a.status == Some(500) && a.has_body,
            "row {k:?} changed: {b:?} -> {a:?}"
        );
    }
    let changed: HashSet<&Key> = d.changed.iter().map(|(k, _, _)| k).collect();
    assert_eq!(
        changed,
        stuck.difference(&expected_deleted).collect::<HashSet<_>>(),
        "every stuck row failed, and nothing else changed"
    );
    check_created(&log, &d);
    let server_log = log_path
        .as_deref()
        .map_or_else(String::new, |p| workload::log_since(p, log_from));
    let mut refs: Vec<&Run> = runs.iter().collect();
    refs.extend([&last_reclaim, &last_evict]);
    judge_traffic(
        "evict + reclaim",
        false,
        &log,
        &watched,
        &live_pids,
        &changes,
        &server_log,
        &refs,
    );
    let codes: Vec<i32> = runs.iter().map(|r| r.code).collect();
    eprintln!(
        "figures: evict + reclaim: exit codes (evict, reclaim, evict, reclaim) {codes:?}; {} rows \
         deleted once by evict ({} by the final run), {} stuck rows failed once by reclaim ({} by \
         the final run), {} other rows intact",
        expected_deleted.len(),
        last_evict.json()["rows_evicted"],
        stuck.len(),
        last_reclaim.json()["rows_reclaimed"],
        before.rows - expected_deleted.union(&stuck).count()
    );
}

/// A statement trigger on the key table that takes a shared advisory lock: a stand-in for any
/// lock a write may need for a moment besides row locks (the relation extension lock when the
/// table grows, an audit table, ...). The test holds the lock exclusively for a while.
const BRIEF_LOCK: &str = "
CREATE FUNCTION idemctl_test_brief_lock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(4242);
    RETURN NULL;
END $$;
CREATE TRIGGER idemctl_test_brief_lock AFTER UPDATE OR DELETE ON idempotency_keys
    FOR EACH STATEMENT EXECUTE FUNCTION idemctl_test_brief_lock();";

/// Start `args` while another session holds the trigger's lock for 300 ms from the moment idemctl
/// has logged in; the run must ride that out (its batches wait at most 5 ms each, then retry).
async fn rides_out_a_brief_lock_wait(args: &[&str], mix: Mix) -> (Run, TestDb) {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    db.exec(BRIEF_LOCK).await;
    let holder = db.client().await;
    holder
        .batch_execute("SELECT pg_advisory_lock(4242)")
        .await
        .unwrap();
    let child = db.idemctl().args(args).spawn();
    let deadline = Instant::now() + Duration::from_secs(20);
    while chaos::idemctl_sessions(&holder).await == 0 {
        assert!(Instant::now() < deadline, "idemctl never connected");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder
        .batch_execute("SELECT pg_advisory_unlock(4242)")
        .await
        .unwrap();
    (child.wait_async().await, db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_rides_out_a_brief_lock_wait_of_its_batches() {
    let mix = Mix {
        expired: 500,
        live: 50,
        ..Mix::default()
    };
    let args = ["evict", "-o", "json", "--batch-size", "20"];
    let (run, db) = rides_out_a_brief_lock_wait(&args, mix).await;
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], 500, "{run}");
    assert_eq!(
        fixtures::scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        50
    );
}

/// reclaim rides out a brief lock wait of its batches as evict does: a batch that waits 5 ms for a
/// lock is rolled back and tried again after a pause, rather than ending the run (exit 1, "gave up
/// waiting for a lock another session holds"). Seen for real in the live-traffic test under load
/// (a trigger's insert waiting to extend its table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_rides_out_a_brief_lock_wait_like_evict_does() {
    let mix = Mix {
        stuck: 200,
        live: 50,
        ..Mix::default()
    };
    let args = [
        "reclaim",
        "--yes",
        "--allow-scan",
        "-o",
        "json",
        "--batch-size",
        "10",
    ];
    let (run, db) = rides_out_a_brief_lock_wait(&args, mix).await;
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], 200, "{run}");
    assert_eq!(
        fixtures::scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        50
    );
}

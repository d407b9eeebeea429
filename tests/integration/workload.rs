//! Live API traffic beside idemctl, and what it suffered: sessions that take new keys (insert
//! `in_progress`, complete in the same or a second transaction) and sessions that retry existing
//! keys (`SELECT ... FOR UPDATE`, a short pause, commit), aimed at the rows idemctl is about to
//! change; every statement's latency and every error is kept. Also a watcher that samples
//! `pg_stat_activity` for lock waits, and a reader of the server log's `log_lock_waits` lines.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_postgres::{Client, Statement};

use crate::chaos::{Key, XorShift};
use crate::support::{TestDb, connect, pg_error_text};

/// The application_name of every workload session.
pub(crate) const APP: &str = "live-workload";

/// What traffic to run.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Sessions taking new keys.
    pub writers: usize,
    /// Sessions retrying existing keys.
    pub retriers: usize,
    /// Existing keys the retries pick from (besides the hot ones).
    pub targets: Vec<Key>,
    /// Queries returning (api_key_id, key) of the rows idemctl is about to change, re-run every
    /// 20 ms; half of all retries go to their latest answer.
    pub hot_queries: Vec<&'static str>,
    pub seed: u64,
}

/// What the workload saw.
#[derive(Debug, Default)]
pub(crate) struct Log {
    pub errors: Vec<String>,
    /// Statement latencies in ms, by statement kind.
    pub latencies: HashMap<&'static str, Vec<f64>>,
    /// Keys the writers created (and so changed).
    pub created: Vec<Key>,
    pub requests: u64,
    pub retries_found: u64,
    pub retries_absent: u64,
    pub hot_retries: u64,
}

impl Log {
    fn merge(&mut self, other: Log) {
        self.errors.extend(other.errors);
        for (kind, v) in other.latencies {
            self.latencies.entry(kind).or_default().extend(v);
        }
        self.created.extend(other.created);
        self.requests += other.requests;
        self.retries_found += other.retries_found;
        self.retries_absent += other.retries_absent;
        self.hot_retries += other.hot_retries;
    }

    async fn timed<T>(
        &mut self,
        kind: &'static str,
        work: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, tokio_postgres::Error> {
        let started = Instant::now();
        let out = work.await;
        self.latencies
            .entry(kind)
            .or_default()
            .push(crate::chaos::ms(started.elapsed()));
        out
    }
}

/// The running workload.
pub(crate) struct Live {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Log>>,
    /// Backend pids of the workload's sessions.
    pub pids: HashSet<i32>,
    pub started: Instant,
}

async fn session(db: &TestDb) -> (Client, i32) {
    let client = connect(&db.url_with(&[("application_name", APP)])).await;
    // Log every lock wait of this session longer than 1 ms (log_lock_waits is on in the harness),
    // so the server log shows waits far shorter than any sampling interval.
    client
        .batch_execute("SET deadlock_timeout = '1ms'")
        .await
        .unwrap();
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    (client, pid)
}

impl Live {
    /// Open the sessions, then start the traffic.
    pub(crate) async fn start(db: &TestDb, config: Config) -> Live {
        let stop = Arc::new(AtomicBool::new(false));
        let hot = Arc::new(Mutex::new(Vec::<Key>::new()));
        let targets = Arc::new(config.targets);
        let mut rng = XorShift::new(config.seed);
        let mut pids = HashSet::new();
        let mut tasks = Vec::new();
        for id in 0..config.writers {
            let (client, pid) = session(db).await;
            pids.insert(pid);
            let stop = stop.clone();
            let rng = XorShift::new(rng.next_u64());
            tasks.push(tokio::spawn(writer(client, id, stop, rng)));
        }
        for _ in 0..config.retriers {
            let (client, pid) = session(db).await;
            pids.insert(pid);
            let (stop, hot, targets) = (stop.clone(), hot.clone(), targets.clone());
            let rng = XorShift::new(rng.next_u64());
            tasks.push(tokio::spawn(retrier(client, stop, hot, targets, rng)));
        }
        if !config.hot_queries.is_empty() {
            let (client, pid) = session(db).await;
            pids.insert(pid);
            let (stop, hot) = (stop.clone(), hot.clone());
            tasks.push(tokio::spawn(scout(client, stop, hot, config.hot_queries)));
        }
        Live {
            stop,
            tasks,
            pids,
            started: Instant::now(),
        }
    }

    /// Stop the traffic and gather what it saw.
    pub(crate) async fn stop(self) -> Log {
        self.stop.store(true, Ordering::SeqCst);
        let mut log = Log::default();
        for task in self.tasks {
            log.merge(task.await.expect("a workload task panicked"));
        }
        log
    }
}

const INSERT: &str = "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
    request_fingerprint, state, locked_at, expires_at) \
    VALUES ($2, $1, 'POST', '/v1/payments', sha256(convert_to($2, 'UTF8')), 'in_progress', now(), \
            now() + interval '1 day') \
    ON CONFLICT DO NOTHING";
const COMPLETE: &str = "UPDATE idempotency_keys \
    SET state = 'completed', response_status = 201, \
        response_body = jsonb_build_object('id', 'pay_' || md5($2), 'status', 'succeeded') \
    WHERE api_key_id = $1 AND key = $2 AND state = 'in_progress'";
const RETRY: &str =
    "SELECT state FROM idempotency_keys WHERE api_key_id = $1 AND key = $2 FOR UPDATE";

async fn pause(rng: &mut XorShift, lo_ms: u64, hi_ms: u64) {
    tokio::time::sleep(Duration::from_micros(
        rng.between(lo_ms * 1000, hi_ms * 1000),
    ))
    .await;
}

/// Take new keys: insert in_progress, "handle" the request for a few ms, complete. Even requests do
/// it in one transaction, odd ones in two (insert-first designs); a tenth also retry their key.
async fn writer(client: Client, id: usize, stop: Arc<AtomicBool>, mut rng: XorShift) -> Log {
    let mut log = Log::default();
    let insert = client.prepare(INSERT).await.unwrap();
    let complete = client.prepare(COMPLETE).await.unwrap();
    let retry = client.prepare(RETRY).await.unwrap();
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let key = (format!("live_tenant_{}", id % 3), format!("live-{id}-{n}"));
        let outcome = if n.is_multiple_of(2) {
            one_transaction(&client, &insert, &complete, &key, &mut rng, &mut log).await
        } else {
            two_transactions(&client, &insert, &complete, &key, &mut rng, &mut log).await
        };
        log.requests += 1;
        match outcome {
            Ok(()) => log.created.push(key.clone()),
            Err(e) => fail(&client, &mut log, &e).await,
        }
        if rng.chance(10)
            && let Err(e) = retry_once(&client, &retry, &key, &mut rng, &mut log).await
        {
            fail(&client, &mut log, &e).await;
        }
        pause(&mut rng, 1, 3).await;
    }
    log
}

async fn fail(client: &Client, log: &mut Log, e: &tokio_postgres::Error) {
    log.errors.push(pg_error_text(e));
    let _ = client.batch_execute("ROLLBACK").await;
}

async fn one_transaction(
    client: &Client,
    insert: &Statement,
    complete: &Statement,
    (tenant, key): &Key,
    rng: &mut XorShift,
    log: &mut Log,
) -> Result<(), tokio_postgres::Error> {
    log.timed("begin", client.batch_execute("BEGIN")).await?;
    log.timed("insert", client.execute(insert, &[tenant, key]))
        .await?;
    pause(rng, 1, 3).await;
    log.timed("complete", client.execute(complete, &[tenant, key]))
        .await?;
    log.timed("commit", client.batch_execute("COMMIT")).await
}

async fn two_transactions(
    client: &Client,
    insert: &Statement,
    complete: &Statement,
    (tenant, key): &Key,
    rng: &mut XorShift,
    log: &mut Log,
) -> Result<(), tokio_postgres::Error> {
    log.timed("insert", client.execute(insert, &[tenant, key]))
        .await?;
    pause(rng, 1, 3).await;
    log.timed("complete", client.execute(complete, &[tenant, key]))
        .await?;
    Ok(())
}

/// A client's retry: lock the key's row, read it, hold it a few ms (replaying the response or
/// answering 409), commit.
async fn retry_once(
    client: &Client,
    retry: &Statement,
    (tenant, key): &Key,
    rng: &mut XorShift,
    log: &mut Log,
) -> Result<(), tokio_postgres::Error> {
    log.timed("begin", client.batch_execute("BEGIN")).await?;
    let rows = log
        .timed("retry_for_update", client.query(retry, &[tenant, key]))
        .await?;
    if rows.is_empty() {
        log.retries_absent += 1;
    } else {
        log.retries_found += 1;
    }
    pause(rng, 1, 4).await;
    log.timed("commit", client.batch_execute("COMMIT")).await
}

async fn retrier(
    client: Client,
    stop: Arc<AtomicBool>,
    hot: Arc<Mutex<Vec<Key>>>,
    targets: Arc<Vec<Key>>,
    mut rng: XorShift,
) -> Log {
    let mut log = Log::default();
    let retry = client.prepare(RETRY).await.unwrap();
    while !stop.load(Ordering::SeqCst) {
        let hot_pick = {
            let hot = hot.lock().unwrap();
            (!hot.is_empty() && rng.chance(50))
                .then(|| hot[rng.between(0, hot.len() as u64) as usize].clone())
        };
        let key = match hot_pick {
            Some(k) => {
                log.hot_retries += 1;
                k
            }
            None if targets.is_empty() => {
                pause(&mut rng, 1, 3).await;
                continue;
            }
            None => targets[rng.between(0, targets.len() as u64) as usize].clone(),
        };
        log.requests += 1;
        if let Err(e) = retry_once(&client, &retry, &key, &mut rng, &mut log).await {
            fail(&client, &mut log, &e).await;
        }
        pause(&mut rng, 0, 2).await;
    }
    log
}

/// Keep `hot` pointed at the rows idemctl is about to reach.
async fn scout(
    client: Client,
    stop: Arc<AtomicBool>,
    hot: Arc<Mutex<Vec<Key>>>,
    queries: Vec<&'static str>,
) -> Log {
    let mut log = Log::default();
    while !stop.load(Ordering::SeqCst) {
        let mut found = Vec::new();
        for sql in &queries {
            match log.timed("scout", client.query(*sql, &[])).await {
                Ok(rows) => found.extend(rows.iter().map(|r| (r.get(0), r.get(1)))),
                Err(e) => log.errors.push(pg_error_text(&e)),
            }
        }
        *hot.lock().unwrap() = found;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    log
}

/// One session seen waiting for a lock, over one statement.
#[derive(Debug, Clone)]
pub(crate) struct Episode {
    pub waiter: i32,
    pub app: String,
    pub blockers: HashSet<i32>,
    /// Longest time into the statement at which it was still seen waiting (ms).
    pub ms: f64,
    pub query: String,
}

/// What the watcher saw.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    pub samples: u64,
    /// Backend pids of idemctl sessions seen.
    pub idemctl_pids: HashSet<i32>,
    /// Lock waits by (waiter pid, statement start).
    pub episodes: HashMap<(i32, i64), Episode>,
    /// pg_stat_activity `state` of idemctl sessions seen blocking another session, with counts:
    /// `active` (inside the one statement of its transaction) is all it may ever be.
    pub blocker_states: HashMap<String, u64>,
    pub errors: Vec<String>,
}

/// Samples pg_stat_activity of the database every `every` for sessions waiting on a lock, and
/// who blocks them (pg_blocking_pids).
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Watched>,
}

const SAMPLE: &str = "SELECT pid, application_name::text, coalesce(wait_event_type = 'Lock', false), \
        coalesce((extract(epoch FROM query_start) * 1e6)::int8, 0), \
        coalesce(extract(epoch FROM clock_timestamp() - query_start)::float8 * 1000, 0), \
        CASE WHEN wait_event_type = 'Lock' THEN pg_blocking_pids(pid) END, left(query, 100), \
        coalesce(state, '') \
   FROM pg_stat_activity \
  WHERE datname = current_database() AND pid <> pg_backend_pid() \
    AND (application_name = 'idemctl' OR wait_event_type = 'Lock')";

impl Watcher {
    pub(crate) async fn start(db: &TestDb, every: Duration) -> Watcher {
        let client = connect(&db.url_with(&[("application_name", "lock-watcher")])).await;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut seen = Watched::default();
            let stmt = client.prepare(SAMPLE).await.unwrap();
            while !flag.load(Ordering::SeqCst) {
                match client.query(&stmt, &[]).await {
                    Ok(rows) => record(&mut seen, &rows),
                    Err(e) => seen.errors.push(pg_error_text(&e)),
                }
                tokio::time::sleep(every).await;
            }
            seen
        });
        Watcher { stop, task }
    }

    pub(crate) async fn stop(self) -> Watched {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the lock watcher panicked")
    }
}

fn record(seen: &mut Watched, rows: &[tokio_postgres::Row]) {
    seen.samples += 1;
    let states: HashMap<i32, String> = rows
        .iter()
        .filter(|r| r.get::<_, String>(1) == "idemctl")
        .map(|r| (r.get(0), r.get(7)))
        .collect();
    seen.idemctl_pids.extend(states.keys());
    for r in rows.iter().filter(|r| r.get::<_, bool>(2)) {
        let pid: i32 = r.get(0);
        let blockers: Vec<i32> = r.get::<_, Option<Vec<i32>>>(5).unwrap_or_default();
        for b in &blockers {
            if let Some(state) = states.get(b) {
                *seen.blocker_states.entry(state.clone()).or_default() += 1;
            }
        }
        let ms: f64 = r.get(4);
        let episode = seen
            .episodes
            .entry((pid, r.get(3)))
            .or_insert_with(|| Episode {
                waiter: pid,
                app: r.get(1),
                blockers: HashSet::new(),
                ms,
                query: r.get(6),
            });
        episode.blockers.extend(blockers);
        episode.ms = episode.ms.max(ms);
    }
}

/// A lock wait the server logged (log_lock_waits): waiter, holders and how long it lasted.
#[derive(Debug, Clone)]
pub(crate) struct LoggedWait {
    pub waiter: i32,
    pub holders: Vec<i32>,
    pub lock: String,
    /// The wait's full length when the log says it was acquired, else when it was first logged.
    pub ms: f64,
    pub acquired: bool,
}

/// The server log's size now: read from here after the run.
pub(crate) fn log_offset(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The log lines from `offset` on.
pub(crate) fn log_since(path: &Path, offset: u64) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let from = usize::try_from(offset).unwrap_or(0).min(bytes.len());
    String::from_utf8_lossy(&bytes[from..]).into_owned()
}

/// The `[pid]` of a line in the default log_line_prefix ('%m [%p] ').
fn line_pid(line: &str) -> Option<i32> {
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    line[open + 1..close].parse().ok()
}

fn after_ms(line: &str) -> Option<f64> {
    let at = line.rfind(" after ")?;
    line[at + 7..].trim().strip_suffix(" ms")?.parse().ok()
}

/// Lock waits of `waiters` in the log text: "still waiting" lines (with the DETAIL naming the
/// holders), completed by their "acquired ... after" line.
pub(crate) fn logged_waits(text: &str, waiters: &HashSet<i32>) -> Vec<LoggedWait> {
    let mut out: Vec<LoggedWait> = Vec::new();
    let mut open: HashMap<i32, usize> = HashMap::new();
    for line in text.lines() {
        let Some(pid) = line_pid(line).filter(|p| waiters.contains(p)) else {
            continue;
        };
        if let Some(at) = line.find(" still waiting for ") {
            let lock = line[at + 19..]
                .split(" after ")
                .next()
                .unwrap_or("")
                .to_owned();
            open.insert(pid, out.len());
            out.push(LoggedWait {
                waiter: pid,
                holders: Vec::new(),
                lock,
                ms: after_ms(line).unwrap_or(0.0),
                acquired: false,
            });
        } else if let Some(at) = line.find("holding the lock: ") {
            if let Some(&i) = open.get(&pid) {
                let list = line[at + 18..].split('.').next().unwrap_or("");
                out[i].holders = list
                    .split(',')
                    .filter_map(|p| p.trim().parse().ok())
                    .collect();
            }
        } else if line.contains(" acquired ")
            && line.contains(" after ")
            && let Some(i) = open.remove(&pid)
        {
            out[i].ms = after_ms(line).unwrap_or(out[i].ms);
            out[i].acquired = true;
        }
    }
    out
}

/// Log lines of these backends that report a deadlock.
pub(crate) fn logged_deadlocks(text: &str, pids: &HashSet<i32>) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("deadlock detected") || l.contains("detected deadlock"))
        .filter(|l| line_pid(l).is_some_and(|p| pids.contains(&p)))
        .map(str::to_owned)
        .collect()
}

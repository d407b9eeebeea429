//! Shared by the fault and concurrency tests: sizes and seeds from the environment, a seeded
//! xorshift, a ledger of every row change (a trigger, so it commits or rolls back with the change),
//! whole-table snapshots, and probes for idemctl's sessions and maintenance locks.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_postgres::Client;

use crate::support::{Run, Spawned};

/// A row's identity on the key table.
pub(crate) type Key = (String, String);

/// A whole number from the environment, or `default` when unset or empty.
pub(crate) fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        _ => default,
    }
}

/// xorshift64: small, seeded, reproducible; good enough to pick moments and targets.
#[derive(Debug, Clone)]
pub(crate) struct XorShift(u64);

impl XorShift {
    pub(crate) fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    /// Seeded from `IDEMCTL_FAULT_SEED`, else from the clock; prints the seed so a failure can be
    /// replayed.
    pub(crate) fn from_env(test: &str) -> XorShift {
        let seed = match std::env::var("IDEMCTL_FAULT_SEED") {
            Ok(v) if !v.trim().is_empty() => v
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("IDEMCTL_FAULT_SEED={v:?} is not a u64")),
            _ => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 ^ u64::from(std::process::id())),
        };
        eprintln!("{test}: seed {seed} (replay with IDEMCTL_FAULT_SEED={seed})");
        XorShift::new(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in [lo, hi).
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo).max(1)
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

/// The ledger: every committed UPDATE and DELETE of the key table by an idemctl session, one row
/// per changed row, with the backend that made it and the statement's `now()`. Statement-level
/// triggers over transition tables, so a batch costs one INSERT. A batch that rolls back (killed
/// client, terminated backend) leaves no trace here, exactly as it leaves none in the table.
/// Changes by anyone else show in the snapshots' diffs.
const LEDGER_DDL: &str = r#"
CREATE TABLE idemctl_test_ledger (
    op          text NOT NULL,
    api_key_id  text NOT NULL,
    key         text NOT NULL,
    old_state   text NOT NULL,
    old_expires float8 NOT NULL,
    old_held    float8 NOT NULL,
    old_digest  text NOT NULL,
    old_ident   text NOT NULL,
    new_state   text,
    new_status  int,
    new_body    text,
    new_ident   text,
    app         text NOT NULL,
    backend     int NOT NULL,
    query       text,
    stmt_now    float8 NOT NULL
);

CREATE FUNCTION idemctl_test_ledger_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idemctl_test_ledger
    SELECT 'DELETE', o.api_key_id, o.key, o.state, extract(epoch FROM o.expires_at),
           extract(epoch FROM coalesce(o.locked_at, o.created_at)), md5(o::text),
           {ident_o}, NULL, NULL, NULL, NULL,
           current_setting('application_name'), pg_backend_pid(), left(current_query(), 120),
           extract(epoch FROM now())
      FROM old_rows o;
    RETURN NULL;
END $$;

CREATE FUNCTION idemctl_test_ledger_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idemctl_test_ledger
    SELECT 'UPDATE', o.api_key_id, o.key, o.state, extract(epoch FROM o.expires_at),
           extract(epoch FROM coalesce(o.locked_at, o.created_at)), md5(o::text),
           {ident_o}, n.state, n.response_status, md5(n.response_body::text),
           {ident_n},
           current_setting('application_name'), pg_backend_pid(), left(current_query(), 120),
           extract(epoch FROM now())
      FROM old_rows o JOIN new_rows n ON n.api_key_id = o.api_key_id AND n.key = o.key;
    RETURN NULL;
END $$;

CREATE TRIGGER idemctl_test_ledger_delete AFTER DELETE ON idempotency_keys
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    WHEN (current_setting('application_name') = 'idemctl')
    EXECUTE FUNCTION idemctl_test_ledger_delete();
CREATE TRIGGER idemctl_test_ledger_update AFTER UPDATE ON idempotency_keys
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('application_name') = 'idemctl')
    EXECUTE FUNCTION idemctl_test_ledger_update();

-- Room for the ledger to grow without extending its file: extending takes a lock, which an
-- idemctl batch would then wait for under its 5 ms lock_timeout, because of the test alone.
INSERT INTO idemctl_test_ledger
SELECT 'room', '', '', '', 0, 0, repeat('x', 32), repeat('x', 32), NULL, NULL, repeat('x', 32),
       repeat('x', 32), 'idemctl', 0, repeat('x', 120), 0
  FROM generate_series(1, 20000);
DELETE FROM idemctl_test_ledger;
"#;

/// md5 of a row of the key table without its state, response and expires_at columns: what
/// reclaim `--action fail` must leave as it was (it may keep a failed key longer, by
/// --keep-failed-for).
fn ident_sql(alias: &str) -> String {
    format!(
        "md5(row({a}.key, {a}.api_key_id, {a}.request_method, {a}.request_path, \
         {a}.request_fingerprint, {a}.locked_at, {a}.created_at)::text)",
        a = alias
    )
}

/// Create the ledger on a database whose key table exists.
pub(crate) async fn install_ledger(client: &Client) {
    let ddl = LEDGER_DDL
        .replace("{ident_o}", &ident_sql("o"))
        .replace("{ident_n}", &ident_sql("n"));
    for sql in [ddl.as_str(), "VACUUM (TRUNCATE false) idemctl_test_ledger"] {
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("ledger: {}", crate::support::pg_error_text(&e)));
    }
}

/// One ledger entry.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub op: String,
    pub key: Key,
    pub old_state: String,
    pub old_expires: f64,
    pub old_held: f64,
    pub old_digest: String,
    pub old_ident: String,
    pub new_state: Option<String>,
    pub new_status: Option<i32>,
    pub new_body: Option<String>,
    pub new_ident: Option<String>,
    pub app: String,
    pub backend: i32,
    pub query: String,
    pub stmt_now: f64,
}

impl Change {
    /// Made by an evict batch (its statements start with the `-- evict` comment of sql/).
    pub(crate) fn by_evict(&self) -> bool {
        self.app == "idemctl" && self.query.starts_with("-- evict")
    }

    /// Made by a reclaim batch.
    pub(crate) fn by_reclaim(&self) -> bool {
        self.app == "idemctl" && self.query.starts_with("-- reclaim")
    }
}

/// The whole ledger, in commit-independent insertion order.
pub(crate) async fn ledger(client: &Client) -> Vec<Change> {
    let rows = client
        .query(
            "SELECT op, api_key_id, key, old_state, old_expires, old_held, old_digest, old_ident, \
                    new_state, new_status, new_body, new_ident, app, backend, coalesce(query, ''), \
                    stmt_now \
               FROM idemctl_test_ledger",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| Change {
            op: r.get(0),
            key: (r.get(1), r.get(2)),
            old_state: r.get(3),
            old_expires: r.get(4),
            old_held: r.get(5),
            old_digest: r.get(6),
            old_ident: r.get(7),
            new_state: r.get(8),
            new_status: r.get(9),
            new_body: r.get(10),
            new_ident: r.get(11),
            app: r.get(12),
            backend: r.get(13),
            query: r.get(14),
            stmt_now: r.get(15),
        })
        .collect()
}

/// How many changes the ledger holds.
pub(crate) async fn ledger_len(client: &Client) -> usize {
    let n: i64 = client
        .query_one("SELECT count(*) FROM idemctl_test_ledger", &[])
        .await
        .unwrap()
        .get(0);
    usize::try_from(n).unwrap_or(0)
}

/// Keys that appear more than once among these changes.
pub(crate) fn repeated(changes: &[&Change]) -> Vec<Key> {
    let mut seen = HashSet::new();
    changes
        .iter()
        .filter(|c| !seen.insert(c.key.clone()))
        .map(|c| c.key.clone())
        .collect()
}

/// One row as a snapshot saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Seen {
    pub state: String,
    /// expires_at, unix seconds.
    pub expires: f64,
    /// coalesce(locked_at, created_at), unix seconds: what reclaim's cutoff is measured from.
    pub held: f64,
    /// The row version: ctid and xmin. Any write to a row, even one that rewrites the same values,
    /// gives it a new version; a rolled-back write leaves the old one.
    pub version: String,
    /// md5 of the whole row (as `fixtures::snapshot`), in full snapshots only.
    pub digest: Option<String>,
    pub status: Option<i32>,
    pub has_body: bool,
}

impl Seen {
    /// Evictable at `now`: completed and expired.
    pub(crate) fn evictable_at(&self, now: f64) -> bool {
        self.state == "completed" && self.expires < now
    }

    /// Stuck at `now` for a reclaim cutoff of `older_than` seconds.
    pub(crate) fn stuck_at(&self, now: f64, older_than: f64) -> bool {
        self.state == "in_progress" && self.held < now - older_than
    }

    /// From the columns `offset..offset + 7` of a row in `SEEN_COLUMNS` order; None when NULL.
    fn from_row(r: &tokio_postgres::Row, offset: usize) -> Option<Seen> {
        Some(Seen {
            state: r.get::<_, Option<String>>(offset)?,
            expires: r.get(offset + 1),
            held: r.get(offset + 2),
            version: r.get(offset + 3),
            digest: r.get(offset + 4),
            status: r.get(offset + 5),
            has_body: r.get(offset + 6),
        })
    }
}

/// The columns of a snapshot table, in `Seen::from_row` order.
const SEEN_COLUMNS: [&str; 7] = [
    "state", "expires", "held", "version", "digest", "status", "has_body",
];

fn seen_columns(alias: &str) -> String {
    SEEN_COLUMNS
        .iter()
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A copy of the key table taken inside the database (so a trial does not ship the table to the
/// test): per row its state, expiry, hold time, version and (full snapshots) content digest.
/// Dropped with the test database.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub table: String,
    /// The database clock just before the copy was taken (unix seconds).
    pub now: f64,
    pub rows: usize,
}

/// The snapshot columns of every row of the key table.
fn select_seen(full: bool) -> String {
    let digest = if full { "md5(t::text)" } else { "NULL::text" };
    format!(
        "SELECT api_key_id, key, state, extract(epoch FROM expires_at)::float8 AS expires, \
                extract(epoch FROM coalesce(locked_at, created_at))::float8 AS held, \
                ctid::text || '/' || xmin::text AS version, {digest} AS digest, \
                response_status AS status, response_body IS NOT NULL AS has_body \
           FROM idempotency_keys t"
    )
}

/// Take a snapshot of the key table: `full` also digests every row's content (md5 of the whole
/// row, several times the cost of the rest).
pub(crate) async fn snapshot(client: &Client, full: bool) -> Snapshot {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let table = format!(
        "idemctl_test_snap_{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let now: f64 = client
        .query_one("SELECT extract(epoch FROM now())::float8", &[])
        .await
        .unwrap()
        .get(0);
    let rows = client
        .execute(
            &format!("CREATE TABLE {table} AS {}", select_seen(full)),
            &[],
        )
        .await
        .unwrap();
    Snapshot {
        table,
        now,
        rows: usize::try_from(rows).unwrap_or(0),
    }
}

impl Snapshot {
    /// Rows matching a condition on the snapshot's columns, where `$1` is the snapshot's clock.
    pub(crate) async fn count(&self, client: &Client, condition: &str) -> usize {
        self.count_at(client, condition, self.now).await
    }

    /// `count` with `$1` = `at`.
    pub(crate) async fn count_at(&self, client: &Client, condition: &str, at: f64) -> usize {
        let n: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {} WHERE {condition}", self.table),
                &[&at],
            )
            .await
            .unwrap()
            .get(0);
        usize::try_from(n).unwrap_or(0)
    }

    /// Keys matching a condition, as in `count`.
    pub(crate) async fn keys(&self, client: &Client, condition: &str) -> HashSet<Key> {
        let rows = client
            .query(
                &format!(
                    "SELECT api_key_id, key FROM {} WHERE {condition}",
                    self.table
                ),
                &[&self.now],
            )
            .await
            .unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    }

    /// Drop the copy.
    pub(crate) async fn drop_table(self, client: &Client) {
        client
            .batch_execute(&format!("DROP TABLE {}", self.table))
            .await
            .unwrap();
    }
}

/// Condition for `Snapshot::count` / `keys`: completed and expired at the snapshot's clock.
pub(crate) const EVICTABLE: &str = "state = 'completed' AND expires < $1::float8";
/// Condition: in_progress and held longer than reclaim's default cutoff (5 min).
pub(crate) const STUCK: &str = "state = 'in_progress' AND held < $1::float8 - 300";

/// How two snapshots differ: rows that changed (a new version, or other content where both
/// snapshots digested it), rows gone, rows new.
#[derive(Debug, Default)]
pub(crate) struct Diff {
    pub changed: Vec<(Key, Seen, Seen)>,
    pub gone: Vec<(Key, Seen)>,
    pub appeared: Vec<(Key, Seen)>,
}

pub(crate) async fn diff(client: &Client, before: &Snapshot, after: &Snapshot) -> Diff {
    diff_from(client, &before.table, &after.table).await
}

async fn diff_from(client: &Client, before: &str, after: &str) -> Diff {
    let rows = client
        .query(
            &format!(
                "SELECT coalesce(a.api_key_id, b.api_key_id), coalesce(a.key, b.key), {}, {} \
                   FROM {before} b FULL JOIN {after} a \
                        ON a.api_key_id = b.api_key_id AND a.key = b.key \
                  WHERE a.version IS DISTINCT FROM b.version \
                     OR (a.digest IS NOT NULL AND b.digest IS NOT NULL AND a.digest <> b.digest)",
                seen_columns("b"),
                seen_columns("a"),
            ),
            &[],
        )
        .await
        .unwrap();
    let mut d = Diff::default();
    for r in &rows {
        let key: Key = (r.get(0), r.get(1));
        match (Seen::from_row(r, 2), Seen::from_row(r, 9)) {
            (Some(b), Some(a)) => d.changed.push((key, b, a)),
            (Some(b), None) => d.gone.push((key, b)),
            (None, Some(a)) => d.appeared.push((key, a)),
            (None, None) => unreachable!("a full join row has a side"),
        }
    }
    d
}

impl Snapshot {
    /// Compare the snapshot with the key table as it is now, then bring the copy up to date (the
    /// table must not change meanwhile): one pass over the table instead of a new copy. The
    /// clock moves to now.
    pub(crate) async fn advance(&mut self, client: &Client) -> Diff {
        let now: f64 = client
            .query_one("SELECT extract(epoch FROM now())::float8", &[])
            .await
            .unwrap()
            .get(0);
        let d = diff_from(client, &self.table, &format!("({})", select_seen(false))).await;
        let keys = d
            .gone
            .iter()
            .map(|(k, _)| k)
            .chain(d.changed.iter().map(|(k, _, _)| k))
            .chain(d.appeared.iter().map(|(k, _)| k));
        let (tenants, keys): (Vec<&str>, Vec<&str>) =
            keys.map(|(t, k)| (t.as_str(), k.as_str())).unzip();
        if !keys.is_empty() {
            let table = &self.table;
            client
                .execute(
                    &format!(
                        "DELETE FROM {table} s USING unnest($1::text[], $2::text[]) AS g(t, k) \
                          WHERE s.api_key_id = g.t AND s.key = g.k"
                    ),
                    &[&tenants, &keys],
                )
                .await
                .unwrap();
            client
                .execute(
                    &format!(
                        "INSERT INTO {table} {} \
                          WHERE (t.api_key_id, t.key) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
                        select_seen(false)
                    ),
                    &[&tenants, &keys],
                )
                .await
                .unwrap();
        }
        self.now = now;
        self.rows = self.rows + d.appeared.len() - d.gone.len();
        d
    }
}

/// Remember every row of a snapshot not seen before (first sighting wins), in
/// `idemctl_test_seen`, so the end of a test can compare against every row that ever existed.
pub(crate) async fn remember(client: &Client, s: &Snapshot) {
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS idemctl_test_seen AS SELECT * FROM {t} WHERE false; \
             CREATE UNIQUE INDEX IF NOT EXISTS idemctl_test_seen_key ON idemctl_test_seen (api_key_id, key); \
             INSERT INTO idemctl_test_seen SELECT * FROM {t} ON CONFLICT DO NOTHING",
            t = s.table
        ))
        .await
        .unwrap();
}

/// The first sighting of every row ever remembered, as a snapshot (clock: `now`).
pub(crate) fn history(now: f64) -> Snapshot {
    Snapshot {
        table: "idemctl_test_seen".to_owned(),
        now,
        rows: 0,
    }
}

/// idemctl sessions connected to the current database.
pub(crate) async fn idemctl_sessions(client: &Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
              WHERE datname = current_database() AND application_name = 'idemctl'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Advisory locks held in the current database (evict's and reclaim's maintenance locks).
pub(crate) async fn advisory_locks(client: &Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Wait until no idemctl session is left in this database and no maintenance lock is held; returns
/// how long that took. Panics after `limit`.
pub(crate) async fn wait_released(client: &Client, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if idemctl_sessions(client).await == 0 && advisory_locks(client).await == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "an idemctl session or maintenance lock outlived its process by {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// SIGKILL the child (race-free: the unreaped child keeps its pid) and collect it.
pub(crate) async fn kill(mut child: Spawned) -> Run {
    // Ok also when the child has already exited; its exit code then tells.
    let _ = child.child_mut().kill();
    child.wait_async().await
}

/// A long list shortened for a failure message: its length and first few items.
pub(crate) fn brief<T: std::fmt::Debug>(items: &[T]) -> String {
    let shown = &items[..items.len().min(5)];
    format!("{} of them, the first: {shown:#?}", items.len())
}

/// Milliseconds of a duration, for figures.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// p50, p99 and max of some figures (0 when empty).
pub(crate) fn percentiles(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), v[v.len() - 1])
}

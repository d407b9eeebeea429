//! The PostgreSQL side of the harness: one server per test process (external via
//! `IDEMCTL_TEST_DATABASE_URL`, else a throwaway local cluster), and `TestDb`, a fresh database per test.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_postgres::{Client, NoTls};

use super::cluster::LocalCluster;
use super::cmd::Cmd;
use super::conninfo::ConnInfo;

/// Every test database's name starts with this.
pub(crate) const DB_PREFIX: &str = "idemctl_t_";

/// Databases left on an external server by crashed runs are dropped when older than this.
const LEFTOVER_AGE: Duration = Duration::from_secs(3600);

const COMMENT_PREFIX: &str = "idemctl test database, created at unix time ";

/// The server every `TestDb` of this process lives on.
#[derive(Debug)]
pub(crate) struct Server {
    /// Conninfo of the admin (superuser) connection.
    pub admin: ConnInfo,
    /// The local cluster, when this process started one.
    pub local: Option<LocalCluster>,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

/// The process-wide server, started (or checked) on first use. Panics, in every test that asks, with
/// instructions when no server can be had: the tests never skip silently.
pub(crate) fn server() -> &'static Server {
    match SERVER.get_or_init(init_server) {
        Ok(server) => server,
        Err(message) => panic!("test database server unavailable: {message}"),
    }
}

fn init_server() -> Result<Server, String> {
    if let Some(url) = std::env::var("IDEMCTL_TEST_DATABASE_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        let admin = ConnInfo::parse(&url).map_err(|e| format!("IDEMCTL_TEST_DATABASE_URL: {e}"))?;
        let conninfo = admin.to_key_value();
        on_own_runtime(move || async move { sweep_leftovers(&conninfo).await })?;
        return Ok(Server { admin, local: None });
    }
    let cluster = LocalCluster::start()?;
    let mut admin = ConnInfo::new();
    for (key, value) in cluster.admin_params() {
        admin.set(key, value);
    }
    Ok(Server {
        admin,
        local: Some(cluster),
    })
}

/// Drop `idemctl_t_*` databases that an earlier, crashed run left behind on an external server. Only
/// ones this harness created (recognised by their comment) and older than `LEFTOVER_AGE`, so a
/// concurrent run's databases are left alone.
async fn sweep_leftovers(admin: &str) -> Result<(), String> {
    let (client, conn) = tokio_postgres::connect(admin, NoTls).await.map_err(|e| {
        format!(
            "cannot connect to IDEMCTL_TEST_DATABASE_URL: {}",
            pg_error_text(&e)
        )
    })?;
    tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database \
             WHERE starts_with(datname, $1::text)",
            &[&DB_PREFIX],
        )
        .await
        .map_err(|e| format!("cannot list databases: {}", pg_error_text(&e)))?;
    let now = unix_now();
    for row in rows {
        let name: String = row.get(0);
        let comment: Option<String> = row.get(1);
        let created = comment
            .as_deref()
            .and_then(|c| c.strip_prefix(COMMENT_PREFIX))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|secs| secs.parse::<u64>().ok());
        if let Some(created) = created
            && now.saturating_sub(created) > LEFTOVER_AGE.as_secs()
        {
            // Best effort: another run may be sweeping the same database.
            let _ = client
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    ident(&name)
                ))
                .await;
        }
    }
    Ok(())
}

/// A fresh, empty database (UTF8, C collation) for one test, dropped (best effort, `WITH (FORCE)`) when
/// the value is dropped, also when the test panics.
///
/// Connections from `client`/`admin` run their connection task on the caller's tokio runtime.
#[derive(Debug)]
pub(crate) struct TestDb {
    name: String,
    conninfo: ConnInfo,
}

impl TestDb {
    /// Create `idemctl_t_<16 hex digits>` from template0. Panics with the server's message on failure.
    pub(crate) async fn new() -> TestDb {
        let server = server();
        let name = format!("{DB_PREFIX}{}", random_hex());
        let admin = connect(&server.admin.to_key_value()).await;
        // Two statements: CREATE DATABASE cannot share an (implicit) transaction.
        let create = format!(
            "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'",
            ident(&name)
        );
        let comment = format!(
            "COMMENT ON DATABASE {} IS '{COMMENT_PREFIX}{} by pid {}'",
            ident(&name),
            unix_now(),
            std::process::id(),
        );
        for sql in [create, comment] {
            if let Err(e) = admin.batch_execute(&sql).await {
                panic!("cannot create test database {name}: {}", pg_error_text(&e));
            }
        }
        TestDb {
            conninfo: server.admin.with("dbname", name.as_str()),
            name,
        }
    }

    /// The database name (`idemctl_t_...`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A key=value conninfo for this database as the admin (superuser) role, e.g.
    /// `host=/tmp/idemctl-pg.XXXXXXXX port=5432 user=postgres dbname=idemctl_t_0123456789abcdef`.
    pub(crate) fn url(&self) -> String {
        self.conninfo.to_key_value()
    }

    /// The same connection as a `postgresql://?host=...&dbname=...` URI.
    pub(crate) fn uri(&self) -> String {
        self.conninfo.to_uri()
    }

    /// `url()` with settings replaced or added, e.g. `&[("user", "reader"), ("password", "x")]`.
    /// (On the local cluster every role logs in without a password: trust auth.)
    pub(crate) fn url_with(&self, overrides: &[(&str, &str)]) -> String {
        let mut info = self.conninfo.clone();
        for (key, value) in overrides {
            info.set(key, *value);
        }
        info.to_key_value()
    }

    /// A key=value conninfo for the admin database (`postgres`, or the one in IDEMCTL_TEST_DATABASE_URL).
    pub(crate) fn admin_url(&self) -> String {
        server().admin.to_key_value()
    }

    /// A new connection to this database (its connection task is spawned on the current runtime).
    pub(crate) async fn client(&self) -> Client {
        connect(&self.url()).await
    }

    /// A new connection to the admin database.
    pub(crate) async fn admin(&self) -> Client {
        connect(&self.admin_url()).await
    }

    /// The unix-socket directory of the server: the local cluster's directory, or the host of
    /// IDEMCTL_TEST_DATABASE_URL when that is a path. `None` for a TCP server.
    pub(crate) fn socket_dir(&self) -> Option<PathBuf> {
        let server = server();
        if let Some(local) = &server.local {
            return Some(local.dir.clone());
        }
        server
            .admin
            .get("host")
            .filter(|h| h.starts_with('/') && !h.contains(','))
            .map(PathBuf::from)
    }

    /// The local cluster's server log (`None` with IDEMCTL_TEST_DATABASE_URL).
    pub(crate) fn server_log(&self) -> Option<PathBuf> {
        server().local.as_ref().map(LocalCluster::log_path)
    }

    /// Run SQL (one or more statements, no parameters) in this database on a new connection; panics
    /// with the server's full error (severity, SQLSTATE, detail, hint, position) on failure.
    pub(crate) async fn exec(&self, sql: &str) {
        let client = self.client().await;
        if let Err(e) = client.batch_execute(sql).await {
            panic!(
                "SQL failed in {}: {}\n--- SQL ---\n{sql}",
                self.name,
                pg_error_text(&e)
            );
        }
    }

    /// The `idemctl` binary with `IDEMCTL_DATABASE_URL` set to `url()` (and PG*, DATABASE_URL and
    /// other IDEMCTL_* variables of the test process removed; see `Cmd::new`).
    pub(crate) fn idemctl(&self) -> Cmd {
        Cmd::new().env("IDEMCTL_DATABASE_URL", self.url())
    }

    /// Any program with the same environment as `idemctl()` (e.g. `psql`, `sh`).
    pub(crate) fn command(&self, program: &str) -> Cmd {
        Cmd::of(program).env("IDEMCTL_DATABASE_URL", self.url())
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = server().admin.to_key_value();
        let name = self.name.clone();
        // A separate thread and runtime: Drop may run inside the test's runtime (no block_on there)
        // or outside any runtime. Errors are ignored; the cluster (or the sweep) removes leftovers.
        let _ = on_own_runtime(move || async move {
            let (client, conn) = tokio_postgres::connect(&admin, NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            // DROP ... WITH (FORCE) re-checks for leftover sessions only every 100 ms; terminating
            // them first and polling briefly makes the common case (the test's own connections are
            // still open while this runs) several times faster.
            let _ = client
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                    &[&name],
                )
                .await;
            for _ in 0..100 {
                let row = client
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                        &[&name],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                if row.get::<_, i64>(0) == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", ident(&name));
            client.batch_execute(&sql).await.map_err(|e| e.to_string())
        });
    }
}

/// Connect with NoTls and spawn the connection task on the current runtime; panics with the error.
pub(crate) async fn connect(conninfo: &str) -> Client {
    match tokio_postgres::connect(conninfo, NoTls).await {
        Ok((client, conn)) => {
            tokio::spawn(async move {
                // Errors (e.g. the backend terminated by DROP DATABASE ... WITH (FORCE)) surface on
                // the client's next call.
                let _ = conn.await;
            });
            client
        }
        Err(e) => panic!("cannot connect to {conninfo}: {}", pg_error_text(&e)),
    }
}

/// Everything a tokio-postgres error knows: for server errors severity, SQLSTATE, message, detail,
/// hint, where and position; otherwise the error and its sources.
pub(crate) fn pg_error_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut out = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
        if let Some(detail) = db.detail() {
            out.push_str(&format!("\nDETAIL: {detail}"));
        }
        if let Some(hint) = db.hint() {
            out.push_str(&format!("\nHINT: {hint}"));
        }
        if let Some(place) = db.where_() {
            out.push_str(&format!("\nWHERE: {place}"));
        }
        if let Some(table) = db.table() {
            out.push_str(&format!("\nTABLE: {}.{table}", db.schema().unwrap_or("?")));
        }
        if let Some(constraint) = db.constraint() {
            out.push_str(&format!("\nCONSTRAINT: {constraint}"));
        }
        if let Some(position) = db.position() {
            out.push_str(&format!("\nPOSITION: {position:?}"));
        }
        return out;
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

/// A double-quoted SQL identifier.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Run an async job to completion on a fresh current-thread runtime in a new thread, and wait.
pub(crate) fn on_own_runtime<F, Fut>(job: F) -> Result<(), String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot build a tokio runtime: {e}"))?;
        runtime.block_on(async move {
            tokio::time::timeout(Duration::from_secs(30), job())
                .await
                .map_err(|_| "timed out after 30 s".to_owned())?
        })
    })
    .join()
    .map_err(|_| "the helper thread panicked".to_owned())?
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// 64 random bits as hex: std's randomly keyed hasher over a process-wide counter, the pid and the clock.
pub(crate) fn random_hex() -> String {
    use std::hash::{BuildHasher as _, Hasher as _, RandomState};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:016x}", hasher.finish())
}

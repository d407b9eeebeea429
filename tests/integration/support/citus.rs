//! A Citus cluster for the Citus tests: a coordinator and two workers, each a throwaway PostgreSQL
//! server with `shared_preload_libraries = 'citus'`, listening on 127.0.0.1 (the nodes reach each
//! other over TCP, trust authentication on loopback) and on a Unix socket in its private directory.
//!
//! One cluster per test process, started on first use and shared by every Citus test (starting one
//! takes seconds; CI's budget is the whole suite). `CitusDb` gives each test a fresh database with
//! the extension created on every node and both workers added, so tests never see each other's
//! tables. A test that must see no other test's sessions on the nodes (evict's pace reads each
//! server's whole `pg_stat_activity`) starts a cluster of its own with `CitusDb::private`. Each node
//! lives in its own `/tmp/idemctl-pg.XXXXXXXX` (or under `IDEMCTL_TEST_TMPDIR`)
//! with its own watchdog, exactly like the shared cluster (`cluster.rs`), so a crashed run leaves
//! nothing and `.ci/run`'s leak check covers them.
//!
//! Citus must be installed into the server the tests run (`scripts/citus`, as root; `scripts/test` does
//! it): without it every Citus test panics with that instruction. The one opt-out is explicit:
//! `IDEMCTL_TEST_CITUS=skip` makes each Citus test print that it did not run and return (for a
//! developer machine without the Citus source); nothing else skips them.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command};
use std::sync::OnceLock;

use super::cluster::{
    DIR_PREFIX, as_owner, cluster_owner, find_bindir, initdb, run_logged, spawn_watchdog,
};
use super::cmd::Cmd;
use super::conninfo::ConnInfo;
use super::pg::{connect, ident, on_own_runtime, pg_error_text, random_hex};
use super::tcp::{append, private_dir, start_on_free_port};

/// Settings of every node. Citus commits multi-node writes with two-phase commit (prepared
/// transactions), and opens connections between the nodes.
const SETTINGS: &[(&str, &str)] = &[
    ("listen_addresses", "'127.0.0.1'"),
    ("shared_preload_libraries", "'citus'"),
    ("max_prepared_transactions", "100"),
    ("max_connections", "200"),
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("log_lock_waits", "on"),
    ("deadlock_timeout", "'100ms'"),
];

/// One node: its directory (data/, server.log, socket) and TCP port.
#[derive(Debug)]
pub(crate) struct Node {
    pub dir: PathBuf,
    pub port: u16,
    _watchdog: ChildStdin,
}

impl Node {
    /// A superuser conninfo over the node's Unix socket.
    pub(crate) fn socket_conninfo(&self, dbname: &str) -> String {
        let mut info = ConnInfo::new();
        info.set("host", self.dir.display().to_string());
        info.set("port", self.port.to_string());
        info.set("user", "postgres");
        info.set("dbname", dbname);
        info.to_key_value()
    }

    /// The server log.
    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

/// The coordinator (`nodes[0]`) and the two workers.
#[derive(Debug)]
pub(crate) struct CitusCluster {
    pub nodes: Vec<Node>,
}

static CLUSTER: OnceLock<Result<CitusCluster, String>> = OnceLock::new();

/// Held while a test database is set up on the cluster or its key table distributed.
static SETUP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether the Citus tests were explicitly turned off (`IDEMCTL_TEST_CITUS=skip`); says so on stderr.
pub(crate) fn skipped(test: &str) -> bool {
    let skip = std::env::var("IDEMCTL_TEST_CITUS").is_ok_and(|v| v == "skip");
    if skip {
        eprintln!("{test}: NOT RUN (IDEMCTL_TEST_CITUS=skip); unset it to run the Citus tests");
    }
    skip
}

/// The process-wide Citus cluster, started on first use. Panics with the reason and the fix.
pub(crate) fn cluster() -> &'static CitusCluster {
    match CLUSTER.get_or_init(CitusCluster::start) {
        Ok(cluster) => cluster,
        Err(message) => panic!("cannot start the Citus test cluster: {message}"),
    }
}

/// Where Citus must be installed for the server binaries in `bindir`: `citus.so` in the lib
/// directory next to bin/ (Debian: /usr/lib/postgresql/15/lib).
fn require_citus(bindir: &Path) -> Result<(), String> {
    let lib = bindir
        .parent()
        .map(|p| p.join("lib").join("citus.so"))
        .unwrap_or_default();
    if lib.is_file() {
        return Ok(());
    }
    Err(format!(
        "Citus is not installed for the PostgreSQL server in {} ({} is missing). Build and install \
         it with `scripts/citus` (as root; scripts/test does; it needs the Citus source in ../shared/citus or \
         IDEMCTL_CITUS_SRC, and postgresql-server-dev-15), or set IDEMCTL_TEST_CITUS=skip to leave \
         the Citus tests out explicitly. They never pass without a cluster.",
        bindir.display(),
        lib.display()
    ))
}

impl CitusCluster {
    fn start() -> Result<CitusCluster, String> {
        let bindir = find_bindir()?;
        require_citus(&bindir)?;
        let owner = cluster_owner()?;
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(start_node(&bindir, owner)?);
        }
        Ok(CitusCluster { nodes })
    }

    pub(crate) fn coordinator(&self) -> &Node {
        &self.nodes[0]
    }

    pub(crate) fn workers(&self) -> &[Node] {
        &self.nodes[1..]
    }
}

fn start_node(bindir: &Path, owner: Option<(u32, u32)>) -> Result<Node, String> {
    let dir = private_dir(owner)?;
    // First, so that even a failure below leaves nothing behind.
    let watchdog = spawn_watchdog(&dir)?;
    let data = dir.join("data");
    run_logged(as_owner(&mut initdb(bindir, &data, &dir), owner), "initdb")?;
    let mut conf = format!(
        "\n# idemctl Citus tests\nunix_socket_directories = '{}'\n",
        dir.display()
    );
    for (key, value) in SETTINGS {
        conf.push_str(&format!("{key} = {value}\n"));
    }
    append(&data.join("postgresql.conf"), &conf)?;
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhost all all 127.0.0.1/32 trust\n",
    )
    .map_err(|e| format!("cannot write pg_hba.conf: {e}"))?;
    let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
    let port = start_on_free_port(bindir, &dir, owner)?;
    Ok(Node {
        dir,
        port,
        _watchdog: watchdog,
    })
}

/// How the key table of a test is laid out on the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `create_distributed_table('idempotency_keys', 'api_key_id')`.
    ByTenant,
    /// `create_distributed_table('idempotency_keys', 'key')`: distributed by another column of
    /// the primary key than the tenant.
    ByKey,
    /// A reference table: one shard, a copy on every node.
    Reference,
    /// A plain table on the coordinator (Citus installed, the table not distributed).
    Local,
    /// A Citus local table: `citus_add_local_table_to_metadata('idempotency_keys')` (on the
    /// coordinator, known to Citus; its statements are planned by Citus).
    CitusLocal,
    /// Schema-based sharding: the table moved into schema `keys`, then
    /// `citus_schema_distribute('keys')` (a single-shard table on one worker). The database's
    /// search_path starts with `keys`, so new sessions find the table by its bare name.
    Schema,
}

/// A fresh database on every node of the cluster, the extension created and the workers added; the
/// key table (sql/schema.sql) made with `layout`. Dropped on every node when the value is dropped.
#[derive(Debug)]
pub(crate) struct CitusDb {
    pub name: String,
    cluster: Hold,
}

/// The cluster a [`CitusDb`] lives on: the process-wide one, or one of its own (its nodes stop when
/// it is dropped, after the database).
#[derive(Debug)]
enum Hold {
    Shared(&'static CitusCluster),
    Own(Box<CitusCluster>),
}

impl std::ops::Deref for Hold {
    type Target = CitusCluster;
    fn deref(&self) -> &CitusCluster {
        match self {
            Hold::Shared(c) => c,
            Hold::Own(c) => c,
        }
    }
}

impl CitusDb {
    /// A database with Citus set up and the key table created with `layout` (`None`: no table).
    pub(crate) async fn new(layout: Option<Layout>) -> CitusDb {
        CitusDb::on(Hold::Shared(cluster()), layout).await
    }

    /// Like [`CitusDb::new`], on a cluster of its own (started for it, stopped when the value is
    /// dropped), for a test that must see no other test's sessions on the nodes.
    pub(crate) async fn private(layout: Option<Layout>) -> CitusDb {
        let cluster = tokio::task::spawn_blocking(CitusCluster::start)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("cannot start a private Citus cluster: {e}"));
        CitusDb::on(Hold::Own(Box::new(cluster)), layout).await
    }

    async fn on(cluster: Hold, layout: Option<Layout>) -> CitusDb {
        // Adding the nodes copies the cluster-wide roles to the workers; two databases doing it at
        // once collide there ("tuple concurrently updated"), so the setup runs one at a time.
        let _setup = SETUP.lock().await;
        let name = format!("idemctl_t_{}", random_hex());
        let db = CitusDb { name, cluster };
        for node in &db.cluster.nodes {
            let admin = connect(&node.socket_conninfo("postgres")).await;
            let create = format!(
                "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'",
                ident(&db.name)
            );
            if let Err(e) = admin.batch_execute(&create).await {
                panic!(
                    "cannot create {} on {}: {}",
                    db.name,
                    node.dir.display(),
                    pg_error_text(&e)
                );
            }
            db.exec_on(node, "CREATE EXTENSION citus").await;
            // The first CREATE EXTENSION on a node turns TLS on and asks for a configuration reload,
            // which the postmaster applies a moment later; the coordinator's connections to the
            // workers require TLS, so wait until a new session sees it.
            db.wait_for_ssl(node).await;
        }
        let c = db.cluster.coordinator();
        let mut setup = format!(
            "SELECT citus_set_coordinator_host('127.0.0.1', {});",
            c.port
        );
        for w in db.cluster.workers() {
            setup.push_str(&format!("SELECT citus_add_node('127.0.0.1', {});", w.port));
        }
        db.exec(&setup).await;
        if let Some(layout) = layout {
            db.exec(include_str!("../../../sql/schema.sql")).await;
            db.distribute_now(layout).await;
        }
        db
    }

    /// Hand the key table (created and maybe loaded on the coordinator) to Citus as `layout`;
    /// rows already there move into the shards.
    pub(crate) async fn distribute(&self, layout: Layout) {
        let _setup = SETUP.lock().await;
        self.distribute_now(layout).await;
    }

    async fn distribute_now(&self, layout: Layout) {
        let (sql, table) = match layout {
            Layout::ByTenant => (
                "SELECT create_distributed_table('idempotency_keys', 'api_key_id')",
                "idempotency_keys",
            ),
            Layout::ByKey => (
                "SELECT create_distributed_table('idempotency_keys', 'key')",
                "idempotency_keys",
            ),
            Layout::Reference => (
                "SELECT create_reference_table('idempotency_keys')",
                "idempotency_keys",
            ),
            Layout::Schema => (
                "CREATE SCHEMA keys; ALTER TABLE idempotency_keys SET SCHEMA keys; \
                 SELECT citus_schema_distribute('keys')",
                "keys.idempotency_keys",
            ),
            Layout::CitusLocal => (
                "SELECT citus_add_local_table_to_metadata('idempotency_keys')",
                "idempotency_keys",
            ),
            Layout::Local => return,
        };
        self.exec(sql).await;
        if layout == Layout::Schema {
            self.exec(&format!(
                "ALTER DATABASE {} SET search_path = keys, public",
                ident(&self.name)
            ))
            .await;
        }
        // As Citus's notice advises: the rows are in the shards now, the coordinator's copy goes
        // (a Citus local table keeps its rows where they are: its shard is the table itself).
        if layout == Layout::CitusLocal {
            self.exec(&format!("ANALYZE {table}")).await;
            return;
        }
        self.exec(&format!(
            "SELECT truncate_local_data_after_distributing_table('{table}')"
        ))
        .await;
        self.exec(&format!("ANALYZE {table}")).await;
    }

    /// The coordinator's TCP conninfo for this database (what idemctl is given), with `settings`
    /// added or replacing.
    pub(crate) fn url_with(&self, settings: &[(&str, &str)]) -> String {
        let mut info = ConnInfo::new();
        info.set("host", "127.0.0.1");
        info.set("port", self.cluster.coordinator().port.to_string());
        info.set("user", "postgres");
        info.set("dbname", self.name.as_str());
        // No sslmode: the default (prefer) meets Citus's self-signed version-1 certificate.
        for (key, value) in settings {
            info.set(key, *value);
        }
        info.to_key_value()
    }

    pub(crate) fn url(&self) -> String {
        self.url_with(&[])
    }

    /// A connection to the coordinator (Unix socket).
    pub(crate) async fn client(&self) -> tokio_postgres::Client {
        connect(&self.cluster.coordinator().socket_conninfo(&self.name)).await
    }

    /// A connection to a node (0 = coordinator) over its Unix socket.
    pub(crate) async fn node_client(&self, node: usize) -> tokio_postgres::Client {
        connect(&self.cluster.nodes[node].socket_conninfo(&self.name)).await
    }

    /// Run SQL on the coordinator while no other test database is being set up (for statements
    /// Citus passes to every node as cluster-wide objects, such as roles).
    pub(crate) async fn exec_alone(&self, sql: &str) {
        let _setup = SETUP.lock().await;
        self.exec(sql).await;
    }

    /// Run SQL on the coordinator; panics with the server's error.
    pub(crate) async fn exec(&self, sql: &str) {
        self.exec_on(self.cluster.coordinator(), sql).await;
    }

    async fn wait_for_ssl(&self, node: &Node) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let client = connect(&node.socket_conninfo(&self.name)).await;
            let row = client.query_one("SHOW ssl", &[]).await;
            if matches!(row.as_ref().map(|r| r.get::<_, String>(0)), Ok(ref v) if v == "on") {
                return;
            }
            if std::time::Instant::now() > deadline {
                panic!(
                    "{}: ssl still off 30 s after CREATE EXTENSION citus",
                    node.dir.display()
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    async fn exec_on(&self, node: &Node, sql: &str) {
        let client = connect(&node.socket_conninfo(&self.name)).await;
        if let Err(e) = client.batch_execute(sql).await {
            let mut logs = String::new();
            for n in &self.cluster.nodes {
                let log = std::fs::read_to_string(n.dir.join("server.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                logs.push_str(&format!(
                    "\n--- {}/server.log (last lines) ---\n",
                    n.dir.display()
                ));
                for line in tail.iter().rev() {
                    logs.push_str(line);
                    logs.push('\n');
                }
            }
            panic!(
                "SQL failed in {} on {}: {}\n--- SQL ---\n{sql}{logs}",
                self.name,
                node.dir.display(),
                pg_error_text(&e)
            );
        }
    }

    /// `idemctl` pointed at the coordinator.
    pub(crate) fn idemctl(&self) -> Cmd {
        Cmd::new().env("IDEMCTL_DATABASE_URL", self.url())
    }

    /// Stop a node (0 = coordinator) of this database's cluster (`pg_ctl stop -m fast`): only on a
    /// cluster of its own ([`CitusDb::private`]), which no other test uses.
    pub(crate) async fn stop_node(&self, node: usize) {
        assert!(
            matches!(self.cluster, Hold::Own(_)),
            "stop a node only of a private cluster"
        );
        let dir = self.cluster.nodes[node].dir.clone();
        let out = tokio::task::spawn_blocking(move || {
            use std::os::unix::process::CommandExt as _;
            let bindir = find_bindir().expect("PostgreSQL binaries");
            let mut cmd = Command::new(bindir.join("pg_ctl"));
            cmd.arg("-D")
                .arg(dir.join("data"))
                .args(["-w", "-t", "60", "stop", "-m", "fast"])
                .stdin(std::process::Stdio::null());
            if let Ok(Some((uid, gid))) = cluster_owner() {
                cmd.uid(uid).gid(gid);
            }
            cmd.output()
        })
        .await
        .unwrap()
        .expect("pg_ctl");
        assert!(
            out.status.success(),
            "pg_ctl stop: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The cluster this database lives on.
    pub(crate) fn cluster(&self) -> &CitusCluster {
        &self.cluster
    }
}

impl Drop for CitusDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let admins: Vec<String> = self
            .cluster
            .nodes
            .iter()
            .map(|n| n.socket_conninfo("postgres"))
            .collect();
        // Best effort, like TestDb: the cluster goes with the test process anyway.
        let _ = on_own_runtime(move || async move {
            for admin in admins {
                let Ok((client, conn)) =
                    tokio_postgres::connect(&admin, tokio_postgres::NoTls).await
                else {
                    continue;
                };
                tokio::spawn(conn);
                let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", ident(&name));
                let _ = client.batch_execute(&sql).await;
            }
            Ok(())
        });
    }
}

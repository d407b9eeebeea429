//! A real PgBouncer (`/usr/sbin/pgbouncer`, or `IDEMCTL_TEST_PGBOUNCER`) in front of the test
//! cluster, one per test: its own private directory (config, log, unix socket), trust auth,
//! connecting to the cluster over its unix socket, in transaction or session pool mode with a small
//! pool, so that idemctl and the test's "API" clients share the same few server connections.
//!
//! It runs as the cluster's OS user (PgBouncer refuses root), under a shell that stops it when its
//! stdin closes: when the value is dropped, or when the test process exits however it exits.
//! A missing pgbouncer makes the test panic with instructions: tests never skip.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{as_owner, cluster_owner};
use super::pg::TestDb;

/// How PgBouncer hands out server connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Transaction,
    Session,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Transaction => "transaction",
            Mode::Session => "session",
        }
    }
}

/// The port PgBouncer's socket is named after (`.s.PGSQL.6432` in its private directory).
const PORT: u16 = 6432;

/// A running PgBouncer for one test database.
pub(crate) struct PgBouncer {
    pub dir: PathBuf,
    pub mode: Mode,
    dbname: String,
    shell: Child,
    stdin: Option<ChildStdin>,
}

impl PgBouncer {
    /// Start PgBouncer in `mode` in front of `db` with `pool_size` server connections per database
    /// and user (small, so that clients share them), wait until it accepts a login. `users` are
    /// the roles that may log in through it (besides postgres).
    pub(crate) async fn start(
        db: &TestDb,
        mode: Mode,
        pool_size: u32,
        users: &[&str],
    ) -> PgBouncer {
        let binary = std::env::var_os("IDEMCTL_TEST_PGBOUNCER")
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("/usr/sbin/pgbouncer"), PathBuf::from);
        assert!(
            binary.exists(),
            "PgBouncer is missing: {} does not exist; install it (Debian/Ubuntu: apt-get install \
             pgbouncer; scripts/test installs it) or set IDEMCTL_TEST_PGBOUNCER to its path",
            binary.display()
        );
        let upstream = db
            .socket_dir()
            .expect("the PgBouncer tests need the server's unix socket (the local test cluster)");
        let owner = cluster_owner().unwrap_or_else(|e| panic!("{e}"));
        let dir = tempfile::Builder::new()
            .prefix("idemctl-pgbouncer.")
            .tempdir()
            .expect("cannot create PgBouncer's directory")
            .keep();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut userlist = String::from("\"postgres\" \"\"\n");
        for user in users {
            userlist.push_str(&format!("\"{user}\" \"\"\n"));
        }
        std::fs::write(dir.join("userlist.txt"), userlist).unwrap();
        let ini = format!(
            "[databases]\n\
             * = host={upstream} port=5432\n\
             [pgbouncer]\n\
             listen_addr =\n\
             listen_port = {PORT}\n\
             unix_socket_dir = {dir}\n\
             auth_type = trust\n\
             auth_file = {dir}/userlist.txt\n\
             pool_mode = {mode}\n\
             default_pool_size = {pool_size}\n\
             min_pool_size = 0\n\
             reserve_pool_size = 0\n\
             max_client_conn = 100\n\
             server_reset_query = DISCARD ALL\n\
             server_check_delay = 0\n\
             logfile = {dir}/pgbouncer.log\n\
             pidfile = {dir}/pgbouncer.pid\n\
             log_connections = 1\n\
             log_disconnections = 1\n\
             verbose = 0\n",
            upstream = upstream.display(),
            dir = dir.display(),
            mode = mode.name(),
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).unwrap();
        if let Some((uid, gid)) = owner {
            for entry in ["", "userlist.txt", "pgbouncer.ini"] {
                std::os::unix::fs::chown(dir.join(entry), Some(uid), Some(gid)).unwrap();
            }
        }
        // The shell waits for its stdin to close, then stops PgBouncer (SIGTERM: at once).
        const SCRIPT: &str = r#"
"$1" -q "$2" &
p=$!
cat >/dev/null
kill -TERM "$p" 2>/dev/null
wait "$p"
"#;
        let mut shell = as_owner(
            Command::new("/bin/sh")
                .arg("-c")
                .arg(SCRIPT)
                .arg("idemctl-pgbouncer")
                .arg(&binary)
                .arg(dir.join("pgbouncer.ini"))
                .current_dir(&dir),
            owner,
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let stdin = shell.stdin.take();
        let bouncer = PgBouncer {
            dir,
            mode,
            dbname: db.name().to_owned(),
            shell,
            stdin,
        };
        bouncer.wait_ready().await;
        bouncer
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let attempt = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls).await;
            if let Ok((client, conn)) = attempt {
                let task = tokio::spawn(conn);
                let ok = client.simple_query("SELECT 1").await.is_ok();
                drop(client);
                let _ = task.await;
                if ok {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "PgBouncer did not accept a login within 20 s; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A conninfo for the test database through PgBouncer, as postgres.
    pub(crate) fn url(&self) -> String {
        self.url_as("postgres")
    }

    /// A conninfo for the test database through PgBouncer, as `user`.
    pub(crate) fn url_as(&self, user: &str) -> String {
        format!(
            "host={} port={PORT} user={user} dbname={}",
            self.dir.display(),
            self.dbname
        )
    }

    /// PgBouncer's log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    /// Log lines about client connections closing, with the reason (`client close request` for a
    /// clean Terminate, `client unexpected eof` for a socket closed without one).
    pub(crate) fn client_closes(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(" C-") && l.contains("closing because"))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.shell.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

//! A private primary and a streaming standby for the replica-lag tests, apart from the shared test
//! cluster (whose WAL and replication settings the other tests must not feel).
//!
//! Both live in one directory `/tmp/idemctl-pg.XXXXXXXX` (the prefix `.ci/run` and `scripts/pgtmp`
//! clean up): `primary/` and `standby/` data directories, and their unix sockets on ports 5432 and
//! 5433 (loopback only: `listen_addresses = ''`). The primary gets a `replicator` role with the
//! REPLICATION attribute and its own pg_hba line; the standby is made with
//! `pg_basebackup -R -X stream` as that role, run as the cluster's OS user (or, where the server
//! build has no pg_basebackup, as the version matrix's have not, by copying the cleanly stopped
//! primary and writing the same standby settings), and reports its replay position every second
//! (`wal_receiver_status_interval = 1s`) so lag shows up quickly.
//!
//! As for the shared cluster (see `cluster.rs`, whose approach this follows): when the tests run as
//! root, everything runs as the `postgres` OS user, and a watchdog process that reads EOF on its stdin
//! when the pair is dropped or this test process exits, however it exits, stops both servers with
//! SIGQUIT and removes the directory.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{DIR_PREFIX, find_bindir};
use super::cluster::{as_owner, cluster_owner, run_logged as run};

const PRIMARY_PORT: u16 = 5432;
const STANDBY_PORT: u16 = 5433;
const REPLICATION_ROLE: &str = "replicator";

/// A running primary + standby pair, torn down when dropped (or when the process exits).
#[derive(Debug)]
pub(crate) struct ReplicaPair {
    /// The directory holding both data directories, the logs and the sockets.
    pub dir: PathBuf,
    /// Never written: the watchdog sees EOF when this is dropped or the process exits.
    _watchdog: ChildStdin,
}

impl ReplicaPair {
    /// initdb the primary, start it, take a base backup as the standby, start that, and wait until
    /// it streams. Errors are complete messages for a panic.
    pub(crate) async fn start() -> Result<ReplicaPair, String> {
        let bindir = find_bindir()?;
        let owner = cluster_owner()?;
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .rand_bytes(8)
            .tempdir_in("/tmp")
            .map_err(|e| format!("cannot create a directory in /tmp: {e}"))?
            .keep();
        let pair = ReplicaPair {
            _watchdog: spawn_watchdog(&dir)?,
            dir,
        };
        std::fs::set_permissions(&pair.dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("chmod {}: {e}", pair.dir.display()))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&pair.dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", pair.dir.display()))?;
        }
        let tool = |name: &str| {
            let mut cmd = Command::new(bindir.join(name));
            cmd.current_dir(&pair.dir);
            as_owner(&mut cmd, owner);
            cmd
        };
        let primary = pair.dir.join("primary");
        let standby = pair.dir.join("standby");

        run(
            tool("initdb").arg("-D").arg(&primary).args([
                "-U",
                "postgres",
                "--auth=trust",
                "-N",
                "-E",
                "UTF8",
                "--locale=C",
            ]),
            "initdb",
        )?;
        append(
            &primary.join("postgresql.conf"),
            &format!(
                "listen_addresses = ''\nunix_socket_directories = '{}'\nport = {PRIMARY_PORT}\n\
                 wal_level = replica\nmax_wal_senders = 4\nfsync = off\nfull_page_writes = off\n",
                pair.dir.display()
            ),
        )?;
        // Ahead of initdb's own lines, so this one decides for the replication role.
        let hba = primary.join("pg_hba.conf");
        let rest = std::fs::read_to_string(&hba).map_err(|e| format!("read pg_hba.conf: {e}"))?;
        std::fs::write(
            &hba,
            format!("local replication {REPLICATION_ROLE} trust\n{rest}"),
        )
        .map_err(|e| format!("write pg_hba.conf: {e}"))?;
        pair.pg_ctl_start(&mut tool("pg_ctl"), &primary)?;

        let admin = super::pg::connect(&pair.url(PRIMARY_PORT)).await;
        admin
            .batch_execute(&format!("CREATE ROLE {REPLICATION_ROLE} REPLICATION LOGIN"))
            .await
            .map_err(|e| format!("cannot create the replication role: {e}"))?;
        if bindir.join("pg_basebackup").exists() {
            run(
                tool("pg_basebackup")
                    .arg("-D")
                    .arg(&standby)
                    // A throwaway copy: no fsync, no manifest, an immediate checkpoint.
                    .args([
                        "-R",
                        "-X",
                        "stream",
                        "-c",
                        "fast",
                        "--no-sync",
                        "--no-manifest",
                    ])
                    .args(["-U", REPLICATION_ROLE])
                    .arg("-h")
                    .arg(&pair.dir)
                    .args(["-p", &PRIMARY_PORT.to_string()]),
                "pg_basebackup",
            )?;
        } else {
            drop(admin);
            let mut cp = Command::new("cp");
            as_owner(&mut cp, owner);
            pair.clone_stopped_primary(&mut tool("pg_ctl"), &mut cp, &primary, &standby)?;
            pair.pg_ctl_start(&mut tool("pg_ctl"), &primary)?;
        }
        append(
            &standby.join("postgresql.conf"),
            &format!(
                "port = {STANDBY_PORT}\nhot_standby = on\nwal_receiver_status_interval = 1s\n"
            ),
        )?;
        pair.pg_ctl_start(&mut tool("pg_ctl"), &standby)?;
        Ok(pair)
    }

    /// The standby without pg_basebackup (the server builds of the version matrix ship only initdb,
    /// pg_ctl and postgres): stop the primary cleanly, copy its data directory, and start it again. A
    /// copy of a cleanly shut down cluster is a valid base backup; the standby replays from its
    /// shutdown checkpoint and then streams, as `pg_basebackup -R` would have set it up to.
    fn clone_stopped_primary(
        &self,
        pg_ctl: &mut Command,
        cp: &mut Command,
        primary: &Path,
        standby: &Path,
    ) -> Result<(), String> {
        run(
            pg_ctl
                .arg("-D")
                .arg(primary)
                .args(["-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        )?;
        run(cp.arg("-a").arg(primary).arg(standby), "cp -a")?;
        for leftover in ["postmaster.pid", "postmaster.opts"] {
            let _ = std::fs::remove_file(standby.join(leftover));
        }
        let signal = standby.join("standby.signal");
        std::fs::write(&signal, "").map_err(|e| format!("write {}: {e}", signal.display()))?;
        append(
            &standby.join("postgresql.auto.conf"),
            &format!(
                "primary_conninfo = 'host={} port={PRIMARY_PORT} user={REPLICATION_ROLE}'\n",
                self.dir.display()
            ),
        )?;
        Ok(())
    }

    fn url(&self, port: u16) -> String {
        format!(
            "host={} port={port} user=postgres dbname=postgres",
            self.dir.display()
        )
    }

    /// The primary's `postgres` database as the superuser.
    pub(crate) fn primary_url(&self) -> String {
        self.url(PRIMARY_PORT)
    }

    /// The standby's `postgres` database (read-only) as the superuser.
    pub(crate) fn standby_url(&self) -> String {
        self.url(STANDBY_PORT)
    }

    /// Both servers as one multi-host conninfo, the primary listed first, with `extra` appended.
    pub(crate) fn both_url(&self, extra: &str) -> String {
        format!(
            "host={dir},{dir} port={PRIMARY_PORT},{STANDBY_PORT} user=postgres dbname=postgres {extra}",
            dir = self.dir.display()
        )
    }

    /// Run `pg_ctl ARGS -D <primary|standby>` as the cluster's owner (`which`: "primary" or
    /// "standby"), e.g. `&["-m", "immediate", "-w", "stop"]` or `&["-w", "promote"]`.
    pub(crate) fn pg_ctl(&self, which: &str, args: &[&str]) {
        let bindir = find_bindir().expect("the server binaries");
        let owner = cluster_owner().expect("the cluster's owner");
        let mut cmd = Command::new(bindir.join("pg_ctl"));
        as_owner(&mut cmd, owner);
        cmd.arg("-D").arg(self.dir.join(which)).args(args);
        run(&mut cmd, "pg_ctl").unwrap_or_else(|e| panic!("{e}"));
    }

    /// Wait until the standby streams and has replayed everything the primary has flushed.
    pub(crate) async fn wait_caught_up(&self, primary: &tokio_postgres::Client) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let row = primary
                .query_one(
                    "SELECT count(*) FILTER (WHERE state = 'streaming' \
                                              AND replay_lsn >= pg_current_wal_flush_lsn()) \
                       FROM pg_stat_replication",
                    &[],
                )
                .await
                .unwrap();
            if row.get::<_, i64>(0) == 1 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standby did not catch up within 30 s; see {}",
                self.dir.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn pg_ctl_start(&self, pg_ctl: &mut Command, data: &Path) -> Result<(), String> {
        let log = data.with_extension("log");
        let result = run(
            pg_ctl
                .arg("-D")
                .arg(data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "start"]),
            "pg_ctl start",
        );
        result.map_err(|e| {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            format!("{e}\n--- {} ---\n{tail}", log.display())
        })
    }
}

fn append(path: &Path, text: &str) -> Result<(), String> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(format!("\n# idemctl replica test\n{text}").as_bytes()))
        .map_err(|e| format!("cannot append to {}: {e}", path.display()))
}

/// Like the shared cluster's watchdog, for both servers: at EOF on stdin, SIGQUIT each postmaster
/// whose command line names its data directory, wait for it to go, and remove the directory. In its
/// own process group, so a terminal ^C does not kill it first.
fn spawn_watchdog(dir: &Path) -> Result<ChildStdin, String> {
    const SCRIPT: &str = r#"
cat >/dev/null
d=$1
for data in "$d/standby" "$d/primary"; do
    pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null)
    if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$data"; then
        kill -QUIT "$pid" 2>/dev/null
        i=0
        while [ "$i" -lt 400 ] && s=$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null) && [ "$s" != Z ]; do
            sleep 0.025
            i=$((i + 1))
        done
    fi
done
rm -rf "$d"
"#;
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("idemctl-replica-watchdog")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the replica watchdog (/bin/sh): {e}"))?;
    child
        .stdin
        .take()
        .ok_or_else(|| "the watchdog has no stdin pipe".to_owned())
}

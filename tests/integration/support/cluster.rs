//! The per-process throwaway PostgreSQL cluster: find the server binaries, initdb as the right OS user,
//! start the server with its unix socket in a private /tmp directory, and leave a watchdog that shuts it
//! down and removes the directory when the test process exits, however it exits.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// The prefix of every cluster directory; `.ci/run` and `scripts/pgtmp` use the same one.
pub(crate) const DIR_PREFIX: &str = "idemctl-pg.";

/// Settings appended to postgresql.conf (besides the socket settings).
const SETTINGS: &[(&str, &str)] = &[
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "200"),
    ("log_lock_waits", "on"),
    ("deadlock_timeout", "'100ms'"),
];

const HOW_TO_PROVIDE: &str = "the integration tests need a PostgreSQL server. Either install the server \
binaries (Debian/Ubuntu: apt-get install postgresql; scripts/test installs them), or set IDEMCTL_TEST_PGBIN to a directory holding \
initdb, pg_ctl and postgres, or set IDEMCTL_TEST_DATABASE_URL to a superuser conninfo/URL of a running \
server (databases named idemctl_t_* are created and dropped there)";

/// A running cluster owned by this test process.
#[derive(Debug)]
pub(crate) struct LocalCluster {
    /// The private directory: `data/`, `server.log`, and the socket `.s.PGSQL.5432`.
    pub dir: PathBuf,
    /// Where initdb/pg_ctl/postgres were taken from.
    pub bindir: PathBuf,
    /// How long initdb + start took.
    pub startup: Duration,
    /// Write end of the watchdog's stdin. Never written, never closed: the kernel closes it when this
    /// process exits, the watchdog reads EOF and tears the cluster down.
    _watchdog: ChildStdin,
}

impl LocalCluster {
    /// The conninfo settings of the bootstrap superuser's `postgres` database.
    pub(crate) fn admin_params(&self) -> Vec<(&'static str, String)> {
        vec![
            ("host", self.dir.display().to_string()),
            ("port", "5432".to_owned()),
            ("user", "postgres".to_owned()),
            ("dbname", "postgres".to_owned()),
        ]
    }

    /// The server log.
    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Create, initialise and start a cluster. Errors are complete messages for a panic.
    pub(crate) fn start() -> Result<Self, String> {
        let started = Instant::now();
        let bindir = find_bindir()?;
        let owner = cluster_owner()?;

        let parent = std::env::var_os("IDEMCTL_TEST_TMPDIR")
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        let parent = std::fs::canonicalize(&parent)
            .map_err(|e| format!("cluster parent directory {}: {e}", parent.display()))?;
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .rand_bytes(8)
            .tempdir_in(&parent)
            .map_err(|e| {
                format!(
                    "cannot create a cluster directory in {}: {e}",
                    parent.display()
                )
            })?
            .keep();
        // The watchdog goes first, so that even a failure below leaves nothing behind.
        let watchdog = spawn_watchdog(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {} to postgres: {e}", dir.display()))?;
            let reachable = as_owner(Command::new("test").arg("-x").arg(&dir), owner)
                .status()
                .is_ok_and(|s| s.success());
            if !reachable {
                return Err(format!(
                    "the OS user postgres cannot reach {} (a parent directory is not traversable); \
                     set IDEMCTL_TEST_TMPDIR to a directory like /tmp",
                    dir.display()
                ));
            }
        }

        let data = dir.join("data");
        let initdb = run_logged(as_owner(&mut initdb(&bindir, &data, &dir), owner), "initdb");
        initdb?;

        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .map_err(|e| format!("cannot open postgresql.conf: {e}"))?;
        let mut extra = format!(
            "\n# idemctl integration tests\nlisten_addresses = ''\nunix_socket_directories = '{}'\nport = 5432\n",
            dir.display()
        );
        for (key, value) in SETTINGS {
            extra.push_str(&format!("{key} = {value}\n"));
        }
        conf.write_all(extra.as_bytes())
            .map_err(|e| format!("cannot write postgresql.conf: {e}"))?;
        drop(conf);

        let log = dir.join("server.log");
        let mut pg_ctl = Command::new(bindir.join("pg_ctl"));
        pg_ctl
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60"])
            .current_dir(&dir);
        if let Some(opts) = std::env::var_os("IDEMCTL_TEST_PGOPTS").filter(|v| !v.is_empty()) {
            pg_ctl.arg("-o").arg(opts);
        }
        pg_ctl.arg("start");
        if let Err(e) = run_logged(as_owner(&mut pg_ctl, owner), "pg_ctl start") {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("{e}\n--- {} ---\n{tail}", log.display()));
        }

        Ok(Self {
            dir,
            bindir,
            startup: started.elapsed(),
            _watchdog: watchdog,
        })
    }
}

/// `IDEMCTL_TEST_PGBIN`, else the directory of the resolved `initdb` on PATH, else the newest
/// `/usr/lib/postgresql/*/bin`.
pub(crate) fn find_bindir() -> Result<PathBuf, String> {
    let dir = if let Some(dir) = std::env::var_os("IDEMCTL_TEST_PGBIN").filter(|v| !v.is_empty()) {
        PathBuf::from(dir)
    } else if let Some(initdb) = find_on_path("initdb") {
        let real = std::fs::canonicalize(&initdb)
            .map_err(|e| format!("cannot resolve {}: {e}", initdb.display()))?;
        real.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        newest_debian_bindir().ok_or_else(|| {
            format!("no PostgreSQL server binaries found (no initdb on PATH or in /usr/lib/postgresql/*/bin): {HOW_TO_PROVIDE}")
        })?
    };
    for bin in ["initdb", "pg_ctl", "postgres"] {
        if !is_executable(&dir.join(bin)) {
            return Err(format!(
                "{} is missing or not executable: {HOW_TO_PROVIDE}",
                dir.join(bin).display()
            ));
        }
    }
    Ok(dir)
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn newest_debian_bindir() -> Option<PathBuf> {
    let mut found: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.to_owned();
            let key: Vec<u32> = version
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?;
            let bin = entry.path().join("bin");
            is_executable(&bin.join("initdb")).then_some((key, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// `Some((uid, gid))` of the `postgres` OS user when this process runs as root (initdb refuses
/// root), `None` otherwise.
pub(crate) fn cluster_owner() -> Result<Option<(u32, u32)>, String> {
    let euid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .map_err(|e| format!("cannot stat /proc/self to learn the effective uid: {e}"))?;
    if euid != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 4 && f[0] == "postgres")
        .and_then(|f| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        .map(Some)
        .ok_or_else(|| {
            "the tests run as root, and initdb refuses root, so the cluster must belong to an OS user \
             named postgres, which /etc/passwd does not have (apt-get install postgresql creates it; or \
             run the tests as a normal user, or set IDEMCTL_TEST_DATABASE_URL)"
                .to_owned()
        })
}

/// Drop to the cluster owner (std clears supplementary groups when root changes uid), and keep the
/// caller's libpq environment (PGDATA, PGPORT, ...) away from the server tools.
/// `initdb` for a throwaway test cluster: trust authentication, superuser `postgres`, no fsync,
/// UTF8 with the C locale, so every cluster the harness starts is the same.
pub(crate) fn initdb(bindir: &Path, data: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(bindir.join("initdb"));
    cmd.arg("-D")
        .arg(data)
        .args(["-U", "postgres", "--auth=trust", "-N", "-E", "UTF8"])
        .arg("--locale=C")
        .current_dir(cwd);
    cmd
}

pub(crate) fn as_owner(cmd: &mut Command, owner: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = owner {
        cmd.uid(uid).gid(gid);
    }
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
    cmd.stdin(Stdio::null())
}

pub(crate) fn run_logged(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {what} ({:?}): {e}", cmd.get_program()))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// A shell that blocks reading its stdin (a pipe whose only write end this process holds, close-on-exec
/// so no other child inherits it). At EOF (this process exited: normally, by panic, by signal, even
/// SIGKILL) it sends the postmaster SIGQUIT (what `pg_ctl stop -m immediate` sends), waits for it to go,
/// and removes the directory. It runs in its own process group so a terminal ^C does not kill it
/// before it has done its job (pg_ctl already puts the postmaster in its own session).
pub(crate) fn spawn_watchdog(dir: &Path) -> Result<ChildStdin, String> {
    const SCRIPT: &str = r#"
cat >/dev/null
d=$1
pid=$(head -n 1 "$d/data/postmaster.pid" 2>/dev/null)
# Only a live process whose command line names this data directory (never a recycled pid).
if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$d/data"; then
    kill -QUIT "$pid" 2>/dev/null
    i=0
    while [ "$i" -lt 400 ] && s=$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null) && [ "$s" != Z ]; do
        sleep 0.025
        i=$((i + 1))
    done
fi
rm -rf "$d"
"#;
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("idemctl-pg-watchdog")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the cluster watchdog (/bin/sh): {e}"))?;
    child
        .stdin
        .take()
        .ok_or_else(|| "the watchdog has no stdin pipe".to_owned())
}

/// A cluster of a test's own, for tests that stop or restart the server or need it quiet (the
/// harness's cluster is shared by every test of the process). Torn down when dropped.
pub(crate) struct PrivateCluster {
    pub cluster: LocalCluster,
    /// The bootstrap superuser's conninfo.
    pub url: String,
}

impl PrivateCluster {
    pub(crate) async fn start() -> PrivateCluster {
        let cluster = tokio::task::spawn_blocking(LocalCluster::start)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("cannot start a private cluster: {e}"));
        let url = cluster
            .admin_params()
            .iter()
            .map(|(k, v)| format!("{k}='{v}'"))
            .collect::<Vec<_>>()
            .join(" ");
        PrivateCluster { cluster, url }
    }

    pub(crate) async fn client(&self) -> tokio_postgres::Client {
        super::connect(&self.url).await
    }

    /// idemctl connected to the cluster as its superuser.
    pub(crate) fn idemctl(&self) -> super::Cmd {
        super::Cmd::new().env("IDEMCTL_DATABASE_URL", &self.url)
    }

    /// `pg_ctl ARGS` as the cluster's owner (the postgres OS user when the tests run as root).
    pub(crate) async fn pg_ctl(&self, args: &[&str]) {
        let mut cmd = Command::new(self.cluster.bindir.join("pg_ctl"));
        cmd.arg("-D")
            .arg(self.cluster.dir.join("data"))
            .arg("-l")
            .arg(self.cluster.log_path())
            .args(["-w", "-t", "60"])
            .args(args)
            .stdin(Stdio::null());
        let running_as_root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        if running_as_root {
            let owner = std::fs::metadata(&self.cluster.dir).unwrap();
            cmd.uid(owner.uid()).gid(owner.gid());
        }
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .unwrap()
            .expect("pg_ctl");
        assert!(
            out.status.success(),
            "pg_ctl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

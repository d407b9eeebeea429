//! Throwaway PostgreSQL servers reached over TCP with SCRAM passwords, for the transport tests: one
//! with TLS (a self-signed test CA and a server certificate for `localhost`, 127.0.0.1 and ::1), one
//! without (`ssl = off`). `TcpDb` gives each test its own login role and database on one of them.
//!
//! Each server is started lazily, at most once per test process, and torn down like the socket
//! cluster (`cluster.rs`): a watchdog process stops it and deletes its directory when the test
//! process exits. The directory lives where the socket cluster's does (`IDEMCTL_TEST_TMPDIR`, else
//! /tmp) under the same prefix, so `.ci/run`'s leak check covers it. These servers are always
//! local, also when `IDEMCTL_TEST_DATABASE_URL` names an external server: their TLS and pg_hba.conf
//! set-up is what the tests are about.
//!
//! Access rules (pg_hba.conf): the Unix socket trusts everyone (so tests can administer the server
//! and create tables as any role); TCP needs a SCRAM password. On the TLS server, TCP without TLS
//! is allowed only for members of [`TLS_OPTIONAL_GROUP`]: a [`Transport::TlsRequired`] role sees a
//! server that demands TLS (only `hostssl` lines match it), a [`Transport::TlsOptional`] role one
//! that takes either, exactly as two servers with those pg_hba.conf files would behave; a
//! [`Transport::TlsRefused`] role is admitted only without TLS (`hostnossl`), over TLS rejected.

use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::cluster::{DIR_PREFIX, find_bindir};
use super::cluster::{as_owner, cluster_owner, initdb, run_logged as run_checked, spawn_watchdog};
use super::cmd::Cmd;
use super::conninfo::ConnInfo;
use super::pg::{connect, ident, pg_error_text};

/// The password of every role `TcpDb` creates: distinctive, so a leak into any output is easy to
/// spot, and with a shell metacharacter, so careless quoting would show.
pub(crate) const PASSWORD: &str = "Tr0ub4dor&3-secret";

/// Members of this role may use TCP without TLS on the TLS server.
pub(crate) const TLS_OPTIONAL_GROUP: &str = "idemctl_tls_optional";

/// Members of this role may use TCP only without TLS on the TLS server (`hostnossl` lines).
pub(crate) const TLS_REFUSED_GROUP: &str = "idemctl_tls_refused";

/// What the server offers the test's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// TLS server; the role may connect with or without TLS (`host` and `hostssl` lines).
    TlsOptional,
    /// TLS server; the role must use TLS (only `hostssl` lines match it).
    TlsRequired,
    /// TLS server; the role must not use TLS (only `hostnossl` lines admit it; over TLS it is
    /// rejected).
    TlsRefused,
    /// A server with `ssl = off`: it answers TLS requests with "no".
    NoTls,
}

/// Settings appended to postgresql.conf on both servers.
const SETTINGS: &[(&str, &str)] = &[
    ("listen_addresses", "'localhost'"),
    ("password_encryption", "'scram-sha-256'"),
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "100"),
];

/// One running TCP server.
#[derive(Debug)]
pub(crate) struct TcpServer {
    /// The private directory: `data/`, `tls/`, `server.log` and the Unix socket.
    pub dir: PathBuf,
    /// The TCP port on 127.0.0.1 (and ::1 where localhost has it); also the socket's number.
    pub port: u16,
    /// Whether the server speaks TLS.
    pub tls: bool,
    /// Write end of the watchdog's stdin, never written: closed by the kernel at process exit.
    _watchdog: ChildStdin,
}

static WITH_TLS: OnceLock<Result<TcpServer, String>> = OnceLock::new();
static WITHOUT_TLS: OnceLock<Result<TcpServer, String>> = OnceLock::new();

/// The process-wide TLS (`true`) or plain (`false`) server, started on first use. Panics with the
/// reason (and how to fix it) when it cannot be started: the tests never skip.
pub(crate) fn server(tls: bool) -> &'static TcpServer {
    let cell = if tls { &WITH_TLS } else { &WITHOUT_TLS };
    match cell.get_or_init(|| TcpServer::start(tls)) {
        Ok(server) => server,
        Err(message) => panic!("cannot start the TCP test server (tls: {tls}): {message}"),
    }
}

impl TcpServer {
    /// The test CA that signed the server certificate (PEM).
    pub(crate) fn ca_cert(&self) -> PathBuf {
        self.dir.join("tls/ca.crt")
    }

    /// A second CA that signed nothing this server presents (PEM).
    pub(crate) fn other_ca_cert(&self) -> PathBuf {
        self.dir.join("tls/other-ca.crt")
    }

    /// The server log.
    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A server of its own, for a test that changes the server's settings (such as its
    /// certificate); stopped and deleted with the test process, like the shared ones.
    pub(crate) fn start_private(tls: bool) -> TcpServer {
        TcpServer::start(tls)
            .unwrap_or_else(|e| panic!("cannot start a private TCP test server (tls: {tls}): {e}"))
    }

    /// A superuser conninfo over the Unix socket (trusted) to `dbname`.
    pub(crate) fn socket_conninfo(&self, user: &str, dbname: &str) -> String {
        let mut info = ConnInfo::new();
        info.set("host", self.dir.display().to_string());
        info.set("port", self.port.to_string());
        info.set("user", user);
        info.set("dbname", dbname);
        info.to_key_value()
    }

    fn start(tls: bool) -> Result<TcpServer, String> {
        let bindir = find_bindir()?;
        let owner = cluster_owner()?;
        let dir = private_dir(owner)?;
        // First, so that even a failure below leaves nothing behind.
        let watchdog = spawn_watchdog(&dir)?;
        let data = dir.join("data");
        run_checked(as_owner(&mut initdb(&bindir, &data, &dir), owner), "initdb")?;
        let mut settings: Vec<(&str, String)> = SETTINGS
            .iter()
            .map(|(k, v)| (*k, (*v).to_owned()))
            .collect();
        settings.push(("unix_socket_directories", format!("'{}'", dir.display())));
        if tls {
            let certs = dir.join("tls");
            make_certificates(&certs)?;
            settings.push(("ssl", "on".to_owned()));
            let cert = certs.join("server.crt");
            let key = certs.join("server.key");
            settings.push(("ssl_cert_file", format!("'{}'", cert.display())));
            settings.push(("ssl_key_file", format!("'{}'", key.display())));
            chown_tree(&certs, owner)?;
        } else {
            settings.push(("ssl", "off".to_owned()));
        }
        let mut conf = String::from("\n# idemctl transport tests\n");
        for (key, value) in settings {
            conf.push_str(&format!("{key} = {value}\n"));
        }
        append(&data.join("postgresql.conf"), &conf)?;
        std::fs::write(data.join("pg_hba.conf"), hba(tls))
            .map_err(|e| format!("cannot write pg_hba.conf: {e}"))?;

        let port = start_on_free_port(&bindir, &dir, owner)?;
        Ok(TcpServer {
            dir,
            port,
            tls,
            _watchdog: watchdog,
        })
    }
}

/// pg_hba.conf: the socket trusts everyone; TCP wants SCRAM, and on the TLS server TLS as well,
/// except for members of `TLS_OPTIONAL_GROUP`; members of `TLS_REFUSED_GROUP` only without TLS.
fn hba(tls: bool) -> String {
    let mut out = String::from("local all all trust\n");
    for net in ["127.0.0.1/32", "::1/128"] {
        if tls {
            out.push_str(&format!(
                "hostnossl all +{TLS_REFUSED_GROUP} {net} scram-sha-256\n"
            ));
            out.push_str(&format!("hostssl all +{TLS_REFUSED_GROUP} {net} reject\n"));
            out.push_str(&format!("hostssl all all {net} scram-sha-256\n"));
            out.push_str(&format!(
                "host all +{TLS_OPTIONAL_GROUP} {net} scram-sha-256\n"
            ));
        } else {
            out.push_str(&format!("host all all {net} scram-sha-256\n"));
        }
    }
    out
}

/// `pg_ctl start` on a port that was free a moment ago; another process may take it in between,
/// so a bind failure is retried on a new port.
pub(crate) fn start_on_free_port(
    bindir: &Path,
    dir: &Path,
    owner: Option<(u32, u32)>,
) -> Result<u16, String> {
    let log = dir.join("server.log");
    let mut last_error = String::new();
    for _ in 0..5 {
        let port = free_port()?;
        let mut options = format!("-p {port}");
        if let Some(extra) = std::env::var("IDEMCTL_TEST_PGOPTS")
            .ok()
            .filter(|v| !v.is_empty())
        {
            options = format!("{options} {extra}");
        }
        let mut pg_ctl = Command::new(bindir.join("pg_ctl"));
        pg_ctl
            .arg("-D")
            .arg(dir.join("data"))
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "-o", &options, "start"])
            // The server's own libpq connections (Citus between nodes) look for client
            // certificates under $HOME, which must be the server user's, not the test runner's.
            .env("HOME", dir)
            .current_dir(dir);
        match run_checked(as_owner(&mut pg_ctl, owner), "pg_ctl start") {
            Ok(()) => return Ok(port),
            Err(e) => {
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                if !tail.contains("could not bind") && !tail.contains("in use") {
                    return Err(format!("{e}\n--- {} ---\n{tail}", log.display()));
                }
                last_error = format!("{e}\n--- {} ---\n{tail}", log.display());
            }
        }
    }
    Err(format!("no free port after 5 tries: {last_error}"))
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free TCP port on 127.0.0.1: {e}"))
}

/// A test CA, an unrelated second CA, and a server certificate signed by the first for
/// `DNS:localhost`, `IP:127.0.0.1` and `IP:::1`, all EC P-256, made with the openssl command.
pub(crate) fn make_certificates(dir: &Path) -> Result<(), String> {
    std::fs::create_dir(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    const CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1,IP:::1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";
    std::fs::write(dir.join("openssl.cnf"), CONFIG)
        .map_err(|e| format!("cannot write openssl.cnf: {e}"))?;
    let new_key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    for (name, subject) in [("ca", "idemctl test CA"), ("other-ca", "idemctl other CA")] {
        openssl(
            dir,
            &[&["req", "-config", "openssl.cnf", "-x509"], &new_key[..]].concat(),
            &[
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-days",
                "30",
                "-subj",
                &format!("/CN={subject}"),
                "-extensions",
                "ca_ext",
            ],
        )?;
    }
    openssl(
        dir,
        &[&["req", "-config", "openssl.cnf", "-new"], &new_key[..]].concat(),
        &[
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
        ],
        &[
            "-set_serial",
            "4096",
            "-days",
            "30",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            "server_ext",
            "-out",
            "server.crt",
        ],
    )?;
    // PostgreSQL refuses a key others can read.
    for key in ["server.key", "ca.key", "other-ca.key"] {
        std::fs::set_permissions(dir.join(key), std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("chmod {key}: {e}"))?;
    }
    Ok(())
}

fn openssl(dir: &Path, head: &[&str], tail: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new("openssl");
    cmd.args(head)
        .args(tail)
        .current_dir(dir)
        .stdin(Stdio::null());
    run_checked(&mut cmd, "openssl").map_err(|e| {
        format!(
            "{e} (the TLS tests make their certificates with the openssl command; install it, \
             e.g. apt-get install openssl)"
        )
    })
}

/// A fresh 0700 directory owned by the server's OS user, under `IDEMCTL_TEST_TMPDIR` or /tmp.
pub(crate) fn private_dir(owner: Option<(u32, u32)>) -> Result<PathBuf, String> {
    let parent = std::env::var_os("IDEMCTL_TEST_TMPDIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    let parent = std::fs::canonicalize(&parent)
        .map_err(|e| format!("server parent directory {}: {e}", parent.display()))?;
    let dir = tempfile::Builder::new()
        .prefix(DIR_PREFIX)
        .rand_bytes(8)
        .tempdir_in(&parent)
        .map_err(|e| format!("cannot create a directory in {}: {e}", parent.display()))?
        .keep();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .map_err(|e| format!("chown {}: {e}", dir.display()))?;
    }
    Ok(dir)
}

fn chown_tree(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), String> {
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let paths = entries.filter_map(Result::ok).map(|e| e.path());
    for path in std::iter::once(dir.to_path_buf()).chain(paths) {
        std::os::unix::fs::chown(&path, Some(uid), Some(gid))
            .map_err(|e| format!("chown {}: {e}", path.display()))?;
    }
    Ok(())
}

pub(crate) fn append(path: &Path, text: &str) -> Result<(), String> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot append to {}: {e}", path.display()))
}

/// A login role with [`PASSWORD`] and a database it owns, on the server `transport` asks for,
/// plus an empty home directory for the `idemctl` child (no `~/.pgpass`, no `~/.postgresql/`).
/// Role and database stay until the server is discarded with the test process.
#[derive(Debug)]
pub(crate) struct TcpDb {
    server: &'static TcpServer,
    /// The login role.
    pub user: String,
    /// The database, owned by `user`.
    pub dbname: String,
    home: tempfile::TempDir,
}

impl TcpDb {
    /// Create the role and database. Panics with the server's message on failure.
    pub(crate) async fn new(transport: Transport) -> TcpDb {
        let server = server(transport != Transport::NoTls);
        let suffix = random_hex();
        let user = format!("idemctl_tcp_u_{suffix}");
        let dbname = format!("idemctl_tcp_d_{suffix}");
        let admin = connect(&server.socket_conninfo("postgres", "postgres")).await;
        let mut sql = Vec::new();
        let group = match transport {
            Transport::TlsOptional => Some(TLS_OPTIONAL_GROUP),
            Transport::TlsRefused => Some(TLS_REFUSED_GROUP),
            Transport::TlsRequired | Transport::NoTls => None,
        };
        let group = match group {
            Some(group) => {
                // Tolerates a concurrent test creating it at the same moment.
                sql.push(format!(
                    "DO $$ BEGIN CREATE ROLE {group} NOLOGIN; \
                     EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
                ));
                format!(" IN ROLE {group}")
            }
            None => String::new(),
        };
        sql.push(format!(
            "CREATE ROLE {} LOGIN PASSWORD '{PASSWORD}'{group}",
            ident(&user)
        ));
        sql.push(format!(
            "CREATE DATABASE {} OWNER {} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'",
            ident(&dbname),
            ident(&user)
        ));
        for statement in sql {
            if let Err(e) = admin.batch_execute(&statement).await {
                panic!(
                    "cannot set up {user} on the TCP test server: {}",
                    pg_error_text(&e)
                );
            }
        }
        let home = tempfile::Builder::new()
            .prefix("idemctl-home.")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a home directory: {e}"));
        TcpDb {
            server,
            user,
            dbname,
            home,
        }
    }

    /// The TCP port.
    pub(crate) fn port(&self) -> u16 {
        self.server.port
    }

    /// The CA that signed the TLS server's certificate.
    pub(crate) fn ca_cert(&self) -> PathBuf {
        self.server.ca_cert()
    }

    /// A CA unrelated to the server's certificate.
    pub(crate) fn other_ca_cert(&self) -> PathBuf {
        self.server.other_ca_cert()
    }

    /// The child's home directory (empty unless the test writes to it).
    pub(crate) fn home(&self) -> &Path {
        self.home.path()
    }

    /// `host=localhost port=P user=U dbname=D` plus (or replaced by) `settings`; no password.
    pub(crate) fn conninfo(&self, settings: &[(&str, &str)]) -> String {
        let mut info = ConnInfo::new();
        info.set("host", "localhost");
        info.set("port", self.port().to_string());
        info.set("user", self.user.as_str());
        info.set("dbname", self.dbname.as_str());
        for (key, value) in settings {
            info.set(key, *value);
        }
        info.to_key_value()
    }

    /// Run SQL in the database as its owner, over the trusted Unix socket.
    pub(crate) async fn exec(&self, sql: &str) {
        let client = connect(&self.server.socket_conninfo(&self.user, &self.dbname)).await;
        if let Err(e) = client.batch_execute(sql).await {
            panic!("SQL failed in {}: {}", self.dbname, pg_error_text(&e));
        }
    }

    /// The `idemctl` binary with `HOME` set to this test's empty home directory and no
    /// connection settings: the test passes them.
    pub(crate) fn idemctl(&self) -> Cmd {
        Cmd::new().env("HOME", self.home())
    }
}

/// 64 random bits as hex, for names no other test (or test process) uses.
fn random_hex() -> String {
    use std::hash::{BuildHasher as _, Hasher as _, RandomState};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

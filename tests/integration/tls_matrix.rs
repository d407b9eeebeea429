//! TLS against the certificates servers carry in the field, compared with psql on the same server:
//! X.509 version 1 and version 3, CA-signed and self-signed (made here with the openssl command,
//! the v1 ones as the PostgreSQL manual's `openssl x509 -req` recipe and Citus make them), under
//! every sslmode, with the right root, an unrelated one or none, by host name and by address.
//! idemctl must connect exactly when psql does, and when both refuse, say psql's reason.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::fixtures::Schema;
use crate::support::cluster::cluster_owner;
use crate::support::tcp::{PASSWORD, TcpServer};
use crate::support::{Cmd, Run, connect, ident, pg_error_text};

/// The psql whose libpq idemctl is compared with (Debian's postgresql-client).
const PSQL: &str = "/usr/bin/psql";

/// One kind of server certificate.
#[derive(Clone, Copy, Debug)]
struct Kind {
    name: &'static str,
    version: u8,
    ca_signed: bool,
    cn: &'static str,
}

const KINDS: [Kind; 4] = [
    Kind {
        name: "v3-ca",
        version: 3,
        ca_signed: true,
        cn: "localhost",
    },
    Kind {
        name: "v1-ca",
        version: 1,
        ca_signed: true,
        cn: "localhost",
    },
    Kind {
        name: "v3-self",
        version: 3,
        ca_signed: false,
        cn: "localhost",
    },
    // What `CREATE EXTENSION citus` generates.
    Kind {
        name: "v1-self",
        version: 1,
        ca_signed: false,
        cn: "citus-auto-ssl",
    },
];

fn openssl(dir: &Path, args: &[&str]) {
    let run = Cmd::of("openssl")
        .args(args)
        .current_dir(dir)
        .timeout(Duration::from_secs(30))
        .run();
    assert_eq!(run.code, 0, "openssl must be installed and work\n{run}");
}

fn new_key(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            name,
        ],
    );
}

/// The CA that signs the CA-signed kinds, and an unrelated one, as the manual makes a root.
fn make_roots(dir: &Path) {
    for (name, cn) in [("ca", "matrix root CA"), ("other-ca", "unrelated CA")] {
        new_key(dir, &format!("{name}.key"));
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-x509",
                "-days",
                "30",
                "-key",
                &format!("{name}.key"),
                "-subj",
                &format!("/CN={cn}"),
                "-out",
                &format!("{name}.crt"),
            ],
        );
    }
}

/// `<kind>.crt` and `<kind>.key` in `dir`; returns the root that trusts the certificate.
fn make_certificate(dir: &Path, kind: Kind) -> PathBuf {
    let (crt, key, csr) = (
        format!("{}.crt", kind.name),
        format!("{}.key", kind.name),
        format!("{}.csr", kind.name),
    );
    new_key(dir, &key);
    let subj = format!("/CN={}", kind.cn);
    match (kind.version, kind.ca_signed) {
        (3, false) => openssl(
            dir,
            &[
                "req", "-new", "-x509", "-days", "30", "-key", &key, "-subj", &subj, "-out", &crt,
            ],
        ),
        (_, ca_signed) => {
            openssl(
                dir,
                &["req", "-new", "-key", &key, "-subj", &subj, "-out", &csr],
            );
            let mut args = vec!["x509", "-req", "-in", &csr, "-days", "30", "-out", &crt];
            if ca_signed {
                args.extend(["-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial"]);
            } else {
                args.extend(["-signkey", &key]);
            }
            if kind.version == 3 {
                std::fs::write(dir.join("san.cnf"), "subjectAltName = DNS:localhost\n").unwrap();
                args.extend(["-extfile", "san.cnf"]);
            }
            openssl(dir, &args);
        }
    }
    // The test is about these versions: make sure the recipe really produced them.
    let text = Cmd::of("openssl")
        .args(["x509", "-noout", "-text", "-in", &crt])
        .current_dir(dir)
        .run();
    let want = format!("Version: {} (0x{})", kind.version, kind.version - 1);
    assert!(text.stdout.contains(&want), "{kind:?}: not {want}\n{text}");
    if kind.ca_signed {
        dir.join("ca.crt")
    } else {
        dir.join(&crt)
    }
}

/// A server of the test's own, whose certificate is swapped per kind, and a role that may only
/// use TLS (the TLS server's pg_hba.conf), owning a database with the reference table.
struct Server {
    server: TcpServer,
    user: String,
    dbname: String,
}

impl Server {
    async fn start() -> Server {
        let server = TcpServer::start_private(true);
        let user = "matrix_user".to_string();
        let dbname = "matrix_db".to_string();
        let admin = connect(&server.socket_conninfo("postgres", "postgres")).await;
        for sql in [
            format!("CREATE ROLE {} LOGIN PASSWORD '{PASSWORD}'", ident(&user)),
            format!("CREATE DATABASE {} OWNER {}", ident(&dbname), ident(&user)),
        ] {
            admin
                .batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {}", pg_error_text(&e)));
        }
        let owner = connect(&server.socket_conninfo(&user, &dbname)).await;
        owner
            .batch_execute(Schema::Corrected.ddl())
            .await
            .unwrap_or_else(|e| panic!("schema: {}", pg_error_text(&e)));
        Server {
            server,
            user,
            dbname,
        }
    }

    /// Serve `kind`'s certificate from now on (a reload; new connections get it).
    async fn serve(&self, certs: &Path, kind: Kind, root: &Path, home: &Path) {
        let tls = self.server.dir.join("tls");
        let crt = tls.join(format!("{}.crt", kind.name));
        let key = tls.join(format!("{}.key", kind.name));
        std::fs::copy(certs.join(format!("{}.crt", kind.name)), &crt).unwrap();
        std::fs::copy(certs.join(format!("{}.key", kind.name)), &key).unwrap();
        if let Some((uid, gid)) = cluster_owner().unwrap() {
            for file in [&crt, &key] {
                std::os::unix::fs::chown(file, Some(uid), Some(gid)).unwrap();
            }
        }
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let admin = connect(&self.server.socket_conninfo("postgres", "postgres")).await;
        for sql in [
            format!("ALTER SYSTEM SET ssl_cert_file = '{}'", crt.display()),
            format!("ALTER SYSTEM SET ssl_key_file = '{}'", key.display()),
            "SELECT pg_reload_conf()".to_string(),
        ] {
            admin.simple_query(&sql).await.unwrap();
        }
        // The reload is asynchronous: wait until the chain psql trusts is the new one.
        let probe = self.conninfo(&[
            ("host", "localhost"),
            ("sslmode", "verify-ca"),
            ("sslrootcert", path(root)),
        ]);
        let started = Instant::now();
        loop {
            let run = psql(&probe, home);
            if run.code == 0 {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "the server never served {kind:?}\n{run}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn conninfo(&self, settings: &[(&str, &str)]) -> String {
        let mut info = format!(
            "port={} user={} dbname={}",
            self.server.port, self.user, self.dbname
        );
        for (key, value) in settings {
            info.push_str(&format!(" {key}='{value}'"));
        }
        info
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

fn psql(conninfo: &str, home: &Path) -> Run {
    assert!(
        Path::new(PSQL).exists(),
        "{PSQL} is missing: apt-get install postgresql-client, or run scripts/test, which installs it"
    );
    Cmd::of(PSQL)
        .env("HOME", home)
        .env("PGPASSWORD", PASSWORD)
        .args(["-X", "-w", "-A", "-t", "-c", "select 1", "-d", conninfo])
        .timeout(Duration::from_secs(30))
        .run()
}

fn idemctl(conninfo: &str, home: &Path) -> Run {
    Cmd::new()
        .env("HOME", home)
        .env("PGPASSWORD", PASSWORD)
        .args([
            "stats",
            "-o",
            "json",
            "--connect-timeout",
            "5s",
            "-d",
            conninfo,
        ])
        .run()
}

/// psql's reason for a refusal, the part idemctl must say as well: the first line after
/// "failed: ", without libpq's "SSL error: " prefix.
fn psql_reason(run: &Run) -> String {
    let line = run
        .stderr
        .lines()
        .rfind(|l| l.contains("failed: "))
        .unwrap_or(&run.stderr);
    let reason = line.rsplit_once("failed: ").map_or(line, |(_, r)| r);
    reason
        .trim_start_matches("FATAL:  ")
        .trim_start_matches("SSL error: ")
        .trim_end()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_certificate_kind_under_every_sslmode_matches_psql() {
    let server = Server::start().await;
    let certs = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    make_roots(certs.path());
    let other = certs.path().join("other-ca.crt");
    let mut table = Vec::new();
    let mut mismatches = Vec::new();
    for kind in KINDS {
        let root = make_certificate(certs.path(), kind);
        server.serve(certs.path(), kind, &root, home.path()).await;
        let roots = [
            ("no root", None),
            ("right root", Some(&root)),
            ("other root", Some(&other)),
        ];
        for sslmode in [
            None,
            Some("disable"),
            Some("allow"),
            Some("prefer"),
            Some("require"),
        ]
        .into_iter()
        .chain([Some("verify-ca"), Some("verify-full")])
        {
            // A root does not matter without TLS, the address only to verify-full's host check.
            let roots = if sslmode == Some("disable") {
                &roots[..1]
            } else {
                &roots[..]
            };
            // verify-full also with only an address, which leaves libpq no host name to check.
            let hosts: &[(&str, &str)] = if sslmode == Some("verify-full") {
                &[
                    ("host", "localhost"),
                    ("host", "127.0.0.1"),
                    ("hostaddr", "127.0.0.1"),
                ]
            } else {
                &[("host", "localhost")]
            };
            for &(root_name, root) in roots {
                for &(given, host) in hosts {
                    let mut settings = vec![(given, host)];
                    settings.extend(sslmode.map(|m| ("sslmode", m)));
                    settings.extend(root.map(|r| ("sslrootcert", path(r))));
                    let conninfo = server.conninfo(&settings);
                    let theirs = psql(&conninfo, home.path());
                    let ours = idemctl(&conninfo, home.path());
                    let case = format!(
                        "{} sslmode={} {root_name} {given}={host}",
                        kind.name,
                        sslmode.unwrap_or("(default)")
                    );
                    let verdict = |ok: bool| if ok { "connects" } else { "refused" };
                    table.push(format!(
                        "{case}: psql {}, idemctl {}",
                        verdict(theirs.code == 0),
                        verdict(ours.code == 0)
                    ));
                    if (theirs.code == 0) != (ours.code == 0) {
                        mismatches.push(format!("{case}\npsql: {theirs}\nidemctl: {ours}"));
                    } else if theirs.code != 0 {
                        // Under prefer (and allow), a failed certificate check is followed by a
                        // try without TLS, refused here by pg_hba.conf: the same for both.
                        let reason = psql_reason(&theirs);
                        if !ours.stderr.contains(&reason) {
                            mismatches.push(format!(
                                "{case}: idemctl does not say psql's reason {reason:?}\nidemctl: {ours}"
                            ));
                        }
                        assert_eq!(ours.stderr.lines().count(), 1, "{case}\n{ours}");
                    } else {
                        assert_eq!(ours.json()["table"], "public.idempotency_keys", "{ours}");
                    }
                }
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "idemctl and psql disagree:\n{}\n\nall cases:\n{}",
        mismatches.join("\n\n"),
        table.join("\n")
    );
    // What the field needs most: every kind connects under the default sslmode without a root.
    for kind in KINDS {
        let want = format!(
            "{} sslmode=(default) no root host=localhost: psql connects, idemctl connects",
            kind.name
        );
        assert!(table.contains(&want), "{want}\n{}", table.join("\n"));
    }
}

/// A CA-signed certificate naming no host (no subjectAltName, no Common Name): verify-full has
/// nothing to compare the host with, and both psql and idemctl refuse it in libpq's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_refuses_a_certificate_that_names_no_host_as_psql_does() {
    let server = Server::start().await;
    let certs = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let dir = certs.path();
    make_roots(dir);
    let kind = Kind {
        name: "nameless",
        version: 3,
        ca_signed: true,
        cn: "",
    };
    new_key(dir, "nameless.key");
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            "nameless.key",
            "-subj",
            "/O=idemctl nameless server",
            "-out",
            "nameless.csr",
        ],
    );
    std::fs::write(dir.join("plain.cnf"), "basicConstraints = CA:FALSE\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "nameless.csr",
            "-days",
            "30",
            "-out",
            "nameless.crt",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "plain.cnf",
        ],
    );
    let text = Cmd::of("openssl")
        .args(["x509", "-noout", "-text", "-in", "nameless.crt"])
        .current_dir(dir)
        .run();
    assert!(
        text.stdout
            .contains("Subject: O = idemctl nameless server\n")
            && !text.stdout.contains("Subject Alternative Name"),
        "the certificate must name no host\n{text}"
    );
    let root = dir.join("ca.crt");
    server.serve(dir, kind, &root, home.path()).await;
    let conninfo = server.conninfo(&[
        ("host", "localhost"),
        ("sslmode", "verify-full"),
        ("sslrootcert", path(&root)),
    ]);
    let theirs = psql(&conninfo, home.path());
    assert_eq!(
        psql_reason(&theirs),
        "could not get server's host name from server certificate",
        "{theirs}"
    );
    idemctl(&conninfo, home.path()).assert_error(
        5,
        &format!(
            "cannot connect to user \"matrix_user\" at host \"localhost\" port {}, database \
             \"matrix_db\": error performing TLS handshake: could not get server's host name from \
             server certificate; connect with a host name the certificate names, or use \
             sslmode=verify-ca",
            server.server.port
        ),
    );
}

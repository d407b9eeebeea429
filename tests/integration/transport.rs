//! Connecting over TCP the way libpq does, against real servers: every sslmode against a server with
//! a self-signed CA, one that demands TLS and one without TLS; passwords from PGPASSWORD and
//! ~/.pgpass; and each way a connection fails, with its exit code, one line on stderr, within
//! --connect-timeout, and never the password in any output.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use crate::fixtures::Schema;
use crate::support::tcp::{PASSWORD, TcpDb, Transport};
use crate::support::{Cmd, Run};

/// Generous for a local server; the failure tests that are about timing set their own.
const CONNECT_TIMEOUT: &str = "5s";

/// A run that reached the server: `stats -o json` on the test's table.
#[track_caller]
fn assert_stats_ok(run: &Run) {
    run.assert_code(0).assert_stderr_empty();
    assert_eq!(run.json()["table"], "public.idempotency_keys", "{run}");
    assert_no_password(run);
}

/// A failure: the exit code, exactly one line on stderr holding every `needle`, nothing on stdout,
/// no password anywhere.
#[track_caller]
fn assert_fails(run: &Run, code: i32, needles: &[&str]) {
    run.assert_code(code).assert_stdout_empty();
    assert_eq!(run.stderr.lines().count(), 1, "one line expected\n{run}");
    assert!(run.stderr.starts_with("idemctl: "), "{run}");
    for needle in needles {
        run.assert_stderr_contains(needle);
    }
    assert_no_password(run);
}

#[track_caller]
fn assert_no_password(run: &Run) {
    for secret in [PASSWORD, "Tr0ub4dor"] {
        assert!(
            !run.stdout.contains(secret) && !run.stderr.contains(secret),
            "the password leaked\n{run}"
        );
    }
}

/// A database on the server `transport` asks for, holding the reference table.
async fn db_with_table(transport: Transport) -> TcpDb {
    let db = TcpDb::new(transport).await;
    db.exec(Schema::Corrected.ddl()).await;
    db
}

/// `idemctl stats -o json` with the password in PGPASSWORD and `conninfo` as `-d`.
fn stats(db: &TcpDb, conninfo: &str) -> Cmd {
    db.idemctl().env("PGPASSWORD", PASSWORD).args([
        "stats",
        "-o",
        "json",
        "--connect-timeout",
        CONNECT_TIMEOUT,
        "-d",
        conninfo,
    ])
}

fn path(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// Install `ca` as the libpq default root certificate file, `~/.postgresql/root.crt`.
fn install_default_root(db: &TcpDb, ca: &Path) {
    let dir = db.home().join(".postgresql");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(ca, dir.join("root.crt")).unwrap();
}

/// A host name the server certificate does not carry, reaching the server through hostaddr.
const OTHER_NAME: &[(&str, &str)] = &[("host", "db.example.test"), ("hostaddr", "127.0.0.1")];

fn with<'a>(base: &[(&'a str, &'a str)], more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    base.iter().chain(more).copied().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_succeeds_with_the_ca_for_a_name_or_address_in_the_certificate() {
    // This role may only use TLS, so getting in proves the session was encrypted.
    let db = db_with_table(Transport::TlsRequired).await;
    let ca = db.ca_cert();
    for host in ["localhost", "127.0.0.1"] {
        let conninfo = db.conninfo(&[
            ("host", host),
            ("sslmode", "verify-full"),
            ("sslrootcert", path(&ca)),
        ]);
        assert_stats_ok(&stats(&db, &conninfo).run());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_finds_the_ca_in_the_default_root_file() {
    let db = db_with_table(Transport::TlsRequired).await;
    install_default_root(&db, &db.ca_cert());
    let conninfo = db.conninfo(&[("sslmode", "verify-full")]);
    assert_stats_ok(&stats(&db, &conninfo).run());
}

/// Like libpq, a verifying sslmode without any root certificate is refused before connecting: it
/// is a configuration mistake (exit 2), with libpq's advice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_without_a_root_certificate_is_refused_before_connecting() {
    let db = TcpDb::new(Transport::TlsRequired).await;
    let conninfo = db.conninfo(&[("sslmode", "verify-full")]);
    let run = stats(&db, &conninfo).run();
    let default_root = db.home().join(".postgresql/root.crt");
    assert_fails(
        &run,
        2,
        &[
            &format!(
                "root certificate file \"{}\" does not exist",
                default_root.display()
            ),
            "sslrootcert=system",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_rejects_a_certificate_from_another_ca() {
    let db = TcpDb::new(Transport::TlsRequired).await;
    let conninfo = db.conninfo(&[
        ("sslmode", "verify-full"),
        ("sslrootcert", path(&db.other_ca_cert())),
    ]);
    let run = stats(&db, &conninfo).run();
    run.assert_error(
        5,
        &format!(
            "cannot connect to user {:?} at host \"localhost\" port {}, database {:?}: error performing TLS handshake: certificate verify failed: unable to get local issuer certificate; sslrootcert (or ~/.postgresql/root.crt) must hold the root certificate that signed the server's certificate",
            db.user,
            db.port(),
            db.dbname
        ),
    );
    assert!(run.elapsed < Duration::from_secs(5), "not retried\n{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_rejects_a_host_name_the_certificate_does_not_name() {
    let db = TcpDb::new(Transport::TlsRequired).await;
    let ca = db.ca_cert();
    let conninfo = db.conninfo(&with(
        OTHER_NAME,
        &[("sslmode", "verify-full"), ("sslrootcert", path(&ca))],
    ));
    let run = stats(&db, &conninfo).run();
    run.assert_error(
        5,
        &format!(
            "cannot connect to user {:?} at host \"db.example.test\" (address 127.0.0.1) port {}, database {:?}: error performing TLS handshake: server certificate for \"localhost\" (and 2 other names) does not match host name \"db.example.test\"; connect with a host name the certificate names, or use sslmode=verify-ca",
            db.user,
            db.port(),
            db.dbname
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_ca_checks_the_chain_but_not_the_host_name() {
    let db = db_with_table(Transport::TlsRequired).await;
    let (ca, other) = (db.ca_cert(), db.other_ca_cert());
    let mismatch = |root: &Path| {
        db.conninfo(&with(
            OTHER_NAME,
            &[("sslmode", "verify-ca"), ("sslrootcert", path(root))],
        ))
    };
    assert_stats_ok(&stats(&db, &mismatch(&ca)).run());
    let run = stats(&db, &mismatch(&other)).run();
    assert_fails(
        &run,
        5,
        &["certificate verify failed: unable to get local issuer certificate"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_encrypts_without_checking_the_certificate() {
    let db = db_with_table(Transport::TlsRequired).await;
    // No root file anywhere: libpq's require then accepts any certificate, for any name.
    for settings in [&[][..], OTHER_NAME] {
        let conninfo = db.conninfo(&with(settings, &[("sslmode", "require")]));
        assert_stats_ok(&stats(&db, &conninfo).run());
    }
}

/// libpq back-compat: with a root certificate file (given, or at ~/.postgresql/root.crt),
/// `require` verifies the chain like `verify-ca`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_with_a_root_certificate_checks_the_chain_like_verify_ca() {
    let db = db_with_table(Transport::TlsRequired).await;
    let (ca, other) = (db.ca_cert(), db.other_ca_cert());
    let given = |root: &Path| {
        db.conninfo(&with(
            OTHER_NAME,
            &[("sslmode", "require"), ("sslrootcert", path(root))],
        ))
    };
    assert_stats_ok(&stats(&db, &given(&ca)).run());
    assert_fails(
        &stats(&db, &given(&other)).run(),
        5,
        &["certificate verify failed"],
    );

    install_default_root(&db, &other);
    let conninfo = db.conninfo(&[("sslmode", "require")]);
    assert_fails(
        &stats(&db, &conninfo).run(),
        5,
        &["certificate verify failed"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_and_allow_use_plaintext_when_the_server_has_no_tls() {
    let db = db_with_table(Transport::NoTls).await;
    // No sslmode at all means prefer.
    for sslmode in [None, Some("prefer"), Some("allow")] {
        let settings: Vec<(&str, &str)> = sslmode.map(|m| ("sslmode", m)).into_iter().collect();
        assert_stats_ok(&stats(&db, &db.conninfo(&settings)).run());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_is_refused_by_a_server_that_requires_tls() {
    let optional = db_with_table(Transport::TlsOptional).await;
    let required = db_with_table(Transport::TlsRequired).await;
    // Where TLS is demanded, the modes that may use it get in (allow as well: refused without TLS,
    // it retries with TLS, as libpq does)...
    for sslmode in ["allow", "prefer"] {
        let conninfo = required.conninfo(&[("sslmode", sslmode)]);
        assert_stats_ok(&stats(&required, &conninfo).run());
    }
    // ...the same server takes plaintext from a role pg_hba.conf allows it for...
    let conninfo = optional.conninfo(&[("sslmode", "disable")]);
    assert_stats_ok(&stats(&optional, &conninfo).run());
    // ...and refuses it, in its own words, where only hostssl lines apply.
    let conninfo = required.conninfo(&[("sslmode", "disable")]);
    let run = stats(&required, &conninfo).run();
    assert_fails(&run, 5, &["no pg_hba.conf entry", &required.user]);
    // The server's reason: "no encryption" since PostgreSQL 14, "SSL off" on 13.
    assert!(
        run.stderr.contains("no encryption") || run.stderr.contains("SSL off"),
        "the refusal does not say the connection was unencrypted\n{run}"
    );
    assert!(run.elapsed < Duration::from_secs(5), "not retried\n{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_and_verify_full_fail_against_a_server_without_tls() {
    let db = TcpDb::new(Transport::NoTls).await;
    // The TLS server's CA: a root file exists, so only the server's answer can fail this.
    let ca = crate::support::tcp::server(true).ca_cert();
    for settings in [
        vec![("sslmode", "require")],
        vec![("sslmode", "verify-full"), ("sslrootcert", path(&ca))],
    ] {
        let run = stats(&db, &db.conninfo(&settings)).run();
        assert_fails(&run, 5, &["cannot connect to", "does not support TLS"]);
        assert!(run.elapsed < Duration::from_secs(5), "not retried\n{run}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_pgpassword() {
    let db = db_with_table(Transport::TlsOptional).await;
    let conninfo = db.conninfo(&[]);
    assert_stats_ok(&stats(&db, &conninfo).run());
    // Without it, SCRAM has nothing to answer with.
    let run = stats(&db, &conninfo).env_remove("PGPASSWORD").run();
    assert_fails(&run, 5, &["asks for a password and none was given"]);
}

/// A `~/.pgpass` of the child's home: a line that does not match first, then the right one.
fn write_pgpass(db: &TcpDb, mode: u32) {
    let file = db.home().join(".pgpass");
    let text = format!(
        "# test\nlocalhost:{port}:other_db:{user}:wrong\nlocalhost:{port}:{db}:{user}:{PASSWORD}\n",
        port = db.port(),
        db = db.dbname,
        user = db.user
    );
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_pgpass() {
    let db = db_with_table(Transport::TlsOptional).await;
    write_pgpass(&db, 0o600);
    let run = stats(&db, &db.conninfo(&[])).env_remove("PGPASSWORD").run();
    assert_stats_ok(&run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pgpass_others_can_read_is_ignored_with_a_warning() {
    let db = db_with_table(Transport::TlsOptional).await;
    write_pgpass(&db, 0o644);
    let run = stats(&db, &db.conninfo(&[])).env_remove("PGPASSWORD").run();
    run.assert_code(5).assert_stdout_empty();
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "a warning, then the error\n{run}");
    assert!(
        lines[0].starts_with("idemctl: warning: password file")
            && lines[0].contains(".pgpass")
            && lines[0].contains("group or world access"),
        "{run}"
    );
    assert!(
        lines[1].contains("asks for a password and none was given"),
        "{run}"
    );
    assert_no_password(&run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_with_the_servers_message() {
    let db = TcpDb::new(Transport::TlsOptional).await;
    let wrong = "Tr0ub4dor&3-wrong";
    let run = stats(&db, &db.conninfo(&[])).env("PGPASSWORD", wrong).run();
    let refused = format!("password authentication failed for user \"{}\"", db.user);
    assert_fails(&run, 5, &[&refused]);
    assert!(!run.stderr.contains(wrong), "{run}");
    assert!(run.elapsed < Duration::from_secs(5), "not retried\n{run}");

    // The same password inside a URI in the environment: still never echoed.
    let uri = format!(
        "postgresql://{}:Tr0ub4dor%263-wrong@localhost:{}/{}",
        db.user,
        db.port(),
        db.dbname
    );
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", &uri)
        .args(["stats", "--connect-timeout", CONNECT_TIMEOUT])
        .run();
    assert_fails(&run, 5, &[&refused]);
    assert!(!run.stderr.contains(wrong), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_database_fails_with_the_servers_message() {
    let db = TcpDb::new(Transport::TlsOptional).await;
    let missing = format!("{}_missing", db.dbname);
    let run = stats(&db, &db.conninfo(&[("dbname", &missing)])).run();
    assert_fails(
        &run,
        5,
        &[&format!("database \"{missing}\" does not exist")],
    );
}

/// A port that was free a moment ago: connections are refused, retried, then reported.
#[test]
fn a_refused_connection_is_retried_until_the_connect_timeout() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let conninfo = format!("host=127.0.0.1 port={port} user=app dbname=app");
    let run = Cmd::new()
        .env("PGPASSWORD", PASSWORD)
        .args(["stats", "--connect-timeout", "2s", "-d", &conninfo])
        .run();
    assert_fails(
        &run,
        5,
        &[
            &format!("host \"127.0.0.1\" port {port}"),
            "connection refused",
            "retried",
        ],
    );
    assert!(
        run.elapsed >= Duration::from_millis(1500) && run.elapsed < Duration::from_millis(3500),
        "gave up after {:?}, not at --connect-timeout 2s\n{run}",
        run.elapsed
    );
}

/// A socket that accepts TCP connections (the kernel's backlog) but never says a word, like a
/// hung server or a black-holing proxy: idemctl gives up at --connect-timeout.
#[test]
fn a_server_that_never_answers_times_out() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let conninfo = format!("host=127.0.0.1 port={port} user=app dbname=app");
    let mut child = Cmd::new()
        .env("PGPASSWORD", PASSWORD)
        .args(["stats", "--connect-timeout", "2s", "-d", &conninfo])
        .spawn();
    // What `ps` shows of the running process: no password (idemctl got it from the environment and
    // starts no other program that could be given it).
    std::thread::sleep(Duration::from_millis(300));
    if !child.has_exited() {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.pid())).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(cmdline.contains("stats"), "{cmdline:?}");
        assert!(!cmdline.contains("Tr0ub4dor"), "{cmdline:?}");
    }
    let run = child.wait();
    assert_fails(&run, 5, &[&format!("port {port}"), "timed out after 2s"]);
    assert!(
        run.elapsed >= Duration::from_millis(1800) && run.elapsed < Duration::from_millis(4000),
        "gave up after {:?}, not at --connect-timeout 2s\n{run}",
        run.elapsed
    );
    drop(silent);
}

/// libpq never uses TLS on a Unix socket, also when the host list names TCP hosts too and the
/// sslmode (or sslnegotiation=direct) demands TLS for them: psql connects over the socket here,
/// and so must idemctl, with and without require_auth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_in_a_host_list_is_used_without_tls_whatever_the_sslmode() {
    let db = crate::support::TestDb::new().await;
    db.exec(Schema::Corrected.ddl()).await;
    let dir = db
        .socket_dir()
        .expect("this test needs the server's unix socket (the local test cluster)");
    let hosts = format!("{},unreachable.invalid", dir.display());
    for extra in [
        &[("sslmode", "require")][..],
        &[("sslmode", "verify-full"), ("sslrootcert", "system")][..],
        &[("sslmode", "require"), ("sslnegotiation", "direct")][..],
        &[("sslmode", "require"), ("require_auth", "none")][..],
        &[
            ("sslmode", "require"),
            ("sslnegotiation", "direct"),
            ("load_balance_hosts", "disable"),
        ][..],
    ] {
        let mut settings = vec![("host", hosts.as_str())];
        settings.extend_from_slice(extra);
        let url = db.url_with(&settings);
        let ours = db
            .idemctl()
            .args(["stats", "-o", "json", "--connect-timeout", "5s", "-d", &url])
            .run();
        assert_stats_ok(&ours);
        // psql 15 knows neither sslnegotiation nor require_auth; the rest it must agree with.
        if !url.contains("sslnegotiation") && !url.contains("require_auth") {
            let theirs = Cmd::of("/usr/bin/psql")
                .args(["-X", "-w", "-A", "-t", "-c", "select 1", "-d", &url])
                .timeout(Duration::from_secs(30))
                .run();
            assert_eq!(theirs.code, 0, "psql must connect too\n{theirs}");
        }
    }
    // Only the socket, with direct negotiation: no TLS at all, as libpq 17.
    let url = db.url_with(&[
        ("host", &dir.display().to_string()),
        ("sslmode", "require"),
        ("sslnegotiation", "direct"),
    ]);
    assert_stats_ok(
        &db.idemctl()
            .args(["stats", "-o", "json", "--connect-timeout", "5s", "-d", &url])
            .run(),
    );
}

/// psql on the same conninfo and home directory, with the password in PGPASSWORD.
fn psql(db: &TcpDb, conninfo: &str) -> Run {
    Cmd::of("/usr/bin/psql")
        .env("HOME", db.home())
        .env("PGPASSWORD", PASSWORD)
        .args([
            "-X",
            "-w",
            "-A",
            "-t",
            "-c",
            "select ssl from pg_stat_ssl where pid = pg_backend_pid()",
            "-d",
            conninfo,
        ])
        .timeout(Duration::from_secs(30))
        .run()
}

/// libpq: under `prefer` (the default) and `allow`, a root certificate file that does not verify
/// the server's certificate fails the TLS handshake, and libpq tries again without TLS ("if
/// sslmode is prefer then do a non-SSL retry"). psql then connects in plaintext; so does idemctl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_and_allow_fall_back_to_plaintext_when_the_root_does_not_verify_like_psql() {
    let db = db_with_table(Transport::TlsOptional).await;
    let other = db.other_ca_cert();
    for sslmode in [None, Some("prefer"), Some("allow")] {
        let mut settings = vec![("sslrootcert", path(&other))];
        settings.extend(sslmode.map(|m| ("sslmode", m)));
        let conninfo = db.conninfo(&settings);
        let theirs = psql(&db, &conninfo);
        assert_eq!((theirs.code, theirs.stdout.trim()), (0, "f"), "{theirs}");
        assert_stats_ok(&stats(&db, &conninfo).run());
    }
    // The same with the root in ~/.postgresql/root.crt.
    install_default_root(&db, &other);
    let conninfo = db.conninfo(&[]);
    let theirs = psql(&db, &conninfo);
    assert_eq!((theirs.code, theirs.stdout.trim()), (0, "f"), "{theirs}");
    assert_stats_ok(&stats(&db, &conninfo).run());
    // require does not fall back.
    let conninfo = db.conninfo(&[("sslmode", "require")]);
    assert_ne!(psql(&db, &conninfo).code, 0);
    assert_fails(
        &stats(&db, &conninfo).run(),
        5,
        &["certificate verify failed"],
    );
}

/// libpq retries once with the other transport when the server answers the startup or
/// authentication with an error: under `prefer` (the default) without TLS after a refusal over TLS
/// (only `hostnossl` lines admit the role), under `allow` with TLS after a refusal without (only
/// `hostssl` lines). psql then connects; so does idemctl. `require` and `disable` do not retry and
/// fail with the server's reason, like psql.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_and_allow_retry_with_the_other_transport_after_a_refusal_like_psql() {
    // Getting in as this role proves the session is unencrypted.
    let nossl = db_with_table(Transport::TlsRefused).await;
    for sslmode in [None, Some("prefer")] {
        let settings: Vec<(&str, &str)> = sslmode.map(|m| ("sslmode", m)).into_iter().collect();
        let conninfo = nossl.conninfo(&settings);
        let theirs = psql(&nossl, &conninfo);
        assert_eq!((theirs.code, theirs.stdout.trim()), (0, "f"), "{theirs}");
        assert_stats_ok(&stats(&nossl, &conninfo).run());
    }
    let conninfo = nossl.conninfo(&[("sslmode", "require")]);
    let theirs = psql(&nossl, &conninfo);
    assert_ne!(theirs.code, 0, "{theirs}");
    let rejected = "pg_hba.conf rejects connection";
    assert!(theirs.stderr.contains(rejected), "{theirs}");
    assert_fails(&stats(&nossl, &conninfo).run(), 5, &[rejected, &nossl.user]);

    // Getting in as this role proves the session is encrypted.
    let ssl = db_with_table(Transport::TlsRequired).await;
    let conninfo = ssl.conninfo(&[("sslmode", "allow")]);
    let theirs = psql(&ssl, &conninfo);
    assert_eq!((theirs.code, theirs.stdout.trim()), (0, "t"), "{theirs}");
    assert_stats_ok(&stats(&ssl, &conninfo).run());
    let conninfo = ssl.conninfo(&[("sslmode", "disable")]);
    let theirs = psql(&ssl, &conninfo);
    assert_ne!(theirs.code, 0, "{theirs}");
    let no_entry = "no pg_hba.conf entry";
    assert!(theirs.stderr.contains(no_entry), "{theirs}");
    assert_fails(&stats(&ssl, &conninfo).run(), 5, &[no_entry, &ssl.user]);
}

/// A wrong password under `prefer` or `allow` fails both ways (libpq retries with the other
/// transport after the refusal); psql fails, and idemctl reports the server's reason once, on one
/// line, without the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_refused_both_ways_is_reported_once_like_psql() {
    let db = db_with_table(Transport::TlsOptional).await;
    let wrong = "Tr0ub4dor&3-wrong";
    let reason = format!("password authentication failed for user \"{}\"", db.user);
    for sslmode in ["prefer", "allow"] {
        let conninfo = db.conninfo(&[("sslmode", sslmode)]);
        let theirs = Cmd::of("/usr/bin/psql")
            .env("HOME", db.home())
            .env("PGPASSWORD", wrong)
            .args(["-X", "-w", "-c", "select 1", "-d", &conninfo])
            .timeout(Duration::from_secs(30))
            .run();
        assert_ne!(theirs.code, 0, "{theirs}");
        assert!(theirs.stderr.contains(&reason), "{theirs}");
        let ours = stats(&db, &conninfo).env("PGPASSWORD", wrong).run();
        assert_fails(&ours, 5, &[&reason]);
        assert_eq!(ours.stderr.matches(&reason).count(), 1, "{ours}");
        assert!(!ours.stderr.contains(wrong), "{ours}");
    }
}

/// libpq: once a server has answered and the login fails, the remaining hosts are not tried;
/// psql fails at once with the server's reason. So does idemctl (exit 5, one line, no password),
/// instead of retrying a host that is down for the whole connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_login_on_the_first_host_ends_the_attempt_like_psql() {
    let db = db_with_table(Transport::NoTls).await;
    let down = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ports = format!("{},{down}", db.port());
    let conninfo = db.conninfo(&[
        ("host", "localhost,localhost"),
        ("port", &ports),
        ("password", "wrong-password"),
    ]);
    let theirs = psql(&db, &conninfo);
    assert_ne!(theirs.code, 0, "{theirs}");
    let reason = format!("password authentication failed for user \"{}\"", db.user);
    assert!(theirs.stderr.contains(&reason), "{theirs}");
    let ours = db
        .idemctl()
        .args([
            "stats",
            "-o",
            "json",
            "--connect-timeout",
            "10s",
            "-d",
            &conninfo,
        ])
        .run();
    assert_fails(&ours, 5, &[&reason]);
    assert!(!ours.stderr.contains("wrong-password"), "{ours}");
    assert!(
        ours.elapsed < Duration::from_secs(3),
        "the down host was retried after the failed login\n{ours}"
    );
}

/// libpq refuses an empty value of an enumerated keyword (`invalid sslmode value: ""`) instead of
/// taking the default; psql 15 for its keys, idemctl the same way, exit 2, before connecting.
/// (`load_balance_hosts` and `sslnegotiation`, libpq 16/17 keys psql 15 does not know, too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_values_of_enumerated_keywords_are_refused_like_psql() {
    let db = db_with_table(Transport::NoTls).await;
    for key in [
        "sslmode",
        "target_session_attrs",
        "channel_binding",
        "gssencmode",
        "load_balance_hosts",
        "sslnegotiation",
    ] {
        let conninfo = format!("{} {key}=", db.conninfo(&[]));
        let reason = format!("invalid {key} value: \"\"");
        if !matches!(key, "load_balance_hosts" | "sslnegotiation") {
            let theirs = psql(&db, &conninfo);
            assert_ne!(theirs.code, 0, "{theirs}");
            assert!(theirs.stderr.contains(&reason), "{theirs}");
        }
        assert_fails(&stats(&db, &conninfo).run(), 2, &[&reason]);
    }
    // An empty PGSSLMODE is refused by libpq as well.
    let conninfo = db.conninfo(&[]);
    let theirs = Cmd::of("/usr/bin/psql")
        .env("HOME", db.home())
        .env("PGPASSWORD", PASSWORD)
        .env("PGSSLMODE", "")
        .args(["-X", "-w", "-c", "select 1", "-d", &conninfo])
        .run();
    assert!(
        theirs.stderr.contains("invalid sslmode value: \"\""),
        "{theirs}"
    );
    assert_fails(
        &stats(&db, &conninfo).env("PGSSLMODE", "").run(),
        2,
        &["invalid sslmode value: \"\"", "PGSSLMODE"],
    );
}

/// `channel_binding=require` with `sslmode=disable` can never succeed: psql fails with libpq's
/// "channel binding required, but SSL not in use"; idemctl says so before connecting, exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_binding_require_without_tls_is_refused_before_logging_in() {
    let db = db_with_table(Transport::NoTls).await;
    let conninfo = db.conninfo(&[("sslmode", "disable"), ("channel_binding", "require")]);
    let theirs = psql(&db, &conninfo);
    assert_ne!(theirs.code, 0, "{theirs}");
    let reason = "channel binding required, but SSL not in use";
    assert!(theirs.stderr.contains(reason), "{theirs}");
    assert_fails(
        &stats(&db, &conninfo).run(),
        2,
        &[reason, "sslmode=require"],
    );
}

/// `.pgpass` with only `hostaddr=` (no host): each password file line's host field is matched as
/// psql matches it on the same server, for a `localhost` line and a `127.0.0.1` line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgpass_with_only_hostaddr_matches_the_line_psql_matches() {
    let db = db_with_table(Transport::NoTls).await;
    let conninfo = format!(
        "hostaddr=127.0.0.1 port={} user={} dbname={} sslmode=disable",
        db.port(),
        db.user,
        db.dbname
    );
    let file = db.home().join(".pgpass");
    let mut outcomes = Vec::new();
    for host_field in ["localhost", "127.0.0.1", "*"] {
        let text = format!("{host_field}:{}:*:{}:{PASSWORD}\n", db.port(), db.user);
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let theirs = Cmd::of("/usr/bin/psql")
            .env("HOME", db.home())
            .args(["-X", "-w", "-c", "select 1", "-d", &conninfo])
            .run();
        let ours = stats(&db, &conninfo).env_remove("PGPASSWORD").run();
        assert_eq!(
            theirs.code == 0,
            ours.code == 0,
            "pgpass host field {host_field}: psql and idemctl disagree\n{theirs}\n{ours}"
        );
        if ours.code == 0 {
            assert_stats_ok(&ours);
        } else {
            assert_fails(&ours, 5, &["password"]);
        }
        outcomes.push((host_field, theirs.code == 0));
    }
    // The wildcard line always matches: the comparison above saw a password file in use.
    assert_eq!(outcomes[2], ("*", true), "{outcomes:?}");
}

/// A certificate refused for its host name after a completed handshake: the TLS session is ended
/// properly (close_notify), so the server logs no "Connection reset by peer".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_mismatch_ends_the_tls_session_cleanly() {
    let server = crate::support::tcp::TcpServer::start_private(true);
    let admin = crate::support::pg::connect(&server.socket_conninfo("postgres", "postgres")).await;
    admin
        .batch_execute("CREATE ROLE mismatch LOGIN")
        .await
        .unwrap();
    let conninfo = format!(
        "host=db.example.test hostaddr=127.0.0.1 port={} user=mismatch dbname=postgres \
         sslmode=verify-full sslrootcert={}",
        server.port,
        path(&server.ca_cert())
    );
    for _ in 0..3 {
        let run = Cmd::new()
            .args(["stats", "--connect-timeout", "5s", "-d", &conninfo])
            .run();
        assert_fails(&run, 5, &["does not match host name \"db.example.test\""]);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(
        !log.contains("Connection reset by peer"),
        "the server saw the connection cut:\n{log}"
    );
}

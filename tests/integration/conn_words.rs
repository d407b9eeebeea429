//! The rest of the connection's, the config file's and the in-flight predicate's words, each
//! provoked for real through the binary and asserted whole (the stderr line and the exit code):
//! connection strings and service files idemctl refuses, a password file line it skips, an
//! OpenSSL configuration that leaves TLS no ciphers, listeners that ask for GSSAPI or answer TLS
//! with another ALPN protocol or another host's certificate, a config file's empty scope and
//! broken predicates, the profile `check` names when --profile chose the mapping, and a batch
//! whose table another transaction holds.

use std::net::TcpStream;
use std::path::{Path, PathBuf};

use crate::fixtures::{self, Mix, Schema};
use crate::support::{Cmd, Run, TestDb};

/// `stats` with this connection string and a short connect timeout, in the empty home `home`.
fn stats_with(home: &Path, conninfo: &str) -> Run {
    Cmd::new()
        .env("HOME", home)
        .args([
            "stats",
            "--connect-timeout",
            "1s",
            "--database-url",
            conninfo,
        ])
        .run()
}

/// Values libpq refuses and strings that do not parse: refused before connecting, exit 2, naming
/// the keyword and where it came from, never echoing the string (it may hold a password).
#[test]
fn connection_strings_idemctl_cannot_use_are_refused_in_exact_words() {
    let home = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str)] = &[
        (
            "host=/nonexistent port=1 sslmode=",
            "invalid sslmode value: \"\" in --database-url; use one of disable, allow, prefer, \
             require, verify-ca, verify-full, or leave sslmode out",
        ),
        (
            "host=/nonexistent port=1 hostaddr=db1",
            "invalid hostaddr in --database-url: expected numeric IP addresses",
        ),
        (
            "host=db1,db2,db3 port=5432,5433",
            "invalid port in --database-url: expected one port or one per host (3 hosts, 2 ports)",
        ),
        (
            "host=localhost port=1 sslmode=require sslrootcert=system",
            "sslmode in --database-url: weak sslmode \"require\" may not be used with \
             sslrootcert=system (use \"verify-full\")",
        ),
        (
            "host=/nonexistent port=1 require_auth=kerberos",
            "require_auth in --database-url: invalid require_auth value: \"kerberos\"",
        ),
        (
            "host=/nonexistent port=1 require_auth=!password,md5",
            "require_auth in --database-url: require_auth method \"md5\" cannot be mixed with \
             negative methods",
        ),
        (
            "host=/nonexistent port=1 require_auth=md5,scram-sha-256,md5",
            "require_auth in --database-url: require_auth method \"md5\" is specified more than \
             once",
        ),
        (
            "host=/nonexistent port=1 password",
            "invalid --database-url: missing \"=\" after a keyword at character 26",
        ),
        (
            "host=/nonexistent password='s3cret",
            "invalid --database-url: unterminated quoted string",
        ),
        (
            "postgresql://app:s3cret@db1/app%zz",
            "invalid --database-url: invalid percent-encoding in the URI",
        ),
        (
            "postgresql://app:s3cret@db1/app%00",
            "invalid --database-url: forbidden %00 in the URI",
        ),
    ];
    for (conninfo, message) in cases {
        let run = stats_with(home.path(), conninfo);
        run.assert_error(2, message);
        assert!(!run.stderr.contains("s3cret"), "{run}");
    }
}

/// A service the user's and the system's files do not define, and a service file that is a
/// directory: refused before connecting, exit 2, in libpq's words.
#[test]
fn a_service_that_is_not_defined_or_a_service_file_that_cannot_be_read_is_refused_in_exact_words() {
    let dir = tempfile::tempdir().unwrap();
    let services = dir.path().join("pg_service.conf");
    std::fs::write(&services, "[billing]\nhost=/nonexistent\nport=1\n").unwrap();
    // No system-wide file: an empty directory stands for PGSYSCONFDIR.
    let sysconf = dir.path().join("etc");
    std::fs::create_dir(&sysconf).unwrap();
    let run = |file: &Path, service: &str| {
        Cmd::new()
            .env("HOME", dir.path())
            .env("PGSYSCONFDIR", &sysconf)
            .env("PGSERVICEFILE", file)
            .args(["stats", "--connect-timeout", "1s", "--database-url"])
            .arg(format!("service={service}"))
            .run()
    };
    run(&services, "ledger").assert_error(2, "definition of service \"ledger\" not found");
    run(&sysconf, "billing").assert_error(
        2,
        &format!(
            "service file \"{}\" not found: Is a directory (os error 21)",
            sysconf.display()
        ),
    );
}

/// A password file line with fewer than five fields is skipped with a warning naming the file
/// and the line; the connection goes on (here, to a port nothing listens on).
#[test]
fn a_short_password_file_line_is_skipped_with_a_warning_in_exact_words() {
    use std::os::unix::fs::PermissionsExt as _;
    let home = tempfile::tempdir().unwrap();
    let passfile = home.path().join("pgpass");
    std::fs::write(&passfile, "# hosts\nlocalhost:1:app\n*:*:*:*:s3cret\n").unwrap();
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    let run = stats_with(
        home.path(),
        &format!(
            "host=127.0.0.1 port=1 user=app dbname=app passfile={}",
            passfile.display()
        ),
    );
    run.assert_code(5)
        .assert_stdout_empty()
        .assert_stderr(&format!(
            "idemctl: warning: password file \"{}\" line 2: fewer than 5 colon-separated fields; \
         line skipped\nidemctl: cannot connect to user \"app\" at host \"127.0.0.1\" port 1, \
         database \"app\": connection refused (retried for 1s)\n",
            passfile.display()
        ));
}

/// An OpenSSL configuration (`OPENSSL_CONF`) that activates a provider module which is not there
/// (a hardware module's, uninstalled) leaves OpenSSL no ciphers: TLS cannot be set up, which is
/// said before connecting, exit 2, in OpenSSL's words (as `openssl s_client` says it) and with
/// where to look.
#[test]
fn an_openssl_configuration_without_ciphers_is_refused_in_exact_words() {
    let home = tempfile::tempdir().unwrap();
    let conf = home.path().join("openssl.cnf");
    std::fs::write(
        &conf,
        "config_diagnostics = 1\nopenssl_conf = openssl_init\n\n[openssl_init]\n\
         providers = provider_sect\n\n[provider_sect]\nhsm = hsm_sect\n\n[hsm_sect]\n\
         module = /nonexistent/idemctl-test/hsm-provider.so\nactivate = 1\n",
    )
    .unwrap();
    Cmd::new()
        .env("HOME", home.path())
        .env("OPENSSL_CONF", &conf)
        .args(["stats", "--connect-timeout", "1s", "-d"])
        .arg("host=127.0.0.1 port=1 user=app dbname=app sslmode=require")
        .run()
        .assert_error(
            2,
            "cannot set up TLS: library has no ciphers; check the OpenSSL configuration \
             (OPENSSL_CONF, or the system's openssl.cnf)",
        );
}

/// A listener on 127.0.0.1 that runs `script` on every connection it accepts, each in a thread
/// of its own, for as long as the test process lives; returns its port.
fn listener(script: impl Fn(TcpStream) -> std::io::Result<()> + Send + Sync + 'static) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = std::sync::Arc::new(script);
    std::thread::spawn(move || {
        for socket in listener.incoming().flatten() {
            let script = script.clone();
            std::thread::spawn(move || script(socket));
        }
    });
    port
}

/// `cannot connect to user "app" at host "127.0.0.1" port P, database "app"`.
fn cannot_connect(port: u16) -> String {
    format!("cannot connect to user \"app\" at host \"127.0.0.1\" port {port}, database \"app\"")
}

/// `stats` against 127.0.0.1:`port` as user app with `settings`, a password in the environment.
fn stats_at(port: u16, settings: &str) -> Run {
    Cmd::new()
        .env("PGPASSWORD", "not-shown")
        .args(["stats", "--connect-timeout", "2s", "-d"])
        .arg(format!(
            "host=127.0.0.1 port={port} user=app dbname=app {settings}"
        ))
        .run()
}

/// A server that asks for GSSAPI (AuthenticationGSS) where `require_auth` allows only a password:
/// refused before anything is sent, in libpq's words, exit 5.
#[test]
fn a_server_asking_for_gssapi_is_refused_by_require_auth_in_exact_words() {
    use std::io::{Read as _, Write as _};
    let port = listener(|mut s| {
        let mut len = [0u8; 4];
        s.read_exact(&mut len)?;
        let mut startup = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
        s.read_exact(&mut startup)?;
        // AuthenticationGSS: 'R', length 8, code 7.
        s.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 7])?;
        s.shutdown(std::net::Shutdown::Write)?;
        s.read_to_end(&mut Vec::new()).map(drop)
    });
    let run = stats_at(port, "sslmode=disable require_auth=password");
    run.assert_error(
        5,
        &format!(
            "{}: authentication method requirement \"password\" failed: server requested GSSAPI \
             authentication; allow the server's method in require_auth, or change the method the \
             server's pg_hba.conf asks for",
            cannot_connect(port)
        ),
    );
    assert!(!run.stderr.contains("not-shown"), "{run}");
}

/// A port whose listener never accepts and whose backlog is full: the kernel drops further SYNs,
/// so a TCP connect to it neither succeeds nor fails. Kept open as long as the value lives.
fn silent_port() -> (socket2::Socket, Vec<socket2::Socket>, u16) {
    use socket2::{Domain, SockAddr, Socket, Type};
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    listener.bind(&SockAddr::from(any)).unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let port = addr.as_socket().unwrap().port();
    // A backlog of 0 still queues a connection or two: fill it.
    let fillers = (0..3)
        .map(|_| {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            s.set_nonblocking(true).unwrap();
            let _ = s.connect(&addr);
            s
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    (listener, fillers, port)
}

/// A server that never completes the TCP handshake: the attempt's own connect timeout and the
/// whole budget end together, and the line says the budget, whichever timer fired first (exit
/// 5), the same on every run.
#[test]
fn a_connect_that_never_completes_times_out_in_the_same_words_every_time() {
    let (_listener, _fillers, port) = silent_port();
    for _ in 0..3 {
        Cmd::new()
            .args(["stats", "--connect-timeout", "2s", "-d"])
            .arg(format!(
                "host=127.0.0.1 port={port} user=app dbname=app sslmode=disable"
            ))
            .run()
            .assert_error(5, &format!("{}: timed out after 2s", cannot_connect(port)));
    }
}

/// A self-signed certificate (and its key) for the one name `cn`, no subjectAltName, in `dir`.
fn one_name_certificate(dir: &Path, cn: &str) -> (PathBuf, PathBuf) {
    let (crt, key) = (dir.join("one-name.crt"), dir.join("one-name.key"));
    Cmd::of("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "30",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .run()
        .assert_success();
    (crt, key)
}

/// A TLS listener for direct TLS (the ClientHello first) serving `crt`, which selects `alpn`
/// whatever the client offers, completes the handshake and waits for the client to hang up.
fn tls_listener(crt: &Path, key: &Path, alpn: &'static [u8]) -> u16 {
    use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
    let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).unwrap();
    acceptor.set_certificate_chain_file(crt).unwrap();
    acceptor
        .set_private_key_file(key, SslFiletype::PEM)
        .unwrap();
    acceptor.set_alpn_select_callback(move |_, _offered| Ok(alpn));
    let acceptor = acceptor.build();
    listener(move |s| {
        use std::io::Read as _;
        let Ok(mut tls) = acceptor.accept(s) else {
            return Ok(());
        };
        let _ = tls.read_to_end(&mut Vec::new());
        Ok(())
    })
}

/// Direct TLS to a listener that selects an ALPN protocol other than "postgresql", the only one
/// idemctl offers: OpenSSL itself ends the handshake (a protocol the client did not offer is a bad
/// extension), as it does for libpq, exit 5. And verify-full against a certificate for another,
/// single name says which name it carries.
#[test]
fn direct_tls_to_another_protocol_or_another_host_is_refused_in_exact_words() {
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = one_name_certificate(dir.path(), "db.example.test");
    let http = tls_listener(&crt, &key, b"http/1.1");
    stats_at(http, "sslnegotiation=direct sslmode=require").assert_error(
        5,
        &format!(
            "{}: error performing TLS handshake: TLS error: bad extension",
            cannot_connect(http)
        ),
    );
    let postgres = tls_listener(&crt, &key, b"postgresql");
    let root = crt.display();
    stats_at(
        postgres,
        &format!("sslnegotiation=direct sslmode=verify-full sslrootcert={root}"),
    )
    .assert_error(
        5,
        &format!(
            "{}: error performing TLS handshake: server certificate for \"db.example.test\" does \
             not match host name \"127.0.0.1\"; connect with a host name the certificate names, \
             or use sslmode=verify-ca",
            cannot_connect(postgres)
        ),
    );
}

/// `stats` with the config file `text` (written in `dir`) and a conninfo nothing listens on, so a
/// refusal seen was made before connecting; and the file's path as messages show it.
fn with_config(dir: &Path, text: &str) -> (Run, String) {
    let file = dir.join("idemctl.toml");
    std::fs::write(&file, text).unwrap();
    let run = Cmd::new()
        .env(
            "IDEMCTL_DATABASE_URL",
            "host=/nonexistent/idemctl-test port=1 dbname=none connect_timeout=1",
        )
        .arg("--config")
        .arg(&file)
        .arg("stats")
        .run();
    (run, file.display().to_string())
}

/// The words a predicate refusal ends with.
const PREDICATE_FORMS: &str = "write column IS [NOT] NULL, column = 'text' or 42, column [NOT] \
                               IN ('a', 'b'), joined by AND, OR, NOT and parentheses";

/// Each case: an in-flight predicate, and the parser's words for it.
const PREDICATES: &[(&str, &str)] = &[
    ("\"\" = 'x'", "empty quoted column name"),
    ("code = 1.2.3", "`1.2.3` is not a number"),
    ("phase ! 'done'", "unexpected `!`"),
    (
        "(done_at IS NULL OR phase = 'running'",
        "a `(` is not closed",
    ),
    ("phase IN 'running'", "expected `(` after IN"),
    ("phase NOT = 'done'", "expected IN after NOT"),
    (
        "phase 'running'",
        "expected IS, IN or a comparison (=, <>, <, <=, >, >=) after phase, found 'running'",
    ),
    ("   ", "the predicate is empty"),
    (
        "done_at IS NULL locked_at IS NULL",
        "unexpected `locked_at` after a complete predicate",
    ),
];

/// A mapping's empty scope list and predicates the parser refuses: exit 2 before connecting,
/// naming the file and the key.
#[test]
fn an_empty_scope_and_broken_predicates_are_refused_in_exact_words() {
    let dir = tempfile::tempdir().unwrap();
    let (run, file) = with_config(
        dir.path(),
        "[profiles.billing]\nkey = \"request_id\"\ntenant = []\n",
    );
    run.assert_error(
        2,
        &format!(
            "config file {file}: profiles.billing.tenant: expected a column name or a list of them \
             (leave tenant out for a table without one)"
        ),
    );
    for (predicate, error) in PREDICATES {
        let escaped = predicate.replace('\\', "\\\\").replace('"', "\\\"");
        let text = format!(
            "[profiles.billing]\nkey = \"request_id\"\nin_flight.predicate = \"{escaped}\"\n"
        );
        let (run, file) = with_config(dir.path(), &text);
        run.assert_error(
            2,
            &format!(
                "config file {file}: profiles.billing.in_flight.predicate: {error}; \
                 {PREDICATE_FORMS}"
            ),
        );
    }
}

/// `check` names the profile it used and why: a mapping of the file that --profile named is
/// "chosen by name"; the file's only mapping, taken without --profile, is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_a_mapping_was_chosen_by_name() {
    let db = TestDb::new().await;
    db.exec(crate::config_file::JOBS_DDL).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idemctl.toml");
    std::fs::write(&file, crate::config_file::JOBS_CONFIG).unwrap();
    let mapping = format!(
        "jobs: the mapping in config file {}, [profiles.jobs]",
        file.display()
    );
    for (profile, because) in [
        (
            &["--profile", "jobs"][..],
            format!("{mapping}, chosen by name"),
        ),
        (&[], mapping.clone()),
    ] {
        let run = db
            .idemctl()
            .arg("--config")
            .arg(&file)
            .args(profile)
            .args(["-o", "json", "check"])
            .run_async()
            .await;
        let json = run.json();
        assert_eq!(
            fixtures::finding(&json, "profile")["detail"],
            because,
            "{run}"
        );
    }
}

/// A live transaction holding the keys table in SHARE mode (as CREATE INDEX does) lets evict read
/// and lock its rows, but not delete them: the batch waits no longer than lock_timeout, is rolled
/// back, and the run ends with exit 1 saying a transaction or DDL holds the locks; nothing is
/// deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_table_another_transaction_holds_is_rolled_back_in_exact_words() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 20,
        live: 5,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    let before = fixtures::snapshot(&db).await;
    let holder = db.client().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN SHARE MODE")
        .await
        .unwrap();
    let run = db
        .idemctl()
        .args(["evict", "--duty-cycle", "20"])
        .run_async()
        .await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    run.assert_error(
        1,
        "a batch could not get its locks within lock_timeout (a live transaction or DDL holds \
         them): canceling statement due to lock timeout",
    );
    assert_eq!(fixtures::snapshot(&db).await, before);
}

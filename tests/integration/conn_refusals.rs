//! The connection layer's refusals and failures, each asserted exactly (the whole stderr line and
//! the exit code): connection strings idemctl will not use, certificate, key and password files it
//! cannot use, and servers that end or refuse the login. Each is provoked for real: a connection
//! string, a file with the wrong content or kind, a real server, or a tiny hostile listener for
//! what no PostgreSQL server does.

use std::path::Path;

use crate::support::{Cmd, Run};

/// `stats` with this connection string and a short connect timeout, in an empty home directory.
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

/// Keywords idemctl cannot honour and malformed URIs: refused before connecting, exit 2, naming
/// the keyword and where it came from, never echoing the string (it may hold a password).
#[test]
fn unsupported_keywords_and_malformed_uris_are_refused_in_exact_words() {
    let home = tempfile::tempdir().unwrap();
    let nowhere = "host=/nonexistent/idemctl-test port=1";
    let cases: &[(&str, &str)] = &[
        (
            "gssencmode=require",
            "gssencmode in --database-url: GSSAPI encryption is not supported; use sslmode for \
             encryption",
        ),
        (
            "sslcertmode=require",
            "sslcertmode in --database-url: \"require\" is not supported; use allow (the default) \
             or disable",
        ),
        (
            "ssl_max_protocol_version=TLSv1.1",
            "ssl_max_protocol_version in --database-url: TLS versions below TLSv1.2 are not \
             supported",
        ),
        (
            "requirepeer=postgres",
            "requirepeer in --database-url: checking the socket peer's user name is not \
             supported; remove it",
        ),
        (
            "scram_client_key=AAAA",
            "scram_client_key in --database-url: SCRAM key pass-through is not supported; use a \
             password",
        ),
        (
            "oauth_issuer=https://issuer.example",
            "oauth_issuer in --database-url: OAuth authentication is not supported",
        ),
        (
            "oauth_client_id=idemctl",
            "oauth_client_id in --database-url: OAuth authentication is not supported",
        ),
        (
            "replication=database",
            "replication in --database-url: replication connections are not supported",
        ),
        (
            "min_protocol_version=3.2",
            "min_protocol_version in --database-url: only protocol 3.0 is supported",
        ),
    ];
    for (setting, message) in cases {
        stats_with(home.path(), &format!("{nowhere} {setting}")).assert_error(2, message);
    }
    let whole: &[(&str, &str)] = &[
        (
            "host=@idemctl port=1",
            "host in --database-url: abstract Unix sockets (@name) are not supported; use a \
             socket directory",
        ),
        (
            "host=db1,db2 hostaddr=10.0.0.1 port=1",
            "invalid hostaddr in --database-url: expected as many addresses as host names (2)",
        ),
        (
            "host=/nonexistent =s3cret",
            "invalid --database-url: a value without a keyword at character 19",
        ),
        (
            "postgresql://h/db%ff",
            "invalid --database-url: a percent-encoded part of the URI is not valid UTF-8",
        ),
        (
            "postgresql://[::1/db",
            "invalid --database-url: missing \"]\" after an IPv6 host address",
        ),
        (
            "postgresql://[]/db",
            "invalid --database-url: empty IPv6 host address \"[]\"",
        ),
        (
            "postgresql://[::1]x/db",
            "invalid --database-url: unexpected character after an IPv6 host address",
        ),
        (
            "postgresql://h/db?sslmode",
            "invalid --database-url: a URI query parameter without \"=\" (use key=value)",
        ),
        (
            "postgresql://h:1/db?gssencmode=require",
            "gssencmode in --database-url: GSSAPI encryption is not supported; use sslmode for \
             encryption",
        ),
    ];
    for (conninfo, message) in whole {
        stats_with(home.path(), conninfo).assert_error(2, message);
    }
}

/// A keyword from the connection service file is named as coming from there, and a line of the
/// file that is neither a section, a comment nor `key=value` is refused with its number.
#[test]
fn service_file_settings_and_syntax_are_refused_in_exact_words() {
    let dir = tempfile::tempdir().unwrap();
    let services = dir.path().join("pg_service.conf");
    std::fs::write(
        &services,
        "# services\n[gss]\nhost=/nonexistent\ngssencmode=require\n\n[broken]\nhost /nonexistent\n",
    )
    .unwrap();
    let run = |service: &str| {
        Cmd::new()
            .env("HOME", dir.path())
            .env("PGSERVICEFILE", &services)
            .args(["stats", "--connect-timeout", "1s", "--database-url"])
            .arg(format!("service={service}"))
            .run()
    };
    run("gss").assert_error(
        2,
        "gssencmode in the connection service file: GSSAPI encryption is not supported; use \
         sslmode for encryption",
    );
    run("broken").assert_error(
        2,
        &format!(
            "syntax error in service file \"{}\", line 7",
            services.display()
        ),
    );
}

/// The test-only certificates and keys of `src/conn/testdata` (see its README).
fn testdata(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/conn/testdata")
        .join(name)
}

/// A copy of `text` in `dir/name` that only its owner may read (as a key must be).
fn private_file(dir: &Path, name: &str, text: &[u8]) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn openssl(dir: &Path, args: &[&str]) {
    Cmd::of("openssl")
        .args(args)
        .current_dir(dir)
        .run()
        .assert_success();
}

/// Client certificates, keys, root certificates and CRLs that cannot be used are refused before
/// connecting (exit 2) in libpq's words, naming the file and OpenSSL's reason.
#[test]
fn unusable_certificate_key_root_and_crl_files_are_refused_in_exact_words() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    let read = |name: &str| std::fs::read(testdata(name)).unwrap();
    let cert = testdata("client.crt");
    let key = private_file(dir, "client.key", &read("client.key"));
    let other_key = private_file(dir, "server.key", &read("server.key"));
    let garbage = private_file(dir, "garbage.pem", b"not a PEM file\n");
    let directory = dir.join("a-directory");
    std::fs::create_dir(&directory).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&directory, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    openssl(dir, &["genrsa", "-out", "rsa.key", "2048"]);
    let rsa_key = dir.join("rsa.key");
    openssl(
        dir,
        &[
            "pkcs8",
            "-topk8",
            "-in",
            "client.key",
            "-passout",
            "pass:pw",
            "-out",
            "pkcs8.key",
        ],
    );
    openssl(
        dir,
        &[
            "ec",
            "-in",
            "client.key",
            "-des3",
            "-passout",
            "pass:pw",
            "-out",
            "legacy.key",
        ],
    );
    for name in ["rsa.key", "pkcs8.key", "legacy.key"] {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let p = |path: &Path| path.display().to_string();
    let client = |cert: &Path, key: &Path| {
        format!(
            "host=localhost port=1 sslmode=require sslcert={} sslkey={}",
            p(cert),
            p(key)
        )
    };
    let cases: Vec<(String, String)> = vec![
        (
            client(&cert, &directory),
            format!(
                "cannot read private key file \"{}\": Is a directory (os error 21)",
                p(&directory)
            ),
        ),
        (
            client(&cert, &garbage),
            format!(
                "cannot load private key file \"{}\": unsupported",
                p(&garbage)
            ),
        ),
        (
            client(&cert, &dir.join("pkcs8.key")),
            format!(
                "private key file \"{}\" is encrypted, and idemctl cannot decrypt it (sslpassword \
                 is not supported): use an unencrypted key readable only by you (mode 0600)",
                p(&dir.join("pkcs8.key"))
            ),
        ),
        (
            client(&cert, &dir.join("legacy.key")),
            format!(
                "private key file \"{}\" is encrypted, and idemctl cannot decrypt it (sslpassword \
                 is not supported): use an unencrypted key readable only by you (mode 0600)",
                p(&dir.join("legacy.key"))
            ),
        ),
        (
            client(&garbage, &key),
            format!(
                "could not read certificate file \"{}\": no start line: PEM lib",
                p(&garbage)
            ),
        ),
        // A key of the certificate's type and one of another type: the same words.
        (
            client(&cert, &other_key),
            format!(
                "certificate \"{}\" does not match private key file \"{}\"",
                p(&cert),
                p(&other_key)
            ),
        ),
        (
            client(&cert, &rsa_key),
            format!(
                "certificate \"{}\" does not match private key file \"{}\"",
                p(&cert),
                p(&rsa_key)
            ),
        ),
        (
            format!(
                "host=localhost port=1 sslmode=verify-ca sslrootcert={}",
                p(&directory)
            ),
            format!(
                "could not read root certificate file \"{}\": no certificate or crl found",
                p(&directory)
            ),
        ),
        (
            format!(
                "host=localhost port=1 sslmode=verify-ca sslrootcert={} sslcrl={}",
                p(&testdata("ca.crt")),
                p(&garbage)
            ),
            format!(
                "could not load SSL certificate revocation list file \"{}\": no start line: PEM \
                 lib",
                p(&garbage)
            ),
        ),
    ];
    for (conninfo, message) in &cases {
        stats_with(dir, conninfo).assert_error(2, message);
    }
}

/// A user id no line of /etc/passwd names.
fn uid_without_passwd_entry() -> u32 {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let taken: Vec<&str> = passwd.lines().filter_map(|l| l.split(':').nth(2)).collect();
    (4242..)
        .find(|uid: &u32| !taken.contains(&uid.to_string().as_str()))
        .unwrap()
}

/// Without a home directory (no `HOME`, a uid the passwd file does not name) there is no default
/// `~/.postgresql/postgresql.key`: a client certificate without `sslkey` is refused. The uid is
/// given by a user namespace (`unshare --user`), which needs no root.
#[test]
fn a_client_certificate_without_a_key_file_is_refused_in_exact_words() {
    let uid = uid_without_passwd_entry().to_string();
    let conninfo = format!(
        "host=localhost port=1 user=app sslmode=require sslcert={}",
        testdata("client.crt").display()
    );
    let run = Cmd::of("unshare")
        .args([
            "--user",
            &format!("--map-user={uid}"),
            &format!("--map-group={uid}"),
            crate::support::cmd::IDEMCTL,
            "stats",
            "--connect-timeout",
            "1s",
            "--database-url",
            &conninfo,
        ])
        .env_remove("HOME")
        .run();
    assert!(
        !run.stderr.starts_with("unshare:"),
        "this test runs idemctl as uid {uid} in a user namespace, which `unshare --user` could not \
         make here (enable unprivileged user namespaces, or run the tests as root)\n{run}"
    );
    run.assert_error(
        2,
        "certificate present, but no private key file (set sslkey)",
    );
}

/// A password file that is a directory or cannot be reached is skipped with a warning naming it;
/// then a server that asks for a password gets none, and the failure says where one goes (exit
/// 5). A file giving the hosts of the list different passwords is used for the first host that
/// has one, with a warning naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_file_warnings_and_a_missing_password_are_worded_exactly() {
    use crate::support::tcp::{PASSWORD, TcpDb, Transport};
    let db = TcpDb::new(Transport::NoTls).await;
    db.exec(crate::fixtures::Schema::Corrected.ddl()).await;
    let port = db.port();
    let target = format!(
        "user \"{}\" at host \"localhost\" port {port}, database \"{}\"",
        db.user, db.dbname
    );
    let stats = |passfile: &Path, hosts: &str| {
        db.idemctl()
            .args(["stats", "-o", "json", "--connect-timeout", "5s", "-d"])
            .arg(db.conninfo(&[("host", hosts), ("passfile", passfile.to_str().unwrap())]))
            .run()
    };
    let missing = format!(
        "idemctl: cannot connect to {target}: the server asks for a password and none was given \
         (set PGPASSWORD, add a ~/.pgpass line, or put it in the URL)\n"
    );
    let directory = db.home().join("pgpass-dir");
    std::fs::create_dir(&directory).unwrap();
    stats(&directory, "localhost")
        .assert_code(5)
        .assert_stdout_empty()
        .assert_stderr(&format!(
            "idemctl: warning: password file \"{}\" is not a plain file; ignoring it\n{missing}",
            directory.display()
        ));
    let plain = private_file(db.home(), "plain", b"");
    let beyond = plain.join("pgpass");
    stats(&beyond, "localhost")
        .assert_code(5)
        .assert_stdout_empty()
        .assert_stderr(&format!(
            "idemctl: warning: cannot read password file \"{}\": Not a directory (os error 20); \
             ignoring it\n{missing}",
            beyond.display()
        ));
    let differing = private_file(
        db.home(),
        "differing",
        format!("localhost:{port}:*:*:{PASSWORD}\n127.0.0.1:{port}:*:*:another-password\n")
            .as_bytes(),
    );
    let run = stats(&differing, "localhost,127.0.0.1");
    run.assert_code(0).assert_stderr(&format!(
        "idemctl: warning: password file \"{}\" has different passwords for different hosts; \
         using the one for host \"localhost\" port {port}\n",
        differing.display()
    ));
    assert!(!run.stderr.contains(PASSWORD) && !run.stdout.contains(PASSWORD));
}

/// A server whose session does not fit `target_session_attrs` is refused with what to change
/// (exit 5): a primary for `read-only` and for `standby`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_does_not_fit_target_session_attrs_is_refused_in_exact_words() {
    let db = crate::support::TestDb::new().await;
    let conninfo = |attrs: &str| {
        let url = db.url_with(&[("target_session_attrs", attrs)]);
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", url)
            .args(["stats", "--connect-timeout", "5s"])
    };
    let prefix = format!("cannot connect to {}", socket_target(&db.url()));
    let read_only = conninfo("read-only").run_async().await;
    read_only.assert_error(
        5,
        &format!(
            "{}: session is not read-only (target_session_attrs=read-only): list a standby (or a \
             read-only role's server), or change target_session_attrs",
            prefix
        ),
    );
    let standby = conninfo("standby").run_async().await;
    standby.assert_error(
        5,
        &format!(
            "{}: server is not in hot standby mode (target_session_attrs=standby): list a \
             standby among the hosts, or use target_session_attrs=prefer-standby",
            prefix
        ),
    );
}

/// A listener on 127.0.0.1 that runs `script` on every connection it accepts, each in a thread
/// of its own, for as long as the test process lives; returns its port.
fn hostile(script: fn(&mut std::net::TcpStream) -> std::io::Result<()>) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut socket in listener.incoming().flatten() {
            std::thread::spawn(move || script(&mut socket));
        }
    });
    port
}

/// Read one startup packet; whether it was an SSLRequest.
fn read_startup(s: &mut std::net::TcpStream) -> std::io::Result<bool> {
    use std::io::Read as _;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
    s.read_exact(&mut body)?;
    Ok(body.starts_with(&80_877_103u32.to_be_bytes()))
}

/// Write one backend message.
fn send(s: &mut std::net::TcpStream, kind: u8, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut message = vec![kind];
    message.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    message.extend_from_slice(body);
    s.write_all(&message)
}

/// Read one frontend message (after the startup packet); its type.
fn read_message(s: &mut std::net::TcpStream) -> std::io::Result<u8> {
    use std::io::Read as _;
    let mut head = [0u8; 5];
    s.read_exact(&mut head)?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut body = vec![0u8; len.saturating_sub(4)];
    s.read_exact(&mut body)?;
    Ok(head[0])
}

/// The startup (no TLS asked) answered as a trusting server does: in, and ready for a query.
fn log_in(s: &mut std::net::TcpStream) -> std::io::Result<()> {
    read_startup(s)?;
    send(s, b'R', &0u32.to_be_bytes())?;
    for (name, value) in [
        ("server_version", "15.0"),
        ("client_encoding", "UTF8"),
        ("integer_datetimes", "on"),
    ] {
        send(s, b'S', format!("{name}\0{value}\0").as_bytes())?;
    }
    send(s, b'K', &[0, 0, 0, 42, 0, 0, 0, 7])?;
    send(s, b'Z', b"I")
}

/// Hang up cleanly once the client has sent everything it will before waiting for an answer.
fn hang_up(s: &mut std::net::TcpStream) -> std::io::Result<()> {
    use std::io::Read as _;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).map(drop)
}

/// Servers that end or answer the login in ways no PostgreSQL server does: each failure is one
/// line naming the target and what happened, exit 5.
#[test]
fn servers_that_end_the_login_are_reported_in_exact_words() {
    let run = |port: u16, settings: &str| {
        Cmd::new()
            .env("PGPASSWORD", "not-shown")
            .args(["stats", "--connect-timeout", "1s", "-d"])
            .arg(format!(
                "host=127.0.0.1 port={port} user=app dbname=app {settings}"
            ))
            .run()
    };
    let target =
        |port: u16| format!("user \"app\" at host \"127.0.0.1\" port {port}, database \"app\"");

    // Says yes to TLS, reads the ClientHello, hangs up.
    let port = hostile(|s| {
        use std::io::Read as _;
        read_startup(s)?;
        std::io::Write::write_all(s, b"S")?;
        let mut header = [0u8; 5];
        s.read_exact(&mut header)?;
        let mut hello = vec![0u8; u16::from_be_bytes([header[3], header[4]]) as usize];
        s.read_exact(&mut hello)?;
        hang_up(s)
    });
    run(port, "sslmode=require").assert_error(
        5,
        &format!(
            "cannot connect to {}: error performing TLS handshake: the server closed the \
             connection during the TLS handshake",
            target(port)
        ),
    );

    // Resets the connection without reading what the client sent: a transient failure, tried
    // again until the connect timeout.
    let port = hostile(|s| {
        // Closing with the client's bytes unread makes the kernel send a reset.
        let _ = s;
        std::thread::sleep(std::time::Duration::from_millis(100));
        Ok(())
    });
    run(port, "sslmode=disable").assert_error(
        5,
        &format!(
            "cannot connect to {}: connection reset by the server (retried for 1s)",
            target(port)
        ),
    );

    // Lets the client in, then answers the target_session_attrs query with no row.
    let port = hostile(|s| {
        log_in(s)?;
        read_message(s)?;
        send(s, b'C', b"SELECT 0\0")?;
        send(s, b'Z', b"I")?;
        // Stays connected: the client is the one to hang up.
        std::thread::sleep(std::time::Duration::from_secs(5));
        Ok(())
    });
    run(port, "sslmode=disable target_session_attrs=read-write").assert_error(
        5,
        &format!(
            "cannot connect to {}: the server did not say whether it is a standby; check \
             target_session_attrs",
            target(port)
        ),
    );

    // Asks for SSPI, which only Windows servers do.
    let port = hostile(|s| {
        read_startup(s)?;
        send(s, b'R', &9u32.to_be_bytes())?;
        hang_up(s)
    });
    run(port, "sslmode=disable require_auth=password").assert_error(
        5,
        &format!(
            "cannot connect to {}: authentication method requirement \"password\" failed: server \
             requested SSPI authentication; allow the server's method in require_auth, or change \
             the method the server's pg_hba.conf asks for",
            target(port)
        ),
    );
}

/// `user "U" at socket directory "D" port P, database "N"` for a key=value conninfo with a socket
/// directory as its host.
fn socket_target(conninfo: &str) -> String {
    let info = crate::support::conninfo::ConnInfo::parse(conninfo).unwrap();
    let get = |key: &str| info.get(key).unwrap_or_default().to_owned();
    format!(
        "user {:?} at socket directory {:?} port {}, database {:?}",
        get("user"),
        get("host"),
        get("port"),
        get("dbname")
    )
}

/// PgBouncer refuses a startup parameter it does not pass on: its words, then what to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_parameter_the_pooler_refuses_is_explained_in_exact_words() {
    use crate::support::pgbouncer::{Mode, PgBouncer};
    let db = crate::support::TestDb::new().await;
    db.exec(crate::fixtures::Schema::Corrected.ddl()).await;
    let bouncer = PgBouncer::start(&db, Mode::Transaction, 2, &[]).await;
    let conninfo = format!("{} options='-c work_mem=8MB'", bouncer.url());
    let run = Cmd::new()
        .args(["stats", "--connect-timeout", "5s", "-d", &conninfo])
        .run_async()
        .await;
    run.assert_error(
        5,
        &format!(
            "cannot connect to {}: unsupported startup parameter: options; the connection \
             pooler does not accept it: remove it (options=, PGOPTIONS), or list it \
             in the pooler's ignore_startup_parameters",
            socket_target(&bouncer.url())
        ),
    );
}

/// A role that may log in but not read `pg_settings` (revoked in its database) cannot be given
/// idemctl's session limits: the connection is refused with the server's words (exit 5) rather
/// than used without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_limits_the_server_refuses_end_the_connection_in_exact_words() {
    let db = crate::support::TestDb::new().await;
    let role = format!("{}_limited", db.name());
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; REVOKE SELECT ON pg_catalog.pg_settings FROM PUBLIC"
    ))
    .await;
    let url = db.url_with(&[("user", &role)]);
    let run = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["stats", "--connect-timeout", "5s"])
        .run_async()
        .await;
    db.exec(&format!(
        "GRANT SELECT ON pg_catalog.pg_settings TO PUBLIC; DROP ROLE {role}"
    ))
    .await;
    run.assert_error(
        5,
        &format!(
            "cannot connect to {}: setting session timeouts failed: permission denied for view \
             pg_settings",
            socket_target(&url)
        ),
    );
}

/// A standby is refused for `target_session_attrs=primary`, with what to change (exit 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_that_does_not_fit_target_session_attrs_is_refused_in_exact_words() {
    let pair = crate::support::replica::ReplicaPair::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!("{} target_session_attrs=primary", pair.standby_url());
    let run = Cmd::new()
        .args(["stats", "--connect-timeout", "5s", "-d", &url])
        .run_async()
        .await;
    run.assert_error(
        5,
        &format!(
            "cannot connect to {}: server is in hot standby mode (target_session_attrs=primary): \
             list the primary among the hosts, or change target_session_attrs",
            socket_target(&pair.standby_url())
        ),
    );
}

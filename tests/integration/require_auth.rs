//! `require_auth` against real servers, judged as libpq 16 judges it: the server's request for a
//! method the rule does not allow ends the connection before any password is sent, an
//! authentication the client did not complete (trust) is refused unless `none` is allowed, and the
//! refusal is libpq's sentence, one line, exit 5. Over plain TCP (cleartext, md5, SCRAM and trust
//! roles on a server of the test's own), over TLS, over the Unix socket, and against a hostile
//! server that asks for an authentication no PostgreSQL server knows.

use crate::fixtures::Schema;
use crate::support::Run;
use crate::support::pg::connect;
use crate::support::tcp::{PASSWORD, TcpDb, TcpServer, Transport};

const DB: &str = "idemctl_auth";

/// A server whose pg_hba.conf asks each role for one method over TCP, with connections logged.
async fn server() -> TcpServer {
    let server = TcpServer::start_private(false);
    let admin = connect(&server.socket_conninfo("postgres", "postgres")).await;
    for sql in [
        format!("CREATE ROLE a_scram LOGIN PASSWORD '{PASSWORD}'"),
        format!(
            "SET password_encryption = 'md5'; \
             CREATE ROLE a_md5 LOGIN PASSWORD '{PASSWORD}'; \
             CREATE ROLE a_clear LOGIN PASSWORD '{PASSWORD}'; \
             RESET password_encryption"
        ),
        "CREATE ROLE a_trust LOGIN".to_string(),
        format!("CREATE DATABASE {DB} TEMPLATE template0"),
        "ALTER SYSTEM SET log_connections = on".to_string(),
    ] {
        admin.batch_execute(&sql).await.unwrap();
    }
    let hba = "local all all trust\n\
               host all a_clear 127.0.0.1/32 password\n\
               host all a_md5 127.0.0.1/32 md5\n\
               host all a_trust 127.0.0.1/32 trust\n\
               host all all 127.0.0.1/32 scram-sha-256\n";
    std::fs::write(server.dir.join("data").join("pg_hba.conf"), hba).unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    let db = connect(&server.socket_conninfo("postgres", DB)).await;
    db.batch_execute(Schema::Corrected.ddl()).await.unwrap();
    db.batch_execute("GRANT ALL ON ALL TABLES IN SCHEMA public TO PUBLIC")
        .await
        .unwrap();
    server
}

fn stats(conninfo: String) -> Run {
    crate::support::Cmd::new()
        .env("PGPASSWORD", PASSWORD)
        .args(["stats", "-o", "json", "--connect-timeout", "5s", "-d"])
        .arg(conninfo)
        .run()
}

#[track_caller]
fn assert_connected(run: &Run) {
    run.assert_code(0);
    assert!(!run.stderr.contains(PASSWORD), "{run}");
}

#[track_caller]
fn assert_refused(run: &Run, rule: &str, reason: &str) {
    run.assert_code(5).assert_stdout_empty();
    assert_eq!(run.stderr.lines().count(), 1, "one line expected\n{run}");
    run.assert_stderr_contains(&format!(
        "authentication method requirement \"{rule}\" failed: {reason}"
    ));
    run.assert_stderr_contains("; allow the server's method in require_auth");
    assert!(!run.stderr.contains(PASSWORD), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_auth_allows_and_refuses_each_method_as_libpq_16_does() {
    let server = server().await;
    let tcp = |user: &str, rule: &str| {
        format!(
            "host=127.0.0.1 port={} user={user} dbname={DB} sslmode=disable require_auth={rule}",
            server.port
        )
    };
    let log_before = std::fs::read_to_string(server.log_path()).unwrap_or_default();

    assert_connected(&stats(tcp("a_scram", "scram-sha-256")));
    assert_refused(
        &stats(tcp("a_scram", "password")),
        "password",
        "server requested SASL authentication",
    );
    assert_refused(
        &stats(tcp("a_scram", "none")),
        "none",
        "server requested SASL authentication",
    );
    assert_connected(&stats(tcp("a_clear", "password")));
    assert_connected(&stats(tcp("a_clear", "!md5,!scram-sha-256")));
    assert_connected(&stats(tcp("a_md5", "md5")));
    assert_refused(
        &stats(tcp("a_md5", "!md5")),
        "!md5",
        "server requested a hashed password",
    );
    assert_connected(&stats(tcp("a_trust", "none")));
    assert_connected(&stats(tcp("a_trust", "scram-sha-256,none")));
    assert_refused(
        &stats(tcp("a_trust", "scram-sha-256")),
        "scram-sha-256",
        "server did not complete authentication",
    );
    assert_refused(
        &stats(tcp("a_trust", "!none")),
        "!none",
        "server did not complete authentication",
    );

    // The cleartext request refused: the password never reaches the server, which therefore
    // authorizes no session for the role after this point.
    let marker = std::fs::read_to_string(server.log_path())
        .unwrap_or_default()
        .len();
    assert_refused(
        &stats(tcp("a_clear", "scram-sha-256")),
        "scram-sha-256",
        "server requested a cleartext password",
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(
        log.len() >= marker && !log[marker..].contains("authorized: user=a_clear"),
        "the server authorized a_clear after a refused cleartext request:\n{}",
        &log[marker.min(log.len())..]
    );
    assert!(
        log.len() > log_before.len() && log.contains("authorized: user=a_clear"),
        "log_connections records the allowed cleartext logins (so the check above can fail)"
    );

    // The trusted Unix socket: no authentication at all.
    let socket = format!(
        "{} require_auth=none",
        server.socket_conninfo("a_trust", DB)
    );
    assert_connected(&stats(socket));
    let socket = format!("{} require_auth=md5", server.socket_conninfo("a_trust", DB));
    assert_refused(
        &stats(socket),
        "md5",
        "server did not complete authentication",
    );

    // Malformed rules are libpq's usage errors.
    let bad = stats(tcp("a_scram", "scram-sha-256,!md5"));
    bad.assert_code(2)
        .assert_stderr_contains("cannot be mixed with non-negative methods");
}

/// Over TLS the requests travel inside the TLS session; the rule still applies there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_auth_applies_inside_a_tls_session() {
    let db = TcpDb::new(Transport::TlsRequired).await;
    db.exec(Schema::Corrected.ddl()).await;
    let run = |rule: &str| {
        db.idemctl()
            .env("PGPASSWORD", PASSWORD)
            .args(["stats", "-o", "json", "--connect-timeout", "5s", "-d"])
            .arg(db.conninfo(&[("sslmode", "require"), ("require_auth", rule)]))
            .run()
    };
    assert_connected(&run("scram-sha-256"));
    assert_refused(&run("md5"), "md5", "server requested SASL authentication");
    // channel binding still works through the watched session.
    let bound = db
        .idemctl()
        .env("PGPASSWORD", PASSWORD)
        .args(["stats", "-o", "json", "--connect-timeout", "5s", "-d"])
        .arg(db.conninfo(&[
            ("sslmode", "require"),
            ("require_auth", "scram-sha-256"),
            ("channel_binding", "require"),
        ]))
        .run();
    assert_connected(&bound);
}

/// A hostile server: on every connection it reads the startup packet and answers with an
/// authentication request of `code`, then waits for the client to hang up.
async fn asking_for(code: i32) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut len = [0u8; 4];
                socket.read_exact(&mut len).await?;
                let mut startup = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
                socket.read_exact(&mut startup).await?;
                let mut request = vec![b'R'];
                request.extend_from_slice(&8i32.to_be_bytes());
                request.extend_from_slice(&code.to_be_bytes());
                socket.write_all(&request).await?;
                let mut rest = Vec::new();
                socket.read_to_end(&mut rest).await
            });
        }
    });
    port
}

/// An authentication request of a code no PostgreSQL server sends (99) is refused under any
/// require_auth, in libpq's words, exit 5; and a server that lets a role in without asking for
/// the method require_auth names is refused exactly as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_auth_refuses_an_unknown_request_and_an_incomplete_authentication_exactly() {
    let port = asking_for(99).await;
    let run = crate::support::Cmd::new()
        .env("PGPASSWORD", PASSWORD)
        .args(["stats", "--connect-timeout", "5s", "-d"])
        .arg(format!(
            "host=127.0.0.1 port={port} user=app dbname=app sslmode=disable \
             require_auth=scram-sha-256"
        ))
        .run_async()
        .await;
    run.assert_error(
        5,
        &format!(
            "cannot connect to user \"app\" at host \"127.0.0.1\" port {port}, database \"app\": \
             authentication method requirement \"scram-sha-256\" failed: server requested an \
             unknown authentication type; allow the server's method in require_auth, or change \
             the method the server's pg_hba.conf asks for"
        ),
    );
    assert!(!run.stderr.contains(PASSWORD), "{run}");

    let server = server().await;
    let run = stats(format!(
        "host=127.0.0.1 port={} user=a_trust dbname={DB} sslmode=disable \
         require_auth=scram-sha-256",
        server.port
    ));
    run.assert_error(
        5,
        &format!(
            "cannot connect to user \"a_trust\" at host \"127.0.0.1\" port {}, database \"{DB}\": \
             authentication method requirement \"scram-sha-256\" failed: server did not complete \
             authentication; allow the server's method in require_auth, or change the method the \
             server's pg_hba.conf asks for",
            server.port
        ),
    );
}

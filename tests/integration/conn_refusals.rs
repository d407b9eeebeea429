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

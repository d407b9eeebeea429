//! `sslnegotiation=direct` (libpq 17's direct TLS: a ClientHello first with ALPN "postgresql", no
//! SSLRequest) against a real TLS-terminating proxy, HAProxy, in front of a plain server: every
//! command works through it under `require`, `verify-ca` and `verify-full`; a wrong root or host
//! name is refused with libpq's reason; a proxy that selects no ALPN is refused as libpq 17
//! refuses it; and the default negotiation against the same port fails in one clear line.

use std::path::Path;
use std::time::Duration;

use crate::fixtures::{Schema, expired_rows_sql};
use crate::support::Run;
use crate::support::haproxy::HaProxy;
use crate::support::tcp::{PASSWORD, TcpDb, Transport};

const EXPIRED: i64 = 40;

/// A database with the reference table and `EXPIRED` expired rows on the plain server (which
/// speaks no TLS at all), and HAProxy terminating direct TLS in front of it.
async fn setup() -> (TcpDb, HaProxy) {
    let db = TcpDb::new(Transport::NoTls).await;
    db.exec(Schema::Corrected.ddl()).await;
    db.exec(&expired_rows_sql(EXPIRED)).await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, response_status, response_body, locked_at, created_at, \
         expires_at) VALUES ('direct-key', 'tenant_1', 'POST', '/v1/payments', \
         sha256('body'::bytea), 'completed', 201, '{\"id\": \"pay_1\"}', now(), now(), \
         now() + interval '1 day'); ANALYZE idempotency_keys",
    )
    .await;
    let proxy = HaProxy::start(db.port());
    (db, proxy)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// The database through the proxy's `port`, plus `settings`.
fn via(db: &TcpDb, port: u16, settings: &[(&str, &str)]) -> String {
    let port = port.to_string();
    let mut all = vec![("port", port.as_str())];
    all.extend_from_slice(settings);
    db.conninfo(&all)
}

/// `idemctl ARGS --connect-timeout 5s -d CONNINFO` with the password in PGPASSWORD.
fn idemctl(db: &TcpDb, args: &[&str], conninfo: &str) -> Run {
    db.idemctl()
        .env("PGPASSWORD", PASSWORD)
        .args(args)
        .args(["--connect-timeout", "5s", "-d", conninfo])
        .timeout(Duration::from_secs(60))
        .run()
}

#[track_caller]
fn assert_stats_ok(run: &Run) {
    run.assert_code(0).assert_stderr_empty();
    assert_eq!(run.json()["table"], "public.idempotency_keys", "{run}");
    assert!(!run.stdout.contains(PASSWORD), "{run}");
}

/// A connection failure: exit 5, one line on stderr holding every needle, no panic, no password.
#[track_caller]
fn assert_refused(run: &Run, needles: &[&str]) {
    run.assert_code(5).assert_stdout_empty();
    assert_eq!(run.stderr.lines().count(), 1, "one line expected\n{run}");
    assert!(run.stderr.starts_with("idemctl: "), "{run}");
    assert!(!run.stderr.contains("panicked"), "{run}");
    for needle in needles {
        run.assert_stderr_contains(needle);
    }
    assert!(!run.stderr.contains(PASSWORD), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_works_over_direct_tls_through_a_tls_terminating_proxy() {
    let (db, proxy) = setup().await;
    // The proxy's port speaks nothing but TLS that starts with a ClientHello, and the server
    // behind it has no TLS: getting in proves direct TLS end to end.
    let direct = via(
        &db,
        proxy.port,
        &[("sslnegotiation", "direct"), ("sslmode", "require")],
    );
    for args in [
        &["check"][..],
        &["inspect", "direct-key", "-o", "json"][..],
        &["stats", "-o", "json"][..],
        &["evict", "--dry-run"][..],
    ] {
        let run = idemctl(&db, args, &direct);
        run.assert_code(0);
        assert!(!run.stderr.contains("panicked"), "{run}");
    }
    assert_stats_ok(&idemctl(&db, &["stats", "-o", "json"], &direct));
    let run = idemctl(&db, &["evict", "-o", "json"], &direct);
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], EXPIRED, "{run}");
    // Verified: the proxy's certificate is signed by its CA for localhost, 127.0.0.1 and ::1.
    let ca = proxy.ca_cert();
    for (sslmode, host) in [
        ("verify-full", "localhost"),
        ("verify-full", "127.0.0.1"),
        ("verify-ca", "localhost"),
    ] {
        let conninfo = via(
            &db,
            proxy.port,
            &[
                ("host", host),
                ("sslnegotiation", "direct"),
                ("sslmode", sslmode),
                ("sslrootcert", path(&ca)),
            ],
        );
        assert_stats_ok(&idemctl(&db, &["stats", "-o", "json"], &conninfo));
    }
    // Nothing expired is left for a second evict, and it says so.
    let run = idemctl(&db, &["evict", "-o", "json"], &direct);
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], 0, "{run}");
    // require_auth is enforced inside the direct TLS session too.
    let conninfo = via(
        &db,
        proxy.port,
        &[
            ("sslnegotiation", "direct"),
            ("sslmode", "require"),
            ("require_auth", "scram-sha-256"),
        ],
    );
    assert_stats_ok(&idemctl(&db, &["stats", "-o", "json"], &conninfo));
    let conninfo = via(
        &db,
        proxy.port,
        &[
            ("sslnegotiation", "direct"),
            ("sslmode", "require"),
            ("require_auth", "password"),
        ],
    );
    assert_refused(
        &idemctl(&db, &["stats", "-o", "json"], &conninfo),
        &[
            "authentication method requirement \"password\" failed: server requested SASL authentication",
        ],
    );
}

/// libpq's reasons for a certificate it does not trust or a name it does not carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_over_direct_tls_refuses_a_wrong_root_or_host_name() {
    let (db, proxy) = setup().await;
    let other = proxy.other_ca_cert();
    let conninfo = via(
        &db,
        proxy.port,
        &[
            ("sslnegotiation", "direct"),
            ("sslmode", "verify-full"),
            ("sslrootcert", path(&other)),
        ],
    );
    let run = idemctl(&db, &["check"], &conninfo);
    assert_refused(
        &run,
        &[
            "cannot connect to",
            "certificate verify failed: unable to get local issuer certificate",
        ],
    );
    assert!(run.elapsed < Duration::from_secs(5), "not retried\n{run}");
    let ca = proxy.ca_cert();
    let conninfo = via(
        &db,
        proxy.port,
        &[
            ("host", "db.example.test"),
            ("hostaddr", "127.0.0.1"),
            ("sslnegotiation", "direct"),
            ("sslmode", "verify-full"),
            ("sslrootcert", path(&ca)),
        ],
    );
    assert_refused(
        &idemctl(&db, &["check"], &conninfo),
        &[
            "server certificate for \"localhost\" (and 2 other names) does not match host name \"db.example.test\"",
        ],
    );
    // verify-ca checks the chain only, as libpq.
    let conninfo = conninfo.replace("verify-full", "verify-ca");
    assert_stats_ok(&idemctl(&db, &["stats", "-o", "json"], &conninfo));
}

/// A proxy without `alpn postgresql` completes the handshake but selects no protocol: libpq 17
/// refuses such a direct TLS connection, and so does idemctl, before sending anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tls_is_refused_when_the_proxy_selects_no_alpn_protocol() {
    let (db, proxy) = setup().await;
    let conninfo = via(
        &db,
        proxy.port_without_alpn,
        &[("sslnegotiation", "direct"), ("sslmode", "require")],
    );
    let run = idemctl(&db, &["check"], &conninfo);
    assert_refused(
        &run,
        &["direct SSL connection was established without ALPN protocol negotiation extension"],
    );
    // The same listener is otherwise sound: the ALPN rule is the only reason.
    let ca = proxy.ca_cert();
    let verified = via(
        &db,
        proxy.port_without_alpn,
        &[
            ("sslnegotiation", "direct"),
            ("sslmode", "verify-full"),
            ("sslrootcert", path(&ca)),
        ],
    );
    assert_refused(
        &idemctl(&db, &["stats", "-o", "json"], &verified),
        &["without ALPN protocol negotiation extension"],
    );
    // The ALPN listener next to it accepts the same settings.
    let ok = via(
        &db,
        proxy.port,
        &[("sslnegotiation", "direct"), ("sslmode", "require")],
    );
    assert_stats_ok(&idemctl(&db, &["stats", "-o", "json"], &ok));
}

/// The default negotiation (an SSLRequest first) against a listener that expects a ClientHello:
/// the proxy closes the connection; idemctl says so in one line and what to set, and never
/// falls back to plaintext or panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_negotiation_against_a_direct_tls_proxy_fails_in_one_clear_line() {
    let (db, proxy) = setup().await;
    for settings in [
        &[("sslnegotiation", "postgres"), ("sslmode", "require")][..],
        &[("sslmode", "require")][..],
        // The default sslmode, prefer: no plaintext retry either.
        &[][..],
    ] {
        let conninfo = via(&db, proxy.port, settings);
        let run = idemctl(&db, &["check"], &conninfo);
        assert_refused(
            &run,
            &[
                "server closed the connection unexpectedly before answering the SSLRequest",
                "connect with sslnegotiation=direct and sslmode=require",
            ],
        );
        assert!(run.elapsed < Duration::from_secs(5), "not retried\n{run}");
    }
    // A weak sslmode with direct is refused before connecting (exit 2), in libpq's words.
    for sslmode in ["disable", "allow", "prefer"] {
        let conninfo = via(
            &db,
            proxy.port,
            &[("sslnegotiation", "direct"), ("sslmode", sslmode)],
        );
        let run = idemctl(&db, &["check"], &conninfo);
        run.assert_code(2).assert_stdout_empty();
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
        run.assert_stderr_contains(&format!(
            "weak sslmode \"{sslmode}\" may not be used with sslnegotiation=direct (use \"require\", \"verify-ca\", or \"verify-full\")"
        ));
    }
}

/// The guide's Connecting page (docs/connecting.md): its direct TLS example, run as printed except
/// for where the proxy, database, role and root file really are; and the messages it quotes are
/// idemctl's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connecting_page_example_for_direct_tls_works_as_written() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/connecting.md"))
        .unwrap();
    let section = page
        .split("\n## Behind PgBouncer")
        .next()
        .expect("docs/connecting.md is there");
    // Markdown wraps lines; the quoted spans are compared with the wrapping undone.
    let flat = section.split_whitespace().collect::<Vec<_>>().join(" ");
    let example = flat
        .split('`')
        .find(|span| span.starts_with("host=") && span.contains("sslnegotiation=direct"))
        .expect("docs/connecting.md shows a direct TLS conninfo");
    let (db, proxy) = setup().await;
    let port = proxy.port.to_string();
    let ca = proxy.ca_cert();
    let mut kept = Vec::new();
    let mut conninfo = Vec::new();
    for pair in example.split(' ') {
        let (key, value) = pair.split_once('=').expect("key=value");
        let value = match key {
            // Where things are on this machine.
            "host" => "localhost",
            "port" => port.as_str(),
            "user" => db.user.as_str(),
            "dbname" => db.dbname.as_str(),
            "sslrootcert" => path(&ca),
            _ => {
                kept.push(pair);
                value
            }
        };
        conninfo.push(format!("{key}={value}"));
    }
    assert_eq!(
        kept,
        ["sslnegotiation=direct", "sslmode=verify-full"],
        "{example}"
    );
    assert_stats_ok(&idemctl(&db, &["stats", "-o", "json"], &conninfo.join(" ")));
    // The refusals the page quotes, as idemctl words them.
    let weak = idemctl(
        &db,
        &["check"],
        &via(&db, proxy.port, &[("sslnegotiation", "direct")]),
    );
    weak.assert_code(2);
    let no_alpn = idemctl(
        &db,
        &["check"],
        &via(
            &db,
            proxy.port_without_alpn,
            &[("sslnegotiation", "direct"), ("sslmode", "require")],
        ),
    );
    let default = idemctl(&db, &["check"], &via(&db, proxy.port, &[]));
    default.assert_error(
        5,
        &format!(
            "cannot connect to user {:?} at host \"localhost\" port {}, database {:?}: server closed the connection unexpectedly before answering the SSLRequest; if it expects TLS from the first byte (a TLS-terminating proxy, or a server set up for direct TLS), connect with sslnegotiation=direct and sslmode=require (or verify-ca, verify-full)",
            db.user, proxy.port, db.dbname
        ),
    );
    for (run, quoted) in [
        (
            &weak,
            "weak sslmode \"prefer\" may not be used with sslnegotiation=direct (use \"require\", \"verify-ca\", or \"verify-full\")",
        ),
        (
            &no_alpn,
            "direct SSL connection was established without ALPN protocol negotiation extension",
        ),
        (
            &default,
            "server closed the connection unexpectedly before answering the SSLRequest; if it expects TLS from the first byte",
        ),
        (&default, "connect with sslnegotiation=direct"),
    ] {
        assert!(
            flat.contains(quoted),
            "docs/connecting.md does not quote {quoted:?}"
        );
        run.assert_stderr_contains(quoted);
    }
}

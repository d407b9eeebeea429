//! Specification tests for the resolver: tables of (URL, fake environment) → resolved fields, the
//! password file, every sslmode, certificate verification against fixed fixtures, error redaction,
//! connect failures against fake servers, and a no-panic loop over random input.

use super::hosts::HostKind;
use super::tls::{self, Verification};
use super::*;
use crate::exit::{Exit, classify};
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

const SECRET: &str = "hunter2";

/// Fake environment variables of one case.
type Vars<'a> = &'a [(&'a str, &'a str)];

/// A fake environment: `USER=osuser` and a home without dotfiles unless the case says otherwise.
fn env(vars: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = [("USER", "osuser"), ("HOME", "/nonexistent-home")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn settings(url: Option<&str>) -> ConnectSettings {
    ConnectSettings {
        database_url: url.map(str::to_string),
        database_url_from: crate::report::failure::UrlSource::Option,
        connect_timeout: None,
        statement_timeout: Duration::from_secs(30),
        statement_timeout_given: false,
        lock_timeout: Duration::from_secs(2),
        idle_in_transaction_timeout: Duration::from_secs(60),
    }
}

fn resolve_with(url: Option<&str>, vars: &[(&str, &str)]) -> anyhow::Result<Target> {
    resolve::resolve_quietly(&settings(url), &env(vars))
}

fn resolved(url: Option<&str>, vars: &[(&str, &str)]) -> Target {
    match resolve_with(url, vars) {
        Ok(target) => target,
        Err(e) => panic!("{url:?} with {vars:?} failed: {e:#}"),
    }
}

fn failure(url: Option<&str>, vars: &[(&str, &str)]) -> String {
    let err = resolve_with(url, vars).expect_err("should fail");
    assert_eq!(classify(&err), Exit::Usage, "{err:#}");
    err.to_string()
}

/// `user@host:port,.../db app=.. tls=Verification/DriverMode pw=..` for compact expectations.
fn summary(t: &Target) -> String {
    let hosts: Vec<String> = t
        .endpoints
        .iter()
        .map(|e| {
            let host = match (&e.host, e.addr) {
                (HostKind::Tcp(name), Some(addr)) => format!("{name}({addr})"),
                (HostKind::Tcp(name), None) => name.clone(),
                (HostKind::Unix(dir), _) => format!("unix:{}", dir.display()),
            };
            format!("{host}:{}", e.port)
        })
        .collect();
    let c = &t.config;
    let pw = c.get_password().map_or("-".into(), String::from_utf8_lossy);
    format!(
        "{}@{}/{} app={} tls={:?}/{:?} pw={pw}",
        c.get_user().unwrap_or("?"),
        hosts.join(","),
        c.get_dbname().unwrap_or("?"),
        c.get_application_name().unwrap_or("?"),
        t.tls_plan.verification,
        c.get_ssl_mode(),
    )
}

fn check_table(cases: &[(Option<&str>, Vars<'_>, &str)]) {
    let sock = env::default_socket_dir().display().to_string();
    for (url, vars, want) in cases {
        let want = want.replace("{sock}", &sock);
        assert_eq!(
            summary(&resolved(*url, vars)),
            want,
            "{url:?} with {vars:?}"
        );
    }
}

#[test]
fn uri_and_conninfo_forms() {
    check_table(&[
        (
            Some("postgresql://app:pw@db1:5433/appdb?application_name=x"),
            &[],
            "app@db1:5433/appdb app=x tls=Unverified/Prefer pw=pw",
        ),
        (
            Some("host=db1 port=5433 user=app password='p w\\'' dbname=appdb"),
            &[],
            "app@db1:5433/appdb app=idemctl tls=Unverified/Prefer pw=p w'",
        ),
        (
            Some("postgres://a,b:5433/x"),
            &[],
            "osuser@a:5432,b:5433/x app=idemctl tls=Unverified/Prefer pw=-",
        ),
        (
            Some("postgresql://%2Fsrv%2Fpg/app"),
            &[],
            "osuser@unix:/srv/pg:5432/app app=idemctl tls=NoTls/Disable pw=-",
        ),
        (
            Some("postgresql:///app?host=/srv/pg&port=5433"),
            &[],
            "osuser@unix:/srv/pg:5433/app app=idemctl tls=NoTls/Disable pw=-",
        ),
        (
            Some("postgresql://[::1]:6000/app"),
            &[],
            "osuser@::1:6000/app app=idemctl tls=Unverified/Prefer pw=-",
        ),
        (
            Some("hostaddr=10.0.0.1"),
            &[],
            "osuser@10.0.0.1(10.0.0.1):5432/osuser app=idemctl tls=Unverified/Prefer pw=-",
        ),
        (
            Some("host=db1,db2 hostaddr=10.0.0.1,10.0.0.2 port=1,2"),
            &[],
            "osuser@db1(10.0.0.1):1,db2(10.0.0.2):2/osuser app=idemctl tls=Unverified/Prefer pw=-",
        ),
        (
            Some("host=db1,,/srv/pg"),
            &[],
            "osuser@db1:5432,unix:{sock}:5432,unix:/srv/pg:5432/osuser app=idemctl tls=Unverified/Prefer pw=-",
        ),
    ]);
}

#[test]
fn environment_fills_what_the_url_leaves_unset() {
    let all = [
        ("PGHOST", "db2"),
        ("PGPORT", "6000"),
        ("PGUSER", "u"),
        ("PGDATABASE", "d"),
        ("PGPASSWORD", "e"),
        ("PGAPPNAME", "a"),
    ];
    check_table(&[
        (None, &all, "u@db2:6000/d app=a tls=Unverified/Prefer pw=e"),
        (
            Some("postgresql://app:pw@db1/appdb?application_name=x"),
            &all,
            "app@db1:6000/appdb app=x tls=Unverified/Prefer pw=pw",
        ),
        (
            Some("host=db1"),
            &[("PGUSER", "u")],
            "u@db1:5432/u app=idemctl tls=Unverified/Prefer pw=-",
        ),
        (
            Some("host=''"),
            &[("PGHOST", "db2")],
            "osuser@unix:{sock}:5432/osuser app=idemctl tls=NoTls/Disable pw=-",
        ),
        (
            None,
            &[("PGHOSTADDR", "10.0.0.9")],
            "osuser@10.0.0.9(10.0.0.9):5432/osuser app=idemctl tls=Unverified/Prefer pw=-",
        ),
    ]);
}

#[test]
fn defaults_are_libpqs() {
    check_table(&[
        (
            None,
            &[],
            "osuser@unix:{sock}:5432/osuser app=idemctl tls=NoTls/Disable pw=-",
        ),
        (
            None,
            &[("USER", ""), ("LOGNAME", "ln")],
            "ln@unix:{sock}:5432/ln app=idemctl tls=NoTls/Disable pw=-",
        ),
        (
            Some(""),
            &[],
            "osuser@unix:{sock}:5432/osuser app=idemctl tls=NoTls/Disable pw=-",
        ),
    ]);
}

#[test]
fn application_name_precedence() {
    check_table(&[
        (
            Some("host=h fallback_application_name=fb"),
            &[],
            "osuser@h:5432/osuser app=fb tls=Unverified/Prefer pw=-",
        ),
        (
            Some("host=h fallback_application_name=fb"),
            &[("PGAPPNAME", "env")],
            "osuser@h:5432/osuser app=env tls=Unverified/Prefer pw=-",
        ),
        (
            Some("host=h application_name=mine fallback_application_name=fb"),
            &[("PGAPPNAME", "env")],
            "osuser@h:5432/osuser app=mine tls=Unverified/Prefer pw=-",
        ),
    ]);
}

#[test]
fn connect_timeout_sources() {
    let secs =
        |url: Option<&str>, vars: &[(&str, &str)]| resolved(url, vars).connect_timeout().as_secs();
    assert_eq!(secs(None, &[]), 10);
    assert_eq!(secs(Some("connect_timeout=30"), &[]), 30);
    assert_eq!(
        secs(None, &[("PGCONNECT_TIMEOUT", "1")]),
        2,
        "libpq's minimum"
    );
    assert_eq!(
        secs(Some("connect_timeout=0"), &[]),
        10,
        "no unbounded waits"
    );
    assert_eq!(
        secs(Some("connect_timeout=7"), &[("PGCONNECT_TIMEOUT", "9")]),
        7
    );
    let mut s = settings(Some("connect_timeout=30"));
    s.connect_timeout = Some(Duration::from_secs(5));
    let t = resolve::resolve_quietly(&s, &env(&[])).expect("resolves");
    assert_eq!(t.connect_timeout(), Duration::from_secs(5));
    assert_eq!(
        t.config.get_connect_timeout(),
        Some(&Duration::from_secs(5))
    );
}

#[test]
fn driver_options_pass_through_with_libpq_units() {
    use super::attrs::SessionAttrs;
    use tokio_postgres::config::{ChannelBinding, LoadBalanceHosts};
    let t = resolved(
        Some(
            "host=h keepalives_idle=30 keepalives_count=3 tcp_user_timeout=1500 channel_binding=require load_balance_hosts=random target_session_attrs=primary options='-c search_path=x' client_encoding=LATIN1 sslcompression=1 krbsrvname=pg gssencmode=prefer sslpassword=x",
        ),
        &[],
    );
    let c = &t.config;
    assert_eq!(c.get_keepalives_idle(), Duration::from_secs(30));
    assert_eq!(c.get_keepalives_retries(), Some(3));
    assert_eq!(c.get_tcp_user_timeout(), Some(&Duration::from_millis(1500)));
    assert_eq!(c.get_channel_binding(), ChannelBinding::Require);
    assert_eq!(c.get_load_balance_hosts(), LoadBalanceHosts::Random);
    assert_eq!(t.attrs, SessionAttrs::Primary);
    assert_eq!(c.get_options(), Some("-c search_path=x"));
    let standby = resolved(
        Some("host=h"),
        &[("PGTARGETSESSIONATTRS", "standby"), ("PGOPTIONS", "-c a=b")],
    );
    assert_eq!(standby.attrs, SessionAttrs::Standby);
    assert_eq!(standby.config.get_options(), Some("-c a=b"));
}

/// Connection strings (with the environment) idemctl refuses, and what the refusal says.
const REFUSED_KEYWORDS: &[(&str, Vars<'static>, &str)] = &[
    (
        "host=h foo=1",
        &[],
        "unknown connection option \"foo\" in --database-url; see the libpq connection parameters",
    ),
    (
        "postgresql://h/db?foo=1",
        &[],
        "unknown connection option \"foo\" in --database-url; see the libpq connection parameters",
    ),
    (
        "service=prod",
        &[("PGSYSCONFDIR", "/nonexistent")],
        "definition of service \"prod\" not found",
    ),
    (
        "host=h",
        &[("PGSERVICE", "prod"), ("PGSYSCONFDIR", "/nonexistent")],
        "definition of service \"prod\" not found",
    ),
    (
        "host=h require_auth=scram-sha-256,kerberos",
        &[],
        "require_auth in --database-url: invalid require_auth value: \"kerberos\"",
    ),
    (
        "host=h gssencmode=require",
        &[],
        "GSSAPI encryption is not supported",
    ),
    (
        "host=h sslnegotiation=direct",
        &[],
        "sslnegotiation in --database-url: weak sslmode \"prefer\" may not be used with sslnegotiation=direct (use \"require\", \"verify-ca\", or \"verify-full\")",
    ),
    (
        "host=h sslnegotiation=direct sslmode=disable",
        &[],
        "weak sslmode \"disable\" may not be used with sslnegotiation=direct",
    ),
    (
        "host=h sslnegotiation=direct sslmode=allow",
        &[],
        "weak sslmode \"allow\" may not be used with sslnegotiation=direct",
    ),
    (
        "host=h",
        &[("PGSSLNEGOTIATION", "direct"), ("PGSSLMODE", "prefer")],
        "sslnegotiation in environment variable PGSSLNEGOTIATION: weak sslmode \"prefer\"",
    ),
    // libpq refuses it before knowing that a Unix socket never uses TLS.
    (
        "host=/tmp sslnegotiation=direct",
        &[],
        "weak sslmode \"prefer\" may not be used with sslnegotiation=direct",
    ),
    // libpq checks sslnegotiation before the system-roots rule.
    (
        "host=h sslnegotiation=direct sslmode=prefer sslrootcert=system",
        &[],
        "may not be used with sslnegotiation=direct",
    ),
    (
        "host=h sslnegotiation=direct sslmode=require sslrootcert=system",
        &[],
        "weak sslmode \"require\" may not be used with sslrootcert=system (use \"verify-full\")",
    ),
    (
        "host=h sslnegotiation=Direct sslmode=require",
        &[],
        "invalid sslnegotiation in --database-url: expected one of postgres, direct",
    ),
    (
        "host=h load_balance_hosts=round-robin",
        &[],
        "invalid load_balance_hosts in --database-url: expected one of disable, random",
    ),
    (
        "host=h target_session_attrs=replica",
        &[],
        "invalid target_session_attrs in --database-url",
    ),
    (
        "host=h require_auth=!md5,!md5",
        &[],
        "require_auth method \"!md5\" is specified more than once",
    ),
    (
        "host=h ssl_max_protocol_version=TLSv1.1",
        &[],
        "below TLSv1.2 are not supported",
    ),
    (
        "host=h replication=database",
        &[],
        "replication connections are not supported",
    ),
];

#[test]
fn unknown_and_unsupported_keywords() {
    for (url, vars, want) in REFUSED_KEYWORDS {
        let msg = failure(Some(url), vars);
        assert!(msg.contains(want), "{url}: {msg}");
    }
}

#[test]
fn negotiation_and_load_balancing_keywords_are_taken() {
    use tokio_postgres::config::{LoadBalanceHosts, SslNegotiation};
    let verify_ca = format!(
        "host=h sslnegotiation=direct sslmode=verify-ca sslrootcert={}",
        fixture("ca.crt")
    );
    for ok in [
        "host=h sslnegotiation=direct sslmode=require",
        verify_ca.as_str(),
        "host=h sslnegotiation=direct sslmode=verify-full sslrootcert=system",
        // sslrootcert=system makes verify-full the default, which direct accepts.
        "host=h sslnegotiation=direct sslrootcert=system",
        "host=h sslnegotiation=direct requiressl=1",
    ] {
        let t = resolved(Some(ok), &[]);
        assert!(t.tls_plan.direct, "{ok}");
        assert_eq!(
            t.config.get_ssl_negotiation(),
            SslNegotiation::Direct,
            "{ok}"
        );
    }
    let t = resolved(
        Some("host=h sslmode=require"),
        &[("PGSSLNEGOTIATION", "direct")],
    );
    assert!(t.tls_plan.direct);
    for default in [
        "host=h sslnegotiation=postgres",
        "host=h sslnegotiation=postgres sslmode=disable",
        "host=h",
    ] {
        let t = resolved(Some(default), &[]);
        assert!(!t.tls_plan.direct, "{default}");
        assert_eq!(
            t.config.get_ssl_negotiation(),
            SslNegotiation::Postgres,
            "{default}"
        );
    }
    for (value, want) in [
        ("random", LoadBalanceHosts::Random),
        ("disable", LoadBalanceHosts::Disable),
    ] {
        let t = resolved(Some(&format!("host=a,b load_balance_hosts={value}")), &[]);
        assert_eq!(t.config.get_load_balance_hosts(), want);
    }
    let t = resolved(Some("host=a,b"), &[("PGLOADBALANCEHOSTS", "random")]);
    assert_eq!(t.config.get_load_balance_hosts(), LoadBalanceHosts::Random);
    resolved(
        Some("host=h replication=false servicefile=/x max_protocol_version=latest"),
        &[],
    );
}

#[test]
fn malformed_input_names_the_problem_without_echoing() {
    let cases: &[(&str, &str)] = &[
        (
            "password='hunter2",
            "invalid --database-url: unterminated quoted string",
        ),
        (
            "host=h hunter2",
            "invalid --database-url: missing \"=\" after a keyword at character 8",
        ),
        (
            "postgresql://u:hunter2@h:54x2/db",
            "invalid port in --database-url: expected port numbers from 1 to 65535",
        ),
        (
            "postgresql://u:hunter2@h:70000/db",
            "invalid port in --database-url",
        ),
        (
            "postgresql://u:hunter2@h/db%zz",
            "invalid --database-url: invalid percent-encoding in the URI",
        ),
        (
            "user=u password=hunter2 sslmode=verify_full",
            "invalid sslmode in --database-url: expected one of disable, allow, prefer, require, verify-ca, verify-full",
        ),
        (
            "password=hunter2 hostaddr=db.example",
            "invalid hostaddr in --database-url: expected numeric IP addresses",
        ),
        (
            "password=hunter2 host=a,b,c port=1,2",
            "expected one port or one per host (3 hosts, 2 ports)",
        ),
        (
            "password=hunter2 host=h connect_timeout=soon",
            "invalid connect_timeout in --database-url: expected an integer",
        ),
        ("mysql://u:hunter2@h/db", "unsupported URI scheme"),
        (
            "postgresql://u:hunter2@h/db?p@ss%20word=1",
            "unknown connection option (not a valid keyword)",
        ),
    ];
    for (url, want) in cases {
        let msg = failure(Some(url), &[]);
        assert!(msg.contains(want), "{url}: {msg}");
        assert!(!msg.contains(SECRET), "{url}: {msg}");
    }
    let msg = failure(None, &[("PGPORT", "x")]);
    assert_eq!(
        msg,
        "invalid port in environment variable PGPORT: expected port numbers from 1 to 65535"
    );
}

#[test]
fn password_never_shows_in_describe_or_debug() {
    use crate::report::failure::{Place, TargetName};
    let name = |user: &str, places: Vec<Place>| TargetName {
        user: user.to_owned(),
        places,
        dbname: "app".to_owned(),
    };
    let host = |name: &str, addr: Option<&str>, port: u16| Place::Host {
        name: name.to_owned(),
        addr: addr.map(|a| a.parse().unwrap()),
        port,
    };
    let t = resolved(Some("postgresql://app:hunter2@db1:5433/app"), &[]);
    assert_eq!(t.name(), name("app", vec![host("db1", None, 5433)]));
    assert!(!format!("{t:?}").contains(SECRET));
    let t = resolved(
        Some("host=db1,/srv/pg hostaddr=10.0.0.1,10.0.0.2 user=app password=hunter2"),
        &[],
    );
    assert_eq!(
        t.name(),
        name(
            "app",
            vec![
                host("db1", Some("10.0.0.1"), 5432),
                host("10.0.0.2", None, 5432)
            ]
        )
    );
    let sock = resolved(Some("host=/srv/pg user=app"), &[]);
    assert_eq!(
        sock.name().places,
        [Place::Socket {
            dir: "/srv/pg".into(),
            port: 5432
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// Password file

fn write_private(path: &Path, contents: &str, mode: u32) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(path, contents).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

const PGPASS: &str = "\
db1:5432:app:app:frompgpass
localhost:5432:*:*:localpw
/srv/pg:5432:*:*:srvpw
10.0.0.1:*:*:*:addrpw
a:5432:*:*:pw-a
b:5432:*:*:pw-b
";

#[test]
fn pgpass_is_used_only_without_a_password() {
    let home = tempfile::tempdir().expect("tempdir");
    let home_str = home.path().to_str().expect("utf8 path");
    write_private(&home.path().join(".pgpass"), PGPASS, 0o600);
    let h = [("HOME", home_str)];
    let pw = |url: &str, vars: &[(&str, &str)]| -> Option<String> {
        let t = resolved(Some(url), vars);
        t.config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    };
    assert_eq!(
        pw("host=db1 user=app dbname=app", &h).as_deref(),
        Some("frompgpass")
    );
    assert_eq!(pw("host=db1 user=app dbname=other", &h), None);
    assert_eq!(
        pw("host=db1 user=app dbname=app password=given", &h).as_deref(),
        Some("given")
    );
    let with_env = [h[0], ("PGPASSWORD", "envpw")];
    assert_eq!(
        pw("host=db1 user=app dbname=app", &with_env).as_deref(),
        Some("envpw")
    );
    assert_eq!(pw("host=localhost", &h).as_deref(), Some("localpw"));
    assert_eq!(pw("host=/srv/pg", &h).as_deref(), Some("srvpw"));
    // Only hostaddr: psql 15 looks the password up for localhost, not for the address.
    assert_eq!(pw("hostaddr=10.0.0.1", &h).as_deref(), Some("localpw"));
    assert_eq!(pw("host=other", &h), None);
}

#[test]
fn pgpass_localhost_matches_the_default_socket_directory() {
    let home = tempfile::tempdir().expect("tempdir");
    write_private(&home.path().join(".pgpass"), PGPASS, 0o600);
    let h = [("HOME", home.path().to_str().expect("utf8 path"))];
    for dir in env::SOCKET_DIR_CANDIDATES {
        let t = resolved(Some(&format!("host={dir}")), &h);
        assert_eq!(t.config.get_password(), Some(&b"localpw"[..]), "{dir}");
    }
    let t = resolved(None, &h);
    assert_eq!(
        t.config.get_password(),
        Some(&b"localpw"[..]),
        "default host"
    );
}

#[test]
fn pgpass_location_and_permissions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("custom-pgpass");
    write_private(&file, "*:*:*:*:custom\n", 0o600);
    let path = file.to_str().expect("utf8 path");
    let t = resolved(Some("host=h"), &[("PGPASSFILE", path)]);
    assert_eq!(t.config.get_password(), Some(&b"custom"[..]));
    let t = resolved(
        Some(&format!("host=h passfile={path}")),
        &[("PGPASSFILE", "/nonexistent")],
    );
    assert_eq!(t.config.get_password(), Some(&b"custom"[..]));

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let t = resolved(Some("host=h"), &[("PGPASSFILE", path)]);
    assert_eq!(t.config.get_password(), None);
    assert_eq!(t.warnings().len(), 1);
    assert!(
        t.warnings()[0]
            .to_string()
            .contains("has group or world access"),
        "{:?}",
        t.warnings()
    );
    assert!(!t.warnings()[0].to_string().contains("custom\n"));
}

#[test]
fn pgpass_disagreeing_hosts_warn() {
    let home = tempfile::tempdir().expect("tempdir");
    write_private(&home.path().join(".pgpass"), PGPASS, 0o600);
    let t = resolved(
        Some("host=a,b"),
        &[("HOME", home.path().to_str().expect("utf8"))],
    );
    assert_eq!(t.config.get_password(), Some(&b"pw-a"[..]));
    assert_eq!(t.warnings().len(), 1);
    assert!(
        t.warnings()[0]
            .to_string()
            .contains("using the one for host \"a\" port 5432")
    );
    assert!(!t.warnings()[0].to_string().contains("pw-"));
}

// ---------------------------------------------------------------------------------------------
// sslmode

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/conn/testdata");

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

/// A home whose `~/.postgresql/` holds the given fixture files (keys made private, as git
/// does not keep modes).
fn home_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("tempdir");
    for (fixture_name, target) in files {
        let contents = std::fs::read_to_string(fixture(fixture_name)).expect("fixture");
        write_private(
            &home.path().join(".postgresql").join(target),
            &contents,
            0o600,
        );
    }
    home
}

#[test]
fn every_sslmode_maps_like_libpq() {
    let ca = fixture("ca.crt");
    let with_root = home_with(&[("ca.crt", "root.crt")]);
    let root_home = with_root.path().to_str().expect("utf8");
    let r = [("HOME", root_home)];
    let cases: &[(String, Vars<'_>, &str)] = &[
        ("host=h sslmode=disable".into(), &[], "NoTls/Disable"),
        ("host=h sslmode=allow".into(), &[], "Unverified/Prefer"),
        ("host=h sslmode=prefer".into(), &[], "Unverified/Prefer"),
        ("host=h".into(), &[], "Unverified/Prefer"),
        ("host=h sslmode=require".into(), &[], "Unverified/Require"),
        ("host=h requiressl=1".into(), &[], "Unverified/Require"),
        ("host=h sslmode=require".into(), &r, "ChainOnly/Require"),
        // libpq verifies the chain whenever a root file exists, even under prefer and allow.
        ("host=h sslmode=prefer".into(), &r, "ChainOnly/Prefer"),
        ("host=h sslmode=allow".into(), &r, "ChainOnly/Prefer"),
        (
            "host=h sslmode=require sslrootcert=/missing.crt".into(),
            &[],
            "Unverified/Require",
        ),
        (
            format!("host=h sslmode=require sslrootcert={ca}"),
            &[],
            "ChainOnly/Require",
        ),
        (
            format!("host=h sslmode=verify-ca sslrootcert={ca}"),
            &[],
            "ChainOnly/Require",
        ),
        (
            format!("host=h sslmode=verify-full sslrootcert={ca}"),
            &[],
            "Full/Require",
        ),
        ("host=h sslmode=verify-full".into(), &r, "Full/Require"),
        (
            "host=h".into(),
            &[("PGSSLMODE", "verify-ca"), r[0]],
            "ChainOnly/Require",
        ),
        (
            "host=h sslmode=disable".into(),
            &[("PGSSLMODE", "verify-full")],
            "NoTls/Disable",
        ),
        (
            "host=/srv/pg sslmode=verify-full".into(),
            &[],
            "NoTls/Disable",
        ),
        ("host=/srv/pg sslmode=require".into(), &[], "NoTls/Disable"),
    ];
    for (url, vars, want) in cases {
        let t = resolved(Some(url), vars);
        let got = format!(
            "{:?}/{:?}",
            t.tls_plan.verification,
            t.config.get_ssl_mode()
        );
        assert_eq!(got, *want, "{url} with {vars:?}");
        assert_eq!(
            t.tls.is_some(),
            t.tls_plan.verification != Verification::NoTls
        );
    }
}

#[test]
fn verifying_modes_need_a_root_file() {
    let msg = failure(Some("host=h sslmode=verify-full"), &[("HOME", "/home/x")]);
    assert_eq!(
        msg,
        "root certificate file \"/home/x/.postgresql/root.crt\" does not exist; either provide the \
         file, use the system's trusted roots (sslrootcert=system), or change sslmode"
    );
    let msg = failure(
        Some("host=h sslmode=verify-ca sslrootcert=/missing.crt"),
        &[],
    );
    assert!(
        msg.starts_with("root certificate file \"/missing.crt\" does not exist"),
        "{msg}"
    );
}

#[test]
fn system_roots_force_verify_full() {
    let plan = |url: &str| {
        let pairs = conninfo::tokenize(url).expect("parses");
        let fake = env(&[]);
        let params =
            params::Params::collect(pairs, &crate::report::failure::UrlSource::Option, &fake)
                .expect("valid");
        tls::plan(&params, &fake, false)
    };
    let p = plan("host=h sslrootcert=system").expect("plans");
    assert_eq!(
        (p.mode, p.verification),
        (tls::SslMode::VerifyFull, Verification::Full)
    );
    assert_eq!(p.roots, Some(tls::Roots::System));
    let err = plan("host=h sslrootcert=system sslmode=require").expect_err("weak");
    assert!(
        err.to_string()
            .contains("weak sslmode \"require\" may not be used with sslrootcert=system")
    );
}

#[test]
fn client_certificates_from_the_default_location() {
    let home = home_with(&[
        ("client.crt", "postgresql.crt"),
        ("client.key", "postgresql.key"),
    ]);
    let h = [("HOME", home.path().to_str().expect("utf8"))];
    let t = resolved(Some("host=h sslmode=require"), &h);
    let plan = &t.tls_plan;
    assert!(plan.client_cert.is_some());
    tls::context(plan).expect("builds");

    let none = resolved(Some("host=h sslmode=require sslcertmode=disable"), &h);
    assert!(none.tls_plan.client_cert.is_none());

    let key = home.path().join(".postgresql/postgresql.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let msg = failure(Some("host=h sslmode=require"), &h);
    assert!(msg.contains("has group or world access"), "{msg}");
}

#[test]
fn explicit_client_certificate_paths() {
    let home = home_with(&[("client.key", "k.pem")]);
    let key = home.path().join(".postgresql/k.pem");
    let url = format!(
        "host=h sslcert={} sslkey={}",
        fixture("client.crt"),
        key.display()
    );
    let t = resolved(Some(&url), &[]);
    assert!(t.tls_plan.client_cert.is_some());
    tls::context(&t.tls_plan).expect("builds");
    let not_a_key = home_with(&[("ca.crt", "not-a-key.pem")]);
    let not_a_key = not_a_key.path().join(".postgresql/not-a-key.pem");
    let bad = format!(
        "host=h sslcert={} sslkey={}",
        fixture("client.crt"),
        not_a_key.display()
    );
    // A certificate where the key should be is not a key, and not said to be encrypted.
    assert_eq!(
        failure(Some(&bad), &[]),
        format!(
            "cannot load private key file \"{}\": unsupported",
            not_a_key.display()
        )
    );
    // A missing certificate file means "no client certificate", as in libpq.
    let t = resolved(Some("host=h sslcert=/nonexistent.crt"), &[]);
    assert!(t.tls_plan.client_cert.is_none());
}

// ---------------------------------------------------------------------------------------------
// Verifiers, against fixed certificates

mod verification {
    use super::*;
    use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod, SslVerifyMode, SslVersion};
    use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

    fn plan(verification: Verification, roots: &str, crl: Option<&str>) -> tls::TlsPlan {
        tls::TlsPlan {
            mode: tls::SslMode::VerifyFull,
            driver_mode: tokio_postgres::config::SslMode::Require,
            verification,
            roots: Some(tls::Roots::File(fixture(roots).into())),
            client_cert: None,
            crl_file: crl.map(|c| fixture(c).into()),
            crl_dir: None,
            sni: true,
            versions: (12, 13),
            direct: false,
        }
    }

    /// An OpenSSL server with the fixtures' `db.example` certificate, asking for a client
    /// certificate signed by `ca.crt` when `require_client_cert`.
    fn acceptor(require_client_cert: bool) -> SslAcceptor {
        let mut b =
            SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).expect("acceptor");
        b.set_certificate_chain_file(fixture("server.crt"))
            .expect("cert");
        b.set_private_key_file(fixture("server.key"), SslFiletype::PEM)
            .expect("key");
        b.set_min_proto_version(Some(SslVersion::TLS1_2))
            .expect("version");
        if require_client_cert {
            b.set_ca_file(fixture("ca.crt")).expect("ca");
            b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
        }
        b.build()
    }

    /// A full in-memory handshake through idemctl's connector for `name`: signature checks, the
    /// chain, CRLs, the host check and client authentication all take part.
    async fn handshake(
        p: &tls::TlsPlan,
        name: &str,
        require_client_cert: bool,
    ) -> Result<(), String> {
        handshake_with(p, name, acceptor(require_client_cert)).await
    }

    async fn handshake_with(
        p: &tls::TlsPlan,
        name: &str,
        acceptor: SslAcceptor,
    ) -> Result<(), String> {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(async move {
            let ssl = openssl::ssl::Ssl::new(acceptor.context()).expect("ssl");
            let mut stream = tokio_openssl::SslStream::new(ssl, server).expect("stream");
            let accepted = std::pin::Pin::new(&mut stream).accept().await;
            accepted.map_err(|e| e.to_string())
        });
        let mut make = tls::connector(p)
            .map_err(|e| e.to_string())?
            .expect("a TLS plan");
        let connect = MakeTlsConnect::<tokio::io::DuplexStream>::make_tls_connect(&mut make, name)
            .map_err(|e| e.to_string())?;
        // The client's session stays open until the server is done (TLS 1.3 tickets).
        let session = connect.connect(client).await.map_err(|e| e.to_string());
        let server_outcome = served.await.expect("server task");
        drop(session?);
        server_outcome.map_err(|e| format!("server refused: {e}"))
    }

    type AlpnSelect = for<'a> fn(
        &mut openssl::ssl::SslRef,
        &'a [u8],
    ) -> Result<&'a [u8], openssl::ssl::AlpnError>;

    /// A server that knows "postgresql", as a PostgreSQL 17 server or a proxy configured with it.
    fn selects_postgresql<'a>(
        _: &mut openssl::ssl::SslRef,
        offered: &'a [u8],
    ) -> Result<&'a [u8], openssl::ssl::AlpnError> {
        openssl::ssl::select_next_proto(b"\x0apostgresql", offered)
            .ok_or(openssl::ssl::AlpnError::NOACK)
    }

    /// A server that knows only HTTP.
    fn selects_http<'a>(
        _: &mut openssl::ssl::SslRef,
        offered: &'a [u8],
    ) -> Result<&'a [u8], openssl::ssl::AlpnError> {
        openssl::ssl::select_next_proto(b"\x08http/1.1", offered)
            .ok_or(openssl::ssl::AlpnError::NOACK)
    }

    /// The fixtures' server with an ALPN choice (`None`: a server without ALPN, as a
    /// TLS-terminating proxy configured without it).
    fn acceptor_with_alpn(select: Option<AlpnSelect>) -> SslAcceptor {
        let mut b =
            SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).expect("acceptor");
        b.set_certificate_chain_file(fixture("server.crt"))
            .expect("cert");
        b.set_private_key_file(fixture("server.key"), SslFiletype::PEM)
            .expect("key");
        if let Some(select) = select {
            b.set_alpn_select_callback(select);
        }
        b.build()
    }

    #[tokio::test]
    async fn direct_tls_needs_the_postgresql_alpn_protocol() {
        let mut p = plan(Verification::Full, "ca.crt", None);
        p.direct = true;
        assert_eq!(
            handshake_with(
                &p,
                "db.example",
                acceptor_with_alpn(Some(selects_postgresql))
            )
            .await,
            Ok(())
        );
        assert_eq!(
            handshake_with(&p, "db.example", acceptor_with_alpn(None)).await,
            Err(
                "direct SSL connection was established without ALPN protocol negotiation extension"
                    .into()
            )
        );
        // A server that knows only another protocol does not acknowledge ALPN at all.
        assert_eq!(
            handshake_with(&p, "db.example", acceptor_with_alpn(Some(selects_http))).await,
            Err(
                "direct SSL connection was established without ALPN protocol negotiation extension"
                    .into()
            )
        );
        // With an SSLRequest first (the default), a server without ALPN is fine, as for libpq.
        p.direct = false;
        assert_eq!(
            handshake_with(&p, "db.example", acceptor_with_alpn(None)).await,
            Ok(())
        );
        assert_eq!(
            crate::conn::tls_stream::check_alpn(Some(b"http/1.1")).map_err(|e| e.to_string()),
            Err("SSL connection was established with unexpected ALPN protocol".into())
        );
    }

    #[tokio::test]
    async fn verify_full_checks_chain_and_name() {
        let p = plan(Verification::Full, "ca.crt", None);
        assert_eq!(handshake(&p, "db.example", false).await, Ok(()));
        assert_eq!(handshake(&p, "DB.Example", false).await, Ok(()));
        assert_eq!(
            handshake(&p, "other.example", false).await,
            Err(format!(
                "server certificate for \"db.example\" does not match host name \"other.example\"{HOST_HINT}"
            ))
        );
        let untrusted = plan(Verification::Full, "other.crt", None);
        assert_eq!(
            handshake(&untrusted, "db.example", false).await,
            Err(format!(
                "certificate verify failed: unable to get local issuer certificate{ROOT_HINT}"
            ))
        );
    }

    #[tokio::test]
    async fn verify_ca_checks_chain_only() {
        let p = plan(Verification::ChainOnly, "ca.crt", None);
        assert_eq!(handshake(&p, "other.example", false).await, Ok(()));
        let untrusted = plan(Verification::ChainOnly, "other.crt", None);
        assert_eq!(
            handshake(&untrusted, "db.example", false).await,
            Err(format!(
                "certificate verify failed: unable to get local issuer certificate{ROOT_HINT}"
            ))
        );
    }

    #[tokio::test]
    async fn crls_revoke_in_both_verifying_modes() {
        for v in [Verification::ChainOnly, Verification::Full] {
            let p = plan(v, "ca.crt", Some("revoked.crl"));
            assert_eq!(
                handshake(&p, "db.example", false).await,
                Err("certificate verify failed: certificate revoked".into()),
                "{v:?}"
            );
        }
    }

    #[tokio::test]
    async fn unverified_accepts_any_certificate() {
        let p = plan(Verification::Unverified, "other.crt", None);
        assert_eq!(handshake(&p, "whatever.example", false).await, Ok(()));
    }

    #[tokio::test]
    async fn tls13_only_and_client_certificate_handshakes() {
        let mut p = plan(Verification::Full, "ca.crt", None);
        p.versions = (13, 13);
        assert_eq!(handshake(&p, "db.example", false).await, Ok(()));
        assert!(handshake(&p, "db.example", true).await.is_err());
        let home = home_with(&[("client.key", "k.pem")]);
        p.client_cert = Some((
            fixture("client.crt").into(),
            home.path().join(".postgresql/k.pem"),
        ));
        assert_eq!(handshake(&p, "db.example", true).await, Ok(()));
    }
}

// ---------------------------------------------------------------------------------------------
// Connecting: failures against fake servers (no PostgreSQL needed)

fn target_for(url: &str, timeout_ms: u64) -> Target {
    let mut s = settings(Some(url));
    s.connect_timeout = Some(Duration::from_millis(timeout_ms));
    resolve::resolve_quietly(&s, &env(&[])).expect("resolves")
}

#[tokio::test]
async fn refused_connections_are_retried_then_reported() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let t = target_for(
        &format!("host=127.0.0.1 port={port} user=app password=hunter2 sslmode=disable"),
        700,
    );
    let pool = t.pool(1).expect("pool");
    let err = t.connect(&pool).await.expect_err("nothing listens");
    assert_eq!(classify(&err), Exit::CannotConnect);
    let msg = err.to_string();
    let want = format!(
        "cannot connect to user \"app\" at host \"127.0.0.1\" port {port}, database \"app\": connection refused (retried for "
    );
    assert!(msg.starts_with(&want), "{msg}");
    assert!(!msg.contains(SECRET));
}

#[tokio::test]
async fn a_missing_socket_is_transient() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = target_for(&format!("host={} user=app", dir.path().display()), 300);
    let err = t
        .connect(&t.pool(1).expect("pool"))
        .await
        .expect_err("no socket");
    let msg = err.to_string();
    assert!(msg.contains("no server socket found"), "{msg}");
    assert!(msg.contains("(retried for"), "{msg}");
}

/// A server that answers every startup packet with one `ErrorResponse` and hangs up; returns
/// its port and a counter of connections served.
fn fake_server(
    sqlstate: &'static str,
    message: &'static str,
) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(&error_response(sqlstate, message));
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, served)
}

fn error_response(sqlstate: &str, message: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (field, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', sqlstate),
        (b'M', message),
    ] {
        body.push(field);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut msg = vec![b'E'];
    let len = u32::try_from(body.len() + 4).expect("small");
    msg.extend_from_slice(&len.to_be_bytes());
    msg.extend_from_slice(&body);
    msg
}

#[tokio::test]
async fn authentication_failures_are_not_retried() {
    let (port, served) = fake_server("28P01", "password authentication failed for user \"app\"");
    let t = target_for(
        &format!("host=127.0.0.1 port={port} user=app sslmode=disable"),
        3000,
    );
    let err = t
        .connect(&t.pool(1).expect("pool"))
        .await
        .expect_err("refused login");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot connect to user \"app\" at host \"127.0.0.1\" port {port}, database \"app\": password authentication failed for user \"app\""
        )
    );
    assert_eq!(classify(&err), Exit::CannotConnect);
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_starting_server_is_retried() {
    let (port, served) = fake_server("57P03", "the database system is starting up");
    let t = target_for(
        &format!("host=127.0.0.1 port={port} user=app sslmode=disable"),
        700,
    );
    let err = t
        .connect(&t.pool(1).expect("pool"))
        .await
        .expect_err("never ready");
    let msg = err.to_string();
    assert!(
        msg.ends_with("s)") && msg.contains(": the database system is starting up (retried for "),
        "{msg}"
    );
    assert!(served.load(std::sync::atomic::Ordering::SeqCst) > 1);
}

/// A server that accepts TCP connections but never says a word (a hung server, a black-holing
/// proxy): the attempt ends at the connect timeout, reported as such.
#[tokio::test]
async fn a_silent_server_times_out_at_the_connect_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let t = target_for(&format!("host=127.0.0.1 port={port} user=app"), 400);
    let started = std::time::Instant::now();
    let err = t
        .connect(&t.pool(1).expect("pool"))
        .await
        .expect_err("no answer");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(classify(&err), Exit::CannotConnect);
    assert!(
        err.to_string().ends_with(": timed out after 400ms"),
        "{err}"
    );
}

/// A TLS server presenting the fixtures' `db.example` certificate (signed by `ca.crt`) after
/// accepting PostgreSQL's SSLRequest; it never gets further than the handshake.
fn fake_tls_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut builder =
        SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).expect("acceptor");
    builder
        .set_certificate_chain_file(fixture("server.crt"))
        .expect("fixture");
    builder
        .set_private_key_file(fixture("server.key"), SslFiletype::PEM)
        .expect("fixture");
    let acceptor = builder.build();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut request = [0u8; 8];
            if stream.read_exact(&mut request).is_err() || stream.write_all(b"S").is_err() {
                continue;
            }
            // The client gives up during (or right after) the handshake; its verdict is what the
            // test checks.
            if let Ok(mut tls) = acceptor.accept(stream) {
                let mut buf = [0u8; 64];
                let _ = tls.read(&mut buf);
            }
        }
    });
    (port, served)
}

const ROOT_HINT: &str = "; sslrootcert (or ~/.postgresql/root.crt) must hold the root certificate that signed the server's certificate";
const HOST_HINT: &str =
    "; connect with a host name the certificate names, or use sslmode=verify-ca";

#[tokio::test]
async fn certificate_failures_are_explained_and_not_retried() {
    let (port, served) = fake_tls_server();
    let cases = [
        (
            format!(
                "host=db.example hostaddr=127.0.0.1 sslmode=verify-full sslrootcert={}",
                fixture("other.crt")
            ),
            "error performing TLS handshake: certificate verify failed: unable to get local issuer \
             certificate; sslrootcert (or ~/.postgresql/root.crt) must hold the root certificate \
             that signed the server's certificate",
        ),
        (
            format!(
                "host=wrong.example hostaddr=127.0.0.1 sslmode=verify-full sslrootcert={}",
                fixture("ca.crt")
            ),
            "error performing TLS handshake: server certificate for \"db.example\" does not match \
             host name \"wrong.example\"; connect with a host name the certificate names, or use \
             sslmode=verify-ca",
        ),
    ];
    for (i, (url, want)) in cases.iter().enumerate() {
        let t = target_for(
            &format!("{url} port={port} user=app password=hunter2"),
            3000,
        );
        let err = t
            .connect(&t.pool(1).expect("pool"))
            .await
            .expect_err("refused certificate");
        assert_eq!(classify(&err), Exit::CannotConnect);
        let msg = err.to_string();
        assert!(msg.ends_with(want), "{msg}");
        assert!(!msg.contains(SECRET));
        assert_eq!(
            served.load(std::sync::atomic::Ordering::SeqCst),
            i + 1,
            "not retried"
        );
    }
}

#[test]
fn session_settings_are_milliseconds() {
    assert_eq!(pool::setting_millis(Duration::from_secs(30)), "30000ms");
    assert_eq!(pool::setting_millis(Duration::ZERO), "0ms");
    assert_eq!(pool::setting_millis(Duration::from_micros(10)), "1ms");
    assert_eq!(
        pool::setting_millis(Duration::from_secs(u64::MAX)),
        "2147483647ms"
    );
}

// ---------------------------------------------------------------------------------------------
// Robustness

/// Random strings built from the characters that matter to the grammar never panic the
/// tokeniser or the resolver.
#[test]
fn random_input_never_panics() {
    const ALPHABET: &[char] = &[
        'a', 'h', 'o', 's', 't', '=', '\'', '\\', ' ', '%', '2', 'F', '@', ':', '/', '?', '&', ',',
        '[', ']', '0', '9', 'é', '\u{0}', '\t', '*', '-', '#',
    ];
    const WORDS: &[&str] = &[
        "postgresql://",
        "postgres://",
        "host=",
        "port=",
        "sslmode=",
        "hostaddr=",
        "user=",
        "%2F",
        "%00",
        "%zz",
        "[::1]",
        "verify-full",
        "sslrootcert=system",
        "target_session_attrs=",
        "65536",
        "::",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let fake = env(&[]);
    for _ in 0..5000 {
        let len = next() % 24;
        let mut input = String::new();
        for _ in 0..len {
            let r = next();
            if r % 4 == 0 {
                input.push_str(WORDS[(r / 4) as usize % WORDS.len()]);
            } else {
                input.push(ALPHABET[(r / 4) as usize % ALPHABET.len()]);
            }
        }
        let _ = conninfo::tokenize(&input);
        let s = settings(Some(&input));
        if let Err(e) = resolve::resolve_quietly(&s, &fake) {
            assert_eq!(classify(&e), Exit::Usage, "{input:?}: {e:#}");
        }
    }
}

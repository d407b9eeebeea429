//! Tests of the test harness itself: databases, isolation, the command runner.

use std::time::{Duration, Instant};

use crate::support::{Cmd, IDEMCTL, TestDb};

#[tokio::test]
async fn testdb_is_created_and_queried() {
    let started = Instant::now();
    let db = TestDb::new().await;
    eprintln!(
        "TestDb::new took {:?} (includes cluster start if first)",
        started.elapsed()
    );
    let client = db.client().await;
    let row = client
        .query_one("SELECT version(), current_database()", &[])
        .await
        .unwrap();
    let version: String = row.get(0);
    let current: String = row.get(1);
    assert!(version.starts_with("PostgreSQL "), "{version}");
    assert_eq!(current, db.name());
    assert!(db.name().starts_with("idemctl_t_"));
    db.exec("CREATE TABLE t (k text PRIMARY KEY); INSERT INTO t VALUES ('a')")
        .await;
    let n: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);

    // The URI form and overridden settings reach the same database.
    let via_uri = crate::support::connect(&db.uri()).await;
    let current: String = via_uri
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(current, db.name());
    let app = db.url_with(&[("application_name", "selftest app")]);
    assert!(app.contains("application_name='selftest app'"), "{app}");
    let name: String = crate::support::connect(&app)
        .await
        .query_one("SELECT current_setting('application_name')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, "selftest app");
}

#[tokio::test]
async fn testdbs_are_isolated_and_dropped() {
    let a = TestDb::new().await;
    let b = TestDb::new().await;
    assert_ne!(a.name(), b.name());
    a.exec("CREATE TABLE only_in_a (x int)").await;
    let found: bool = b
        .client()
        .await
        .query_one("SELECT to_regclass('only_in_a') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!found, "a table of {} is visible in {}", a.name(), b.name());

    let admin = a.admin().await;
    let name = a.name().to_owned();
    let _held_open = a.client().await; // Drop must force it out.
    drop(a);
    let exists: bool = admin
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!exists, "{name} survived its TestDb");
}

#[tokio::test]
#[should_panic(expected = "42P01")]
async fn exec_reports_the_sqlstate() {
    let db = TestDb::new().await;
    db.exec("SELECT * FROM no_such_table").await;
}

#[test]
fn cmd_runs_the_binary_without_a_tty() {
    assert!(std::path::Path::new(IDEMCTL).is_file(), "{IDEMCTL}");
    Cmd::new()
        .arg("--version")
        .run()
        .assert_code(0)
        .assert_stdout_contains(concat!("idemctl ", env!("CARGO_PKG_VERSION")))
        .assert_stderr_empty();
    // Stdin is /dev/null, not a terminal; stdin_bytes feeds a pipe.
    Cmd::of("sh")
        .args(["-c", "test -t 0 || echo no-tty; cat"])
        .stdin_bytes("fed")
        .run()
        .assert_code(0)
        .assert_stdout("no-tty\nfed")
        .assert_stderr_empty();
}

#[tokio::test]
async fn cmd_environment_is_hermetic() {
    let db = TestDb::new().await;
    let run = db
        .command("sh")
        .args(["-c", "env; exit 3"])
        .env("PGAPPNAME", "explicitly-set")
        .run();
    run.assert_code(3)
        .assert_stdout_contains(&format!("IDEMCTL_DATABASE_URL={}\n", db.url()));
    for line in run.stdout.lines() {
        let inherited = (line.starts_with("PG") && line != "PGAPPNAME=explicitly-set")
            || line.starts_with("DATABASE_URL=")
            || (line.starts_with("IDEMCTL_") && !line.starts_with("IDEMCTL_DATABASE_URL="));
        assert!(!inherited, "leaked into the child: {line}");
    }
}

#[test]
#[should_panic(expected = "timed out")]
fn cmd_timeout_kills_the_child() {
    Cmd::of("sleep")
        .arg("30")
        .timeout(Duration::from_millis(200))
        .run();
}

//! `--pushgateway` against a real Prometheus Pushgateway: each run lands in the group of its job,
//! database, table and labels; two databases never collide; a failed run keeps the last success;
//! an unreachable gateway costs one warning line and never changes the run's exit code.

use std::collections::BTreeMap;

use crate::fixtures::{self, Mix, Schema, scalar_i64};
use crate::support::TestDb;
use crate::support::pushgateway::{
    PASSWORD, Pushgateway, Sample, USER, Web, free_port, parse_samples,
};

const TABLE: &str = "public.idempotency_keys";

/// The value of `name` in the group `job`/`database` whose other labels include `extra`.
#[track_caller]
fn value(samples: &[Sample], name: &str, job: &str, db: &str, extra: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            s.labels.get("job").map(String::as_str) == Some(job)
                && s.labels.get("database").map(String::as_str) == Some(db)
                && s.labels.get("table").map(String::as_str) == Some(TABLE)
                && extra
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {name} for job {job}, database {db}, {extra:?}: {found:?}"
    );
    found[0].value
}

/// The groups the gateway holds (its push_time_seconds series), as their label sets.
fn groups(samples: &[Sample]) -> Vec<BTreeMap<String, String>> {
    samples
        .iter()
        .filter(|s| s.name == "push_time_seconds")
        .map(|s| s.labels.clone())
        .collect()
}

/// The CronJob's args in docs/unattended.md (it pushes), with the gateway's URL replaced.
fn cronjob_args(url: &str) -> Vec<String> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/unattended.md"))
        .unwrap();
    let line = page
        .lines()
        .find(|l| l.trim_start().starts_with("args: [") && l.contains("--pushgateway"))
        .expect("docs/unattended.md's CronJob example with --pushgateway");
    let mut args: Vec<String> = line
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    let at = args.iter().position(|a| a == "--pushgateway").unwrap();
    args[at + 1] = url.to_owned();
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_push_into_groups_by_job_database_table_and_labels() {
    let gw = Pushgateway::start();
    let a = TestDb::new().await;
    let b = TestDb::new().await;
    let mix = |expired| Mix {
        expired,
        live: 5,
        stuck: 2,
        ..Mix::default()
    };
    fixtures::table_with(&a, Schema::Corrected, mix(20)).await;
    fixtures::table_with(&b, Schema::Corrected, mix(7)).await;
    for db in [&a, &b] {
        db.exec(&crate::support::partman::stuck_index_ddl()).await;
    }

    // Database a: the guide's CronJob command (with its --label cluster=eu1), then stats and reclaim.
    let args = cronjob_args(&gw.url());
    assert!(args.contains(&"cluster=eu1".to_owned()), "{args:?}");
    a.idemctl()
        .args(&args)
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    for command in [vec!["stats"], vec!["reclaim", "--yes"]] {
        a.idemctl()
            .args(&command)
            .args(["--pushgateway", &gw.url(), "--label", "cluster=eu1"])
            .run()
            .assert_code(0)
            .assert_stdout_empty()
            .assert_stderr_empty();
    }
    // Database b, same table name: the URL from the environment, no extra label.
    b.idemctl()
        .arg("evict")
        .env("IDEMCTL_PUSHGATEWAY", gw.url())
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();

    let text = gw.metrics();
    let s = parse_samples(&text);
    let (da, db_) = (a.name(), b.name());
    let eu1 = [("cluster", "eu1")];
    assert_eq!(
        value(&s, "idemctl_evict_rows_evicted", "idemctl_evict", da, &eu1),
        20.0,
        "{text}"
    );
    assert_eq!(
        value(&s, "idemctl_evict_rows_evicted", "idemctl_evict", db_, &[]),
        7.0,
        "{text}"
    );
    assert_eq!(
        value(
            &s,
            "idemctl_expired_backlog_keys",
            "idemctl_stats",
            da,
            &eu1
        ),
        0.0
    );
    assert_eq!(
        value(
            &s,
            "idemctl_reclaim_keys_reclaimed",
            "idemctl_reclaim",
            da,
            &[("cluster", "eu1"), ("action", "delete")]
        ),
        2.0
    );
    for (job, db, extra) in [
        ("idemctl_evict", da, &eu1[..]),
        ("idemctl_stats", da, &eu1[..]),
        ("idemctl_reclaim", da, &eu1[..]),
        ("idemctl_evict", db_, &[][..]),
    ] {
        let success = format!("{job}_last_run_success");
        assert_eq!(value(&s, &success, job, db, extra), 1.0, "{job} {db}");
        assert_eq!(
            value(&s, "push_failure_time_seconds", job, db, extra),
            0.0,
            "{text}"
        );
    }
    // One group per job and database (and label set), each with the grouping labels only.
    let mut g = groups(&s);
    g.iter_mut().for_each(|l| {
        l.remove("instance");
    });
    g.sort();
    let group = |job: &str, db: &str, cluster: Option<&str>| {
        let mut l: BTreeMap<String, String> = [("job", job), ("database", db), ("table", TABLE)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        if let Some(c) = cluster {
            l.insert("cluster".into(), c.into());
        }
        l
    };
    let mut want = vec![
        group("idemctl_evict", da, Some("eu1")),
        group("idemctl_stats", da, Some("eu1")),
        group("idemctl_reclaim", da, Some("eu1")),
        group("idemctl_evict", db_, None),
    ];
    want.sort();
    assert_eq!(g, want, "{text}");
    // Every series of a group carries exactly the group's labels (plus its own, like reason).
    crate::metrics::promtool_check_metrics(&text);

    // A run that fails in the same group (the lock is busy) records the failure and keeps the
    // last success the good run pushed.
    let success_before = value(
        &s,
        "idemctl_evict_last_success_timestamp_seconds",
        "idemctl_evict",
        da,
        &eu1,
    );
    let other = a.client().await;
    other
        .batch_execute("SELECT pg_advisory_lock(31377153, 'idempotency_keys'::regclass::oid::int)")
        .await
        .unwrap();
    let run = a.idemctl().args(&args).run();
    run.assert_code(7).assert_stdout_empty();
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    drop(other);
    let s = parse_samples(&gw.metrics());
    assert_eq!(
        value(
            &s,
            "idemctl_evict_last_run_success",
            "idemctl_evict",
            da,
            &eu1
        ),
        0.0
    );
    assert_eq!(
        value(
            &s,
            "idemctl_evict_end_reason",
            "idemctl_evict",
            da,
            &[("cluster", "eu1"), ("reason", "lock_busy")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "idemctl_evict_last_success_timestamp_seconds",
            "idemctl_evict",
            da,
            &eu1
        ),
        success_before
    );
    // Database b's group is untouched.
    assert_eq!(
        value(
            &s,
            "idemctl_evict_last_run_success",
            "idemctl_evict",
            db_,
            &[]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_pushgateway_costs_one_warning_line_and_keeps_the_exit_code() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 15,
            live: 5,
            ..Mix::default()
        },
    )
    .await;
    db.exec(&crate::support::partman::stuck_index_ddl()).await;
    let url = format!("http://127.0.0.1:{}", free_port());
    let warning = format!(
        "idemctl: warning: failed to push metrics to the Pushgateway at {url}: Connection refused"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evict.prom");

    // A good run: its rows are evicted, its textfile written, exit 0, one warning line.
    let run = db
        .idemctl()
        .args(["evict", "--pushgateway", &url, "--textfile"])
        .arg(&path)
        .run();
    run.assert_code(0).assert_stdout_empty();
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    assert!(run.stderr.starts_with(&warning), "{run}");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        5
    );
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("idemctl_evict_rows_evicted{"),
        "the textfile is written all the same"
    );

    // A run that fails before it starts keeps its own exit code (3) and error line.
    let run = db
        .idemctl()
        .args(["evict", "-t", "no_such_table"])
        .env("IDEMCTL_PUSHGATEWAY", &url)
        .run();
    run.assert_code(3).assert_stdout_empty();
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{run}");
    assert_eq!(
        lines.iter().filter(|l| l.starts_with(&warning)).count(),
        1,
        "{run}"
    );
    assert!(run.stderr.contains("no_such_table"), "{run}");

    // stats and reclaim too.
    for command in [vec!["stats"], vec!["reclaim", "--yes"]] {
        let run = db
            .idemctl()
            .args(&command)
            .args(["--pushgateway", &url])
            .run();
        run.assert_code(0).assert_stdout_empty();
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
        assert!(run.stderr.starts_with(&warning), "{run}");
    }
}

/// A table with 20 expired keys and 5 live ones, and the stuck-key index stats and reclaim use.
async fn twenty_expired(db: &TestDb) {
    fixtures::table_with(
        db,
        Schema::Corrected,
        Mix {
            expired: 20,
            live: 5,
            ..Mix::default()
        },
    )
    .await;
    db.exec(&crate::support::partman::stuck_index_ddl()).await;
}

/// The value of `name` in the stats group of `db`, if the gateway holds it.
fn stats_success(gw: &Pushgateway, db: &TestDb) -> Option<f64> {
    parse_samples(&gw.metrics())
        .into_iter()
        .find(|s| {
            s.name == "idemctl_stats_last_run_success"
                && s.labels.get("database").map(String::as_str) == Some(db.name())
        })
        .map(|s| s.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_pushgateway_is_trusted_through_the_system_roots_or_only_the_ca_file() {
    let gw = Pushgateway::start_with(Web {
        tls: true,
        basic_auth: true,
    });
    let db = TestDb::new().await;
    twenty_expired(&db).await;
    let url = gw.url_with(USER, PASSWORD);
    let shown = gw.url();

    // The CA file: the push lands, the credentials went with it (the gateway demands them).
    db.idemctl()
        .args(["evict", "--pushgateway", &url, "--pushgateway-ca"])
        .arg(gw.ca_cert())
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    let s = parse_samples(&gw.metrics());
    assert_eq!(
        value(
            &s,
            "idemctl_evict_rows_evicted",
            "idemctl_evict",
            db.name(),
            &[]
        ),
        20.0
    );

    // The system's roots (OpenSSL's SSL_CERT_FILE stands for the system store here), and the
    // options from the environment.
    db.idemctl()
        .arg("stats")
        .env("IDEMCTL_PUSHGATEWAY", &url)
        .env("SSL_CERT_FILE", gw.ca_cert())
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    assert_eq!(stats_success(&gw, &db), Some(1.0));

    // A CA file replaces the system's roots: one that did not sign the gateway's certificate
    // fails the push (a warning; the run's exit code stands), whatever the system trusts.
    let warning =
        format!("idemctl: warning: failed to push metrics to the Pushgateway at {shown}:");
    for (ca, system) in [
        (Some(gw.other_ca_cert()), gw.ca_cert()),
        (None, gw.other_ca_cert()),
    ] {
        let mut cmd = db
            .idemctl()
            .args(["stats", "--pushgateway", &url])
            .env("SSL_CERT_FILE", system);
        if let Some(ca) = ca {
            cmd = cmd.env("IDEMCTL_PUSHGATEWAY_CA", ca);
        }
        let run = cmd.run();
        run.assert_code(0).assert_stdout_empty();
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
        assert!(
            run.stderr
                .starts_with(&format!("{warning} TLS handshake failed: ")),
            "{run}"
        );
        run.assert_stderr_contains("certificate verify failed");
    }

    // A wrong password is the gateway's refusal, in one warning line.
    let wrong = gw.url_with(USER, "wrong");
    db.idemctl()
        .args(["stats", "--pushgateway", &wrong, "--pushgateway-ca"])
        .arg(gw.ca_cert())
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr(&format!("{warning} HTTP 401: Unauthorized\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_never_sent_over_plain_http_without_the_opt_in() {
    let gw = Pushgateway::start_with(Web {
        tls: false,
        basic_auth: true,
    });
    let db = TestDb::new().await;
    twenty_expired(&db).await;
    let url = gw.url_with(USER, PASSWORD);
    let refusal = format!(
        "the Pushgateway URL {} carries credentials, which plain http would send in clear; use \
         https://, or pass --pushgateway-allow-http-auth to send them anyway",
        gw.url()
    );

    // Refused before anything changes: exit 2, one line, no password, no row evicted.
    for command in [vec!["evict"], vec!["stats"], vec!["reclaim", "--yes"]] {
        let run = db
            .idemctl()
            .args(&command)
            .args(["--pushgateway", &url])
            .run();
        run.assert_error(2, &refusal);
        assert!(!run.stderr.contains(PASSWORD), "{run}");
    }
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        25
    );
    assert_eq!(stats_success(&gw, &db), None, "nothing was pushed");

    // The opt-in, as a flag or from the environment, sends them.
    db.idemctl()
        .args([
            "evict",
            "--pushgateway",
            &url,
            "--pushgateway-allow-http-auth",
        ])
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        5
    );
    db.idemctl()
        .args(["stats", "--pushgateway", &url])
        .env("IDEMCTL_PUSHGATEWAY_ALLOW_HTTP_AUTH", "true")
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    assert_eq!(stats_success(&gw, &db), Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushgateway_ca_that_cannot_be_used_is_refused_before_any_change() {
    let db = TestDb::new().await;
    twenty_expired(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not-a-certificate.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let missing = dir.path().join("missing.crt");
    let https = "https://127.0.0.1:9";
    for (url, ca, message) in [
        (
            https,
            &missing,
            format!(
                "cannot read --pushgateway-ca {}: No such file or directory (os error 2)",
                missing.display()
            ),
        ),
        (
            https,
            &not_pem,
            format!(
                "--pushgateway-ca {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                not_pem.display()
            ),
        ),
        (
            "http://127.0.0.1:9",
            &not_pem,
            "--pushgateway-ca applies to an https:// Pushgateway, and http://127.0.0.1:9 is \
             plain http"
                .to_owned(),
        ),
    ] {
        db.idemctl()
            .args(["evict", "--pushgateway", url, "--pushgateway-ca"])
            .arg(ca)
            .run()
            .assert_error(2, &message);
    }
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        25
    );
    // A URL that is neither http:// nor https:// is clap's usage error.
    db.idemctl()
        .args(["evict", "--pushgateway", "pgw:9091"])
        .run()
        .assert_error(
            2,
            "invalid value 'pgw:9091' for '--pushgateway <URL>': expected an http:// or \
             https:// URL such as https://pushgateway:9091 (see --help)",
        );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushgateway_that_never_answers_costs_one_warning_line_at_the_deadline() {
    let db = TestDb::new().await;
    twenty_expired(&db).await;
    // The kernel completes the handshakes in the listen backlog; nothing ever reads or answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    for url in [
        format!("http://127.0.0.1:{port}"),
        format!("https://127.0.0.1:{port}"),
    ] {
        db.idemctl()
            .args(["stats", "--pushgateway", &url])
            .run()
            .assert_code(0)
            .assert_stdout_empty()
            .assert_stderr(&format!(
                "idemctl: warning: failed to push metrics to the Pushgateway at {url}: no answer \
                 within 10s\n"
            ));
    }
    drop(silent);
}

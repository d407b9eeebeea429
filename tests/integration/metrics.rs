//! Metrics an operator can trust: every series labelled with its database and table (and any
//! --label), every run recorded even when it fails before it starts, the destination checked
//! before anything changes, silence under cron, checked by promtool.

use crate::fixtures::{self, Mix, Schema, scalar_i64};
use crate::support::{Cmd, Run, TestDb};

const TABLE: &str = "public.idempotency_keys";

fn table_with_expired(n: i64) -> Mix {
    Mix {
        expired: n,
        live: 5,
        ..Mix::default()
    }
}

/// The value of the sample whose line starts with `prefix` (name and labels).
#[track_caller]
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

/// The labels of a run of `db`'s default table: `name{database="..",table=".."` (open brace).
fn series(name: &str, db: &str) -> String {
    format!("{name}{{database=\"{db}\",table=\"{TABLE}\"")
}

fn closed(name: &str, db: &str) -> String {
    format!("{}}}", series(name, db))
}

/// `promtool check metrics` on exposition text: promtool must be installed (the tests never skip).
#[track_caller]
pub(crate) fn promtool_check_metrics(text: &str) {
    let run = Cmd::of(promtool())
        .args(["check", "metrics"])
        .stdin_bytes(text)
        .run();
    assert_eq!(run.code, 0, "promtool check metrics failed:\n{run}\n{text}");
}

/// The promtool binary (Debian package `prometheus`); a missing one fails the test loudly.
pub(crate) fn promtool() -> &'static str {
    let path = "/usr/bin/promtool";
    assert!(
        std::path::Path::new(path).exists() || which("promtool"),
        "promtool is not installed: apt-get install prometheus, or run scripts/test, which installs it (the metrics tests need it)"
    );
    if std::path::Path::new(path).exists() {
        path
    } else {
        "promtool"
    }
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_carries_database_table_and_the_given_labels() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, table_with_expired(40)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemctl.prom");
    db.idemctl()
        .args([
            "stats",
            "--label",
            "cluster=eu1",
            "--label",
            "note=a\"b\\c",
            "--textfile",
        ])
        .arg(&path)
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    let text = std::fs::read_to_string(&path).unwrap();
    let labels = format!(
        "{{database=\"{}\",table=\"{TABLE}\",cluster=\"eu1\",note=\"a\\\"b\\\\c\"}}",
        db.name()
    );
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let reason = line.contains("_end_reason{");
        assert!(
            line.contains(&labels) || reason && line.contains(&labels[..labels.len() - 1]),
            "series without the common labels: {line}\n{text}"
        );
    }
    assert_eq!(
        sample(&text, &format!("idemctl_expired_backlog_keys{labels}")),
        Some(40.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("idemctl_stats_last_run_success{labels}")),
        Some(1.0),
        "{text}"
    );
    promtool_check_metrics(&text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_databases_with_the_same_table_never_collide() {
    let a = TestDb::new().await;
    let b = TestDb::new().await;
    fixtures::table_with(&a, Schema::Corrected, table_with_expired(3)).await;
    fixtures::table_with(&b, Schema::Corrected, table_with_expired(7)).await;
    let run_a = a.idemctl().args(["stats", "-o", "prometheus"]).run();
    let run_b = b.idemctl().args(["stats", "-o", "prometheus"]).run();
    // node_exporter merges every textfile into one scrape: the union must stay valid and distinct.
    let union = format!("{}{}", run_a.stdout, run_b.stdout);
    let merged = merge_families(&union);
    promtool_check_metrics(&merged);
    assert_eq!(
        sample(&merged, &closed("idemctl_expired_backlog_keys", a.name())),
        Some(3.0)
    );
    assert_eq!(
        sample(&merged, &closed("idemctl_expired_backlog_keys", b.name())),
        Some(7.0)
    );
}

/// Group samples of the same metric under one HELP/TYPE, as node_exporter does when it merges files.
fn merge_families(text: &str) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut heads: std::collections::HashMap<String, Vec<String>> = Default::default();
    let mut samples: std::collections::HashMap<String, Vec<String>> = Default::default();
    for line in text.lines() {
        let name = if let Some(rest) = line.strip_prefix("# ") {
            rest.split(' ').nth(1).unwrap().to_owned()
        } else {
            line.split(['{', ' ']).next().unwrap().to_owned()
        };
        if !order.contains(&name) {
            order.push(name.clone());
        }
        if line.starts_with('#') {
            let h = heads.entry(name).or_default();
            if h.len() < 2 {
                h.push(line.to_owned());
            }
        } else {
            samples.entry(name).or_default().push(line.to_owned());
        }
    }
    let mut out = String::new();
    for name in order {
        for l in heads.get(&name).into_iter().flatten() {
            out.push_str(&format!("{l}\n"));
        }
        for l in samples.get(&name).into_iter().flatten() {
            out.push_str(&format!("{l}\n"));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_labels_are_refused_before_connecting() {
    for (label, why) in [
        (
            "table=x",
            "label name \"table\" is set by idemctl or Prometheus itself; choose another name",
        ),
        (
            "2x=y",
            "label name \"2x\" is not a Prometheus label name (letters, digits and _, not \
             starting with a digit)",
        ),
        (
            "__x=y",
            "label name \"__x\" starts with __, which Prometheus reserves",
        ),
        (
            "x=",
            "label x has an empty value, which Prometheus treats as no label; give a value",
        ),
        ("x", "expected KEY=VALUE, e.g. --label cluster=eu1"),
    ] {
        Cmd::new()
            .args(["stats", "-d", "host=127.0.0.1 port=1", "--label", label])
            .run()
            .assert_error(
                2,
                &format!("invalid value '{label}' for '--label <KEY=VALUE>': {why} (see --help)"),
            );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_checks_the_textfile_directory_before_deleting_anything() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, table_with_expired(50)).await;
    let run = db
        .idemctl()
        .args(["evict", "--textfile", "/nonexistent/x.prom"])
        .run();
    run.assert_error(
        2,
        "cannot write metrics to /nonexistent/x.prom: directory /nonexistent does not exist; \
         create it or point --textfile elsewhere",
    );
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        55
    );
    let dir = tempfile::tempdir().unwrap();
    let shown = dir.path().display();
    db.idemctl()
        .args(["evict", "--textfile"])
        .arg(dir.path())
        .run()
        .assert_error(
            2,
            &format!(
                "cannot write metrics to {shown}: {shown} is a directory; give a file name such \
                 as {shown}/idemctl.prom"
            ),
        );
}

/// Run evict into `path`, expecting `code`.
fn evict_into(cmd: Cmd, path: &std::path::Path, code: i32) -> Run {
    let run = cmd.args(["evict", "--textfile"]).arg(path).run();
    run.assert_code(code);
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failed_evict_records_itself_and_keeps_the_last_success() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, table_with_expired(20)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evict.prom");
    let d = db.name();

    // The first run ever fails (no such table): a run is recorded, no success ever.
    evict_into(db.idemctl().args(["-t", "no_such_table"]), &path, 3);
    let text = std::fs::read_to_string(&path).unwrap();
    let missing = "idemctl_evict_last_run_success{database=\"";
    assert!(text.contains(missing), "{text}");
    assert!(
        text.contains(&format!(
            "idemctl_evict_end_reason{{database=\"{d}\",table=\"public.no_such_table\",reason=\"table_not_found\"}} 1"
        )),
        "{text}"
    );
    assert!(
        !text.contains("idemctl_evict_last_success_timestamp_seconds"),
        "{text}"
    );
    promtool_check_metrics(&text);

    // A good run, then one failure of each kind: the last success stays.
    evict_into(db.idemctl(), &path, 0);
    let text = std::fs::read_to_string(&path).unwrap();
    let success = sample(
        &text,
        &closed("idemctl_evict_last_success_timestamp_seconds", d),
    )
    .expect("last success after a good run");
    assert_eq!(
        sample(&text, &closed("idemctl_evict_last_run_success", d)),
        Some(1.0)
    );

    let role = format!("noevict_{}", &d[crate::support::pg::DB_PREFIX.len()..]);
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT ON idempotency_keys TO {role}"
    ))
    .await;
    let other = db.client().await;
    other
        .batch_execute("SELECT pg_advisory_lock(31377153, 'idempotency_keys'::regclass::oid::int)")
        .await
        .unwrap();
    let refused = Cmd::new().args([
        "-d",
        &format!("host=127.0.0.1 port=1 dbname={d} user=x"),
        "--connect-timeout",
        "1s",
    ]);
    let cases = [
        (refused, 5, "cannot_connect"),
        (
            Cmd::new().env(
                "IDEMCTL_DATABASE_URL",
                db.url_with(&[("user", role.as_str())]),
            ),
            6,
            "permission_denied",
        ),
        (db.idemctl(), 7, "lock_busy"),
    ];
    for (cmd, code, reason) in cases {
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let run = evict_into(cmd, &path, code);
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            sample(&text, &closed("idemctl_evict_last_run_success", d)),
            Some(0.0),
            "{reason}: {text}"
        );
        assert_eq!(
            sample(
                &text,
                &format!(
                    "{},reason=\"{reason}\"}}",
                    series("idemctl_evict_end_reason", d)
                )
            ),
            Some(1.0),
            "{reason}: {text}"
        );
        assert_eq!(
            sample(
                &text,
                &closed("idemctl_evict_last_success_timestamp_seconds", d)
            ),
            Some(success),
            "{reason}: {text}"
        );
        let last_run = sample(
            &text,
            &closed("idemctl_evict_last_run_timestamp_seconds", d),
        )
        .unwrap();
        assert!(last_run > success, "{reason}: {text}");
        assert!(sample(&text, &closed("idemctl_evict_duration_seconds", d)).is_some());
        promtool_check_metrics(&text);
    }
    drop(other);
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_reclaim_writing_metrics_are_silent_under_cron() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            stuck: 4,
            ..table_with_expired(5)
        },
    )
    .await;
    db.exec(&crate::support::partman::stuck_index_ddl()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stats.prom");
    db.idemctl()
        .args(["stats", "--textfile"])
        .arg(&path)
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    // Asked to print, it prints.
    db.idemctl()
        .args(["stats", "-o", "plain", "--textfile"])
        .arg(&path)
        .run()
        .assert_code(0)
        .assert_stdout_contains("expired backlog");

    let path = dir.path().join("reclaim.prom");
    db.idemctl()
        .args(["reclaim", "--yes", "--textfile"])
        .arg(&path)
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    let text = std::fs::read_to_string(&path).unwrap();
    let d = db.name();
    assert_eq!(
        sample(
            &text,
            &format!(
                "{},action=\"delete\"}}",
                series("idemctl_reclaim_keys_reclaimed", d)
            )
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!(
                "{},reason=\"held\"}}",
                series("idemctl_reclaim_keys_left_alone", d)
            )
        ),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &closed("idemctl_reclaim_last_run_success", d)),
        Some(1.0)
    );
    promtool_check_metrics(&text);
}

/// The shipped rules file, beside its promtool unit tests.
fn rules_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus")
}

/// Every `idemctl_...` metric name a text mentions.
fn metric_names_in(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("idemctl_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The metric names of exposition text (sample lines only).
fn series_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_alert_rules_pass_promtool_and_use_only_series_idemctl_writes() {
    let dir = rules_dir();
    let rules = dir.join("idemctl-alerts.yml");
    let tests = dir.join("idemctl-alerts.test.yml");
    let run = Cmd::of(promtool())
        .args(["check", "rules"])
        .arg(&rules)
        .run();
    assert_eq!(run.code, 0, "promtool check rules failed:\n{run}");
    let run = Cmd::of(promtool())
        .args(["test", "rules"])
        .arg(&tests)
        .current_dir(&dir)
        .run();
    assert_eq!(run.code, 0, "promtool test rules failed:\n{run}");
    assert!(run.stdout.contains("SUCCESS"), "{run}");

    // What idemctl really writes: stats, evict and reclaim, with every optional figure present.
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            stuck: 3,
            expired_in_progress: 2,
            ..table_with_expired(30)
        },
    )
    .await;
    db.exec(&crate::support::partman::stuck_index_ddl()).await;
    // A NO ACTION foreign key through an indexed column: stats writes the referenced figures.
    db.exec(
        "CREATE TABLE charges (id serial PRIMARY KEY, api_key_id text, idem_key text, \
           FOREIGN KEY (api_key_id, idem_key) REFERENCES idempotency_keys ON DELETE NO ACTION); \
         CREATE INDEX ON charges (api_key_id, idem_key);",
    )
    .await;
    let out = tempfile::tempdir().unwrap();
    let mut written = std::collections::BTreeSet::new();
    for command in ["stats", "evict", "reclaim"] {
        let path = out.path().join(format!("{command}.prom"));
        let mut cmd = db.idemctl().arg(command);
        if command == "reclaim" {
            cmd = cmd.arg("--yes");
        }
        cmd.arg("--textfile").arg(&path).run().assert_code(0);
        written.extend(series_names(&std::fs::read_to_string(&path).unwrap()));
    }
    // Without the expiry index stats writes the planner's estimates in gauges of their own.
    db.exec("DROP INDEX idempotency_keys_expiry; ANALYZE idempotency_keys")
        .await;
    let path = out.path().join("stats-estimated.prom");
    db.idemctl()
        .arg("stats")
        .arg("--textfile")
        .arg(&path)
        .run()
        .assert_code(0);
    let estimated = series_names(&std::fs::read_to_string(&path).unwrap());
    assert!(
        estimated.contains("idemctl_eviction_lag_estimated_seconds"),
        "{estimated:?}"
    );
    written.extend(estimated);
    let mentioned = metric_names_in(&std::fs::read_to_string(&rules).unwrap());
    assert!(mentioned.len() >= 8, "{mentioned:?}");
    let unknown: Vec<_> = mentioned.difference(&written).collect();
    assert!(
        unknown.is_empty(),
        "the rules use series idemctl never writes: {unknown:?}\nwritten: {written:?}"
    );
    // The unit tests feed the rules series that exist too (a renamed metric fails here).
    let fed = metric_names_in(&std::fs::read_to_string(&tests).unwrap());
    let unknown: Vec<_> = fed.iter().filter(|n| !written.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "the rule tests use series idemctl never writes: {unknown:?}"
    );
}

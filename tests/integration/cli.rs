//! The command line itself: help, exit codes, generated docs, and bad input rejected before any
//! database work with a one-line message.

use crate::fixtures::{self, Mix, Schema, scalar_i64};
use crate::support::{Cmd, TestDb};

#[test]
fn help_lists_every_exit_code() {
    let run = Cmd::new().arg("--help").run();
    run.assert_code(0);
    for code in [
        "  0  success",
        "  2  usage error",
        "  3  key not found",
        "  5  cannot connect",
        "  7  another idemctl run",
        "130  interrupted",
    ] {
        assert!(
            run.stdout.contains(code),
            "--help lacks {code:?}:\n{}",
            run.stdout
        );
    }
}

#[test]
fn man_page_is_in_sync_with_the_cli() {
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/idemctl.1"))
        .unwrap_or_default();
    let generated = idemctl::man_page().unwrap();
    assert!(
        committed == generated,
        "man/idemctl.1 is stale; regenerate it with: cargo run --quiet -- man > man/idemctl.1"
    );
    for section in [
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH EXAMPLES",
        "IDEMCTL EVICT",
    ] {
        assert!(generated.contains(section), "man page lacks {section}");
    }
    // One page: no references to per-command pages that do not exist.
    assert!(
        !generated.contains("(1)"),
        "man page refers to another page"
    );
    for command in [
        "inspect",
        "stats",
        "check",
        "evict",
        "reclaim",
        "completions",
    ] {
        let heading = format!(".SH \"IDEMCTL {}\"\n.PP\n", command.to_uppercase());
        assert!(
            generated.contains(&heading),
            "{command}'s section does not start with its description"
        );
    }
    // Synopses show every option's value.
    for synopsis in [
        "[\\fB\\-\\-api\\-key\\-id\\fR \\fIID\\fR]",
        "[\\fB\\-\\-canonical\\fR \\fIjcs|sorted\\-keys|raw\\fR]",
        "[\\fB\\-t\\fR|\\fB\\-\\-table\\fR \\fI[SCHEMA.]NAME\\fR]",
    ] {
        assert!(generated.contains(synopsis), "man page lacks {synopsis}");
    }
}

#[test]
fn help_lists_exit_codes_in_ascending_order() {
    let run = Cmd::new().arg("--help").run();
    let at = |code: &str| {
        run.stdout
            .find(code)
            .unwrap_or_else(|| panic!("no {code:?}"))
    };
    assert!(
        at("\n 70  internal error") < at("\n130  interrupted"),
        "{}",
        run.stdout
    );
}

#[test]
fn completions_offer_no_connection_options_to_the_completions_command() {
    let run = Cmd::new().args(["completions", "--help"]).run();
    run.assert_code(0);
    assert!(!run.stdout.contains("--database-url"), "{}", run.stdout);
    let run = Cmd::new().args(["completions", "bash"]).run();
    let section = run
        .stdout
        .split("        idemctl__subcmd__completions)")
        .nth(1)
        .unwrap_or_default();
    let opts = section
        .lines()
        .find(|l| l.contains("opts="))
        .unwrap_or_default();
    assert_eq!(
        opts.trim(),
        r#"opts="-h --help bash elvish fish powershell zsh""#
    );
}

#[test]
fn completions_are_generated() {
    let run = Cmd::new().args(["completions", "bash"]).run();
    run.assert_code(0).assert_stdout_contains("_idemctl()");
}

/// Inputs refused by argument validation: exit 2, one line, nothing about the database.
#[test]
fn bad_arguments_are_refused_with_one_line() {
    let cases: &[&[&str]] = &[
        &["evict", "--batch-size", "0"],
        &["evict", "--batch-size", "-5"],
        &["evict", "--batch-size", "99999999999"],
        &["evict", "--max-runtime", "5"],
        &["evict", "--max-runtime", "soon"],
        &["evict", "--pause", "1000000y"],
        &["evict", "--min-age", "0s"],
        &["stats", "--stuck-after", "-1m"],
        &["--table", "a.b.c", "stats"],
        &["--table", "x\"; DROP TABLE y; --", "stats"],
        &["--table", "", "stats"],
        &["evict", "--no-such-flag"],
        &["frobnicate"],
    ];
    for args in cases {
        let run = Cmd::new().args(*args).run();
        run.assert_code(2);
        assert!(!run.stderr.contains("panicked"), "{run}");
        assert!(run.stderr.starts_with("idemctl: "), "{run}");
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_is_reported_in_one_line() {
    let db = TestDb::new().await;
    for table in ["nope", "public.nope", "x'); DROP TABLE y; --"] {
        let run = db.idemctl().args(["stats", "--table", table]).run();
        run.assert_code(3);
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
        assert!(run.stderr.contains("does not exist"), "{run}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_the_expected_columns_is_refused_before_any_change() {
    let db = TestDb::new().await;
    db.exec(
        "CREATE TABLE idempotency_keys (key text PRIMARY KEY, expires_at timestamptz); \
             INSERT INTO idempotency_keys VALUES ('a', now() - interval '1 day')",
    )
    .await;
    let run = db.idemctl().args(["evict"]).run();
    run.assert_code(2)
        .assert_stderr_contains("matches no table profile (storage needs tenant column api_key_id");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_but_legal_table_names_are_quoted() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    db.exec(
        "CREATE SCHEMA \"My Schema\"; ALTER TABLE idempotency_keys SET SCHEMA \"My Schema\"; \
         ALTER TABLE \"My Schema\".idempotency_keys RENAME TO \"keys; drop\"",
    )
    .await;
    let run = db
        .idemctl()
        .args(["--table", "My Schema.keys; drop", "stats", "-o", "json"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["table"], "My Schema.keys; drop");
}

/// A table name with a backslash and a bidirectional override: every report's JSON carries it
/// exactly as the catalog holds it, the text reports escape it, and the metrics label is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_carry_the_table_name_exactly_and_text_escapes_it() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 30,
        live: 10,
        stuck: 4,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    let name = "keys\\and\u{202e}rtl";
    db.exec(&format!(
        "ALTER TABLE idempotency_keys RENAME TO \"{name}\""
    ))
    .await;
    let exact = format!("public.{name}");
    let escaped = "public.keys\\\\and\\u{202e}rtl";
    // The fix stats prints names the table in the Unicode-escape form, and runs as printed.
    let stats = db
        .idemctl()
        .args(["--table", name, "stats", "-o", "plain"])
        .run_async()
        .await;
    let from = stats
        .stdout
        .find("CREATE INDEX")
        .expect("a fix in the note");
    let fix = &stats.stdout[from..from + stats.stdout[from..].find(';').unwrap() + 1];
    assert!(fix.contains("U&\"keys\\\\and\\202Ertl\""), "{fix}");
    db.exec(fix).await;
    db.idemctl()
        .args(["--table", name, "stats", "-o", "plain"])
        .run_async()
        .await
        .assert_code(0)
        .assert_stdout_contains("stuck in_progress (> 5m)  4");
    let runs: [&[&str]; 6] = [
        &["stats"],
        &["check"],
        &["evict", "--dry-run"],
        &["evict"],
        &["reclaim", "--dry-run"],
        &["reclaim", "--yes"],
    ];
    for args in runs {
        let json = db
            .idemctl()
            .args(["--table", name])
            .args(args)
            .args(["-o", "json"])
            .run_async()
            .await;
        assert!(matches!(json.code, 0 | 1), "{json}");
        assert_eq!(json.json()["table"], exact.as_str(), "{args:?}: {json}");
        let plain = db
            .idemctl()
            .args(["--table", name])
            .args(args)
            .args(["-o", "plain"])
            .run_async()
            .await;
        assert!(matches!(plain.code, 0 | 1), "{plain}");
        if args != ["check"] && args != ["evict"] && args != ["reclaim", "--yes"] {
            plain.assert_stdout_contains(escaped);
        }
        assert!(!plain.stdout.contains('\u{202e}'), "{args:?}: {plain}");
        assert!(!plain.stderr.contains('\u{202e}'), "{args:?}: {plain}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemctl.prom");
    db.idemctl()
        .args(["--table", name, "stats", "--textfile"])
        .arg(&path)
        .run_async()
        .await
        .assert_code(0);
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(
        written.contains("table=\"public.keys\\\\and\u{202e}rtl\""),
        "{written}"
    );
}

#[test]
fn unknown_conninfo_keys_and_malformed_urls_are_usage_errors_without_the_password() {
    for url in [
        "host=/tmp frobnicate=1 password=s3cretpw",
        "postgresql://u:s3cretpw@[::1/db",
        "host='unterminated password=s3cretpw",
        "postgresql://u:s3cretpw@localhost:notaport/db",
    ] {
        let run = Cmd::new().args(["stats", "-d", url]).run();
        run.assert_code(2);
        assert!(
            !run.stderr.contains("s3cretpw") && !run.stdout.contains("s3cretpw"),
            "{run}"
        );
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
    }
}

#[test]
fn an_unreachable_server_fails_within_the_connect_timeout() {
    let started = std::time::Instant::now();
    let run = Cmd::new()
        .args([
            "stats",
            "--connect-timeout",
            "1s",
            "-d",
            "host=127.0.0.1 port=1 user=idem dbname=app password=s3cretpw",
        ])
        .run();
    run.assert_code(5);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(
        run.stderr.contains("127.0.0.1") && run.stderr.contains("idem"),
        "{run}"
    );
    assert!(!run.stderr.contains("s3cretpw"), "{run}");
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_database_is_a_connection_error() {
    let db = TestDb::new().await;
    let url = db.url_with(&[("dbname", "no_such_database_here")]);
    let run = Cmd::new().args(["stats", "-d", &url]).run();
    run.assert_code(5)
        .assert_stderr_contains("no_such_database_here");
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_output_is_only_for_stats() {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, Mix::default()).await;
    for command in [&["evict"][..], &["inspect", "k"], &["check"], &["reclaim"]] {
        db.idemctl()
            .args(command)
            .args(["-o", "prometheus"])
            .run()
            .assert_error(
                2,
                "--output prometheus is only available for stats; use table, plain or json",
            );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_timeouts_bound_every_statement() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            live: 10,
            ..Mix::default()
        },
    )
    .await;
    let ddl = db.client().await;
    ddl.batch_execute("BEGIN; LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();

    let started = std::time::Instant::now();
    let run = db
        .idemctl()
        .args(["stats", "--lock-timeout", "300ms"])
        .run_async()
        .await;
    run.assert_code(1)
        .assert_stderr_contains("canceling statement due to lock timeout");
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{run}"
    );

    let run = db
        .idemctl()
        .args([
            "stats",
            "--lock-timeout",
            "1h",
            "--statement-timeout",
            "300ms",
        ])
        .run_async()
        .await;
    run.assert_code(1)
        .assert_stderr_contains("canceling statement due to statement timeout");
    ddl.batch_execute("ROLLBACK").await.unwrap();
}

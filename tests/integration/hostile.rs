//! Hostile or mistaken input, table-driven: every case ends with its documented exit code and one
//! line on stderr, no panic or backtrace, no password in any output, and the table unchanged.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use crate::fixtures::{self, Mix, Schema, snapshot};
use crate::support::{Cmd, TestDb};

const PASSWORD: &str = "hunter2-Sekr1t";

/// One case: what it is, its arguments, the expected exit code, and a fragment of the message.
struct Case {
    what: &'static str,
    args: Vec<OsString>,
    code: i32,
    says: &'static str,
}

fn case(what: &'static str, args: &[&str], code: i32, says: &'static str) -> Case {
    Case {
        what,
        args: args.iter().map(OsString::from).collect(),
        code,
        says,
    }
}

fn cases(dir: &std::path::Path) -> Vec<Case> {
    let file = |name: &str, body: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p.to_string_lossy().into_owned()
    };
    let not_json = file("not-json.json", b"{\"type\": ");
    let array = file("array.json", b"[1, 2, 3]");
    let truncated = file(
        "truncated-plan.json",
        b"{\"schema_version\": 1, \"table\": \"public.idempo",
    );
    let other_table = file(
        "other-table-plan.json",
        br#"{"schema_version":1,"table":"public.not_this_table","older_than_seconds":300,"action":"delete","rows":[]}"#,
    );
    let long_name = "t".repeat(64);
    let long_key = "k".repeat(10_000);
    let mut v = vec![
        case(
            "zero batch size",
            &["evict", "--batch-size", "0"],
            2,
            "--batch-size",
        ),
        case(
            "negative batch size",
            &["evict", "--batch-size", "-5"],
            2,
            "--batch-size",
        ),
        case(
            "huge batch size",
            &["evict", "--batch-size", "18446744073709551616"],
            2,
            "--batch-size",
        ),
        case(
            "batch size above the cap",
            &["evict", "--batch-size", "1000000"],
            2,
            "--batch-size",
        ),
        case(
            "duration without unit",
            &["evict", "--max-runtime", "5"],
            2,
            "--max-runtime",
        ),
        case(
            "absurd duration",
            &["evict", "--pause", "999999999h"],
            2,
            "--pause",
        ),
        case(
            "duration that is words",
            &["evict", "--max-runtime", "soon"],
            2,
            "--max-runtime",
        ),
        case(
            "negative duration",
            &["stats", "--stuck-after", "-5m"],
            2,
            "--stuck-after",
        ),
        case(
            "zero min-age",
            &["evict", "--min-age", "0s"],
            2,
            "--min-age",
        ),
        case(
            "zero statement timeout",
            &["stats", "--statement-timeout", "0ms"],
            2,
            "--statement-timeout",
        ),
        case("zero jobs", &["evict", "--jobs", "0"], 2, "--jobs"),
        case(
            "duty cycle over 100",
            &["evict", "--duty-cycle", "101"],
            2,
            "--duty-cycle",
        ),
        case(
            "unknown flag",
            &["evict", "--delete-everything"],
            2,
            "--delete-everything",
        ),
        case("unknown command", &["drop"], 2, "drop"),
        case(
            "unknown conninfo key",
            &["stats", "-d", "host=/tmp frobnicate=1"],
            2,
            "frobnicate",
        ),
        case(
            "bad sslmode",
            &["stats", "-d", "host=/tmp sslmode=sometimes"],
            2,
            "sslmode",
        ),
        case(
            "service file",
            &["stats", "-d", "service=prod"],
            2,
            "service",
        ),
        case(
            "unterminated quote",
            &["stats", "-d", "host='/tmp password=hunter2-Sekr1t"],
            2,
            "",
        ),
        case(
            "bad port in URI",
            &["stats", "-d", "postgresql://u:hunter2-Sekr1t@db:99999/app"],
            2,
            "port",
        ),
        case(
            "broken URI",
            &["stats", "-d", "postgresql://u:hunter2-Sekr1t@[::1/app"],
            2,
            "",
        ),
        case(
            "three-part table name",
            &["--table", "a.b.c", "stats"],
            2,
            "--table",
        ),
        case(
            "quote in table name",
            &["--table", "keys\"; DROP TABLE x; --", "stats"],
            2,
            "--table",
        ),
        case(
            "overlong table name",
            &["--table", long_name.as_str(), "stats"],
            2,
            "--table",
        ),
        case(
            "control character in table name",
            &["--table", "keys\u{1b}[2J", "evict"],
            2,
            "--table",
        ),
        case(
            "injection-shaped but legal table name",
            &["--table", "keys; DROP TABLE idempotency_keys", "evict"],
            3,
            "does not exist",
        ),
        case(
            "schema trick",
            &["--table", "pg_catalog.idempotency_keys", "evict"],
            3,
            "does not exist",
        ),
        case(
            "a catalog table that is not a key table",
            &["--table", "pg_catalog.pg_class", "evict"],
            2,
            "matches no table profile",
        ),
        case(
            "missing table",
            &["--table", "public.missing", "stats"],
            3,
            "does not exist",
        ),
        case(
            "key with control characters",
            &["inspect", "k\u{1b}]0;pwned\u{7}\n", "--api-key-id", "t"],
            3,
            "k\\x1b]0;pwned\\x07\\n",
        ),
        case("10 KB key", &["inspect", long_key.as_str()], 3, "not found"),
        case(
            "prometheus output for inspect",
            &["inspect", "k", "-o", "prometheus"],
            2,
            "prometheus",
        ),
        case(
            "reclaim timeout under a minute",
            &["reclaim", "--older-than", "10s", "--yes"],
            2,
            "--force",
        ),
        case(
            "reclaim status out of range",
            &["reclaim", "--action", "fail", "--status", "42"],
            2,
            "--status",
        ),
        case(
            "body that is not JSON",
            &[
                "reclaim",
                "--action",
                "fail",
                "--yes",
                "--body-file",
                not_json.as_str(),
            ],
            2,
            "not-json.json",
        ),
        case(
            "body that is not an object",
            &[
                "reclaim",
                "--action",
                "fail",
                "--yes",
                "--body-file",
                array.as_str(),
            ],
            2,
            "array.json",
        ),
        case(
            "truncated plan",
            &["reclaim", "--yes", "--apply", truncated.as_str()],
            2,
            "truncated-plan.json",
        ),
        case(
            "plan for another table",
            &["reclaim", "--yes", "--apply", other_table.as_str()],
            2,
            "other-table-plan.json",
        ),
        case(
            "missing body file",
            &[
                "reclaim",
                "--action",
                "fail",
                "--yes",
                "--body-file",
                "/nonexistent/body.json",
            ],
            2,
            "body.json",
        ),
        case(
            "write without confirmation",
            &["reclaim", "--allow-scan"],
            2,
            "--yes",
        ),
        case("unknown shell", &["completions", "tcsh"], 2, "tcsh"),
    ];
    let mut invalid_utf8 = vec![OsString::from("inspect")];
    invalid_utf8.push(OsString::from_vec(vec![b'k', 0xff, 0xfe]));
    v.push(Case {
        what: "invalid UTF-8 key",
        args: invalid_utf8,
        code: 2,
        says: "UTF-8",
    });
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_inputs_fail_cleanly_and_change_nothing() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 50,
            live: 50,
            stuck: 5,
            ..Mix::default()
        },
    )
    .await;
    let before = snapshot(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let url = db.url_with(&[("password", PASSWORD)]);
    let all = cases(dir.path());
    assert!(all.len() >= 30, "at least 30 cases");
    for c in &all {
        let run = Cmd::new()
            .env("IDEMCTL_DATABASE_URL", &url)
            .args(&c.args)
            .run();
        let context = format!("case {:?}:\n{run}", c.what);
        assert_eq!(run.code, c.code, "{context}");
        assert_eq!(
            run.stderr.lines().count(),
            1,
            "one line on stderr: {context}"
        );
        assert!(run.stderr.starts_with("idemctl: "), "{context}");
        assert!(
            run.stderr.contains(c.says),
            "message should mention {:?}: {context}",
            c.says
        );
        for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace", PASSWORD] {
            assert!(
                !run.stderr.contains(bad) && !run.stdout.contains(bad),
                "{bad:?} in output: {context}"
            );
        }
    }
    assert_eq!(
        snapshot(&db).await,
        before,
        "a hostile input changed the table"
    );
}

/// The refusals of a bad `--body-file` or plan file come before any connection, each exactly this
/// one line with exit 2 (the server named here does not exist).
#[test]
fn bad_body_and_plan_files_are_refused_exactly_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, body: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let not_json = file("not-json.json", b"{\"type\": ");
    let array = file("array.json", b"[1, 2, 3]");
    let no_version = file("plan.json", b"{}");
    let fail_with = |body: &str| {
        vec!["reclaim", "--action", "fail", "--yes", "--body-file", body]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            fail_with("/nonexistent/body.json"),
            "cannot read --body-file /nonexistent/body.json: No such file or directory (os error 2)"
                .to_owned(),
        ),
        (
            fail_with(&not_json),
            format!(
                "--body-file {not_json} is not valid JSON (EOF while parsing a value at line 1 \
                 column 9); the stored body must be a JSON object"
            ),
        ),
        (
            fail_with(&array),
            format!(
                "--body-file {array} holds a JSON array, but the stored response body must be a \
                 JSON object"
            ),
        ),
        (
            ["reclaim", "--yes", "--apply", no_version.as_str()]
                .map(str::to_owned)
                .to_vec(),
            format!(
                "plan {no_version} is not a valid reclaim plan (schema_version missing, this \
                 idemctl reads 1 and 2); nothing was changed, make a new one with --plan"
            ),
        ),
    ];
    for (args, says) in &cases {
        Cmd::new()
            .env(
                "IDEMCTL_DATABASE_URL",
                "postgres://nobody@127.0.0.1:1/nowhere",
            )
            .args(args)
            .run()
            .assert_error(2, says);
    }
}

/// An open-file limit too small for a run (`ulimit -n` from 6, where the dynamic loader has room, up): every run ends with one line
/// and a documented exit code, never a panic. Below what the runtime needs, the line names the
/// runtime and the limit's error exactly (exit 1); above it, the run goes on to connect.
#[test]
fn an_open_file_limit_too_small_ends_the_run_in_one_line_never_a_panic() {
    let mut refused = 0;
    for limit in 6..=16 {
        let run = Cmd::of("sh")
            .args([
                "-c",
                &format!("ulimit -n {limit} && exec \"$0\" \"$@\""),
                crate::support::cmd::IDEMCTL,
                "evict",
                "--connect-timeout",
                "1s",
                "--database-url",
                "host=/nonexistent/idemctl-test port=1 user=nobody",
            ])
            .run();
        assert!(
            !run.stderr.contains("internal error") && run.stderr.lines().count() == 1,
            "ulimit -n {limit}: {run}"
        );
        if run.stderr.contains("async runtime") {
            run.assert_error(
                1,
                "failed to start the async runtime: Too many open files (os error 24); raise the \
                 open-file limit (ulimit -n)",
            );
            refused += 1;
        } else {
            assert_eq!(run.code, 5, "ulimit -n {limit}: {run}");
        }
    }
    assert!(refused > 0, "no limit was too small for the runtime");
}

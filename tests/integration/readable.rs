//! Output for people: values of several lines (statements, plans) print as lines, never as a
//! literal `\n`; check's fixes print whole below its table, at any terminal width.

use crate::fixtures::{Mix, Schema, finding, table_with};
use crate::support::{Cmd, IDEMCTL, TestDb};

async fn table(mix: Mix) -> TestDb {
    let db = TestDb::new().await;
    table_with(&db, Schema::Corrected, mix).await;
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_dry_run_prints_its_statement_and_plan_as_lines() {
    let db = table(Mix {
        expired: 30,
        live: 10,
        ..Mix::default()
    })
    .await;
    let json = db
        .idemctl()
        .args(["evict", "--dry-run", "-o", "json"])
        .run()
        .json();
    let statement = json["statement"].as_str().unwrap().trim_end();
    let plan: Vec<&str> = json["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        statement.lines().count() > 1,
        "a statement of several lines: {json}"
    );
    assert!(plan.len() > 1, "a plan of several lines: {json}");
    for format in ["plain", "table"] {
        let run = db
            .idemctl()
            .args(["evict", "--dry-run", "-o", format])
            .run();
        run.assert_success();
        assert!(!run.stdout.contains("\\n"), "a literal \\n: {run}");
        assert!(
            run.stdout
                .contains(&format!("plan of the first batch):\n{statement}\n")),
            "{run}"
        );
        assert!(
            run.stdout
                .contains(&format!("plan:\n{}\n", plan.join("\n"))),
            "{run}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_prints_each_fix_whole_below_its_table_at_any_width() {
    let db = table(Mix {
        expired: 5,
        live: 5,
        ..Mix::default()
    })
    .await;
    db.exec("DROP INDEX idempotency_keys_expiry").await;
    let json = db.idemctl().args(["check", "-o", "json"]).run().json();
    let fix = finding(&json, "expiry index")["fix"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(fix.starts_with("CREATE INDEX"), "{fix}");
    // The missing in_progress index is a note with a fix of its own, the second.
    let expected = format!(
        "\n-- fix 1: expiry index (FAIL)\n{fix}\n\n-- fix 2: in_progress index (note)\nCREATE INDEX"
    );
    let plain = db.idemctl().args(["check", "-o", "plain"]).run();
    plain.assert_code(4);
    assert!(plain.stdout.contains(&expected), "{plain}");
    let row = plain
        .stdout
        .lines()
        .find(|l| l.starts_with("expiry index\t"))
        .unwrap();
    assert!(row.ends_with("\tfix 1 below"), "{plain}");
    // On a terminal 50 columns wide the table wraps its cells; the fix below it does not.
    let cmd = format!("stty cols 50; {IDEMCTL} check");
    let run = Cmd::of("script")
        .env("IDEMCTL_DATABASE_URL", db.url())
        .args(["-qec", cmd.as_str(), "/dev/null"])
        .run();
    run.assert_code(4);
    let stdout = run.stdout.replace("\r\n", "\n");
    assert!(stdout.contains('┆'), "a table: {run}");
    assert!(stdout.contains(&expected), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_preview_prints_the_body_it_would_store_as_lines() {
    let db = table(Mix {
        stuck: 4,
        ..Mix::default()
    })
    .await;
    let args = ["reclaim", "--dry-run", "--action", "fail", "--allow-scan"];
    let json = db.idemctl().args(args).args(["-o", "json"]).run().json();
    let body = serde_json::to_string_pretty(&json["response_body"]).unwrap();
    assert!(body.lines().count() > 2, "{json}");
    let run = db.idemctl().args(args).args(["-o", "plain"]).run();
    run.assert_success();
    let label = "stored body";
    let at = run
        .stdout
        .lines()
        .position(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no stored body: {run}"));
    let indent = run.stdout.lines().nth(at).unwrap().find('{').unwrap();
    let shown: Vec<String> = run
        .stdout
        .lines()
        .skip(at)
        .take(body.lines().count())
        .map(|l| l[indent..].to_owned())
        .collect();
    assert_eq!(shown.join("\n"), body, "{run}");
}

//! Output for people: values of several lines (statements, plans) print as lines, never as a
//! literal `\n`; check's fixes print whole below its table, at any terminal width.

use crate::fixtures::{Mix, Schema, finding, scalar_i64, table_with};
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
        "\n-- fix 1: expiry index (WARN)\n{fix}\n\n-- fix 2: in_progress index (note)\nCREATE INDEX"
    );
    let plain = db.idemctl().args(["check", "-o", "plain"]).run();
    plain.assert_code(0);
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
    run.assert_code(0);
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

/// The value of the summary line labelled `label` (plain output: `label  value`).
fn field<'a>(stdout: &'a str, label: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix(label)
                .filter(|rest| rest.starts_with("  "))
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("no {label:?} in:\n{stdout}"))
}

/// Each figure of evict's summary counts what its label says, as SQL counts it on the table after
/// the run: rows evicted, the expired keys a live request held, the expired keys younger than
/// --min-age, the expired in_progress keys and the expired completed keys left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_evict_summary_figure_is_what_sql_counts() {
    let db = table(Mix {
        expired: 500,
        live: 50,
        fresh: 5,
        stuck: 6,
        expired_in_progress: 7,
    })
    .await;
    // 40 expired keys created an hour ago, younger than --min-age 1d.
    db.exec(
        "UPDATE idempotency_keys SET created_at = now() - interval '1 hour' WHERE key IN \
         (SELECT key FROM idempotency_keys WHERE state = 'completed' AND expires_at < now() \
          ORDER BY expires_at LIMIT 40 OFFSET 100)",
    )
    .await;
    // 3 old expired keys held by live requests (SELECT ... FOR UPDATE), for the whole run.
    let live = db.client().await;
    live.batch_execute(
        "BEGIN; SELECT 1 FROM idempotency_keys WHERE key IN \
         (SELECT key FROM idempotency_keys WHERE state = 'completed' AND expires_at < now() \
          AND created_at < now() - interval '1 day' ORDER BY expires_at LIMIT 3 OFFSET 300) \
         FOR UPDATE",
    )
    .await
    .unwrap();
    let db = &db;
    let count = |filter: &str| {
        let sql = format!("SELECT count(*) FROM idempotency_keys WHERE {filter}");
        async move { scalar_i64(db, &sql).await }
    };
    let expired_completed = "state = 'completed' AND expires_at < now()";
    let before = count(expired_completed).await;
    let run = db
        .idemctl()
        .args([
            "evict",
            "--min-age",
            "1d",
            "--batch-size",
            "50",
            "-o",
            "plain",
        ])
        .run_async()
        .await;
    run.assert_success();
    let out = &run.stdout;
    let left = count(expired_completed).await;
    assert_eq!(
        field(out, "rows evicted"),
        (before - left).to_string(),
        "{run}"
    );
    assert_eq!(field(out, "rows evicted"), "457", "{run}");
    assert_eq!(
        field(out, "skipped (locked by live requests)"),
        "3",
        "{run}"
    );
    let young = count(&format!(
        "{expired_completed} AND created_at > now() - interval '1 day'"
    ))
    .await;
    assert_eq!(young, 40);
    assert_eq!(
        field(out, "skipped (younger than --min-age)"),
        young.to_string(),
        "{run}"
    );
    let in_progress = count("state = 'in_progress' AND expires_at < now()").await;
    assert_eq!(
        field(out, "expired in_progress left (see reclaim)"),
        in_progress.to_string(),
        "{run}"
    );
    assert_eq!(
        field(out, "expired backlog left"),
        left.to_string(),
        "{run}"
    );
    assert_eq!(left, 43, "the held and the young keys");
    live.batch_execute("ROLLBACK").await.unwrap();
    // stats' counts, likewise.
    let run = db
        .idemctl()
        .args(["stats", "--allow-scan", "-o", "plain"])
        .run_async()
        .await;
    run.assert_success();
    assert_eq!(
        field(&run.stdout, "expired backlog"),
        left.to_string(),
        "{run}"
    );
    let stuck = count(
        "state = 'in_progress' AND coalesce(locked_at, created_at) < now() - interval '5 minutes'",
    )
    .await;
    assert_eq!(stuck, 13, "the stuck keys and the expired in_progress ones");
    assert!(
        field(&run.stdout, "stuck in_progress (> 5m)")
            .starts_with(&format!("{stuck} (oldest held since ")),
        "{run}"
    );
}

/// --pause says what it does: a rest after every batch on top of the fixed duty cycle's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_names_the_pause_on_top_of_the_duty_cycle() {
    let db = table(Mix {
        expired: 50,
        ..Mix::default()
    })
    .await;
    let run = db
        .idemctl()
        .args([
            "evict",
            "--pause",
            "10ms",
            "--batch-size",
            "20",
            "-o",
            "plain",
        ])
        .run_async()
        .await;
    run.assert_success();
    assert_eq!(
        field(&run.stdout, "pace"),
        "fixed 20% duty cycle + a 10ms pause after each batch",
        "{run}"
    );
    let run = db
        .idemctl()
        .args(["evict", "--duty-cycle", "50", "-o", "json"])
        .run_async()
        .await;
    let pace = &run.json()["pace"];
    assert_eq!(pace["duty_cycle"], 50, "{run}");
    assert!(pace.get("pause_seconds").is_none(), "{run}");
}

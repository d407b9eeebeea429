//! The TTL guard: on a table without an expiry column, a TTL under an hour (a unit typo such as
//! `24m` for `24h` would expire nearly every answered key) is refused by evict and stats, exit 2,
//! whether the flag, the environment or the config file set it, unless `--force` or
//! `allow_short_ttl = true`; and evict names the TTL it uses and where it came from.

use crate::fixtures::{Mix, Schema, scalar_i64, table_with};
use crate::profiles::explainer_db;
use crate::support::TestDb;

/// The explainer's table with 3 keys of each kind: 15 rows, 6 of them answered (3 two days old,
/// 3 about twelve hours old), 9 placeholders.
async fn table() -> TestDb {
    explainer_db(3, true).await
}

async fn rows(db: &TestDb) -> i64 {
    scalar_i64(db, "SELECT count(*) FROM idempotency_keys").await
}

fn refusal(ttl: &str, from: &str, command: &str) -> String {
    format!(
        "idemctl: the TTL {ttl} (from {from}) is under 1h: table public.idempotency_keys has no expiry column, so {command} would take every answered key created over {ttl} ago as expired; give the time the API keeps keys for (e.g. 24h), or pass --force (or allow_short_ttl = true in the config file) if {ttl} is meant\n"
    )
}

/// A config file in its own directory, kept until the test ends.
fn config(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemctl.toml");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap().to_owned();
    (dir, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_under_an_hour_is_refused_from_the_flag_the_environment_or_the_config_file() {
    let db = table().await;
    let (_dir, file) = config("ttl = \"30m\"\n");
    let runs = [
        (
            db.idemctl().args(["--ttl", "24m", "evict"]),
            "24m",
            "--ttl",
            "evict",
        ),
        (
            db.idemctl().args(["--ttl", "10ms", "evict", "--dry-run"]),
            "10ms",
            "--ttl",
            "evict",
        ),
        (
            db.idemctl().env("IDEMCTL_TTL", "59m").args(["stats"]),
            "59m",
            "IDEMCTL_TTL",
            "stats",
        ),
        (
            db.idemctl().args(["evict", "--ttl", "3599s"]),
            "3599s",
            "--ttl",
            "evict",
        ),
        (
            db.idemctl().args(["--config", &file, "evict"]),
            "30m",
            &format!("ttl in config file {file}"),
            "evict",
        ),
    ];
    for (cmd, ttl, from, command) in runs {
        let run = cmd.run();
        run.assert_code(2).assert_stdout_empty();
        assert_eq!(run.stderr, refusal(ttl, from, command), "{run}");
    }
    assert_eq!(rows(&db).await, 15, "nothing was deleted");
    // An hour is enough: the guard is a floor, not a default.
    db.idemctl()
        .args(["-q", "--ttl", "1h", "evict"])
        .run()
        .assert_success();
    assert_eq!(
        rows(&db).await,
        9,
        "the 6 answered keys, all over an hour old"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_or_allow_short_ttl_lets_a_short_ttl_through() {
    let db = table().await;
    db.idemctl()
        .args(["-q", "--ttl", "30s", "stats", "--force"])
        .run()
        .assert_success();
    let (_dir, file) = config("ttl = \"30m\"\nallow_short_ttl = true\n");
    db.idemctl()
        .args(["-q", "--config", &file, "stats"])
        .run()
        .assert_success();
    // The file allows a short TTL, whichever source sets it.
    db.idemctl()
        .args(["-q", "--config", &file, "--ttl", "13h", "evict"])
        .run()
        .assert_success();
    assert_eq!(rows(&db).await, 12, "the 3 answered keys two days old");
    db.idemctl()
        .env("IDEMCTL_TTL", "30m")
        .args(["-q", "evict", "--force"])
        .run()
        .assert_success();
    assert_eq!(rows(&db).await, 9, "and the 3 twelve hours old");
}

fn expiry_line(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("expiry"))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| panic!("no expiry line in:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_names_the_ttl_it_uses_and_where_it_came_from() {
    let db = table().await;
    let (_dir, file) = config("ttl = \"36h\"\n");
    let from_file = format!("ttl in config file {file}");
    let cases: [(Option<&str>, &[&str], String, serde_json::Value); 3] = [
        (
            None,
            &["--ttl", "24h"],
            "created_at + 24h (TTL from --ttl)".to_owned(),
            serde_json::json!({"column": "created_at", "ttl_seconds": 86400.0, "ttl_from": "--ttl"}),
        ),
        (
            Some("48h"),
            &[],
            "created_at + 48h (TTL from IDEMCTL_TTL)".to_owned(),
            serde_json::json!({"column": "created_at", "ttl_seconds": 172800.0, "ttl_from": "IDEMCTL_TTL"}),
        ),
        (
            None,
            &["--config", &file],
            format!("created_at + 36h (TTL from {from_file})"),
            serde_json::json!({"column": "created_at", "ttl_seconds": 129600.0, "ttl_from": from_file}),
        ),
    ];
    for (env, args, text, json) in cases {
        let idemctl = |rest: &[&str]| {
            let cmd = match env {
                Some(ttl) => db.idemctl().env("IDEMCTL_TTL", ttl),
                None => db.idemctl(),
            };
            cmd.args(args).args(rest).run()
        };
        let plain = idemctl(&["evict", "--dry-run", "-o", "plain"]);
        plain.assert_success();
        assert_eq!(expiry_line(&plain.stdout), text, "{plain}");
        let dry = idemctl(&["evict", "--dry-run", "-o", "json"]);
        assert_eq!(dry.json()["expiry"], json, "{dry}");
        let run = idemctl(&["evict", "-o", "json"]);
        assert_eq!(run.json()["expiry"], json, "{run}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_table_with_an_expiry_column_evict_says_a_ttl_does_not_apply() {
    let db = TestDb::new().await;
    table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 5,
            live: 5,
            ..Mix::default()
        },
    )
    .await;
    let run = db.idemctl().args(["evict", "-o", "plain"]).run();
    run.assert_success();
    assert_eq!(
        expiry_line(&run.stdout),
        "expires_at (the table's expiry column)"
    );
    // A short TTL is no typo here: it is not used at all.
    let run = db
        .idemctl()
        .args(["--ttl", "5m", "evict", "--dry-run", "-o", "plain"])
        .run();
    run.assert_success();
    assert_eq!(
        expiry_line(&run.stdout),
        "expires_at (the table's expiry column; the TTL 5m from --ttl does not apply)"
    );
}

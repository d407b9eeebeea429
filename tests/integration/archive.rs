//! `reclaim --archive FILE`: every key reclaim takes is in the archive as a JSON line with its whole
//! record before the change, the action, the reason and the time, fsynced before its batch commits,
//! with a commit line after each batch; the path is checked before anything changes; a reclaim
//! killed with SIGKILL mid-run leaves no reclaimed key out of the archive; the same for `--apply` of a
//! plan, whose archive holds exactly the plan rows it took; on a table Citus distributes the archived
//! batches run on the workers.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::fixtures::{self, Mix, scalar_i64};
use crate::support::stuck::{Key, complete, delete, keys_in, stuck_keys, stuck_keys_of};
use crate::support::{Run, Spawned, TestDb};

async fn db_with_stuck(stuck: i64) -> TestDb {
    crate::support::stuck::db_with_stuck(stuck, 20).await
}

/// The archive's lines; a last line cut short by a kill is left out (its batch never committed).
fn read_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let all: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in all.iter().enumerate() {
        match serde_json::from_str(l) {
            Ok(v) => out.push(v),
            Err(e) if i + 1 == all.len() && !text.ends_with('\n') => {
                eprintln!("a torn last line (killed while writing): {e}");
            }
            Err(e) => panic!("line {} is not JSON ({e}): {l}", i + 1),
        }
    }
    out
}

/// SIGKILL `child` once the archive at `path` holds more than `bytes` (checked every `every`, 600
/// times at most), and its end.
async fn kill_once_archived(
    child: Spawned,
    path: &std::path::Path,
    bytes: u64,
    every: Duration,
) -> Run {
    for _ in 0..600 {
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if len > bytes {
            break;
        }
        tokio::time::sleep(every).await;
    }
    child.signal("KILL");
    child.wait_async().await
}

fn archived_keys(lines: &[serde_json::Value]) -> BTreeSet<Key> {
    keys_in(lines.iter().filter(|l| l["type"] == "key"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_archive_holds_every_reclaimed_key_with_its_record_before_the_change() {
    let db = db_with_stuck(60).await;
    let stuck = stuck_keys(&db).await;
    assert_eq!(stuck.len(), 60);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reclaimed.jsonl");
    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--yes",
            "-o",
            "json",
            "--batch-size",
            "25",
            "--archive",
        ])
        .arg(&path)
        .run_async()
        .await;
    run.assert_success();
    assert_eq!(run.json()["rows_reclaimed"], 60, "{run}");
    assert!(stuck_keys(&db).await.is_empty());
    let lines = read_lines(&path);
    assert_eq!(archived_keys(&lines), stuck);
    let keys: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "key").collect();
    assert_eq!(keys.len(), 60, "each key once");
    for l in &keys {
        assert_eq!(l["action"], "delete");
        assert_eq!(l["committed"], "unknown");
        assert_eq!(l["older_than_seconds"], 300.0);
        assert_eq!(
            l["reason"], "in_progress, held longer than --older-than (300s)",
            "{l}"
        );
        assert!(l["at"].as_str().unwrap().ends_with('Z'), "{l}");
        // The whole record as it was: every column, the key still in_progress.
        let r = &l["record"];
        assert_eq!(r["state"], "in_progress", "{l}");
        assert_eq!(r["key"], l["key"]);
        assert_eq!(r["api_key_id"], l["api_key_id"]);
        for column in [
            "request_method",
            "request_path",
            "request_fingerprint",
            "response_status",
            "response_body",
            "locked_at",
            "created_at",
            "expires_at",
        ] {
            assert!(r.get(column).is_some(), "{column} missing: {l}");
        }
    }
    // Three batches (25, 25, 10), each with its commit line after its keys.
    let commits: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "commit").collect();
    assert_eq!(
        commits
            .iter()
            .map(|c| c["keys"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![25, 25, 10]
    );
    for c in &commits {
        let batch = &c["batch"];
        let n = keys.iter().filter(|k| &k["batch"] == batch).count() as u64;
        assert_eq!(n, c["keys"].as_u64().unwrap());
    }

    // --action fail: the record is the one before the change (still in_progress, no response).
    let db = db_with_stuck(10).await;
    let path = dir.path().join("failed.jsonl");
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "--action", "fail", "--archive"])
        .arg(&path)
        .run_async()
        .await;
    run.assert_success();
    let lines = read_lines(&path);
    let keys: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "key").collect();
    assert_eq!(keys.len(), 10);
    for l in keys {
        assert_eq!(l["action"], "fail");
        assert_eq!(l["record"]["state"], "in_progress", "{l}");
        assert_eq!(
            l["record"]["response_status"],
            serde_json::Value::Null,
            "{l}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_that_cannot_be_opened_stops_reclaim_before_any_change() {
    let db = db_with_stuck(20).await;
    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--yes",
            "--archive",
            "/nonexistent/dir/reclaimed.jsonl",
        ])
        .run_async()
        .await;
    run.assert_code(2).assert_stderr_contains(
        "--archive /nonexistent/dir/reclaimed.jsonl: cannot open it for appending",
    );
    assert_eq!(stuck_keys(&db).await.len(), 20);
    // A dry run takes no --archive.
    db.idemctl()
        .args(["reclaim", "--dry-run", "--archive", "x.jsonl"])
        .run_async()
        .await
        .assert_code(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_killed_mid_run_leaves_no_reclaimed_key_out_of_the_archive() {
    let db = db_with_stuck(20_000).await;
    let stuck = stuck_keys(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reclaimed.jsonl");
    let child = db
        .idemctl()
        .args(["reclaim", "--yes", "-q", "--batch-size", "20", "--archive"])
        .arg(&path)
        .timeout(Duration::from_secs(120))
        .spawn();
    // Kill it once a few batches are in.
    let run = kill_once_archived(child, &path, 200_000, Duration::from_millis(10)).await;
    assert_ne!(run.code, 0, "{run}");
    let left = stuck_keys(&db).await;
    let reclaimed: BTreeSet<Key> = stuck.difference(&left).cloned().collect();
    assert!(!reclaimed.is_empty(), "the run was killed before any batch");
    assert!(!left.is_empty(), "the run finished before the kill");
    let lines = read_lines(&path);
    let archived = archived_keys(&lines);
    let missing: Vec<&Key> = reclaimed.difference(&archived).collect();
    assert!(
        missing.is_empty(),
        "{} reclaimed keys are not in the archive, e.g. {:?}",
        missing.len(),
        missing.first()
    );
    // Lines for keys still here can only be of the batch the kill rolled back (no commit line).
    let still: BTreeSet<Key> = archived.intersection(&left).cloned().collect();
    let committed: BTreeSet<String> = lines
        .iter()
        .filter(|l| l["type"] == "commit")
        .map(|l| l["batch"].as_str().unwrap().to_owned())
        .collect();
    for l in lines.iter().filter(|l| l["type"] == "key") {
        let k = (
            l["api_key_id"].as_str().unwrap().to_owned(),
            l["key"].as_str().unwrap().to_owned(),
        );
        if still.contains(&k) {
            assert!(!committed.contains(l["batch"].as_str().unwrap()), "{l}");
        }
    }
    assert!(
        still.len() <= 20,
        "{} archived keys were not reclaimed",
        still.len()
    );
    let n = scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await;
    assert!(n > 0);
}

/// Make a plan of every stuck key (up to the 2,000 a plan lists) and return its path.
async fn plan_of(db: &TestDb, dir: &std::path::Path) -> std::path::PathBuf {
    let plan = dir.join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run_async()
        .await
        .assert_code(0);
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_apply_archives_the_keys_it_takes_and_none_it_leaves_alone() {
    let db = db_with_stuck(30).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_of(&db, dir.path()).await;
    let mut stuck = stuck_keys(&db).await;
    // Between plan and apply: one key completes and one is deleted; apply leaves both alone.
    let completed = stuck.pop_first().unwrap();
    let gone = stuck.pop_first().unwrap();
    let client = db.client().await;
    complete(&client, &completed, None).await;
    delete(&client, &gone).await;
    let path = dir.path().join("reclaimed.jsonl");
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--batch-size", "8"])
        .args(["--method", "POST", "--apply"])
        .arg(&plan)
        .arg("--archive")
        .arg(&path)
        .run_async()
        .await;
    run.assert_success();
    assert_eq!(run.json()["rows_reclaimed"], 28, "{run}");
    assert!(stuck_keys(&db).await.is_empty());
    let lines = read_lines(&path);
    assert_eq!(archived_keys(&lines), stuck, "exactly the keys apply took");
    let keys: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "key").collect();
    assert_eq!(keys.len(), 28, "each key once");
    for l in &keys {
        assert_eq!(l["action"], "delete");
        assert_eq!(l["committed"], "unknown");
        assert_eq!(l["plan"], plan.display().to_string(), "{l}");
        assert_eq!(l["filter"], serde_json::json!({"method": "POST"}), "{l}");
        assert_eq!(
            l["reason"].as_str().unwrap(),
            format!(
                "in the plan {}, unchanged since, in_progress and held longer than its --older-than ({}s)",
                plan.display(),
                l["older_than_seconds"].as_f64().unwrap()
            ),
            "{l}"
        );
        assert_eq!(l["record"]["state"], "in_progress", "{l}");
        assert_eq!(l["record"]["key"], l["key"], "{l}");
    }
    // Four batches of plan rows (8, 8, 8, 6); each commit line counts the keys its batch took.
    let commits: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "commit").collect();
    assert_eq!(
        commits
            .iter()
            .map(|c| c["keys"].as_u64().unwrap())
            .sum::<u64>(),
        28
    );
    for c in &commits {
        let n = keys.iter().filter(|k| k["batch"] == c["batch"]).count() as u64;
        assert_eq!(n, c["keys"].as_u64().unwrap(), "{c}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_apply_killed_mid_run_leaves_no_reclaimed_key_out_of_the_archive() {
    let db = db_with_stuck(2_000).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_of(&db, dir.path()).await;
    let stuck = stuck_keys(&db).await;
    assert_eq!(stuck.len(), 2_000);
    let path = dir.path().join("reclaimed.jsonl");
    let child = db
        .idemctl()
        .args(["reclaim", "--yes", "-q", "--batch-size", "4", "--apply"])
        .arg(&plan)
        .arg("--archive")
        .arg(&path)
        .timeout(Duration::from_secs(120))
        .spawn();
    let run = kill_once_archived(child, &path, 100_000, Duration::from_millis(5)).await;
    assert_ne!(run.code, 0, "{run}");
    let left = stuck_keys(&db).await;
    let reclaimed: BTreeSet<Key> = stuck.difference(&left).cloned().collect();
    assert!(!reclaimed.is_empty(), "the run was killed before any batch");
    assert!(!left.is_empty(), "the run finished before the kill");
    let lines = read_lines(&path);
    let archived = archived_keys(&lines);
    let missing: Vec<&Key> = reclaimed.difference(&archived).collect();
    assert!(
        missing.is_empty(),
        "{} reclaimed keys are not in the archive, e.g. {:?}",
        missing.len(),
        missing.first()
    );
    // A key archived but still here belongs to the batch the kill rolled back (no commit line).
    let committed: BTreeSet<String> = lines
        .iter()
        .filter(|l| l["type"] == "commit")
        .map(|l| l["batch"].as_str().unwrap().to_owned())
        .collect();
    let still: BTreeSet<Key> = archived.intersection(&left).cloned().collect();
    for l in lines.iter().filter(|l| l["type"] == "key") {
        let k = (
            l["api_key_id"].as_str().unwrap().to_owned(),
            l["key"].as_str().unwrap().to_owned(),
        );
        if still.contains(&k) {
            assert!(!committed.contains(l["batch"].as_str().unwrap()), "{l}");
        }
    }
    assert!(
        still.len() <= 4,
        "{} archived keys were not reclaimed",
        still.len()
    );
    // The rest of the plan is still applicable: a second apply takes exactly what is left.
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--apply"])
        .arg(&plan)
        .arg("--archive")
        .arg(&path)
        .run_async()
        .await;
    run.assert_success();
    assert!(stuck_keys(&db).await.is_empty());
    assert_eq!(archived_keys(&read_lines(&path)), stuck);
}

/// On a table Citus distributes by tenant, the archived batches run on the workers, shard by
/// shard: an apply of part of a plan and the sweep that takes the rest archive each key they take,
/// once, with its record before the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_archives_on_a_citus_table_shard_by_shard() {
    use crate::support::citus::{CitusDb, Layout, skipped};
    if skipped("reclaim --archive on Citus") {
        return;
    }
    let db = CitusDb::new(None).await;
    db.exec(include_str!("../../sql/schema.sql")).await;
    db.exec(&fixtures::load_sql(Mix {
        expired: 10,
        live: 10,
        fresh: 5,
        stuck: 40,
        expired_in_progress: 0,
    }))
    .await;
    db.distribute(Layout::ByTenant).await;
    db.exec(
        "CREATE INDEX idempotency_keys_in_progress ON idempotency_keys \
         ((coalesce(locked_at, created_at))) WHERE state = 'in_progress'",
    )
    .await;
    let client = db.client().await;
    let stuck = || stuck_keys_of(&client);
    let all = stuck().await;
    assert_eq!(all.len(), 40);
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run_async()
        .await
        .assert_code(0);
    let path = dir.path().join("reclaimed.jsonl");
    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--yes",
            "-o",
            "json",
            "--limit",
            "15",
            "--batch-size",
            "4",
        ])
        .arg("--apply")
        .arg(&plan)
        .arg("--archive")
        .arg(&path)
        .run_async()
        .await;
    run.assert_success();
    assert_eq!(run.json()["rows_reclaimed"], 15, "{run}");
    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--yes",
            "-o",
            "json",
            "--batch-size",
            "4",
            "--archive",
        ])
        .arg(&path)
        .run_async()
        .await;
    run.assert_success();
    assert_eq!(run.json()["rows_reclaimed"], 25, "{run}");
    assert!(stuck().await.is_empty());

    let lines = read_lines(&path);
    let keys: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "key").collect();
    assert_eq!(keys.len(), 40, "each key once");
    assert_eq!(archived_keys(&lines), all);
    assert_eq!(keys.iter().filter(|l| l.get("plan").is_some()).count(), 15);
    for l in &keys {
        assert_eq!(l["record"]["state"], "in_progress", "{l}");
        assert_eq!(l["record"]["api_key_id"], l["api_key_id"], "{l}");
    }
    let committed: u64 = lines
        .iter()
        .filter(|l| l["type"] == "commit")
        .map(|l| l["keys"].as_u64().unwrap())
        .sum();
    assert_eq!(committed, 40);
}

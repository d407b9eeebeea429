//! A full disk: reclaim's archive on a tiny tmpfs that fills up mid-run, an archive left with a
//! torn last line, a plan file that does not fit, and metrics (`--textfile`) that cannot be
//! written. Every archive line parses, no key is reclaimed without its line, the run says what it
//! did and exits with its documented code, and the next run (given room) works.

use std::collections::BTreeSet;

use crate::support::TestDb;
use crate::support::stuck::{Key, keys_in, stuck_keys};
use crate::support::tmpfs::Tmpfs;

/// Every line of the archive, each of which must parse, the last one included.
fn whole_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the archive ends in a torn line"
    );
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("line {} is not JSON ({e}): {l}", i + 1))
        })
        .collect()
}

/// Keys of the batches with a commit line, and of all key lines.
fn committed_and_all(lines: &[serde_json::Value]) -> (BTreeSet<Key>, BTreeSet<Key>) {
    let committed: BTreeSet<&str> = lines
        .iter()
        .filter(|l| l["type"] == "commit")
        .filter_map(|l| l["batch"].as_str())
        .collect();
    let keys = lines.iter().filter(|l| l["type"] == "key");
    let done = keys_in(
        keys.clone()
            .filter(|l| l["batch"].as_str().is_some_and(|b| committed.contains(b))),
    );
    (done, keys_in(keys))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_on_a_full_disk_stays_whole_and_the_next_run_continues_it() {
    let db = crate::support::stuck::db_with_stuck(300, 20).await;
    let before = stuck_keys(&db).await;
    let disk = Tmpfs::mount("48k");
    let archive = disk.join("archive.jsonl");
    let args = [
        "reclaim",
        "--yes",
        "--batch-size",
        "16",
        "-o",
        "json",
        "--archive",
    ];
    let run = db.idemctl().args(args).arg(&archive).run_async().await;
    run.assert_code(1);
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    assert!(
        run.stderr.contains(&format!(
            "--archive {}: cannot write it (No space left on device (os error 28)); the batch \
             was rolled back",
            archive.display()
        )),
        "{run}"
    );
    let lines = whole_lines(&archive);
    let (committed, archived) = committed_and_all(&lines);
    let left = stuck_keys(&db).await;
    let reclaimed: BTreeSet<Key> = before.difference(&left).cloned().collect();
    assert!(
        !reclaimed.is_empty() && !left.is_empty(),
        "the disk filled mid-run"
    );
    assert_eq!(
        reclaimed, committed,
        "reclaimed keys vs committed key lines"
    );
    assert!(archived.is_superset(&reclaimed));

    disk.resize("4m");
    db.idemctl()
        .args(args)
        .arg(&archive)
        .run_async()
        .await
        .assert_code(0);
    let lines = whole_lines(&archive);
    let (committed, _) = committed_and_all(&lines);
    assert!(stuck_keys(&db).await.is_empty(), "the next run drained");
    assert_eq!(
        committed, before,
        "every reclaimed key's line, once committed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_archive_tail_is_set_aside_before_the_next_run_writes() {
    let db = crate::support::stuck::db_with_stuck(20, 5).await;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive.jsonl");
    let whole = "{\"type\":\"commit\",\"batch\":\"1-1\",\"keys\":0}\n";
    let torn = "{\"type\":\"key\",\"batch\":\"1-2\",\"rec";
    std::fs::write(&archive, format!("{whole}{torn}")).unwrap();
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-q", "--archive"])
        .arg(&archive)
        .run_async()
        .await;
    run.assert_code(0);
    let asides: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".torn-"))
        .collect();
    assert_eq!(asides.len(), 1, "{asides:?}");
    assert_eq!(std::fs::read_to_string(&asides[0]).unwrap(), torn);
    assert_eq!(
        run.stderr.trim_end(),
        format!(
            "idemctl: warning: --archive {} ended in an incomplete line ({} bytes, a write cut \
             short); moved it to {} and continued after the last complete line",
            archive.display(),
            torn.len(),
            asides[0].display()
        )
    );
    let lines = whole_lines(&archive);
    assert_eq!(lines[0]["batch"], "1-1");
    let (committed, _) = committed_and_all(&lines);
    assert_eq!(committed.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_does_not_fit_is_not_written_and_changes_nothing() {
    let db = crate::support::stuck::db_with_stuck(300, 20).await;
    let before = stuck_keys(&db).await;
    let disk = Tmpfs::mount("8k");
    let plan = disk.join("plan.json");
    let run = db
        .idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run_async()
        .await;
    run.assert_code(1);
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    assert!(run.stderr.contains("No space left on device"), "{run}");
    assert!(!plan.exists(), "a partial plan was left");
    assert_eq!(stuck_keys(&db).await, before);
    disk.resize("4m");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run_async()
        .await
        .assert_code(0);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(written["rows"].as_array().unwrap().len(), 300);
}

/// Fill the filesystem at `dir` with a file of zeros until it is full.
fn fill(dir: &std::path::Path) {
    use std::io::Write as _;
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let block = [0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_that_cannot_be_written_leave_the_runs_report_whole_and_exit_8() {
    let db = TestDb::new().await;
    let mix = crate::fixtures::Mix {
        expired: 1000,
        live: 10,
        ..Default::default()
    };
    crate::fixtures::table_with(&db, crate::fixtures::Schema::Corrected, mix).await;
    let disk = Tmpfs::mount("64k");
    let prom = disk.join("evict.prom");
    // A first run writes the file; then the disk fills up.
    db.idemctl()
        .args(["evict", "--max-rows", "10", "--textfile"])
        .arg(&prom)
        .run_async()
        .await
        .assert_code(0);
    let earlier = std::fs::read_to_string(&prom).unwrap();
    fill(disk.path());
    let run = db
        .idemctl()
        .args(["evict", "--textfile"])
        .arg(&prom)
        .run_async()
        .await;
    run.assert_code(8).assert_stdout_empty();
    assert_eq!(
        run.stderr.trim_end(),
        format!(
            "idemctl: evict ran: 990 keys deleted, end reason drained; its metrics were not \
             written: --textfile {}: failed to write a temporary file in {}: No space left on \
             device (os error 28); the file still holds an earlier run's",
            prom.display(),
            disk.path().display()
        )
    );
    assert_eq!(std::fs::read_to_string(&prom).unwrap(), earlier);
    // With -o json the summary is printed as well.
    db.exec(&crate::fixtures::expired_rows_sql(5)).await;
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--textfile"])
        .arg(&prom)
        .run_async()
        .await;
    run.assert_code(8);
    assert_eq!(run.json()["rows_evicted"], 5, "{run}");
    assert!(
        run.stderr
            .contains("evict ran: 5 keys deleted, end reason drained"),
        "{run}"
    );
    // Room again: the next run writes its metrics.
    std::fs::remove_file(disk.join("filler")).unwrap();
    db.idemctl()
        .args(["evict", "--textfile"])
        .arg(&prom)
        .run_async()
        .await
        .assert_code(0)
        .assert_stderr_empty();
    assert_ne!(std::fs::read_to_string(&prom).unwrap(), earlier);
}

//! A full disk: reclaim's archive on a tiny tmpfs that fills up mid-run (or between a batch's
//! commit and its commit line), an archive left with a torn last line, a plan file that does not
//! fit, and metrics (`--textfile`) that cannot be written. Every archive line parses, no key is
//! reclaimed without its line, the run says what it did and exits with its documented code, and
//! the next run (given room) works.

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

/// Two keys of a tenant held for an hour, the same but for the tenant and the key, with times in
/// whole seconds (so that their archive lines have the same length, whatever the clock says).
const TWIN_KEYS: &str = "INSERT INTO idempotency_keys (key, api_key_id, request_method, \
     request_path, request_fingerprint, state, locked_at, created_at, expires_at) \
     SELECT k, t, 'POST', '/p', '\\x00', 'in_progress', at, at, at + interval '1 day' \
       FROM (SELECT date_trunc('second', now()) - interval '1 hour' AS at) n, \
            unnest(ARRAY['t-a', 't-b']) t, unnest(ARRAY['k1', 'k2']) k";

/// The disk fills while a batch's commit is on its way (held by a synchronous standby that is not
/// there, and let go once the key lines are durable): the batch has committed, its commit line
/// does not fit, and the run ends saying exactly that; every line in the archive is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_line_that_does_not_fit_ends_the_run_saying_the_batch_committed() {
    use crate::fixtures::Schema;
    use crate::support::cluster::PrivateCluster;
    use std::io::Write;
    use std::time::{Duration, Instant};
    // Synchronous replication is the whole server's: a cluster of the test's own.
    let server = PrivateCluster::start().await;
    let client = server.client().await;
    client.batch_execute(Schema::Corrected.ddl()).await.unwrap();
    client.batch_execute(TWIN_KEYS).await.unwrap();
    client
        .batch_execute(
            &include_str!("../../sql/maintenance_indexes.sql").replace("CONCURRENTLY ", ""),
        )
        .await
        .unwrap();
    let reclaim = |tenant: &str, archive: &std::path::Path| {
        server
            .idemctl()
            .args(["reclaim", "--yes", "--api-key-id", tenant, "--archive"])
            .arg(archive)
            .timeout(Duration::from_secs(60))
    };
    // The length of one key line, from tenant t-a's keys; tenant t-b's paths are then lengthened
    // so that its two key lines end 20 bytes short of a 4 kB page, too few for the commit line.
    let dir = tempfile::tempdir().unwrap();
    let measured = dir.path().join("measured.jsonl");
    reclaim("t-a", &measured).run_async().await.assert_code(0);
    let line = std::fs::read_to_string(&measured)
        .unwrap()
        .find('\n')
        .unwrap()
        + 1;
    let longer = (4096 - 20 - 2 * line) / 2;
    client
        .batch_execute(&format!(
            "UPDATE idempotency_keys SET request_path = '/p' || repeat('x', {longer})"
        ))
        .await
        .unwrap();
    for sql in [
        "ALTER SYSTEM SET synchronous_commit = on",
        "ALTER SYSTEM SET synchronous_standby_names = 'nobody'",
        "SELECT pg_reload_conf()",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    let disk = Tmpfs::mount("64k");
    let archive = disk.join("archive.jsonl");
    let run = reclaim("t-b", &archive).spawn();
    let committing = "SELECT count(*) FROM pg_stat_activity \
                       WHERE application_name = 'idemctl' AND wait_event = 'SyncRep'";
    let started = Instant::now();
    while client
        .query_one(committing, &[])
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "reclaim's batch never reached its commit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        whole_lines(&archive).len(),
        2,
        "the key lines, before the commit"
    );
    assert_eq!(std::fs::metadata(&archive).unwrap().len(), 4096 - 20);
    // Fill the disk, then let the commit through.
    let mut filler = std::fs::File::create(disk.join("filler")).unwrap();
    while filler.write_all(&[0; 4096]).is_ok() {}
    for sql in [
        "ALTER SYSTEM RESET synchronous_standby_names",
        "SELECT pg_reload_conf()",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    run.wait_async().await.assert_error(
        1,
        &format!(
            "--archive {}: cannot write it (No space left on device (os error 28)); the batch of \
             2 keys committed, and its key lines are in the archive without their commit line; 2 \
             keys reclaimed in all",
            archive.display()
        ),
    );
    let lines = whole_lines(&archive);
    assert_eq!(lines.len(), 2, "the key lines, without their commit line");
    assert!(lines.iter().all(|l| l["api_key_id"] == "t-b"), "{lines:?}");
    let left = client
        .query_one("SELECT count(*) FROM idempotency_keys", &[])
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(left, 0, "the batch committed");
}

//! `idemctl reclaim`: exactly the stuck keys are deleted or failed, live owners are skipped without
//! waiting, previews and plans change nothing, apply leaves changed rows alone, and every unsafe
//! request is refused (before connecting where it can be).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::fixtures::{self, Mix, Schema, scalar_i64, snapshot};
use crate::support::TestDb;
use crate::support::stuck::{
    self, Key, complete, delete, hold_row, keys_of, stuck_key, stuck_keys,
};

/// stuck and expired_in_progress rows are both held for over an hour: reclaim's business.
const MIX: Mix = Mix {
    expired: 120,
    live: 150,
    fresh: 30,
    stuck: 40,
    expired_in_progress: 10,
};
const STUCK: usize = 50;

/// A conninfo nothing listens on: a test that still gets exit 2 was refused before connecting.
const NOWHERE: &str = "host=/nonexistent/idemctl-test port=1 dbname=none connect_timeout=1";

async fn db_with(schema: Schema, with_index: bool) -> TestDb {
    stuck::db_with(schema, MIX, with_index).await
}

async fn row_count(db: &TestDb, (tenant, key): &Key, extra: &str) -> i64 {
    db.client()
        .await
        .query_one(
            &format!(
                "SELECT count(*) FROM idempotency_keys WHERE api_key_id = $1 AND key = $2 {extra}"
            ),
            &[tenant, key],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_deletes_exactly_the_stuck_rows_on_the_corrected_table() {
    let db = db_with(Schema::Corrected, true).await;
    let before = snapshot(&db).await;
    let stuck = stuck_keys(&db).await;
    assert_eq!(stuck.len(), STUCK);
    let nulls = scalar_i64(
        &db,
        "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' AND locked_at IS NULL",
    )
    .await;
    assert_eq!(nulls, 20, "the fixture has stuck keys without locked_at");

    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--batch-size", "7"])
        .run();
    run.assert_code(0).assert_stderr_empty();
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], STUCK as u64, "{j}");
    assert_eq!(j["action"], "delete");
    assert_eq!(j["end_reason"], "drained");
    assert_eq!(j["skipped_live_owner"]["count"], 0);
    assert_eq!(j["stuck_left"]["count"], 0);
    assert_eq!(j["batches"], 8, "50 keys in batches of 7: 7 full, 1 short");
    assert_eq!(keys_of(&j["reclaimed"]), stuck);

    let after = snapshot(&db).await;
    assert_eq!(after.len(), before.len() - STUCK);
    for (k, seen) in &before {
        if stuck.contains(k) {
            assert!(!after.contains_key(k), "stuck row {k:?} survived");
        } else {
            assert_eq!(after.get(k), Some(seen), "row {k:?} was deleted or changed");
        }
    }
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE locked_at IS NULL"
        )
        .await,
        0,
        "stuck rows without locked_at are reclaimed by created_at"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_fail_completes_exactly_the_stuck_rows_on_the_reference_table() {
    let db = db_with(Schema::Reference, true).await;
    let before = snapshot(&db).await;
    let stuck = stuck_keys(&db).await;
    let expires_before = scalar_i64(
        &db,
        "SELECT sum(extract(epoch FROM expires_at)::bigint)::bigint FROM idempotency_keys \
         WHERE state = 'in_progress'",
    )
    .await;

    let run = db
        .idemctl()
        .args(["reclaim", "--action", "fail", "--yes", "-o", "json"])
        .args(["--keep-failed-for", "0s"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], STUCK as u64, "{j}");
    assert_eq!(j["action"], "fail");
    assert_eq!(j["response_status"], 500);
    assert_eq!(keys_of(&j["reclaimed"]), stuck);

    let after = snapshot(&db).await;
    assert_eq!(after.len(), before.len(), "fail deletes nothing");
    for (k, seen) in &before {
        let now = &after[k];
        if stuck.contains(k) {
            assert_eq!(now.state, "completed", "{k:?}");
        } else {
            assert_eq!(now, seen, "row {k:?} changed");
        }
    }
    let failed = scalar_i64(
        &db,
        "SELECT count(*) FROM idempotency_keys WHERE response_status = 500 \
         AND response_body->>'type' = 'tag:idemctl,2026:outcome-unknown' \
         AND (response_body->>'status')::int = 500",
    )
    .await;
    assert_eq!(failed, STUCK as i64);
    let expires_after = scalar_i64(
        &db,
        "SELECT sum(extract(epoch FROM expires_at)::bigint)::bigint FROM idempotency_keys \
         WHERE response_status = 500 OR state = 'in_progress'",
    )
    .await;
    assert_eq!(
        expires_after, expires_before,
        "expires_at is kept with --keep-failed-for 0s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_stored_error_after_reclaim_fail() {
    let db = db_with(Schema::Corrected, true).await;
    let (tenant, key) = stuck_key(&db, Some(true), 0).await;
    db.idemctl()
        .args(["reclaim", "--action", "fail", "--yes", "-q"])
        .run()
        .assert_code(0)
        .assert_stdout_empty();
    let run = db
        .idemctl()
        .args(["inspect", &key, "--api-key-id", &tenant, "-o", "json"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["state"], "completed");
    assert_eq!(j["response_status"], 500);
    assert_eq!(
        j["response_body"]["type"],
        "tag:idemctl,2026:outcome-unknown"
    );
    assert_eq!(j["response_body"]["title"], "Outcome unknown");
    assert_eq!(j["response_body"]["status"], 500);
    assert!(
        j["response_body"]["detail"]
            .as_str()
            .unwrap()
            .contains("unknown"),
        "{j}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_fail_stores_a_custom_status_and_body() {
    let db = db_with(Schema::Corrected, true).await;
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, r#"{"error": "upstream_timeout", "retry": false}"#).unwrap();
    let run = db
        .idemctl()
        .args(["reclaim", "--action", "fail", "--status", "503", "--yes"])
        .arg("--body-file")
        .arg(&body)
        .args(["-o", "json"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], STUCK as u64);
    let stored = scalar_i64(
        &db,
        "SELECT count(*) FROM idempotency_keys WHERE response_status = 503 \
         AND response_body = '{\"error\": \"upstream_timeout\", \"retry\": false}'::jsonb",
    )
    .await;
    assert_eq!(stored, STUCK as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_skips_a_row_held_by_a_live_owner_and_does_not_wait() {
    let db = db_with(Schema::Reference, true).await;
    let held = stuck_key(&db, Some(false), 0).await;
    let owner = hold_row(&db, &held).await;

    let started = Instant::now();
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--batch-size", "10"])
        .args(["--statement-timeout", "30s"])
        .run_async()
        .await;
    let took = started.elapsed();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], (STUCK - 1) as u64, "{j}");
    assert_eq!(j["skipped_live_owner"]["count"], 1, "{j}");
    assert!(
        took < Duration::from_secs(10),
        "reclaim took {took:?} next to a held row"
    );
    assert_eq!(row_count(&db, &held, "AND state = 'in_progress'").await, 1);

    owner.batch_execute("COMMIT").await.unwrap();
    let j = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json"])
        .run()
        .json();
    assert_eq!(j["rows_reclaimed"], 1, "the next run takes it: {j}");
    assert_eq!(row_count(&db, &held, "").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_dry_run_lists_the_stuck_rows_and_changes_nothing() {
    let db = db_with(Schema::Corrected, true).await;
    let before = snapshot(&db).await;
    let stuck = stuck_keys(&db).await;

    let run = db
        .idemctl()
        .args(["reclaim", "--dry-run", "-o", "json"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["would_reclaim"]["count"], STUCK as u64, "{j}");
    assert_eq!(j["would_reclaim"]["at_least"], false);
    let rows = j["rows"].as_array().unwrap();
    let listed: BTreeSet<Key> = rows
        .iter()
        .map(|r| {
            (
                r["api_key_id"].as_str().unwrap().to_owned(),
                r["key"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(listed, stuck);
    for column in ["locked_at", "created_at"] {
        assert!(
            rows.iter().any(|r| r["held_since_column"] == column),
            "some rows are held since {column}"
        );
    }
    assert!(rows.iter().all(|r| r["request_method"] == "POST"
        && r["request_path"] == "/v1/payments"
        && r["age_seconds"].as_f64().unwrap() > 3000.0));

    let (tenant, key) = stuck.iter().next().unwrap();
    let run = db.idemctl().args(["reclaim", "--dry-run"]).run();
    run.assert_code(0)
        .assert_stdout_contains(key)
        .assert_stdout_contains(tenant);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("would reclaim") && l.ends_with(&format!(" {STUCK}"))),
        "{run}"
    );
    assert_eq!(snapshot(&db).await, before, "--dry-run changed the table");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_without_a_terminal_or_yes_refuses_and_changes_nothing() {
    let db = db_with(Schema::Corrected, true).await;
    let before = snapshot(&db).await;
    let run = db.idemctl().args(["reclaim"]).run();
    run.assert_code(2)
        .assert_stdout_empty()
        .assert_stderr_contains("refusing to reclaim without confirmation")
        .assert_stderr_contains("pass --yes");
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    assert_eq!(snapshot(&db).await, before);

    // Decided before connecting: nothing listens here, yet the answer is the same.
    crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", NOWHERE)
        .args(["reclaim", "--action", "fail"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("without confirmation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_refuses_older_than_under_a_minute_unless_forced() {
    let db = db_with(Schema::Corrected, true).await;
    let before = snapshot(&db).await;
    let run = db
        .idemctl()
        .args(["reclaim", "--older-than", "5s", "--yes"])
        .run();
    run.assert_code(2)
        .assert_stderr_contains("under 1m")
        .assert_stderr_contains("--force");
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    assert_eq!(snapshot(&db).await, before);
    crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", NOWHERE)
        .args(["reclaim", "--older-than", "59s", "--dry-run"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("--force");

    // With --force, the fresh keys (taken 10 s ago) count as stuck too.
    let j = db
        .idemctl()
        .args([
            "reclaim",
            "--older-than",
            "5s",
            "--force",
            "--yes",
            "-o",
            "json",
        ])
        .run();
    j.assert_code(0);
    assert_eq!(j.json()["rows_reclaimed"], (STUCK + 30) as u64);
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress'"
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_without_the_in_progress_index_refuses_unless_allowed_to_scan() {
    let db = db_with(Schema::Reference, false).await;
    let before = snapshot(&db).await;
    for mode in ["--dry-run", "--yes"] {
        let run = db.idemctl().args(["reclaim", mode]).run();
        run.assert_code(2)
            .assert_stderr_contains("no index on in_progress keys")
            .assert_stderr_contains("CREATE INDEX CONCURRENTLY")
            .assert_stderr_contains("--allow-scan");
        assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    }
    assert_eq!(snapshot(&db).await, before);

    let run = db
        .idemctl()
        .args(["reclaim", "--allow-scan", "--yes", "-o", "json"])
        .run();
    run.assert_code(0)
        .assert_stderr_contains("reading the whole table");
    assert_eq!(run.json()["rows_reclaimed"], STUCK as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_refuses_a_body_file_that_is_not_a_json_object() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("garbage.json", "{not json", "is not valid JSON"),
        ("array.json", "[1, 2]", "holds a JSON array"),
    ];
    for (name, text, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let run = crate::support::Cmd::new()
            .env("IDEMCTL_DATABASE_URL", NOWHERE)
            .args(["reclaim", "--action", "fail", "--yes", "--body-file"])
            .arg(&path)
            .run();
        run.assert_code(2)
            .assert_stderr_contains(name)
            .assert_stderr_contains(says);
        assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_plan_then_apply_leaves_changed_rows_alone_and_reports_them() {
    let db = db_with(Schema::Corrected, true).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let before = snapshot(&db).await;
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run()
        .assert_code(0)
        .assert_stdout_contains("plan written to");
    assert_eq!(snapshot(&db).await, before, "--plan changed the table");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(written["schema_version"], 2);
    assert_eq!(written["table"], "public.idempotency_keys");
    assert_eq!(written["rows"].as_array().unwrap().len(), STUCK);

    // Between plan and apply: one key completes, one is taken again, one is deleted, one is held.
    let completed = stuck_key(&db, Some(true), 0).await;
    let gone = stuck_key(&db, Some(true), 1).await;
    let changed = stuck_key(&db, Some(false), 0).await;
    let held = stuck_key(&db, Some(false), 1).await;
    let client = db.client().await;
    complete(&client, &completed, Some(r#"{"id": "pay_1"}"#)).await;
    client
        .execute(
            "UPDATE idempotency_keys SET locked_at = locked_at + interval '1 second' \
             WHERE api_key_id = $1 AND key = $2",
            &[&changed.0, &changed.1],
        )
        .await
        .unwrap();
    delete(&client, &gone).await;
    let owner = hold_row(&db, &held).await;

    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--yes",
            "-o",
            "json",
            "--batch-size",
            "16",
            "--apply",
        ])
        .arg(&plan)
        .run_async()
        .await;
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], (STUCK - 4) as u64, "{j}");
    assert_eq!(j["skipped_live_owner"]["count"], 1, "{j}");
    let reasons: BTreeSet<(Key, String)> = j["left_alone"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                (
                    l["api_key_id"].as_str().unwrap().to_owned(),
                    l["key"].as_str().unwrap().to_owned(),
                ),
                l["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: BTreeSet<(Key, String)> = [
        (completed.clone(), "completed".to_owned()),
        (changed.clone(), "changed".to_owned()),
        (gone, "gone".to_owned()),
        (held.clone(), "held".to_owned()),
    ]
    .into_iter()
    .collect();
    assert_eq!(reasons, expected);
    owner.batch_execute("COMMIT").await.unwrap();

    assert_eq!(
        row_count(
            &db,
            &completed,
            "AND state = 'completed' AND response_status = 201"
        )
        .await,
        1,
        "the completed row keeps its own response"
    );
    assert_eq!(
        row_count(&db, &changed, "AND state = 'in_progress'").await,
        1
    );
    assert_eq!(row_count(&db, &held, "AND state = 'in_progress'").await, 1);
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress'"
        )
        .await,
        30 + 2,
        "fresh keys plus the changed and held ones"
    );

    // The plain summary names the rows left alone and why.
    db.idemctl()
        .args(["reclaim", "--yes", "--apply"])
        .arg(&plan)
        .run()
        .assert_code(0)
        .assert_stdout_contains("completed since the plan")
        .assert_stdout_contains("taken again since the plan")
        .assert_stdout_contains(&completed.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_apply_of_a_fail_plan_stores_the_plans_response() {
    let db = db_with(Schema::Reference, true).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args([
            "reclaim",
            "--action",
            "fail",
            "--status",
            "502",
            "--older-than",
            "10m",
            "--plan",
        ])
        .arg(&plan)
        .run()
        .assert_code(0);
    // A flag that contradicts the plan stops the run before anything changes, even one typed at
    // its default value (as each of these is); one that repeats the plan is fine.
    let before = snapshot(&db).await;
    for (flags, named) in [
        (&["--action", "delete"][..], "--action"),
        (&["--status", "500"][..], "--status"),
        (&["--older-than", "5m"][..], "--older-than"),
    ] {
        let run = db
            .idemctl()
            .args(["reclaim", "--yes"])
            .args(flags)
            .arg("--apply")
            .arg(&plan)
            .run();
        run.assert_code(2)
            .assert_stderr_contains(&format!("{named} differs from the plan"));
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
    }
    assert_eq!(snapshot(&db).await, before);
    // --status belongs to --action fail, even at its default value.
    db.idemctl()
        .args(["reclaim", "--dry-run", "--status", "500"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("--status only applies to --action fail");
    // Without --action the plan decides; a flag that repeats the plan is accepted.
    let j = db
        .idemctl()
        .args([
            "reclaim", "--yes", "-o", "json", "--status", "502", "--apply",
        ])
        .arg(&plan)
        .run();
    j.assert_code(0);
    let j = j.json();
    assert_eq!(j["action"], "fail");
    assert_eq!(j["rows_reclaimed"], STUCK as u64);
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE state = 'completed' \
             AND response_status = 502 AND (response_body->>'status')::int = 502"
        )
        .await,
        STUCK as i64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_refuses_a_truncated_or_foreign_plan_and_changes_nothing() {
    let db = db_with(Schema::Corrected, true).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run()
        .assert_code(0);
    let text = std::fs::read_to_string(&plan).unwrap();
    let before = snapshot(&db).await;

    let truncated = dir.path().join("truncated.json");
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "--apply"])
        .arg(&truncated)
        .run();
    run.assert_code(2)
        .assert_stderr_contains("truncated.json is not a valid reclaim plan");
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);

    db.exec("CREATE TABLE other_keys (LIKE idempotency_keys INCLUDING ALL)")
        .await;
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-t", "other_keys", "--apply"])
        .arg(&plan)
        .run();
    run.assert_code(2)
        .assert_stderr_contains("was made for table public.idempotency_keys");
    assert_eq!(snapshot(&db).await, before);
}

/// On a table with a tenant column a plan row without a tenant (null) is refused, one line, as is a
/// row that lacks the field; nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_refuses_a_plan_row_without_a_tenant_on_a_tenant_table() {
    let db = db_with(Schema::Corrected, true).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run()
        .assert_code(0);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert!(written["rows"][0]["api_key_id"].is_string(), "{written}");
    let before = snapshot(&db).await;
    let edited = dir.path().join("edited.json");
    let mut null = written.clone();
    null["rows"][1]["api_key_id"] = serde_json::Value::Null;
    let mut missing = written.clone();
    missing["rows"][1]
        .as_object_mut()
        .unwrap()
        .remove("api_key_id");
    for (plan, says) in [
        (
            null,
            "has no api_key_id, but table public.idempotency_keys has a tenant column (api_key_id)",
        ),
        (missing, "missing field `api_key_id`"),
    ] {
        std::fs::write(&edited, plan.to_string()).unwrap();
        let run = db
            .idemctl()
            .args(["reclaim", "--yes", "--apply"])
            .arg(&edited)
            .run();
        run.assert_code(2)
            .assert_stderr_contains("edited.json is not a valid reclaim plan")
            .assert_stderr_contains(says);
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
        if says.starts_with("has no api_key_id") {
            run.assert_error(
                2,
                &format!(
                    "plan {} is not a valid reclaim plan (the row of key {} has no api_key_id, \
                     but table public.idempotency_keys has a tenant column (api_key_id)); nothing \
                     was changed, make a new one with --plan",
                    edited.display(),
                    written["rows"][1]["key"].as_str().unwrap()
                ),
            );
        }
    }
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_honours_limit_and_quiet() {
    let db = db_with(Schema::Corrected, true).await;
    let run = db
        .idemctl()
        .args([
            "reclaim",
            "--yes",
            "-o",
            "json",
            "--limit",
            "5",
            "--batch-size",
            "2",
        ])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], 5);
    assert_eq!(j["batches"], 3);
    assert_eq!(j["end_reason"], "limit");
    assert_eq!(j["stuck_left"]["count"], (STUCK - 5) as u64);
    assert_eq!(stuck_keys(&db).await.len(), STUCK - 5);

    db.idemctl()
        .args(["reclaim", "--yes", "-q"])
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    assert!(stuck_keys(&db).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_exits_with_lock_busy_when_another_reclaim_holds_the_table() {
    let db = db_with(Schema::Corrected, true).await;
    let other = db.client().await;
    other
        .batch_execute(
            "SET application_name = 'other-reclaim'; \
             SELECT pg_advisory_lock(31377154, 'idempotency_keys'::regclass::oid::int)",
        )
        .await
        .unwrap();
    let run = db.idemctl().args(["reclaim", "--yes"]).run();
    run.assert_code(7)
        .assert_stderr_contains("another reclaim run holds the lock")
        .assert_stderr_contains("other-reclaim");
    assert_eq!(stuck_keys(&db).await.len(), STUCK);
    // An evict lock does not stand in reclaim's way.
    other
        .batch_execute(
            "SELECT pg_advisory_unlock_all(); \
             SELECT pg_advisory_lock(31377153, 'idempotency_keys'::regclass::oid::int)",
        )
        .await
        .unwrap();
    db.idemctl()
        .args(["reclaim", "--yes", "-q"])
        .run()
        .assert_code(0);
    assert!(stuck_keys(&db).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_on_a_terminal_asks_and_proceeds_only_on_yes() {
    let db = db_with(Schema::Corrected, true).await;
    let before = snapshot(&db).await;
    // script(1) gives idemctl a pseudo-terminal for stdin, stdout and stderr, fed from our stdin.
    let on_terminal = |answer: &str| {
        let command = format!("'{}' reclaim --batch-size 9", crate::support::IDEMCTL);
        db.command("script")
            .args(["-qec", &command, "/dev/null"])
            .stdin_bytes(answer.as_bytes().to_vec())
    };
    for answer in ["n\n", "\n", "yes please\n"] {
        let run = on_terminal(answer).run_async().await;
        run.assert_code(2)
            .assert_stdout_contains("reclaim: delete 50 in_progress keys")
            .assert_stdout_contains("[y/N]")
            .assert_stdout_contains("reclaim not confirmed; nothing was changed");
        assert_eq!(
            snapshot(&db).await,
            before,
            "answer {answer:?} changed the table"
        );
    }
    let run = on_terminal("y\n").run_async().await;
    run.assert_code(0).assert_stdout_contains("keys reclaimed");
    assert!(stuck_keys(&db).await.is_empty(), "{run}");
}

/// The key table partitioned by tenant, with both idemctl indexes on the parent.
const PARTITIONED: &str = "
    CREATE TABLE idempotency_keys (
        key text NOT NULL, api_key_id text NOT NULL, request_method text NOT NULL,
        request_path text NOT NULL, request_fingerprint bytea NOT NULL, state text NOT NULL,
        response_status int, response_body jsonb, locked_at timestamptz,
        created_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz NOT NULL,
        PRIMARY KEY (api_key_id, key)
    ) PARTITION BY LIST (api_key_id);
    CREATE TABLE idempotency_keys_a PARTITION OF idempotency_keys FOR VALUES IN ('tenant_a');
    CREATE TABLE idempotency_keys_b PARTITION OF idempotency_keys FOR VALUES IN ('tenant_b');
    CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
    CREATE INDEX idempotency_keys_in_progress ON idempotency_keys ((coalesce(locked_at, created_at)))
        WHERE state = 'in_progress';";

/// Five stuck keys of one tenant: in a fresh partition they sit at ctids (0,1) .. (0,5).
async fn insert_stuck(db: &TestDb, tenant: &str) {
    db.exec(&format!(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, locked_at, created_at, expires_at) \
         SELECT 'k' || g, '{tenant}', 'POST', '/v1/payments', '\\x00', 'in_progress', \
                now() - interval '1 hour', now() - interval '1 hour', now() + interval '1 day' \
           FROM generate_series(1, 5) AS g"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_on_a_partitioned_table_touches_only_the_rows_it_chose() {
    let db = TestDb::new().await;
    db.exec(PARTITIONED).await;
    insert_stuck(&db, "tenant_a").await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run()
        .assert_code(0);
    // Same physical addresses, other partition, not in the plan.
    insert_stuck(&db, "tenant_b").await;
    let j = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json", "--apply"])
        .arg(&plan)
        .run();
    j.assert_code(0);
    assert_eq!(j.json()["rows_reclaimed"], 5);
    let left = "SELECT count(*) FROM idempotency_keys WHERE api_key_id = 'tenant_b'";
    assert_eq!(
        scalar_i64(&db, left).await,
        5,
        "apply reached past its plan"
    );

    // A live owner holds tenant_b's k1 at (0,1); tenant_a's k1, a candidate, sits at (0,1) of
    // the other partition. The sweep must neither take the held row nor wait on it.
    db.exec("TRUNCATE idempotency_keys").await;
    insert_stuck(&db, "tenant_a").await;
    insert_stuck(&db, "tenant_b").await;
    let held = ("tenant_b".to_owned(), "k1".to_owned());
    let owner = hold_row(&db, &held).await;
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json"])
        .run_async()
        .await;
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_reclaimed"], 9, "{j}");
    assert_eq!(j["skipped_live_owner"]["count"], 1, "{j}");
    assert_eq!(row_count(&db, &held, "").await, 1);
    owner.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_fail_keeps_the_stored_error_past_the_retry_window() {
    let db = db_with(Schema::Corrected, true).await;
    let expired_stuck = scalar_i64(
        &db,
        "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' AND expires_at < now()",
    )
    .await;
    assert!(expired_stuck > 0, "the mix has expired in_progress keys");
    db.idemctl()
        .args(["reclaim", "--action", "fail", "--yes", "-q"])
        .run()
        .assert_code(0)
        .assert_stdout_empty();
    let short = scalar_i64(
        &db,
        "SELECT count(*) FROM idempotency_keys WHERE response_status = 500 \
         AND expires_at < now() + interval '23 hours 59 minutes'",
    )
    .await;
    assert_eq!(short, 0, "every failed key is kept at least a day");
    // The next evict leaves the stored errors for the client's retries.
    db.idemctl().args(["evict", "-q"]).run().assert_code(0);
    let failed = scalar_i64(
        &db,
        "SELECT count(*) FROM idempotency_keys WHERE response_status = 500",
    )
    .await;
    assert_eq!(failed, STUCK as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_apply_refuses_a_plan_made_on_another_database() {
    let db = db_with(Schema::Corrected, true).await;
    let other = db_with(Schema::Corrected, true).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run()
        .assert_code(0);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(written["database"]["name"], db.name());
    assert!(
        written["database"]["system_identifier"]
            .as_str()
            .is_some_and(|s| s.len() > 5)
    );
    let before = snapshot(&other).await;
    let run = other
        .idemctl()
        .args(["reclaim", "--yes", "--apply"])
        .arg(&plan)
        .run();
    run.assert_code(2)
        .assert_stderr_contains(&format!("was made on database {}", db.name()))
        .assert_stderr_contains("nothing was changed");
    assert_eq!(snapshot(&other).await, before);
    // The database it was made on takes it.
    db.idemctl()
        .args(["reclaim", "--yes", "-q", "--apply"])
        .arg(&plan)
        .run()
        .assert_code(0);
    assert!(stuck_keys(&db).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_with_nothing_to_do_is_silent_under_cron() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            live: 20,
            ..Mix::default()
        },
    )
    .await;
    // No index on in_progress keys: --allow-scan warns, but not under -q.
    db.idemctl()
        .args(["reclaim", "--yes", "--allow-scan"])
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_contains("reading the whole table");
    db.idemctl()
        .args(["reclaim", "--yes", "--allow-scan", "-q"])
        .run()
        .assert_code(0)
        .assert_stdout_empty()
        .assert_stderr_empty();
    // Asked for explicitly, the summary is printed.
    db.idemctl()
        .args(["reclaim", "--yes", "--allow-scan", "-o", "plain"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("keys reclaimed");
}

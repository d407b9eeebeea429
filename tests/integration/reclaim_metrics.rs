//! reclaim's own metrics: `idemctl_reclaim_keys_reclaimed{action}` counts the keys the run took
//! under its action (0 under the others), and `idemctl_reclaim_keys_left_alone{reason}` counts,
//! reason by reason, the keys it left: a sweep's keys held by a live owner, an apply's plan rows
//! gone, completed, taken again, no longer past the cutoff or held since the plan.

use std::collections::BTreeMap;
use std::path::Path;

use crate::metrics::promtool_check_metrics;
use crate::support::TestDb;
use crate::support::stuck::{complete, db_with_stuck, delete, hold_row, stuck_key};

const TABLE: &str = "public.idempotency_keys";

/// Every sample of `name` in the textfile, by the value of `label`, checked to be of `db`'s table.
fn by_label(text: &str, db: &TestDb, name: &str, label: &str) -> BTreeMap<String, f64> {
    let prefix = format!(
        "{name}{{database=\"{}\",table=\"{TABLE}\",{label}=\"",
        db.name()
    );
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let (value_of_label, tail) = rest.split_once('"').unwrap();
            let value = tail.rsplit(' ').next().unwrap().parse().unwrap();
            (value_of_label.to_owned(), value)
        })
        .collect()
}

fn counts(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

fn read(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    promtool_check_metrics(&text);
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_counts_keys_by_action_and_the_held_ones_as_left_alone() {
    let db = db_with_stuck(12, 10).await;
    let held = stuck_key(&db, None, 3).await;
    let owner = hold_row(&db, &held).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reclaim.prom");
    db.idemctl()
        .args(["reclaim", "--yes", "--action", "fail", "--batch-size", "5"])
        .arg("--textfile")
        .arg(&path)
        .run_async()
        .await
        .assert_code(0);
    owner.batch_execute("COMMIT").await.unwrap();
    let text = read(&path);
    assert_eq!(
        by_label(&text, &db, "idemctl_reclaim_keys_reclaimed", "action"),
        counts(&[("delete", 0.0), ("fail", 11.0), ("release", 0.0)]),
        "{text}"
    );
    assert_eq!(
        by_label(&text, &db, "idemctl_reclaim_keys_left_alone", "reason"),
        counts(&[
            ("changed", 0.0),
            ("completed", 0.0),
            ("filtered", 0.0),
            ("gone", 0.0),
            ("held", 1.0),
            ("other_state", 0.0),
            ("too_young", 0.0),
        ]),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_counts_each_plan_row_it_left_alone_by_reason() {
    let db = db_with_stuck(20, 10).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run_async()
        .await
        .assert_code(0);

    // Between plan and apply: one key completes, two are taken again, one is deleted, one is held.
    let completed = stuck_key(&db, None, 0).await;
    let changed = [stuck_key(&db, None, 1).await, stuck_key(&db, None, 2).await];
    let gone = stuck_key(&db, None, 3).await;
    let held = stuck_key(&db, None, 4).await;
    let client = db.client().await;
    let by_key = "WHERE api_key_id = $1 AND key = $2";
    complete(&client, &completed, None).await;
    for k in &changed {
        client
            .execute(
                &format!(
                    "UPDATE idempotency_keys SET locked_at = now() - interval '2 hours' {by_key}"
                ),
                &[&k.0, &k.1],
            )
            .await
            .unwrap();
    }
    delete(&client, &gone).await;
    let owner = hold_row(&db, &held).await;

    let path = dir.path().join("apply.prom");
    db.idemctl()
        .args(["reclaim", "--yes", "--batch-size", "6", "--apply"])
        .arg(&plan)
        .arg("--textfile")
        .arg(&path)
        .run_async()
        .await
        .assert_code(0);
    owner.batch_execute("COMMIT").await.unwrap();
    let text = read(&path);
    assert_eq!(
        by_label(&text, &db, "idemctl_reclaim_keys_reclaimed", "action"),
        counts(&[("delete", 15.0), ("fail", 0.0), ("release", 0.0)]),
        "{text}"
    );
    assert_eq!(
        by_label(&text, &db, "idemctl_reclaim_keys_left_alone", "reason"),
        counts(&[
            ("changed", 2.0),
            ("completed", 1.0),
            ("filtered", 0.0),
            ("gone", 1.0),
            ("held", 1.0),
            ("other_state", 0.0),
            ("too_young", 0.0),
        ]),
        "{text}"
    );

    // A plan whose cutoff no key is past any more (its older_than raised by hand): too_young.
    let plan2 = dir.path().join("plan2.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan2)
        .run_async()
        .await
        .assert_code(0);
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan2).unwrap()).unwrap();
    let listed = doc["rows"].as_array().unwrap().len();
    assert_eq!(listed, 3, "the two taken again and the one held: {doc}");
    doc["older_than_seconds"] = serde_json::json!(10.0 * 365.0 * 86_400.0);
    std::fs::write(&plan2, doc.to_string()).unwrap();
    let path = dir.path().join("apply2.prom");
    db.idemctl()
        .args(["reclaim", "--yes", "--apply"])
        .arg(&plan2)
        .arg("--textfile")
        .arg(&path)
        .run_async()
        .await
        .assert_code(0);
    let text = read(&path);
    assert_eq!(
        by_label(&text, &db, "idemctl_reclaim_keys_left_alone", "reason")["too_young"],
        3.0,
        "{text}"
    );
    assert_eq!(
        by_label(&text, &db, "idemctl_reclaim_keys_reclaimed", "action")["delete"],
        0.0,
        "{text}"
    );
}

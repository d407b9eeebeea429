//! Every statement idemctl runs against the key table is index-backed: EXPLAIN on 200,000
//! realistic rows, with custom and generic plans, on both table shapes, and no sequential scan of
//! the key table anywhere in any plan.

use std::collections::BTreeSet;

use crate::fixtures::Schema;
use crate::support::TestDb;

/// (file in sql/, EXECUTE arguments). Every sql/ file that names the key table must be listed here
/// or in NOT_RUN_BY_IDEMCTL.
const STATEMENTS: &[(&str, &str)] = &[
    ("inspect_by_tenant.sql", "'tenant_0007', 'no-such-key', 300"),
    ("oldest_live.sql", ""),
    ("oldest_expired.sql", ""),
    ("expired_backlog.sql", "100000"),
    ("expired_in_progress.sql", "100000"),
    ("evict_batch.sql", "NULL, now() - interval '7 days', NULL"),
    (
        "evict_batch.sql",
        "now() - interval '3 days', now() - interval '71 hours', 3600",
    ),
    ("evict_batch.sql", "now() - interval '26 hours', NULL, NULL"),
    (
        "evict_batch_skip_locked.sql",
        "NULL, now() - interval '5 days', 5000, NULL",
    ),
    (
        "evict_batch_skip_locked.sql",
        "now() - interval '4 days', now() - interval '4 days', 5000, 60",
    ),
    ("evict_range_end.sql", "now() - interval '3 days', 5000"),
    ("evict_preview.sql", "100000, NULL"),
    (
        "reclaim_apply_delete.sql",
        "ARRAY['tenant_0001', 'tenant_0002'], ARRAY['k1', 'k2'], \
         ARRAY[NULL, now() - interval '1 hour']::timestamptz[], \
         ARRAY[now() - interval '2 hours', now() - interval '1 hour']::timestamptz[], 300",
    ),
    (
        "reclaim_apply_fail.sql",
        "ARRAY['tenant_0001', 'tenant_0002'], ARRAY['k1', 'k2'], \
         ARRAY[NULL, now() - interval '1 hour']::timestamptz[], \
         ARRAY[now() - interval '2 hours', now() - interval '1 hour']::timestamptz[], 300, 500, \
         '{\"type\": \"about:blank\"}'",
    ),
];

/// Statements that need the optional in_progress index (run only when it exists, or with --allow-scan).
const NEEDS_STUCK_INDEX: &[(&str, &str)] = &[
    ("stuck_count.sql", "300, 100000"),
    ("reclaim_preview.sql", "300, 10001"),
    ("reclaim_delete.sql", "300, 500"),
    (
        "reclaim_fail.sql",
        "300, 500, 500, '{\"type\": \"about:blank\"}'",
    ),
];

/// Key lookups without a tenant: which one runs depends on the table's indexes.
const BY_KEY: (&str, &str) = ("inspect_by_key.sql", "'no-such-key', 300, 50");
const SKIP_SCAN: (&str, &str) = ("inspect_skip_scan.sql", "'no-such-key', 300, 10000");

/// sql/ files that mention the table but are not statements idemctl runs against it.
const NOT_RUN_BY_IDEMCTL: &[&str] = &["sample_data.sql"];

fn sql_file(name: &str) -> String {
    let path = format!("{}/sql/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

async fn load(schema: Schema, with_stuck_index: bool) -> TestDb {
    let db = TestDb::new().await;
    db.exec(schema.ddl()).await;
    let client = db.client().await;
    let spec = idemctl::sample::Spec {
        rows: 200_000,
        ..Default::default()
    };
    idemctl::sample::generate(&client, "\"idempotency_keys\"", &spec, |_| {})
        .await
        .unwrap();
    if with_stuck_index {
        db.exec(include_str!("../../sql/maintenance_indexes.sql"))
            .await;
    }
    db.exec("VACUUM ANALYZE idempotency_keys").await;
    db
}

/// Collect every "Node Type" + "Relation Name" pair of a JSON plan.
fn scans(plan: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match plan {
        serde_json::Value::Object(map) => {
            if let Some(node) = map.get("Node Type").and_then(|v| v.as_str()) {
                let rel = map
                    .get("Relation Name")
                    .and_then(|v| v.as_str())
                    .unwrap_or("");
                out.push((node.to_owned(), rel.to_owned()));
            }
            map.values().for_each(|v| scans(v, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| scans(v, out)),
        _ => {}
    }
}

async fn assert_index_backed(db: &TestDb, file: &str, args: &str) {
    let client = db.client().await;
    let sql = sql_file(file).replace("{table}", "\"public\".\"idempotency_keys\"");
    for mode in ["force_custom_plan", "force_generic_plan"] {
        let execute = if args.is_empty() {
            "EXECUTE s".to_owned()
        } else {
            format!("EXECUTE s({args})")
        };
        let script = format!(
            "SET plan_cache_mode = {mode}; PREPARE s AS {sql}; \
             EXPLAIN (FORMAT JSON) {execute}"
        );
        let messages = client
            .simple_query(&script)
            .await
            .unwrap_or_else(|e| panic!("{file} ({mode}): {}", crate::support::pg_error_text(&e)));
        client.batch_execute("DEALLOCATE s").await.unwrap();
        let text = messages
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .expect("EXPLAIN returned a plan");
        let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut found = Vec::new();
        scans(&plan, &mut found);
        let seq: Vec<_> = found
            .iter()
            .filter(|(node, rel)| node == "Seq Scan" && rel == "idempotency_keys")
            .collect();
        assert!(
            seq.is_empty(),
            "{file} ({mode}, args {args}) scans the key table sequentially:\n{text}"
        );
        assert!(
            found.iter().any(
                |(node, rel)| (rel == "idempotency_keys" && node.contains("Index"))
                    || node == "Bitmap Index Scan"
            ),
            "{file} ({mode}) uses no index of the key table:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_the_corrected_table() {
    let db = load(Schema::Corrected, true).await;
    for (file, args) in STATEMENTS
        .iter()
        .chain(NEEDS_STUCK_INDEX)
        .chain([&SKIP_SCAN])
    {
        assert_index_backed(&db, file, args).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_the_reference_table() {
    let db = load(Schema::Reference, false).await;
    for (file, args) in STATEMENTS.iter().chain([&BY_KEY, &SKIP_SCAN]) {
        assert_index_backed(&db, file, args).await;
    }
}

#[test]
fn every_key_table_statement_in_sql_is_explained() {
    let dir = format!("{}/sql", env!("CARGO_MANIFEST_DIR"));
    let covered: BTreeSet<&str> = STATEMENTS
        .iter()
        .chain(NEEDS_STUCK_INDEX)
        .chain([&BY_KEY, &SKIP_SCAN])
        .map(|(f, _)| *f)
        .chain(NOT_RUN_BY_IDEMCTL.iter().copied())
        .collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if sql_file(&name).contains("{table}") {
            assert!(
                covered.contains(name.as_str()),
                "sql/{name} is not covered by the EXPLAIN test"
            );
        }
    }
}

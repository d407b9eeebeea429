//! Every statement idemctl runs against the key table is index-backed: EXPLAIN on 200,000
//! realistic rows, with custom and generic plans, on both table shapes, and no sequential scan of
//! the key table anywhere in any plan. The same on the table partitioned by day on expires_at and on
//! created_at (pg_partman's layout): plans are Appends of per-partition index scans, pruned where the
//! partition key allows, and no partition that holds a page is scanned sequentially (the planner
//! rightly reads an empty partition, such as a premade future day, without its index).

use std::collections::BTreeSet;

use idemctl::Profile;

use crate::config_file;
use crate::fixtures::Schema;
use crate::profiles;
use crate::support::TestDb;
use crate::support::partman::{self, PartitionBy};

/// (file in sql/, EXECUTE arguments). Every sql/ file that names the key table must be listed here
/// or in NOT_RUN_BY_IDEMCTL.
const STATEMENTS: &[(&str, &str)] = &[
    ("inspect_by_tenant.sql", "'tenant_0007', 'no-such-key', 300"),
    ("oldest_live.sql", ""),
    ("oldest_expired.sql", ""),
    ("oldest_expired_referenced.sql", "10000"),
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
    (
        "evict_batch_too_young.sql",
        "now() - interval '3 days', now() - interval '71 hours', 3600",
    ),
    (
        "evict_range_in_progress.sql",
        "now() - interval '3 days', now() - interval '71 hours'",
    ),
    (
        "evict_range_in_progress.sql",
        "now() - interval '10 minutes', NULL",
    ),
    (
        "expired_in_progress_from.sql",
        "100000, now() - interval '1 hour'",
    ),
    (
        "expired_backlog_from.sql",
        "100000, now() - interval '1 hour'",
    ),
    ("evict_range_end.sql", "now() - interval '3 days', 5000"),
    ("evict_preview.sql", "100000, NULL"),
    ("evict_preview_sample.sql", "100000, 3600, 10"),
    ("stats_recent_ttl.sql", "500, 60"),
    (
        "reclaim_apply_release.sql",
        "ARRAY['tenant_0001', 'tenant_0002'], ARRAY['k1', 'k2'], \
         ARRAY[NULL, now() - interval '1 hour']::timestamptz[], \
         ARRAY[now() - interval '2 hours', now() - interval '1 hour']::timestamptz[], 300, NULL, NULL, NULL",
    ),
    (
        "reclaim_apply_delete.sql",
        "ARRAY['tenant_0001', 'tenant_0002'], ARRAY['k1', 'k2'], \
         ARRAY[NULL, now() - interval '1 hour']::timestamptz[], \
         ARRAY[now() - interval '2 hours', now() - interval '1 hour']::timestamptz[], 300, NULL, NULL, NULL",
    ),
    (
        "reclaim_apply_archive_lock.sql",
        "ARRAY['tenant_0001', 'tenant_0002'], ARRAY['k1', 'k2'], \
         ARRAY[NULL, now() - interval '1 hour']::timestamptz[], \
         ARRAY[now() - interval '2 hours', now() - interval '1 hour']::timestamptz[], 300, NULL, NULL, NULL",
    ),
    (
        "reclaim_apply_fail.sql",
        "ARRAY['tenant_0001', 'tenant_0002'], ARRAY['k1', 'k2'], \
         ARRAY[NULL, now() - interval '1 hour']::timestamptz[], \
         ARRAY[now() - interval '2 hours', now() - interval '1 hour']::timestamptz[], 300, 500, \
         '{\"type\": \"about:blank\"}', 86400, NULL, NULL, NULL",
    ),
];

/// Statements that need the optional in_progress index (run only when it exists, or with --allow-scan).
const NEEDS_STUCK_INDEX: &[(&str, &str)] = &[
    ("stuck_count.sql", "300, 100000"),
    ("oldest_stuck.sql", "300"),
    ("reclaim_count.sql", "300, 10000, NULL, NULL, NULL"),
    ("reclaim_preview.sql", "300, 10001, NULL, NULL, NULL"),
    ("reclaim_delete.sql", "300, 500, NULL, NULL, NULL"),
    (
        "reclaim_fail.sql",
        "300, 500, 500, '{\"type\": \"about:blank\"}', 86400, NULL, NULL, NULL",
    ),
    ("reclaim_release.sql", "300, 500, NULL, NULL, NULL"),
    ("reclaim_archive_lock.sql", "300, 500, NULL, NULL, NULL"),
];

/// reclaim's statements bind its filters (--api-key-id, --path, --method) as their last three
/// parameters, NULL when not given. Each statement that ends so is explained again with the filters
/// the profile has columns for: all of them at once and each alone (a tenant alone may lead the
/// planner to the tenant's index instead of the in_progress one; either is an index).
const FILTER_NULLS: &str = ", NULL, NULL, NULL";

fn filter_variants(profile: &Profile, args: &str) -> Vec<String> {
    let Some(base) = args.strip_suffix(FILTER_NULLS) else {
        return Vec::new();
    };
    let tenant = profile.has_scope().then_some("'tenant_0007'");
    let path = profile.request_path.is_some().then_some("'/v1/payments'");
    let method = profile.request_method.is_some().then_some("'POST'");
    let all = [tenant, path, method];
    let mut sets = vec![all];
    if all.iter().flatten().count() > 1 {
        sets.extend([
            [tenant, None, None],
            [None, path, None],
            [None, None, method],
        ]);
    }
    sets.into_iter()
        .filter(|set| set.iter().any(Option::is_some))
        .map(|set| {
            let values: Vec<&str> = set.iter().map(|v| v.unwrap_or("NULL")).collect();
            format!("{base}, {}", values.join(", "))
        })
        .collect()
}

/// Every statement of `list` that takes reclaim's filters, with each variant of filter arguments.
fn filtered<'a>(
    profile: &Profile,
    list: impl IntoIterator<Item = &'a (&'a str, &'a str)>,
) -> Vec<(&'a str, String)> {
    list.into_iter()
        .flat_map(|(file, args)| {
            filter_variants(profile, args)
                .into_iter()
                .map(move |a| (*file, a))
        })
        .collect()
}

/// Key lookups without a tenant: which one runs depends on the table's indexes.
const BY_KEY: (&str, &str) = ("inspect_by_key.sql", "'no-such-key', 300, 50, NULL");
const SKIP_SCAN: (&str, &str) = (
    "inspect_skip_scan.sql",
    "'no-such-key', 300, 10000, NULL, 50",
);
/// A key looked up with part of a scope of several columns (the second column's value given).
const BY_KEY_IN_PART: (&str, &str) = (
    "inspect_by_key.sql",
    "'no-such-key', 300, 50, ARRAY[NULL, 'tenant_0007']",
);

/// Statements idemctl only plans (EXPLAIN without ANALYZE reads no row, so no plan of theirs
/// scans anything): each must render fully for the profile and yield a row estimate.
const PLANNED_ONLY: &[&str] = &["evict_estimate.sql"];

/// Statements generated around a template, explained by a test of their own: evict's walk and its
/// dry run's pages (`the_walk_without_an_expiry_index_is_index_backed`).
const EXPLAINED_APART: &[&str] = &["evict_walk.sql", "evict_walk_preview.sql"];

/// Statements that read the catalog about the key table, never the table: stats' lag estimate
/// without an expiry index (`the_walk_without_an_expiry_index_is_index_backed` explains it).
const CATALOG_ONLY: &[&str] = &["stats_lag_estimate.sql"];

/// sql/ files that mention the table but are not statements idemctl runs against it.
const NOT_RUN_BY_IDEMCTL: &[&str] = &["sample_data.sql"];

/// DDL idemctl runs (evict --drop-partitions): no plan to explain; each holds its locks for as long
/// as a catalog change takes, under a lock_timeout of a few milliseconds.
const DDL: &[&str] = &["evict_partition_detach.sql", "evict_partition_drop.sql"];

/// The statements whose arguments differ on a partitioned table: evict's last range of a real run
/// holds at most a batch of rows (the claim sized it), not a day's worth, and a partition's probe
/// runs on one partition (substituted by the test).
const PARTITIONED_ONLY: &[(&str, &str)] = &[
    ("evict_batch.sql", "now() - interval '1 minute', NULL, NULL"),
    ("evict_partition_probe.sql", ""),
    ("evict_partition_probe_in_flight.sql", ""),
];

fn sql_file(name: &str) -> String {
    let path = format!("{}/sql/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

async fn load(schema: Schema, with_stuck_index: bool) -> TestDb {
    load_ddl(schema.ddl(), with_stuck_index).await
}

async fn load_ddl(ddl: &str, with_stuck_index: bool) -> TestDb {
    let db = TestDb::new().await;
    db.exec(ddl).await;
    let client = db.client().await;
    let spec = idemctl::sample::Spec {
        rows: 200_000,
        ..Default::default()
    };
    idemctl::sample::generate(&client, "\"idempotency_keys\"", &spec, |_| {})
        .await
        .unwrap();
    if with_stuck_index {
        // A partitioned table refuses CREATE INDEX CONCURRENTLY; the index is the same.
        db.exec(&partman::stuck_index_ddl()).await;
    }
    db.exec("VACUUM ANALYZE idempotency_keys").await;
    db
}

/// EXPLAIN `execute` of `sql` prepared under plan_cache_mode `mode`: the JSON plan's text, and
/// every "Node Type" + "Relation Name" pair in it. EXPLAIN without ANALYZE runs nothing.
pub(crate) async fn explain_scans(
    client: &tokio_postgres::Client,
    file: &str,
    mode: &str,
    sql: &str,
    execute: &str,
) -> (String, Vec<(String, String)>) {
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
    (text, found)
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

/// The relations a plan may touch: the key table and, when partitioned, its partitions; and which of
/// them hold more than a few pages. A sequential scan of an empty relation reads nothing, and one of
/// a relation of at most `FEW_PAGES` pages reads a bounded, trivial amount: the planner rightly
/// prefers it there (a partition at the edge of the loaded range holds a handful of rows, how many
/// depending on the time of day the test runs).
const FEW_PAGES: i64 = 4;

struct KeyRelations {
    names: BTreeSet<String>,
    with_pages: BTreeSet<String>,
}

async fn key_relations(db: &TestDb) -> KeyRelations {
    let rows = db
        .client()
        .await
        .query(
            "SELECT c.relname::text, pg_relation_size(c.oid) > $1 * current_setting('block_size')::bigint \
               FROM pg_class c \
              WHERE c.oid = 'idempotency_keys'::regclass \
                 OR c.oid IN (SELECT relid FROM pg_partition_tree('idempotency_keys'))",
            &[&FEW_PAGES],
        )
        .await
        .unwrap();
    KeyRelations {
        names: rows.iter().map(|r| r.get(0)).collect(),
        with_pages: rows.iter().filter(|r| r.get(1)).map(|r| r.get(0)).collect(),
    }
}

async fn assert_index_backed(db: &TestDb, file: &str, args: &str) {
    let rels = key_relations(db).await;
    assert_index_backed_on(db, &sql_file(file), file, args, &rels).await;
}

async fn assert_index_backed_on(
    db: &TestDb,
    sql: &str,
    file: &str,
    args: &str,
    rels: &KeyRelations,
) {
    assert_index_backed_as(db, &Profile::storage(), sql, file, args, rels).await;
}

async fn assert_index_backed_as(
    db: &TestDb,
    profile: &Profile,
    sql: &str,
    file: &str,
    args: &str,
    rels: &KeyRelations,
) {
    // A statement that finds the rows it locked again by ctid also runs, on a Citus reference or
    // local table, with them found by the key's identity: explained too (evict's walk never runs
    // on Citus).
    if let Some(by_identity) = (!EXPLAINED_APART.contains(&file)
        && sql
            .lines()
            .any(|l| !l.trim_start().starts_with("--") && l.contains("ctid")))
    .then(|| idemctl::rows_by_identity(sql).expect("a template of the known shape"))
    {
        Box::pin(assert_index_backed_as(
            db,
            profile,
            &by_identity,
            &format!("{file} (rows by identity)"),
            args,
            rels,
        ))
        .await;
    }
    let client = db.client().await;
    let sql = profile.render(sql, "\"public\".\"idempotency_keys\"");
    assert!(
        !sql.contains("{cutoff}") && !sql.contains("{keep_failed") && !sql.contains("{zone}"),
        "{file}: a role is left unfilled for profile {}:\n{sql}",
        profile.name
    );
    for mode in ["force_custom_plan", "force_generic_plan"] {
        let execute = if args.is_empty() {
            "EXECUTE s".to_owned()
        } else {
            format!("EXECUTE s({args})")
        };
        let (text, found) = explain_scans(&client, file, mode, &sql, &execute).await;
        let seq: Vec<_> = found
            .iter()
            .filter(|(node, rel)| node == "Seq Scan" && rels.with_pages.contains(rel))
            .collect();
        assert!(
            seq.is_empty(),
            "{file} ({mode}, args {args}) scans the key table sequentially:\n{text}"
        );
        assert!(
            found.iter().any(
                |(node, rel)| (rels.names.contains(rel) && node.contains("Index"))
                    || node == "Bitmap Index Scan"
            ),
            "{file} ({mode}) uses no index of the key table:\n{text}"
        );
    }
}

/// Run each [`PLANNED_ONLY`] statement as idemctl renders it for `profile`: it must plan, and on
/// tables loaded with expired completed keys estimate some.
async fn assert_planned(db: &TestDb, profile: &Profile) {
    let client = db.client().await;
    for file in PLANNED_ONLY {
        let sql = profile.render(&sql_file(file), "\"public\".\"idempotency_keys\"");
        let unfilled = sql.split('{').skip(1).any(|rest| {
            rest.split_once('}').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            })
        });
        assert!(
            !unfilled,
            "{file}: a role is left unfilled for profile {}:\n{sql}",
            profile.name
        );
        let row = client
            .query_one(&sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{file}: {}", crate::support::pg_error_text(&e)));
        let plan: serde_json::Value = row.get(0);
        let rows = plan[0]["Plan"]["Plan Rows"].as_f64().unwrap_or(0.0);
        assert!(
            rows >= 1.0,
            "{file} estimates no row for profile {}:\n{plan}",
            profile.name
        );
    }
}

/// The partitioned variant: every statement, plus the partition probe on a partition with rows.
async fn every_statement_is_index_backed_when_partitioned(by: PartitionBy) {
    let db = load_ddl(&partman::ddl(by, 9, 3), true).await;
    let rels = key_relations(&db).await;
    assert!(
        rels.names.len() == 15 && rels.with_pages.len() >= 8,
        "{:?}",
        rels.with_pages
    );
    let partition: String = db
        .client()
        .await
        .query_one(
            "SELECT tableoid::regclass::text FROM idempotency_keys WHERE expires_at < now() - interval '3 days' LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let partitioned_args: BTreeSet<&str> = PARTITIONED_ONLY.iter().map(|(f, _)| *f).collect();
    let statements = STATEMENTS
        .iter()
        .filter(|(f, _)| !partitioned_args.contains(f))
        .chain(NEEDS_STUCK_INDEX)
        .chain([&SKIP_SCAN])
        .chain(PARTITIONED_ONLY);
    for (file, args) in statements {
        let sql = sql_file(file).replace("{partition}", &format!("\"public\".\"{partition}\""));
        assert_index_backed_on(&db, &sql, file, args, &rels).await;
    }
    for (file, args) in &filtered(
        &Profile::storage(),
        STATEMENTS.iter().chain(NEEDS_STUCK_INDEX),
    ) {
        assert_index_backed_on(&db, &sql_file(file), file, args, &rels).await;
    }
    assert_planned(&db, &Profile::storage()).await;
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
    let with_filters = filtered(
        &Profile::storage(),
        STATEMENTS.iter().chain(NEEDS_STUCK_INDEX),
    );
    assert!(with_filters.len() >= 40, "{}", with_filters.len());
    for (file, args) in &with_filters {
        assert_index_backed(&db, file, args).await;
    }
    assert_planned(&db, &Profile::storage()).await;
}

/// The storage table with `timestamp without time zone` columns read in a declared zone: the clock
/// and every bound time are converted to the columns' type, never the column, so each statement
/// keeps its index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_a_timestamp_table_read_in_a_declared_zone() {
    let db = load_ddl(
        &Schema::Corrected
            .ddl()
            .replace("timestamptz", "timestamp(6)"),
        true,
    )
    .await;
    let rels = key_relations(&db).await;
    let mut profile = Profile::storage();
    profile.naive_times = true;
    profile.time_zone = Some("America/New_York".into());
    let with_filters = filtered(&profile, STATEMENTS.iter().chain(NEEDS_STUCK_INDEX));
    let plain = STATEMENTS
        .iter()
        .chain(NEEDS_STUCK_INDEX)
        .chain([&SKIP_SCAN])
        .map(|(f, a)| (*f, (*a).to_owned()));
    for (file, args) in plain.chain(with_filters) {
        let sql = sql_file(file);
        assert_index_backed_as(&db, &profile, &sql, file, &args, &rels).await;
    }
    assert_planned(&db, &profile).await;
}

/// evict's walk of a unique index on a table without an expiry index, and its dry run's read-only
/// pages (each page after a key and each first page, with and without --min-age), on every shape
/// the walk runs on: the storage table (a two-column primary key) of timestamptz columns and of
/// `timestamp without time zone` read in a declared zone, the explainer's (a text key, expiry by
/// TTL) and rocket-rides' (a bigserial key). Each page is an index range under a LIMIT, and the
/// run's deletes find their rows by address; no plan reads the table whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walk_without_an_expiry_index_is_index_backed() {
    let without_expiry_index = |ddl: &str| {
        ddl.replace(
            "CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);",
            "",
        )
    };
    let pair = |a: &str, b: &str| vec![(a.to_owned(), b.to_owned())];
    let mut storage_key = pair("api_key_id", "text");
    storage_key.extend(pair("key", "text"));
    let naive = {
        let mut p = Profile::storage();
        p.naive_times = true;
        p.time_zone = Some("America/New_York".into());
        p
    };
    for (ddl, profile) in [
        (
            without_expiry_index(Schema::Corrected.ddl()),
            Profile::storage(),
        ),
        (
            without_expiry_index(Schema::Corrected.ddl()).replace("timestamptz", "timestamp(6)"),
            naive,
        ),
    ] {
        assert!(!ddl.contains("idempotency_keys_expiry"));
        let db = load_ddl(&ddl, false).await;
        assert_pages_bounded(&db, &profile, &storage_key, "'tenant_0003', 'k'").await;
        assert_catalog_only(&db, &profile).await;
    }
    // Partitioned on expires_at (what evict --drop-partitions leaves to the walk): the primary
    // key includes the partition key, and each page merges the partitions' copies of it.
    let partitioned = without_expiry_index(&partman::ddl(PartitionBy::ExpiresAt, 9, 3));
    assert!(!partitioned.contains("idempotency_keys_expiry"));
    let db = load_ddl(&partitioned, true).await;
    let mut partitioned_key = storage_key.clone();
    partitioned_key.extend(pair("expires_at", "timestamptz"));
    assert_pages_bounded(
        &db,
        &Profile::storage(),
        &partitioned_key,
        "'tenant_0003', 'k', '2026-01-01 00:00:00+00'",
    )
    .await;
    let ttl = Some(std::time::Duration::from_secs(86_400));
    let db = TestDb::new().await;
    db.exec(profiles::EXPLAINER_DDL).await;
    db.exec(
        "INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at) \
         SELECT 'k-' || g, md5(g::text), 200, '{}', now() - g * interval '1 second' \
         FROM generate_series(1, 100000) g",
    )
    .await;
    db.exec("VACUUM ANALYZE idempotency_keys").await;
    let explainer = Profile::explainer().with_ttl(ttl);
    assert_pages_bounded(&db, &explainer, &pair("key", "text"), "'k-5'").await;
    assert_catalog_only(&db, &explainer).await;
    let db = TestDb::new().await;
    db.exec(profiles::ROCKET_RIDES_DDL).await;
    db.exec(
        "INSERT INTO idempotency_keys (created_at, idempotency_key, request_method, request_params, \
         request_path, recovery_point, user_id) \
         SELECT now() - g * interval '1 second', 'k-' || g, 'POST', '{}', '/rides', 'finished', 1 + g % 7 \
         FROM generate_series(1, 100000) g",
    )
    .await;
    db.exec("VACUUM ANALYZE idempotency_keys").await;
    let rocket_rides = Profile::rocket_rides().with_ttl(ttl);
    assert_pages_bounded(&db, &rocket_rides, &pair("id", "bigint"), "'5000'").await;
    assert_catalog_only(&db, &rocket_rides).await;
}

/// Each [`CATALOG_ONLY`] statement as idemctl renders it for `profile` (table oid, expiry column):
/// every role filled, no relation of the key table in any plan, and on the analyzed table an
/// answer (the lag estimate: the loaded tables hold keys past their expiry).
async fn assert_catalog_only(db: &TestDb, profile: &Profile) {
    let rels = key_relations(db).await;
    let client = db.client().await;
    let args = format!(
        "'public.idempotency_keys'::regclass::oid::bigint, '{}'",
        profile.expiry_column()
    );
    for file in CATALOG_ONLY {
        let sql = profile.render(&sql_file(file), "\"public\".\"idempotency_keys\"");
        assert!(
            !sql.contains("{cutoff}") && !sql.contains("{time_type}") && !sql.contains("{zone}"),
            "{file}: a role is left unfilled for profile {}:\n{sql}",
            profile.name
        );
        for mode in ["force_custom_plan", "force_generic_plan"] {
            let execute = format!("EXECUTE s({args})");
            let (text, found) = explain_scans(&client, file, mode, &sql, &execute).await;
            assert!(
                !found.iter().any(|(_, rel)| rels.names.contains(rel)),
                "{file} ({mode}) reads the key table:\n{text}"
            );
        }
        let script = format!("PREPARE s AS {sql}; EXECUTE s({args})");
        let messages = client.simple_query(&script).await.unwrap();
        client.batch_execute("DEALLOCATE s").await.unwrap();
        let lag = messages.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        });
        let lag: f64 = lag
            .unwrap_or_else(|| panic!("{file}: no estimate for profile {}", profile.name))
            .parse()
            .unwrap();
        assert!(lag > 0.0, "{file}: {lag} for profile {}", profile.name);
    }
}

/// The walk's page and the dry run's page, after a key (`key`, as text) and first, without and
/// with --min-age: index-backed, and bounded by a LIMIT.
async fn assert_pages_bounded(
    db: &TestDb,
    profile: &Profile,
    columns: &[(String, String)],
    key: &str,
) {
    let rels = key_relations(db).await;
    let walk = idemctl::Walk::of(profile, "\"public\".\"idempotency_keys\"", columns);
    for min_age in ["NULL", "3600"] {
        for (sql, file, args) in [
            (
                walk.sql(true),
                "evict_walk.sql",
                format!("2000, {min_age}, {key}"),
            ),
            (
                walk.sql(false),
                "evict_walk.sql",
                format!("2000, {min_age}"),
            ),
            (
                walk.preview_sql(true),
                "evict_walk_preview.sql",
                format!("2000, {min_age}, 10, {key}"),
            ),
            (
                walk.preview_sql(false),
                "evict_walk_preview.sql",
                format!("2000, {min_age}, 10"),
            ),
        ] {
            assert_index_backed_as(db, profile, sql, file, &args, &rels).await;
            let client = db.client().await;
            let rendered = profile.render(sql, "\"public\".\"idempotency_keys\"");
            for mode in ["force_custom_plan", "force_generic_plan"] {
                let execute = format!("EXECUTE s({args})");
                let (text, _) = explain_scans(&client, file, mode, &rendered, &execute).await;
                assert!(
                    text.contains("\"Node Type\": \"Limit\""),
                    "{file} ({mode}, args {args}) reads its page without a LIMIT:\n{text}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_the_reference_table() {
    let db = load(Schema::Reference, false).await;
    for (file, args) in STATEMENTS.iter().chain([&BY_KEY, &SKIP_SCAN]) {
        assert_index_backed(&db, file, args).await;
    }
    for (file, args) in &filtered(&Profile::storage(), STATEMENTS) {
        assert_index_backed(&db, file, args).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_a_table_partitioned_by_expires_at() {
    every_statement_is_index_backed_when_partitioned(PartitionBy::ExpiresAt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_a_table_partitioned_by_created_at() {
    every_statement_is_index_backed_when_partitioned(PartitionBy::CreatedAt).await;
}

#[test]
fn every_key_table_statement_in_sql_is_explained() {
    let dir = format!("{}/sql", env!("CARGO_MANIFEST_DIR"));
    let covered: BTreeSet<&str> = STATEMENTS
        .iter()
        .chain(NEEDS_STUCK_INDEX)
        .chain([&BY_KEY, &SKIP_SCAN])
        .chain(PARTITIONED_ONLY)
        .map(|(f, _)| *f)
        .chain(PLANNED_ONLY.iter().copied())
        .chain(
            crate::foreign_keys::EXPLAINED_WITH_FOREIGN_KEYS
                .iter()
                .copied(),
        )
        .chain(NOT_RUN_BY_IDEMCTL.iter().copied())
        .chain(EXPLAINED_APART.iter().copied())
        .chain(CATALOG_ONLY.iter().copied())
        .chain(DDL.iter().copied())
        .collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let text = sql_file(&name);
        if text.contains("{table}") || text.contains("{partition}") {
            assert!(
                covered.contains(name.as_str()),
                "sql/{name} is not covered by the EXPLAIN test"
            );
        }
    }
}

/// The explainer's and rocket-rides' tables, created as printed, with 200,000 rows each and the
/// indexes `check` recommends: every statement of the profile, rendered as idemctl renders it
/// (with a TTL), is index-backed. Tenant arguments become the profile's: none on the explainer's
/// table (its rows carry an empty tenant), a user id on rocket-rides'.
async fn every_statement_is_index_backed_for(
    profile: Profile,
    ddl: &str,
    rows: &str,
    indexes: &str,
    tenant: &dyn Fn(&str) -> String,
) {
    let db = TestDb::new().await;
    db.exec(ddl).await;
    db.exec(rows).await;
    db.exec(indexes).await;
    db.exec("VACUUM ANALYZE").await;
    let rels = key_relations(&db).await;
    let lookup = if profile.tenant.len() == 1 {
        SKIP_SCAN
    } else {
        BY_KEY
    };
    let with_filters = filtered(&profile, STATEMENTS.iter().chain(NEEDS_STUCK_INDEX));
    let in_part = (profile.tenant.len() > 1).then_some(&BY_KEY_IN_PART);
    let plain = STATEMENTS
        .iter()
        .chain(NEEDS_STUCK_INDEX)
        .chain([&lookup])
        .chain(in_part)
        .map(|(f, a)| (*f, (*a).to_owned()));
    for (file, args) in plain.chain(with_filters) {
        if file == "inspect_by_tenant.sql" && !profile.has_scope() {
            continue;
        }
        // Release clears the lock time: a mapping without one cannot allow it (the config file
        // is refused), so its statements never run there.
        if file.contains("release") && profile.locked_at.is_none() {
            continue;
        }
        // Fail stores a status: a mapping without a status column cannot allow it either.
        if file.contains("fail") && profile.response_status.is_none() {
            continue;
        }
        let args = tenant(&args);
        assert_index_backed_as(&db, &profile, &sql_file(file), file, &args, &rels).await;
    }
    assert_planned(&db, &profile).await;
}

/// Statement arguments for a table without a tenant: every tenant argument becomes empty.
fn without_tenant(args: &str) -> String {
    let mut out = args.to_owned();
    for n in 1..=9 {
        out = out.replace(&format!("'tenant_000{n}'"), "''");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_the_explainer_table() {
    let mut profile = Profile::explainer().with_ttl(Some(std::time::Duration::from_secs(86_400)));
    profile.tenant_types = Vec::new();
    every_statement_is_index_backed_for(
        profile,
        profiles::EXPLAINER_DDL,
        &profiles::explainer_rows(40_000),
        profiles::EXPLAINER_INDEXES,
        &without_tenant,
    )
    .await;
}

/// The explainer's table with a `json` response body: the placeholder is compared as jsonb.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_the_explainer_table_with_a_json_body() {
    let mut profile = Profile::explainer().with_ttl(Some(std::time::Duration::from_secs(86_400)));
    profile.fit_body_type("json");
    every_statement_is_index_backed_for(
        profile,
        &profiles::explainer_json_ddl(),
        &profiles::explainer_rows(40_000),
        profiles::EXPLAINER_JSON_INDEXES,
        &without_tenant,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_the_rocket_rides_table() {
    let mut profile =
        Profile::rocket_rides().with_ttl(Some(std::time::Duration::from_secs(72 * 3600)));
    profile.tenant_types = vec!["bigint".into()];
    every_statement_is_index_backed_for(
        profile,
        profiles::ROCKET_RIDES_DDL,
        &profiles::rocket_rides_rows(50_000),
        profiles::ROCKET_RIDES_INDEXES,
        &|args| args.replace("'tenant_000", "'"),
    )
    .await;
}

/// A table mapped in a config file (tests/fixtures/generic_schema.sql, renamed to the name this
/// test explains on), with 200,000 rows and the indexes `check` recommends for the mapping: every
/// statement, rendered from the mapping as idemctl renders it, is index-backed. Its tenant is a
/// bigint account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_a_table_mapped_in_a_config_file() {
    let renamed = |s: &str| s.replace("request_log", "idempotency_keys");
    let config = idemctl::config::parse("idemctl.toml", &config_file::generic_config()).unwrap();
    let mut profile = config.mappings[0].clone();
    assert_eq!(profile.name, "ledger");
    profile.tenant_types = vec!["bigint".into()];
    every_statement_is_index_backed_for(
        profile,
        &renamed(config_file::GENERIC_DDL),
        &renamed(&config_file::generic_rows(40_000)),
        &renamed(config_file::GENERIC_INDEXES),
        &|args| args.replace("'tenant_000", "'"),
    )
    .await;
}

/// The second mapped shape (a uuid key, no tenant, a state column, no lock time, expiry by TTL),
/// with 200,000 rows, its expiry index on `born` and the in-flight index: every statement is
/// index-backed. Key arguments become uuids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_a_state_column_mapping_without_tenant() {
    let renamed = |s: &str| s.replace("jobs_keys", "idempotency_keys");
    let config = idemctl::config::parse("c.toml", config_file::JOBS_CONFIG).unwrap();
    let mut profile = config.mappings[0].clone().with_ttl(config.ttl);
    profile.key_type = "uuid".into();
    let rows = "INSERT INTO jobs_keys SELECT gen_random_uuid(), now() - g * interval '3 seconds', \
                CASE WHEN g % 50 = 0 THEN 'running' ELSE 'ok' END, 200, '{}' \
                FROM generate_series(1, 200000) g;";
    let indexes = "CREATE INDEX jobs_keys_born ON jobs_keys (born); \
                   CREATE INDEX jobs_keys_running ON jobs_keys (born) WHERE phase = 'running';";
    every_statement_is_index_backed_for(
        profile,
        &renamed(config_file::JOBS_DDL),
        &renamed(rows),
        &renamed(indexes),
        &|args| {
            without_tenant(args)
                .replace("'no-such-key'", "'00000000-0000-0000-0000-000000000000'")
                .replace("'k1'", "'00000000-0000-0000-0000-000000000001'")
                .replace("'k2'", "'00000000-0000-0000-0000-000000000002'")
        },
    )
    .await;
}

/// A mapping whose every column name needs quoting (camelCase, upper case), with 200,000 rows and
/// the indexes `check` recommends: every statement quotes the names and is index-backed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_on_a_mapping_of_quoted_column_names() {
    let renamed = |s: &str| s.replace("\"IdempotencyKey\"", "idempotency_keys");
    let config = idemctl::config::parse("p.toml", config_file::QUOTED_CONFIG).unwrap();
    let profile = config.mappings[0].clone();
    let indexes = "CREATE INDEX ON idempotency_keys ((coalesce(\"lockedAt\", \"createdAt\"))) \
                   WHERE \"Status\" = 'IN_PROGRESS';";
    every_statement_is_index_backed_for(
        profile,
        &renamed(config_file::QUOTED_DDL),
        &renamed(&config_file::quoted_rows(98_000, 4_000)),
        indexes,
        &|args| args.to_owned(),
    )
    .await;
}

/// The JDBC table of docs/profiles.md (`timestamp without time zone` written in UTC, a bytea result,
/// no lock time) with its scope of two columns mapped as printed (`tenant = ["request_type",
/// "client_id"]`), its three-column primary key, 200,000 rows and the indexes `check` recommends:
/// every statement compares the scope column by column and is index-backed, the lookup by part of
/// the scope and the forms that find locked rows again by the primary key's columns included.
/// Scope arguments become text arrays of the two values, as idemctl binds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_is_index_backed_with_a_scope_of_several_columns() {
    let renamed = |s: &str| s.replace("idempotency_record", "idempotency_keys");
    let doc = |lang| crate::frameworks::doc_block("JDBC (Flyway)", lang);
    let config = idemctl::config::parse("c.toml", &doc("toml")).unwrap();
    let mut profile = config.mappings[0].clone();
    assert_eq!(profile.tenant, ["request_type", "client_id"]);
    profile.naive_times = true;
    profile.tenant_types = vec!["character varying".into(), "character varying".into()];
    profile.key_type = "character varying".into();
    profile.body_type = "bytea".into();
    profile.row_identity = vec![
        "idempotency_key".into(),
        "request_type".into(),
        "client_id".into(),
    ];
    let rows = "INSERT INTO idempotency_keys SELECT 'key-' || g, \
                (ARRAY['payment', 'refund', 'void'])[1 + g % 3], 'client-' || g % 500, \
                CASE WHEN g % 50 = 0 THEN 'IN_PROGRESS' ELSE 'COMPLETED' END, \
                convert_to('{\"ok\": true}', 'UTF8'), \
                (now() AT TIME ZONE 'UTC') - g * interval '3 seconds', \
                (now() AT TIME ZONE 'UTC') - g * interval '3 seconds' + interval '1 day' \
                FROM generate_series(1, 200000) g;";
    let indexes = "CREATE INDEX ON idempotency_keys (expires_at); \
                   CREATE INDEX ON idempotency_keys (created_at) WHERE status = 'IN_PROGRESS';";
    every_statement_is_index_backed_for(profile, &renamed(&doc("sql")), rows, indexes, &|args| {
        let mut out = args.to_owned();
        for n in 1..=9 {
            out = out
                .replace(
                    &format!("[NULL, 'tenant_000{n}']"),
                    &format!("[NULL, 'client-{n}']"),
                )
                .replace(
                    &format!("'tenant_000{n}'"),
                    &format!("'{{payment,client-{n}}}'"),
                );
        }
        out
    })
    .await;
}

/// inspect without the whole scope on the JDBC table whose primary key lists the scope before the
/// key (request_type, client_id, idempotency_key), with no index led by the key: the distinct
/// scopes are walked through the primary key (compared as a row) and the key probed under each,
/// with no scope given, part of it, or all of it; and through a unique index that lists only
/// client_id before the key, walking client_id alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skip_scan_over_a_scope_of_several_columns_is_index_backed() {
    let doc = |lang| crate::frameworks::doc_block("JDBC (Flyway)", lang);
    let ddl = doc("sql")
        .replace("idempotency_record", "idempotency_keys")
        .replace(
            "PRIMARY KEY (idempotency_key, request_type, client_id)",
            "PRIMARY KEY (request_type, client_id, idempotency_key)",
        );
    let config = idemctl::config::parse("c.toml", &doc("toml")).unwrap();
    let mut profile = config.mappings[0].clone();
    profile.naive_times = true;
    profile.tenant_types = vec!["character varying".into(), "character varying".into()];
    profile.key_type = "character varying".into();
    profile.body_type = "bytea".into();
    profile.scope_walk = vec!["request_type".into(), "client_id".into()];
    let db = TestDb::new().await;
    db.exec(&ddl).await;
    db.exec(
        "INSERT INTO idempotency_keys SELECT 'key-' || g, \
         (ARRAY['payment', 'refund', 'void'])[1 + g % 3], 'client-' || g % 500, 'COMPLETED', NULL, \
         (now() AT TIME ZONE 'UTC') - g * interval '3 seconds', \
         (now() AT TIME ZONE 'UTC') + interval '1 day' FROM generate_series(1, 200000) g;",
    )
    .await;
    db.exec("VACUUM ANALYZE idempotency_keys").await;
    let rels = key_relations(&db).await;
    let sql = sql_file(SKIP_SCAN.0);
    for within in [
        "NULL",
        "ARRAY[NULL, 'client-7']",
        "ARRAY['refund', NULL]",
        "ARRAY['refund', 'client-7']",
    ] {
        let args = format!("'key-7', 300, 10000, {within}, 50");
        assert_index_backed_as(&db, &profile, &sql, SKIP_SCAN.0, &args, &rels).await;
    }
    db.exec(
        "ALTER TABLE idempotency_keys DROP CONSTRAINT pk_idempotency_keys; \
         CREATE UNIQUE INDEX ON idempotency_keys (client_id, idempotency_key, request_type); \
         ANALYZE idempotency_keys;",
    )
    .await;
    profile.scope_walk = vec!["client_id".into()];
    for within in ["NULL", "ARRAY['refund', NULL]"] {
        let args = format!("'key-7', 300, 10000, {within}, 50");
        assert_index_backed_as(&db, &profile, &sql, SKIP_SCAN.0, &args, &rels).await;
    }
}

/// A mapping's scope (as the config file writes it), the scope columns bound as NULL, and the
/// statements (file, EXECUTE arguments) explained so.
type NullForms<'a> = (&'a str, Vec<bool>, Vec<(&'a str, String)>);

/// A TypeORM-shaped table whose scope (endpoint, scope) allows NULL in `scope`, made unique by a
/// NULLS NOT DISTINCT index (and, for a one-column scope, by that index's NULLs-distinct twin),
/// with 200,000 rows a third of which have a NULL scope: the statement forms that select a NULL
/// scope value with IS NULL (inspect by the whole scope and by part of it, reclaim --apply's batch
/// and its archived lock) are index-backed, with the scope given as NULL and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forms_that_select_a_null_scope_are_index_backed() {
    let db = TestDb::new().await;
    db.exec(
        "CREATE TABLE idempotency_keys (id serial PRIMARY KEY, idempotency_key text NOT NULL, \
         endpoint text NOT NULL, scope text, status varchar(20) NOT NULL DEFAULT 'PROCESSING', \
         created_at timestamptz NOT NULL DEFAULT now()); \
         CREATE UNIQUE INDEX ON idempotency_keys (idempotency_key, endpoint, scope) NULLS NOT DISTINCT; \
         CREATE INDEX ON idempotency_keys (created_at) WHERE status = 'PROCESSING'; \
         INSERT INTO idempotency_keys (idempotency_key, endpoint, scope, status, created_at) \
         SELECT 'key-' || g, (ARRAY['/orders', '/refunds'])[1 + g % 2], \
                CASE WHEN g % 3 = 0 THEN NULL WHEN g % 3 = 1 THEN 'NULL' ELSE 'user-' || g % 700 END, \
                CASE WHEN g % 50 = 0 THEN 'PROCESSING' ELSE 'COMPLETED' END, \
                now() - g * interval '3 seconds' FROM generate_series(1, 200000) g;",
    )
    .await;
    db.exec("VACUUM ANALYZE idempotency_keys").await;
    let rels = key_relations(&db).await;
    let mapping = |tenant: &str| {
        format!(
            "ttl = \"24h\"\n[profiles.nullscope]\nkey = \"idempotency_key\"\ntenant = {tenant}\n\
             actions = [\"delete\"]\n\
             in_flight = {{ column = \"status\", values = [\"PROCESSING\"], done = [\"COMPLETED\"] }}\n"
        )
    };
    let arrays = |tenants: &str| {
        format!(
            "{tenants}, ARRAY['key-3', 'key-6'], ARRAY[NULL, NULL]::timestamptz[], \
             ARRAY[now() - interval '2 hours', now() - interval '1 hour']::timestamptz[], 300, NULL, NULL, NULL"
        )
    };
    let scopes: [NullForms; 4] = [
        // Both columns, the second NULL; and the same with no NULL (the text 'NULL').
        (
            "[\"endpoint\", \"scope\"]",
            vec![false, true],
            vec![
                (
                    "inspect_by_tenant.sql",
                    "'{/orders,NULL}', 'key-3', 300".to_owned(),
                ),
                (
                    "inspect_by_key.sql",
                    "'key-3', 300, 50, ARRAY[NULL, NULL]::text[]".to_owned(),
                ),
                (
                    "reclaim_apply_delete.sql",
                    arrays("ARRAY['{/orders,NULL}', '{/refunds,NULL}']"),
                ),
                (
                    "reclaim_apply_archive_lock.sql",
                    arrays("ARRAY['{/orders,NULL}', '{/refunds,NULL}']"),
                ),
            ],
        ),
        (
            "[\"endpoint\", \"scope\"]",
            vec![false, false],
            vec![
                (
                    "inspect_by_tenant.sql",
                    "'{/orders,\"NULL\"}', 'key-1', 300".to_owned(),
                ),
                (
                    "reclaim_apply_delete.sql",
                    arrays("ARRAY['{/orders,\"NULL\"}', '{/refunds,\"NULL\"}']"),
                ),
            ],
        ),
        // One column, NULL: bound as NULL.
        (
            "\"scope\"",
            vec![true],
            vec![
                ("inspect_by_tenant.sql", "NULL, 'key-3', 300".to_owned()),
                (
                    "inspect_by_key.sql",
                    "'key-3', 300, 50, ARRAY[NULL]::text[]".to_owned(),
                ),
                (
                    "reclaim_apply_delete.sql",
                    arrays("ARRAY[NULL, NULL]::text[]"),
                ),
                (
                    "reclaim_apply_archive_lock.sql",
                    arrays("ARRAY[NULL, NULL]::text[]"),
                ),
            ],
        ),
        (
            "\"scope\"",
            vec![false],
            vec![("reclaim_apply_delete.sql", arrays("ARRAY['NULL', 'NULL']"))],
        ),
    ];
    for (tenant, nulls, statements) in scopes {
        let config = idemctl::config::parse("c.toml", &mapping(tenant)).unwrap();
        let mut profile = config.mappings[0].clone();
        profile.tenant_types = vec!["text".into(); profile.tenant.len()];
        profile.key_type = "text".into();
        profile.row_identity = vec!["id".into()];
        profile.scope_nulls = nulls.clone();
        for (file, args) in statements {
            let sql = sql_file(file);
            let rendered = profile.render(&sql, "\"public\".\"idempotency_keys\"");
            if nulls.contains(&true) {
                assert!(
                    rendered.contains("\"scope\" IS NULL") && !rendered.contains("\"scope\" = "),
                    "{file} does not select the NULL scope with IS NULL:\n{rendered}"
                );
            }
            let name = format!("{file} (scope {tenant}, NULLs {nulls:?})");
            assert_index_backed_as(&db, &profile, &sql, &name, &args, &rels).await;
        }
    }
}

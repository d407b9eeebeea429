//! Tables that reference the key table. A key that an ON DELETE NO ACTION / RESTRICT row still
//! references is left behind and counted (never a failed run), and a reference that appears while
//! a batch runs only makes the batch run again; a key whose referencing row (ON DELETE SET NULL) a
//! live transaction holds is left to the next run; check accepts a partial index on the
//! referencing column that the ON DELETE action can use, warns about what evict leaves behind, and
//! still checks the thresholds when only a referencing table fails; the batch time includes the
//! ON DELETE work; a count of the keys a batch left that fails ends the run naming that step; and
//! every statement generated for the foreign keys is index-backed.

use std::collections::BTreeSet;
use std::time::Duration;

use idemctl::Profile;

use crate::fixtures::{finding, loaded, scalar_i64};
use crate::profiles::{
    EXPLAINER_DDL, EXPLAINER_INDEXES, ROCKET_RIDES_DDL, ROCKET_RIDES_INDEXES, explainer_rows,
    rocket_rides_rows,
};
use crate::support::TestDb;

/// sql/ files whose markers are filled in for foreign keys: the EXPLAIN test below plans them
/// as idemctl fills them in.
pub(crate) const EXPLAINED_WITH_FOREIGN_KEYS: &[&str] = &[
    "evict_batch_referenced.sql",
    "referenced_expired.sql",
    "evict_preview.sql",
    "evict_preview_sample.sql",
    "oldest_expired_referenced.sql",
];

/// The explainer's table with `n` keys of each kind, and `charges` referencing it ON DELETE
/// `action` (indexed), one charge on the oldest expired completed key.
async fn explainer_with_charges(n: i64, action: &str) -> TestDb {
    let db = loaded(EXPLAINER_DDL, &explainer_rows(n), Some(EXPLAINER_INDEXES)).await;
    db.exec(&format!(
        "CREATE TABLE charges (id serial PRIMARY KEY, \
                               idem_key text REFERENCES idempotency_keys (key) ON DELETE {action}); \
         CREATE INDEX ON charges (idem_key); \
         INSERT INTO charges (idem_key) SELECT key FROM idempotency_keys \
          WHERE response_status = 201 ORDER BY created_at LIMIT 1;"
    ))
    .await;
    db
}

/// Expired (1 h TTL) completed keys of the explainer's table.
async fn expired_completed(db: &TestDb) -> i64 {
    scalar_i64(
        db,
        "SELECT count(*) FROM idempotency_keys \
          WHERE created_at < now() - interval '1 hour' AND response_status <> 202",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_leaves_keys_a_no_action_or_restrict_row_references_and_counts_them() {
    for action in ["NO ACTION", "RESTRICT"] {
        let db = explainer_with_charges(40, action).await;
        let check = db
            .idemctl()
            .args(["-o", "json", "--ttl", "1h", "check"])
            .run();
        let json = check.json();
        let fk = finding(&json, "referencing key");
        assert_eq!(fk["status"], "warn", "{check}");
        let detail = fk["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("ON DELETE {action}"))
                && detail.contains("evict leaves the expired keys it still references behind")
                && detail.contains("1 of the oldest"),
            "{check}"
        );
        let expired = expired_completed(&db).await;
        assert!(expired > 40, "{expired}");
        let dir = tempfile::tempdir().unwrap();
        let textfile = dir.path().join("evict.prom");
        let run = db
            .idemctl()
            .args(["-o", "json", "--ttl", "1h", "evict", "--batch-size", "7"])
            .arg("--textfile")
            .arg(&textfile)
            .run();
        run.assert_code(0);
        let j = run.json();
        assert_eq!(j["skipped_referenced"], 1, "{action}: {j}");
        assert_eq!(j["rows_evicted"], expired - 1, "{action}: {j}");
        assert_eq!(j["backlog_left"]["count"], 1, "{action}: {j}");
        assert_eq!(expired_completed(&db).await, 1, "{action}");
        let metrics = std::fs::read_to_string(&textfile).unwrap();
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("idemctl_evict_rows_skipped_referenced{")
                    && l.ends_with(" 1")),
            "{metrics}"
        );
        // The next run does the same: nothing to do but the referenced key, which it leaves.
        let again = db
            .idemctl()
            .args(["-o", "plain", "--ttl", "1h", "evict"])
            .run();
        again.assert_code(0);
        assert!(
            again.stdout.contains("skipped (still referenced)"),
            "{again}"
        );
        // Once nothing references it, it goes.
        db.exec("DELETE FROM charges").await;
        let run = db
            .idemctl()
            .args(["-o", "json", "--ttl", "1h", "evict"])
            .run();
        run.assert_code(0);
        assert_eq!(run.json()["rows_evicted"], 1, "{run}");
        assert_eq!(run.json()["skipped_referenced"], 0, "{run}");
    }
}

/// How long (seconds) the explainer's key `key` has waited for eviction with a 1 h TTL.
async fn waited(db: &TestDb, key: &str) -> f64 {
    db.client()
        .await
        .query_one(
            "SELECT extract(epoch FROM now() - interval '1 hour' - created_at)::float8 \
               FROM idempotency_keys WHERE key = $1",
            &[&key],
        )
        .await
        .unwrap()
        .get(0)
}

/// The value of the textfile's series `name` (one sample).
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

/// A NO ACTION row references three of the oldest expired keys (the 1st, 2nd and 4th oldest):
/// the dry run's would_evict is what the run then deletes and would_skip_referenced what it
/// skips, and its sample holds none of them; stats' eviction lag is the wait of the oldest key
/// evict can delete (the 3rd oldest), and the referenced keys are reported apart in JSON, text and
/// metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_and_stats_tell_apart_the_keys_a_no_action_row_references() {
    let db = explainer_with_charges(40, "NO ACTION").await;
    // The fixture references done-old-40, the oldest; and two more.
    db.exec(
        "INSERT INTO charges (idem_key) VALUES ('done-old-39'), ('done-old-37'), ('done-old-37')",
    )
    .await;
    let expired = expired_completed(&db).await;
    assert_eq!(expired, 80);

    let dry = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "evict", "--dry-run"])
        .run();
    dry.assert_code(0);
    let d = dry.json();
    assert_eq!(d["would_evict"]["count"], expired - 3, "{d}");
    assert_eq!(d["would_evict"]["at_least"], false, "{d}");
    assert_eq!(d["would_skip_referenced"]["count"], 3, "{d}");
    assert_eq!(d["would_skip_referenced"]["at_least"], false, "{d}");
    let sampled: Vec<&str> = d["sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect();
    assert_eq!(sampled.first(), Some(&"done-old-38"), "{d}");
    for referenced in ["done-old-40", "done-old-39", "done-old-37"] {
        assert!(!sampled.contains(&referenced), "{referenced}: {d}");
    }
    let plain = db
        .idemctl()
        .args(["-o", "plain", "--ttl", "1h", "evict", "--dry-run"])
        .run();
    plain.assert_code(0);
    assert!(
        plain
            .stdout
            .lines()
            .any(|l| l.contains("would skip (still referenced)") && l.contains(" 3 (")),
        "{plain}"
    );

    let stats = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "stats"])
        .run();
    stats.assert_code(0);
    let s = stats.json();
    let lag = s["eviction_lag_seconds"].as_f64().unwrap();
    let deletable = waited(&db, "done-old-38").await;
    assert!((lag - deletable).abs() < 30.0, "{lag} vs {deletable}: {s}");
    assert!(waited(&db, "done-old-40").await - lag > 90.0, "{s}");
    assert_eq!(s["oldest_expired"]["key"], "done-old-38", "{s}");
    let r = &s["referenced_expired"];
    assert_eq!(r["count"]["count"], 3, "{s}");
    assert_eq!(r["count"]["at_least"], false, "{s}");
    assert_eq!(r["examined"], expired, "{s}");
    assert_eq!(r["oldest"]["key"], "done-old-40", "{s}");
    assert_eq!(r["lag_at_most"], false, "{s}");
    let text = db
        .idemctl()
        .args(["-o", "plain", "--ttl", "1h", "stats"])
        .run();
    text.assert_code(0);
    assert!(
        text.stdout
            .lines()
            .any(|l| l.contains("expired, still referenced")
                && l.contains("3 among the oldest 80 expired keys")
                && l.contains("done-old-40")),
        "{text}"
    );
    assert!(
        text.stdout
            .lines()
            .any(|l| l.contains("eviction lag") && l.contains("done-old-38")),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let textfile = dir.path().join("stats.prom");
    db.idemctl()
        .args(["--ttl", "1h", "stats", "-q", "--textfile"])
        .arg(&textfile)
        .run()
        .assert_code(0);
    let metrics = std::fs::read_to_string(&textfile).unwrap();
    crate::metrics::promtool_check_metrics(&metrics);
    assert_eq!(
        sample(&metrics, "idemctl_expired_referenced_keys"),
        Some(3.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "idemctl_expired_referenced_capped"),
        Some(0.0),
        "{metrics}"
    );
    let oldest = sample(&metrics, "idemctl_expired_referenced_oldest_seconds").unwrap();
    assert!(
        (oldest - waited(&db, "done-old-40").await).abs() < 30.0,
        "{metrics}"
    );
    let lag = sample(&metrics, "idemctl_eviction_lag_seconds").unwrap();
    assert!((lag - deletable).abs() < 30.0, "{metrics}");

    // The run does what the dry run said.
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "evict", "--batch-size", "7"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], d["would_evict"]["count"], "{j}");
    assert_eq!(
        j["skipped_referenced"], d["would_skip_referenced"]["count"],
        "{j}"
    );
    // Only referenced keys are left: nothing evict can delete waits.
    let after = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "stats"])
        .run()
        .json();
    assert_eq!(after["eviction_lag_seconds"], 0.0, "{after}");
    assert_eq!(after["oldest_expired"], serde_json::Value::Null, "{after}");
    assert_eq!(after["referenced_expired"]["count"]["count"], 3, "{after}");

    // Without an index on the referencing column, stats does not probe: the lag is the oldest
    // expired key's, and a note says why (check explains the index).
    db.exec("DROP INDEX charges_idem_key_idx").await;
    let unindexed = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "stats"])
        .run()
        .json();
    assert!(unindexed.get("referenced_expired").is_none(), "{unindexed}");
    assert_eq!(
        unindexed["oldest_expired"]["key"], "done-old-40",
        "{unindexed}"
    );
    assert!(
        unindexed["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("no index leads with")),
        "{unindexed}"
    );
    // The dry run counts the referenced keys as would-evict then, and says so as stats does.
    let dry = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "evict", "--dry-run"])
        .run()
        .json();
    assert!(dry.get("would_skip_referenced").is_none(), "{dry}");
    assert_eq!(dry["would_evict"]["count"], 3, "{dry}");
    let note = |n: &serde_json::Value| {
        let n = n.as_str().unwrap();
        n.starts_with("would evict includes the expired keys charges (idem_key)")
            && n.contains("ON DELETE NO ACTION")
            && n.contains("no index leads with its referencing columns")
    };
    assert!(dry["notes"].as_array().unwrap().iter().any(note), "{dry}");
    let text = db
        .idemctl()
        .args(["-o", "plain", "--ttl", "1h", "evict", "--dry-run"])
        .run();
    text.assert_code(0);
    assert!(
        text.stdout
            .lines()
            .any(|l| l.starts_with("note: would evict includes the expired keys charges")),
        "{text}"
    );
    // With the index, no note.
    db.exec("CREATE INDEX ON charges (idem_key)").await;
    let dry = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "evict", "--dry-run"])
        .run()
        .json();
    assert!(dry.get("notes").is_none(), "{dry}");
}

/// More of the oldest expired keys are referenced than stats examines (10,000): the count says
/// "at least", and the lag is the wait of the newest key examined, an upper bound of the wait of
/// the oldest key evict can delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_says_at_least_when_the_referenced_keys_fill_its_walk() {
    let db = explainer_with_charges(3, "NO ACTION").await;
    db.exec(
        "INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at) \
         SELECT 'ref-' || g, 'h', 201, '{}'::jsonb, now() - interval '3 days' - g * interval '1 second' \
           FROM generate_series(1, 10100) AS g; \
         INSERT INTO charges (idem_key) SELECT 'ref-' || g FROM generate_series(1, 10100) AS g; \
         ANALYZE idempotency_keys; ANALYZE charges",
    )
    .await;
    let s = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "stats"])
        .run()
        .json();
    let r = &s["referenced_expired"];
    assert_eq!(r["count"]["count"], 10_000, "{s}");
    assert_eq!(r["count"]["at_least"], true, "{s}");
    assert_eq!(r["examined"], 10_000, "{s}");
    assert_eq!(r["oldest"]["key"], "ref-10100", "{s}");
    assert_eq!(r["lag_at_most"], true, "{s}");
    assert_eq!(s["oldest_expired"], serde_json::Value::Null, "{s}");
    // The 10,000th oldest key is ref-101.
    let lag = s["eviction_lag_seconds"].as_f64().unwrap();
    assert!((lag - waited(&db, "ref-101").await).abs() < 30.0, "{s}");
    let text = db
        .idemctl()
        .args(["-o", "plain", "--ttl", "1h", "stats"])
        .run();
    assert!(
        text.stdout.lines().any(|l| l.contains("eviction lag")
            && l.contains("at most")
            && l.contains("each of the oldest 10000 expired keys is still referenced")),
        "{text}"
    );
    assert!(
        text.stdout
            .lines()
            .any(|l| l.contains("expired, still referenced")
                && l.contains("at least 10000 among the oldest 10000")),
        "{text}"
    );
    let metrics = db
        .idemctl()
        .args(["-o", "prometheus", "--ttl", "1h", "stats"])
        .run();
    assert_eq!(
        sample(&metrics.stdout, "idemctl_expired_referenced_capped"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics.stdout, "idemctl_eviction_lag_upper_bound"),
        Some(1.0),
        "{metrics}"
    );
    // The lag is unknown, its bound past the threshold: check warns about the referenced keys
    // instead of calling it a breach of a stopped evict job.
    let check = db
        .idemctl()
        .args([
            "-o",
            "json",
            "--ttl",
            "1h",
            "check",
            "--max-eviction-lag",
            "1h",
        ])
        .run();
    check.assert_code(0);
    let json = check.json();
    let lag = finding(&json, "eviction lag");
    assert_eq!(lag["status"], "warn", "{check}");
    let detail = lag["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(
            "eviction lag unknown: each of the oldest 10000 expired keys is still referenced"
        ) && detail.contains("ref-10100")
            && detail.contains("at most")
            && !detail.contains("is the evict job running"),
        "{check}"
    );
    // Within the threshold, its upper bound is: the lag is too.
    let check = db
        .idemctl()
        .args([
            "-o",
            "json",
            "--ttl",
            "1h",
            "check",
            "--max-eviction-lag",
            "30d",
        ])
        .run();
    check.assert_code(0);
    let lag = finding(&check.json(), "eviction lag").clone();
    assert_eq!(lag["status"], "ok", "{check}");
    assert!(
        lag["detail"]
            .as_str()
            .unwrap()
            .starts_with("eviction lag at most "),
        "{check}"
    );
}

/// Exactly as many expired keys as stats examines (10,000), each still referenced, and live keys:
/// the walk saw every expired key (it is not capped), so nothing evict can delete waits: the lag
/// is 0, the referenced count exact, check passes its threshold and the dry run agrees. The same
/// once evict has removed every key it could.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_lag_is_zero_when_every_expired_key_is_referenced_within_its_walk() {
    let db = explainer_with_charges(3, "NO ACTION").await;
    db.exec(
        "DELETE FROM charges; DELETE FROM idempotency_keys; \
         INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at) \
         SELECT 'ref-' || g, 'h', 201, '{}'::jsonb, now() - interval '3 days' - g * interval '1 second' \
           FROM generate_series(1, 10000) AS g; \
         INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at) \
         SELECT 'live-' || g, 'h', 201, '{}'::jsonb, now() - g * interval '1 second' \
           FROM generate_series(1, 10) AS g; \
         INSERT INTO charges (idem_key) SELECT 'ref-' || g FROM generate_series(1, 10000) AS g; \
         ANALYZE idempotency_keys; ANALYZE charges",
    )
    .await;
    for round in ["all referenced", "after evict"] {
        if round == "after evict" {
            // Keys evict can delete, older and younger than the referenced ones: it removes them.
            db.exec(
                "INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at) \
                 SELECT 'gone-' || g, 'h', 201, '{}'::jsonb, now() - interval '2 days' * g \
                   FROM generate_series(1, 3) AS g",
            )
            .await;
            let run = db
                .idemctl()
                .args(["-o", "json", "--ttl", "1h", "evict"])
                .run();
            run.assert_code(0);
            assert_eq!(run.json()["rows_evicted"], 3, "{run}");
        }
        let s = db
            .idemctl()
            .args(["-o", "json", "--ttl", "1h", "stats"])
            .run()
            .json();
        assert_eq!(s["eviction_lag_seconds"], 0.0, "{round}: {s}");
        assert_eq!(s["oldest_expired"], serde_json::Value::Null, "{round}: {s}");
        let r = &s["referenced_expired"];
        assert_eq!(r["count"]["count"], 10_000, "{round}: {s}");
        assert_eq!(r["count"]["at_least"], false, "{round}: {s}");
        assert_eq!(r["examined"], 10_000, "{round}: {s}");
        assert_eq!(r["lag_at_most"], false, "{round}: {s}");
        assert_eq!(r["oldest"]["key"], "ref-10000", "{round}: {s}");
        let text = db
            .idemctl()
            .args(["-o", "plain", "--ttl", "1h", "stats"])
            .run();
        assert!(
            text.stdout
                .lines()
                .any(|l| l.contains("eviction lag") && l.contains("0s") && !l.contains("at most")),
            "{round}: {text}"
        );
        assert!(
            text.stdout
                .lines()
                .any(|l| l.contains("expired, still referenced")
                    && l.contains("10000 among the oldest 10000")
                    && !l.contains("at least")),
            "{round}: {text}"
        );
        let metrics = db
            .idemctl()
            .args(["-o", "prometheus", "--ttl", "1h", "stats"])
            .run();
        assert_eq!(
            sample(&metrics.stdout, "idemctl_eviction_lag_seconds"),
            Some(0.0),
            "{round}: {metrics}"
        );
        assert_eq!(
            sample(&metrics.stdout, "idemctl_eviction_lag_upper_bound"),
            Some(0.0),
            "{round}: {metrics}"
        );
        assert_eq!(
            sample(&metrics.stdout, "idemctl_expired_referenced_capped"),
            Some(0.0),
            "{round}: {metrics}"
        );
        let check = db
            .idemctl()
            .args([
                "-o",
                "json",
                "--ttl",
                "1h",
                "check",
                "--max-eviction-lag",
                "1h",
            ])
            .run();
        check.assert_code(0);
        assert_eq!(
            finding(&check.json(), "eviction lag")["status"],
            "ok",
            "{round}: {check}"
        );
        let d = db
            .idemctl()
            .args(["-o", "json", "--ttl", "1h", "evict", "--dry-run"])
            .run()
            .json();
        assert_eq!(d["would_evict"]["count"], 0, "{round}: {d}");
        assert_eq!(d["would_skip_referenced"]["count"], 10_000, "{round}: {d}");
        assert_eq!(
            d["would_skip_referenced"]["at_least"], false,
            "{round}: {d}"
        );
        assert_eq!(
            d["oldest_candidate"],
            serde_json::Value::Null,
            "{round}: {d}"
        );
        assert_eq!(
            d["newest_candidate"],
            serde_json::Value::Null,
            "{round}: {d}"
        );
    }
}

/// The index probes of a plan run with EXPLAIN ANALYZE: the loops of every node that reads
/// `relation`.
fn loops_on(plan: &serde_json::Value, relation: &str) -> u64 {
    match plan {
        serde_json::Value::Object(map) => {
            let own = if map.get("Relation Name").and_then(|v| v.as_str()) == Some(relation) {
                map.get("Actual Loops")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0)
            } else {
                0
            };
            own + map.values().map(|v| loops_on(v, relation)).sum::<u64>()
        }
        serde_json::Value::Array(items) => items.iter().map(|v| loops_on(v, relation)).sum(),
        _ => 0,
    }
}

/// However many expired keys a NO ACTION row references, the dry run's statement probes at most
/// its cap of them per walk: the count's walk, the oldest candidate within it (not sought when it
/// found none), the newest within as many rows from the newest end. Here the cap is 100 and 3,000
/// of the oldest expired keys are referenced: first with unreferenced expired keys after them,
/// then with every key referenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dry_runs_candidates_probe_at_most_its_cap_of_referenced_keys() {
    let db = explainer_with_charges(3, "NO ACTION").await;
    db.exec(
        "INSERT INTO idempotency_keys (key, request_hash, response_status, response_body, created_at) \
         SELECT 'ref-' || g, 'h', 201, '{}'::jsonb, now() - interval '3 days' - g * interval '1 second' \
           FROM generate_series(1, 3000) AS g; \
         INSERT INTO charges (idem_key) SELECT 'ref-' || g FROM generate_series(1, 3000) AS g; \
         ANALYZE idempotency_keys; ANALYZE charges",
    )
    .await;
    let profile = Profile::explainer().with_ttl(Some(Duration::from_secs(3600)));
    let statements = idemctl::statements_for_explain(
        &profile,
        "\"public\".\"idempotency_keys\"",
        &[(
            "\"public\".\"charges\"",
            &["idem_key"],
            &["key"],
            "NO ACTION",
        )],
    );
    let sql = &statements
        .iter()
        .find(|(f, _)| *f == "evict_preview.sql")
        .unwrap()
        .1;
    let client = db.client().await;
    client
        .batch_execute(&format!("PREPARE s AS {sql}"))
        .await
        .unwrap_or_else(|e| panic!("{}", crate::support::pg_error_text(&e)));
    for every_key in [false, true] {
        if every_key {
            db.exec(
                "INSERT INTO charges (idem_key) SELECT key FROM idempotency_keys; ANALYZE charges",
            )
            .await;
        }
        let row = client.query_one("EXECUTE s(100, NULL)", &[]).await.unwrap();
        let (n, referenced): (i64, i64) = (row.get("n"), row.get("referenced"));
        assert_eq!((n, referenced), (0, 101), "every key: {every_key}");
        let oldest: Option<time::OffsetDateTime> = row.get("oldest");
        let newest: Option<time::OffsetDateTime> = row.get("newest");
        assert!(oldest.is_none(), "every key: {every_key}");
        assert_eq!(newest.is_none(), every_key, "every key: {every_key}");
        let text: String = client
            .query_one("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE s(100, NULL)", &[])
            .await
            .unwrap()
            .get::<_, serde_json::Value>(0)
            .to_string();
        let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
        let probes = loops_on(&plan, "charges");
        // The count's walk probes 101 keys; the newest candidate's stops at the first key not
        // referenced (a few), or reads as many when every key is.
        let bound = if every_key { 2 * 101 } else { 101 + 10 };
        assert!(
            probes <= bound,
            "every key: {every_key}: {probes} probes:\n{text}"
        );
        // No candidate walk is sorted again (which would probe each of its keys).
        assert!(!text.contains("\"Sort\""), "{text}");
    }
    // Without a foreign key each candidate is the first row of its walk, read through the index.
    let plain = idemctl::statements_for_explain(&profile, "\"public\".\"idempotency_keys\"", &[]);
    let sql = &plain
        .iter()
        .find(|(f, _)| *f == "evict_preview.sql")
        .unwrap()
        .1;
    client
        .batch_execute(&format!("DEALLOCATE s; PREPARE s AS {sql}"))
        .await
        .unwrap();
    let text = client
        .query_one("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE s(100, NULL)", &[])
        .await
        .unwrap()
        .get::<_, serde_json::Value>(0)
        .to_string();
    assert!(!text.contains("\"Sort\""), "{text}");
}

/// Without a NO ACTION / RESTRICT foreign key (none at all, or an ON DELETE SET NULL one), the dry
/// run and stats are as before: no referenced figures, the lag is the oldest expired key's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_no_action_key_the_dry_run_and_stats_are_unchanged() {
    for action in [None, Some("SET NULL")] {
        let db = match action {
            Some(a) => explainer_with_charges(40, a).await,
            None => loaded(EXPLAINER_DDL, &explainer_rows(40), Some(EXPLAINER_INDEXES)).await,
        };
        let expired = expired_completed(&db).await;
        let d = db
            .idemctl()
            .args(["-o", "json", "--ttl", "1h", "evict", "--dry-run"])
            .run()
            .json();
        assert_eq!(d["would_evict"]["count"], expired, "{action:?}: {d}");
        assert!(d.get("would_skip_referenced").is_none(), "{action:?}: {d}");
        assert_eq!(d["sample"][0]["key"], "done-old-40", "{action:?}: {d}");
        let s = db
            .idemctl()
            .args(["-o", "json", "--ttl", "1h", "stats"])
            .run()
            .json();
        assert!(s.get("referenced_expired").is_none(), "{action:?}: {s}");
        assert_eq!(s["oldest_expired"]["key"], "done-old-40", "{action:?}: {s}");
        let lag = s["eviction_lag_seconds"].as_f64().unwrap();
        assert!(
            (lag - waited(&db, "done-old-40").await).abs() < 30.0,
            "{action:?}: {s}"
        );
        let text = db
            .idemctl()
            .args(["-o", "plain", "--ttl", "1h", "stats"])
            .run();
        assert!(!text.stdout.contains("referenced"), "{action:?}: {text}");
        let metrics = db
            .idemctl()
            .args(["-o", "prometheus", "--ttl", "1h", "stats"])
            .run();
        assert!(
            !metrics.stdout.contains("idemctl_expired_referenced"),
            "{action:?}: {metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_a_no_action_reference_without_an_index() {
    let db = explainer_with_charges(3, "NO ACTION").await;
    db.exec("DROP INDEX charges_idem_key_idx").await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "check"])
        .run();
    run.assert_code(4);
    let json = run.json();
    let fk = finding(&json, "referencing key");
    assert_eq!(fk["status"], "fail", "{run}");
    assert!(
        fk["detail"]
            .as_str()
            .unwrap()
            .contains("each evicted key would scan it"),
        "{run}"
    );
    assert_eq!(
        fk["fix"], "CREATE INDEX CONCURRENTLY ON \"public\".\"charges\" (\"idem_key\");",
        "{run}"
    );
}

/// A referencing table whose name holds a newline and an escape sequence: check's fix names it in
/// the Unicode-escape form, in the JSON and the text alike, and runs as printed; the finding then
/// passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fix_for_a_referencing_table_with_controls_in_its_name_runs_as_printed() {
    let db = explainer_with_charges(3, "NO ACTION").await;
    db.exec(
        "DROP INDEX charges_idem_key_idx; ALTER TABLE charges RENAME TO \"ch\narges\u{1b}[31m\"",
    )
    .await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "check"])
        .run();
    run.assert_code(4);
    let json = run.json();
    let fix = finding(&json, "referencing key")["fix"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        fix,
        "CREATE INDEX CONCURRENTLY ON \"public\".U&\"ch\\000Aarges\\001B[31m\" (\"idem_key\");",
        "{run}"
    );
    let text = db
        .idemctl()
        .args(["-o", "plain", "--ttl", "1h", "check"])
        .run();
    text.assert_code(4).assert_stdout_contains(&fix);
    assert!(!text.stdout.contains('\u{1b}'), "{text}");
    db.exec(&fix).await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "check"])
        .run();
    assert_ne!(
        finding(&run.json(), "referencing key")["status"],
        "fail",
        "{run}"
    );
}

/// A row referencing a key appears while the batch deletes it (here a trigger on the key table
/// adds it, once, as the API would between the batch's snapshot and its end): the foreign key
/// violation rolls the batch back, and the batch is tried again instead of ending the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_added_while_a_batch_runs_makes_the_batch_run_again() {
    let db = explainer_with_charges(10, "NO ACTION").await;
    db.exec("DELETE FROM charges").await;
    // A sequence, not a table: its count survives the batch's rollback.
    db.exec(
        "CREATE SEQUENCE raced; \
         CREATE FUNCTION add_charge() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN \
           IF OLD.key = 'done-old-5' THEN \
             IF nextval('raced') = 1 THEN \
               INSERT INTO charges (idem_key) VALUES (OLD.key); \
             END IF; \
           END IF; \
           RETURN OLD; \
         END $$; \
         CREATE TRIGGER add_charge BEFORE DELETE ON idempotency_keys \
           FOR EACH ROW EXECUTE FUNCTION add_charge();",
    )
    .await;
    let expired = expired_completed(&db).await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "evict"])
        .run();
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["rows_evicted"], expired, "{j}");
    assert_eq!(expired_completed(&db).await, 0);
    // The key's delete ran twice: the try that met the new reference, and the one after it.
    assert_eq!(
        scalar_i64(&db, "SELECT last_value FROM raced").await,
        2,
        "{run}"
    );
}

/// rocket-rides with `n` keys of each kind.
async fn rocket_rides(n: i64) -> TestDb {
    loaded(
        ROCKET_RIDES_DDL,
        &rocket_rides_rows(n),
        Some(ROCKET_RIDES_INDEXES),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_transaction_holding_a_ride_leaves_its_key_to_the_next_run() {
    let db = rocket_rides(30).await;
    let live = db.client().await;
    live.batch_execute(
        "BEGIN; SELECT 1 FROM rides WHERE idempotency_key_id = \
           (SELECT id FROM idempotency_keys WHERE idempotency_key = 'finished-old-7') FOR UPDATE;",
    )
    .await
    .unwrap();
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "72h", "evict", "--batch-size", "20"])
        .timeout(Duration::from_secs(60))
        .run_async()
        .await;
    run.assert_code(0);
    assert!(!run.stderr.contains("DDL"), "{run}");
    let j = run.json();
    assert_eq!(j["rows_evicted"], 59, "{j}");
    assert_eq!(j["skipped_locked"], 1, "{j}");
    assert!(j["lock_fallbacks"].as_u64().unwrap() >= 1, "{j}");
    let left = "SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'finished-old-7'";
    assert_eq!(scalar_i64(&db, left).await, 1);
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM rides WHERE idempotency_key_id IS NOT NULL"
        )
        .await,
        1,
        "only the held ride still points at its key"
    );
    live.batch_execute("COMMIT").await.unwrap();
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "72h", "evict"])
        .run();
    run.assert_code(0);
    assert_eq!(run.json()["rows_evicted"], 1, "{run}");
    assert_eq!(scalar_i64(&db, left).await, 0);
}

/// A CASCADE that goes on to a second table (refunds referencing charges, ON DELETE CASCADE): the
/// fallback locks only the charges first, so a live transaction holding a refund of the oldest
/// expired key's charge makes the batch's cascaded delete meet its lock. The batch waits no longer
/// than its lock_timeout, is tried again, and the run ends with exit 1 naming the lock; nothing is
/// half deleted, and once the transaction ends the next run evicts every expired key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_row_two_cascades_away_ends_the_run_and_the_next_run_drains() {
    let db = explainer_with_charges(20, "CASCADE").await;
    db.exec(
        "CREATE TABLE refunds (id serial PRIMARY KEY, \
                               charge_id int REFERENCES charges (id) ON DELETE CASCADE); \
         CREATE INDEX ON refunds (charge_id); \
         INSERT INTO refunds (charge_id) SELECT id FROM charges;",
    )
    .await;
    let expired = expired_completed(&db).await;
    let live = db.client().await;
    live.batch_execute("BEGIN; SELECT 1 FROM refunds FOR UPDATE;")
        .await
        .unwrap();
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "evict"])
        .timeout(Duration::from_secs(60))
        .run_async()
        .await;
    // The run's report still goes to stdout; the error line is stderr's only line.
    run.assert_code(1).assert_stderr("idemctl: a batch could not lock a row within lock_timeout (a live transaction holds it): canceling statement due to lock timeout\n");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM charges").await,
        1,
        "the held refund's charge stays"
    );
    assert_eq!(scalar_i64(&db, "SELECT count(*) FROM refunds").await, 1);
    live.batch_execute("COMMIT").await.unwrap();
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "1h", "evict"])
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(expired_completed(&db).await, 0, "{run}");
    assert!(expired > 0);
    assert_eq!(scalar_i64(&db, "SELECT count(*) FROM refunds").await, 0);
}

/// brandur's own form of the rides index: partial, on the rows that reference a key.
const RIDES_PARTIAL_INDEX: &str = "ALTER TABLE rides DROP CONSTRAINT rides_idempotency_key_id_key; \
     CREATE INDEX rides_idempotency_key_id ON rides (idempotency_key_id) \
     WHERE idempotency_key_id IS NOT NULL;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_accepts_a_partial_index_the_on_delete_action_can_use() {
    let db = rocket_rides(3).await;
    db.exec(RIDES_PARTIAL_INDEX).await;
    // Rides ordered without an idempotency key, as most are once their key has gone.
    db.exec(
        "INSERT INTO rides (origin_lat, origin_lon, target_lat, target_lon, user_id) \
         SELECT 0, 0, 1, 1, 1 + g % 7 FROM generate_series(1, 20000) AS g; ANALYZE rides;",
    )
    .await;
    // PostgreSQL plans the ON DELETE action's lookup on it.
    let plan = db
        .client()
        .await
        .simple_query(
            "SET plan_cache_mode = force_generic_plan; \
             PREPARE a AS UPDATE ONLY rides SET idempotency_key_id = NULL WHERE $1 = idempotency_key_id; \
             EXPLAIN EXECUTE a(1)",
        )
        .await
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(plan.contains("rides_idempotency_key_id"), "{plan}");
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "72h", "check"])
        .run();
    let json = run.json();
    assert_eq!(finding(&json, "referencing key")["status"], "ok", "{run}");
    assert!(!run.stdout.contains("CREATE INDEX"), "{run}");
    // A predicate the lookup does not imply does not count.
    db.exec(
        "DROP INDEX rides_idempotency_key_id; \
         CREATE INDEX rides_some ON rides (idempotency_key_id) WHERE idempotency_key_id > 5;",
    )
    .await;
    let run = db
        .idemctl()
        .args(["-o", "json", "--ttl", "72h", "check"])
        .run();
    run.assert_code(4);
    assert_eq!(
        finding(&run.json(), "referencing key")["status"],
        "fail",
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_still_checks_the_thresholds_when_a_referencing_table_fails() {
    let db = rocket_rides(40).await;
    db.exec("ALTER TABLE rides DROP CONSTRAINT rides_idempotency_key_id_key")
        .await;
    let args = [
        "-o",
        "json",
        "--ttl",
        "72h",
        "check",
        "--max-stuck",
        "0",
        "--allow-scan",
        "--min-ttl",
        "24h",
    ];
    let run = db.idemctl().args(args).run();
    run.assert_code(4);
    let json = run.json();
    assert_eq!(finding(&json, "referencing key")["status"], "fail", "{run}");
    let stuck = finding(&json, "stuck keys (> 5m)");
    assert_eq!(stuck["status"], "breached", "{run}");
    assert!(
        stuck["detail"].as_str().unwrap().starts_with("40 "),
        "{run}"
    );
    for check in ["eviction lag", "autovacuum", "recent TTL"] {
        let detail = finding(&json, check)["detail"].as_str().unwrap();
        assert!(!detail.starts_with("not checked"), "{check}: {run}");
    }
    // Without the expiry index the lag is unknown (evict would walk the primary key): it is not
    // checked, and says why; the other thresholds are still checked.
    db.exec("DROP INDEX idempotency_keys_created_at").await;
    let run = db.idemctl().args(args).run();
    run.assert_code(4);
    let json = run.json();
    let lag = finding(&json, "eviction lag");
    assert_eq!(lag["status"], "note", "{run}");
    let detail = lag["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("not checked: ") && detail.contains("expiry index"),
        "{run}"
    );
    assert_eq!(
        finding(&json, "stuck keys (> 5m)")["status"],
        "breached",
        "{run}"
    );
}

/// The ON DELETE action runs inside the batch's statement, so the batch time includes it: the
/// same eviction over a referencing table without an index on its column (each evicted key scans
/// it) takes batches many times longer than with the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_time_includes_the_on_delete_work() {
    let mut slowest = Vec::new();
    for indexed in [true, false] {
        let db = rocket_rides(200).await;
        db.exec(
            "INSERT INTO rides (origin_lat, origin_lon, target_lat, target_lon, user_id) \
             SELECT 0, 0, 1, 1, 1 + g % 7 FROM generate_series(1, 300000) AS g; ANALYZE rides;",
        )
        .await;
        if !indexed {
            db.exec("ALTER TABLE rides DROP CONSTRAINT rides_idempotency_key_id_key")
                .await;
        }
        let run = db
            .idemctl()
            .args([
                "-o",
                "json",
                "--ttl",
                "72h",
                "evict",
                "--batch-size",
                "100",
                "--duty-cycle",
                "100",
            ])
            .timeout(Duration::from_secs(120))
            .run_async()
            .await;
        run.assert_code(0);
        let j = run.json();
        assert_eq!(j["rows_evicted"], 400, "{j}");
        slowest.push(j["batch_ms_p50"].as_f64().unwrap());
    }
    let (with_index, without) = (slowest[0], slowest[1]);
    assert!(
        without > 10.0 * with_index && without > 100.0,
        "batch p50 {with_index} ms with the index, {without} ms without"
    );
}

/// rocket-rides with 200,000 keys, its 50,000 rides (ON DELETE SET NULL) and a `receipts` table
/// (ON DELETE CASCADE) and a `charges` table (ON DELETE NO ACTION) as large, each indexed: every
/// statement generated for the foreign keys is index-backed on the key table and on every
/// referencing table, with custom and generic plans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_generated_for_foreign_keys_is_index_backed() {
    let db = TestDb::new().await;
    db.exec(ROCKET_RIDES_DDL).await;
    db.exec(&rocket_rides_rows(50_000)).await;
    db.exec(ROCKET_RIDES_INDEXES).await;
    db.exec(
        "CREATE TABLE charges (id bigserial PRIMARY KEY, \
                               key_id bigint REFERENCES idempotency_keys ON DELETE NO ACTION); \
         CREATE TABLE receipts (id bigserial PRIMARY KEY, \
                                key_id bigint REFERENCES idempotency_keys ON DELETE CASCADE); \
         CREATE INDEX ON charges (key_id); CREATE INDEX ON receipts (key_id); \
         INSERT INTO charges (key_id) SELECT id FROM idempotency_keys WHERE id % 4 = 0; \
         INSERT INTO receipts (key_id) SELECT id FROM idempotency_keys WHERE id % 4 = 1;",
    )
    .await;
    db.exec("VACUUM ANALYZE").await;
    let profile = {
        let mut p = Profile::rocket_rides().with_ttl(Some(Duration::from_secs(72 * 3600)));
        p.tenant_types = vec!["bigint".into()];
        p
    };
    let statements = idemctl::statements_for_explain(
        &profile,
        "\"public\".\"idempotency_keys\"",
        &[
            (
                "\"public\".\"rides\"",
                &["idempotency_key_id"],
                &["id"],
                "SET NULL",
            ),
            ("\"public\".\"charges\"", &["key_id"], &["id"], "NO ACTION"),
            ("\"public\".\"receipts\"", &["key_id"], &["id"], "CASCADE"),
        ],
    );
    let files: BTreeSet<&str> = statements.iter().map(|(f, _)| *f).collect();
    for f in EXPLAINED_WITH_FOREIGN_KEYS {
        assert!(files.contains(f), "{f}");
    }
    // One batch's range: 900 seconds of old keys, three kinds of them each second.
    let range = "now() - interval '4 days 1000 seconds', now() - interval '4 days 100 seconds'";
    let args = |file: &str| match file {
        "evict_batch.sql" => format!("{range}, NULL"),
        "evict_batch_skip_locked.sql" => format!("{range}, 5000, NULL"),
        "evict_batch_referenced.sql" => range.to_owned(),
        "referenced_expired.sql" | "oldest_expired_referenced.sql" => "10000".to_owned(),
        "evict_preview.sql" => "100000, NULL".to_owned(),
        "evict_preview_sample.sql" => "100000, 3600, 10".to_owned(),
        other => panic!("no arguments for {other}"),
    };
    let tables = ["idempotency_keys", "rides", "charges", "receipts"];
    let client = db.client().await;
    for (file, sql) in &statements {
        assert!(!sql.contains("/*{"), "{file}: a marker is left:\n{sql}");
        if *file == "evict_batch_skip_locked.sql" {
            assert!(
                sql.contains("FOR UPDATE OF idemctl_ref SKIP LOCKED") && sql.contains("ready"),
                "{sql}"
            );
        }
        if file.starts_with("evict_batch") && *file != "evict_batch_referenced.sql" {
            assert!(
                sql.contains("NOT EXISTS (SELECT 1 FROM \"public\".\"charges\""),
                "{sql}"
            );
        }
        if file.starts_with("evict_preview") {
            assert!(
                sql.contains("OR EXISTS (SELECT 1 FROM \"public\".\"charges\""),
                "{sql}"
            );
        }
        for mode in ["force_custom_plan", "force_generic_plan"] {
            let execute = format!("EXECUTE s({})", args(file));
            let (text, found) =
                crate::explain::explain_scans(&client, file, mode, sql, &execute).await;
            let seq: Vec<_> = found
                .iter()
                .filter(|(node, rel)| node == "Seq Scan" && tables.contains(&rel.as_str()))
                .collect();
            assert!(seq.is_empty(), "{file} ({mode}) scans {seq:?}:\n{text}");
            let referencing: Vec<&str> = match *file {
                "evict_batch_skip_locked.sql" => {
                    vec!["idempotency_keys", "rides", "charges", "receipts"]
                }
                _ => vec!["idempotency_keys", "charges"],
            };
            for rel in referencing {
                assert!(
                    found.iter().any(|(node, r)| r == rel
                        && (node.contains("Index") || node == "Bitmap Heap Scan")),
                    "{file} ({mode}) reads {rel} by no index:\n{text}"
                );
            }
        }
    }
}

/// The count of the keys a batch left because they are still referenced is a statement of its
/// own, after the batch: when the role loses SELECT on the referencing table between the two
/// (revoked while the batch's DELETE runs, held there by a trigger until the revoke is done),
/// the count fails on the privilege and evict ends in one line naming that step; the batch
/// itself committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_of_referenced_keys_that_fails_ends_the_run_naming_the_step() {
    let db = explainer_with_charges(10, "NO ACTION").await;
    let role = format!("{}_evicter", db.name());
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA public TO {role}; \
         GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO {role}; \
         GRANT SELECT ON charges TO {role};"
    ))
    .await;
    crate::fixtures::hold_deletes(&db).await;
    let evict = crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", &role)]))
        .args(["--ttl", "1h", "evict", "--duty-cycle", "20"])
        .spawn();
    crate::fixtures::while_a_delete_is_held(
        &db,
        &role,
        &format!("REVOKE SELECT ON charges FROM {role}"),
    )
    .await;
    let run = evict.wait_async().await;
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
    run.assert_error(
        6,
        "failed to count the keys a batch left because they are still referenced: permission \
         denied for table charges",
    );
    // The batch before the count committed: only the referenced key is left.
    assert_eq!(expired_completed(&db).await, 1, "{run}");
}

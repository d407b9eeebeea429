//! `reclaim --api-key-id`, `--path`, `--method`: in every mode (preview, plan, apply, sweep) a
//! filter changes only the stuck keys that match it, and a stuck key of another tenant or route of
//! the same age is left alone; apply keeps a plan's filters and narrows by new ones; a filter the
//! table has no column for, or a value no stored key can have, is refused with one line and exit 2
//! before any change; values are bound, so quotes are only characters. The same on a table Citus
//! distributes, where the sweep and --apply run shard by shard on the workers.

use std::collections::BTreeSet;

use crate::fixtures::{self, Mix, Schema, scalar_i64, snapshot, snapshot_of};
use crate::profiles;
use crate::support::citus::{CitusDb, Layout, skipped};
use crate::support::stuck::{Key, keys_of};
use crate::support::{Run, TestDb};

/// Stuck keys of one route, all taken at the same moment as every other group's.
struct Group {
    prefix: &'static str,
    tenant: &'static str,
    method: &'static str,
    path: &'static str,
    n: i64,
}

const GROUPS: [Group; 4] = [
    Group {
        prefix: "pay-t1",
        tenant: "t1",
        method: "POST",
        path: "/v1/payments",
        n: 3,
    },
    Group {
        prefix: "refund-t1",
        tenant: "t1",
        method: "POST",
        path: "/v1/refunds",
        n: 2,
    },
    Group {
        prefix: "pay-t2",
        tenant: "t2",
        method: "POST",
        path: "/v1/payments",
        n: 2,
    },
    Group {
        prefix: "put-t1",
        tenant: "t1",
        method: "PUT",
        path: "/v1/payments",
        n: 2,
    },
];

/// The storage table with the optional index, some rows of every kind (tenants tenant_0..6, POST
/// /v1/payments), and the groups above, every group's keys taken at the same instant, 2 hours ago.
async fn db_with_routes(with_index: bool) -> TestDb {
    let mix = Mix {
        expired: 20,
        live: 20,
        fresh: 5,
        stuck: 6,
        expired_in_progress: 0,
    };
    let db = crate::support::stuck::db_with(Schema::Corrected, mix, with_index).await;
    db.exec(&groups_sql()).await;
    db.exec("ANALYZE idempotency_keys").await;
    db
}

/// The groups' rows, in one implicit transaction: now() is the same instant for every group.
fn groups_sql() -> String {
    GROUPS
        .iter()
        .map(|g| {
            format!(
                "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
                 request_fingerprint, state, locked_at, created_at, expires_at) \
                 SELECT '{}-' || i, '{}', '{}', '{}', '\\x00', 'in_progress', \
                        now() - interval '2 hours', now() - interval '2 hours', \
                        now() + interval '1 day' \
                   FROM generate_series(1, {}) AS i;",
                g.prefix, g.tenant, g.method, g.path, g.n
            )
        })
        .collect()
}

fn group_keys(prefixes: &[&str]) -> BTreeSet<Key> {
    GROUPS
        .iter()
        .filter(|g| prefixes.contains(&g.prefix))
        .flat_map(|g| (1..=g.n).map(|i| (g.tenant.to_owned(), format!("{}-{i}", g.prefix))))
        .collect()
}

/// Run and check that exactly `gone` left the table (deleted) and every other row is as it was.
async fn only_these_change(
    client: &tokio_postgres::Client,
    gone: &BTreeSet<Key>,
    run: impl AsyncFnOnce() -> Run,
) {
    let before = snapshot_of(client).await;
    run().await;
    let after = snapshot_of(client).await;
    for (k, seen) in &before {
        if gone.contains(k) {
            assert!(!after.contains_key(k), "{k:?} was not reclaimed");
        } else {
            assert_eq!(after.get(k), Some(seen), "{k:?} was reclaimed or changed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_reclaim_only_the_matching_route_in_every_mode() {
    let db = db_with_routes(true).await;
    let dir = tempfile::tempdir().unwrap();
    let route = [
        "--api-key-id",
        "t1",
        "--path",
        "/v1/payments",
        "--method",
        "POST",
    ];

    // Preview: exactly the route's keys, counted and listed; nothing changes.
    let before = snapshot(&db).await;
    let run = db
        .idemctl()
        .args(["reclaim", "--dry-run", "-o", "json"])
        .args(route)
        .run_async()
        .await;
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["would_reclaim"]["count"], 3, "{j}");
    assert_eq!(keys_of(&j["rows"]), group_keys(&["pay-t1"]));
    assert_eq!(j["filter"]["path"], "/v1/payments");
    assert_eq!(j["filter"]["method"], "POST");
    assert_eq!(j["filter"]["api_key_id"], "t1");
    db.idemctl()
        .args(["reclaim", "--dry-run", "-o", "plain"])
        .args(route)
        .run_async()
        .await
        .assert_code(0)
        .assert_stdout_contains("api_key_id t1, path /v1/payments, method POST");
    assert_eq!(snapshot(&db).await, before, "the preview changed the table");

    // Sweep: the route's three keys go; the same-age keys of another path, tenant or method stay.
    let pay_t1 = group_keys(&["pay-t1"]);
    only_these_change(&db.client().await, &pay_t1, async || {
        let run = db
            .idemctl()
            .args(["reclaim", "--yes", "-o", "json", "--batch-size", "2"])
            .args(route)
            .run_async()
            .await;
        run.assert_code(0);
        let j = run.json();
        assert_eq!(keys_of(&j["reclaimed"]), pay_t1, "{j}");
        assert_eq!(
            j["stuck_left"]["count"], 0,
            "no stuck key of the route is left: {j}"
        );
        assert_eq!(j["filter"]["api_key_id"], "t1", "{j}");
        run
    })
    .await;

    // One filter alone: the path.
    let refunds = group_keys(&["refund-t1"]);
    only_these_change(&db.client().await, &refunds, async || {
        let run = db
            .idemctl()
            .args(["reclaim", "--yes", "-o", "json", "--path", "/v1/refunds"])
            .run_async()
            .await;
        assert_eq!(keys_of(&run.json()["reclaimed"]), refunds, "{run}");
        run
    })
    .await;

    // Plan and apply: the plan holds the tenant's keys only, records its filter, and apply takes
    // exactly those.
    let plan = dir.path().join("t2.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .args(["--api-key-id", "t2"])
        .run_async()
        .await
        .assert_code(0);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(written["filter"], serde_json::json!({"api_key_id": "t2"}));
    let t2 = group_keys(&["pay-t2"]);
    assert_eq!(keys_of(&written["rows"]), t2);
    // A filter that contradicts the plan's is refused before any change.
    let before = snapshot(&db).await;
    let refused = db
        .idemctl()
        .args(["reclaim", "--yes", "--apply"])
        .arg(&plan)
        .args(["--api-key-id", "t1"])
        .run_async()
        .await;
    refused
        .assert_code(2)
        .assert_stderr_contains("--api-key-id \"t1\" differs from the plan's filter \"t2\"");
    assert_eq!(refused.stderr.trim_end().lines().count(), 1, "{refused}");
    assert_eq!(snapshot(&db).await, before);
    only_these_change(&db.client().await, &t2, async || {
        let run = db
            .idemctl()
            .args(["reclaim", "--yes", "-o", "json", "--apply"])
            .arg(&plan)
            .args(["--api-key-id", "t2"])
            .run_async()
            .await;
        run.assert_code(0);
        assert_eq!(keys_of(&run.json()["reclaimed"]), t2, "{run}");
        run
    })
    .await;

    // Apply narrowed by a filter the plan lacks: the plan's other rows are left alone as filtered,
    // and counted so in the metrics.
    let plan = dir.path().join("all.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run_async()
        .await
        .assert_code(0);
    let put = group_keys(&["put-t1"]);
    let prom = dir.path().join("reclaim.prom");
    only_these_change(&db.client().await, &put, async || {
        let run = db
            .idemctl()
            .args([
                "reclaim", "--yes", "-o", "json", "--method", "PUT", "--apply",
            ])
            .arg(&plan)
            .arg("--textfile")
            .arg(&prom)
            .run_async()
            .await;
        run.assert_code(0);
        let j = run.json();
        assert_eq!(keys_of(&j["reclaimed"]), put, "{j}");
        let left = j["left_alone"].as_array().unwrap();
        assert_eq!(left.len(), 6, "the fixture's six stuck keys: {j}");
        assert!(left.iter().all(|l| l["reason"] == "filtered"), "{j}");
        run
    })
    .await;
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("idemctl_reclaim_keys_left_alone{")
                && l.contains("reason=\"filtered\"")
                && l.ends_with(" 6")),
        "{text}"
    );
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' \
              AND created_at < now() - interval '1 minute'"
        )
        .await,
        6,
        "only the fixture's stuck keys are left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_without_the_in_progress_index_needs_allow_scan() {
    let db = db_with_routes(false).await;
    let before = snapshot(&db).await;
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "--path", "/v1/refunds"])
        .run_async()
        .await;
    run.assert_code(2)
        .assert_stderr_contains("has no index on in_progress keys")
        .assert_stderr_contains("--allow-scan");
    assert_eq!(snapshot(&db).await, before);
    let refunds = group_keys(&["refund-t1"]);
    only_these_change(&db.client().await, &refunds, async || {
        let run = db
            .idemctl()
            .args(["reclaim", "--yes", "-q", "-o", "json", "--allow-scan"])
            .args(["--path", "/v1/refunds"])
            .run_async()
            .await;
        run.assert_code(0).assert_stderr_empty();
        assert_eq!(keys_of(&run.json()["reclaimed"]), refunds);
        run
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_filter_values_are_refused_with_one_line_or_matched_exactly() {
    let db = db_with_routes(true).await;
    let long = format!("/{}", "a".repeat(9000));
    let empty = ": give the value as the API stores it, or drop the flag; nothing was changed";
    let control = " holds a control character (a newline, tab or the like), which no stored value \
                   has; nothing was changed";
    let cases: Vec<(Vec<&str>, String)> =
        vec![
        (vec!["--path", ""], format!("--path is empty{empty}")),
        (vec!["--api-key-id", ""], format!("--api-key-id is empty{empty}")),
        (vec!["--method", ""], format!("--method is empty{empty}")),
        (
            vec!["--path", "/v1/payments\nPOST"],
            format!("--path \"/v1/payments\\nPOST\"{control}"),
        ),
        (
            vec!["--api-key-id", "t1\r\n"],
            format!("--api-key-id \"t1\\r\\n\"{control}"),
        ),
        (
            vec!["--path", &long],
            "--path is 9001 bytes long: at most 8192 are accepted (no server takes a longer \
             request line); nothing was changed"
                .to_owned(),
        ),
        (
            vec!["--method", "POST'; DROP TABLE idempotency_keys; --"],
            "--method \"POST'; DROP TABLE idempotency_keys; --\" is not an HTTP method: a method \
             is a token of letters, digits and !#$%&'*+-.^_`|~ (RFC 9110), compared exactly with \
             the stored one (POST, not post)"
                .to_owned(),
        ),
        (vec!["--method", "PO\tST"], format!("--method \"PO\\tST\"{control}")),
    ];
    for mode in [&["--dry-run"][..], &["--yes"], &["--plan", "p.json"]] {
        for (args, says) in &cases {
            let before = snapshot(&db).await;
            let run = db
                .idemctl()
                .arg("reclaim")
                .args(mode)
                .args(args)
                .run_async()
                .await;
            // One line, exactly this, exit 2.
            run.assert_error(2, says);
            assert_eq!(snapshot(&db).await, before, "{args:?} changed the table");
        }
    }

    // Quotes are characters of a bound value: a tenant that looks like SQL matches no key...
    let before = snapshot(&db).await;
    let run = db
        .idemctl()
        .args(["reclaim", "--yes", "-o", "json"])
        .args(["--api-key-id", "t1' OR '1'='1"])
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], 0, "{run}");
    assert_eq!(snapshot(&db).await, before);
    // ...and a path holding quotes and a semicolon matches exactly the key stored with it.
    let odd = "/v1/o'brien\"; DROP TABLE idempotency_keys; --";
    db.client()
        .await
        .execute(
            "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
             request_fingerprint, state, locked_at, created_at, expires_at) \
             VALUES ('odd-1', 't1', 'POST', $1, '\\x00', 'in_progress', now() - interval '2 hours', \
                     now() - interval '2 hours', now() + interval '1 day')",
            &[&odd],
        )
        .await
        .unwrap();
    let odd_key: BTreeSet<Key> = [("t1".to_owned(), "odd-1".to_owned())].into();
    only_these_change(&db.client().await, &odd_key, async || {
        let run = db
            .idemctl()
            .args(["reclaim", "--yes", "-o", "json", "--path", odd])
            .run_async()
            .await;
        run.assert_code(0);
        assert_eq!(keys_of(&run.json()["reclaimed"]), odd_key, "{run}");
        run
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_fit_the_profile_columns_or_are_refused() {
    // rocket-rides: user_id (bigint) is the tenant; its request_path and request_method filter.
    let db = TestDb::new().await;
    db.exec(profiles::ROCKET_RIDES_DDL).await;
    db.exec(&profiles::rocket_rides_rows(14)).await;
    db.exec(profiles::ROCKET_RIDES_INDEXES).await;
    db.exec(
        "UPDATE idempotency_keys SET request_path = '/charges' \
          WHERE idempotency_key IN ('held-old-1', 'held-old-2', 'held-old-3')",
    )
    .await;
    let held = "SELECT count(*) FROM idempotency_keys WHERE recovery_point <> 'finished' \
                AND locked_at IS NOT NULL";
    assert_eq!(scalar_i64(&db, held).await, 14);
    let run = db
        .idemctl()
        .args(["--ttl", "72h", "reclaim", "--yes", "-o", "json"])
        .args(["--path", "/charges", "--method", "POST"])
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(run.json()["rows_reclaimed"], 3, "{run}");
    assert_eq!(scalar_i64(&db, held).await, 11);
    // held-old-g belongs to user 1 + g % 7: user 5 holds held-old-4 and held-old-11.
    let run = db
        .idemctl()
        .args(["--ttl", "72h", "reclaim", "--yes", "-o", "json"])
        .args(["--api-key-id", "5"])
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(
        keys_of(&run.json()["reclaimed"]),
        [
            ("5".to_owned(), "held-old-11".to_owned()),
            ("5".to_owned(), "held-old-4".to_owned())
        ]
        .into(),
        "{run}"
    );
    assert_eq!(scalar_i64(&db, held).await, 9);
    // A tenant its bigint column cannot hold: refused before any change, not a failed statement.
    let run = db
        .idemctl()
        .args(["--ttl", "72h", "reclaim", "--yes", "--api-key-id", "t42"])
        .run_async()
        .await;
    run.assert_code(2)
        .assert_stderr_contains("--api-key-id \"t42\" cannot be a tenant of table")
        .assert_stderr_contains("type bigint");
    assert_eq!(scalar_i64(&db, held).await, 9);

    // The explainer's table has no tenant, path or method: each filter is refused, naming why.
    let db = TestDb::new().await;
    db.exec(profiles::EXPLAINER_DDL).await;
    db.exec(&profiles::explainer_rows(5)).await;
    db.exec(profiles::EXPLAINER_INDEXES).await;
    let before = scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await;
    for (flag, value, column) in [
        ("--api-key-id", "t1", "tenant"),
        ("--path", "/v1/payments", "request path"),
        ("--method", "POST", "request method"),
    ] {
        for mode in [&["--dry-run"][..], &["--yes"]] {
            let run = db
                .idemctl()
                .args(["--ttl", "24h", "reclaim"])
                .args(mode)
                .args([flag, value])
                .run_async()
                .await;
            run.assert_code(2).assert_stderr_contains(&format!(
                "{flag} does not apply to table public.idempotency_keys (profile explainer): it has no {column} column"
            ));
            assert_eq!(run.stderr.trim_end().lines().count(), 1, "{run}");
        }
    }
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        before
    );
}

/// On a table Citus distributes by tenant: the preview runs through the coordinator, the sweep and
/// --apply on the shards on their workers; the filters hold in each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_hold_on_a_citus_table_shard_by_shard() {
    if skipped("reclaim filters on Citus") {
        return;
    }
    let db = CitusDb::new(None).await;
    db.exec(include_str!("../../sql/schema.sql")).await;
    db.exec(&fixtures::load_sql(Mix {
        expired: 20,
        live: 20,
        fresh: 5,
        stuck: 6,
        expired_in_progress: 0,
    }))
    .await;
    db.exec(&groups_sql()).await;
    db.distribute(Layout::ByTenant).await;
    db.exec(
        "CREATE INDEX idempotency_keys_in_progress ON idempotency_keys \
         ((coalesce(locked_at, created_at))) WHERE state = 'in_progress'",
    )
    .await;
    let client = db.client().await;

    let run = db
        .idemctl()
        .args(["reclaim", "--dry-run", "-o", "json", "--api-key-id", "t1"])
        .args(["--path", "/v1/payments", "--method", "POST"])
        .run_async()
        .await;
    run.assert_code(0);
    assert_eq!(
        keys_of(&run.json()["rows"]),
        group_keys(&["pay-t1"]),
        "{run}"
    );

    let refunds = group_keys(&["refund-t1"]);
    only_these_change(&client, &refunds, async || {
        let run = db
            .idemctl()
            .args(["reclaim", "--yes", "-o", "json", "--path", "/v1/refunds"])
            .run_async()
            .await;
        run.assert_code(0);
        assert_eq!(keys_of(&run.json()["reclaimed"]), refunds, "{run}");
        run
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--plan"])
        .arg(&plan)
        .run_async()
        .await
        .assert_code(0);
    let put = group_keys(&["put-t1"]);
    only_these_change(&client, &put, async || {
        let run = db
            .idemctl()
            .args([
                "reclaim", "--yes", "-o", "json", "--method", "PUT", "--apply",
            ])
            .arg(&plan)
            .run_async()
            .await;
        run.assert_code(0);
        let j = run.json();
        assert_eq!(keys_of(&j["reclaimed"]), put, "{j}");
        let left = j["left_alone"].as_array().unwrap();
        assert_eq!(
            left.len(),
            6 + 3 + 2,
            "the fixture's, pay-t1's and pay-t2's: {j}"
        );
        assert!(left.iter().all(|l| l["reason"] == "filtered"), "{j}");
        run
    })
    .await;
}

//! evict's leftover counts (summary and metrics) are exact: compared with counts made by SQL after
//! the run, with rows held by a live session, ties on expires_at, and several sessions.

use crate::fixtures::{self, Mix, Schema, scalar_i64};
use crate::support::TestDb;

const BACKLOG: &str =
    "SELECT count(*) FROM idempotency_keys WHERE expires_at < now() AND state = 'completed'";
const IN_PROGRESS: &str =
    "SELECT count(*) FROM idempotency_keys WHERE expires_at < now() AND state <> 'completed'";

/// Run evict with `args` (JSON summary and a textfile), and check both leftover counts against SQL.
async fn evict_and_compare(db: &TestDb, args: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evict.prom");
    let run = db
        .idemctl()
        .args(["evict", "-o", "json", "--textfile"])
        .arg(&path)
        .args(args)
        .run_async()
        .await;
    run.assert_code(0);
    let j = run.json();
    let backlog = scalar_i64(db, BACKLOG).await;
    let in_progress = scalar_i64(db, IN_PROGRESS).await;
    assert_eq!(
        j["backlog_left"]["count"], backlog,
        "{args:?}: {j} {}",
        run.stderr
    );
    assert_eq!(j["backlog_left"]["at_least"], false, "{args:?}: {j}");
    assert_eq!(
        j["expired_in_progress_left"]["count"], in_progress,
        "{args:?}: {j}"
    );
    assert_eq!(
        j["expired_in_progress_left"]["at_least"], false,
        "{args:?}: {j}"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let labels = format!(
        "{{database=\"{}\",table=\"public.idempotency_keys\"}}",
        db.name()
    );
    for (name, want) in [
        ("idemctl_evict_backlog_left_keys", backlog),
        ("idemctl_evict_expired_in_progress_keys", in_progress),
    ] {
        assert!(
            text.contains(&format!("{name}{labels} {want}\n")),
            "{args:?}: {name} should be {want}:\n{text}"
        );
    }
    j
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_are_exact_when_every_expired_row_is_held() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 2211,
            live: 50,
            expired_in_progress: 300,
            ..Mix::default()
        },
    )
    .await;
    // A live session holds every expired completed row, as retries do with SELECT ... FOR UPDATE.
    let live = db.client().await;
    live.batch_execute(
        "BEGIN; SELECT 1 FROM idempotency_keys WHERE expires_at < now() AND state = 'completed' FOR UPDATE",
    )
    .await
    .unwrap();
    for args in [
        &["--batch-size", "500"][..],
        &[][..],
        &["--jobs", "2", "--batch-size", "400"][..],
        &["--catch-up"][..],
    ] {
        let j = evict_and_compare(&db, args).await;
        assert_eq!(j["rows_evicted"], 0, "{args:?}: {j}");
        assert_eq!(j["backlog_left"]["count"], 2211, "{args:?}: {j}");
        assert_eq!(j["expired_in_progress_left"]["count"], 300, "{args:?}: {j}");
    }
    live.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_are_exact_with_ties_on_expires_at_and_two_sessions() {
    for args in [
        &["--batch-size", "300"][..],
        &["--jobs", "2", "--batch-size", "300"][..],
    ] {
        let db = TestDb::new().await;
        fixtures::table_with(
            &db,
            Schema::Corrected,
            Mix {
                expired_in_progress: 3000,
                live: 20,
                ..Mix::default()
            },
        )
        .await;
        // Ten groups of 1,000 completed rows, each sharing one expires_at, and 50 in_progress
        // rows at each of those instants; some held by a live session.
        fixtures::load(
            &db,
            Mix {
                expired: 10_000,
                ..Mix::default()
            },
        )
        .await;
        db.exec(
            "UPDATE idempotency_keys SET expires_at = date_trunc('hour', now()) - (g.n || ' hours')::interval \
               FROM (SELECT ctid AS c, row_number() OVER () % 10 + 2 AS n FROM idempotency_keys \
                      WHERE state = 'completed' AND expires_at < now()) AS g \
              WHERE ctid = g.c;
             UPDATE idempotency_keys SET expires_at = date_trunc('hour', now()) - (g.n || ' hours')::interval \
               FROM (SELECT ctid AS c, row_number() OVER () % 10 + 2 AS n FROM idempotency_keys \
                      WHERE state = 'in_progress' AND expires_at < now() LIMIT 500) AS g \
              WHERE ctid = g.c",
        )
        .await;
        let live = db.client().await;
        live.batch_execute(
            "BEGIN; SELECT 1 FROM idempotency_keys WHERE state = 'completed' AND expires_at < now() \
               AND key < '1' FOR UPDATE",
        )
        .await
        .unwrap();
        let held = scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE state = 'completed' AND expires_at < now() AND key < '1'",
        )
        .await;
        assert!(held > 100, "{held}");
        let j = evict_and_compare(&db, args).await;
        assert_eq!(j["backlog_left"]["count"], held, "{args:?}: {j}");
        assert_eq!(
            j["expired_in_progress_left"]["count"], 3000,
            "{args:?}: {j}"
        );
        assert_eq!(j["rows_evicted"], 10_000 - held, "{args:?}: {j}");
        live.batch_execute("COMMIT").await.unwrap();
    }
}

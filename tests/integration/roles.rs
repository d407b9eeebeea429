//! Least privilege: sql/roles.sql gives each group role exactly the grants its commands need; each
//! command works as a login role in its group, and a lesser role is refused with exit 6 and a
//! one-line "permission denied" before anything changes.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::fixtures::{self, Mix, Schema, Seen, snapshot};
use crate::support::stuck::{Key, hold_row, stuck_keys};
use crate::support::{Cmd, Run, TestDb, ident};

const ROLES_SQL: &str = include_str!("../../sql/roles.sql");

const READER: &str = "idemctl_reader";
const EVICTOR: &str = "idemctl_evictor";
const RECLAIMER: &str = "idemctl_reclaimer";

/// A database with the corrected table, the optional in_progress index (so reclaim has no
/// reason to warn), `mix` loaded, and sql/roles.sql applied. Tests run this in parallel, so it
/// also shows that the script tolerates concurrent runs.
async fn db_with_roles(mix: Mix) -> TestDb {
    let db = TestDb::new().await;
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    db.exec(ROLES_SQL).await;
    db
}

/// Login roles of one test, named after its database so no other test can clash with them;
/// dropped (best effort) when the value is dropped. Roles belong to the whole server.
struct Logins {
    admin: String,
    prefix: String,
    names: Vec<String>,
}

impl Logins {
    fn new(db: &TestDb) -> Logins {
        Logins {
            admin: db.admin_url(),
            prefix: db.name().to_owned(),
            names: Vec::new(),
        }
    }

    /// `CREATE ROLE <db>_<label> LOGIN IN ROLE <groups>`, then `extra` SQL (`{role}` replaced by
    /// the quoted name); returns the name.
    async fn create(&mut self, db: &TestDb, label: &str, groups: &[&str], extra: &str) -> String {
        let name = format!("{}_{label}", self.prefix);
        let in_role = if groups.is_empty() {
            String::new()
        } else {
            format!(" IN ROLE {}", groups.join(", "))
        };
        db.exec(&format!("CREATE ROLE {} LOGIN{in_role}", ident(&name)))
            .await;
        self.names.push(name.clone());
        if !extra.is_empty() {
            db.exec(&extra.replace("{role}", &ident(&name))).await;
        }
        name
    }
}

impl Drop for Logins {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let drops: Vec<String> = self
            .names
            .iter()
            .map(|n| format!("DROP ROLE IF EXISTS {}", ident(n)))
            .collect();
        // Its own thread and runtime: Drop may run inside the test's runtime, or after a panic.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async move {
                let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
                    .await
                    .ok()?;
                tokio::spawn(conn);
                for sql in drops {
                    // The test database may still hold the role's grants: dropping them is
                    // the database's Drop's job, and a leftover role harms nobody.
                    let _ = client.batch_execute(&sql).await;
                }
                Some(())
            })
        })
        .join();
    }
}

/// idemctl connected as `role` (trust authentication on the test server).
fn as_role(db: &TestDb, role: &str) -> Cmd {
    Cmd::new().env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", role)]))
}

/// Exit 6 with one line on stderr that says "permission denied" and holds every `needle`.
#[track_caller]
fn assert_denied(run: &Run, needles: &[&str]) {
    run.assert_code(6).assert_stdout_empty();
    assert_eq!(run.stderr.lines().count(), 1, "one line expected\n{run}");
    run.assert_stderr_contains("permission denied");
    for needle in needles {
        run.assert_stderr_contains(needle);
    }
}

/// The mix every test starts from: something for each command to do.
const MIX: Mix = Mix {
    expired: 300,
    live: 60,
    fresh: 10,
    stuck: 12,
    expired_in_progress: 4,
};

/// psql with ON_ERROR_STOP, as an operator would run the file; twice, to show it is idempotent;
/// then the exact privileges of each group: nothing more than its commands need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_sql_runs_cleanly_with_psql_twice_and_grants_exactly_what_each_job_needs() {
    let db = TestDb::new().await;
    fixtures::create(&db, Schema::Corrected).await;
    let psql = crate::support::cluster::find_bindir()
        .map(|dir| dir.join("psql"))
        .ok()
        .filter(|p| p.exists())
        .map_or_else(|| "psql".into(), |p| p.into_os_string());
    for _ in 0..2 {
        Cmd::of(&psql)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &db.url(), "-f"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/roles.sql"))
            .run()
            .assert_success()
            .assert_stderr_empty();
    }

    let table = [
        "SELECT",
        "INSERT",
        "UPDATE",
        "DELETE",
        "TRUNCATE",
        "REFERENCES",
        "TRIGGER",
    ];
    let columns = [
        "key",
        "api_key_id",
        "state",
        "response_status",
        "response_body",
        "locked_at",
        "created_at",
        "expires_at",
    ];
    let mut got = Vec::new();
    let client = db.client().await;
    for group in [READER, EVICTOR, RECLAIMER] {
        let login: bool = client
            .query_one(
                "SELECT rolcanlogin FROM pg_roles WHERE rolname = $1",
                &[&group],
            )
            .await
            .unwrap()
            .get(0);
        assert!(!login, "{group} must be NOLOGIN");
        for privilege in table {
            let has: bool = client
                .query_one(
                    "SELECT has_table_privilege($1, 'public.idempotency_keys', $2)",
                    &[&group, &privilege],
                )
                .await
                .unwrap()
                .get(0);
            if has {
                got.push(format!("{group}: {privilege}"));
            }
        }
        for column in columns {
            let has: bool = client
                .query_one(
                    "SELECT has_column_privilege($1, 'public.idempotency_keys', $2, 'UPDATE')",
                    &[&group, &column],
                )
                .await
                .unwrap()
                .get(0);
            if has {
                got.push(format!("{group}: UPDATE ({column})"));
            }
        }
    }
    let want = [
        "idemctl_reader: SELECT",
        "idemctl_evictor: SELECT",
        "idemctl_evictor: DELETE",
        "idemctl_evictor: UPDATE (expires_at)",
        "idemctl_reclaimer: SELECT",
        "idemctl_reclaimer: DELETE",
        "idemctl_reclaimer: UPDATE (state)",
        "idemctl_reclaimer: UPDATE (response_status)",
        "idemctl_reclaimer: UPDATE (response_body)",
        "idemctl_reclaimer: UPDATE (expires_at)",
    ];
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_can_inspect_stats_and_check_and_changes_nothing() {
    let db = db_with_roles(MIX).await;
    let mut logins = Logins::new(&db);
    let reader = logins.create(&db, "reader", &[READER], "").await;
    let before = snapshot(&db).await;
    let (tenant, key) = before.keys().next().cloned().unwrap();

    let run = as_role(&db, &reader)
        .args(["inspect", &key, "--api-key-id", &tenant, "-o", "json"])
        .run();
    run.assert_success().assert_stderr_empty();
    assert_eq!(run.json()["key"], key.as_str(), "{run}");

    let run = as_role(&db, &reader)
        .args(["stats", "--allow-scan", "-o", "json"])
        .run();
    run.assert_success().assert_stderr_empty();
    assert_eq!(run.json()["expired_backlog"]["count"], 300, "{run}");

    let run = as_role(&db, &reader).args(["check", "-o", "json"]).run();
    run.assert_success();
    let findings = run.json();
    let status = |check: &str| fixtures::finding(&findings, check)["status"].clone();
    assert_eq!(status("privileges: inspect, stats, check"), "ok", "{run}");
    assert_eq!(status("privileges: evict"), "note", "{run}");

    // reclaim's and evict's previews only read.
    let run = as_role(&db, &reader)
        .args(["reclaim", "--dry-run", "-o", "json"])
        .run();
    run.assert_success().assert_stderr_empty();
    let run = as_role(&db, &reader)
        .args(["evict", "--dry-run", "-o", "json"])
        .run();
    run.assert_success().assert_stderr_empty();
    assert!(
        run.json()["plan"][0]
            .as_str()
            .unwrap()
            .contains("needs the DELETE privilege"),
        "{run}"
    );
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evictor_can_evict_and_skip_a_row_held_by_a_live_request() {
    let db = db_with_roles(MIX).await;
    let mut logins = Logins::new(&db);
    let evictor = logins.create(&db, "evictor", &[EVICTOR], "").await;
    let before = snapshot(&db).await;

    // A retry of one expired key holds its row, as the API's SELECT ... FOR UPDATE does, so evict
    // must take the FOR UPDATE SKIP LOCKED path: the one that needs UPDATE (expires_at).
    let live = db.client().await;
    let held = live
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys \
             WHERE state = 'completed' AND expires_at < now() \
             ORDER BY expires_at OFFSET 100 LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let held: (String, String) = (held.get(0), held.get(1));
    live.batch_execute("BEGIN").await.unwrap();
    live.execute(
        "SELECT 1 FROM idempotency_keys WHERE api_key_id = $1 AND key = $2 FOR UPDATE",
        &[&held.0, &held.1],
    )
    .await
    .unwrap();

    let run = as_role(&db, &evictor)
        .args(["evict", "-o", "json", "--batch-size", "50"])
        .timeout(Duration::from_secs(30))
        .run_async()
        .await;
    live.batch_execute("COMMIT").await.unwrap();
    run.assert_success();
    let j = run.json();
    assert_eq!(j["rows_evicted"], 299, "{run}");
    assert_eq!(j["skipped_locked"], 1, "{run}");
    assert!(j["lock_fallbacks"].as_u64().unwrap() >= 1, "{run}");

    // Exactly the evictable rows went, except the held one; nothing else changed.
    let want: BTreeMap<(String, String), Seen> = before
        .into_iter()
        .filter(|(k, s)| !fixtures::evictable(s) || *k == held)
        .collect();
    assert_eq!(snapshot(&db).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimer_can_reclaim_with_either_action() {
    let db = db_with_roles(MIX).await;
    let mut logins = Logins::new(&db);
    let reclaimer = logins.create(&db, "reclaimer", &[RECLAIMER], "").await;
    // check agrees that the column grants of sql/roles.sql are enough for both actions.
    let run = as_role(&db, &reclaimer).args(["check", "-o", "json"]).run();
    let finding = fixtures::finding(&run.json(), "privileges: reclaim").clone();
    assert_eq!(finding["status"], "ok", "{run}");
    let reclaim = |action: &str| {
        as_role(&db, &reclaimer).args([
            "reclaim",
            "--yes",
            "--allow-scan",
            "--action",
            action,
            "-o",
            "json",
        ])
    };

    // --action fail: the stuck keys become completed with the stored error; nothing else changes.
    let before = snapshot(&db).await;
    let failed = stuck_keys(&db).await;
    assert_eq!(failed.len(), 16);
    reclaim("fail").run_async().await.assert_success();
    let after = snapshot(&db).await;
    for (k, seen) in &before {
        if failed.contains(k) {
            assert_eq!(after[k].state, "completed", "{k:?}");
        } else {
            assert_eq!(after.get(k), Some(seen), "{k:?} changed");
        }
    }
    let stored: i64 = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE response_status = 500 \
             AND response_body IS NOT NULL AND state = 'completed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 16);

    // --action delete, on new stuck keys, one of them held by its (live) owner: skipped.
    fixtures::load(
        &db,
        Mix {
            stuck: 6,
            ..Mix::default()
        },
    )
    .await;
    let doomed: Vec<Key> = stuck_keys(&db).await.into_iter().collect();
    assert_eq!(doomed.len(), 6);
    let owner = hold_row(&db, &doomed[0]).await;
    let before = snapshot(&db).await;
    let run = reclaim("delete")
        .timeout(Duration::from_secs(30))
        .run_async()
        .await;
    owner.batch_execute("COMMIT").await.unwrap();
    run.assert_success();
    let want: BTreeMap<(String, String), Seen> = before
        .into_iter()
        .filter(|(k, _)| !doomed[1..].contains(k))
        .collect();
    assert_eq!(snapshot(&db).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lesser_roles_are_refused_before_any_change() {
    let db = db_with_roles(MIX).await;
    let mut logins = Logins::new(&db);
    let reader = logins.create(&db, "reader", &[READER], "").await;
    let evictor = logins.create(&db, "evictor", &[EVICTOR], "").await;
    let nobody = logins.create(&db, "nobody", &[], "").await;
    // SELECT and DELETE, but no column it may update: it cannot lock rows.
    let no_locks = logins
        .create(
            &db,
            "nolocks",
            &[],
            "GRANT SELECT, DELETE ON idempotency_keys TO {role}",
        )
        .await;
    let before = snapshot(&db).await;

    let run = as_role(&db, &reader).arg("evict").run();
    assert_denied(
        &run,
        &[
            &reader,
            "lacks DELETE, UPDATE (expires_at)",
            "GRANT DELETE, UPDATE (expires_at) ON",
        ],
    );
    let run = as_role(&db, &no_locks).arg("evict").run();
    assert_denied(&run, &[&no_locks, "lacks UPDATE (expires_at)"]);

    let fail_columns = "lacks UPDATE (state), UPDATE (response_status), UPDATE (response_body)";
    let reader_fail = format!("{fail_columns}, UPDATE (expires_at)");
    for (role, action, missing) in [
        (&reader, "delete", "lacks DELETE, UPDATE (state)"),
        (&reader, "fail", reader_fail.as_str()),
        (&evictor, "fail", fail_columns),
    ] {
        let run = as_role(&db, role)
            .args(["reclaim", "--yes", "--allow-scan", "--action", action])
            .run();
        let which = format!("which reclaim --action {action} needs");
        assert_denied(&run, &[role, missing, &which]);
    }

    for args in [
        &["stats"][..],
        &["inspect", "some-key", "--api-key-id", "tenant_1"],
    ] {
        let run = as_role(&db, &nobody).args(args).run();
        assert_denied(
            &run,
            &["lacks SELECT on public.idempotency_keys", "GRANT SELECT ON"],
        );
    }

    assert_eq!(snapshot(&db).await, before);
}

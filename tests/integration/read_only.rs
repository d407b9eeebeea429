//! Writing commands on a session that cannot write (a role with default_transaction_read_only, a
//! hot standby) refuse before any work with one line and exit 6; `check` says so; read commands
//! still work there.

use crate::fixtures::{self, Mix, Schema, scalar_i64};
use crate::support::TestDb;
use crate::support::pg::connect;
use crate::support::replica::ReplicaPair;

const WRITING: &[&[&str]] = &[
    &["evict"],
    &["reclaim", "--yes", "--allow-scan", "-q"],
    &["reclaim", "--yes", "--allow-scan", "-q", "--action", "fail"],
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_commands_refuse_a_read_only_role_before_any_work_and_check_says_so() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 50,
            stuck: 10,
            ..Mix::default()
        },
    )
    .await;
    db.exec(
        "CREATE ROLE ro_maint LOGIN; GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO ro_maint; \
         ALTER ROLE ro_maint SET default_transaction_read_only = on",
    )
    .await;
    let url = db.url_with(&[("user", "ro_maint")]);
    for args in WRITING {
        let run = db
            .idemctl()
            .env("IDEMCTL_DATABASE_URL", &url)
            .args(args.iter().copied())
            .run_async()
            .await;
        run.assert_code(6)
            .assert_stdout_empty()
            .assert_stderr_contains(
                "cannot run here, nothing was changed: the session is read-only",
            );
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
    }
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        60
    );
    // Read commands and previews still work.
    for args in [
        &["stats"][..],
        &["evict", "--dry-run"],
        &["reclaim", "--dry-run", "--allow-scan"],
    ] {
        db.idemctl()
            .env("IDEMCTL_DATABASE_URL", &url)
            .args(args.iter().copied())
            .run_async()
            .await
            .assert_code(0);
    }
    let check = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["check", "-o", "plain"])
        .run_async()
        .await;
    check.assert_stdout_contains(
        "writes\tnote\tevict and reclaim refuse to run here: the session is read-only",
    );
    let writable = db
        .idemctl()
        .args(["check", "-o", "plain"])
        .run_async()
        .await;
    writable.assert_stdout_contains("writes\tok\tthe session can write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_commands_refuse_a_standby_before_any_work() {
    let pair = ReplicaPair::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start a primary and a standby: {e}"));
    let primary = connect(&pair.primary_url()).await;
    primary
        .batch_execute(Schema::Corrected.ddl())
        .await
        .unwrap();
    primary
        .batch_execute(&fixtures::expired_rows_sql(20))
        .await
        .unwrap();
    pair.wait_caught_up(&primary).await;
    for args in WRITING {
        let run = crate::support::Cmd::new()
            .env("IDEMCTL_DATABASE_URL", pair.standby_url())
            .args(args.iter().copied())
            .run_async()
            .await;
        run.assert_code(6).assert_stderr_contains(
            "cannot run here, nothing was changed: the server is a standby",
        );
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
    }
    let check = crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", pair.standby_url())
        .args(["check", "-o", "plain"])
        .run_async()
        .await;
    check.assert_stdout_contains(
        "writes\tnote\tevict and reclaim refuse to run here: the server is a standby",
    );
}

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
    // The privilege rows do not promise what the writers will refuse (exit 6), in JSON neither.
    for (row, command) in [
        ("privileges: evict", "evict"),
        ("privileges: reclaim", "reclaim"),
    ] {
        let line = check
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{row}\t")))
            .unwrap_or_else(|| panic!("no {row} row\n{check}"));
        assert!(
            line.starts_with(&format!("{row}\tnote\t"))
                && line.contains(&format!(
                    "but {command} refuses to run here (exit 6): the session is read-only"
                ))
                && line.contains("connect as a role without it"),
            "{line}"
        );
    }
    let json = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["check", "-o", "json"])
        .run_async()
        .await
        .json();
    for row in ["privileges: evict", "privileges: reclaim"] {
        let found = json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["check"] == row)
            .unwrap_or_else(|| panic!("no finding {row}: {json}"));
        assert_eq!(found["status"], "note", "{found}");
        assert!(
            found["detail"]
                .as_str()
                .unwrap()
                .contains("refuses to run here (exit 6): the session is read-only"),
            "{found}"
        );
    }
    let writable = db
        .idemctl()
        .args(["check", "-o", "plain"])
        .run_async()
        .await;
    writable.assert_stdout_contains("writes\tok\tthe session can write");
    writable.assert_stdout_contains("privileges: evict\tok\t");
    writable.assert_stdout_contains("privileges: reclaim\tok\t");
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
    // How each of WRITING's runs names itself.
    let named = ["evict", "reclaim --action delete", "reclaim --action fail"];
    for (args, name) in WRITING.iter().zip(named) {
        let run = crate::support::Cmd::new()
            .env("IDEMCTL_DATABASE_URL", pair.standby_url())
            .args(args.iter().copied())
            .run_async()
            .await;
        run.assert_error(6, &format!("{name} cannot run here, nothing was changed: the server is a standby (in recovery); connect to the primary (for example with target_session_attrs=read-write)"));
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

/// `target_session_attrs` picks the server among several hosts as libpq does: `prefer-standby`
/// takes the standby even when the primary is listed first, and the primary when no standby is
/// listed; `standby` with no standby listed cannot connect; `primary` skips a standby listed first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_session_attrs_choose_among_hosts_like_libpq() {
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
    let check = |url: String| async move {
        crate::support::Cmd::new()
            .env("IDEMCTL_DATABASE_URL", url)
            .args(["check", "-o", "plain"])
            .run_async()
            .await
    };
    let on_standby = "writes\tnote\tevict and reclaim refuse to run here: the server is a standby";
    let on_primary = "writes\tok\tthe session can write";

    check(pair.both_url("target_session_attrs=prefer-standby"))
        .await
        .assert_stdout_contains(on_standby);
    check(pair.both_url("target_session_attrs=any"))
        .await
        .assert_stdout_contains(on_primary);
    check(format!(
        "{} target_session_attrs=prefer-standby",
        pair.primary_url()
    ))
    .await
    .assert_stdout_contains(on_primary);

    // Through PGTARGETSESSIONATTRS as well, and evict runs on the primary it falls back to.
    let evict = crate::support::Cmd::new()
        .env("IDEMCTL_DATABASE_URL", pair.primary_url())
        .env("PGTARGETSESSIONATTRS", "prefer-standby")
        .args(["evict", "-q"])
        .run_async()
        .await;
    evict.assert_code(0);
    assert_eq!(
        primary
            .query_one("SELECT count(*) FROM idempotency_keys", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0,
        "evict through prefer-standby on a lone primary deletes the expired rows"
    );

    let standby_only = crate::support::Cmd::new()
        .env(
            "IDEMCTL_DATABASE_URL",
            format!("{} target_session_attrs=standby", pair.primary_url()),
        )
        .args(["stats"])
        .run_async()
        .await;
    standby_only.assert_code(5);
    check(format!(
        "host={dir},{dir} port={s},{p} user=postgres dbname=postgres target_session_attrs=primary",
        dir = pair.dir.display(),
        s = 5433,
        p = 5432
    ))
    .await
    .assert_stdout_contains(on_primary);
}

/// psql on the same conninfo: whether it connected, and its first stderr line.
fn psql(conninfo: &str) -> crate::support::Run {
    crate::support::Cmd::of("/usr/bin/psql")
        .args([
            "-X",
            "-w",
            "-A",
            "-t",
            "-c",
            "select pg_is_in_recovery()",
            "-d",
        ])
        .arg(conninfo)
        .timeout(std::time::Duration::from_secs(30))
        .run()
}

/// libpq 14+ tells the session from the server: a role with default_transaction_read_only on the
/// primary is a read-only *session* on a *primary*. `standby` then skips it for the real standby
/// (and refuses it alone, in libpq's words), `primary` accepts it (and the writers refuse with
/// their documented exit 6), `read-write` refuses both servers. Each outcome is psql's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_session_attrs_tell_a_read_only_role_from_a_standby_like_psql() {
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
    primary
        .batch_execute(
            "CREATE ROLE ro_tsa LOGIN; GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO ro_tsa; \
             ALTER ROLE ro_tsa SET default_transaction_read_only = on",
        )
        .await
        .unwrap();
    pair.wait_caught_up(&primary).await;
    let ro = |url: String, attrs: &str| {
        format!(
            "{} user=ro_tsa target_session_attrs={attrs}",
            url.replace("user=postgres", "")
        )
    };
    let run = |conninfo: String, args: &'static [&'static str]| async move {
        crate::support::Cmd::new()
            .env("IDEMCTL_DATABASE_URL", conninfo)
            .args(args.iter().copied())
            .args(["--connect-timeout", "5s"])
            .run_async()
            .await
    };

    // standby over "primary,standby": the standby, as psql.
    let both_standby = ro(pair.both_url(""), "standby");
    let theirs = psql(&both_standby);
    assert_eq!((theirs.code, theirs.stdout.trim()), (0, "t"), "{theirs}");
    run(both_standby, &["check", "-o", "plain"])
        .await
        .assert_stdout_contains(
            "writes\tnote\tevict and reclaim refuse to run here: the server is a standby",
        );

    // standby on the primary alone: refused, as psql refuses it.
    let lone_standby = ro(pair.primary_url(), "standby");
    let theirs = psql(&lone_standby);
    assert_ne!(theirs.code, 0, "{theirs}");
    assert!(
        theirs.stderr.contains("server is not in hot standby mode"),
        "{theirs}"
    );
    let ours = run(lone_standby, &["stats"]).await;
    ours.assert_code(5)
        .assert_stderr_contains("server is not in hot standby mode");
    assert_eq!(ours.stderr.lines().count(), 1, "{ours}");

    // primary accepts the read-only role on the primary, as psql; writers then refuse with 6.
    let lone_primary = ro(pair.primary_url(), "primary");
    let theirs = psql(&lone_primary);
    assert_eq!((theirs.code, theirs.stdout.trim()), (0, "f"), "{theirs}");
    run(lone_primary.clone(), &["check", "-o", "plain"])
        .await
        .assert_stdout_contains(
            "writes\tnote\tevict and reclaim refuse to run here: the session is read-only",
        );
    let evict = run(lone_primary, &["evict"]).await;
    evict
        .assert_code(6)
        .assert_stderr_contains("cannot run here, nothing was changed: the session is read-only");

    // read-write: both sessions are read-only, so neither fits.
    let both_rw = ro(pair.both_url(""), "read-write");
    let theirs = psql(&both_rw);
    assert_ne!(theirs.code, 0, "{theirs}");
    assert!(theirs.stderr.contains("session is read-only"), "{theirs}");
    let ours = run(both_rw, &["stats"]).await;
    ours.assert_code(5)
        .assert_stderr_contains("session is read-only");
    assert_eq!(ours.stderr.lines().count(), 1, "{ours}");
    assert_eq!(
        primary
            .query_one("SELECT count(*) FROM idempotency_keys", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        20
    );
}

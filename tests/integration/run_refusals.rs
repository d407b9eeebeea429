//! The commands' refusals and failures, each asserted exactly (the one stderr line and the exit
//! code): reclaim's flags and plan files refused before connecting, and the steps of a run that a
//! real fault ends (a function the role may no longer execute, a trigger that raises).

use crate::fixtures::{self, Mix, Schema};
use crate::support::{Cmd, TestDb};

/// A conninfo nothing listens on: a refusal seen with it was made before connecting.
const NOWHERE: &str = "host=/nonexistent/idemctl-test port=1 dbname=none connect_timeout=1";

fn nowhere() -> Cmd {
    Cmd::new().env("IDEMCTL_DATABASE_URL", NOWHERE)
}

/// reclaim refuses, before connecting, a writing run it cannot confirm and an empty filter.
#[test]
fn reclaim_refuses_an_unconfirmed_run_and_an_empty_filter_in_exact_words() {
    nowhere()
        .args(["reclaim"])
        .stdin_bytes("")
        .run()
        .assert_error(
            2,
            "refusing to reclaim without confirmation: there is no terminal to ask on; review \
         `idemctl reclaim --dry-run`, then pass --yes",
        );
    for flag in ["--api-key-id", "--path", "--method"] {
        nowhere()
            .args(["reclaim", "--dry-run", flag, ""])
            .run()
            .assert_error(
                2,
                &format!(
                    "{flag} is empty: give the value as the API stores it, or drop the flag; \
                     nothing was changed"
                ),
            );
    }
}

/// A plan file whose fields contradict each other is refused before connecting, naming what is
/// wrong with it.
#[test]
fn reclaim_refuses_a_plan_whose_fields_do_not_fit_in_exact_words() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            r#"{"schema_version":1,"table":"public.idempotency_keys","older_than_seconds":0,"action":"delete","rows":[]}"#,
            "older_than_seconds must be a positive number",
        ),
        (
            r#"{"schema_version":1,"table":"public.idempotency_keys","older_than_seconds":300,"action":"fail","rows":[]}"#,
            "action fail needs a JSON object as body",
        ),
        (
            r#"{"schema_version":1,"table":"public.idempotency_keys","older_than_seconds":300,"action":"release","body":{},"rows":[]}"#,
            "actions delete and release take no body",
        ),
    ];
    for (i, (plan, why)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("plan{i}.json"));
        std::fs::write(&path, plan).unwrap();
        nowhere()
            .args(["reclaim", "--yes", "--apply"])
            .arg(&path)
            .run()
            .assert_error(
                2,
                &format!(
                    "plan {} is not a valid reclaim plan ({why}); nothing was changed, make a new \
                     one with --plan",
                    path.display()
                ),
            );
    }
}

/// The index reclaim asks for, so that a run says nothing else before the line under test.
const IN_PROGRESS_INDEX: &str = "CREATE INDEX idempotency_keys_in_progress ON idempotency_keys \
    ((coalesce(locked_at, created_at))) WHERE state = 'in_progress'";

/// A table with expired, live and stuck keys, its in_progress index, and a role that may run
/// evict and reclaim on it; returns the role's conninfo.
async fn table_and_role(db: &TestDb) -> (String, String) {
    let mix = Mix {
        expired: 20,
        live: 5,
        stuck: 4,
        ..Mix::default()
    };
    fixtures::table_with(db, Schema::Corrected, mix).await;
    db.exec(IN_PROGRESS_INDEX).await;
    let role = format!("{}_runner", db.name());
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA public TO {role}; \
         GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO {role}"
    ))
    .await;
    let url = db.url_with(&[("user", &role)]);
    (role, url)
}

async fn drop_role(db: &TestDb, role: &str) {
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
}

/// A database where the role may not execute pg_try_advisory_lock (an administrator's REVOKE):
/// evict and a writing reclaim end at the maintenance lock, exit 6, before changing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_lock_the_role_may_not_take_ends_the_run_naming_the_step() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    db.exec("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_try_advisory_lock(int, int) FROM PUBLIC")
        .await;
    let before = fixtures::snapshot(&db).await;
    for args in [&["evict"][..], &["reclaim", "--yes"]] {
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", &url)
            .args(args)
            .run_async()
            .await
            .assert_error(
                6,
                "failed to take the maintenance lock: permission denied for function \
                 pg_try_advisory_lock",
            );
    }
    assert_eq!(fixtures::snapshot(&db).await, before);
    drop_role(&db, &role).await;
}

/// A reclaim batch the server refuses (a trigger raising an error) or that cannot get its locks
/// (a session holding the table in SHARE mode) is rolled back; the line says what the earlier
/// batches did and to run reclaim again, exit 1, and no key was changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_batch_that_fails_is_rolled_back_in_exact_words() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    let before = fixtures::snapshot(&db).await;
    db.exec(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'keys are kept for the audit'; END $$; \
         CREATE TRIGGER refuse BEFORE UPDATE OR DELETE ON idempotency_keys \
           FOR EACH ROW EXECUTE FUNCTION refuse();",
    )
    .await;
    for action in ["fail", "delete"] {
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", &url)
            .args(["reclaim", "--yes", "--action", action])
            .run_async()
            .await
            .assert_error(
                1,
                "batch 1 failed and was rolled back (0 keys were reclaimed by earlier batches); \
                 run reclaim again: keys are kept for the audit",
            );
    }
    db.exec("DROP TRIGGER refuse ON idempotency_keys").await;

    let admin = db.client().await;
    admin
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN SHARE MODE")
        .await
        .unwrap();
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["reclaim", "--yes"])
        .run_async()
        .await
        .assert_error(
            1,
            "batch 1 could not get a lock another session holds in 5 tries (a live transaction \
             holds a row it needs, or DDL holds the table) and was rolled back (0 keys were \
             reclaimed by earlier batches); run reclaim again: canceling statement due to lock \
             timeout",
        );
    admin.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(fixtures::snapshot(&db).await, before);
    drop_role(&db, &role).await;
}

/// A session holding the table in ACCESS EXCLUSIVE mode (a migration's ALTER TABLE): reading
/// the table's columns waits on it until --statement-timeout, and every command ends there in one
/// line naming the step, exit 1, having changed nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_held_by_ddl_ends_every_command_at_reading_its_columns() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    let admin = db.client().await;
    admin
        .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    for args in [
        &["stats"][..],
        &["check"],
        &["inspect", "k1", "--api-key-id", "a"],
        &["reclaim", "--dry-run"],
        &["reclaim", "--yes"],
        &["evict"],
        &["top", "--once"],
    ] {
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", &url)
            .args(["--statement-timeout", "1s"])
            .args(args)
            .run_async()
            .await
            .assert_error(
                1,
                "failed to read the key table's columns: canceling statement due to statement \
                 timeout",
            );
    }
    admin.batch_execute("ROLLBACK").await.unwrap();
    drop_role(&db, &role).await;
}

/// reclaim's statements after a batch, failing for real: the role's SELECT on the table is
/// revoked while a batch's DELETE is held by a trigger. With one batch for every stuck key, the
/// count after it fails; with batches of two, the next batch does. Either way one line names the
/// step, exit 6, and what the committed batches reclaimed stays reclaimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_after_a_reclaim_batch_that_fails_ends_the_run_naming_the_step() {
    let cases: [(&[&str], &str, i64); 2] = [
        (
            &[],
            "failed to count stuck in_progress keys: permission denied for table \
             idempotency_keys",
            0,
        ),
        (
            &["--batch-size", "2"],
            "batch 2 failed and was rolled back (2 keys were reclaimed by earlier batches); run \
             reclaim again: permission denied for table idempotency_keys",
            2,
        ),
    ];
    for (args, says, left) in cases {
        let db = TestDb::new().await;
        let (role, url) = table_and_role(&db).await;
        fixtures::hold_deletes(&db).await;
        let reclaim = Cmd::new()
            .env("IDEMCTL_DATABASE_URL", &url)
            .args(["reclaim", "--yes", "--action", "delete"])
            .args(args)
            .spawn();
        let revoke = format!("REVOKE SELECT ON idempotency_keys FROM {role}");
        fixtures::while_a_delete_is_held(&db, &role, &revoke).await;
        let run = reclaim.wait_async().await;
        drop_role(&db, &role).await;
        run.assert_error(6, says);
        let stuck = fixtures::scalar_i64(
            &db,
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress'",
        )
        .await;
        assert_eq!(stuck, left, "{args:?}\n{run}");
    }
}

/// reclaim's connection ended by the server (pg_terminate_backend) while a batch's DELETE is held
/// by a trigger: the run cannot know whether that batch committed, says so with how many keys it
/// held at most and the server's reason, exit 1; running reclaim again takes what is still stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_whose_connection_is_terminated_mid_batch_says_what_may_have_committed() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    fixtures::hold_deletes(&db).await;
    let reclaim = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args([
            "reclaim",
            "--yes",
            "--action",
            "delete",
            "--batch-size",
            "3",
        ])
        .spawn();
    let terminate =
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'");
    fixtures::while_a_delete_is_held(&db, &role, &terminate).await;
    reclaim.wait_async().await.assert_error(
        1,
        "reclaim lost its connection: 0 keys reclaimed by batches whose commit the server \
         confirmed; the batch in flight (3 keys at most) may or may not have committed: run \
         reclaim again, which takes what is still stuck: the server ended the connection: \
         terminating connection due to administrator command (SQLSTATE 57P01)",
    );
    db.exec("DROP TRIGGER hold_delete ON idempotency_keys")
        .await;
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["reclaim", "--yes", "--action", "delete"])
        .run_async()
        .await
        .assert_success();
    let stuck = fixtures::scalar_i64(
        &db,
        "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress'",
    )
    .await;
    assert_eq!(stuck, 0);
    drop_role(&db, &role).await;
}

/// A table whose primary key was dropped has no index that finds a key, with its tenant or
/// without: inspect refuses either way rather than read the whole table, exit 2, and names the one
/// index that serves both lookups (not --api-key-id, which would meet the same refusal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_on_a_table_with_no_key_index_names_the_index_to_create() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    db.exec("ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey")
        .await;
    let create = "CREATE INDEX CONCURRENTLY \"idempotency_keys_scope\" ON \
                  \"public\".\"idempotency_keys\" (api_key_id, key);";
    let inspect = |args: &[&str]| {
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", &url)
            .arg("inspect")
            .args(args)
            .run()
    };
    inspect(&["k1"]).assert_error(
        2,
        &format!(
            "table public.idempotency_keys has no index that finds a key, with its tenant or \
             without; create: {create}"
        ),
    );
    inspect(&["--api-key-id", "tenant_1", "k1"]).assert_error(
        2,
        &format!(
            "table public.idempotency_keys has no index on its scope and key (api_key_id, key), \
             so a key cannot be looked up without a scan; create it with: {create}"
        ),
    );
    drop_role(&db, &role).await;
}

/// A database where an administrator revoked EXECUTE on a server function idemctl calls: the
/// command ends at the step that calls it, in one line naming the step and the server's refusal,
/// exit 6 (a privilege), before changing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_function_the_role_may_not_execute_ends_the_run_naming_the_step() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    let before = fixtures::snapshot(&db).await;
    let cases: [(&str, &[&[&str]], &str); 11] = [
        (
            "to_regclass(text)",
            &[&["stats"]],
            "failed to check for the citus extension",
        ),
        (
            "current_schemas(boolean)",
            &[&["inspect", "--api-key-id", "tenant_1", "k1"]],
            "failed to look up the key table in the catalog",
        ),
        (
            "format_type(oid, integer)",
            &[&["evict", "--dry-run"]],
            "failed to read the key table's columns",
        ),
        (
            "pg_get_indexdef(oid, integer, boolean)",
            &[&["reclaim", "--dry-run"]],
            "failed to read the key table's indexes",
        ),
        (
            "pg_get_function_identity_arguments(oid)",
            &[&["top", "--once"]],
            "failed to read the role's privileges",
        ),
        (
            "pg_has_role(name, text)",
            &[&["evict"]],
            "failed to set up evict's pace: failed to check whether this role may read other \
             sessions' activity",
        ),
        (
            "pg_is_in_recovery()",
            &[&["evict"], &["reclaim", "--yes"], &["check"]],
            "failed to check whether the session can write",
        ),
        (
            "pg_options_to_table(text[])",
            &[&["stats"], &["check"], &["top", "--once"]],
            "failed to read the autovacuum settings",
        ),
        (
            "pg_blocking_pids(int)",
            &[&["top", "--once"]],
            "failed to list the sessions waiting for a key's row",
        ),
        (
            "pg_stat_get_tuples_inserted(oid)",
            &[&["stats"], &["top", "--once"]],
            "failed to read vacuum statistics",
        ),
        (
            "clock_timestamp()",
            &[&["top", "--once"]],
            "failed to list idemctl's sessions",
        ),
    ];
    for (function, commands, step) in cases {
        db.exec(&format!(
            "REVOKE EXECUTE ON FUNCTION pg_catalog.{function} FROM PUBLIC"
        ))
        .await;
        let name = function.split('(').next().unwrap();
        for args in commands {
            Cmd::new()
                .env("IDEMCTL_DATABASE_URL", &url)
                .args(*args)
                .run_async()
                .await
                .assert_error(6, &format!("{step}: permission denied for function {name}"));
        }
        db.exec(&format!(
            "GRANT EXECUTE ON FUNCTION pg_catalog.{function} TO PUBLIC"
        ))
        .await;
    }
    assert_eq!(fixtures::snapshot(&db).await, before);
    drop_role(&db, &role).await;
}

/// A DELETE that outlasts statement_timeout even for one row (a slow trigger): evict halves its
/// batches down to one row, then ends naming the timeout in force and what set it, exit 1, with
/// nothing deleted. Each place a statement_timeout can come from is named as a DBA would look for
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_one_row_over_statement_timeout_names_what_set_it() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    db.exec(
        "CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM pg_sleep(2); RETURN OLD; END $$; \
         CREATE TRIGGER slow_delete BEFORE DELETE ON idempotency_keys \
           FOR EACH ROW EXECUTE FUNCTION slow_delete();",
    )
    .await;
    let before = fixtures::snapshot(&db).await;
    let name = db.name().to_owned();
    let cases = [
        (
            format!("ALTER ROLE {role} SET statement_timeout = '1s'"),
            format!("ALTER ROLE {role} RESET statement_timeout"),
            None,
            "ALTER ROLE ... SET statement_timeout",
        ),
        (
            format!("ALTER DATABASE {name} SET statement_timeout = '1s'"),
            format!("ALTER DATABASE {name} RESET statement_timeout"),
            None,
            "ALTER DATABASE ... SET statement_timeout",
        ),
        (
            format!("ALTER ROLE {role} IN DATABASE {name} SET statement_timeout = '1s'"),
            format!("ALTER ROLE {role} IN DATABASE {name} RESET statement_timeout"),
            None,
            "ALTER ROLE ... IN DATABASE ... SET statement_timeout",
        ),
        (
            "SELECT".to_owned(),
            "SELECT".to_owned(),
            Some("-c statement_timeout=1s"),
            "the connection's options (PGOPTIONS or options=-c)",
        ),
    ];
    for (set, reset, pgoptions, set_by) in cases {
        db.exec(&set).await;
        let mut evict = Cmd::new().env("IDEMCTL_DATABASE_URL", &url);
        if let Some(options) = pgoptions {
            evict = evict.env("PGOPTIONS", options);
        }
        let run = evict
            .args(["evict", "--batch-size", "4", "--duty-cycle", "100"])
            .run_async()
            .await;
        db.exec(&reset).await;
        run.assert_error(
            1,
            &format!(
                "a batch of one row exceeded statement_timeout (1s, set by {set_by}) after the \
                 batches were made smaller; nothing of it was deleted: raise \
                 --statement-timeout: canceling statement due to statement timeout"
            ),
        );
    }
    assert_eq!(fixtures::snapshot(&db).await, before);
    drop_role(&db, &role).await;
}

/// EXECUTE on pg_logical_emit_message revoked while evict's first batch is held by a trigger (it
/// was granted when evict checked at the start): the durable point after the batch fails, and the
/// run ends naming that step, exit 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_point_that_fails_ends_evict_naming_the_step() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    fixtures::hold_deletes(&db).await;
    let evict = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["evict", "--batch-size", "5", "--duty-cycle", "20"])
        .spawn();
    fixtures::while_a_delete_is_held(
        &db,
        &role,
        "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text) \
         FROM PUBLIC",
    )
    .await;
    let run = evict.wait_async().await;
    drop_role(&db, &role).await;
    run.assert_error(
        6,
        "failed to make the deleted rows durable: permission denied for function \
         pg_logical_emit_message",
    );
}

/// Pointed at a hot standby, the writing commands refuse before changing anything and say to
/// connect to the primary, exit 6; the reading ones (a dry run, stats) run there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writing_commands_on_a_standby_say_to_connect_to_the_primary() {
    use crate::support::replica::ReplicaPair;
    let pair = ReplicaPair::start().await.unwrap_or_else(|e| panic!("{e}"));
    let primary = crate::support::connect(&pair.primary_url()).await;
    primary
        .batch_execute(Schema::Corrected.ddl())
        .await
        .unwrap();
    primary
        .batch_execute(&fixtures::expired_rows_sql(30))
        .await
        .unwrap();
    primary.batch_execute(IN_PROGRESS_INDEX).await.unwrap();
    pair.wait_caught_up(&primary).await;
    let standby = || Cmd::new().env("IDEMCTL_DATABASE_URL", pair.standby_url());
    let why = "nothing was changed: the server is a standby (in recovery); connect to the primary \
               (for example with target_session_attrs=read-write)";
    standby()
        .args(["evict"])
        .run_async()
        .await
        .assert_error(6, &format!("evict cannot run here, {why}"));
    standby()
        .args(["reclaim", "--yes"])
        .run_async()
        .await
        .assert_error(
            6,
            &format!("reclaim --action delete cannot run here, {why}"),
        );
    for args in [&["evict", "--dry-run"][..], &["stats"]] {
        standby().args(args).run_async().await.assert_success();
    }
}

/// A table referencing the keys ON DELETE CASCADE, its rows locked by a live transaction: evict's
/// batch waits on a row it must delete with the key, gives up at lock_timeout and is rolled back;
/// the line says a live transaction holds a row, exit 1, and no key was deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evict_batch_that_waits_on_a_locked_row_is_rolled_back_in_exact_words() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    db.exec(&format!(
        "CREATE TABLE charges (id serial PRIMARY KEY, api_key_id text, key text, \
           FOREIGN KEY (api_key_id, key) REFERENCES idempotency_keys ON DELETE CASCADE); \
         INSERT INTO charges (api_key_id, key) SELECT api_key_id, key FROM idempotency_keys \
           WHERE expires_at < now() AND state = 'completed'; \
         GRANT SELECT, DELETE ON charges TO {role}"
    ))
    .await;
    let before = fixtures::snapshot(&db).await;
    let admin = db.client().await;
    admin
        .batch_execute("BEGIN; SELECT * FROM charges FOR UPDATE")
        .await
        .unwrap();
    let run = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", &url)
        .args(["evict", "--duty-cycle", "20"])
        .run_async()
        .await;
    admin.batch_execute("ROLLBACK").await.unwrap();
    drop_role(&db, &role).await;
    run.assert_error(
        1,
        "a batch could not lock a row within lock_timeout (a live transaction holds it): \
         canceling statement due to lock timeout",
    );
    assert_eq!(fixtures::snapshot(&db).await, before);
}

/// A row-level security policy that reads an application setting idemctl's sessions never set
/// (a common way to scope a shared table by tenant): the catalog reads pass, and each command's
/// first read of the rows fails with the server's error, named by that step, exit 1, nothing
/// changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_security_policy_that_fails_ends_each_command_at_its_first_read() {
    let db = TestDb::new().await;
    let (role, url) = table_and_role(&db).await;
    db.exec(
        "ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY; \
         CREATE POLICY tenant ON idempotency_keys \
           USING (api_key_id = current_setting('app.tenant_id'))",
    )
    .await;
    let before = fixtures::snapshot(&db).await;
    let cases: [(&[&str], &str); 6] = [
        (&["evict", "--dry-run"], "preview the eviction"),
        (
            &["evict", "--duty-cycle", "20"],
            "find the next batch's range",
        ),
        (&["reclaim", "--dry-run"], "list stuck in_progress keys"),
        (&["reclaim", "--yes"], "count stuck in_progress keys"),
        (&["stats"], "find the oldest live key"),
        (
            &["inspect", "--api-key-id", "tenant_1", "k1"],
            "read the key",
        ),
    ];
    for (args, step) in cases {
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", &url)
            .args(args)
            .run_async()
            .await
            .assert_error(
                1,
                &format!(
                    "failed to {step}: unrecognized configuration parameter \"app.tenant_id\""
                ),
            );
    }
    assert_eq!(fixtures::snapshot(&db).await, before);
    drop_role(&db, &role).await;
}

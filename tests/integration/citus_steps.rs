//! Each step idemctl takes on a Citus cluster made to fail for real, and its whole error line
//! asserted with its exit code: a [`Tripwire`] breaks the connection at the step's statement, on
//! the coordinator (idemctl is pointed at the proxy) or on a worker (the coordinator's
//! `pg_dist_node` entry for the worker is pointed at the proxy, so idemctl reaches the worker
//! through it). Several cases share one database: a case points the worker back at its port
//! before the next one starts. Also check's findings on the shards, asserted whole.

use crate::citus::{IN_PROGRESS_INDEX, MIX, loaded_with, snapshot};
use crate::support::citus::{CitusDb, Layout};
use crate::support::cmd::{Cmd, Run};
use crate::support::tripwire::{Tripwire, Upstream};

/// One run made to fail at one step: where the proxy sits, what breaks it, what the run says.
struct Case<'a> {
    /// What the case breaks, named when it fails.
    name: &'a str,
    args: Vec<String>,
    /// The pattern and at which sending of it the connection breaks.
    pattern: &'static [u8],
    nth: usize,
    /// The whole stderr line after `idemctl: `, `{port}` standing for the worker's address as
    /// idemctl reaches it (the proxy's port) and `{shard}` for the worker's first shard.
    line: &'a str,
    code: i32,
}

fn case<'a>(
    name: &'a str,
    args: &[&str],
    pattern: &'static [u8],
    nth: usize,
    code: i32,
    line: &'a str,
) -> Case<'a> {
    Case {
        name,
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        pattern,
        nth,
        line,
        code,
    }
}

/// Whether the run ended with exactly `code`, nothing on stdout and the one line `idemctl: line`;
/// otherwise what differs, naming the case.
fn differs(name: &str, run: &Run, code: i32, line: &str) -> Option<String> {
    let want = format!("idemctl: {line}\n");
    (run.code != code || !run.stdout.is_empty() || run.stderr != want)
        .then(|| format!("case {name}: expected exit {code} and stderr\n{want}got\n{run}"))
}

/// The key table distributed by api_key_id, loaded, with the in_progress index.
async fn distributed(test: &str) -> Option<CitusDb> {
    let db = loaded_with(Layout::ByTenant, MIX, test).await?;
    db.exec(IN_PROGRESS_INDEX).await;
    Some(db)
}

/// A tenant with stuck keys and a key of it.
async fn a_stuck_tenant(db: &CitusDb) -> (String, String) {
    let row = db
        .client()
        .await
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys WHERE state = 'in_progress' \
               AND coalesce(locked_at, created_at) < now() - interval '30 minutes' \
             ORDER BY api_key_id, key LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Run `cases` against the coordinator through a tripwire each; every change is checked absent.
async fn on_coordinator(db: &CitusDb, cases: Vec<Case<'_>>) {
    let port = db.cluster().coordinator().port;
    let before = snapshot(db).await;
    let mut wrong = Vec::new();
    for c in cases {
        let wire = Tripwire::start(Upstream::Tcp(port), c.pattern, c.nth);
        let url = db.url_with(&[("port", &wire.port().to_string()), ("sslmode", "disable")]);
        let run = Cmd::new()
            .env("IDEMCTL_DATABASE_URL", url)
            .args(&c.args)
            .run();
        if wire.seen() < c.nth {
            wrong.push(format!(
                "case {}: the pattern was sent {} times\n{run}",
                c.name,
                wire.seen()
            ));
        }
        wrong.extend(differs(c.name, &run, c.code, c.line));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(snapshot(db).await, before);
}

/// A worker of `db` reached through a tripwire: the coordinator's metadata names the proxy's port
/// for it until [`Detour::end`].
struct Detour<'a> {
    db: &'a CitusDb,
    wire: Tripwire,
    real: u16,
}

impl<'a> Detour<'a> {
    async fn start(
        db: &'a CitusDb,
        worker: usize,
        pattern: &'static [u8],
        nth: usize,
    ) -> Detour<'a> {
        let real = db.cluster().workers()[worker].port;
        let wire = Tripwire::start(Upstream::Tcp(real), pattern, nth);
        move_node(db, real, wire.port()).await;
        Detour { db, wire, real }
    }

    /// Point the metadata back at the worker's own port.
    async fn end(self) {
        move_node(self.db, self.wire.port(), self.real).await;
    }

    /// The first shard of the key table on the worker, by id (the first idemctl reads there).
    async fn first_shard(&self) -> i64 {
        self.db
            .client()
            .await
            .query_one(
                "SELECT min(shardid) FROM citus_shards \
                  WHERE table_name = 'idempotency_keys'::regclass AND nodeport = $1",
                &[&i32::from(self.wire.port())],
            )
            .await
            .unwrap()
            .get(0)
    }
}

/// Point the coordinator's metadata entry of the node on port `from` at port `to`.
async fn move_node(db: &CitusDb, from: u16, to: u16) {
    db.exec(&format!(
        "SELECT citus_update_node(nodeid, '127.0.0.1', {to}) FROM pg_dist_node WHERE nodeport = {from}"
    ))
    .await;
}

/// Run `cases` with the second worker reached through a tripwire each; every change is checked
/// absent.
async fn on_worker(db: &CitusDb, cases: Vec<Case<'_>>) {
    let before = snapshot(db).await;
    let mut wrong = Vec::new();
    for c in cases {
        let detour = Detour::start(db, 1, c.pattern, c.nth).await;
        let shard = detour.first_shard().await;
        let run = Cmd::new()
            .env(
                "IDEMCTL_DATABASE_URL",
                db.url_with(&[("sslmode", "disable")]),
            )
            .args(&c.args)
            .run();
        let line = c
            .line
            .replace("{port}", &detour.wire.port().to_string())
            .replace("{shard}", &shard.to_string());
        if detour.wire.seen() < c.nth {
            wrong.push(format!(
                "case {}: the pattern was sent {} times\n{run}",
                c.name,
                detour.wire.seen()
            ));
        }
        wrong.extend(differs(c.name, &run, c.code, &line));
        detour.end().await;
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(snapshot(db).await, before);
}

/// The steps on the coordinator of a distributed table, each broken at its statement: checking for
/// the extension, reading the distribution, listing the shards (stats), finding a tenant's shard
/// (inspect and reclaim --api-key-id), finding the plan's shards (reclaim --apply), reading
/// Citus's own sessions (evict). Each run ends with its whole line and exit code, and nothing
/// changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_steps_on_the_coordinator_fail_naming_the_step() {
    let Some(db) = distributed("citus coordinator steps").await else {
        return;
    };
    let (tenant, key) = a_stuck_tenant(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let plan_arg = plan.to_str().unwrap();
    db.idemctl()
        .args(["reclaim", "--plan", plan_arg, "--older-than", "30m"])
        .args(["--api-key-id", &tenant])
        .run()
        .assert_code(0);
    on_coordinator(
        &db,
        vec![
            case(
                "the citus extension",
                &["stats"],
                b"pg_dist_partition') IS NOT NULL",
                1,
                1,
                "failed to check for the citus extension: the connection was closed without a reason",
            ),
            case(
                "the distribution",
                &["stats"],
                b"p.partmethod::text AS method",
                1,
                1,
                "failed to read how Citus distributes the key table: the connection was closed without a reason",
            ),
            case(
                "the shards",
                &["stats"],
                b"-- Citus: the key table's shards and the active primary node",
                1,
                1,
                "failed to reach the key table's shards on the Citus workers: failed to list the key table's shards: the connection was closed without a reason",
            ),
            case(
                "the tenant's shard",
                &["inspect", &key, "--api-key-id", &tenant],
                b"holds a distribution-column value",
                1,
                1,
                "failed to find the shard that holds the tenant: the connection was closed without a reason",
            ),
            case(
                "the tenant's shard for reclaim",
                &["reclaim", "--yes", "--older-than", "30m", "--api-key-id", &tenant],
                b"holds a distribution-column value",
                1,
                1,
                "failed to find the shard that holds the tenant: the connection was closed without a reason",
            ),
            case(
                "the plan's shards",
                &["reclaim", "--yes", "--apply", plan_arg],
                b"holds each of a list of",
                1,
                1,
                "failed to find the shards that hold the plan's tenants: the connection was closed without a reason",
            ),
            case(
                "Citus's own sessions on the coordinator",
                &["evict"],
                b"-- Citus: the global pids",
                1,
                1,
                "failed to read Citus's own sessions on the coordinator: the connection was closed without a reason",
            ),
        ],
    )
    .await;
}

/// The steps on a worker of a distributed table, each broken at its statement there: the
/// read-only transaction that resolves a shard (its start, the setting that shows the shards, the
/// shard's columns read in it, its end), the role's grants on the shards and Citus's own sessions
/// there (evict). Each run ends with its whole line and exit code, and nothing changed; a read
/// that fails is what the line names, not the end of the transaction that follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_steps_on_a_worker_fail_naming_the_worker_and_the_step() {
    let Some(db) = distributed("citus worker steps").await else {
        return;
    };
    on_worker(
        &db,
        vec![
            case(
                "start the reads",
                &["stats"],
                b"BEGIN READ ONLY",
                1,
                1,
                "failed to reach the key table's shards on the Citus workers: failed to read shard {shard} on node 127.0.0.1:{port}: failed to start a read-only transaction on the worker: the connection was closed without a reason",
            ),
            case(
                "show the shards",
                &["stats"],
                b"-- Citus worker: make this transaction's catalog queries see the shards",
                1,
                1,
                "failed to reach the key table's shards on the Citus workers: failed to read shard {shard} on node 127.0.0.1:{port}: failed to show the shards to the catalog reads on the worker: the connection was closed without a reason",
            ),
            case(
                "read a shard's columns",
                &["stats"],
                b"-- Columns of the key table and their types",
                1,
                1,
                "failed to reach the key table's shards on the Citus workers: failed to read shard {shard} on node 127.0.0.1:{port}: failed to read the key table's columns: the connection was closed without a reason",
            ),
            case(
                "end the reads",
                &["stats"],
                b"COMMIT\0",
                1,
                1,
                "failed to reach the key table's shards on the Citus workers: failed to read shard {shard} on node 127.0.0.1:{port}: failed to end the read-only transaction on the worker: the connection was closed without a reason",
            ),
            case(
                "the grants on the shards",
                &["evict"],
                b"-- Citus, on a worker: what the current role may do",
                1,
                1,
                "worker 127.0.0.1:{port}: failed to read the role's privileges on the shards: the connection was closed without a reason",
            ),
            case(
                "Citus's own sessions on the worker",
                &["evict"],
                b"-- Citus: the global pids",
                1,
                1,
                "failed to read Citus's own sessions on worker 127.0.0.1:{port}: the connection was closed without a reason",
            ),
        ],
    )
    .await;
}

/// The steps only a table Citus plans on the coordinator takes, on a reference table: evict reads
/// the distributed tables' foreign keys that reference it, and each of reclaim's batches plans its
/// statement with its values, passes its settings on to the workers' connections of its
/// transaction and bounds its row waits there first (as evict's batches do). Each run ends with
/// its whole line and exit code, and nothing changed: a batch lost at those steps never sent its
/// COMMIT, and its line says that it never committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_steps_of_a_reference_table_fail_naming_the_step() {
    let Some(db) = loaded_with(Layout::Reference, MIX, "citus reference steps").await else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    on_coordinator(
        &db,
        vec![
            case(
                "the distributed references",
                &["evict"],
                b"-- evict on a Citus reference table: the foreign keys",
                1,
                1,
                "failed to read the distributed tables' foreign keys that reference the table: the connection was closed without a reason",
            ),
            case(
                "reclaim's plan with values",
                &["reclaim", "--yes", "--older-than", "30m"],
                b"SET LOCAL plan_cache_mode = force_custom_plan",
                1,
                1,
                "reclaim lost its connection: 0 keys reclaimed by batches whose commit the server confirmed; the batch in flight never committed (its COMMIT was not sent, so the server rolls it back): run reclaim again, which takes what is still stuck: failed to plan the batch with its values: the connection was closed without a reason",
            ),
            case(
                "reclaim's row waits on the workers",
                &["reclaim", "--yes", "--older-than", "30m"],
                b"SET LOCAL lock_timeout",
                1,
                1,
                "reclaim lost its connection: 0 keys reclaimed by batches whose commit the server confirmed; the batch in flight never committed (its COMMIT was not sent, so the server rolls it back): run reclaim again, which takes what is still stuck: failed to set the batch's lock_timeout: the connection was closed without a reason",
            ),
            case(
                "reclaim's settings for the workers",
                &["reclaim", "--yes", "--older-than", "30m"],
                b"SET LOCAL citus.propagate_set_commands = 'local'",
                1,
                1,
                "reclaim lost its connection: 0 keys reclaimed by batches whose commit the server confirmed; the batch in flight never committed (its COMMIT was not sent, so the server rolls it back): run reclaim again, which takes what is still stuck: failed to pass the batch's settings on to the Citus workers: the connection was closed without a reason",
            ),
        ],
    )
    .await;
}

/// reclaim --apply on a table of a distributed schema (one shard, no distribution column) is
/// refused before any change (exit 2): it cannot send a plan row to a shard by a column the table
/// does not have; check notes the same of the layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_reclaim_apply_refuses_a_single_shard_table() {
    let Some(db) = loaded_with(Layout::Schema, MIX, "citus single shard apply").await else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let plan_arg = plan.to_str().unwrap();
    db.idemctl()
        .args(["reclaim", "--plan", plan_arg, "--older-than", "30m"])
        .run()
        .assert_code(0);
    let before = snapshot(&db).await;
    db.idemctl()
        .args(["reclaim", "--yes", "--apply", plan_arg])
        .run()
        .assert_error(2, "reclaim --apply sends each plan row to the shard that holds its tenant by the table's distribution column, but keys.idempotency_keys is a single-shard table of a distributed schema, which has none; nothing was changed: run the sweep (reclaim without --apply), which works on its one shard");
    assert_eq!(snapshot(&db).await, before);
    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(0);
    let worker: String = db
        .client()
        .await
        .query_one(
            "SELECT nodename || ':' || nodeport FROM citus_shards \
              WHERE table_name = 'keys.idempotency_keys'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        citus_findings(&run.json()),
        [
            ("citus layout", "note", "a single-shard table of a distributed schema: evict, stats, inspect and the reclaim sweep work on its one shard on its worker; reclaim --apply is refused (it sends each plan row to its tenant's shard by a distribution column, which this table does not have)".to_owned(), None),
            ("citus workers", "ok", format!("reached every worker holding shards with this connection's settings: {worker} (1 shard)"), None),
            ("citus shard indexes", "ok", "its one shard carries the expiry and identity indexes and the in_progress index".to_owned(), None),
            ("citus shard privileges", "ok", "postgres has on its one shard the grants it has on the coordinator's table".to_owned(), None),
        ],
        "{run}"
    );
}

/// check's findings on the shards (`citus ...`), in order: name, status, detail and fix.
fn citus_findings(j: &serde_json::Value) -> Vec<(&str, &str, String, Option<String>)> {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"].as_str().unwrap().starts_with("citus "))
        .map(|f| {
            (
                f["check"].as_str().unwrap(),
                f["status"].as_str().unwrap(),
                f["detail"].as_str().unwrap().to_owned(),
                f["fix"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// The workers of `db` as check names them, each with its number of shards, in its order.
async fn workers_named(db: &CitusDb) -> String {
    let rows = db
        .client()
        .await
        .query(
            "SELECT nodename || ':' || nodeport || ' (' || count(*) || ' shards)' FROM citus_shards \
              WHERE table_name = 'idempotency_keys'::regclass \
              GROUP BY nodename, nodeport ORDER BY nodename, nodeport",
            &[],
        )
        .await
        .unwrap();
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    names.join(", ")
}

/// check on a distributed table when something on the shards fails: every finding on the shards
/// is asserted whole. First all is well; then a worker's connection breaks while its first shard
/// is resolved (the workers cannot be worked on), or while the role's grants on a shard are read
/// (they cannot be read); both fail the check (exit 4) and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_check_names_what_it_cannot_do_on_the_shards() {
    let Some(db) = distributed("citus check on the shards").await else {
        return;
    };
    let layout = (
        "citus layout",
        "ok",
        "distributed by api_key_id over 32 shards; the distribution column is in the primary key, so a tenant's keys live on one shard".to_owned(),
        None,
    );
    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(0);
    assert_eq!(
        citus_findings(&run.json()),
        [
            layout.clone(),
            (
                "citus workers",
                "ok",
                format!(
                    "reached every worker holding shards with this connection's settings: {}",
                    workers_named(&db).await
                ),
                None
            ),
            (
                "citus shard indexes",
                "ok",
                "all 32 shards carry the expiry and identity indexes and the in_progress index"
                    .to_owned(),
                None
            ),
            (
                "citus shard privileges",
                "ok",
                "postgres has on all 32 shards the grants it has on the coordinator's table"
                    .to_owned(),
                None
            ),
        ],
        "{run}"
    );
    let before = snapshot(&db).await;

    let detour = Detour::start(&db, 1, b"BEGIN READ ONLY", 1).await;
    let shard = detour.first_shard().await;
    let port = detour.wire.port();
    let run = Cmd::new()
        .env(
            "IDEMCTL_DATABASE_URL",
            db.url_with(&[("sslmode", "disable")]),
        )
        .args(["check", "-o", "json"])
        .run();
    detour.end().await;
    run.assert_code(4);
    assert_eq!(
        citus_findings(&run.json()),
        [
            layout.clone(),
            (
                "citus workers",
                "fail",
                format!(
                    "cannot work on the shards: failed to reach the key table's shards on the Citus workers: failed to read shard {shard} on node 127.0.0.1:{port}: failed to start a read-only transaction on the worker: the connection was closed without a reason"
                ),
                Some("evict, reclaim, inspect and stats connect to each worker with this connection's role, password source (password, ~/.pgpass, service file) and TLS settings, at the host and port the coordinator's pg_dist_node names: let that role connect to every worker (pg_hba.conf, a ~/.pgpass line per worker host)".to_owned())
            ),
        ],
        "{run}"
    );

    let detour = Detour::start(
        &db,
        1,
        b"-- What the current role may do on the key table",
        1,
    )
    .await;
    let (shard, port) = (detour.first_shard().await, detour.wire.port());
    let run = Cmd::new()
        .env(
            "IDEMCTL_DATABASE_URL",
            db.url_with(&[("sslmode", "disable")]),
        )
        .args(["check", "-o", "json"])
        .run();
    let named = workers_named(&db).await;
    detour.end().await;
    run.assert_code(4);
    assert_eq!(
        citus_findings(&run.json()),
        [
            layout.clone(),
            (
                "citus workers",
                "ok",
                format!(
                    "reached every worker holding shards with this connection's settings: {named}"
                ),
                None
            ),
            (
                "citus shard indexes",
                "ok",
                "all 32 shards carry the expiry and identity indexes and the in_progress index"
                    .to_owned(),
                None
            ),
            (
                "citus shard privileges",
                "fail",
                format!(
                    "cannot read the role's privileges on the shards: shard {shard} on worker 127.0.0.1:{port}: failed to read the role's privileges: the connection was closed without a reason"
                ),
                None
            ),
        ],
        "{run}"
    );
    assert_eq!(snapshot(&db).await, before);
}

/// check on a distributed table whose shards lost what the coordinator's table has: a grant
/// revoked on one shard (the role's check fails, naming the shard and the grant, with the GRANT to
/// run on the coordinator), then the primary key dropped on that shard (the identity index is gone
/// there, and only adding the constraint again on the coordinator restores it), then its expiry
/// index (the index statements come first). Each finding on the shards is asserted whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_check_names_the_grant_and_the_constraint_a_shard_lost() {
    let Some(db) = distributed("citus check on what a shard lost").await else {
        return;
    };
    let role = format!("steps_{}", &db.name[db.name.len() - 8..]);
    db.exec_alone(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT, DELETE, UPDATE ON idempotency_keys TO {role}"
    ))
    .await;
    let check_as = |user: &str| {
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", db.url_with(&[("user", user)]))
            .args(["check", "-o", "json"])
            .run()
    };
    let named = workers_named(&db).await;
    let workers = (
        "citus workers",
        "ok",
        format!("reached every worker holding shards with this connection's settings: {named}"),
        None,
    );
    let layout = (
        "citus layout",
        "ok",
        "distributed by api_key_id over 32 shards; the distribution column is in the primary key, so a tenant's keys live on one shard".to_owned(),
        None,
    );
    let indexes_ok = (
        "citus shard indexes",
        "ok",
        "all 32 shards carry the expiry and identity indexes and the in_progress index".to_owned(),
        None,
    );
    let run = check_as(&role);
    assert_eq!(
        citus_findings(&run.json()),
        [
            layout.clone(),
            workers.clone(),
            indexes_ok.clone(),
            (
                "citus shard privileges",
                "ok",
                format!("{role} has on all 32 shards the grants it has on the coordinator's table"),
                None
            ),
        ],
        "{run}"
    );

    // The first shard on the first worker loses DELETE there, then its primary key.
    let worker = db.node_client(1).await;
    worker
        .batch_execute(
            "SET citus.override_table_visibility = off; SET citus.enable_manual_changes_to_shards = on",
        )
        .await
        .unwrap();
    let shard: i64 = worker
        .query_one(
            "SELECT min(substring(relname from '[0-9]+$')::bigint) FROM pg_class \
              WHERE relkind = 'r' AND relname ~ '^idempotency_keys_[0-9]+$'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let on = format!("127.0.0.1:{}", db.cluster().workers()[0].port);
    worker
        .batch_execute(&format!(
            "REVOKE DELETE ON idempotency_keys_{shard} FROM {role}"
        ))
        .await
        .unwrap();
    let run = check_as(&role);
    assert_eq!(
        citus_findings(&run.json()),
        [
            layout.clone(),
            workers.clone(),
            indexes_ok.clone(),
            (
                "citus shard privileges",
                "fail",
                format!(
                    "{role} lacks on 1 of 32 shards grants it has on the coordinator's table, so the commands that work on the shards fail there: shard {shard} on {on}: DELETE"
                ),
                Some(format!(
                    "GRANT DELETE ON \"public\".\"idempotency_keys\" TO \"{role}\"; -- on the coordinator: Citus passes grants on a distributed table to every shard"
                )),
            ),
        ],
        "{run}"
    );

    worker
        .batch_execute(&format!(
            "ALTER TABLE idempotency_keys_{shard} DROP CONSTRAINT idempotency_keys_pkey_{shard}"
        ))
        .await
        .unwrap();
    let run = check_as("postgres");
    assert_eq!(
        citus_findings(&run.json()),
        [
            layout.clone(),
            workers.clone(),
            (
                "citus shard indexes",
                "fail",
                format!("shard {shard} on {on} lacks the identity index"),
                Some("the identity index idempotency_keys_pkey backs the primary key or a unique constraint on (api_key_id, key), which no index statement restores: drop that constraint and add it again on the same columns, on the coordinator (ALTER TABLE \"public\".\"idempotency_keys\" DROP CONSTRAINT ..., then ADD PRIMARY KEY or UNIQUE (api_key_id, key)), which Citus applies to every shard and which locks the table while the index builds".to_owned()),
            ),
            (
                "citus shard privileges",
                "ok",
                "postgres has on all 32 shards the grants it has on the coordinator's table"
                    .to_owned(),
                None
            ),
        ],
        "{run}"
    );

    // The same shard loses its expiry index too: the index statements to run on the coordinator
    // come first, then what restores the constraint.
    worker
        .batch_execute(&format!("DROP INDEX idempotency_keys_expiry_{shard}"))
        .await
        .unwrap();
    let run = check_as("postgres");
    let expiry = "\"public\".\"idempotency_keys_expiry\"";
    assert_eq!(
        citus_findings(&run.json())[2],
        (
            "citus shard indexes",
            "fail",
            format!("shard {shard} on {on} lacks the expiry and identity indexes"),
            Some(format!(
                "DROP INDEX CONCURRENTLY IF EXISTS {expiry}; CREATE INDEX CONCURRENTLY \"idempotency_keys_expiry\" ON \"public\".\"idempotency_keys\" (expires_at); -- on the coordinator: Citus passes each statement to every shard; the identity index idempotency_keys_pkey backs the primary key or a unique constraint on (api_key_id, key), which no index statement restores: drop that constraint and add it again on the same columns, on the coordinator (ALTER TABLE \"public\".\"idempotency_keys\" DROP CONSTRAINT ..., then ADD PRIMARY KEY or UNIQUE (api_key_id, key)), which Citus applies to every shard and which locks the table while the index builds"
            ))
        ),
        "{run}"
    );
}

/// check on a table distributed by another column than the tenant: a note (exit 0) that says what
/// works shard by shard and that reclaim --apply is refused, asserted whole with the other findings
/// on the shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_check_notes_a_table_distributed_by_another_column() {
    let Some(db) = loaded_with(Layout::ByKey, MIX, "citus check by key").await else {
        return;
    };
    let run = db.idemctl().args(["check", "-o", "json"]).run();
    run.assert_code(0);
    assert_eq!(
        citus_findings(&run.json()),
        [
            ("citus layout", "note", "distributed by key over 32 shards, not by the tenant column: evict, stats, inspect and the reclaim sweep work shard by shard whatever the column; inspect --api-key-id reads every shard; reclaim --apply is refused (it sends each plan row to its tenant's shard)".to_owned(), None),
            (
                "citus workers",
                "ok",
                format!(
                    "reached every worker holding shards with this connection's settings: {}",
                    workers_named(&db).await
                ),
                None
            ),
            (
                "citus shard indexes",
                "ok",
                "all 32 shards carry the expiry and identity indexes".to_owned(),
                None
            ),
            (
                "citus shard privileges",
                "ok",
                "postgres has on all 32 shards the grants it has on the coordinator's table"
                    .to_owned(),
                None
            ),
        ],
        "{run}"
    );
}

/// stats on a distributed table one of whose tenants, one without keys, was isolated onto a shard
/// of its own: the split makes a new shard that has never been analyzed (it is empty, so neither
/// its index build nor autovacuum ever gives it a row estimate), and stats says that its rows count
/// as none, in its notes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_stats_notes_a_shard_never_analyzed() {
    let Some(db) = distributed("citus stats of a shard never analyzed").await else {
        return;
    };
    let tenant = "a-tenant-without-keys";
    let keys: i64 = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE api_key_id = $1",
            &[&tenant],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 0);
    db.exec(&format!(
        "SELECT isolate_tenant_to_new_shard('idempotency_keys', '{tenant}', \
                shard_transfer_mode => 'block_writes')"
    ))
    .await;
    let run = db.idemctl().args(["stats", "-o", "json"]).run();
    run.assert_code(0);
    assert_eq!(
        run.json()["notes"],
        serde_json::json!([
            "a shard has never been analyzed; the row estimate counts it as empty until ANALYZE runs"
        ]),
        "{run}"
    );
}

//! Refusals and failures that only a Citus cluster can cause, each provoked for real on the test
//! cluster and asserted as the whole line with its exit code: a table whose rows the coordinator
//! cannot name, a plan row whose shard lost its placement, and workers idemctl cannot reach or set
//! up. Each test works in a database of its own (the metadata Citus keeps per database), or on a
//! cluster of its own when it stops or cuts a node.

use crate::citus::{IN_PROGRESS_INDEX, MIX, loaded_with, snapshot};
use crate::fixtures::load_sql;
use crate::support::citus::{CitusDb, Layout, skipped};
use crate::support::cmd::Cmd;

/// The worker holding the key table's first shard in the order idemctl reaches them (by node name
/// and port), as idemctl names it.
async fn first_worker(db: &CitusDb) -> String {
    db.client()
        .await
        .query_one(
            "SELECT nodename || ':' || nodeport FROM citus_shards \
              WHERE table_name = 'idempotency_keys'::regclass \
              ORDER BY nodename, nodeport, shardid LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// reclaim on a Citus reference table with no unique index on the key's identity: Citus changes
/// the rows of such a table only when they are named by their identity, so the sweep is refused
/// before any change (exit 2) with the index to create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_reclaim_refuses_a_reference_table_without_an_identity_index() {
    if skipped("citus reclaim without an identity index") {
        return;
    }
    let db = CitusDb::new(None).await;
    db.exec(include_str!("../../sql/schema.sql")).await;
    db.exec("ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey")
        .await;
    db.exec(IN_PROGRESS_INDEX).await;
    db.exec(&load_sql(MIX)).await;
    db.distribute(Layout::Reference).await;
    let before = snapshot(&db).await;
    db.idemctl()
        .args(["reclaim", "--yes", "--older-than", "30m"])
        .run()
        .assert_error(2, "table public.idempotency_keys is a reference table: Citus changes its rows only when they are named by their identity (api_key_id, key), which needs a unique index on exactly those columns on a table that is not partitioned; nothing was changed: create it with: CREATE UNIQUE INDEX CONCURRENTLY \"idempotency_keys_scope\" ON \"public\".\"idempotency_keys\" (api_key_id, key);");
    assert_eq!(snapshot(&db).await, before);
}

/// evict pointed at the coordinator through its Unix socket with sslmode=verify-ca and a root
/// certificate file that does not exist: the coordinator needs no TLS there, but the workers are
/// reached over TCP, where that file is needed, so the first worker's connections cannot be
/// prepared (exit 2), before any change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_names_the_worker_whose_connections_cannot_be_prepared() {
    let Some(db) = loaded_with(Layout::ByTenant, MIX, "citus worker unprepared").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("root.crt");
    let url = format!(
        "{} sslmode=verify-ca sslrootcert={}",
        db.cluster().coordinator().socket_conninfo(&db.name),
        roots.display()
    );
    let before = snapshot(&db).await;
    let first = first_worker(&db).await;
    let run = Cmd::new()
        .env("IDEMCTL_DATABASE_URL", url)
        .args(["evict", "-o", "json"])
        .run();
    run.assert_error(
        2,
        &format!(
            "failed to reach the key table's shards on the Citus workers: failed to prepare connections to Citus worker {first}: root certificate file \"{}\" does not exist; either provide the file, use the system's trusted roots (sslrootcert=system), or change sslmode",
            roots.display()
        ),
    );
    assert_eq!(snapshot(&db).await, before);
}

/// evict on a distributed table with a worker stopped (on a cluster of its own): the coordinator's
/// metadata still lists the worker, and the run fails with the cannot-connect exit code (5),
/// naming it, before any change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_evict_names_the_worker_it_cannot_reach() {
    if skipped("citus worker unreachable") {
        return;
    }
    let db = CitusDb::private(Some(Layout::ByTenant)).await;
    db.exec(&load_sql(MIX)).await;
    db.stop_node(2).await;
    let worker = format!("127.0.0.1:{}", db.cluster().nodes[2].port);
    let run = db
        .idemctl()
        .env(
            "IDEMCTL_DATABASE_URL",
            db.url_with(&[("connect_timeout", "2")]),
        )
        .args(["evict", "-o", "json"])
        .run();
    run.assert_code(5).assert_stdout_empty();
    // How long the connection was retried is measured; the rest of the line is exact.
    let (line, waited) = run
        .stderr
        .rsplit_once(" (retried for ")
        .unwrap_or_else(|| panic!("no retry time: {run}"));
    let secs = waited
        .strip_suffix("s)\n")
        .unwrap_or_else(|| panic!("{run}"));
    assert!(secs.parse::<f64>().is_ok(), "{run}");
    assert_eq!(
        line,
        format!(
            "idemctl: failed to reach the key table's shards on the Citus workers: failed to connect to Citus worker {worker}: cannot connect to user \"postgres\" at host \"127.0.0.1\" port {}, database \"{}\": connection refused",
            db.cluster().nodes[2].port,
            db.name
        ),
        "{run}"
    );
}

//! Refusals and failures that only a Citus cluster can cause, each provoked for real on the test
//! cluster and asserted as the whole line with its exit code: a table whose rows the coordinator
//! cannot name, a plan row whose shard lost its placement, and workers idemctl cannot reach or set
//! up. Each test works in a database of its own (the metadata Citus keeps per database), or on a
//! cluster of its own when it stops or cuts a node.

use crate::citus::{IN_PROGRESS_INDEX, MIX, loaded_with, snapshot};
use crate::fixtures::load_sql;
use crate::support::citus::{CitusDb, Layout, skipped};
use crate::support::cmd::Cmd;
use crate::support::tripwire::{Tripwire, Upstream};

/// The first tenant (by name) with stuck keys (`in_progress`, taken more than 30 minutes ago)
/// whose shard is on the worker listening on `port` (any worker: None), with that shard.
async fn stuck_tenant(db: &CitusDb, port: Option<u16>) -> (String, i64) {
    let client = db.client().await;
    let tenants = client
        .query(
            "SELECT DISTINCT api_key_id FROM idempotency_keys WHERE state = 'in_progress' \
               AND coalesce(locked_at, created_at) < now() - interval '30 minutes' ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    for t in tenants {
        let tenant: String = t.get(0);
        let placed = client
            .query_one(
                "SELECT shardid, nodeport FROM citus_shards \
                  WHERE shardid = get_shard_id_for_distribution_column('idempotency_keys', $1::text)",
                &[&tenant],
            )
            .await
            .unwrap();
        let on: i32 = placed.get(1);
        if port.is_none_or(|p| i32::from(p) == on) {
            return (tenant, placed.get(0));
        }
    }
    panic!("no stuck key on the worker on port {port:?}");
}

/// How many stuck keys `tenant` has.
async fn stuck_keys_of(db: &CitusDb, tenant: &str) -> i64 {
    db.client()
        .await
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE api_key_id = $1 \
               AND state = 'in_progress' \
               AND coalesce(locked_at, created_at) < now() - interval '30 minutes'",
            &[&tenant],
        )
        .await
        .unwrap()
        .get(0)
}

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

/// `idemctl ARGS` against `url` on a terminal of its own (util-linux `script` gives it one, stdin
/// and stdout/stderr a pseudo-terminal), so it asks before it changes anything; what it writes is
/// read by a thread and sent over the channel.
struct OnTerminal {
    child: std::process::Child,
    transcript: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: Vec<u8>,
}

impl OnTerminal {
    fn start(url: &str, args: &[&str]) -> OnTerminal {
        let mut line = shell_quote(crate::support::cmd::IDEMCTL);
        for a in args {
            line.push(' ');
            line.push_str(&shell_quote(a));
        }
        let mut command = std::process::Command::new("script");
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            if name.starts_with("PG") || name.starts_with("IDEMCTL_") || name == "DATABASE_URL" {
                command.env_remove(&key);
            }
        }
        let mut child = command
            .args(["-q", "-e", "-c", &line, "/dev/null"])
            .env("IDEMCTL_DATABASE_URL", url)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("util-linux script");
        let mut out = child.stdout.take().unwrap();
        let (tx, transcript) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut out, &mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        });
        OnTerminal {
            child,
            transcript,
            seen: Vec::new(),
        }
    }

    /// Wait (60 s at most) until the transcript ends with `tail`.
    async fn until(&mut self, tail: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !String::from_utf8_lossy(&self.seen).ends_with(tail) {
            match self.transcript.try_recv() {
                Ok(chunk) => self.seen.extend(chunk),
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "no {tail:?} after 60 s: {}",
                        String::from_utf8_lossy(&self.seen)
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(_) => panic!(
                    "ended before {tail:?}: {}",
                    String::from_utf8_lossy(&self.seen)
                ),
            }
        }
    }

    /// Type `text` on the terminal, then wait for the run to end: its exit code and the whole
    /// transcript, with the terminal's line ends (`\r\n`) read as `\n`.
    async fn answer(mut self, text: &str) -> (i32, String) {
        use std::io::Write as _;
        let mut stdin = self.child.stdin.take().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let mut child = self.child;
        let status = tokio::task::spawn_blocking(move || {
            let status = child.wait();
            drop(stdin);
            status
        })
        .await
        .unwrap()
        .unwrap();
        while let Ok(chunk) = self
            .transcript
            .recv_timeout(std::time::Duration::from_secs(5))
        {
            self.seen.extend(chunk);
        }
        let text = String::from_utf8_lossy(&self.seen).replace("\r\n", "\n");
        (status.code().unwrap_or(-1), text)
    }
}

fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// reclaim --apply on a terminal: the plan's rows are placed on their shards, then, while the run
/// asks for confirmation, the tenant's shard is split off (`isolate_tenant_to_new_shard`), so the
/// shard the plan rows were placed on has no placement any more when the run goes on. It stops
/// there (exit 1), naming the shard, before any change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_reclaim_apply_stops_at_a_shard_split_off_while_it_asked() {
    let Some(db) = loaded_with(Layout::ByTenant, MIX, "citus reclaim --apply, shard split").await
    else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    let (tenant, shard) = stuck_tenant(&db, None).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let plan_arg = plan.to_str().unwrap();
    db.idemctl()
        .args(["reclaim", "--plan", plan_arg, "--older-than", "30m"])
        .args(["--api-key-id", &tenant])
        .run()
        .assert_code(0);
    let keys = stuck_keys_of(&db, &tenant).await;
    let before = snapshot(&db).await;
    let mut run = OnTerminal::start(&db.url(), &["reclaim", "--apply", plan_arg]);
    run.until("[y/N] ").await;
    db.exec(&format!(
        "SELECT isolate_tenant_to_new_shard('idempotency_keys', '{tenant}', \
                shard_transfer_mode => 'block_writes')"
    ))
    .await;
    let (code, transcript) = run.answer("y\n").await;
    assert_eq!(code, 1, "{transcript}");
    let (asked, said) = transcript
        .split_once("[y/N] y\n")
        .unwrap_or_else(|| panic!("{transcript}"));
    assert_eq!(
        said,
        format!(
            "idemctl: shard {shard} of public.idempotency_keys has no active placement in the coordinator's metadata (a shard move may be under way); nothing was changed, try again\n"
        )
    );
    assert_eq!(
        asked,
        format!(
            "reclaim: delete the plan's {keys} in_progress key{} of public.idempotency_keys (api_key_id {tenant}) held longer than 30m? ",
            if keys == 1 { "" } else { "s" }
        )
    );
    assert_eq!(snapshot(&db).await, before);
}

/// The reclaim sweep of one tenant, whose shard's worker is reached through a [`Tripwire`] that
/// breaks the connection at the statement setting the reclaim session's lock_timeout there: the
/// run fails naming the worker, before any change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_reclaim_names_the_worker_whose_session_it_could_not_set_up() {
    let Some(db) = loaded_with(Layout::ByTenant, MIX, "citus reclaim session unset").await else {
        return;
    };
    db.exec(IN_PROGRESS_INDEX).await;
    let node = &db.cluster().workers()[1];
    let (tenant, _) = stuck_tenant(&db, Some(node.port)).await;
    let wire = Tripwire::start(Upstream::Tcp(node.port), b"SET lock_timeout = '5ms'", 1);
    db.exec(&format!(
        "SELECT citus_update_node(nodeid, '127.0.0.1', {}) FROM pg_dist_node WHERE nodeport = {}",
        wire.port(),
        node.port
    ))
    .await;
    let before = snapshot(&db).await;
    let run = Cmd::new()
        .env(
            "IDEMCTL_DATABASE_URL",
            db.url_with(&[("sslmode", "disable")]),
        )
        .args([
            "reclaim",
            "--yes",
            "--older-than",
            "30m",
            "--api-key-id",
            &tenant,
        ])
        .run();
    run.assert_error(
        1,
        &format!(
            "failed to set up the reclaim session on worker 127.0.0.1:{}: failed to set the session's lock_timeout: the connection was closed without a reason",
            wire.port()
        ),
    );
    assert_eq!(snapshot(&db).await, before);
}

/// A shard renamed away on its worker (as a shard move leaves it for a moment, or a hand-made
/// change): the coordinator's metadata still places it there, so the commands that work on the
/// shards stop before any change with the not-found exit code (3), naming the shard, the node and
/// what the worker said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_a_shard_missing_from_its_worker_is_named_before_any_change() {
    let Some(db) = loaded_with(Layout::ByTenant, MIX, "citus shard missing").await else {
        return;
    };
    let worker = db.node_client(1).await;
    worker
        .batch_execute(
            "SET citus.override_table_visibility = off; \
             SET citus.enable_manual_changes_to_shards = on",
        )
        .await
        .unwrap();
    let shard: String = worker
        .query_one(
            "SELECT c.relname::text FROM pg_class c WHERE c.relkind = 'r' \
             AND c.relname ~ '^idempotency_keys_[0-9]+$' ORDER BY c.relname LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let id = shard.trim_start_matches("idempotency_keys_").to_owned();
    let before = snapshot(&db).await;
    worker
        .batch_execute(&format!("ALTER TABLE {shard} RENAME TO moved_{id}"))
        .await
        .unwrap();
    let placed: String = db
        .client()
        .await
        .query_one(
            &format!("SELECT nodename || ':' || nodeport FROM citus_shards WHERE shardid = {id}"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    db.idemctl()
        .args(["evict"])
        .run()
        .assert_error(3, &format!("failed to reach the key table's shards on the Citus workers: shard {id} of public.idempotency_keys (table public.idempotency_keys_{id}) is not on node {placed} where the coordinator's metadata places it (no table of that name is there); a shard move may be under way, try again"));
    worker
        .batch_execute(&format!("ALTER TABLE moved_{id} RENAME TO {shard}"))
        .await
        .unwrap();
    assert_eq!(snapshot(&db).await, before);
}

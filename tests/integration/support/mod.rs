//! The integration-test harness: a PostgreSQL server per test process, a fresh database per test
//! (`TestDb`), and a runner for the `idemctl` binary (`Cmd`, `Run`).
//!
//! Server selection, once per test process:
//! * `IDEMCTL_TEST_DATABASE_URL` set: that server (a superuser URL or key=value conninfo; TLS is not
//!   supported by the harness's own connections). Test databases older than an hour left there by
//!   crashed runs are dropped on first use.
//! * otherwise: a throwaway cluster in `/tmp/idemctl-pg.XXXXXXXX` (parent: `IDEMCTL_TEST_TMPDIR`),
//!   binaries from `IDEMCTL_TEST_PGBIN` / `initdb` on PATH / the newest `/usr/lib/postgresql/*/bin`,
//!   extra `pg_ctl -o` options from `IDEMCTL_TEST_PGOPTS`. Owned by the `postgres` OS user when the
//!   tests run as root. A watchdog process shuts it down and deletes it when the test process exits.
//! * neither possible: every test panics with instructions. Tests never skip.
//!
//! Usage:
//! ```ignore
//! #[tokio::test]
//! async fn evicts() {
//!     let db = TestDb::new().await;
//!     db.exec("CREATE TABLE t (k text)").await;
//!     db.idemctl().args(["stats", "--json"]).run().assert_code(0).json();
//! }
//! ```
//! `Cmd::run` blocks the calling thread; with `#[tokio::test]` (current-thread runtime) the test's
//! own connections make no progress meanwhile. Use `run_async` / `Spawned::wait_async` when the child
//! must interact with sessions the test holds open.

// Each test module uses a different part of the harness.
#![allow(
    dead_code,
    unused_imports,
    reason = "each test module uses a different part of the harness"
)]

pub(crate) mod blackhole;
pub(crate) mod citus;
pub(crate) mod cluster;
pub(crate) mod cmd;
pub(crate) mod conninfo;
pub(crate) mod haproxy;
pub(crate) mod inserts;
pub(crate) mod partman;
pub(crate) mod pg;
pub(crate) mod pgbouncer;
pub(crate) mod pushgateway;
pub(crate) mod replica;
pub(crate) mod stuck;
pub(crate) mod tcp;
pub(crate) mod tmpfs;
pub(crate) mod tripwire;

pub(crate) use cmd::{Cmd, IDEMCTL, Run, Spawned};
pub(crate) use pg::{TestDb, connect, ident, pg_error_text};

//! The per-table maintenance lock: a session-level advisory lock, so that two evicts (or two
//! reclaims) never work on one table at once, and a crashed run's lock dies with its session.
//!
//! A run whose path to the server dies leaves its session behind on the server, lock and all, for
//! as long as the server believes the client is there (hours, when a proxy keeps the dead
//! connection open). So the session that holds the lock asks the server to end it after
//! `--idle-in-transaction-timeout` of silence (`idle_session_timeout`, PostgreSQL 14 and later),
//! and a keeper pings it four times as often while the run lives ([`keep`]). A dead run's lock is
//! then free at most statement_timeout plus that timeout after the run went silent (90 s with the
//! defaults): the statement in flight ends at its statement_timeout, and the session, idle or
//! idle in a transaction, is ended after the other.
//!
//! Behind a transaction pooler no lock may outlive a transaction (it would stay with a pooled
//! server session, held for the API's clients), so none is taken there: runs of one command may
//! then overlap, and keep apart row by row instead (claimed ranges, a lock_timeout of a few
//! milliseconds, SKIP LOCKED), which never deletes or changes a row twice.

use anyhow::{Context as _, Result};

use super::KeyTable;
use crate::conn::Route;
use crate::db::{Session, p};
use crate::exit::{Exit, fail};

/// What keeps another run of the same command off the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockScope {
    /// This session holds the lock until it ends: no other run works on the table meanwhile.
    Run,
    /// Behind a transaction pooler: nothing table-wide; overlapping runs share the work row by row.
    Rows,
}

impl LockScope {
    /// The one line said at run time when a pooler was detected (`--pool-mode transaction` says
    /// the operator knows; `--quiet` silences it too).
    pub(crate) fn note(self, class: LockClass, route: Option<Route>) -> Option<String> {
        if self != LockScope::Rows || route != Some(Route::DetectedPooler) {
            return None;
        }
        let name = class.name();
        Some(format!(
            "connected through a connection pooler (transaction pooling assumed): this {name} run \
             holds no lock beyond its own transactions, so another {name} run on this table is not \
             kept out; overlapping runs share the rows, none is changed twice and no request waits \
             on them longer than lock_timeout (--pool-mode session behind a session pooler keeps \
             runs apart; --pool-mode transaction silences this note)"
        ))
    }
}

/// Which command the lock is for; evict and reclaim may run side by side.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LockClass {
    Evict,
    Reclaim,
}

impl LockClass {
    /// The first key of the two-int advisory lock: a constant per command.
    pub(crate) fn key(self) -> i32 {
        match self {
            LockClass::Evict => 0x1de_c701,
            LockClass::Reclaim => 0x1de_c702,
        }
    }

    fn name(self) -> &'static str {
        match self {
            LockClass::Evict => "evict",
            LockClass::Reclaim => "reclaim",
        }
    }
}

/// The table's oid folded into the second int4 key (oids are unsigned 32-bit).
pub(crate) fn table_key(table: &KeyTable) -> i32 {
    (table.oid as u32) as i32
}

/// Take the lock for this session or fail at once with the lock-busy exit code, naming the holder
/// when pg_stat_activity shows it. Behind a transaction pooler, take nothing ([`LockScope::Rows`]).
pub(crate) async fn acquire(
    client: &Session,
    table: &KeyTable,
    class: LockClass,
) -> Result<LockScope> {
    if client.pooled() {
        return Ok(LockScope::Rows);
    }
    let row = client
        .query_one(
            include_str!("../../sql/evict_lock.sql"),
            &[p(&class.key()), p(&table_key(table))],
        )
        .await
        .context("failed to take the maintenance lock")?;
    if row.get::<_, bool>("acquired") {
        let idle = crate::conn::setting_millis(client.idle_limit());
        client
            .query_one(include_str!("../../sql/guard_idle.sql"), &[p(&idle)])
            .await
            .context("failed to bound how long the maintenance lock outlives a silent run")?;
        keep(client.clone());
        return Ok(LockScope::Run);
    }
    let holder = client
        .query_opt(
            include_str!("../../sql/evict_lock_holder.sql"),
            &[p(&class.key()), p(&table_key(table))],
        )
        .await
        .ok()
        .flatten();
    let (name, table) = (class.name(), table.qualified_name());
    let Some(h) = holder else {
        return Err(fail(
            Exit::LockBusy,
            format!(
                "another {name} run holds the lock on {table}; this run did nothing, try again when it has finished"
            ),
        ));
    };
    let pid: Option<i32> = h.get("pid");
    let app: Option<String> = h.get("application_name");
    let addr: Option<String> = h.get("client_addr");
    let user: Option<String> = h.get("usename");
    let pid = pid.map_or_else(|| "?".into(), |p| p.to_string());
    let who = format!(
        "pid {pid}, application_name {}, user {}, client {}",
        app.unwrap_or_else(|| "unknown".into()),
        user.unwrap_or_else(|| "unknown".into()),
        addr.unwrap_or_else(|| "local socket".into()),
    );
    // The holder is named, never judged: its application_name is whatever its conninfo said, so
    // it proves neither that it is an idemctl run nor that it is not.
    let message = format!(
        "another {name} run holds the lock on {table} ({who}); this run did nothing, try again \
         when it has finished"
    );
    Err(fail(Exit::LockBusy, message))
}

/// Ping the session that holds the lock four times per its idle limit while the run holds the
/// session (the keeper's copy aside), so the server's idle_session_timeout ends it only once the
/// run is gone or silent. The keeper stops when the run has let the session go or lost it.
fn keep(session: Session) {
    let every = (session.idle_limit() / 4).max(std::time::Duration::from_millis(100));
    let tick = every.min(std::time::Duration::from_millis(250));
    tokio::spawn(async move {
        let mut since = std::time::Instant::now();
        loop {
            tokio::time::sleep(tick).await;
            if session.only_holder() || session.lost() {
                return;
            }
            if since.elapsed() >= every {
                // A server error (a transaction of the run's aborted) is no reason to stop; a lost
                // connection is seen above.
                let _ = session.query_one("SELECT 1", &[]).await;
                since = std::time::Instant::now();
            }
        }
    });
}

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
use crate::exit::{Exit, refuse};
use crate::report::db::{LockHolder, Refusal, Step};

/// What keeps another run of the same command off the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockScope {
    /// This session holds the lock until it ends: no other run works on the table meanwhile.
    Run,
    /// Behind a transaction pooler: nothing table-wide; overlapping runs share the work row by row.
    Rows,
}

impl LockScope {
    /// Whether to say at run time that a pooler was detected, so runs are not kept apart
    /// (`--pool-mode transaction` says the operator knows; `--quiet` silences it too).
    pub(crate) fn pooler_note(self, route: Option<Route>) -> bool {
        self == LockScope::Rows && route == Some(Route::DetectedPooler)
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

    pub(crate) fn name(self) -> &'static str {
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
        .context(Step::TakeLock)?;
    if row.get::<_, bool>("acquired") {
        let idle = crate::conn::setting_millis(client.idle_limit());
        client
            .query_one(include_str!("../../sql/guard_idle.sql"), &[p(&idle)])
            .await
            .context(Step::BoundLockIdle)?;
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
    let holder = holder.map(|h| LockHolder {
        pid: h.get("pid"),
        application_name: h.get("application_name"),
        user: h.get("usename"),
        client_addr: h.get("client_addr"),
    });
    // The holder is named, never judged (see the output layer's words).
    Err(refuse(
        Exit::LockBusy,
        Refusal::LockBusy {
            command: class.name(),
            table: table.qualified_name(),
            holder,
        },
    ))
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

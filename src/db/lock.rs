//! The per-table maintenance lock: a session-level advisory lock, so that two evicts (or two
//! reclaims) never work on one table at once, and a crashed run's lock dies with its session.

use anyhow::{Context as _, Result};

use super::KeyTable;
use crate::exit::{Exit, fail};
use crate::output::sanitize;

/// Which command the lock is for; evict and reclaim may run side by side.
#[derive(Clone, Copy, Debug)]
pub enum LockClass {
    Evict,
    Reclaim,
}

impl LockClass {
    /// The first key of the two-int advisory lock: a constant per command.
    fn key(self) -> i32 {
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
fn table_key(table: &KeyTable) -> i32 {
    (table.oid as u32) as i32
}

/// Take the lock for this session or fail at once with the lock-busy exit code, naming the holder
/// when pg_stat_activity shows it.
pub async fn acquire(
    client: &tokio_postgres::Client,
    table: &KeyTable,
    class: LockClass,
) -> Result<()> {
    let row = client
        .query_one(
            include_str!("../../sql/evict_lock.sql"),
            &[&class.key(), &table_key(table)],
        )
        .await
        .context("failed to take the maintenance lock")?;
    if row.get::<_, bool>("acquired") {
        return Ok(());
    }
    let holder = client
        .query_opt(
            include_str!("../../sql/evict_lock_holder.sql"),
            &[&class.key(), &table_key(table)],
        )
        .await
        .ok()
        .flatten();
    let who = match holder {
        Some(h) => {
            let pid: Option<i32> = h.get("pid");
            let app: Option<String> = h.get("application_name");
            let addr: Option<String> = h.get("client_addr");
            let user: Option<String> = h.get("usename");
            format!(
                " (pid {}, application_name {}, user {}, client {})",
                pid.map_or_else(|| "?".into(), |p| p.to_string()),
                app.map_or_else(|| "unknown".into(), |a| sanitize(&a)),
                user.map_or_else(|| "unknown".into(), |u| sanitize(&u)),
                addr.unwrap_or_else(|| "local socket".into()),
            )
        }
        None => String::new(),
    };
    Err(fail(
        Exit::LockBusy,
        format!(
            "another {} run holds the lock on {}{who}; this run did nothing, try again when it has finished",
            class.name(),
            table.display()
        ),
    ))
}

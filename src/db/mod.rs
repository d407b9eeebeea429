//! Database access: the key table's catalog description and the statements idemctl runs, each
//! embedded from `sql/` so a DBA can review exactly what executes.

pub mod activity;
pub mod citus;
pub mod lock;
pub mod maintenance;
pub mod partitions;
pub mod predicate;
pub mod profile;
pub mod queries;
pub mod reclaim;
pub mod record;
pub mod replication;
pub mod session;
pub mod table;

pub use session::{Param, Session, p};
pub use table::{KeyLookup, KeyTable};

use std::time::Duration;

use crate::exit::{Exit, fail};

/// Await a statement with a client-side deadline, which guards against a dead network path that
/// the server-side statement_timeout cannot see.
pub async fn with_deadline<T>(
    deadline: Duration,
    work: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(deadline, work).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(fail(
            Exit::Failure,
            format!(
                "no answer from the server within {}; giving up on this connection",
                crate::output::human_secs(deadline.as_secs_f64())
            ),
        )),
    }
}

/// Whether a statement failed because a lock was not granted within the session's lock_timeout.
pub fn is_lock_timeout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::code)
            .is_some_and(|code| *code == tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
    })
}

//! Database access: the key table's catalog description and the statements idemctl runs, each
//! embedded from `sql/` so a DBA can review exactly what executes.

pub(crate) mod activity;
pub(crate) mod batch;
pub(crate) mod citus;
pub(crate) mod evict;
pub(crate) mod lock;
pub(crate) mod maintenance;
pub(crate) mod partitions;
pub(crate) mod predicate;
pub(crate) mod profile;
pub(crate) mod queries;
pub(crate) mod reclaim;
pub(crate) mod record;
pub(crate) mod references;
pub(crate) mod replication;
pub(crate) mod session;
pub(crate) mod table;
pub(crate) mod vacuum;

pub(crate) use session::{Param, Session, p};
pub(crate) use table::{KeyLookup, KeyTable};

use std::time::Duration;

use crate::exit::{Exit, fail};

/// Await a statement with a client-side deadline. Each batch statement runs in autocommit, so it
/// is its own short transaction: committed, or rolled back by the server on any error. The deadline
/// guards against a dead network path, which the server-side statement_timeout cannot see.
pub async fn with_deadline<T>(
    deadline: Duration,
    work: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(deadline, work).await {
        Ok(r) => r.map_err(|e| connection_context(e.into())),
        Err(_) => Err(fail(
            Exit::Failure,
            format!(
                "no answer from the server within {}; giving up on this connection",
                crate::domain::human_secs(deadline.as_secs_f64())
            ),
        )),
    }
}

fn connection_context(e: anyhow::Error) -> anyhow::Error {
    let closed = e.chain().any(|c| {
        c.downcast_ref::<tokio_postgres::Error>()
            .is_some_and(tokio_postgres::Error::is_closed)
    });
    if closed {
        e.context("lost the connection to the server; the batch in flight was rolled back and the next run continues")
    } else {
        e
    }
}

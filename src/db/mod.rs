//! Database access: the key table's catalog description and the statements idemctl runs, each
//! embedded from `sql/` so a DBA can review exactly what executes.

pub(crate) mod activity;
pub(crate) mod batch;
pub(crate) mod citus;
pub(crate) mod column;
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
pub(crate) mod timestamp;
pub(crate) mod vacuum;

pub(crate) use session::{Param, Session, p};
pub(crate) use table::{KeyLookup, KeyTable};

use std::time::Duration;

/// Await a batch statement. The session bounds every round trip with its deadline (see
/// [`Session`]); `deadline` is that same deadline, kept here only as a backstop a little later, so
/// the session is the one that gives the connection up. Each batch statement runs in autocommit,
/// so it is its own short transaction: committed, or rolled back by the server on any error.
pub(crate) async fn with_deadline<T>(
    deadline: Duration,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(deadline + Duration::from_secs(1), work).await {
        Ok(r) => r,
        Err(_) => Err(anyhow::Error::new(session::Lost::NoAnswer {
            deadline,
            margin: crate::conn::ANSWER_MARGIN,
        })),
    }
}

//! Streaming replicas as the primary sees them in `pg_stat_replication`, for
//! `evict --max-replica-lag`.

use crate::db::Session;
use crate::report::db::Step;
pub(crate) use crate::report::rows::Replica;
use anyhow::{Context as _, Result};

/// Whether the role may read the replay positions, and its name for messages.
pub(crate) async fn visibility(client: &Session) -> Result<(String, bool)> {
    let row = client
        .query_one(include_str!("../../sql/replica_visibility.sql"), &[])
        .await
        .context(Step::CheckReplicationAccess)?;
    Ok((row.get("role"), row.get("can_see")))
}

/// Every physical standby streaming from this server.
pub(crate) async fn replicas(client: &Session) -> Result<Vec<Replica>> {
    let rows = client
        .query(include_str!("../../sql/replica_lag.sql"), &[])
        .await
        .context(Step::ReadReplicaLag)?;
    Ok(rows
        .iter()
        .map(|r| Replica {
            pid: r.get("pid"),
            name: r.get("name"),
            state: r.get("state"),
            replay_position: r.get("replay_position"),
            behind_bytes: r.get("behind_bytes"),
            replay_lag_seconds: r.get("replay_lag_seconds"),
        })
        .collect())
}

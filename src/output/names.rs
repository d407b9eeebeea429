//! How catalog names read from the database are shown to a person: escaped here, in the output
//! layer, so that `db/` hands out names exactly as the catalog holds them.

use super::sanitize;
use crate::report::rows::{Layout, Placement};
use crate::report::table::Table;

impl Table {
    /// The table's name for reports: `schema.name`, control characters escaped.
    pub(crate) fn display(&self) -> String {
        sanitize(&self.name)
    }

    /// The columns that identify a key, as `(tenant, key)` or `(key)`, escaped for reports.
    pub(crate) fn identity_label(&self) -> String {
        sanitize(&self.identity_columns)
    }
}

impl Layout {
    /// How the layout reads in messages and reports, the distribution column escaped.
    pub(crate) fn describe(&self) -> String {
        match self {
            Layout::Distributed { column, shards } => {
                format!("distributed by {} over {shards} shards", sanitize(column))
            }
            Layout::Reference => "a reference table".to_owned(),
            Layout::SingleShard => "a single-shard table of a distributed schema".to_owned(),
            Layout::CitusLocal => "a Citus local table".to_owned(),
        }
    }
}

/// A Citus worker as messages and reports name it: `host:port`, the host (from the coordinator's
/// metadata) escaped.
pub(crate) fn worker(host: &str, port: u16) -> String {
    format!("{}:{port}", sanitize(host))
}

/// Where on a Citus cluster an error was met: a shard on its worker.
pub(crate) fn on_shard(id: i64, worker: &str) -> String {
    format!("shard {id} on worker {worker}")
}

/// Where on a Citus cluster an error was met: a worker.
pub(crate) fn on_worker(worker: &str) -> String {
    format!("worker {worker}")
}

/// A Citus worker (`host:port`) that could not be reached.
pub(crate) fn worker_unreachable(worker: &str) -> String {
    format!("failed to connect to Citus worker {worker}")
}

impl Placement {
    /// The worker holding the shard, `host:port`, for messages.
    pub(crate) fn node_name(&self) -> String {
        worker(&self.node, self.port)
    }
}

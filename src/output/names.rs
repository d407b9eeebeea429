//! How catalog names read from the database are shown to a person: escaped here, in the output
//! layer, so that `db/` hands out names exactly as the catalog holds them.

use super::sanitize;
use crate::commands::shards::Node;
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

impl Node {
    /// `host:port`, for messages and reports.
    pub(crate) fn name(&self) -> String {
        worker(&self.host, self.port)
    }
}

impl Placement {
    /// The worker holding the shard, `host:port`, for messages.
    pub(crate) fn node_name(&self) -> String {
        worker(&self.node, self.port)
    }
}

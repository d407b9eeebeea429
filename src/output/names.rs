//! How catalog names read from the database are shown to a person: escaped here, in the output
//! layer, so that `db/` hands out names exactly as the catalog holds them.

use super::sanitize;
use crate::db::KeyTable;
use crate::db::citus::Layout;

impl KeyTable {
    /// The table's name for reports: `schema.name`, control characters escaped.
    pub fn display(&self) -> String {
        sanitize(&self.qualified_name())
    }

    /// The columns that identify a key, as `(tenant, key)` or `(key)`, escaped for reports.
    pub fn identity_label(&self) -> String {
        sanitize(&self.identity_columns_text())
    }
}

impl Layout {
    /// How the layout reads in messages and reports, the distribution column escaped.
    pub fn describe(&self) -> String {
        match self {
            Layout::Distributed { column, shards } => {
                format!("distributed by {} over {shards} shards", sanitize(column))
            }
            Layout::Reference => "a reference table".to_owned(),
            Layout::SingleShard => "a table of a distributed schema (one shard)".to_owned(),
            Layout::CitusLocal => "a Citus local table".to_owned(),
        }
    }
}

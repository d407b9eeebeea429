//! How catalog names read from the database are shown to a person: escaped here, in the output
//! layer, so that `db/` hands out names exactly as the catalog holds them.

use super::sanitize;
use crate::db::KeyTable;

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

//! The key table as messages name it: names as the catalog and the config file hold them (the
//! output layer escapes them), what its profile says, and the statements that would give it an
//! index it lacks. The database layer fills it in from the resolved table.

use crate::domain::ReclaimAction;

/// The key table for messages.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    /// `schema.name`.
    pub(crate) name: String,
    /// `"schema"."name"`, as a statement shown to a person writes it.
    pub(crate) quoted: String,
    pub(crate) profile: Profile,
    /// The statement that creates the index on in_progress keys.
    pub(crate) stuck_index_fix: String,
    /// The statement that creates the index on the key's identity.
    pub(crate) identity_index_fix: String,
    /// The statement that creates a plain index looking a key up by its scope and key.
    pub(crate) lookup_index_fix: String,
    /// The statement that creates an index led by the key.
    pub(crate) key_index_fix: String,
    /// The identity columns, as `(tenant, key)` or `(key)`.
    pub(crate) identity_columns: String,
}

/// What the messages say of the table's profile.
#[derive(Debug, Clone)]
pub(crate) struct Profile {
    pub(crate) name: String,
    /// The reclaim actions it allows, the default first.
    pub(crate) actions: Vec<ReclaimAction>,
    /// The creation time column.
    pub(crate) created_at: String,
    /// The column that says when a key expires (created_at where the TTL decides).
    pub(crate) expiry_column: String,
    /// The tenant (scope) columns, none on a table without.
    pub(crate) tenant: Vec<String>,
}

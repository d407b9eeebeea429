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
pub mod record;
pub mod replication;
pub mod session;
pub mod table;

pub use session::{Param, Session, p};
pub use table::{KeyLookup, KeyTable};

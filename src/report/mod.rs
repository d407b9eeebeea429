//! The data the reports are made of: typed values that commands and the database layer fill in and
//! the output layer words. Nothing here imports a layer above it.

pub(crate) mod check;
pub(crate) mod citus;
pub(crate) mod db;
pub(crate) mod evict;
pub(crate) mod failure;
pub(crate) mod inspect;
pub(crate) mod reclaim;
pub(crate) mod rows;
pub(crate) mod run;
pub(crate) mod stats;
pub(crate) mod table;
pub(crate) mod timestamp;

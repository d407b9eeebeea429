//! The data the reports are made of: typed values that commands and the database layer fill in and
//! the output layer words. Nothing here imports a layer above it.

pub mod check;
pub mod citus;
pub mod evict;
pub mod inspect;
pub mod rows;
pub mod run;

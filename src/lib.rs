//! idemctl: maintenance of the PostgreSQL table that stores API idempotency keys.
//!
//! The binary in `main.rs` only parses arguments and reports errors; everything else lives here so
//! that integration tests can reach it.

pub mod conn;

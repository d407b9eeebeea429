//! The single integration-test binary: the shared harness, fixtures and the test modules.

mod support;

mod chaos;
mod citus;
mod cli;
mod concurrency;
mod config_file;
mod evict;
mod explain;
mod faults;
mod fixtures;
mod harness_selftest;
mod hostile;
mod inspect;
mod layers;
mod leftovers;
mod maintenance;
mod metrics;
mod pace;
mod partitions;
mod pooler;
mod profiles;
mod pushgateway;
mod rate_limits;
mod read_only;
mod reclaim;
mod replica;
mod require_auth;
mod roles;
mod service_files;
mod snapshots;
mod stats;
mod tls_matrix;
mod transport;
mod vacuum;
mod workload;

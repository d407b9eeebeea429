//! What `check` found on a Citus table: the layout, the workers, and what each shard lacks.

use crate::report::check::Status;
use crate::report::rows::Layout;

/// What one Citus check found.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// How the table is distributed; `tenant_local` when by the tenant column, which the identity
    /// index holds (a tenant's keys then live on one shard).
    Layout { layout: Layout, tenant_local: bool },
    /// The shards could not be reached (the error chain, as one line).
    Unreachable { error: String },
    /// Every worker holding shards was reached.
    Workers { workers: Vec<Worker> },
    /// The shards' indexes: how many shards there are, whether the expiry and in_progress
    /// indexes are wanted (the coordinator's table has them), and what each shard lacks.
    Indexes {
        shards: usize,
        want_expiry: bool,
        want_stuck: bool,
        missing: Vec<ShardLacks>,
        table: String,
        /// The statements, on the coordinator, that give every shard the lost expiry and
        /// in_progress indexes again.
        fixes: Vec<String>,
        /// A shard lost the identity index, which backs a constraint: (the coordinator's
        /// constraint index, its columns as written).
        identity: Option<(String, String)>,
    },
    /// The role's privileges on the shards could not be read.
    PrivilegesUnread { error: String },
    /// The role's grants on the shards: those it has on the coordinator's table that the commands
    /// need (`wanted`), and the shards missing some of them.
    Privileges {
        role: String,
        /// The role quoted, for the GRANT.
        grantee: String,
        shards: usize,
        wanted: Vec<String>,
        short: Vec<ShardLacks>,
        /// The workers where the role may not call the function evict's durable points call.
        no_durable_point: Vec<WorkerLacks>,
        table: String,
    },
}

impl Outcome {
    /// How the check came out: a layout whose commands work shard by shard whatever the column
    /// (or refuse reclaim --apply) is worth a note; what the workers lack fails.
    pub(crate) fn status(&self) -> Status {
        match self {
            Outcome::Layout {
                layout: Layout::SingleShard,
                ..
            } => Status::Note,
            Outcome::Layout {
                layout: Layout::Distributed { .. },
                tenant_local: false,
            } => Status::Note,
            Outcome::Layout { .. } | Outcome::Workers { .. } => Status::Ok,
            Outcome::Unreachable { .. } | Outcome::PrivilegesUnread { .. } => Status::Fail,
            Outcome::Indexes { missing, .. } if missing.is_empty() => Status::Ok,
            Outcome::Privileges {
                short,
                no_durable_point,
                ..
            } if short.is_empty() && no_durable_point.is_empty() => Status::Ok,
            Outcome::Indexes { .. } | Outcome::Privileges { .. } => Status::Fail,
        }
    }
}

/// What one shard lacks (indexes, or grants), and where it is.
#[derive(Debug)]
pub(crate) struct ShardLacks {
    pub(crate) shard: i64,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) lacks: Vec<String>,
}

/// A worker where the role may not call `function` (granted per database, on each worker).
#[derive(Debug)]
pub(crate) struct WorkerLacks {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) function: String,
}

/// A worker holding shards of the table.
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) shards: usize,
}

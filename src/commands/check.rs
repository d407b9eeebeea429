//! `idemctl check`: is the table what idemctl expects, may this role do its jobs, and are the
//! eviction lag and stuck-key count within the alert thresholds. Every problem comes with the
//! statement that fixes it. The checks run over the table's placements like stats does: on Citus,
//! the workers holding the shards must be reachable with this connection's settings, every shard
//! must carry the table's indexes and the role's grants must have reached it. Findings are typed
//! values; src/output/check.rs words them.

use anyhow::{Context as _, Result};

use super::shards::{Cluster, Placements};
use crate::cli::CheckArgs;
use crate::commands::stats::{self, StatsReport};
use crate::conn::Route;
use crate::context::Context;
use crate::db::KeyTable;
use crate::db::profile::Action;
use crate::db::session::{Session, Writability};
use crate::db::table::{Index, Job, Privileges};
use crate::exit::{Exit, fail};
use crate::ident::quote_ident;
use crate::report::check::{
    self as r, DropPartitions, Found, Identity, IndexRef, Referencing, Structure as S, Threshold,
};
pub(crate) use crate::report::check::{Finding, Status};
use crate::report::citus::{Outcome, ShardLacks, Worker, WorkerLacks};
use crate::report::db::ColumnProblem;
use crate::report::rows::{Layout, ReferencingKey};

/// Run `check`.
pub(crate) async fn run(ctx: &Context, args: &CheckArgs) -> Result<Exit> {
    let client = ctx.session().await?;
    let table = ctx.table(&client).await?;
    let mut findings = vec![connection(ctx.route()).into()];
    findings.extend(structure(&table));
    let role_privileges = table.privileges(&client).await?;
    findings.extend(references(&client, &table, &role_privileges.role).await?);
    let writability = client.writability().await?;
    findings.extend(privileges(&table, &role_privileges, writability));
    findings.push(writes(writability).into());
    // The layout is resolved once; the shards of a table Citus distributes are checked, and an
    // unreachable worker is a finding, not an error.
    let layout = crate::db::citus::layout(&client, &table).await?;
    let shard_by_shard = layout.as_ref().is_some_and(Layout::sharded);
    let placements = match Placements::of(ctx, &client, &table, layout.clone()).await {
        Err(e) if !shard_by_shard => return Err(e),
        placements => placements,
    };
    // The walk runs on one server only: on the shards of a distributed table nothing is walked.
    if !shard_by_shard {
        measure_walk(ctx, &client, &table, &mut findings).await;
    }
    if let Some(layout) = layout.filter(|_| shard_by_shard) {
        for o in citus(&table, layout, &placements, &role_privileges).await {
            findings.push(Finding::new(o.status(), Found::Citus(o)));
        }
    }
    // The statistics read the key table only; a failure elsewhere (a referencing table without
    // an index, a missing identity index) leaves them safe to read, so the thresholds are checked.
    let blocking: Vec<usize> = findings
        .iter()
        .enumerate()
        .filter(|(_, f)| f.status == Status::Fail && !read_despite(&f.found))
        .map(|(i, _)| i)
        .collect();
    match placements {
        Ok(placements) if blocking.is_empty() => {
            let reading = stats::Reading {
                stuck_after_secs: args.stuck_after.as_secs_f64(),
                backlog_cap: None,
                stuck_cap: stats::STUCK_CAP,
                allow_scan: args.allow_scan,
                below_ttl: args.min_ttl.map(|d| d.as_secs_f64()),
            };
            let report = stats::gather(&client, &table, &placements, reading).await?;
            findings.extend(partitioning(&table, &report));
            findings.extend(thresholds(&report, args));
        }
        _ => findings.extend(thresholds_skipped(args, blocking)),
    }
    let json = crate::output::check::json(&table.qualified_name(), &findings);
    ctx.output
        .emit(&crate::output::check::findings(&findings), &json)?;
    let failed: Vec<&Finding> = findings
        .iter()
        .filter(|f| matches!(f.status, Status::Fail | Status::Breached))
        .collect();
    match failed.as_slice() {
        [] => Ok(Exit::Success),
        failed => Err(fail(
            Exit::ThresholdBreached,
            crate::output::check::failed(failed, &findings),
        )),
    }
}

/// Failing checks that do not keep the statistics from being read safely.
fn read_despite(found: &Found) -> bool {
    matches!(
        found,
        Found::Referencing { .. } | Found::Structure(S::Identity { .. })
    )
}

/// The threshold rows, each marked as not checked, when a failure above makes reading the
/// statistics unsafe (they would scan the key table) or impossible.
fn thresholds_skipped(args: &CheckArgs, blocking: Vec<usize>) -> Vec<Finding> {
    let mut rows = vec![Threshold::Lag];
    if args.max_stuck.is_some() {
        rows.push(Threshold::Stuck {
            after: args.stuck_after.as_secs_f64(),
        });
    }
    rows.push(Threshold::Autovacuum);
    if args.min_ttl.is_some() {
        rows.push(Threshold::RecentTtl);
    }
    rows.into_iter()
        .map(|threshold| {
            let blocking = blocking.clone();
            Finding::new(
                Status::Note,
                Found::NotChecked {
                    threshold,
                    blocking,
                },
            )
        })
        .collect()
}

/// How idemctl reaches its server sessions, and what that means for evict and reclaim.
fn connection(route: Option<Route>) -> (Status, Found) {
    let status = match route {
        Some(r) if r.owns_session() => Status::Ok,
        _ => Status::Note,
    };
    let found = Found::Connection {
        route,
        owns_session: route.is_some_and(Route::owns_session),
    };
    (status, found)
}

/// Whether evict and reclaim can change anything on this session.
fn writes(writability: Writability) -> (Status, Found) {
    let status = if writability == Writability::Writable {
        Status::Ok
    } else {
        Status::Note
    };
    (status, Found::Writes { writability })
}

fn index_ref(i: &Index) -> IndexRef {
    IndexRef {
        name: i.name.clone(),
        columns: i.columns.clone(),
    }
}

/// Columns and indexes.
fn structure(table: &KeyTable) -> Vec<Finding> {
    let p = &table.profile;
    let mut out = vec![Finding::new(
        Status::Ok,
        Found::Structure(S::Profile {
            name: p.name.clone(),
            because: p.matched_because.clone(),
        }),
    )];
    let problems = table.column_problems();
    let time_problem = p.time_problem(&table.columns);
    if problems.is_empty() && time_problem.is_none() {
        let profile = p.name.clone();
        out.push(Finding::new(
            Status::Ok,
            Found::Structure(S::ColumnsOk { profile }),
        ));
    }
    // The table belongs to the application: a mismatch is fixed by choosing or mapping the
    // profile, never by changing the table.
    for ColumnProblem {
        column,
        found,
        expected,
    } in problems
    {
        let profile = p.name.clone();
        let other_case = table.other_case(&column).map(quote_ident);
        let found = Found::Structure(S::Column {
            column,
            profile,
            found,
            expected,
            other_case,
        });
        out.push(Finding::new(Status::Fail, found));
    }
    if let Some(why) = time_problem {
        out.push(Finding::new(
            Status::Fail,
            Found::Structure(S::TimeColumns { why }),
        ));
    }
    if p.lacks_ttl() {
        let created_at = p.created_at.clone();
        out.push(Finding::new(
            Status::Fail,
            Found::Structure(S::NoExpiry { created_at }),
        ));
    }
    out.push(expiry_index(table).into());
    out.push(identity_index(table).into());
    out.push(stuck_index(table).into());
    out
}

/// The expiry index, or the index evict walks without it.
fn expiry_index(table: &KeyTable) -> (Status, Found) {
    let index = table.expiry_index().map(|i| i.name.clone());
    let walked = table.walk_index().map(|i| i.name.clone());
    let status = match (&index, &walked) {
        (Some(_), _) => Status::Ok,
        (None, Some(_)) => Status::Warn,
        (None, None) => Status::Fail,
    };
    let found = Found::Structure(S::ExpiryIndex {
        column: table.profile.expiry_column().to_owned(),
        walked: walked.filter(|_| index.is_none()),
        index,
        ttl: table.profile.expires_by_ttl(),
        fix: table.expiry_index_fix(),
        walk_cost: None,
    });
    (status, found)
}

/// Entries of the timed page: a few milliseconds of reading on any table.
const TIMED_PAGE: i64 = 5_000;

/// Measure what evict's walk costs on a table without an expiry index, and put it beside the
/// expiry index's finding: the walked index's entries and the expired share (the planner's
/// figures), and one bounded read-only page (the dry run's statement), timed, to extrapolate a
/// full walk. Nothing is measured where the table has the index or nothing to walk; a figure that
/// cannot be read is left out, never a failure of check.
async fn measure_walk(ctx: &Context, client: &Session, table: &KeyTable, findings: &mut [Finding]) {
    if table.expiry_index().is_some() {
        return;
    }
    let Some(index) = table.walk_index() else {
        return;
    };
    let Some(slot) = findings.iter_mut().find_map(|f| match &mut f.found {
        Found::Structure(S::ExpiryIndex { walk_cost, .. }) => Some(walk_cost),
        _ => None,
    }) else {
        return;
    };
    let (entries, bytes) = crate::db::queries::index_entries(client, table, &index.name)
        .await
        .unwrap_or((None, 0));
    let expired = match table.profile.lacks_ttl() {
        true => None,
        false => crate::db::evict::estimate_backlog(client, table)
            .await
            .ok()
            .and_then(|n| i64::try_from(n).ok()),
    };
    let walk = crate::db::evict::Walk::new(table, index);
    let t0 = std::time::Instant::now();
    let timed = walk
        .preview_page(client, ctx.answer_deadline(), TIMED_PAGE, None, 0, None)
        .await
        .ok();
    let seconds = t0.elapsed().as_secs_f64();
    let page = crate::domain::WALK_PAGE;
    let examined = timed.map_or(0, |t| t.page.examined);
    let fraction = match (expired, entries) {
        (Some(x), Some(n)) if n > 0 => Some((x as f64 / n as f64).min(1.0)),
        _ => None,
    };
    *slot = Some(r::WalkCost {
        index: index.name.clone(),
        index_entries: entries,
        index_bytes: bytes,
        page_size: page,
        pages_per_run: entries.map(|n| (n + i64::from(page) - 1) / i64::from(page)),
        expired_estimate: expired,
        expired_fraction: fraction,
        entries_per_expired_row: match (expired, entries) {
            (Some(x), Some(n)) if x > 0 => Some(n as f64 / x as f64),
            _ => None,
        },
        follows_age: walk.follows_age,
        timed_entries: examined,
        timed_seconds: seconds,
        full_walk_seconds_estimate: entries
            .filter(|_| examined > 0)
            .map(|n| seconds / examined as f64 * n as f64),
    });
}

/// The identity index: unique across the table, within a partition, wider than the mapping, or
/// missing.
fn identity_index(table: &KeyTable) -> (Status, Found) {
    let (status, identity) = match table.identity_index() {
        Some(i) if !table.identity_is_global() => (
            Status::Note,
            Identity::PerPartition {
                index: index_ref(i),
                partition_key: table.partition_key().to_vec(),
            },
        ),
        Some(i) => (Status::Ok, Identity::Global(index_ref(i))),
        // The table's own identity is wider than the mapping's (a primary key of more columns):
        // an index on the mapping's columns would refuse rows the application writes.
        None if let Some(i) = table.wider_identity_index() => {
            (Status::Warn, Identity::Wider(index_ref(i)))
        }
        // No unique index implies the identity: idemctl never proposes one (it could refuse rows
        // already written), only the plain index lookups need.
        None if table.has_tenant_key_index() => (Status::Warn, Identity::NotEnforced { fix: None }),
        None => (
            Status::Fail,
            Identity::NotEnforced {
                fix: Some(table.lookup_index_fix()),
            },
        ),
    };
    let label = table.identity_columns_text();
    (status, Found::Structure(S::Identity { identity, label }))
}

/// The optional in_progress index (none is needed without an in-flight marker).
fn stuck_index(table: &KeyTable) -> (Status, Found) {
    let index = table.stuck_index().map(|i| i.name.clone());
    if index.is_none() && !table.profile.has_in_flight_marker() {
        let found = Found::Structure(S::NoInFlightMarker {
            table: table.qualified_name(),
            profile: table.profile.name.clone(),
        });
        return (Status::Ok, found);
    }
    let status = match index {
        Some(_) => Status::Ok,
        None => Status::Note,
    };
    let fix = table.stuck_index_fix();
    (status, Found::Structure(S::StuckIndex { index, fix }))
}

/// The foreign keys that reference the key table, each with what it means for evict. Of a NO
/// ACTION / RESTRICT key, how many of the oldest expired keys it still references is counted
/// where that is cheap: an index probe per expired key, a bounded number of them.
async fn references(client: &Session, table: &KeyTable, role: &str) -> Result<Vec<Finding>> {
    let keys = crate::db::queries::referencing_keys(client, table).await?;
    let mut out = Vec::new();
    for k in keys {
        let cheap = k.blocks()
            && k.indexed
            && k.may_read
            && !table.profile.lacks_ttl()
            && table.profile.time_problem(&table.columns).is_none()
            && table.column_problems().is_empty()
            && table.expiry_index().is_some();
        let counted = match cheap {
            true => Some(
                crate::db::references::referenced_expired(client, table, &k, stats::REFERENCED_CAP)
                    .await?,
            ),
            false => None,
        };
        out.push(referencing(k, counted, role).into());
    }
    Ok(out)
}

/// Every evicted key runs a referencing foreign key's ON DELETE action inside evict's batch (its
/// timing includes that work), and scans the referencing table when no index leads with the
/// referencing columns. A NO ACTION / RESTRICT key keeps a referenced key from being deleted:
/// evict leaves it behind.
fn referencing(key: ReferencingKey, counted: Option<(i64, i64)>, role: &str) -> (Status, Found) {
    let (status, case) = if !key.indexed {
        let columns = key.columns.iter().map(|c| quote_ident(c)).collect();
        (Status::Fail, Referencing::Unindexed { columns })
    } else if key.blocks() && !key.may_read {
        (Status::Warn, Referencing::Unreadable)
    } else if key.blocks() {
        (Status::Warn, Referencing::LeftBehind { counted })
    } else if !key.may_lock {
        (Status::Note, Referencing::Unlockable)
    } else {
        (Status::Ok, Referencing::Fine)
    };
    let grantee = quote_ident(role);
    (status, Found::Referencing { key, grantee, case })
}

/// How a partitioned table is laid out, and what that means for evict.
fn partitioning(table: &KeyTable, r: &StatsReport) -> Vec<Finding> {
    let (Some(how), Some(parts)) = (&r.partitioning, &r.partitions) else {
        return Vec::new();
    };
    let definition = how.definition.clone();
    let mut out = vec![Finding::new(
        Status::Ok,
        Found::Structure(S::Partitioning {
            definition: definition.clone(),
            leaves: parts.len(),
        }),
    )];
    if let Some(p) = r.default_partition().filter(|p| p.estimated_rows > 0) {
        let found = Found::Structure(S::DefaultPartition {
            name: p.name.clone(),
            rows: p.estimated_rows,
        });
        out.push(Finding::new(Status::Note, found));
    }
    let (status, drop) = match table.range_key() {
        None => (Status::Note, DropPartitions::NotRange { definition }),
        Some(_) if table.stuck_index().is_none() && table.profile.has_in_flight_marker() => {
            let fix = table.stuck_index_fix();
            (Status::Note, DropPartitions::NeedsStuckIndex { fix })
        }
        Some(key) if table.expiry_index().is_none() && table.expiry_past_bound().is_none() => {
            let found = DropPartitions::NeedsExpiryIndex {
                key: key.column(),
                column: table.profile.expiry_column().to_owned(),
                fix: table.expiry_index_fix(),
            };
            (Status::Note, found)
        }
        Some(key) => {
            let column = key.column();
            (Status::Ok, DropPartitions::Available { column })
        }
    };
    out.push(Finding::new(status, Found::DropPartitions(drop)));
    out
}

/// What each command needs, against what the role has. On a session that cannot write, the
/// evict and reclaim rows say that those commands refuse here (exit 6) instead of "ok".
fn privileges(table: &KeyTable, p: &Privileges, writability: Writability) -> Vec<Finding> {
    let role = p.role.clone();
    let grantee = quote_ident(&p.role);
    let missing = |job: Job| -> Vec<String> {
        table
            .privilege_needs(p, job)
            .into_iter()
            .filter(|(_, has)| !has)
            .map(|(g, _)| g)
            .collect()
    };
    let refused = (writability != Writability::Writable).then_some(writability);
    let granted = |missing: &[String]| match (missing.is_empty(), refused) {
        (true, None) => Status::Ok,
        _ => Status::Note,
    };
    let mut out = Vec::new();
    let read = missing(Job::Read);
    let status = match read.is_empty() {
        true => Status::Ok,
        false => Status::Fail,
    };
    out.push(Finding::new(
        status,
        Found::Privileges(r::Privileges::Read {
            role: role.clone(),
            grantee: grantee.clone(),
            missing: read,
            table: table.quoted.clone(),
        }),
    ));
    let evict = missing(Job::Evict);
    let durable_point = (!p.confirm).then(|| p.confirm_function_name());
    let status = match durable_point {
        None => granted(&evict),
        Some(_) => Status::Note,
    };
    out.push(Finding::new(
        status,
        Found::Privileges(r::Privileges::Evict {
            role: role.clone(),
            grantee: grantee.clone(),
            missing: evict,
            durable_point,
            refused,
            table: table.quoted.clone(),
        }),
    ));
    if table.range_key().is_some() {
        let status = match p.owner {
            true => Status::Ok,
            false => Status::Note,
        };
        let found = r::Privileges::DropPartitions {
            role: role.clone(),
            owner: p.owner,
        };
        out.push(Finding::new(status, Found::Privileges(found)));
    }
    // Only the actions the table's profile allows are worth a grant.
    let actions = &table.profile.actions;
    let (able, unable): (Vec<_>, Vec<_>) = actions
        .iter()
        .map(|a| (*a, missing(Job::Reclaim(*a))))
        .partition(|(_, m)| m.is_empty());
    let mut lacks: Vec<String> = Vec::new();
    for g in unable.iter().flat_map(|(_, m)| m) {
        if !lacks.contains(g) {
            lacks.push(g.clone());
        }
    }
    let status = match actions.is_empty() {
        true => Status::Note,
        false => granted(&lacks),
    };
    let found = r::Privileges::Reclaim(r::ReclaimGrants {
        role,
        grantee,
        profile: table.profile.name.clone(),
        able: able.into_iter().map(|(a, _)| a).collect(),
        unable: unable.into_iter().map(|(a, _)| a).collect(),
        lacks,
        refused,
        table: table.quoted.clone(),
    });
    out.push(Finding::new(status, Found::Privileges(found)));
    out
}

/// The eviction lag, stuck-key, autovacuum and recent-TTL threshold rows.
fn thresholds(r: &StatsReport, args: &CheckArgs) -> Vec<Finding> {
    let mut out = vec![lag(r, args).into()];
    let after = r.stuck_after_seconds;
    match (&r.stuck, args.max_stuck) {
        (None, Some(_)) => out.push(Finding::new(
            Status::Fail,
            Found::Stuck {
                after,
                stuck: r::Stuck::Uncounted,
            },
        )),
        (Some(st), max) => {
            let status = match max {
                Some(max) if st.count.count as u64 > max => Status::Breached,
                Some(_) => Status::Ok,
                None => Status::Note,
            };
            let stuck = r::Stuck::Counted {
                count: st.count,
                max,
            };
            out.push(Finding::new(status, Found::Stuck { after, stuck }));
        }
        (None, None) => {}
    }
    out.push(autovacuum(r, args).into());
    out.extend(recent_ttl(r, args));
    out
}

/// The eviction lag against --max-eviction-lag. When each of the oldest expired keys stats
/// examined is still referenced and more wait beyond them, the lag is at most the newest one's
/// wait, and past the threshold it is not evict's (a warning, not a breach).
fn lag(r: &StatsReport, args: &CheckArgs) -> (Status, Found) {
    let Some(seconds) = r.eviction_lag_seconds else {
        return (Status::Note, Found::Lag(r::Lag::Unknown));
    };
    let at_most = r.referenced_expired.clone().filter(|x| x.lag_at_most);
    let max = args.max_eviction_lag.map(|m| m.as_secs_f64());
    let status = match max {
        Some(max) if seconds > max && at_most.is_some() => Status::Warn,
        Some(max) if seconds > max => Status::Breached,
        Some(_) => Status::Ok,
        None => Status::Note,
    };
    let found = r::Lag::Known {
        seconds,
        at_most,
        max,
    };
    (status, Found::Lag(found))
}

/// Autovacuum against the eviction interval.
fn autovacuum(r: &StatsReport, args: &CheckArgs) -> (Status, Found) {
    match super::maintenance::autovacuum_advice(&r.maintenance, args.evict_interval) {
        Some(advice) => (Status::Warn, Found::Autovacuum(advice)),
        None => {
            let fine = r::Autovacuum::Fine {
                cycle: r.maintenance.cycle_seconds,
                interval: args.evict_interval.as_secs_f64(),
            };
            (Status::Ok, Found::Autovacuum(fine))
        }
    }
}

/// --min-ttl against recent keys.
fn recent_ttl(r: &StatsReport, args: &CheckArgs) -> Option<Finding> {
    let min = args.min_ttl?.as_secs_f64();
    Some(match &r.recent_ttl {
        None => Finding::new(Status::Note, Found::RecentTtl(r::TtlCheck::NoKeys)),
        Some(t) if t.min_seconds < min => {
            let ttl = t.clone();
            Finding::new(
                Status::Breached,
                Found::RecentTtl(r::TtlCheck::Short { ttl, min }),
            )
        }
        Some(t) => {
            let shortest = t.min_seconds;
            Finding::new(
                Status::Ok,
                Found::RecentTtl(r::TtlCheck::Fine { shortest, min }),
            )
        }
    })
}

/// The checks on the workers of a table Citus distributes, in the order check reports them.
async fn citus(
    table: &KeyTable,
    layout: Layout,
    placements: &Result<Placements>,
    coordinator: &Privileges,
) -> Vec<Outcome> {
    let mut out = vec![distribution(table, layout)];
    let cluster = match placements {
        Ok(Placements {
            cluster: Some(c), ..
        }) => c,
        Ok(_) => return out,
        Err(e) => {
            let error = crate::domain::one_line(e);
            out.push(Outcome::Unreachable { error });
            return out;
        }
    };
    out.push(workers(cluster));
    out.push(shard_indexes(table, cluster));
    match shard_privileges(table, coordinator, cluster).await {
        Ok(f) => out.push(f),
        Err(e) => out.push(Outcome::PrivilegesUnread {
            error: crate::domain::one_line(&e),
        }),
    }
    out
}

/// How the table is distributed: by the tenant column of the identity index, or not.
fn distribution(table: &KeyTable, layout: Layout) -> Outcome {
    let tenant_local = match &layout {
        Layout::Distributed { column, .. } => {
            table.profile.tenant.as_slice() == std::slice::from_ref(column)
                && table
                    .identity_index()
                    .is_some_and(|i| i.columns.iter().any(|c| c == column))
        }
        _ => false,
    };
    Outcome::Layout {
        layout,
        tenant_local,
    }
}

fn workers(cluster: &Cluster) -> Outcome {
    let workers = cluster
        .nodes
        .iter()
        .map(|n| Worker {
            host: n.host.clone(),
            port: n.port,
            shards: n.shards.len(),
        })
        .collect();
    Outcome::Workers { workers }
}

/// Every shard carries the identity index, and the expiry and in_progress indexes when the
/// coordinator's table has them (without the expiry index, evict walks each shard's copy of the
/// unique index instead).
fn shard_indexes(table: &KeyTable, cluster: &Cluster) -> Outcome {
    let want_expiry = table.expiry_index().is_some();
    let want_stuck = table.stuck_index().is_some();
    let mut missing = Vec::new();
    let mut shards = 0;
    for node in &cluster.nodes {
        for shard in &node.shards {
            shards += 1;
            let t = &shard.table;
            let lacks: Vec<String> = [
                ("expiry", want_expiry && t.expiry_index().is_none()),
                ("identity", t.identity_index().is_none()),
                ("in_progress", want_stuck && t.stuck_index().is_none()),
            ]
            .into_iter()
            .filter(|(_, lost)| *lost)
            .map(|(what, _)| what.to_owned())
            .collect();
            if !lacks.is_empty() {
                missing.push(ShardLacks {
                    shard: shard.id,
                    host: node.host.clone(),
                    port: node.port,
                    lacks,
                });
            }
        }
    }
    let lost = |what: &str| missing.iter().any(|m| m.lacks.iter().any(|l| l == what));
    let mut fixes = Vec::new();
    if lost("expiry") {
        let fix = table.expiry_index_fix();
        fixes.push(crate::db::citus::recreate_index(
            table,
            table.expiry_index(),
            &fix,
        ));
    }
    if lost("in_progress") {
        let fix = table.stuck_index_fix();
        fixes.push(crate::db::citus::recreate_index(
            table,
            table.stuck_index(),
            &fix,
        ));
    }
    let identity = lost("identity").then(|| {
        let name = table.identity_index().map(|i| i.name.clone());
        (name.unwrap_or_default(), table.identity_columns_text())
    });
    Outcome::Indexes {
        shards,
        want_expiry,
        want_stuck,
        missing,
        table: table.quoted.clone(),
        fixes,
        identity,
    }
}

/// The role's grants on every shard: each grant the commands need that the role has on the
/// coordinator's table must have reached every shard (what it lacks on the coordinator is reported
/// by the privilege checks above).
async fn shard_privileges(
    table: &KeyTable,
    coordinator: &Privileges,
    cluster: &Cluster,
) -> Result<Outcome> {
    let jobs = [Job::Read, Job::Evict, Job::Reclaim(Action::Delete)];
    let wanted: Vec<String> = jobs
        .iter()
        .flat_map(|job| table.privilege_needs(coordinator, *job))
        .filter(|(_, has)| *has)
        .map(|(g, _)| g)
        .collect();
    let mut short = Vec::new();
    let mut no_durable_point = Vec::new();
    let mut shards = 0;
    for node in &cluster.nodes {
        let session = node.session().await?;
        for shard in &node.shards {
            shards += 1;
            let read = async {
                crate::db::citus::begin_catalog_reads(&session).await?;
                let p = shard.table.privileges(&session).await;
                // A read that failed on a lost connection is what the finding names, not the
                // end that follows.
                let ended = crate::db::citus::end_catalog_reads(&session).await;
                let p = p?;
                ended.map(|()| p)
            };
            let p = read.await.with_context(|| {
                crate::output::names::on_shard(
                    shard.id,
                    &crate::output::names::worker(&node.host, node.port),
                )
            })?;
            if !p.confirm
                && !no_durable_point
                    .iter()
                    .any(|w: &WorkerLacks| w.host == node.host && w.port == node.port)
            {
                no_durable_point.push(WorkerLacks {
                    host: node.host.clone(),
                    port: node.port,
                    function: p.confirm_function_name(),
                });
            }
            let mut lacks: Vec<String> = Vec::new();
            for job in jobs {
                for (grant, has) in shard.table.privilege_needs(&p, job) {
                    if !has && wanted.contains(&grant) && !lacks.contains(&grant) {
                        lacks.push(grant);
                    }
                }
            }
            if !lacks.is_empty() {
                short.push(ShardLacks {
                    shard: shard.id,
                    host: node.host.clone(),
                    port: node.port,
                    lacks,
                });
            }
        }
    }
    Ok(Outcome::Privileges {
        role: coordinator.role.clone(),
        grantee: quote_ident(&coordinator.role),
        shards,
        wanted,
        short,
        no_durable_point,
        table: table.quoted.clone(),
    })
}

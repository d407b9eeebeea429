//! reclaim's preview (`--dry-run`, `--plan`): the stuck keys listed and counted in one snapshot,
//! changing nothing.

use std::path::Path;

use crate::report::timestamp::Timestamp;
use anyhow::Result;
use time::OffsetDateTime;

use super::placements::{Placements, on_workers, routed_shard};
use super::plan::{PLAN_VERSION, Plan, PlanRow};
use super::request::{COUNT_CAP, LIST_CAP, Mode, Request};
use super::validation::{require_not_null_scope, require_privileges, require_stuck_index};
use crate::cli::ReclaimArgs;
use crate::context::Context;
use crate::db::queries;
use crate::db::reclaim as reclaim_db;
use crate::db::{KeyTable, Session};
use crate::domain::ReclaimAction;
use crate::exit::{Exit, fail};
use crate::output::prometheus::write_atomic;
use crate::output::reclaim as output;
use crate::report::reclaim::{Candidate, PreviewReport};
use crate::report::rows::{Capped, DatabaseIdentity};
use anyhow::Context as _;

/// A table without an in-flight marker: no key is ever in flight, so a dry run finds nothing
/// (without reading the table) and a run that would change something refuses.
pub(super) fn nothing_in_flight(ctx: &Context, table: &KeyTable, req: &Request) -> Result<Exit> {
    if !matches!(req.mode, Mode::Preview(None)) {
        return Err(fail(
            Exit::Usage,
            output::no_in_flight_marker(&table.shown()),
        ));
    }
    let json = serde_json::json!({
        "table": table.qualified_name(),
        "dry_run": true,
        "in_flight_marker": false,
        "would_reclaim": Capped::from_raw(0, 0),
        "rows": [],
    });
    ctx.output
        .emit(&output::nothing_in_flight(&table.shown()), &json)?;
    Ok(Exit::Success)
}

impl Candidate {
    pub(super) fn from_stuck(r: reclaim_db::StuckKey) -> Candidate {
        Candidate {
            // The listing returns only keys held past its cutoff, which compares locked_at or
            // created_at: one of them is set.
            held_since: r
                .locked_at
                .or(r.created_at)
                .unwrap_or(Timestamp::MinusInfinity),
            held_since_column: if r.locked_at.is_some() {
                "locked_at"
            } else {
                "created_at"
            },
            api_key_id: r.api_key_id,
            scope: r.scope,
            key: r.key,
            request_method: r.request_method,
            request_path: r.request_path,
            locked_at: r.locked_at,
            created_at: r.created_at,
            age_seconds: r.age_seconds,
        }
    }

    pub(super) fn plan_row(&self) -> PlanRow {
        PlanRow {
            api_key_id: self.api_key_id.clone(),
            scope: self
                .scope
                .as_ref()
                .map(|s| s.0.iter().map(|(_, v)| v.clone()).collect()),
            nulls: Vec::new(),
            key: self.key.clone(),
            locked_at: self.locked_at,
            created_at: self.created_at,
            request_method: self.request_method.clone(),
            request_path: self.request_path.clone(),
            age_seconds: self.age_seconds,
        }
    }
}

/// What the preview found, from one consistent snapshot.
pub(super) struct Found {
    pub(super) rows: Vec<Candidate>,
    /// More rows matched than were listed.
    pub(super) truncated: bool,
    pub(super) count: Capped,
    pub(super) db_now: OffsetDateTime,
}

pub(super) async fn preview(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
    plan_path: Option<&Path>,
) -> Result<Exit> {
    if plan_path.is_some() {
        require_not_null_scope(table)?;
    }
    require_stuck_index(table, args.allow_scan, ctx.global.quiet)?;
    require_privileges(client, table, None).await?;
    if plan_path.is_some() && req.no_action {
        return Err(fail(Exit::Usage, output::no_safe_action(&table.shown())));
    }
    let cap = req.limit.map_or(LIST_CAP, |l| {
        i64::try_from(l).unwrap_or(i64::MAX).min(LIST_CAP)
    });
    // Where the scope routes the preview to the one shard that holds its keys, it reads there
    // (on that shard's worker); otherwise through the session it has.
    let scope = req.filter.api_key_id.as_deref();
    let layout = req.layout.as_ref().filter(|l| on_workers(Some(l)));
    let placements = match layout {
        Some(l) if routed_shard(client, table, l, scope).await?.is_some() => {
            Some(Placements::connect(ctx, client, table, Some(l), scope).await?)
        }
        _ => None,
    };
    let routed = placements.as_ref().and_then(Placements::routed_node);
    let found = match routed.as_ref().and_then(|n| Some((n, n.shards.first()?))) {
        Some((node, shard)) => {
            let session = node.session().await?;
            find(&session, shard.table, req, cap).await?
        }
        None => find(client, table, req, cap).await?,
    };
    if let Some(path) = plan_path {
        let database = queries::database_identity(client).await?;
        write_plan(path, table, req, &found, database)?;
    }
    let report = PreviewReport::new(table, req, found, plan_path);
    ctx.output
        .emit(&output::preview(&report), &serde_json::to_value(&report)?)?;
    Ok(Exit::Success)
}

/// List up to `cap` stuck keys and count them (up to COUNT_CAP) in one read-only snapshot, so the
/// count and the list agree.
pub(super) async fn find(
    client: &Session,
    table: &KeyTable,
    req: &Request,
    cap: i64,
) -> Result<Found> {
    let listing =
        reclaim_db::list_stuck(client, table, req.older_than, cap, COUNT_CAP, &req.filter).await?;
    Ok(Found {
        rows: listing
            .rows
            .into_iter()
            .map(Candidate::from_stuck)
            .collect(),
        truncated: listing.truncated,
        count: listing.count,
        db_now: listing.db_now,
    })
}

impl PreviewReport {
    pub(super) fn new(
        table: &KeyTable,
        req: &Request,
        found: Found,
        plan_path: Option<&Path>,
    ) -> PreviewReport {
        PreviewReport {
            table: table.qualified_name(),
            dry_run: true,
            older_than_seconds: req.older_than,
            filter: req.filter.clone(),
            action: (!req.no_action).then_some(req.action),
            response_status: req.body.as_ref().map(|_| req.status),
            response_body: req.body.clone(),
            limit: req.limit,
            would_reclaim: found.count,
            rows_listed: found.rows.len(),
            listing_truncated: found.truncated,
            plan_file: plan_path.map(|p| p.display().to_string()),
            db_now: to_the_second(found.db_now),
            rows: found.rows,
            status: req.status,
        }
    }
}

/// The database clock as the report shows it: UTC, to the second.
fn to_the_second(t: OffsetDateTime) -> OffsetDateTime {
    let t = t.to_offset(time::UtcOffset::UTC);
    t.replace_nanosecond(0).unwrap_or(t)
}

pub(super) fn write_plan(
    path: &Path,
    table: &KeyTable,
    req: &Request,
    found: &Found,
    database: DatabaseIdentity,
) -> Result<()> {
    let plan = Plan {
        schema_version: PLAN_VERSION,
        table: format!("{}.{}", table.schema, table.name),
        older_than_seconds: req.older_than,
        action: req.action,
        status: req.status,
        body: req.body.clone(),
        keep_failed_for_seconds: match req.action {
            ReclaimAction::Fail => req.keep_failed,
            ReclaimAction::Delete | ReclaimAction::Release => 0.0,
        },
        database: Some(database),
        created_at: Some(found.db_now),
        truncated: found.truncated,
        filter: req.filter.clone(),
        rows: found.rows.iter().map(Candidate::plan_row).collect(),
    };
    let mut text =
        serde_json::to_string_pretty(&plan).context(crate::report::failure::Step::EncodePlan)?;
    text.push('\n');
    write_atomic(path, &text).with_context(|| output::plan_unwritten(path))
}

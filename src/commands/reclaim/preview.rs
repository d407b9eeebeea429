//! reclaim's preview (`--dry-run`, `--plan`): the stuck keys listed and counted in one snapshot,
//! changing nothing.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use super::plan::{PLAN_VERSION, Plan, PlanRow};
use super::report::filter_or_null;
use super::request::{COUNT_CAP, LIST_CAP, Mode, Request};
use super::validation::{require_privileges, require_stuck_index};
use crate::cli::ReclaimArgs;
use crate::context::Context;
use crate::db::queries;
use crate::db::reclaim as reclaim_db;
use crate::db::{KeyTable, Session};
use crate::domain::ReclaimAction;
use crate::exit::{Exit, fail};
use crate::output::prometheus::write_atomic;
use crate::output::reclaim as output;
use crate::report::rows::{Capped, DatabaseIdentity};
use anyhow::Context as _;

/// A table without an in-flight marker: no key is ever in flight, so a dry run finds nothing
/// (without reading the table) and a run that would change something refuses.
pub(super) fn nothing_in_flight(ctx: &Context, table: &KeyTable, req: &Request) -> Result<Exit> {
    if !matches!(req.mode, Mode::Preview(None)) {
        return Err(fail(Exit::Usage, output::no_in_flight_marker(table)));
    }
    let json = serde_json::json!({
        "table": table.qualified_name(),
        "dry_run": true,
        "in_flight_marker": false,
        "would_reclaim": Capped::from_raw(0, 0),
        "rows": [],
    });
    ctx.output.emit(&output::nothing_in_flight(table), &json)?;
    Ok(Exit::Success)
}

/// A stuck key as the preview lists it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Candidate {
    /// None on a table without a tenant column (null in JSON).
    pub(crate) api_key_id: Option<String>,
    pub(crate) key: String,
    /// None where the table has no such column or the row holds NULL (null in JSON).
    pub(crate) request_method: Option<String>,
    pub(crate) request_path: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub(crate) locked_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub(crate) created_at: OffsetDateTime,
    /// locked_at, or created_at where the owner never set locked_at.
    #[serde(with = "time::serde::rfc3339")]
    pub(crate) held_since: OffsetDateTime,
    /// Which column `held_since` comes from.
    pub(crate) held_since_column: &'static str,
    pub(crate) age_seconds: f64,
}

impl Candidate {
    pub(super) fn from_stuck(r: reclaim_db::StuckKey) -> Candidate {
        Candidate {
            held_since: r.locked_at.unwrap_or(r.created_at),
            held_since_column: if r.locked_at.is_some() {
                "locked_at"
            } else {
                "created_at"
            },
            api_key_id: r.api_key_id,
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
    require_stuck_index(table, args.allow_scan, ctx.global.quiet)?;
    require_privileges(client, table, None).await?;
    if plan_path.is_some() && req.no_action {
        return Err(fail(Exit::Usage, output::no_safe_action(table)));
    }
    let cap = req.limit.map_or(LIST_CAP, |l| {
        i64::try_from(l).unwrap_or(i64::MAX).min(LIST_CAP)
    });
    let found = find(client, table, req, cap).await?;
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

/// What a preview found and would do: the `--dry-run` and `--plan` report (also the JSON
/// document).
#[derive(Debug, Serialize)]
pub(crate) struct PreviewReport {
    pub(crate) table: String,
    pub(super) dry_run: bool,
    pub(crate) older_than_seconds: f64,
    /// The filters (null without any).
    #[serde(serialize_with = "filter_or_null")]
    pub(crate) filter: reclaim_db::Filter,
    /// None when the profile allows no action (the preview only lists the keys).
    pub(crate) action: Option<ReclaimAction>,
    pub(crate) response_status: Option<i32>,
    pub(crate) response_body: Option<Value>,
    pub(crate) limit: Option<u64>,
    pub(crate) would_reclaim: Capped,
    pub(super) rows_listed: usize,
    pub(crate) listing_truncated: bool,
    pub(crate) plan_file: Option<String>,
    /// The database clock, to the second.
    #[serde(serialize_with = "to_the_second")]
    pub(super) db_now: OffsetDateTime,
    pub(crate) rows: Vec<Candidate>,
    /// The status `--action fail` stores.
    #[serde(skip)]
    pub(crate) status: i32,
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
            db_now: found.db_now,
            rows: found.rows,
            status: req.status,
        }
    }
}

pub(super) fn to_the_second<S: serde::Serializer>(
    t: &OffsetDateTime,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&crate::output::rfc3339(*t))
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
    let mut text = serde_json::to_string_pretty(&plan).context("failed to encode the plan")?;
    text.push('\n');
    write_atomic(path, &text).with_context(|| output::plan_unwritten(path))
}

//! `idemctl reclaim`: free in_progress keys whose owner died, by deleting them or by failing them
//! with a stored error response, after a preview the operator can review.
//!
//! Four modes: `--dry-run` lists the stuck keys; `--plan FILE` writes that list as JSON; `--apply
//! FILE` reclaims exactly the plan's keys that are unchanged since; the default finds and reclaims
//! stuck keys batch by batch. Every write is one statement in its own transaction that locks its
//! rows with SKIP LOCKED (a live owner is never waited on) and re-checks state and cutoff on each
//! row it changes, so a completed key is never touched. `--api-key-id`, `--path` and `--method`
//! narrow every mode to one tenant or route; `--archive` records every key a writing mode takes.
//! Flags, filters, body and plan file are checked before connecting.

use crate::db::Session;
use crate::db::reclaim as reclaim_db;
use std::collections::HashSet;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::cli::ReclaimArgs;
use crate::commands::archive::Archive;
use crate::context::Context;
use crate::db::KeyTable;
use crate::db::batch;
use crate::db::lock::{self, LockClass};
use crate::db::queries;
use crate::db::table::Job;
use crate::domain::{OutputFormat, ReclaimAction};
use crate::exit::{Exit, fail};
use crate::metrics::RunEnd;
use crate::metrics::Series;
use crate::output::prometheus::{Metrics, write_atomic};
use crate::output::reclaim as output;
use crate::report::rows::{Capped, DatabaseIdentity};
use crate::report::run::EndReason;

/// How long any reclaim statement may wait for a lock: SKIP LOCKED never waits on rows, so this
/// only bounds waits on the table itself (DDL), which must not stall the API behind us.
const ROW_LOCK_WAIT: Duration = Duration::from_millis(5);
/// Below this, --older-than needs --force: a handler still working would run its request twice.
const MIN_OLDER_THAN: Duration = Duration::from_secs(60);
/// The longest filter value accepted: longer than the request line servers accept (8 KiB), so no
/// stored tenant, path or method can be longer.
const MAX_FILTER_BYTES: usize = 8192;
/// The status a plan without one stores (plans always carry one; this reads hand-made ones).
const DEFAULT_STATUS: i32 = 500;
/// The preview, a plan and the summary's key list stop here: enough to review at once, and it keeps
/// idemctl's memory flat (a 10,000-row listing took 30-50 MB; 2,000 rows stay near 6 MB).
const LIST_CAP: i64 = 2_000;
/// Counts of stuck keys stop here ("at least N"), so that every statement stays bounded by this
/// cap rather than by the table: a run reclaims in batches whatever the count says.
const COUNT_CAP: i64 = 10_000;
/// The plan file format this build writes and reads.
const PLAN_VERSION: u32 = 1;
/// The RFC 9457 problem type of the default stored error.
const PROBLEM_TYPE: &str = "tag:idemctl,2026:outcome-unknown";
const PROBLEM_DETAIL: &str = "The server handling the original request stopped before recording \
its result, so whether its effect happened is unknown. Check the resource's state before \
retrying with a new idempotency key.";

/// What this run does, decided from the flags (and the plan file) before connecting.
enum Mode {
    /// List (and with a path, write a plan); change nothing.
    Preview(Option<PathBuf>),
    /// Find stuck keys and reclaim them batch by batch.
    Sweep,
    /// Reclaim exactly the rows of a plan.
    Apply(PathBuf, Box<Plan>),
}

/// The validated request.
struct Request {
    mode: Mode,
    older_than: f64,
    action: ReclaimAction,
    status: i32,
    /// The stored response body (`--action fail` only).
    body: Option<Value>,
    /// Reclaim (or list) at most this many keys.
    limit: Option<u64>,
    /// `--action fail`: keep a failed key at least this many seconds from now (0 = as it is).
    keep_failed: f64,
    /// Only keys of this tenant and route (`--api-key-id`, `--path`, `--method`, and a plan's).
    filter: reclaim_db::Filter,
    /// How the batches reach the table's rows (set once connected: a Citus reference or local
    /// table is changed through the coordinator, its rows found by the key's identity).
    route: reclaim_db::Route,
    /// The profile allows no action: a dry run previews the stuck keys and says so.
    no_action: bool,
}

mod citus;

/// Run `reclaim`.
pub(crate) async fn run(ctx: &Context, args: &ReclaimArgs) -> Result<Exit> {
    let mut req = validate(ctx, args)?;
    let client = ctx.session().await?;
    let table = ctx.table(&client).await?;
    table.require_columns()?;
    req.filter.check(&table)?;
    if !table.profile.has_in_flight_marker() {
        return nothing_in_flight(ctx, &table, &req);
    }
    match profile_action(&table, &req, args)? {
        Some(action) => req.action = action,
        None => req.no_action = true,
    }
    if req.action != ReclaimAction::Fail {
        req.body = None;
    }
    let layout = crate::db::citus::layout(&client, &table).await?;
    if let Some(layout) = layout.as_ref().filter(|l| l.matches_rows_by_identity()) {
        if !matches!(req.mode, Mode::Preview(_)) {
            require_rows_by_identity(&table, layout)?;
        }
        req.route = reclaim_db::Route {
            by_identity: true,
            bound_waits: layout
                .written_through_coordinator()
                .then(|| batch::ThroughCoordinator {
                    wait: ROW_LOCK_WAIT,
                    patience: batch::HELD_REFERENCE_PATIENCE,
                    cancel: ctx.cancel.clone(),
                }),
        };
    }
    if req.action == ReclaimAction::Fail && table.profile.expires_by_ttl() {
        // No expiry column to move: a failed key goes with the next evict once created_at + TTL
        // has passed, whatever --keep-failed-for says.
        if args.keep_failed_for.is_some() {
            return Err(fail(
                Exit::Usage,
                output::keep_failed_without_expiry(&table),
            ));
        }
        req.keep_failed = 0.0;
        crate::output::warn(&output::failed_keys_expire_by_ttl(
            &table,
            table.profile.ttl(),
        ));
    }
    match &req.mode {
        Mode::Preview(path) => preview(ctx, &client, &table, &req, args, path.as_deref()).await,
        Mode::Sweep => sweep(ctx, &client, &table, &req, args).await,
        Mode::Apply(path, plan) => apply(ctx, &client, &table, &req, args, path, plan).await,
    }
}

/// The action the run takes on this table: --action (or the plan's) when the profile allows it,
/// else the profile's default; a profile with no safe action refuses.
fn profile_action(
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
) -> Result<Option<ReclaimAction>> {
    let p = &table.profile;
    let allowed = &p.actions;
    let Some(&default) = allowed.first() else {
        // A preview changes nothing: it lists the stuck keys, and says no action is allowed.
        if matches!(req.mode, Mode::Preview(None)) && args.action.is_none() {
            return Ok(None);
        }
        return Err(fail(Exit::Usage, output::no_safe_action(table)));
    };
    let chosen = if args.action.is_none() && args.apply.is_none() {
        default
    } else {
        req.action
    };
    if !allowed.contains(&chosen) {
        return Err(fail(Exit::Usage, output::action_unfit(chosen, table)));
    }
    if chosen != ReclaimAction::Fail && args.action.is_none() {
        let flag = if args.body_file.is_some() {
            Some("--body-file")
        } else if args.status.is_some() {
            Some("--status")
        } else {
            None
        };
        if let Some(flag) = flag {
            return Err(fail(
                Exit::Usage,
                output::only_for_fail_by_default(flag, table, chosen),
            ));
        }
    }
    if chosen == ReclaimAction::Fail && req.body.is_none() {
        return Err(fail(Exit::Usage, output::FAIL_NEEDS_A_BODY));
    }
    Ok(Some(chosen))
}

/// A table without an in-flight marker: no key is ever in flight, so a dry run finds nothing
/// (without reading the table) and a run that would change something refuses.
fn nothing_in_flight(ctx: &Context, table: &KeyTable, req: &Request) -> Result<Exit> {
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

pub(crate) fn action_name(a: ReclaimAction) -> &'static str {
    match a {
        ReclaimAction::Delete => "delete",
        ReclaimAction::Fail => "fail",
        ReclaimAction::Release => "release",
    }
}

// ---- validation, before any connection -------------------------------------------------------

fn validate(ctx: &Context, args: &ReclaimArgs) -> Result<Request> {
    let req = match &args.apply {
        Some(path) => request_from_plan(args, path)?,
        None => Request {
            mode: if args.dry_run || args.plan.is_some() {
                Mode::Preview(args.plan.clone())
            } else {
                Mode::Sweep
            },
            older_than: args.older_than().as_secs_f64(),
            action: args.action(),
            status: args.status(),
            body: response_body(args)?,
            limit: args.limit,
            keep_failed: args.keep_failed_for().as_secs_f64(),
            filter: filter_from_args(args)?,
            route: reclaim_db::Route::default(),
            no_action: false,
        },
    };
    check_floor(req.older_than, args.force)?;
    let writes = !matches!(req.mode, Mode::Preview(_));
    let terminal = std::io::stdin().is_terminal() && ctx.output.stderr_tty;
    if writes && !args.yes && !terminal {
        return Err(fail(Exit::Usage, output::NO_TERMINAL_TO_CONFIRM));
    }
    Ok(req)
}

/// The filters given on the command line, each checked: not empty, no control character (a newline
/// would not be in any stored value, and would break the summary's lines), at most
/// MAX_FILTER_BYTES, and a method an HTTP token (RFC 9110). Values are bound, never spliced, so
/// quotes are only characters.
fn filter_from_args(args: &ReclaimArgs) -> Result<reclaim_db::Filter> {
    checked_filter(
        args.api_key_id.as_deref(),
        args.path.as_deref(),
        args.method.as_deref(),
    )
}

fn checked_filter(
    api_key_id: Option<&str>,
    path: Option<&str>,
    method: Option<&str>,
) -> Result<reclaim_db::Filter> {
    Ok(reclaim_db::Filter {
        api_key_id: filter_value("--api-key-id", api_key_id)?,
        path: filter_value("--path", path)?,
        method: match filter_value("--method", method)? {
            Some(m) if !m.bytes().all(is_token_byte) => {
                return Err(fail(Exit::Usage, output::not_a_method(&m)));
            }
            m => m,
        },
    })
}

fn filter_value(flag: &str, value: Option<&str>) -> Result<Option<String>> {
    let Some(v) = value else {
        return Ok(None);
    };
    let bad = if v.is_empty() {
        output::BadFilter::Empty
    } else if v.len() > MAX_FILTER_BYTES {
        output::BadFilter::TooLong {
            max: MAX_FILTER_BYTES,
        }
    } else if v.chars().any(char::is_control) {
        output::BadFilter::Control
    } else {
        return Ok(Some(v.to_owned()));
    };
    Err(fail(Exit::Usage, output::bad_filter(flag, v, bad)))
}

/// An RFC 9110 tchar.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn check_floor(older_than: f64, force: bool) -> Result<()> {
    if older_than >= MIN_OLDER_THAN.as_secs_f64() || force {
        return Ok(());
    }
    Err(fail(
        Exit::Usage,
        output::older_than_under_floor(older_than),
    ))
}

/// The response body `--action fail` stores: `--body-file`, or the default problem document.
/// Without --action the profile's default action is not known yet: the body is prepared in case
/// it is fail, and [`profile_action`] refuses --status or --body-file if it is not.
fn response_body(args: &ReclaimArgs) -> Result<Option<Value>> {
    match (args.action, &args.body_file) {
        (Some(ReclaimAction::Delete | ReclaimAction::Release), Some(_)) => {
            Err(fail(Exit::Usage, output::only_for_fail("--body-file")))
        }
        (Some(ReclaimAction::Delete | ReclaimAction::Release), None) if args.status.is_some() => {
            Err(fail(Exit::Usage, output::only_for_fail("--status")))
        }
        (Some(ReclaimAction::Delete | ReclaimAction::Release), None) => Ok(None),
        (Some(ReclaimAction::Fail) | None, Some(path)) => read_body(path).map(Some),
        (Some(ReclaimAction::Fail) | None, None) => Ok(Some(problem_document(args.status()))),
    }
}

/// The default stored error: an RFC 9457 problem document saying the outcome is unknown.
pub(crate) fn problem_document(status: i32) -> Value {
    json!({
        "type": PROBLEM_TYPE,
        "title": "Outcome unknown",
        "status": status,
        "detail": PROBLEM_DETAIL,
    })
}

fn read_body(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(Exit::Usage, output::body_file_unreadable(path, &e)))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| fail(Exit::Usage, output::body_file_not_json(path, &e)))?;
    if !value.is_object() {
        return Err(fail(
            Exit::Usage,
            output::body_file_not_object(path, json_kind(&value)),
        ));
    }
    Ok(value)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// ---- the plan file ---------------------------------------------------------------------------

/// A reviewed preview: what `--plan` writes and `--apply` reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    schema_version: u32,
    /// `schema.name` of the table the plan was made on.
    table: String,
    older_than_seconds: f64,
    action: ReclaimAction,
    /// The stored response status for `fail` (unused by `delete`).
    #[serde(default = "default_status")]
    status: i32,
    /// The stored response body for `fail`, null for `delete`.
    #[serde(default)]
    body: Option<Value>,
    /// `--action fail`: how long each failed key is kept from when it is failed (absent in older
    /// plans: expires_at is kept).
    #[serde(default)]
    keep_failed_for_seconds: f64,
    /// The cluster and database the plan was made on; --apply refuses any other.
    #[serde(default)]
    database: Option<DatabaseIdentity>,
    /// The database clock when the preview was taken (for the reviewer).
    #[serde(default, with = "time::serde::rfc3339::option")]
    created_at: Option<OffsetDateTime>,
    /// More stuck keys existed than the plan lists (the oldest are listed).
    #[serde(default)]
    truncated: bool,
    /// The filters the preview was made with (absent without any); apply re-checks them on each
    /// row. An idemctl that does not know filters refuses a plan that has them.
    #[serde(default, skip_serializing_if = "reclaim_db::Filter::is_empty")]
    filter: reclaim_db::Filter,
    rows: Vec<PlanRow>,
}

/// One key of a plan. `locked_at` and `created_at` are exact (microseconds): apply reclaims the
/// row only if both are unchanged. Method, path and age are for the reviewer only. The tenant is
/// null on a table without a tenant column, and never missing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanRow {
    #[serde(deserialize_with = "Option::deserialize")]
    api_key_id: Option<String>,
    key: String,
    #[serde(with = "time::serde::rfc3339::option")]
    locked_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    #[serde(default)]
    request_method: Option<String>,
    #[serde(default)]
    request_path: Option<String>,
    #[serde(default)]
    age_seconds: f64,
}

fn default_status() -> i32 {
    DEFAULT_STATUS
}

/// Just the version, read first so that a newer format gets a clear message.
#[derive(Deserialize)]
struct PlanVersion {
    schema_version: Option<u32>,
}

fn request_from_plan(args: &ReclaimArgs, path: &Path) -> Result<Request> {
    let plan = load_plan(path)?;
    check_plan_flags(args, &plan)?;
    let filter = plan_filter(args, &plan)?;
    Ok(Request {
        filter,
        older_than: plan.older_than_seconds,
        action: plan.action,
        status: plan.status,
        body: plan.body.clone(),
        limit: args.limit,
        keep_failed: plan.keep_failed_for_seconds,
        route: reclaim_db::Route::default(),
        no_action: false,
        mode: Mode::Apply(path.to_owned(), Box::new(plan)),
    })
}

fn load_plan(path: &Path) -> Result<Plan> {
    let invalid = |why: String| fail(Exit::Usage, output::plan_invalid(path, &why));
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(Exit::Usage, output::plan_unreadable(path, &e)))?;
    let version: PlanVersion = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    if version.schema_version != Some(PLAN_VERSION) {
        return Err(invalid(format!(
            "schema_version {}, this idemctl reads {PLAN_VERSION}",
            version
                .schema_version
                .map_or_else(|| "missing".to_owned(), |v| v.to_string())
        )));
    }
    let plan: Plan = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    check_plan(&plan).map_err(invalid)?;
    Ok(plan)
}

/// What serde cannot check: sane numbers, a body that fits the action, no key listed twice.
fn check_plan(plan: &Plan) -> std::result::Result<(), String> {
    if !(plan.older_than_seconds.is_finite() && plan.older_than_seconds > 0.0) {
        return Err("older_than_seconds must be a positive number".into());
    }
    if !(100..=599).contains(&plan.status) {
        return Err(format!("status {} is not an HTTP status", plan.status));
    }
    match (plan.action, &plan.body) {
        (ReclaimAction::Fail, Some(Value::Object(_))) | (ReclaimAction::Delete, None) => {}
        (ReclaimAction::Fail, _) => return Err("action fail needs a JSON object as body".into()),
        (ReclaimAction::Delete | ReclaimAction::Release, Some(_)) => {
            return Err("actions delete and release take no body".into());
        }
        (ReclaimAction::Release, None) => {}
    }
    listed_twice(plan)
}

/// No key listed twice (checked again once an earlier release's `""` tenants read as none).
fn listed_twice(plan: &Plan) -> std::result::Result<(), String> {
    let mut seen = HashSet::new();
    for r in &plan.rows {
        if !seen.insert((r.api_key_id.as_deref(), r.key.as_str())) {
            return Err(output::plan_key_twice(&r.key, r.api_key_id.as_deref()));
        }
    }
    Ok(())
}

/// Under --apply the plan's filters hold, and a filter flag the plan lacks narrows it further (apply
/// leaves the plan rows that do not match alone, as filtered); a flag that contradicts the plan's
/// own filter would match none of its rows, a mistake worth stopping for.
fn plan_filter(args: &ReclaimArgs, plan: &Plan) -> Result<reclaim_db::Filter> {
    let both = [
        ("--api-key-id", &plan.filter.api_key_id, &args.api_key_id),
        ("--path", &plan.filter.path, &args.path),
        ("--method", &plan.filter.method, &args.method),
    ];
    for (flag, planned, given) in both {
        if let (Some(a), Some(b)) = (planned, given)
            && a != b
        {
            return Err(fail(Exit::Usage, output::filter_differs(flag, b, a)));
        }
    }
    let pick = |planned: &Option<String>, given: &Option<String>| {
        planned.clone().or_else(|| given.clone())
    };
    checked_filter(
        pick(&plan.filter.api_key_id, &args.api_key_id).as_deref(),
        pick(&plan.filter.path, &args.path).as_deref(),
        pick(&plan.filter.method, &args.method).as_deref(),
    )
}

/// Under --apply the plan decides action, status, body and cutoff; a flag that says otherwise is
/// a mistake worth stopping for (one that repeats the plan is not).
fn check_plan_flags(args: &ReclaimArgs, plan: &Plan) -> Result<()> {
    let conflict = if args.body_file.is_some() {
        Some("--body-file")
    } else if args.action.is_some_and(|a| a != plan.action) {
        Some("--action")
    } else if args.status.is_some_and(|s| s != plan.status) {
        Some("--status")
    } else if args
        .older_than
        .is_some_and(|o| (o.as_secs_f64() - plan.older_than_seconds).abs() > 1e-6)
    {
        Some("--older-than")
    } else if args
        .keep_failed_for
        .is_some_and(|k| (k.as_secs_f64() - plan.keep_failed_for_seconds).abs() > 1e-6)
    {
        Some("--keep-failed-for")
    } else {
        None
    };
    match conflict {
        None => Ok(()),
        Some(flag) => Err(fail(Exit::Usage, output::flag_differs_from_plan(flag))),
    }
}

// ---- preview (--dry-run, --plan) -------------------------------------------------------------

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
    fn from_stuck(r: reclaim_db::StuckKey) -> Candidate {
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

    fn plan_row(&self) -> PlanRow {
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
struct Found {
    rows: Vec<Candidate>,
    /// More rows matched than were listed.
    truncated: bool,
    count: Capped,
    db_now: OffsetDateTime,
}

async fn preview(
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
async fn find(client: &Session, table: &KeyTable, req: &Request, cap: i64) -> Result<Found> {
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

fn write_plan(
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

/// What a preview found and would do: the `--dry-run` and `--plan` report (also the JSON
/// document).
#[derive(Debug, Serialize)]
pub(crate) struct PreviewReport {
    pub(crate) table: String,
    dry_run: bool,
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
    rows_listed: usize,
    pub(crate) listing_truncated: bool,
    pub(crate) plan_file: Option<String>,
    /// The database clock, to the second.
    #[serde(serialize_with = "to_the_second")]
    db_now: OffsetDateTime,
    pub(crate) rows: Vec<Candidate>,
    /// The status `--action fail` stores.
    #[serde(skip)]
    pub(crate) status: i32,
}

impl PreviewReport {
    fn new(
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

fn to_the_second<S: serde::Serializer>(
    t: &OffsetDateTime,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&crate::output::rfc3339(*t))
}

/// The filters for JSON output: null without any.
fn filter_or_null<S: serde::Serializer>(
    f: &reclaim_db::Filter,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    if f.is_empty() {
        s.serialize_none()
    } else {
        f.serialize(s)
    }
}

/// Finding stuck keys needs the optional partial index, or the operator's explicit consent to read
/// the whole table.
fn require_stuck_index(table: &KeyTable, allow_scan: bool, quiet: bool) -> Result<()> {
    if table.stuck_index().is_some() {
        return Ok(());
    }
    if allow_scan {
        if quiet {
            return Ok(());
        }
        crate::output::warn(&output::scanning_for_stuck_keys(table));
        return Ok(());
    }
    Err(fail(Exit::Usage, output::no_stuck_index(table)))
}

/// Refuse, before any change and naming the missing grant, a role that lacks what the run needs:
/// SELECT to preview; for `delete` also DELETE and a row lock (PostgreSQL grants FOR UPDATE with
/// UPDATE on any column); for `fail` UPDATE on each column it writes. `action` None = preview.
async fn require_privileges(
    client: &Session,
    table: &KeyTable,
    action: Option<ReclaimAction>,
) -> Result<()> {
    let privileges = table.privileges(client).await?;
    let (command, job) = match action {
        None => ("reclaim --dry-run", Job::Read),
        Some(ReclaimAction::Delete) => (
            "reclaim --action delete",
            Job::Reclaim(ReclaimAction::Delete),
        ),
        Some(ReclaimAction::Fail) => ("reclaim --action fail", Job::Reclaim(ReclaimAction::Fail)),
        Some(ReclaimAction::Release) => (
            "reclaim --action release",
            Job::Reclaim(ReclaimAction::Release),
        ),
    };
    privileges.require_for(table, command, job)?;
    if action.is_some() {
        client.require_writable(command).await?;
    }
    Ok(())
}

// ---- writing runs: shared steps --------------------------------------------------------------

/// Take the table's reclaim lock and keep every row wait to a few milliseconds for the session
/// (behind a transaction pooler: no lock, and the wait set in each batch's transaction).
async fn begin_writes(ctx: &Context, client: &Session, table: &KeyTable) -> Result<()> {
    let scope = lock::acquire(client, table, LockClass::Reclaim).await?;
    if let Some(note) = scope.note(LockClass::Reclaim, ctx.route()) {
        ctx.output.note(&note);
    }
    batch::limit_row_waits(client, ROW_LOCK_WAIT)
        .await
        .context("failed to set up the reclaim session")
}

/// Ask on the terminal unless --yes. `validate` has already refused a run without a terminal.
fn confirm(args: &ReclaimArgs, question: &str) -> Result<()> {
    if args.yes {
        return Ok(());
    }
    let mut err = std::io::stderr().lock();
    write!(err, "{question} [y/N] ")
        .and_then(|()| err.flush())
        .context("failed to ask for confirmation")?;
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .context("failed to read the confirmation")?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        return Ok(());
    }
    Err(fail(Exit::Usage, output::NOT_CONFIRMED))
}

/// The confirmation question, worded by the output layer.
fn question(table: &KeyTable, req: &Request, count: &str) -> String {
    output::question(&output::Asked {
        table,
        action: req.action,
        status: req.status,
        filter: &req.filter,
        older_than: req.older_than,
        count,
    })
}

/// Why apply leaves a plan row alone (held: a live owner holds it; filtered: it does not match the
/// filters).
const LEFT_ALONE_REASONS: [&str; 7] = [
    "gone",
    "filtered",
    "completed",
    "other_state",
    "changed",
    "too_young",
    "held",
];

/// A key identified for the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KeyId {
    /// None on a table without a tenant column (null in JSON).
    pub(crate) api_key_id: Option<String>,
    pub(crate) key: String,
}

/// A plan row that apply left alone, and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LeftAlone {
    /// None on a table without a tenant column (null in JSON).
    pub(crate) api_key_id: Option<String>,
    pub(crate) key: String,
    /// gone, filtered, completed, other_state, changed, too_young or held.
    pub(crate) reason: String,
    /// The row's state when apply looked, if it still exists.
    pub(crate) state: Option<String>,
}

/// The summary of a writing run (also the JSON document).
#[derive(Debug, Serialize)]
pub(crate) struct ReclaimReport {
    pub(crate) table: String,
    pub(crate) action: ReclaimAction,
    pub(crate) older_than_seconds: f64,
    /// The filters the run was limited to (null without any).
    #[serde(serialize_with = "filter_or_null")]
    pub(crate) filter: reclaim_db::Filter,
    pub(crate) response_status: Option<i32>,
    /// `--action fail`: each failed key is kept at least this long from when it was failed.
    pub(crate) keep_failed_for_seconds: Option<f64>,
    pub(crate) plan_file: Option<String>,
    pub(crate) end_reason: EndReason,
    pub(crate) rows_reclaimed: u64,
    pub(crate) batches: u64,
    pub(crate) elapsed_seconds: f64,
    /// Stuck keys skipped because their owner holds the row lock (it is alive).
    pub(crate) skipped_live_owner: Option<Capped>,
    /// Stuck keys still in the table after the run (sweep only).
    pub(crate) stuck_left: Option<Capped>,
    /// Plan rows apply did not reclaim, with why.
    pub(crate) left_alone: Vec<LeftAlone>,
    /// The keys reclaimed (the first LIST_CAP).
    pub(crate) reclaimed: Vec<KeyId>,
    pub(crate) reclaimed_listing_truncated: bool,
}

impl ReclaimReport {
    fn new(table: &KeyTable, req: &Request) -> ReclaimReport {
        ReclaimReport {
            table: table.qualified_name(),
            action: req.action,
            older_than_seconds: req.older_than,
            filter: req.filter.clone(),
            response_status: req.body.as_ref().map(|_| req.status),
            keep_failed_for_seconds: (req.action == ReclaimAction::Fail
                && !table.profile.expires_by_ttl())
            .then_some(req.keep_failed),
            plan_file: match &req.mode {
                Mode::Apply(p, _) => Some(p.display().to_string()),
                _ => None,
            },
            end_reason: EndReason::Drained,
            rows_reclaimed: 0,
            batches: 0,
            elapsed_seconds: 0.0,
            skipped_live_owner: None,
            stuck_left: None,
            left_alone: Vec::new(),
            reclaimed: Vec::new(),
            reclaimed_listing_truncated: false,
        }
    }

    fn add_reclaimed(&mut self, key: KeyId) {
        self.rows_reclaimed += 1;
        if self.reclaimed.len() < usize::try_from(LIST_CAP).unwrap_or(usize::MAX) {
            self.reclaimed.push(key);
        } else {
            self.reclaimed_listing_truncated = true;
        }
    }

    /// Wrap a batch failure with what had already been done (those batches are committed).
    fn batch_error(&self, e: anyhow::Error) -> anyhow::Error {
        if e.is::<batch::HeldReferenceRow>() {
            return e.context(format!(
                "batch {} was rolled back ({} keys were reclaimed by earlier batches)",
                self.batches + 1,
                self.rows_reclaimed
            ));
        }
        let why = if batch::Failure::of(&e) == batch::Failure::LockTimeout {
            format!(
                "could not get a lock another session holds in {} tries (a live transaction holds a row it needs, or DDL holds the table)",
                batch::TRIES
            )
        } else {
            "failed".to_owned()
        };
        e.context(format!(
            "batch {} {why} and was rolled back ({} keys were reclaimed by earlier batches); run reclaim again",
            self.batches + 1,
            self.rows_reclaimed
        ))
    }

    /// Count each plan row as reclaimed or left alone (with why).
    fn record_outcomes(&mut self, chunk: &[PlanRow], outcomes: Vec<(String, Option<String>)>) {
        for (row, (reason, state)) in chunk.iter().zip(outcomes) {
            let (api_key_id, key) = (row.api_key_id.clone(), row.key.clone());
            if reason == "reclaimed" {
                self.add_reclaimed(KeyId { api_key_id, key });
            } else {
                self.left_alone.push(LeftAlone {
                    api_key_id,
                    key,
                    reason,
                    state,
                });
            }
        }
    }

    /// How the run ends, for the run series.
    fn run_end(&self) -> RunEnd {
        RunEnd {
            success: self.end_reason != EndReason::Interrupted,
            reason: self.end_reason,
            reasons: EndReason::RECLAIM,
            rows: Some((self.rows_reclaimed, "keys reclaimed")),
        }
    }

    /// The run's own figures: keys reclaimed by action, keys left alone by reason.
    fn metrics(&self) -> Metrics {
        let mut m = Metrics::default();
        for action in [
            ReclaimAction::Delete,
            ReclaimAction::Fail,
            ReclaimAction::Release,
        ] {
            let n = if action == self.action {
                self.rows_reclaimed
            } else {
                0
            };
            m.set_labelled(Series::ReclaimKeysReclaimed, &[action.as_str()], n);
        }
        let held = self.skipped_live_owner.map_or(0, |c| c.count);
        for reason in LEFT_ALONE_REASONS {
            let n = if reason == "held" {
                u64::try_from(held).unwrap_or(0)
            } else {
                self.left_alone
                    .iter()
                    .filter(|l| l.reason == reason)
                    .count() as u64
            };
            m.set_labelled(Series::ReclaimKeysLeftAlone, &[reason], n);
        }
        if let Some(left) = self.stuck_left {
            m.set(Series::ReclaimStuckLeft, left.count);
        }
        m
    }

    fn exit(&self) -> Exit {
        match self.end_reason {
            EndReason::Interrupted => Exit::Interrupted,
            _ => Exit::Success,
        }
    }
}

// ---- sweep: find and reclaim, batch by batch ------------------------------------------------

async fn sweep(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
) -> Result<Exit> {
    require_stuck_index(table, args.allow_scan, ctx.global.quiet)?;
    require_privileges(client, table, Some(req.action)).await?;
    let distributed = crate::commands::shards::distributed(client, table).await?;
    let mut archive = open_archive(args, None)?;
    begin_writes(ctx, client, table).await?;
    let before = count_stuck(client, table, req).await?;
    if before.count > 0 {
        let count = match req.limit {
            Some(l) => format!("up to {l} of {before}"),
            None => before.to_string(),
        };
        confirm(args, &question(table, req, &count))?;
    }
    ctx.cancel.install()?;
    let start = Instant::now();
    let mut report = ReclaimReport::new(table, req);
    report.end_reason = match distributed {
        Some(_) => {
            citus::sweep(ctx, client, table, req, args, &mut report, archive.as_mut()).await?
        }
        None => sweep_batches(ctx, client, table, req, args, &mut report, archive.as_mut()).await?,
    };
    let left = count_stuck(client, table, req).await?;
    if report.end_reason == EndReason::Drained {
        // The last batch found fewer unlocked stuck keys than it asked for, so every stuck key
        // still here was skipped because a live owner holds its row.
        report.skipped_live_owner = Some(left);
    }
    report.stuck_left = Some(left);
    report.elapsed_seconds = start.elapsed().as_secs_f64();
    ctx.metrics
        .finish(report.run_end(), report.metrics())
        .await?;
    print_report(ctx, &report)?;
    Ok(report.exit())
}

async fn sweep_batches(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
    report: &mut ReclaimReport,
    mut archive: Option<&mut Archive>,
) -> Result<EndReason> {
    let statements = statements(ctx, table, req)?;
    loop {
        if ctx.cancel.requested() {
            return Ok(EndReason::Interrupted);
        }
        let size = u64::from(args.batch_size);
        let want = match req.limit {
            Some(l) if l <= report.rows_reclaimed => return Ok(EndReason::Limit),
            Some(l) => size.min(l - report.rows_reclaimed),
            None => size,
        };
        let got = match archive.as_deref_mut() {
            Some(a) => archived_batch(&statements, client, req, want, a).await,
            None => sweep_batch(&statements, client, req, want).await,
        };
        // A batch that failed as the run was interrupted was rolled back whole.
        let got = match got {
            Err(_) if ctx.cancel.requested() => return Ok(EndReason::Interrupted),
            got => got.map_err(|e| report.batch_error(e))?,
        };
        report.batches += 1;
        let n = u64::try_from(got.len()).unwrap_or(u64::MAX);
        got.into_iter().for_each(|k| report.add_reclaimed(k));
        if n < want {
            return Ok(EndReason::Drained);
        }
    }
}

/// The action's statements for this table and filters, and the client-side deadline of each
/// answer.
fn statements(ctx: &Context, table: &KeyTable, req: &Request) -> Result<reclaim_db::Statements> {
    let deadline = ctx.answer_deadline();
    reclaim_db::Statements::new(table, req.action, &req.filter, deadline, req.route.clone())
}

/// On a Citus reference or local table the batches find the rows they locked again by the key's
/// identity (Citus refuses a change matched by ctid there), which must then name one row: refuse,
/// before any change, a table without a unique index on it, or a partitioned one (whose unique
/// indexes also hold the partition key).
fn require_rows_by_identity(table: &KeyTable, layout: &crate::report::rows::Layout) -> Result<()> {
    if table.identity_index().is_some() && table.partition_key().is_empty() {
        return Ok(());
    }
    Err(fail(
        Exit::Usage,
        output::no_identity_on_citus(table, layout),
    ))
}

/// Stuck keys the run may take (its filters applied), counted up to COUNT_CAP.
async fn count_stuck(client: &Session, table: &KeyTable, req: &Request) -> Result<Capped> {
    reclaim_db::count_stuck(client, table, req.older_than, COUNT_CAP, &req.filter).await
}

/// `--archive`: the file opened for appending before any change (exit 2 when it cannot be), for a
/// sweep (`plan` None) or an apply.
fn open_archive(args: &ReclaimArgs, plan: Option<&Path>) -> Result<Option<Archive>> {
    args.archive
        .as_deref()
        .map(|path| Archive::open(path, plan))
        .transpose()
}

/// What `--action fail` stores, for the batch statements (None for the other actions).
fn fail_with(req: &Request) -> Option<reclaim_db::FailWith<'_>> {
    match &req.body {
        Some(body) if req.action == ReclaimAction::Fail => Some(reclaim_db::FailWith {
            status: req.status,
            body,
            keep_failed: req.keep_failed,
        }),
        _ => None,
    }
}

/// One batch of the sweep: returns the keys it reclaimed.
async fn sweep_batch(
    statements: &reclaim_db::Statements,
    client: &Session,
    req: &Request,
    want: u64,
) -> Result<Vec<KeyId>> {
    let limit = i64::try_from(want).unwrap_or(i64::MAX);
    let got = statements
        .sweep_batch(client, req.older_than, limit, fail_with(req).as_ref())
        .await?;
    Ok(got
        .into_iter()
        .map(|(api_key_id, key)| KeyId { api_key_id, key })
        .collect())
}

/// One batch of the sweep with --archive: its keys are in the archive, durable, before it commits.
async fn archived_batch(
    statements: &reclaim_db::Statements,
    client: &Session,
    req: &Request,
    want: u64,
    archive: &mut Archive,
) -> Result<Vec<KeyId>> {
    let limit = i64::try_from(want).unwrap_or(i64::MAX);
    let why = archive_why(req);
    let mut batch = None;
    let got = statements
        .sweep_batch_archived(
            client,
            req.older_than,
            limit,
            fail_with(req).as_ref(),
            &mut |keys| {
                if !keys.is_empty() {
                    batch = Some(archive.write_keys(&why, keys)?);
                }
                Ok(())
            },
        )
        .await?;
    if let Some(b) = batch {
        archive.write_commit(&b, got.len())?;
    }
    Ok(got
        .into_iter()
        .map(|(api_key_id, key)| KeyId { api_key_id, key })
        .collect())
}

/// What the archive says about each key the run takes.
fn archive_why(req: &Request) -> crate::commands::archive::Why<'_> {
    crate::commands::archive::Why {
        action: action_name(req.action),
        older_than: req.older_than,
        filter: &req.filter,
    }
}

// ---- apply: exactly the rows of a plan -------------------------------------------------------

async fn apply(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
    path: &Path,
    plan: &Plan,
) -> Result<Exit> {
    check_plan_table(table, path, plan)?;
    let plan = &without_empty_tenants(table, plan);
    listed_twice(plan).map_err(|why| fail(Exit::Usage, output::plan_invalid(path, &why)))?;
    check_plan_tenants(table, path, plan)?;
    check_plan_database(client, path, plan).await?;
    require_identity_index(table)?;
    require_privileges(client, table, Some(req.action)).await?;
    let distributed = crate::commands::shards::distributed(client, table).await?;
    let mut archive = open_archive(args, Some(path))?;
    begin_writes(ctx, client, table).await?;
    let rows = within_limit(&plan.rows, req.limit);
    if !rows.is_empty() {
        confirm(
            args,
            &question(table, req, &format!("the plan's {}", rows.len())),
        )?;
    }
    ctx.cancel.install()?;
    let start = Instant::now();
    let mut report = ReclaimReport::new(table, req);
    report.end_reason = match distributed {
        Some(layout) => {
            let archive = archive.as_mut();
            citus::apply(
                ctx,
                client,
                table,
                layout,
                req,
                args,
                rows,
                &mut report,
                archive,
            )
            .await?
        }
        None => {
            let archive = archive.as_mut();
            apply_batches(ctx, client, table, req, args, rows, &mut report, archive).await?
        }
    };
    if report.end_reason == EndReason::Drained && rows.len() < plan.rows.len() {
        report.end_reason = EndReason::Limit;
    }
    let held = report
        .left_alone
        .iter()
        .filter(|l| l.reason == "held")
        .count();
    report.skipped_live_owner = Some(Capped {
        count: i64::try_from(held).unwrap_or(i64::MAX),
        at_least: false,
    });
    report.elapsed_seconds = start.elapsed().as_secs_f64();
    ctx.metrics
        .finish(report.run_end(), report.metrics())
        .await?;
    print_report(ctx, &report)?;
    Ok(report.exit())
}

/// The plan's first `limit` rows (all of them without a limit).
fn within_limit(rows: &[PlanRow], limit: Option<u64>) -> &[PlanRow] {
    let n = limit.map_or(rows.len(), |l| {
        rows.len().min(usize::try_from(l).unwrap_or(usize::MAX))
    });
    &rows[..n]
}

/// Apply finds plan rows by (api_key_id, key); without an index on them every batch would scan.
fn require_identity_index(table: &KeyTable) -> Result<()> {
    if table.has_tenant_key_index() {
        return Ok(());
    }
    Err(fail(Exit::Usage, output::no_identity_index(table)))
}

fn check_plan_table(table: &KeyTable, path: &Path, plan: &Plan) -> Result<()> {
    let here = format!("{}.{}", table.schema, table.name);
    if plan.table == here {
        return Ok(());
    }
    Err(fail(
        Exit::Usage,
        output::plan_for_another_table(path, &plan.table, table),
    ))
}

/// A plan made for a table without a tenant column by an earlier release gives each row the
/// tenant `""`: read that as no tenant.
fn without_empty_tenants(table: &KeyTable, plan: &Plan) -> Plan {
    let mut plan = plan.clone();
    if table.profile.tenant.is_none() {
        for row in &mut plan.rows {
            if row.api_key_id.as_deref() == Some("") {
                row.api_key_id = None;
            }
        }
    }
    plan
}

/// Plan rows carry a tenant exactly when the table has a tenant column: a row with one on a table
/// without (or without one on a table with) was made for another table, or edited.
fn check_plan_tenants(table: &KeyTable, path: &Path, plan: &Plan) -> Result<()> {
    let has_tenant = table.profile.tenant.is_some();
    match plan
        .rows
        .iter()
        .find(|r| r.api_key_id.is_some() != has_tenant)
    {
        None => Ok(()),
        Some(r) => Err(fail(
            Exit::Usage,
            output::plan_invalid(
                path,
                &output::plan_row_tenant_unfit(table, &r.key, r.api_key_id.as_deref()),
            ),
        )),
    }
}

/// A plan applies only to the database it was made on: the same keys can exist in a staging copy
/// or on another cluster, where its re-checks would find them all "gone" or, worse, match.
async fn check_plan_database(client: &Session, path: &Path, plan: &Plan) -> Result<()> {
    let Some(made_on) = &plan.database else {
        return Err(fail(Exit::Usage, output::plan_without_database(path)));
    };
    let here = queries::database_identity(client).await?;
    if &here == made_on {
        return Ok(());
    }
    Err(fail(
        Exit::Usage,
        output::plan_for_another_database(path, made_on, &here),
    ))
}

#[expect(
    clippy::too_many_arguments,
    reason = "the run's context, table, request and report, the plan rows and the archive"
)]
async fn apply_batches(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    req: &Request,
    args: &ReclaimArgs,
    rows: &[PlanRow],
    report: &mut ReclaimReport,
    mut archive: Option<&mut Archive>,
) -> Result<EndReason> {
    let statements = statements(ctx, table, req)?;
    let size = usize::try_from(args.batch_size).unwrap_or(usize::MAX);
    for chunk in rows.chunks(size) {
        if ctx.cancel.requested() {
            return Ok(EndReason::Interrupted);
        }
        let outcomes = match archive.as_deref_mut() {
            Some(a) => archived_apply_batch(&statements, client, req, chunk, a).await,
            None => apply_batch(&statements, client, req, chunk).await,
        };
        let outcomes = match outcomes {
            Err(_) if ctx.cancel.requested() => return Ok(EndReason::Interrupted),
            outcomes => outcomes.map_err(|e| report.batch_error(e))?,
        };
        report.batches += 1;
        report.record_outcomes(chunk, outcomes);
    }
    Ok(EndReason::Drained)
}

/// One batch of plan rows: each row's outcome and current state, in the chunk's order.
async fn apply_batch(
    statements: &reclaim_db::Statements,
    client: &Session,
    req: &Request,
    chunk: &[PlanRow],
) -> Result<Vec<(String, Option<String>)>> {
    statements
        .apply_batch(
            client,
            &plan_keys(chunk),
            req.older_than,
            fail_with(req).as_ref(),
        )
        .await
}

/// One batch of plan rows with --archive: the keys it takes are in the archive, durable, before it
/// commits; a commit line follows.
async fn archived_apply_batch(
    statements: &reclaim_db::Statements,
    client: &Session,
    req: &Request,
    chunk: &[PlanRow],
    archive: &mut Archive,
) -> Result<Vec<(String, Option<String>)>> {
    let why = archive_why(req);
    let mut batch = None;
    let outcomes = statements
        .apply_batch_archived(
            client,
            &plan_keys(chunk),
            req.older_than,
            fail_with(req).as_ref(),
            &mut |keys| {
                if !keys.is_empty() {
                    batch = Some(archive.write_keys(&why, keys)?);
                }
                Ok(())
            },
        )
        .await?;
    if let Some(b) = batch {
        let taken = outcomes.iter().filter(|(o, _)| o == "reclaimed").count();
        archive.write_commit(&b, taken)?;
    }
    Ok(outcomes)
}

fn plan_keys(chunk: &[PlanRow]) -> Vec<reclaim_db::PlanKey<'_>> {
    chunk
        .iter()
        .map(|r| {
            (
                r.api_key_id.as_deref(),
                r.key.as_str(),
                r.locked_at,
                r.created_at,
            )
        })
        .collect()
}

// ---- the summary -----------------------------------------------------------------------------

fn print_report(ctx: &Context, r: &ReclaimReport) -> Result<()> {
    // Under cron (no terminal, no -o) a run that writes metrics, or found nothing to do, prints
    // nothing: cron mails any output.
    let idle =
        r.rows_reclaimed == 0 && r.left_alone.is_empty() && r.end_reason == EndReason::Drained;
    if !ctx.prints_summary()
        || idle && ctx.global.output == OutputFormat::Auto && !ctx.output.stdout_tty
    {
        return Ok(());
    }
    ctx.output
        .emit(&output::summary(r), &serde_json::to_value(r)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_document_carries_the_status() {
        let doc = problem_document(503);
        assert_eq!(doc["status"], 503);
        assert_eq!(doc["type"], PROBLEM_TYPE);
    }

    #[test]
    fn plan_rows_round_trip_exact_timestamps() {
        let ts = OffsetDateTime::from_unix_timestamp_nanos(1_767_225_600_123_456_000).unwrap();
        let row = PlanRow {
            api_key_id: Some("t".into()),
            key: "k".into(),
            locked_at: None,
            created_at: ts,
            request_method: None,
            request_path: None,
            age_seconds: 0.0,
        };
        let text = serde_json::to_string(&row).unwrap();
        let back: PlanRow = serde_json::from_str(&text).unwrap();
        assert_eq!(back.created_at, ts);
        assert!(text.contains(".123456"), "{text}");
    }

    #[test]
    fn a_plan_row_without_a_tenant_is_null_and_never_missing() {
        let row = PlanRow {
            api_key_id: None,
            key: "k".into(),
            locked_at: None,
            created_at: OffsetDateTime::UNIX_EPOCH,
            request_method: None,
            request_path: None,
            age_seconds: 0.0,
        };
        let mut value = serde_json::to_value(&row).unwrap();
        assert_eq!(value["api_key_id"], Value::Null, "{value}");
        let back: PlanRow = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(back.api_key_id, None);
        value.as_object_mut().unwrap().remove("api_key_id");
        let missing = serde_json::from_value::<PlanRow>(value).unwrap_err();
        assert!(missing.to_string().contains("api_key_id"), "{missing}");
    }

    #[test]
    fn plans_listing_a_key_twice_are_refused() {
        let ts = OffsetDateTime::UNIX_EPOCH;
        let row = PlanRow {
            api_key_id: Some("t".into()),
            key: "k".into(),
            locked_at: Some(ts),
            created_at: ts,
            request_method: None,
            request_path: None,
            age_seconds: 0.0,
        };
        let plan = Plan {
            schema_version: PLAN_VERSION,
            table: "public.idempotency_keys".into(),
            older_than_seconds: 300.0,
            action: ReclaimAction::Delete,
            status: 500,
            body: None,
            keep_failed_for_seconds: 0.0,
            database: None,
            created_at: Some(ts),
            truncated: false,
            filter: reclaim_db::Filter::default(),
            rows: vec![row.clone(), row],
        };
        assert!(check_plan(&plan).unwrap_err().contains("twice"));
    }
}

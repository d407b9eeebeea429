//! reclaim's checks before it changes anything: the flags, filters and body, read before
//! connecting, and once connected the action the profile allows and the indexes and grants the
//! run needs.

use std::io::IsTerminal as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use super::plan::{Plan, check_plan_flags, load_plan};
use super::request::{Mode, Request};
use crate::cli::ReclaimArgs;
use crate::context::Context;
use crate::db::reclaim as reclaim_db;
use crate::db::table::Job;
use crate::db::{KeyTable, Session};
use crate::domain::ReclaimAction;
use crate::exit::{Exit, fail};
use crate::output::reclaim as output;

/// Below this, --older-than needs --force: a handler still working would run its request twice.
pub(super) const MIN_OLDER_THAN: Duration = Duration::from_secs(60);
/// The longest filter value accepted: longer than the request line servers accept (8 KiB), so no
/// stored tenant, path or method can be longer.
pub(super) const MAX_FILTER_BYTES: usize = 8192;
/// The RFC 9457 problem type of the default stored error.
pub(super) const PROBLEM_TYPE: &str = "tag:idemctl,2026:outcome-unknown";
pub(super) const PROBLEM_DETAIL: &str = "The server handling the original request stopped before recording \
its result, so whether its effect happened is unknown. Check the resource's state before \
retrying with a new idempotency key.";

/// The action the run takes on this table: --action (or the plan's) when the profile allows it,
/// else the profile's default; a profile with no safe action refuses.
pub(super) fn profile_action(
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
        return Err(fail(Exit::Usage, output::no_safe_action(&table.shown())));
    };
    let chosen = if args.action.is_none() && args.apply.is_none() {
        default
    } else {
        req.action
    };
    if !allowed.contains(&chosen) {
        return Err(fail(
            Exit::Usage,
            output::action_unfit(chosen, &table.shown()),
        ));
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
                output::only_for_fail_by_default(flag, &table.shown(), chosen),
            ));
        }
    }
    // A body is always there for fail: response_body gives the problem document unless
    // --action names another action, and a plan with action fail and no body is refused on load.
    debug_assert!(chosen != ReclaimAction::Fail || req.body.is_some());
    Ok(Some(chosen))
}

pub(super) fn validate(ctx: &Context, args: &ReclaimArgs) -> Result<Request> {
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
            layout: None,
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
pub(super) fn filter_from_args(args: &ReclaimArgs) -> Result<reclaim_db::Filter> {
    checked_filter(
        args.api_key_id.as_deref(),
        args.path.as_deref(),
        args.method.as_deref(),
    )
}

pub(super) fn checked_filter(
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

pub(super) fn filter_value(flag: &str, value: Option<&str>) -> Result<Option<String>> {
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
pub(super) fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

pub(super) fn check_floor(older_than: f64, force: bool) -> Result<()> {
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
pub(super) fn response_body(args: &ReclaimArgs) -> Result<Option<Value>> {
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

pub(super) fn read_body(path: &Path) -> Result<Value> {
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

pub(super) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Finding stuck keys needs the optional partial index, or the operator's explicit consent to read
/// the whole table.
pub(super) fn require_stuck_index(table: &KeyTable, allow_scan: bool, quiet: bool) -> Result<()> {
    if table.stuck_index().is_some() {
        return Ok(());
    }
    if allow_scan {
        if quiet {
            return Ok(());
        }
        crate::output::warn(&output::scanning_for_stuck_keys(&table.shown()));
        return Ok(());
    }
    Err(fail(Exit::Usage, output::no_stuck_index(&table.shown())))
}

/// Refuse, before any change and naming the missing grant, a role that lacks what the run needs:
/// SELECT to preview; for `delete` also DELETE and a row lock (PostgreSQL grants FOR UPDATE with
/// UPDATE on any column); for `fail` UPDATE on each column it writes. `action` None = preview.
pub(super) async fn require_privileges(
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

/// On a Citus reference or local table the batches find the rows they locked again by the key's
/// identity (Citus refuses a change matched by ctid there): the columns of a unique index that
/// names one row (the identity index, else the primary key or another unique index, whatever its
/// width). Refuse, before any change, a table without one, or a partitioned one (whose unique
/// indexes also hold the partition key).
pub(super) fn require_rows_by_identity(
    table: &KeyTable,
    layout: &crate::report::rows::Layout,
) -> Result<()> {
    let named = table.identity_index().or_else(|| table.walk_index());
    if named.is_some() && table.partition_key().is_empty() {
        return Ok(());
    }
    Err(fail(
        Exit::Usage,
        output::no_identity_on_citus(&table.shown(), layout),
    ))
}

/// A plan names each key by its scope and key, a NULL scope value included (selected with IS
/// NULL). Where the scope allows NULL that names one row only if a unique index keeps it so (one
/// made NULLS NOT DISTINCT, or one that leaves the nullable columns out): without one, several
/// rows may share a key under a NULL scope. Refuse a plan (written or applied) on such a table,
/// before anything is read.
pub(super) fn require_not_null_scope(table: &KeyTable) -> Result<()> {
    let nullable = table.nullable_scope_columns();
    if nullable.is_empty() || table.identity_index().is_some() {
        return Ok(());
    }
    Err(fail(
        Exit::Usage,
        output::nullable_scope(&table.shown(), &nullable),
    ))
}

/// Apply finds plan rows by (api_key_id, key); without an index on them every batch would scan.
pub(super) fn require_identity_index(table: &KeyTable) -> Result<()> {
    if table.has_tenant_key_index() {
        return Ok(());
    }
    Err(fail(Exit::Usage, output::no_identity_index(&table.shown())))
}

pub(super) fn request_from_plan(args: &ReclaimArgs, path: &Path) -> Result<Request> {
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
        layout: None,
        no_action: false,
        mode: Mode::Apply(path.to_owned(), Box::new(plan)),
    })
}

/// Under --apply the plan's filters hold, and a filter flag the plan lacks narrows it further (apply
/// leaves the plan rows that do not match alone, as filtered); a flag that contradicts the plan's
/// own filter would match none of its rows, a mistake worth stopping for.
pub(super) fn plan_filter(args: &ReclaimArgs, plan: &Plan) -> Result<reclaim_db::Filter> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_document_carries_the_status() {
        let doc = problem_document(503);
        assert_eq!(doc["status"], 503);
        assert_eq!(doc["type"], PROBLEM_TYPE);
    }
}

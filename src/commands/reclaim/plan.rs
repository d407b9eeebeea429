//! reclaim's plan file: what `--plan` writes and `--apply` reads, and the checks that a plan fits
//! the flags, the table and the database it is applied to.

use std::collections::HashSet;
use std::path::Path;

use crate::report::timestamp::Timestamp;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::cli::ReclaimArgs;
use crate::db::queries;
use crate::db::reclaim as reclaim_db;
use crate::db::{KeyTable, Session};
use crate::domain::ReclaimAction;
use crate::exit::{Exit, fail};
use crate::output::reclaim as output;
use crate::report::reclaim::PlanProblem;
use crate::report::rows::DatabaseIdentity;

/// The status a plan without one stores (plans always carry one; this reads hand-made ones).
pub(super) const DEFAULT_STATUS: i32 = 500;
/// The plan file format this build writes. Version 2 adds each row's `scope`, which carries a
/// NULL scope value as null; version 1 plans (whose scopes are never NULL) are still read.
pub(super) const PLAN_VERSION: u32 = 2;
/// The plan file formats this build reads.
const PLAN_VERSIONS_READ: [u32; 2] = [1, 2];

/// A reviewed preview: what `--plan` writes and `--apply` reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Plan {
    pub(super) schema_version: u32,
    /// `schema.name` of the table the plan was made on.
    pub(super) table: String,
    pub(super) older_than_seconds: f64,
    pub(super) action: ReclaimAction,
    /// The stored response status for `fail` (unused by `delete`).
    #[serde(default = "default_status")]
    pub(super) status: i32,
    /// The stored response body for `fail`, null for `delete`.
    #[serde(default)]
    pub(super) body: Option<Value>,
    /// `--action fail`: how long each failed key is kept from when it is failed (absent in older
    /// plans: expires_at is kept).
    #[serde(default)]
    pub(super) keep_failed_for_seconds: f64,
    /// The cluster and database the plan was made on; --apply refuses any other.
    #[serde(default)]
    pub(super) database: Option<DatabaseIdentity>,
    /// The database clock when the preview was taken (for the reviewer).
    #[serde(default, with = "crate::report::timestamp::option")]
    pub(super) created_at: Option<OffsetDateTime>,
    /// More stuck keys existed than the plan lists (the oldest are listed).
    #[serde(default)]
    pub(super) truncated: bool,
    /// The filters the preview was made with (absent without any); apply re-checks them on each
    /// row. An idemctl that does not know filters refuses a plan that has them.
    #[serde(default, skip_serializing_if = "reclaim_db::Filter::is_empty")]
    pub(super) filter: reclaim_db::Filter,
    pub(super) rows: Vec<PlanRow>,
}

/// One key of a plan. `locked_at` and `created_at` are exact (microseconds): apply reclaims the
/// row only if both are unchanged. Method, path and age are for the reviewer only. The tenant is
/// null on a table without a tenant column (or where a one-column scope is NULL), and never
/// missing; `scope` (version 2) holds each scope column's value, null for NULL, and is what apply
/// finds the row by.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlanRow {
    #[serde(deserialize_with = "Option::deserialize")]
    pub(super) api_key_id: Option<String>,
    /// Each scope column's value in the mapping's order, None for NULL; absent on a table without
    /// a scope and in version 1 plans (read from `api_key_id` then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) scope: Option<Vec<Option<String>>>,
    /// The scope columns that are NULL, set once the plan is read against its table.
    #[serde(skip)]
    pub(super) nulls: Vec<bool>,
    pub(super) key: String,
    pub(super) locked_at: Option<Timestamp>,
    /// Null where the row holds none (a nullable created_at column).
    pub(super) created_at: Option<Timestamp>,
    #[serde(default)]
    pub(super) request_method: Option<String>,
    #[serde(default)]
    pub(super) request_path: Option<String>,
    /// Infinite (null in JSON) for a key held since `'-infinity'`.
    #[serde(default, deserialize_with = "null_as_infinity")]
    pub(super) age_seconds: f64,
}

/// An age JSON wrote as null: infinite, the one figure JSON has no number for.
fn null_as_infinity<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

pub(super) fn default_status() -> i32 {
    DEFAULT_STATUS
}

/// Just the version, read first so that a newer format gets a clear message.
#[derive(Deserialize)]
pub(super) struct PlanVersion {
    pub(super) schema_version: Option<u32>,
}

pub(super) fn load_plan(path: &Path) -> Result<Plan> {
    let invalid = |why: PlanProblem| fail(Exit::Usage, output::plan_invalid(path, &why));
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(Exit::Usage, output::plan_unreadable(path, &e)))?;
    let unparsed = |e: serde_json::Error| invalid(PlanProblem::Unparsed(e.to_string()));
    let version: PlanVersion = serde_json::from_str(&text).map_err(unparsed)?;
    if !version
        .schema_version
        .is_some_and(|v| PLAN_VERSIONS_READ.contains(&v))
    {
        return Err(invalid(PlanProblem::Version {
            found: version.schema_version,
            read: PLAN_VERSIONS_READ.to_vec(),
        }));
    }
    let plan: Plan = serde_json::from_str(&text).map_err(unparsed)?;
    check_plan(&plan).map_err(invalid)?;
    Ok(plan)
}

/// What serde cannot check: sane numbers, a body that fits the action, no key listed twice.
pub(super) fn check_plan(plan: &Plan) -> std::result::Result<(), PlanProblem> {
    if !(plan.older_than_seconds.is_finite() && plan.older_than_seconds > 0.0) {
        return Err(PlanProblem::OlderThan);
    }
    if !(100..=599).contains(&plan.status) {
        return Err(PlanProblem::Status(plan.status));
    }
    match (plan.action, &plan.body) {
        (ReclaimAction::Fail, Some(Value::Object(_))) | (ReclaimAction::Delete, None) => {}
        (ReclaimAction::Fail, _) => return Err(PlanProblem::FailWithoutBody),
        (ReclaimAction::Delete | ReclaimAction::Release, Some(_)) => {
            return Err(PlanProblem::BodyWithoutFail);
        }
        (ReclaimAction::Release, None) => {}
    }
    listed_twice(plan)
}

/// No key listed twice (checked again once an earlier release's `""` tenants read as none).
pub(super) fn listed_twice(plan: &Plan) -> std::result::Result<(), PlanProblem> {
    let mut seen = HashSet::new();
    for r in &plan.rows {
        if !seen.insert((r.api_key_id.as_deref(), r.scope.as_ref(), r.key.as_str())) {
            return Err(PlanProblem::KeyTwice {
                key: r.key.clone(),
                api_key_id: r.api_key_id.clone(),
            });
        }
    }
    Ok(())
}

/// Under --apply the plan decides action, status, body and cutoff; a flag that says otherwise is
/// a mistake worth stopping for (one that repeats the plan is not).
pub(super) fn check_plan_flags(args: &ReclaimArgs, plan: &Plan) -> Result<()> {
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

pub(super) fn check_plan_table(table: &KeyTable, path: &Path, plan: &Plan) -> Result<()> {
    let here = format!("{}.{}", table.schema, table.name);
    if plan.table == here {
        return Ok(());
    }
    Err(fail(
        Exit::Usage,
        output::plan_for_another_table(path, &plan.table, &table.shown()),
    ))
}

/// A plan made for a table without a tenant column by an earlier release gives each row the
/// tenant `""`: read that as no tenant.
pub(super) fn without_empty_tenants(table: &KeyTable, plan: &Plan) -> Plan {
    let mut plan = plan.clone();
    if !table.profile.has_scope() {
        for row in &mut plan.rows {
            if row.api_key_id.as_deref() == Some("") {
                row.api_key_id = None;
            }
        }
    }
    plan
}

/// Each row's scope read against the table: a version 2 row's `scope`, else (version 1) its
/// `api_key_id` split into the scope's values; then `api_key_id` is the scope as one text, as the
/// statements bind it (NULL for a NULL one-column scope), and `nulls` marks the NULL columns.
/// A row whose scope does not fit (of another length, or NULL where the table's column is NOT
/// NULL), or whose api_key_id is not its scope, is left without one, which [`check_plan_tenants`]
/// refuses.
pub(super) fn with_scopes(table: &KeyTable, plan: &Plan) -> Plan {
    let mut plan = plan.clone();
    let n = table.profile.tenant.len();
    let nullable = table.nullable_scope_columns();
    // A NULL where the column is NOT NULL names no row the table can hold: the row does not fit.
    let holdable = |scope: &[Option<String>]| {
        scope
            .iter()
            .zip(&table.profile.tenant)
            .all(|(value, column)| value.is_some() || nullable.contains(column))
    };
    for row in &mut plan.rows {
        if n == 0 {
            continue;
        }
        let scope = match (row.scope.take(), &row.api_key_id) {
            (Some(scope), _) => Some(scope),
            (None, Some(text)) => {
                crate::db::profile::scope_values(text, n).map(|v| v.into_iter().map(Some).collect())
            }
            (None, None) => None,
        };
        let Some(scope) = scope.filter(|s| s.len() == n && holdable(s)) else {
            row.nulls.clear();
            continue;
        };
        let values: Vec<Option<&str>> = scope.iter().map(Option::as_deref).collect();
        let text = crate::db::profile::scope_text_of(&values);
        // A version 2 row's api_key_id is its scope as one text: one edited apart is refused.
        let same = match (&text, &row.api_key_id) {
            (Some(a), Some(b)) => {
                crate::db::profile::scope_values(b, n).is_some_and(|v| {
                    v.iter()
                        .map(String::as_str)
                        .eq(values.iter().flatten().copied())
                }) || a == b
            }
            (None, None) => true,
            _ => false,
        };
        if !same {
            continue;
        }
        row.api_key_id = text;
        row.nulls = scope.iter().map(Option::is_none).collect();
        row.scope = Some(scope);
    }
    plan
}

/// Plan rows carry a scope exactly when the table has one, of as many values as it has columns:
/// a row with one on a table without (or without one on a table with) was made for another table,
/// or edited.
pub(super) fn check_plan_tenants(table: &KeyTable, path: &Path, plan: &Plan) -> Result<()> {
    let has_tenant = table.profile.has_scope();
    match plan.rows.iter().find(|r| {
        let scoped = r.scope.is_some() || (!has_tenant && r.api_key_id.is_some());
        scoped != has_tenant
    }) {
        None => Ok(()),
        Some(r) => Err(fail(
            Exit::Usage,
            output::plan_invalid(
                path,
                &PlanProblem::RowTenantUnfit {
                    table: Box::new(table.shown()),
                    key: r.key.clone(),
                    api_key_id: r.api_key_id.clone(),
                },
            ),
        )),
    }
}

/// A plan applies only to the database it was made on: the same keys can exist in a staging copy
/// or on another cluster, where its re-checks would find them all "gone" or, worse, match.
pub(super) async fn check_plan_database(client: &Session, path: &Path, plan: &Plan) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_rows_round_trip_exact_timestamps() {
        let ts = OffsetDateTime::from_unix_timestamp_nanos(1_767_225_600_123_456_000).unwrap();
        let row = PlanRow {
            api_key_id: Some("t".into()),
            scope: None,
            nulls: Vec::new(),
            key: "k".into(),
            locked_at: None,
            created_at: Some(Timestamp::At(ts)),
            request_method: None,
            request_path: None,
            age_seconds: 0.0,
        };
        let text = serde_json::to_string(&row).unwrap();
        let back: PlanRow = serde_json::from_str(&text).unwrap();
        assert_eq!(back.created_at, Some(Timestamp::At(ts)));
        assert!(text.contains(".123456"), "{text}");
    }

    #[test]
    fn a_plan_row_without_a_tenant_is_null_and_never_missing() {
        let row = PlanRow {
            api_key_id: None,
            scope: None,
            nulls: Vec::new(),
            key: "k".into(),
            locked_at: None,
            created_at: Some(Timestamp::MinusInfinity),
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
        let ts = Timestamp::At(OffsetDateTime::UNIX_EPOCH);
        let row = PlanRow {
            api_key_id: Some("t".into()),
            scope: None,
            nulls: Vec::new(),
            key: "k".into(),
            locked_at: Some(ts),
            created_at: Some(ts),
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
            created_at: Some(OffsetDateTime::UNIX_EPOCH),
            truncated: false,
            filter: reclaim_db::Filter::default(),
            rows: vec![row.clone(), row],
        };
        assert!(matches!(
            check_plan(&plan),
            Err(PlanProblem::KeyTwice { .. })
        ));
    }
}

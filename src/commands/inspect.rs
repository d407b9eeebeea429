//! `idemctl inspect`: one key's stored record and response, its state judged by the database clock.

use anyhow::{Context as _, Result};
use serde_json::json;

use crate::cli::InspectArgs;
use crate::context::Context;
use crate::db::record::KeyRecord;
use crate::db::{KeyLookup, KeyTable};
use crate::exit::{Exit, fail};
use crate::output::{Doc, human_secs, rfc3339, sanitize, sanitize_multiline};

/// At most this many tenants are listed for an ambiguous key.
const MAX_TENANTS_LISTED: i64 = 50;
/// At most this many tenants are probed when the key must be searched per tenant.
const MAX_TENANTS_PROBED: i32 = 10_000;

/// Run `inspect`.
pub async fn run(ctx: &Context, args: &InspectArgs) -> Result<Exit> {
    let client = ctx.client().await?;
    let table = ctx.table(&client).await?;
    let privileges = table.privileges(&client).await?;
    privileges.require(&table, "inspect", &[("SELECT", privileges.select)])?;
    table.require_columns()?;
    let stuck_secs = args.stuck_after.as_secs_f64();
    let records = match &args.api_key_id {
        Some(tenant) => by_tenant(&client, &table, tenant, &args.key, stuck_secs).await?,
        None => by_key(&client, &table, &args.key, stuck_secs).await?,
    };
    match records.as_slice() {
        [] => Err(fail(Exit::NotFound, not_found_message(args))),
        [one] => {
            ctx.output.emit(&record_doc(one, args), &json!(one))?;
            Ok(Exit::Success)
        }
        many => {
            ctx.output.emit(
                &tenants_doc(many),
                &json!({ "ambiguous": true, "matches": many }),
            )?;
            Err(fail(
                Exit::Usage,
                format!(
                    "key {} exists under {} tenants; pass --api-key-id to choose one",
                    sanitize(&args.key),
                    many.len()
                ),
            ))
        }
    }
}

fn not_found_message(args: &InspectArgs) -> String {
    match &args.api_key_id {
        Some(t) => format!(
            "key {} not found for api_key_id {}",
            sanitize(&args.key),
            sanitize(t)
        ),
        None => format!("key {} not found under any tenant", sanitize(&args.key)),
    }
}

async fn by_tenant(
    client: &deadpool_postgres::Object,
    table: &KeyTable,
    tenant: &str,
    key: &str,
    stuck_secs: f64,
) -> Result<Vec<KeyRecord>> {
    if !table.has_tenant_key_index() {
        return Err(fail(
            Exit::Usage,
            format!(
                "table {} has no index on (api_key_id, key), so a key cannot be looked up without a scan; create it with: {}",
                table.display(),
                table.identity_index_fix()
            ),
        ));
    }
    let sql = table.sql(include_str!("../../sql/inspect_by_tenant.sql"));
    let rows = client
        .query(&sql, &[&tenant, &key, &stuck_secs])
        .await
        .context("failed to read the key")?;
    rows.iter().map(KeyRecord::from_row).collect()
}

async fn by_key(
    client: &deadpool_postgres::Object,
    table: &KeyTable,
    key: &str,
    stuck_secs: f64,
) -> Result<Vec<KeyRecord>> {
    let rows = match table.key_lookup() {
        KeyLookup::ByKey => {
            let sql = table.sql(include_str!("../../sql/inspect_by_key.sql"));
            client.query(&sql, &[&key, &stuck_secs, &MAX_TENANTS_LISTED]).await
        }
        KeyLookup::SkipScan => {
            let sql = table.sql(include_str!("../../sql/inspect_skip_scan.sql"));
            client.query(&sql, &[&key, &stuck_secs, &MAX_TENANTS_PROBED]).await
        }
        KeyLookup::Unindexed => {
            return Err(fail(
                Exit::Usage,
                format!(
                    "table {} has no index that finds a key without its tenant; pass --api-key-id, or create: {}",
                    table.display(),
                    table.identity_index_fix()
                ),
            ));
        }
    }
    .context("failed to read the key")?;
    if rows
        .first()
        .and_then(|r| r.try_get::<_, bool>("truncated").ok())
        .unwrap_or(false)
    {
        crate::output::warn(&format!(
            "searched only the first {MAX_TENANTS_PROBED} tenants; pass --api-key-id for an exact lookup"
        ));
    }
    rows.iter().map(KeyRecord::from_row).collect()
}

/// A sentence describing the key's state by the database clock.
pub fn describe_state(r: &KeyRecord, args: &InspectArgs) -> String {
    let expiry = if r.expired() {
        format!("expired {} ago", human_secs(r.secs_since(r.expires_at)))
    } else {
        format!("expires in {}", human_secs(-r.secs_since(r.expires_at)))
    };
    match r.state.as_str() {
        "completed" if r.expired() => format!("completed, {expiry}, waiting for eviction"),
        "completed" => format!("completed and live, {expiry}"),
        "in_progress" => {
            let held = human_secs(r.secs_since(r.held_since()));
            let reclaim = if r.stuck {
                format!(
                    "reclaim would take it (older than {})",
                    human_secs(args.stuck_after.as_secs_f64())
                )
            } else {
                format!(
                    "reclaim would leave it (younger than {})",
                    human_secs(args.stuck_after.as_secs_f64())
                )
            };
            format!("in_progress for {held}; {reclaim}; {expiry}")
        }
        other => format!("unknown state {}; {expiry}", sanitize(other)),
    }
}

fn at_with_age(r: &KeyRecord, ts: time::OffsetDateTime) -> String {
    let secs = r.secs_since(ts);
    if secs >= 0.0 {
        format!("{} ({} ago)", rfc3339(ts), human_secs(secs))
    } else {
        format!("{} (in {})", rfc3339(ts), human_secs(-secs))
    }
}

fn record_doc(r: &KeyRecord, args: &InspectArgs) -> Doc {
    let mut doc = Doc::default();
    let rows = vec![
        ("api_key_id".to_owned(), sanitize(&r.api_key_id)),
        ("key".to_owned(), sanitize(&r.key)),
        ("state".to_owned(), describe_state(r, args)),
        (
            "request".to_owned(),
            format!(
                "{} {}",
                sanitize(&r.request_method),
                sanitize(&r.request_path)
            ),
        ),
        ("fingerprint".to_owned(), r.request_fingerprint.clone()),
        ("created_at".to_owned(), at_with_age(r, r.created_at)),
        (
            "locked_at".to_owned(),
            r.locked_at
                .map_or_else(|| "-".to_owned(), |t| at_with_age(r, t)),
        ),
        ("expires_at".to_owned(), at_with_age(r, r.expires_at)),
        (
            "response_status".to_owned(),
            r.response_status
                .map_or_else(|| "-".to_owned(), |s| s.to_string()),
        ),
    ];
    doc.fields(None, rows);
    let body = match &r.response_body {
        None => "(no stored response)".to_owned(),
        Some(v) => sanitize_multiline(&serde_json::to_string_pretty(v).unwrap_or_default()),
    };
    doc.text(format!("response_body:\n{body}"));
    doc
}

fn tenants_doc(records: &[KeyRecord]) -> Doc {
    let mut doc = Doc::default();
    let rows = records
        .iter()
        .map(|r| {
            vec![
                sanitize(&r.api_key_id),
                r.state.clone(),
                rfc3339(r.created_at),
                rfc3339(r.expires_at),
            ]
        })
        .collect();
    doc.rows(
        Some("The key exists under several tenants:"),
        &["api_key_id", "state", "created_at", "expires_at"],
        rows,
    );
    doc
}

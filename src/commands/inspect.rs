//! `idemctl inspect`: one key's stored record and response, its state judged by the database clock
//! (and whether a live session holds it), or with `--body`, whether a request body has the stored
//! fingerprint.

use std::io::Read as _;

use crate::db::Session;
use anyhow::{Context as _, Result};
use serde_json::json;

use crate::cli::InspectArgs;
use crate::context::Context;
use crate::db::record;
use crate::db::{KeyLookup, KeyTable};
use crate::exit::{Exit, fail};
use crate::fingerprint::{self, Canonical};
use crate::output::inspect as output;
use crate::output::json_text::raw_placeholder;
pub(crate) use crate::report::inspect::BodyCheck;
pub(crate) use crate::report::inspect::Compared;
use crate::report::rows::{KeyRecord, StoredBody};

/// At most this many tenants are listed for an ambiguous key.
const MAX_TENANTS_LISTED: i64 = 50;
/// At most this many tenants are probed when the key must be searched per tenant.
const MAX_TENANTS_PROBED: i32 = 10_000;
/// A request body larger than this is refused (APIs cap bodies far lower).
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;

/// Run `inspect`.
pub(crate) async fn run(ctx: &Context, args: &InspectArgs) -> Result<Exit> {
    let pairs = scope_pairs(&args.scope, &args.scope_null)?;
    // Read the body, and check it has the asked-for form, before connecting.
    let body = args.body.as_ref().map(|p| read_body(p)).transpose()?;
    if let (Some(body), Some(how)) = (&body, args.canonical) {
        fingerprint::canonical_bytes(body, how).map_err(|e| fail(Exit::Usage, e))?;
    }
    let client = ctx.session().await?;
    let table = ctx.table(&client).await?;
    let privileges = table.privileges(&client).await?;
    privileges.require_for(&table, "inspect", crate::db::table::Job::Read)?;
    table.require_columns()?;
    let stuck_secs = args.stuck_after.as_secs_f64();
    if (args.api_key_id.is_some() || !pairs.is_empty()) && !table.profile.has_scope() {
        return Err(fail(Exit::Usage, output::no_tenant_column(&table.shown())));
    }
    refuse_what_the_table_cannot_hold(&table, args)?;
    let scope = scope_given(&table, args, &pairs)?;
    let fingerprint_column = table.profile.fingerprint.as_ref().map(|(c, _)| c.clone());
    if body.is_some() && fingerprint_column.is_none() {
        return Err(fail(
            Exit::Usage,
            output::no_fingerprint_column(&table.shown()),
        ));
    }
    let records = match crate::commands::shards::distributed(&client, &table).await? {
        Some(layout) => on_shards(ctx, &client, &table, layout, args, &scope, stuck_secs).await?,
        None => {
            let mut records = match &scope {
                Scope::Whole(given) => {
                    by_tenant(&client, &table, given, &args.key, stuck_secs).await?
                }
                Scope::Part(given) => {
                    by_key(&client, &table, &args.key, given.as_ref(), stuck_secs).await?
                }
            };
            for r in &mut records {
                r.check_holder(&client).await?;
            }
            records
        }
    };
    match records.as_slice() {
        [] if !pairs.is_empty() => Err(fail(
            Exit::NotFound,
            output::not_found_in_scope(&args.key, &pairs, matches!(scope, Scope::Whole(_))),
        )),
        [] => Err(fail(
            Exit::NotFound,
            output::not_found(
                &args.key,
                args.api_key_id.as_deref(),
                table.profile.has_scope(),
            ),
        )),
        [one] => match &body {
            Some(body) => check_body(
                ctx,
                one,
                body,
                fingerprint_column.as_deref().unwrap_or_default(),
                args,
            ),
            None => {
                ctx.output.emit_with_raw(
                    &output::record(one, args.stuck_after.as_secs_f64()),
                    &record_json(one, 0),
                    &[raw_json(one)],
                )?;
                Ok(Exit::Success)
            }
        },
        many => {
            let matches: Vec<serde_json::Value> = many
                .iter()
                .enumerate()
                .map(|(n, r)| record_json(r, n))
                .collect();
            let raws: Vec<Option<&str>> = many.iter().map(raw_json).collect();
            ctx.output.emit_with_raw(
                &output::tenants(many, table.profile.tenant.len()),
                &json!({ "ambiguous": true, "matches": matches }),
                &raws,
            )?;
            Err(fail(
                Exit::Usage,
                output::ambiguous(&args.key, many.len(), &table.profile.tenant),
            ))
        }
    }
}

/// Refuse, before any lookup, a --method or --path the table has no column for (they would be
/// compared with nothing), and a tenant or key its column's type cannot hold (the lookup would
/// fail on the cast).
fn refuse_what_the_table_cannot_hold(table: &KeyTable, args: &InspectArgs) -> Result<()> {
    let p = &table.profile;
    for (flag, given, column, what) in [
        (
            "--method",
            &args.method,
            &p.request_method,
            "request method",
        ),
        ("--path", &args.path, &p.request_path, "request path"),
    ] {
        if given.is_some() && column.is_none() {
            return Err(fail(
                Exit::Usage,
                output::no_column_for_flag(&table.shown(), flag, what),
            ));
        }
    }
    if let [_] = p.tenant.as_slice()
        && let Some(v) = &args.api_key_id
        && !crate::db::reclaim::fits_type(v, p.scope_type(0))
    {
        return Err(fail(
            Exit::Usage,
            output::tenant_unfit(&table.shown(), v, p.scope_type(0)),
        ));
    }
    if !crate::db::reclaim::fits_type(&args.key, &p.key_type) {
        return Err(fail(
            Exit::Usage,
            output::key_unfit(&table.shown(), &args.key, &p.key_type),
        ));
    }
    Ok(())
}

/// What inspect was told of the key's scope.
enum Scope {
    /// Every column's value (what the identity index is looked up by).
    Whole(Given),
    /// Some columns' values, or none (`None`).
    Part(Option<Given>),
}

/// Scope values as given, by scope column in the mapping's order.
struct Given {
    /// Each column's value; None where it was not given or was given as NULL.
    values: Vec<Option<String>>,
    /// The columns given as NULL (--scope-null).
    nulls: Vec<bool>,
}

/// `--scope COLUMN=VALUE` and `--scope-null COLUMN` flags as (column, value, None for NULL),
/// before connecting: each must name a column and give a value (an empty one is a value), each
/// column once.
fn scope_pairs(flags: &[String], nulls: &[String]) -> Result<Vec<(String, Option<String>)>> {
    let mut pairs: Vec<(String, Option<String>)> = Vec::with_capacity(flags.len() + nulls.len());
    for flag in flags {
        let Some((column, value)) = flag.split_once('=').filter(|(c, _)| !c.is_empty()) else {
            return Err(fail(Exit::Usage, output::scope_flag_unfit(flag)));
        };
        pairs.push((column.to_owned(), Some(value.to_owned())));
    }
    pairs.extend(nulls.iter().map(|c| (c.clone(), None)));
    for (n, (column, _)) in pairs.iter().enumerate() {
        if pairs[..n].iter().any(|(c, _)| c == column) {
            return Err(fail(Exit::Usage, output::scope_flag_twice(column)));
        }
    }
    Ok(pairs)
}

/// The scope as given, checked against the table's scope columns and their types: the whole
/// scope, or the part given (none at all without --api-key-id, --scope or --scope-null).
fn scope_given(
    table: &KeyTable,
    args: &InspectArgs,
    pairs: &[(String, Option<String>)],
) -> Result<Scope> {
    let p = &table.profile;
    let n = p.tenant.len();
    if let Some(v) = &args.api_key_id {
        if let Some(why) = p.scope_value_problem(v, "--api-key-id", &table.qualified_name()) {
            return Err(crate::exit::refuse(Exit::Usage, why));
        }
        let values = crate::db::profile::scope_values(v, n).unwrap_or_default();
        return Ok(Scope::Whole(Given {
            values: values.into_iter().map(Some).collect(),
            nulls: vec![false; n],
        }));
    }
    if pairs.is_empty() {
        return Ok(Scope::Part(None));
    }
    let mut given = Given {
        values: vec![None; n],
        nulls: vec![false; n],
    };
    for (column, value) in pairs {
        let Some(i) = p.tenant.iter().position(|c| c == column) else {
            return Err(fail(
                Exit::Usage,
                output::scope_column_unknown(&table.shown(), column),
            ));
        };
        match value {
            Some(value) if !crate::db::reclaim::fits_type(value, p.scope_type(i)) => {
                return Err(fail(
                    Exit::Usage,
                    output::scope_value_unfit(&table.shown(), column, value, p.scope_type(i)),
                ));
            }
            Some(value) => given.values[i] = Some(value.clone()),
            None => given.nulls[i] = true,
        }
    }
    let whole = (0..n).all(|i| given.values[i].is_some() || given.nulls[i]);
    Ok(if whole {
        Scope::Whole(given)
    } else {
        Scope::Part(Some(given))
    })
}

/// On a table Citus distributes: the same lookups on the shards, on their workers (each read and
/// its row-holder check on the worker that holds the row). When the table is distributed by a
/// scope column whose value is given (--api-key-id, or --scope for that column) only the shard
/// holding it is read; otherwise every shard (a key found under several scopes is listed,
/// whichever shards hold them).
async fn on_shards(
    ctx: &Context,
    client: &Session,
    table: &KeyTable,
    layout: crate::report::rows::Layout,
    args: &InspectArgs,
    scope: &Scope,
    stuck_secs: f64,
) -> Result<Vec<KeyRecord>> {
    use crate::commands::shards;
    // A column given as NULL routes nowhere: Citus keeps no NULL in a distribution column.
    let given: Vec<Option<String>> = match scope {
        Scope::Whole(given) | Scope::Part(Some(given)) => given.values.clone(),
        Scope::Part(None) => Vec::new(),
    };
    let given: Vec<Option<&str>> = given.iter().map(Option::as_deref).collect();
    let only = shards::shard_of_scope(client, table, &layout, &given).await?;
    let cluster = shards::connect_to(ctx, client, table, 1, only).await?;
    let mut records = Vec::new();
    for node in &cluster.nodes {
        let session = node.session().await?;
        for shard in &node.shards {
            let found = match scope {
                Scope::Whole(given) => {
                    by_tenant(&session, &shard.table, given, &args.key, stuck_secs).await
                }
                Scope::Part(given) => {
                    by_key(
                        &session,
                        &shard.table,
                        &args.key,
                        given.as_ref(),
                        stuck_secs,
                    )
                    .await
                }
            }
            .with_context(|| {
                crate::output::names::on_shard(
                    shard.id,
                    &crate::output::names::worker(&node.host, node.port),
                )
            })?;
            for mut r in found {
                r.check_holder(&session).await?;
                records.push(r);
            }
        }
    }
    records.sort_by(|a, b| a.api_key_id.cmp(&b.api_key_id));
    Ok(records)
}

/// The record for `-o json`: a JSON body spliced in exactly as raw JSON text `n`; any other body
/// as a string, losslessly (text as stored, bytea as UTF-8 text when it is valid UTF-8, else hex),
/// with its encoding named.
fn record_json(r: &KeyRecord, n: usize) -> serde_json::Value {
    let mut v = json!(r);
    let (body, encoding) = match &r.response_body {
        None => (serde_json::Value::Null, serde_json::Value::Null),
        Some(StoredBody::Json(_)) => (raw_placeholder(n), json!("json")),
        Some(b) => (
            match (b, b.as_text()) {
                (_, Some(t)) => json!(t),
                (StoredBody::Bytes(bytes), None) => json!(fingerprint::hex(bytes)),
                (_, None) => serde_json::Value::Null,
            },
            json!(b.encoding()),
        ),
    };
    v["response_body"] = body;
    v["response_body_encoding"] = encoding;
    v
}

/// The stored body's raw JSON text, for splicing into `-o json` (JSON columns only).
fn raw_json(r: &KeyRecord) -> Option<&str> {
    match &r.response_body {
        Some(StoredBody::Json(t)) => Some(t),
        _ => None,
    }
}

/// The request body from a file, or from stdin for `-`.
fn read_body(path: &std::path::Path) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin()
            .take(MAX_BODY_BYTES + 1)
            .read_to_end(&mut body)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_BODY_BYTES + 1).read_to_end(&mut body))
    };
    read.map_err(|e| fail(Exit::Usage, output::body_unreadable(path, &e)))?;
    if body.len() as u64 > MAX_BODY_BYTES {
        return Err(fail(Exit::Usage, output::body_too_large(path)));
    }
    Ok(body)
}

/// Compare a request body (and optionally method and path) with the stored request.
fn check_body(
    ctx: &Context,
    r: &KeyRecord,
    body: &[u8],
    column: &str,
    args: &InspectArgs,
) -> Result<Exit> {
    let Some(stored) = &r.request_fingerprint else {
        return Err(fail(
            Exit::Usage,
            output::no_stored_fingerprint(&r.key, column),
        ));
    };
    let how = args
        .canonical
        .unwrap_or_else(|| Canonical::default_for_column(stored.sql_type()));
    let digest = fingerprint::fingerprint(body, how)
        .map_err(|e| fail(Exit::Usage, output::canonical_refused(&e, how)))?;
    let fingerprint_matches = stored.matches(&digest);
    let compare = |stored: &Option<String>, given: &Option<String>| {
        given.as_ref().map(|g| Compared {
            stored: stored.clone().unwrap_or_default(),
            given: g.clone(),
            matches: stored.as_ref() == Some(g),
        })
    };
    let method = compare(&r.request_method, &args.method);
    let path = compare(&r.request_path, &args.path);
    let all_match = fingerprint_matches
        && method.as_ref().is_none_or(|c| c.matches)
        && path.as_ref().is_none_or(|c| c.matches);
    let report = BodyCheck {
        api_key_id: r.api_key_id.clone(),
        scope: r.scope.clone(),
        key: r.key.clone(),
        canonical: how,
        stored: stored.clone(),
        column: column.to_owned(),
        computed: fingerprint::hex(&digest),
        fingerprint_matches,
        method,
        path,
        matches: all_match,
    };
    ctx.output.emit(
        &output::body_check(&report),
        &serde_json::to_value(&report)?,
    )?;
    Ok(if all_match {
        Exit::Success
    } else {
        Exit::ThresholdBreached
    })
}

async fn by_tenant(
    client: &Session,
    table: &KeyTable,
    given: &Given,
    key: &str,
    stuck_secs: f64,
) -> Result<Vec<KeyRecord>> {
    if !table.has_tenant_key_index() {
        return Err(fail(Exit::Usage, output::no_identity_index(&table.shown())));
    }
    record::by_tenant(client, table, &given.values, &given.nulls, key, stuck_secs).await
}

/// A scope column given as NULL that the skip scan walks (whose NULLs it never visits).
fn null_walked<'a>(table: &'a KeyTable, within: Option<record::Within<'_>>) -> Option<&'a str> {
    let within = within?;
    let p = &table.profile;
    p.tenant
        .iter()
        .zip(within.nulls)
        .find(|(c, null)| **null && p.scope_walk.contains(c))
        .map(|(c, _)| c.as_str())
}

/// A key under every scope holding it, narrowed to the scope columns given (`within`).
async fn by_key(
    client: &Session,
    table: &KeyTable,
    key: &str,
    within: Option<&Given>,
    stuck_secs: f64,
) -> Result<Vec<KeyRecord>> {
    let within = within.map(|g| record::Within {
        values: &g.values,
        nulls: &g.nulls,
    });
    let found = match table.key_lookup() {
        KeyLookup::ByKey => {
            record::by_key(client, table, key, within, stuck_secs, MAX_TENANTS_LISTED).await
        }
        KeyLookup::SkipScan if let Some(column) = null_walked(table, within) => {
            return Err(fail(
                Exit::Usage,
                output::null_scope_not_walked(&table.shown(), column),
            ));
        }
        KeyLookup::SkipScan => {
            record::by_key_through_tenants(
                client,
                table,
                key,
                within,
                stuck_secs,
                MAX_TENANTS_PROBED,
                MAX_TENANTS_LISTED,
            )
            .await
        }
        KeyLookup::Unindexed => {
            return Err(fail(Exit::Usage, output::no_key_index(&table.shown())));
        }
    }?;
    if found.truncated {
        crate::output::warn(&output::search_truncated(
            MAX_TENANTS_PROBED,
            &table.profile.tenant,
        ));
    }
    let unsearched = nulls_not_walked(table, within);
    if !unsearched.is_empty() {
        crate::output::warn(&output::null_scopes_not_searched(&unsearched));
    }
    Ok(found.records)
}

/// The walked scope columns that allow NULL and were not given a value: the walk through the
/// index compares rows, which never visits a NULL, so keys stored with NULL there are not looked
/// at. Empty where the lookup did not walk.
fn nulls_not_walked(table: &KeyTable, within: Option<record::Within<'_>>) -> Vec<String> {
    if !matches!(table.key_lookup(), KeyLookup::SkipScan) {
        return Vec::new();
    }
    let nullable = table.nullable_scope_columns();
    let p = &table.profile;
    p.tenant
        .iter()
        .enumerate()
        .filter(|(i, c)| {
            p.scope_walk.contains(c)
                && nullable.contains(c)
                && within.is_none_or(|w| w.values.get(*i).is_none_or(Option::is_none))
        })
        .map(|(_, c)| c.clone())
        .collect()
}

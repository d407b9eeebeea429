//! inspect's reports for people: one key's record with its state in words (by the database
//! clock), the tenants an ambiguous key exists under, and the verdict of `--body`. Everything the
//! table holds is escaped here, where it is printed.

use std::path::Path;

use crate::fingerprint::Canonical;
use crate::output::{Doc, at, human_secs, key_cells, key_columns, sanitize};
use crate::report::inspect::BodyCheck;
use crate::report::rows::{KeyRecord, RowValue, Scope, StoredBody, StoredFingerprint};
use crate::report::table::Table;
use crate::report::timestamp::Timestamp;

/// A sentence describing the key's state by the database clock.
fn describe_state(r: &KeyRecord, stuck_after: f64) -> String {
    let expiry = match (r.expires_at, &r.null_expiry) {
        (None, Some(column)) => format!(
            "no expiry ({} is NULL), so evict never removes it",
            sanitize(column)
        ),
        (None, None) => "expiry unknown (pass --ttl)".to_owned(),
        (Some(Timestamp::Infinity), _) => "never expires (expiry infinity)".to_owned(),
        (Some(Timestamp::MinusInfinity), _) => "expired at -infinity".to_owned(),
        (Some(at), _) if r.expired() => format!("expired {} ago", human_secs(r.secs_since(at))),
        (Some(at), _) => format!("expires in {}", human_secs(-r.secs_since(at))),
    };
    match r.state.as_str() {
        "completed" if r.expired() => format!("completed, {expiry}, waiting for eviction"),
        "completed" => format!("completed and live, {expiry}"),
        "unmarked" if r.expired() => format!(
            "no in-flight marker (the table has none, so idemctl takes every key as finished), {expiry}, waiting for eviction"
        ),
        "unmarked" => format!(
            "no in-flight marker (the table has none, so idemctl takes every key as finished), {expiry}"
        ),
        "in_progress" => {
            let held_for = held_for(r);
            let cutoff = human_secs(stuck_after);
            let reclaim = if r.held {
                "held by a live session (a running transaction locks the row), so reclaim would skip it".to_owned()
            } else if r.stuck {
                format!(
                    "no running transaction holds the row; reclaim would take it (older than {cutoff})"
                )
            } else {
                format!("reclaim would leave it (younger than {cutoff})")
            };
            format!("in_progress {held_for}; {reclaim}; {expiry}")
        }
        "released" => format!(
            "released: not finished and no longer locked, so the client's retry takes it again and resumes where it stopped; {expiry}"
        ),
        other => format!("unknown state {}; {expiry}", sanitize(other)),
    }
}

/// A stored fingerprint as people read it: lowercase hex for bytes, the text as stored (escaped).
fn fingerprint(f: &StoredFingerprint) -> String {
    match f {
        StoredFingerprint::Bytes(b) => crate::fingerprint::hex(b),
        StoredFingerprint::Text(t) => sanitize(t),
    }
}

/// How long an in-flight key has been held, from the time it was taken (`locked_at`, else
/// `created_at`): never a time the row does not hold.
fn held_for(r: &KeyRecord) -> String {
    let lock_column = r.row.iter().any(|c| c.role == Some("locked_at"));
    let since = match (r.locked_at, r.created_at) {
        (None, Some(_)) if lock_column => " (since created_at: locked_at is NULL)",
        _ => "",
    };
    match r.held_since() {
        None if lock_column => {
            "since an unknown time (locked_at and created_at are NULL)".to_owned()
        }
        None => "since an unknown time (created_at is NULL)".to_owned(),
        Some(t @ (Timestamp::Infinity | Timestamp::MinusInfinity)) => {
            format!("since {}{since}", at(t))
        }
        Some(t) => format!("for {}{since}", human_secs(r.secs_since(t))),
    }
}

fn at_with_age(r: &KeyRecord, ts: Timestamp) -> String {
    let secs = r.secs_since(ts);
    if !secs.is_finite() {
        at(ts)
    } else if secs >= 0.0 {
        format!("{} ({} ago)", at(ts), human_secs(secs))
    } else {
        format!("{} (in {})", at(ts), human_secs(-secs))
    }
}

/// One key's record; `stuck_after` is the age past which reclaim takes an unheld key.
pub(crate) fn record(r: &KeyRecord, stuck_after: f64) -> Doc {
    let mut doc = Doc::default();
    // A table without a scope shows no scope row.
    let rows = scope_rows(r.scope.as_ref(), r.api_key_id.as_deref())
        .into_iter()
        .chain([
            ("key".to_owned(), crate::output::scope_value(Some(&r.key))),
            ("state".to_owned(), describe_state(r, stuck_after)),
            (
                "request".to_owned(),
                format!(
                    "{} {}",
                    sanitize(r.request_method.as_deref().unwrap_or("-")),
                    sanitize(r.request_path.as_deref().unwrap_or("-"))
                ),
            ),
            (
                "fingerprint".to_owned(),
                r.request_fingerprint
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), fingerprint),
            ),
            (
                "created_at".to_owned(),
                r.created_at
                    .map_or_else(|| "-".to_owned(), |t| at_with_age(r, t)),
            ),
            (
                "locked_at".to_owned(),
                r.locked_at
                    .map_or_else(|| "-".to_owned(), |t| at_with_age(r, t)),
            ),
            (
                "expires_at".to_owned(),
                match (r.expires_at, &r.null_expiry) {
                    (Some(t), _) => at_with_age(r, t),
                    (None, Some(column)) => format!("- ({} is NULL)", sanitize(column)),
                    (None, None) => "- (pass --ttl)".to_owned(),
                },
            ),
            (
                "response_status".to_owned(),
                r.response_status
                    .map_or_else(|| "-".to_owned(), |s| s.to_string()),
            ),
        ])
        .chain(r.time_zone.as_deref().map(|z| {
            (
                "time_zone".to_owned(),
                format!(
                    "times stored without zone, read as {} (shown above in UTC)",
                    sanitize(z)
                ),
            )
        }))
        .collect::<Vec<_>>();
    doc.fields(None, rows);
    match &r.response_body {
        None if r.response_column.is_none() => {
            doc.text("response_body: - (the table has no response column)")
        }
        None => doc.text("response_body: (no stored response)"),
        Some(body) => response_body(&mut doc, body),
    }
    whole_row(&mut doc, r);
    doc
}

/// A key's scope as fields, each scope column by its own name (NULL for a NULL value); none
/// without a scope.
fn scope_rows(scope: Option<&Scope>, api_key_id: Option<&str>) -> Vec<(String, String)> {
    match (scope, api_key_id) {
        (Some(s), _) => {
            s.0.iter()
                .map(|(c, v)| (sanitize(c), crate::output::scope_value(v.as_deref())))
                .collect()
        }
        // Not read as the table's scope: the one text as read.
        (None, Some(t)) => vec![("api_key_id".to_owned(), sanitize(t))],
        (None, None) => Vec::new(),
    }
}

/// Every column of the row as stored, mapped ones labelled by role (the body is shown above).
fn whole_row(doc: &mut Doc, r: &KeyRecord) {
    if r.row.is_empty() {
        return;
    }
    let rows = r
        .row
        .iter()
        .map(|c| {
            let name = match c.role {
                Some(role) if role != c.column => format!("{} ({role})", sanitize(&c.column)),
                _ => sanitize(&c.column),
            };
            let value = match (&c.value, c.role) {
                (_, Some("response_body")) => "(shown above)".to_owned(),
                (None, _) => "NULL".to_owned(),
                (Some(RowValue::Instant(t)), _) => t
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_else(|_| t.to_string()),
                // A text that reads NULL in quotes, told apart from NULL.
                (Some(RowValue::Text(v)), _) => crate::output::scope_value(Some(v)),
            };
            (name, value)
        })
        .collect();
    doc.fields(Some("The row as stored:"), rows);
}

/// A stored body as people read it, saying how it is shown: JSON pretty-printed, text escaped,
/// bytes as text when they are valid UTF-8, else as hex with their size.
fn response_body(doc: &mut Doc, body: &StoredBody) {
    let kind = body.column_kind();
    match (body, body.as_text()) {
        (StoredBody::Json(t), _) => doc.json("response_body", t.as_str()),
        (_, Some(t)) if body.is_json() => {
            doc.json(&format!("response_body ({kind}, shown as JSON)"), t)
        }
        (_, Some(t)) => doc.text(format!(
            "response_body ({kind}, shown as text):\n{}",
            sanitize(t)
        )),
        (StoredBody::Bytes(b), None) => doc.text(format!(
            "response_body (bytea, {} bytes, not UTF-8, shown as hex):\n{}",
            b.len(),
            crate::fingerprint::hex(b)
        )),
        (_, None) => {}
    }
}

/// The tenants (the scopes, for a scope of `scope_columns` several) an ambiguous key exists under,
/// each scope column by its own name.
pub(crate) fn tenants(records: &[KeyRecord], scope_columns: usize) -> Doc {
    let mut doc = Doc::default();
    let header = records.iter().find_map(|r| r.scope.as_ref());
    let rows = records
        .iter()
        .map(|r| {
            let mut cells = key_cells(header, r.scope.as_ref(), Some(&r.key));
            cells.pop();
            cells.extend([
                r.state.clone(),
                r.created_at.map_or_else(|| "-".to_owned(), at),
                r.expires_at.map_or_else(|| "-".to_owned(), at),
            ]);
            cells
        })
        .collect();
    let title = if scope_columns > 1 {
        "The key exists under several scopes:"
    } else {
        "The key exists under several tenants:"
    };
    let mut columns = key_columns(header, &["state", "created_at", "expires_at"]);
    // The key is the one asked for: not repeated per row.
    columns.remove(header.map_or(0, |h| h.0.len()));
    doc.rows(Some(title), &columns, rows);
    doc
}

/// The verdict of `inspect --body`: the fingerprint and each compared attribute.
pub(crate) fn body_check(c: &BodyCheck) -> Doc {
    let verdict = |m: bool| if m { "match" } else { "mismatch" };
    let mut rows = scope_rows(c.scope.as_ref(), c.api_key_id.as_deref());
    rows.extend([
        ("key".to_owned(), sanitize(&c.key)),
        (
            "fingerprint".to_owned(),
            verdict(c.fingerprint_matches).to_owned(),
        ),
        (
            "stored".to_owned(),
            format!(
                "{} ({}, {})",
                fingerprint(&c.stored),
                sanitize(&c.column),
                c.stored.sql_type()
            ),
        ),
        (
            "computed".to_owned(),
            format!(
                "{} (sha256 of the body as {})",
                c.computed,
                c.canonical.name()
            ),
        ),
    ]);
    for (name, compared) in [("method", &c.method), ("path", &c.path)] {
        if let Some(c) = compared {
            let text = if c.matches {
                format!("match ({})", sanitize(&c.stored))
            } else {
                format!(
                    "mismatch: stored {}, given {}",
                    sanitize(&c.stored),
                    sanitize(&c.given)
                )
            };
            rows.push((name.to_owned(), text));
        }
    }
    let mut doc = Doc::default();
    doc.fields(None, rows);
    doc
}

// inspect's refusals, worded here from what the command found (the command attaches the exit
// code); keys, tenants, columns and paths are escaped here.

/// --api-key-id on a table without a tenant column.
pub(crate) fn no_tenant_column(table: &Table) -> String {
    format!(
        "table {} has no tenant column (profile {}), so --api-key-id does not apply; look the key up alone",
        table.display(),
        table.profile.name
    )
}

/// --method or --path on a table without that column (`what`: "request method", ...).
pub(crate) fn no_column_for_flag(table: &Table, flag: &str, what: &str) -> String {
    format!(
        "{flag} does not apply to table {} (profile {}): it has no {what} column to compare with; drop {flag}",
        table.display(),
        table.profile.name
    )
}

/// A tenant or key (`role`) that the column's SQL type `ty` cannot hold; `given` names it
/// (`--api-key-id`, `the key`).
pub(crate) fn value_type_mismatch(
    table: &Table,
    given: &str,
    role: &str,
    value: &str,
    ty: &str,
) -> String {
    format!(
        "{given} {} cannot be a {role} of table {}: its {role} column is of type {}",
        sanitize(&format!("{value:?}")),
        table.display(),
        sanitize(ty)
    )
}

/// --api-key-id that the one-column scope's type `ty` cannot hold.
pub(crate) fn tenant_unfit(table: &Table, value: &str, ty: &str) -> String {
    value_type_mismatch(table, "--api-key-id", "tenant", value, ty)
}

/// A key that the key column's type `ty` cannot hold.
pub(crate) fn key_unfit(table: &Table, value: &str, ty: &str) -> String {
    value_type_mismatch(table, "the key", "key", value, ty)
}

/// --body on a table that stores no request fingerprint.
pub(crate) fn no_fingerprint_column(table: &Table) -> String {
    format!(
        "table {} stores no request fingerprint (profile {}), so --body cannot be checked",
        table.display(),
        table.profile.name
    )
}

/// No such key (for the tenant, when one was given).
pub(crate) fn not_found(key: &str, tenant: Option<&str>, has_tenant: bool) -> String {
    match tenant {
        Some(t) => format!(
            "key {} not found for api_key_id {}",
            sanitize(key),
            sanitize(t)
        ),
        None if has_tenant => format!("key {} not found under any tenant", sanitize(key)),
        None => format!("key {} not found", sanitize(key)),
    }
}

/// A key that exists under several tenants, looked up without one (or without the whole of a
/// scope of several `columns`).
pub(crate) fn ambiguous(key: &str, tenants: usize, columns: &[String]) -> String {
    match columns {
        [_, _, ..] => format!(
            "key {} exists under {tenants} scopes; pass --scope COLUMN=VALUE for each of {} to choose one",
            sanitize(key),
            sanitize(&columns.join(", "))
        ),
        _ => format!(
            "key {} exists under {tenants} tenants; pass --api-key-id to choose one",
            sanitize(key)
        ),
    }
}

/// A key not found under the scope `pairs` given by --scope (`whole`: every column of it).
pub(crate) fn not_found_in_scope(
    key: &str,
    pairs: &[(String, Option<String>)],
    whole: bool,
) -> String {
    let given: Vec<String> = pairs
        .iter()
        .map(|(c, v)| match v {
            Some(v) => format!("{}={}", sanitize(c), sanitize(v)),
            None => format!("{} IS NULL", sanitize(c)),
        })
        .collect();
    let within = if whole { "for" } else { "under any scope with" };
    format!(
        "key {} not found {within} {}",
        sanitize(key),
        given.join(" ")
    )
}

/// A --scope flag that is not COLUMN=VALUE.
pub(crate) fn scope_flag_unfit(flag: &str) -> String {
    format!(
        "--scope {} gives no value: write --scope COLUMN=VALUE (an empty value is COLUMN=)",
        sanitize(&format!("{flag:?}"))
    )
}

/// A --scope column given twice.
pub(crate) fn scope_flag_twice(column: &str) -> String {
    format!(
        "--scope names column {} twice: give each scope column once",
        sanitize(column)
    )
}

/// A --scope column that is not one of the table's scope columns.
pub(crate) fn scope_column_unknown(table: &Table, column: &str) -> String {
    format!(
        "--scope names column {}, which is not in the scope of table {} (profile {}): its scope is ({}); name those columns",
        sanitize(column),
        table.display(),
        table.profile.name,
        sanitize(&table.profile.tenant.join(", "))
    )
}

/// A --scope value its column's type cannot hold.
pub(crate) fn scope_value_unfit(table: &Table, column: &str, value: &str, ty: &str) -> String {
    format!(
        "--scope {}={} cannot be a scope of table {}: its column {} is of type {}",
        sanitize(column),
        sanitize(value),
        table.display(),
        sanitize(column),
        sanitize(ty)
    )
}

/// --body that cannot be read.
pub(crate) fn body_unreadable(path: &Path, error: &std::io::Error) -> String {
    format!(
        "cannot read the request body from {}: {error}",
        sanitize(&path.display().to_string())
    )
}

/// --body larger than any API takes.
pub(crate) fn body_too_large(path: &Path) -> String {
    format!(
        "the request body in {} is larger than 64 MiB; pass the body the client sent",
        sanitize(&path.display().to_string())
    )
}

/// --body for a key whose fingerprint `column` is NULL.
pub(crate) fn no_stored_fingerprint(key: &str, column: &str) -> String {
    format!(
        "key {} has no stored request fingerprint ({} is NULL), so --body cannot be checked",
        sanitize(key),
        sanitize(column)
    )
}

/// A body the canonical form chosen from the fingerprint column's type does not accept.
pub(crate) fn canonical_refused(error: &impl std::fmt::Display, how: Canonical) -> String {
    format!(
        "{error} (--canonical {} was chosen from the fingerprint column's type)",
        how.name()
    )
}

/// --api-key-id on a table without an index on (tenant, key).
pub(crate) fn no_identity_index(table: &Table) -> String {
    format!(
        "table {} has no index on its scope and key {}, so a key cannot be looked up without a scan; create it with: {}",
        table.display(),
        table.identity_label(),
        table.lookup_index_fix
    )
}

/// A key looked up alone on a table without an index that finds it.
/// --scope-null for a column inspect would walk the values of (no index is led by the key): the
/// walk visits the column's values in index order and never a NULL.
/// A lookup that walked scope `columns` allowing NULL without their values: keys stored with NULL
/// there were not looked at.
pub(crate) fn null_scopes_not_searched(columns: &[String]) -> String {
    let named: Vec<String> = columns.iter().map(|c| sanitize(c)).collect();
    format!(
        "keys stored with NULL in {} {} were not searched: with no index led by the key, inspect walks the scope's values through an index, which never visits NULL; give the whole scope (--scope, and --scope-null for each NULL) to look one up",
        if named.len() == 1 {
            "scope column"
        } else {
            "scope columns"
        },
        named.join(", ")
    )
}

pub(crate) fn null_scope_not_walked(table: &Table, column: &str) -> String {
    format!(
        "--scope-null {column} cannot be looked up without the whole scope on table {}: with no index led by its key, inspect walks the values of {column} through an index, which never visits NULL; give every scope column (--scope or --scope-null), or create: {}",
        table.display(),
        table.key_index_fix,
        column = sanitize(column)
    )
}

/// No index finds a key without its whole scope. For a scope of one column no index finds it
/// with its tenant either: one that did would be led by the key, or by the tenant and then the
/// key, which inspect walks (a skip scan).
pub(crate) fn no_key_index(table: &Table) -> String {
    // A scope of several columns: an index led by the key finds it at once (the scopes could only
    // be walked through an index listing scope columns before the key, and there is none).
    if table.profile.tenant.len() > 1 {
        return format!(
            "table {} has no index led by its key or by scope columns before it, so a key cannot be found without its whole scope; pass --scope COLUMN=VALUE for each of {}, or create: {}",
            table.display(),
            sanitize(&table.profile.tenant.join(", ")),
            table.key_index_fix
        );
    }
    format!(
        "table {} has no index that finds a key, with its tenant or without; create: {}",
        table.display(),
        table.lookup_index_fix
    )
}

/// The skip scan stopped at its cap of `probed` scopes (tenants, for a scope of one column): a key
/// under a later one was not looked for.
pub(crate) fn search_truncated(probed: i32, scope: &[String]) -> String {
    match scope {
        [_] => format!(
            "searched only the first {probed} tenants; pass --api-key-id for an exact lookup"
        ),
        many => format!(
            "searched only the first {probed} scopes; pass --scope COLUMN=VALUE for each of {} for an exact lookup",
            many.iter()
                .map(|c| sanitize(c))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

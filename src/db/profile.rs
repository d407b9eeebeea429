//! Table profiles: which column of the key table plays which role (key, tenant, expiry, in-flight
//! marker, lock time, response, fingerprint), how a profile is recognised from the catalog, and the
//! reclaim actions that are safe on it. Statements in `sql/` name roles (`{key}`, `{done}`, ...);
//! [`Profile::render`] fills them in, quoting identifiers. Markers that a partial index must match
//! (`state = 'in_progress'`) are spliced as escaped literals, because a bound parameter cannot prove
//! a partial index's predicate in a generic plan; every value the operator passes stays bound.
//!
//! A table whose times are `timestamp without time zone` is read in the zone the application writes
//! them in (`time_zone`, `--time-zone`): `{zone}` is then ` AT TIME ZONE 'Zone'`, which turns the
//! clock or a bound `timestamptz` into the columns' type where a statement compares it with a
//! column (so the column stays bare and its index usable), and turns a column into `timestamptz`
//! where a statement returns it. On a `timestamptz` table `{zone}` is empty. A statement that
//! returns a time column under the column's own name orders by the table-qualified column
//! (`{table}.{expiry}`): ORDER BY would take a bare name for the converted output column.

use std::time::Duration;

use serde::Serialize;

use crate::report::db::{
    Accepted, ColumnProblem, FoundType, MatchReason, Missing, ProfileMiss, ScopeValueProblem,
    TimeProblem,
};

use super::column::Column;
use super::predicate::Pred;
use crate::ident::{literal, quote_ident, quote_ident_if_needed};

/// The names `--profile` accepts besides a mapping from the config file.
pub(crate) const BUILTIN: &[&str] = &["storage", "explainer", "rocket-rides"];

/// How a key is told to be in flight (its owner has not finished) or done (evictable once expired).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum InFlight {
    /// A column holding a state: values meaning in flight, values meaning done.
    State {
        column: String,
        in_flight: Vec<String>,
        done: Vec<String>,
    },
    /// SQL predicates over the table's columns, written for a built-in profile. `released`, where
    /// the profile has it, marks a key whose owner let go of it unfinished (its lock cleared): not
    /// in flight, not finished either, resumed by the client's retry.
    Predicate {
        in_flight: String,
        done: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        released: Option<String>,
    },
    /// A config file's predicate, parsed by [`Pred::parse`] and rendered with every column quoted;
    /// a key is done when the predicate is not true.
    Mapped {
        /// The predicate as written in the file (for `check` and JSON output).
        predicate: String,
        #[serde(skip)]
        parsed: Pred,
    },
    /// No in-flight marker (the row exists only once answered, or its state is opaque): no key is
    /// ever in flight, every expired key is evictable, reclaim has nothing to do.
    None,
}

/// When a key expires.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Expiry {
    /// A column holding the expiry time.
    Column { column: String },
    /// `created_at` plus a TTL given by `--ttl`, `IDEMCTL_TTL` or the config file.
    CreatedPlusTtl {
        #[serde(skip)]
        ttl: Option<Duration>,
        ttl_seconds: Option<f64>,
    },
}

/// What reclaim may do with a stuck key (`delete`, `fail`, `release`).
pub(crate) use crate::domain::ReclaimAction as Action;

/// How the request fingerprint is stored.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FingerprintKind {
    Bytea,
    Hex,
}

/// The roles of a key table's columns.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    /// `storage`, `explainer`, `rocket-rides` or the config file's mapping name.
    pub name: String,
    pub key: String,
    /// The scope: the columns within whose values a key is unique (none, one or several), in the
    /// order the mapping lists them. Shown as one name, or a list when there are several.
    #[serde(serialize_with = "scope_json")]
    pub tenant: Vec<String>,
    pub created_at: String,
    pub expiry: Expiry,
    pub in_flight: InFlight,
    pub locked_at: Option<String>,
    pub request_method: Option<String>,
    pub request_path: Option<String>,
    pub fingerprint: Option<(String, FingerprintKind)>,
    pub response_status: Option<String>,
    pub response_body: Option<String>,
    /// The zone a table's `timestamp without time zone` columns are written in (an IANA name,
    /// checked by the server), from the mapping's `time_zone`, `--time-zone` or IDEMCTL_TIME_ZONE.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// The table's time columns are `timestamp without time zone` (from the catalog).
    #[serde(skip)]
    pub naive_times: bool,
    /// The reclaim actions that are safe on this table, the default first.
    pub actions: Vec<Action>,
    /// The SQL types of the scope's columns and the key column (from the catalog), to cast bound
    /// text to.
    #[serde(skip)]
    pub tenant_types: Vec<String>,
    #[serde(skip)]
    pub key_type: String,
    /// The response body column's base type (jsonb, json, text, character varying or bytea).
    #[serde(skip)]
    pub body_type: String,
    /// The columns that name one row for the statements that find locked rows again by identity
    /// (the unique index that identifies rows, else the primary key or another unique index),
    /// from the catalog; the scope and the key when the table has none.
    #[serde(skip)]
    pub row_identity: Vec<String>,
    /// The scope columns an index lists before the key, in its order, which inspect walks (a skip
    /// scan) to find a key without its scope when no index is led by the key; from the catalog.
    /// The scope's columns in the mapping's order when the catalog was not read.
    #[serde(skip)]
    pub scope_walk: Vec<String>,
    /// The scope columns whose given value is NULL in the statement being rendered (by position;
    /// empty: none). `{tenant_is_*}` and `{scope_within_*}` select those with `IS NULL`, which an
    /// index serves, instead of `=`, which never matches a NULL; each pattern of NULLs is its own
    /// statement (see [`crate::db::KeyTable::sql_with_nulls`]).
    #[serde(skip)]
    pub scope_nulls: Vec<bool>,
    /// Why this profile was chosen (`--profile`, or the columns that matched).
    #[serde(skip)]
    pub(crate) matched_because: Option<MatchReason>,
    /// Where a config file's mapping was written (`config file F, [profiles.NAME]`), for messages.
    #[serde(skip)]
    pub origin: Option<String>,
}

fn s(v: &str) -> String {
    v.to_owned()
}

/// The scope in JSON as mappings write it: null, one name, or a list of names.
fn scope_json<S: serde::Serializer>(scope: &[String], ser: S) -> Result<S::Ok, S::Error> {
    match scope {
        [] => ser.serialize_none(),
        [one] => ser.serialize_str(one),
        many => many.serialize(ser),
    }
}

/// A scope value as one text: the column's value for a one-column scope, else the values as a
/// PostgreSQL text array written as the server prints one (`{payment,client-1}`), so a value read
/// back from the table and one given on the command line compare equal as text.
pub(crate) fn scope_text(values: &[&str]) -> String {
    let values: Vec<Option<&str>> = values.iter().copied().map(Some).collect();
    scope_text_of(&values).unwrap_or_default()
}

/// [`scope_text`] of values that may be NULL (None), as the server prints the scope of a row
/// holding them: NULL for a NULL one-column scope, else a text array whose NULL elements are
/// written unquoted (`{payment,NULL}`), and a value that reads NULL quoted (`{payment,"NULL"}`).
pub(crate) fn scope_text_of(values: &[Option<&str>]) -> Option<String> {
    if let [one] = values {
        return one.map(str::to_owned);
    }
    let element = |v: Option<&str>| {
        let Some(v) = v else {
            return "NULL".to_owned();
        };
        let plain = !v.is_empty()
            && !v.eq_ignore_ascii_case("null")
            && !v.chars().any(|c| {
                matches!(
                    c,
                    '"' | '\\' | '{' | '}' | ',' | ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'
                )
            });
        if plain {
            v.to_owned()
        } else {
            format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
        }
    };
    Some(format!(
        "{{{}}}",
        values
            .iter()
            .map(|v| element(*v))
            .collect::<Vec<_>>()
            .join(",")
    ))
}

/// The values of a scope value written as [`scope_text`] writes one for `n` columns: the text
/// itself for one column, else the elements of a one-dimensional text array of `n` non-NULL
/// elements (plain or double-quoted with backslash escapes); None when it is not one.
pub(crate) fn scope_values(text: &str, n: usize) -> Option<Vec<String>> {
    scope_elements(text, n)?.into_iter().collect()
}

/// [`scope_values`] as the server prints a scope read from the table: an unquoted NULL element is
/// a NULL column (None).
pub(crate) fn scope_elements(text: &str, n: usize) -> Option<Vec<Option<String>>> {
    if n == 1 {
        return Some(vec![Some(text.to_owned())]);
    }
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut v = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => v.push(chars.next()?),
                    c => v.push(c),
                }
            }
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
            out.push(Some(v));
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                if matches!(c, '{' | '}' | '"' | '\\') {
                    return None;
                }
                v.push(c);
                chars.next();
            }
            let v = v.trim();
            if v.is_empty() {
                return None;
            }
            out.push((!v.eq_ignore_ascii_case("null")).then(|| v.to_owned()));
        }
        match chars.next() {
            None => break,
            Some(',') => {}
            Some(_) => return None,
        }
    }
    (out.len() == n).then_some(out)
}

/// A scope read as one text split into the values of its `columns`; None when it is not a scope of
/// those columns. No text is no scope on a table without one, and a NULL scope value where the
/// scope is one column (the server prints one of several columns as an array, never NULL).
pub(crate) fn scope_from(
    columns: &[String],
    text: Option<&str>,
) -> Option<crate::report::rows::Scope> {
    let values = match (text, columns) {
        (None, [column]) => {
            return Some(crate::report::rows::Scope(vec![(column.clone(), None)]));
        }
        (text, _) => scope_elements(text?, columns.len())?,
    };
    Some(crate::report::rows::Scope(
        columns.iter().cloned().zip(values).collect(),
    ))
}

/// Whether `value` is valid input for a tenant or key column of SQL type `ty` (text types take
/// anything).
pub(crate) fn fits_type(value: &str, ty: &str) -> bool {
    match ty {
        "bigint" => value.trim().parse::<i64>().is_ok(),
        "integer" => value.trim().parse::<i32>().is_ok(),
        "smallint" => value.trim().parse::<i16>().is_ok(),
        // As psql prints it: \x and an even number of hex digits.
        "bytea" => value
            .strip_prefix("\\x")
            .is_some_and(|hex| hex.len() % 2 == 0 && hex.chars().all(|c| c.is_ascii_hexdigit())),
        "uuid" => {
            let hex: Vec<char> = value
                .chars()
                .filter(|c| !matches!(c, '-' | '{' | '}'))
                .collect();
            hex.len() == 32 && hex.iter().all(char::is_ascii_hexdigit)
        }
        _ => true,
    }
}

impl Profile {
    /// The storage article's table (`sql/schema.sql`).
    pub fn storage() -> Profile {
        Profile {
            name: s("storage"),
            key: s("key"),
            tenant: vec![s("api_key_id")],
            created_at: s("created_at"),
            expiry: Expiry::Column {
                column: s("expires_at"),
            },
            in_flight: InFlight::State {
                column: s("state"),
                in_flight: vec![s("in_progress")],
                done: vec![s("completed")],
            },
            locked_at: Some(s("locked_at")),
            request_method: Some(s("request_method")),
            request_path: Some(s("request_path")),
            fingerprint: Some((s("request_fingerprint"), FingerprintKind::Bytea)),
            response_status: Some(s("response_status")),
            response_body: Some(s("response_body")),
            actions: vec![Action::Delete, Action::Fail],
            time_zone: None,
            naive_times: false,
            matched_because: None,
            origin: None,
            tenant_types: vec![s("text")],
            key_type: s("text"),
            body_type: s("jsonb"),
            row_identity: Vec::new(),
            scope_nulls: Vec::new(),
            scope_walk: Vec::new(),
        }
    }

    /// The explainer article's table: a key is in flight while it holds the 202 placeholder.
    pub fn explainer() -> Profile {
        Profile {
            name: s("explainer"),
            key: s("key"),
            tenant: Vec::new(),
            created_at: s("created_at"),
            expiry: Expiry::CreatedPlusTtl {
                ttl: None,
                ttl_seconds: None,
            },
            in_flight: explainer_placeholder("response_body"),
            locked_at: Some(s("locked_at")),
            request_method: None,
            request_path: None,
            fingerprint: Some((s("request_hash"), FingerprintKind::Hex)),
            response_status: Some(s("response_status")),
            response_body: Some(s("response_body")),
            actions: vec![Action::Delete, Action::Fail],
            time_zone: None,
            naive_times: false,
            matched_because: None,
            origin: None,
            tenant_types: Vec::new(),
            key_type: s("text"),
            body_type: s("jsonb"),
            row_identity: Vec::new(),
            scope_nulls: Vec::new(),
            scope_walk: Vec::new(),
        }
    }

    /// rocket-rides-atomic's table: in flight while locked and not finished; a stuck key is
    /// released (lock cleared) so the retry resumes from its recovery point.
    pub fn rocket_rides() -> Profile {
        Profile {
            name: s("rocket-rides"),
            key: s("idempotency_key"),
            tenant: vec![s("user_id")],
            created_at: s("created_at"),
            expiry: Expiry::CreatedPlusTtl {
                ttl: None,
                ttl_seconds: None,
            },
            in_flight: InFlight::Predicate {
                in_flight: s("(recovery_point <> 'finished' AND locked_at IS NOT NULL)"),
                done: s("(recovery_point = 'finished' OR locked_at IS NULL)"),
                released: Some(s("(recovery_point <> 'finished' AND locked_at IS NULL)")),
            },
            locked_at: Some(s("locked_at")),
            request_method: Some(s("request_method")),
            request_path: Some(s("request_path")),
            fingerprint: None,
            response_status: Some(s("response_code")),
            response_body: Some(s("response_body")),
            actions: vec![Action::Release],
            time_zone: None,
            naive_times: false,
            matched_because: None,
            origin: None,
            tenant_types: vec![s("text")],
            key_type: s("text"),
            body_type: s("jsonb"),
            row_identity: Vec::new(),
            scope_nulls: Vec::new(),
            scope_walk: Vec::new(),
        }
    }

    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Option<Profile> {
        match name {
            "storage" => Some(Profile::storage()),
            "explainer" => Some(Profile::explainer()),
            "rocket-rides" => Some(Profile::rocket_rides()),
            _ => None,
        }
    }

    /// Fit the profile to the type the catalog gives the response body column: the explainer's
    /// placeholder is compared as jsonb, so a `json` body (which has no equality operator) is cast.
    pub fn fit_body_type(&mut self, body_type: &str) {
        if self.name == "explainer" && body_type == "json" {
            self.in_flight = explainer_placeholder("response_body::jsonb");
        }
    }

    /// Whether the response body column holds JSON (json or jsonb).
    pub fn body_is_json(&self) -> bool {
        matches!(self.body_type.as_str(), "json" | "jsonb")
    }

    /// Give a `created_at + TTL` profile its TTL (a table with an expiry column ignores it).
    pub fn with_ttl(mut self, ttl: Option<Duration>) -> Profile {
        if let Expiry::CreatedPlusTtl { .. } = self.expiry {
            self.expiry = Expiry::CreatedPlusTtl {
                ttl,
                ttl_seconds: ttl.map(|t| t.as_secs_f64()),
            };
        }
        self
    }

    /// The columns the profile names, with the types each may have (empty = any type).
    pub(crate) fn required_columns(&self) -> Vec<(String, Accepted)> {
        const TEXT: &[&str] = &["text", "character varying", "uuid"];
        const TENANT: &[&str] = &["text", "character varying", "uuid", "bigint", "integer"];
        // Without a zone, `timestamp without time zone` is refused by [`Profile::time_problem`].
        const TS: &[&str] = &["timestamp with time zone", "timestamp without time zone"];
        const INT: &[&str] = &["integer", "smallint"];
        const JSON: &[&str] = &["jsonb", "json"];
        const BODY: &[&str] = &["jsonb", "json", "text", "character varying", "bytea"];
        const KEY: &[&str] = &[
            "text",
            "character varying",
            "character",
            "uuid",
            "bigint",
            "integer",
            "smallint",
            "bytea",
        ];
        const ANY: &[&str] = &[];
        // The built-in profiles keep the types they were written for (the explainer compares its
        // body as jsonb); a mapping takes any key and body type idemctl can read.
        let mapped = self.origin.is_some();
        let (key_types, body_types) = if mapped { (KEY, BODY) } else { (TEXT, JSON) };
        let of = |types: &'static [&'static str]| Accepted {
            types,
            or_enum: false,
        };
        let mut out = vec![
            (self.key.clone(), of(key_types)),
            (self.created_at.clone(), of(TS)),
        ];
        for c in &self.tenant {
            out.push((c.clone(), of(TENANT)));
        }
        let mut opt = |c: &Option<String>, t: &'static [&'static str]| {
            if let Some(c) = c {
                out.push((c.clone(), of(t)));
            }
        };
        opt(&self.locked_at, TS);
        opt(&self.request_method, &["text", "character varying"]);
        opt(&self.request_path, &["text", "character varying"]);
        opt(&self.response_status, INT);
        opt(&self.response_body, body_types);
        if let Expiry::Column { column } = &self.expiry {
            out.push((column.clone(), of(TS)));
        }
        match &self.in_flight {
            // An enum state is compared with literals, which PostgreSQL reads as its values.
            InFlight::State { column, .. } => out.push((
                column.clone(),
                Accepted {
                    types: &["text", "character varying"],
                    or_enum: true,
                },
            )),
            // A predicate compares its columns with literals: any type PostgreSQL can compare.
            InFlight::Mapped { parsed, .. } => {
                out.extend(parsed.columns().into_iter().map(|c| (c, of(ANY))));
            }
            InFlight::Predicate { .. } | InFlight::None => {}
        }
        if let Some((c, _)) = &self.fingerprint {
            // A raw digest (bytea) or its hex text: which one is read from the catalog.
            out.push((c.clone(), of(&["bytea", "text", "character varying"])));
        }
        out
    }

    /// Columns the profile needs that the table lacks or has with another type.
    pub(crate) fn column_problems(&self, columns: &[Column]) -> Vec<ColumnProblem> {
        let problem = |column: String, found: Option<FoundType>, expected| ColumnProblem {
            column,
            found,
            expected,
        };
        self.required_columns()
            .into_iter()
            .filter_map(
                |(name, types)| match columns.iter().find(|c| c.name == name) {
                    None => Some(problem(name, None, types)),
                    Some(c)
                        if (types.types.is_empty() && !types.or_enum)
                            || types.types.contains(&c.base_type.as_str()) =>
                    {
                        None
                    }
                    Some(c) if c.enum_labels.is_some() && types.or_enum => self
                        .enum_problem(c)
                        .map(|found| problem(name, Some(found), types)),
                    Some(c) => Some(problem(
                        name,
                        Some(FoundType::Type(c.sql_type.clone())),
                        types,
                    )),
                },
            )
            .collect()
    }

    /// A state column of an enum type lacking a value the mapping names (comparing with it would
    /// fail): the column's type and values, and the values it lacks.
    fn enum_problem(&self, column: &Column) -> Option<FoundType> {
        let InFlight::State {
            in_flight, done, ..
        } = &self.in_flight
        else {
            return None;
        };
        let labels = column.enum_labels.as_deref().unwrap_or_default();
        let missing: Vec<String> = in_flight
            .iter()
            .chain(done)
            .filter(|v| !labels.contains(v))
            .cloned()
            .collect();
        if missing.is_empty() {
            return None;
        }
        Some(FoundType::EnumLacking {
            sql_type: column.sql_type.clone(),
            labels: labels.to_vec(),
            missing,
        })
    }

    /// The column keys are ordered by for expiry (`expires_at`, or `created_at` for a TTL table).
    pub fn expiry_column(&self) -> &str {
        match &self.expiry {
            Expiry::Column { column } => column,
            Expiry::CreatedPlusTtl { .. } => &self.created_at,
        }
    }

    /// The TTL keys expire by (None with an expiry column, or when not given).
    pub fn ttl(&self) -> Option<Duration> {
        match self.expiry {
            Expiry::CreatedPlusTtl { ttl, .. } => ttl,
            Expiry::Column { .. } => None,
        }
    }

    /// Whether expiry needs a TTL that was not given.
    pub fn lacks_ttl(&self) -> bool {
        matches!(self.expiry, Expiry::CreatedPlusTtl { ttl: None, .. })
    }

    /// Whether keys expire at `created_at` + TTL.
    pub fn expires_by_ttl(&self) -> bool {
        matches!(self.expiry, Expiry::CreatedPlusTtl { .. })
    }

    /// ` AT TIME ZONE 'Zone'` on a table of `timestamp without time zone` columns, empty on a
    /// `timestamptz` one; None when the zone a naive table needs was not declared (statements that
    /// name `{zone}` are then left unfilled, and never run: [`Profile::time_problem`] refuses first).
    fn zone(&self) -> Option<String> {
        match (self.naive_times, &self.time_zone) {
            (false, _) => Some(String::new()),
            (true, Some(z)) => Some(format!(" AT TIME ZONE {}", literal(z))),
            (true, None) => None,
        }
    }

    /// The SQL type of the table's time columns.
    fn time_type(&self) -> &'static str {
        if self.naive_times {
            "timestamp"
        } else {
            "timestamptz"
        }
    }

    /// The time columns the profile names: creation, lock and expiry.
    pub fn time_columns(&self) -> Vec<&str> {
        let mut out = vec![self.created_at.as_str()];
        out.extend(self.locked_at.as_deref());
        if let Expiry::Column { column } = &self.expiry {
            out.push(column);
        }
        out
    }

    /// Why the table's time columns cannot be read, given the catalog: a mix of `timestamptz`
    /// and `timestamp without time zone`, or the latter without a declared zone (naming the key
    /// that declares it, as `origin` says where the mapping lives).
    pub(crate) fn time_problem(&self, columns: &[Column]) -> Option<TimeProblem> {
        let naive: Vec<String> = self
            .time_columns()
            .into_iter()
            .filter(|c| {
                columns
                    .iter()
                    .any(|k| &k.name == c && k.base_type == "timestamp without time zone")
            })
            .map(str::to_owned)
            .collect();
        if naive.is_empty() {
            return None;
        }
        if naive.len() < self.time_columns().len() {
            return Some(TimeProblem::Mixed { naive });
        }
        if self.time_zone.is_some() {
            return None;
        }
        Some(TimeProblem::NoZone {
            naive,
            origin: self.origin.clone(),
        })
    }

    /// The role a column plays in this profile (`key`, `tenant`, ...), None for a column it does not
    /// map; a column read by the in-flight marker is `in_flight`.
    pub fn role_of(&self, column: &str) -> Option<&'static str> {
        let is = |c: &Option<String>| c.as_deref() == Some(column);
        Some(match () {
            _ if self.key == column => "key",
            _ if self.tenant.iter().any(|c| c == column) => "tenant",
            _ if self.created_at == column => "created_at",
            _ if matches!(&self.expiry, Expiry::Column { column: c } if c == column) => {
                "expires_at"
            }
            _ if is(&self.locked_at) => "locked_at",
            _ if is(&self.request_method) => "request_method",
            _ if is(&self.request_path) => "request_path",
            _ if self.fingerprint.as_ref().is_some_and(|(c, _)| c == column) => "fingerprint",
            _ if is(&self.response_status) => "response_status",
            _ if is(&self.response_body) => "response_body",
            _ => match &self.in_flight {
                InFlight::State { column: c, .. } if c == column => "in_flight",
                InFlight::Mapped { parsed, .. } if parsed.columns().iter().any(|c| c == column) => {
                    "in_flight"
                }
                _ => return None,
            },
        })
    }

    /// Whether the table tells a key in flight from a finished one (a mapping may have no marker).
    pub fn has_in_flight_marker(&self) -> bool {
        self.in_flight != InFlight::None
    }

    /// The scope's columns equal to `value`, a text expression holding a scope value as
    /// [`scope_text`] writes it: `col = value::type` for one column, each column compared with
    /// its element of the array for several (`''::text = value` for a table without a scope,
    /// which nothing runs: a scope given there is refused first).
    fn scope_equals(&self, value: &str, q: &dyn Fn(&str) -> String) -> String {
        match self.tenant.as_slice() {
            [] => format!("''::text = {value}"),
            [one] if self.null_at(0) => format!("({} IS NULL AND {value}::text IS NULL)", q(one)),
            [one] => format!("{} = {value}::{}", q(one), self.scope_type(0)),
            many => {
                let parts: Vec<String> = many
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let element = format!("({value}::text[])[{}]", i + 1);
                        if self.null_at(i) {
                            format!("{} IS NULL AND {element} IS NULL", q(c))
                        } else {
                            format!("{} = {element}::{}", q(c), self.scope_type(i))
                        }
                    })
                    .collect();
                format!("({})", parts.join(" AND "))
            }
        }
    }

    /// Whether the statement being rendered selects the scope's `i`th column as NULL.
    fn null_at(&self, i: usize) -> bool {
        self.scope_nulls.get(i).copied().unwrap_or(false)
    }

    /// The type bound text is cast to for the scope's `i`th column.
    pub fn scope_type(&self, i: usize) -> &str {
        self.tenant_types.get(i).map_or("text", String::as_str)
    }

    /// Why `value`, given by `flag` as a scope value of table `table`, is not one: not a text
    /// array of one value per column (a scope of several columns), or a value its column's type
    /// cannot hold. None when it fits.
    pub(crate) fn scope_value_problem(
        &self,
        value: &str,
        flag: &str,
        table: &str,
    ) -> Option<ScopeValueProblem> {
        let Some(values) = scope_values(value, self.tenant.len()) else {
            let example: Vec<&str> = self.tenant.iter().map(|_| "VALUE").collect();
            return Some(ScopeValueProblem::NotAScope {
                flag: flag.to_owned(),
                value: value.to_owned(),
                table: table.to_owned(),
                columns: self.tenant.clone(),
                example: scope_text(&example),
            });
        };
        let (i, v) = values
            .iter()
            .enumerate()
            .find(|(i, v)| !fits_type(v, self.scope_type(*i)))?;
        let (flag, value, table) = (flag.to_owned(), value.to_owned(), table.to_owned());
        Some(match self.tenant.as_slice() {
            [_] => ScopeValueProblem::TenantType {
                flag,
                value,
                table,
                column_type: self.scope_type(0).to_owned(),
            },
            _ => ScopeValueProblem::ScopeType {
                flag,
                value,
                table,
                column: self.tenant[i].clone(),
                column_type: self.scope_type(i).to_owned(),
                part: v.clone(),
            },
        })
    }

    /// The columns that name one row ([`Profile::row_identity`]), the scope's and the key when the
    /// catalog was not read (a profile rendered on its own).
    fn row_identity(&self) -> Vec<&str> {
        if self.row_identity.is_empty() {
            self.tenant
                .iter()
                .chain([&self.key])
                .map(String::as_str)
                .collect()
        } else {
            self.row_identity.iter().map(String::as_str).collect()
        }
    }

    /// A scope read from the table as one text (`{tenant}::text`, None on a table without a
    /// scope), split into its columns' values; None when it is not a scope of this table.
    pub(crate) fn scope_of(&self, text: Option<&str>) -> Option<crate::report::rows::Scope> {
        scope_from(&self.tenant, text)
    }

    /// Whether the table has a scope (one column or several).
    pub fn has_scope(&self) -> bool {
        !self.tenant.is_empty()
    }

    /// The in-flight predicate, unqualified, as an index predicate would read.
    fn in_flight_sql(&self, q: &dyn Fn(&str) -> String) -> String {
        match &self.in_flight {
            InFlight::State {
                column, in_flight, ..
            } => in_values(&q(column), in_flight),
            InFlight::Predicate { in_flight, .. } => qualify(in_flight, q),
            InFlight::Mapped { parsed, .. } => parsed.render(q),
            InFlight::None => "false".to_owned(),
        }
    }

    fn done_sql(&self, q: &dyn Fn(&str) -> String) -> String {
        match &self.in_flight {
            InFlight::State { column, done, .. } => in_values(&q(column), done),
            InFlight::Predicate { done, .. } => qualify(done, q),
            InFlight::Mapped { parsed, .. } => format!("{} IS NOT TRUE", parsed.render(q)),
            InFlight::None => "true".to_owned(),
        }
    }

    /// A `{role}` or `{alias.role}` placeholder's text, or None for a name that is not a role
    /// (left as written) or a TTL that is missing (left as written, so the statement cannot run).
    fn expand(
        &self,
        alias: Option<&str>,
        role: &str,
        table: &str,
        quote: fn(&str) -> String,
    ) -> Option<String> {
        let q = |c: &str| match alias {
            Some(a) => format!("{a}.{}", quote(c)),
            None => quote(c),
        };
        match role {
            "table" if alias.is_none() => Some(table.to_owned()),
            "zone" if alias.is_none() => self.zone(),
            "key" => Some(q(&self.key)),
            "key_type" => Some(self.key_type.clone()),
            "identity_row" | "identity_as" => Some(self.identity_sql(role, &q)),
            "identity_ids" if alias.is_none() => Some(self.identity_sql(role, &q)),
            "created_at" | "locked_at" | "expiry" | "cutoff" | "expires_at" | "expired_at"
            | "held_since" | "time_type" => self.time_sql(role, &q),
            "in_flight" | "done" | "state" | "fail_state" => Some(self.state_sql(role, &q)),
            r if r.starts_with("fail_body_p") || r.starts_with("keep_failed_p") => self.fail_sql(r),
            r if r == "tenant"
                || r.starts_with("tenant_is_")
                || r.starts_with("scope_within_p")
                || r.starts_with("walk_") =>
            {
                self.scope_sql(r, &q)
            }
            _ => self.column_sql(role, &q),
        }
    }

    /// The scope's placeholders: `{tenant}`, `{tenant_is_plan}`, `{tenant_is_pN}`,
    /// `{scope_within_pN}`.
    fn scope_sql(&self, role: &str, q: &dyn Fn(&str) -> String) -> Option<String> {
        Some(match role {
            // The scope's value: its column, or its columns' values as a text array (the form
            // [`scope_text`] writes) when there are several.
            "tenant" => match self.tenant.as_slice() {
                [] => "''::text".to_owned(),
                [one] => q(one),
                many => format!(
                    "ARRAY[{}]",
                    many.iter()
                        .map(|c| format!("{}::text", q(c)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            // The scope equals a value given as one text (`$N`, or the plan row's `p.api_key_id`),
            // compared column by column so the identity index serves it.
            "tenant_is_plan" => self.scope_equals("p.api_key_id", q),
            r if r.starts_with("tenant_is_p") => {
                let n: u32 = r["tenant_is_p".len()..].parse().ok()?;
                self.scope_equals(&format!("${n}::text"), q)
            }
            // The scope's columns each equal the value at its position in the text array `$N`,
            // where one is given (NULL elements match any value): a partly given scope; a column
            // given as NULL ([`Profile::scope_nulls`]) is selected with IS NULL.
            r if r.starts_with("walk_") => self.walk_sql(r, q)?,
            r if r.starts_with("scope_within_p") => {
                let n: u32 = r["scope_within_p".len()..].parse().ok()?;
                let parts: Vec<String> = self
                    .tenant
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let v = format!("(${n}::text[])[{}]", i + 1);
                        if self.null_at(i) {
                            format!("({} IS NULL AND {v} IS NULL)", q(c))
                        } else {
                            format!("({v} IS NULL OR {} = {v}::{})", q(c), self.scope_type(i))
                        }
                    })
                    .collect();
                if parts.is_empty() {
                    // Referenced all the same, so every profile binds the same parameters.
                    format!("(${n}::text[] IS NULL OR true)")
                } else {
                    parts.join(" AND ")
                }
            }
            _ => return None,
        })
    }

    /// The skip scan's placeholders over the walked columns ([`Profile::scope_walk`]), each
    /// selected as walk_1, walk_2, ... by the walk: `{walk_as}` (`"c" AS walk_1, ...`),
    /// `{walk_list}` (`"c", ...`), `{walk_row}` (`("c", ...)`), `{walk_ids}` (the walk's values as
    /// a row: `(scopes.walk_1, ...)` with the alias given) and `{walk_match}` (each column equal
    /// to the walk's value: `"c" = scopes.walk_1 AND ...`).
    fn walk_sql(&self, role: &str, q: &dyn Fn(&str) -> String) -> Option<String> {
        let columns: Vec<&str> = if self.scope_walk.is_empty() {
            self.tenant.iter().map(String::as_str).collect()
        } else {
            self.scope_walk.iter().map(String::as_str).collect()
        };
        let each = |f: &dyn Fn(usize, &str) -> String, sep: &str| {
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| f(i + 1, c))
                .collect::<Vec<_>>()
                .join(sep)
        };
        Some(match role {
            "walk_as" => each(&|i, c| format!("{} AS walk_{i}", q(c)), ", "),
            "walk_list" => each(&|_, c| q(c), ", "),
            "walk_row" => format!("({})", each(&|_, c| q(c), ", ")),
            // The alias names the walk's row here: q("walk_1") is `scopes."walk_1"`.
            "walk_ids" => format!("({})", each(&|i, _| q(&format!("walk_{i}")), ", ")),
            "walk_match" => each(&|i, c| format!("{} = scopes.walk_{i}", q(c)), " AND "),
            _ => return None,
        })
    }

    /// The columns that name one row ([`Profile::row_identity`]): `{identity_row}` as a row,
    /// `{identity_as}` selected under the names id_1, id_2, ..., and `{identity_ids}` those names.
    fn identity_sql(&self, role: &str, q: &dyn Fn(&str) -> String) -> String {
        let columns = self.row_identity();
        let list: Vec<String> = match role {
            "identity_row" => columns.iter().map(|c| q(c)).collect(),
            "identity_as" => columns
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{} AS id_{}", q(c), i + 1))
                .collect(),
            _ => (1..=columns.len()).map(|i| format!("id_{i}")).collect(),
        };
        match role {
            "identity_row" => format!("({})", list.join(", ")),
            _ => list.join(", "),
        }
    }

    /// The time placeholders: the columns, the expiry (a column, or created_at + TTL), the
    /// cut-off in the columns' own type, and since when a key is held.
    fn time_sql(&self, role: &str, q: &dyn Fn(&str) -> String) -> Option<String> {
        let ts = self.time_type();
        Some(match role {
            "time_type" => ts.to_owned(),
            "created_at" => q(&self.created_at),
            "locked_at" => self
                .locked_at
                .as_deref()
                .map_or_else(|| format!("NULL::{ts}"), q),
            "expiry" => q(self.expiry_column()),
            "cutoff" => {
                let zone = self.zone()?;
                match (&self.expiry, zone.as_str()) {
                    (Expiry::Column { .. }, "") => "now()".to_owned(),
                    (Expiry::Column { .. }, zone) => format!("(now(){zone})"),
                    (Expiry::CreatedPlusTtl { ttl, .. }, "") => {
                        format!("(now() - make_interval(secs => {}))", (*ttl)?.as_secs_f64())
                    }
                    (Expiry::CreatedPlusTtl { ttl, .. }, zone) => format!(
                        "((now() - make_interval(secs => {})){zone})",
                        (*ttl)?.as_secs_f64()
                    ),
                }
            }
            // The expiry of a key the statement knows expired (created_at + TTL before now(),
            // so never past the last instant): without the guard of {expires_at}, whose cost
            // per row would tip a long walk's plan to a sequential scan.
            "expired_at" => match &self.expiry {
                Expiry::CreatedPlusTtl { ttl: Some(t), .. } => format!(
                    "({} + make_interval(secs => {}))",
                    q(&self.created_at),
                    t.as_secs_f64()
                ),
                _ => self.time_sql("expires_at", q)?,
            },
            "expires_at" => match &self.expiry {
                Expiry::Column { column } => q(column),
                // Without a TTL a key's expiry is unknown: shown as NULL (inspect), while
                // {cutoff} stays unfilled so nothing that acts on expiry can run.
                Expiry::CreatedPlusTtl { ttl: None, .. } => format!("NULL::{ts}"),
                // A key created within a TTL of the last instant PostgreSQL holds (294276 AD)
                // expires past it: at 'infinity', never at an error (a NULL stays NULL).
                Expiry::CreatedPlusTtl { ttl: Some(t), .. } => {
                    let (created, secs) = (q(&self.created_at), t.as_secs_f64());
                    let last = match self.naive_times {
                        true => "'294276-12-31 23:59:59.999999'::timestamp",
                        false => "'294276-12-31 23:59:59.999999+00'::timestamptz",
                    };
                    format!(
                        "(CASE WHEN {created} > {last} - make_interval(secs => {secs}) \
                         THEN 'infinity'::{ts} \
                         ELSE {created} + make_interval(secs => {secs}) END)"
                    )
                }
            },
            "held_since" => match &self.locked_at {
                Some(l) => format!("coalesce({}, {})", q(l), q(&self.created_at)),
                None => q(&self.created_at),
            },
            _ => return None,
        })
    }

    /// The state placeholders: in flight, done, idemctl's name of a row's state, and the SET
    /// clause that marks a row done (reclaim --action fail).
    fn state_sql(&self, role: &str, q: &dyn Fn(&str) -> String) -> String {
        match role {
            "in_flight" => self.in_flight_sql(q),
            "done" => self.done_sql(q),
            "fail_state" => match &self.in_flight {
                InFlight::State { column, done, .. } => format!(
                    "{} = {},",
                    quote_ident(column),
                    literal(done.first().map_or("completed", String::as_str))
                ),
                InFlight::Predicate { .. } | InFlight::Mapped { .. } | InFlight::None => {
                    String::new()
                }
            },
            // idemctl's states, from the profile's own definition of in flight and done (as
            // evict and reclaim read it): in_progress, released (rocket-rides: unfinished, lock
            // cleared), completed; a value of a state column that is neither stays as stored.
            _ if self.in_flight == InFlight::None => "'unmarked'::text".to_owned(),
            _ => {
                let released = match &self.in_flight {
                    InFlight::Predicate {
                        released: Some(r), ..
                    } => format!("WHEN {} THEN 'released' ", qualify(r, q)),
                    _ => String::new(),
                };
                let other = match &self.in_flight {
                    InFlight::State { column, .. } => format!("{}::text", q(column)),
                    InFlight::Predicate { .. } | InFlight::Mapped { .. } | InFlight::None => {
                        "'other'".to_owned()
                    }
                };
                format!(
                    "(CASE WHEN {} THEN 'in_progress' {released}WHEN {} THEN 'completed' ELSE {other} END)",
                    self.in_flight_sql(q),
                    self.done_sql(q)
                )
            }
        }
    }

    /// The columns inspect and reclaim read or write, NULL of their type when not mapped.
    fn column_sql(&self, role: &str, q: &dyn Fn(&str) -> String) -> Option<String> {
        let or_null = |c: &Option<String>, ty: &str| {
            c.as_deref()
                .map_or_else(|| format!("NULL::{ty}"), |c| format!("{}::{ty}", q(c)))
        };
        Some(match role {
            "request_method" => or_null(&self.request_method, "text"),
            "request_path" => or_null(&self.request_path, "text"),
            "fingerprint" => match &self.fingerprint {
                Some((c, FingerprintKind::Bytea)) => q(c),
                Some((c, FingerprintKind::Hex)) => format!("{}::text", q(c)),
                None => "NULL::text".to_owned(),
            },
            "response_status" => or_null(&self.response_status, "int"),
            // Bytes stay bytes (inspect tells text from binary); every other type reads as text.
            "response_body" => match &self.response_body {
                Some(c) if self.body_type == "bytea" => q(c),
                c => or_null(c, "text"),
            },
            "response_status_col" => quote_ident(self.response_status.as_deref()?),
            "response_body_col" => quote_ident(self.response_body.as_deref()?),
            "locked_at_col" => quote_ident(self.locked_at.as_deref()?),
            _ => return None,
        })
    }

    /// reclaim --action fail's placeholders: `{fail_body_pN_kK}` and `{keep_failed_pN}`.
    fn fail_sql(&self, role: &str) -> Option<String> {
        if let Some(rest) = role.strip_prefix("fail_body_p") {
            // reclaim --action fail's error body ($N, JSON) as the body column's type; on a
            // table without an expiry column it also references --keep-failed-for ($K), a
            // no-op there, so every profile binds the same parameters.
            let (n, k) = rest.split_once("_k")?;
            let (n, k): (u32, u32) = (n.parse().ok()?, k.parse().ok()?);
            let json = match &self.expiry {
                Expiry::Column { .. } => format!("${n}::jsonb"),
                Expiry::CreatedPlusTtl { .. } => {
                    format!("(CASE WHEN ${k}::float8 > 0 THEN ${n}::jsonb ELSE ${n}::jsonb END)")
                }
            };
            return Some(match self.body_type.as_str() {
                "json" => format!("{json}::json"),
                "text" | "character varying" => format!("{json}::text"),
                "bytea" => format!("convert_to({json}::text, 'UTF8')"),
                _ => json,
            });
        }
        // reclaim --action fail keeps the stored error at least --keep-failed-for (the
        // parameter numbered after `_p`) by moving the expiry column. A table without one
        // keeps it until created_at + TTL; the parameter is still referenced (as a no-op
        // on the body, a JSON object) so every profile binds the same parameters.
        let n: u32 = role.strip_prefix("keep_failed_p")?.parse().ok()?;
        let zone = self.zone()?;
        Some(match &self.expiry {
            Expiry::Column { column } => {
                let c = quote_ident(column);
                format!(
                    ",\n           {c} = CASE WHEN ${n}::float8 > 0\n                THEN greatest({c}, (now() + make_interval(secs => ${n}::float8)){zone})\n                ELSE {c} END"
                )
            }
            // Referenced by {fail_body_pN_kK} instead.
            Expiry::CreatedPlusTtl { .. } => String::new(),
        })
    }

    /// Fill a statement's placeholders: `{table}` with the quoted table name and every role with
    /// its column or expression. Anything else in braces (`'{}'`) is kept.
    pub fn render(&self, template: &str, quoted_table: &str) -> String {
        self.render_quoted(template, quoted_table, quote_ident)
    }

    /// [`Profile::render`] for a statement shown to a person (a fix `check` proposes): names are
    /// quoted only where PostgreSQL needs it.
    pub fn render_readable(&self, template: &str, quoted_table: &str) -> String {
        self.render_quoted(template, quoted_table, quote_ident_if_needed)
    }

    fn render_quoted(
        &self,
        template: &str,
        quoted_table: &str,
        quote: fn(&str) -> String,
    ) -> String {
        let mut out = String::with_capacity(template.len() + 64);
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after.find('}');
            let name = close.map(|c| &after[..c]).filter(|n| {
                !n.is_empty()
                    && n.chars().all(|ch| {
                        ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_' || ch == '.'
                    })
            });
            let expanded = name.and_then(|n| {
                let (alias, role) = match n.split_once('.') {
                    Some((a, r)) => (Some(a), r),
                    None => (None, n),
                };
                self.expand(alias, role, quoted_table, quote)
            });
            match (expanded, close) {
                (Some(text), Some(c)) => {
                    out.push_str(&text);
                    rest = &after[c + 1..];
                }
                _ => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// The columns a built-in profile recognises a table by, each with the role it plays, to
    /// explain a match or a miss.
    fn signature(&self) -> Vec<(String, &'static str)> {
        let mut cols = vec![
            (self.key.clone(), "key"),
            (self.created_at.clone(), "creation time"),
        ];
        cols.extend(self.tenant.iter().map(|t| (t.clone(), "tenant")));
        if let Expiry::Column { column } = &self.expiry {
            cols.push((column.clone(), "expiry"));
        }
        match &self.in_flight {
            InFlight::State { column, .. } => cols.push((column.clone(), "in-flight state")),
            InFlight::Predicate { .. } | InFlight::Mapped { .. } | InFlight::None => {
                cols.extend(self.response_status.clone().map(|c| (c, "response status")));
                cols.extend(self.response_body.clone().map(|c| (c, "response body")));
                cols.extend(self.locked_at.clone().map(|c| (c, "lock time")));
            }
        }
        if let Some((c, _)) = &self.fingerprint {
            cols.push((c.clone(), "fingerprint"));
        }
        if self.name == "rocket-rides" {
            cols.push((s("recovery_point"), "recovery point"));
        }
        cols.sort();
        cols.dedup_by(|a, b| a.0 == b.0);
        cols
    }
}

/// The explainer's in-flight test: the key holds the 202 placeholder. `body` is the response body
/// as a jsonb expression.
fn explainer_placeholder(body: &str) -> InFlight {
    let holds =
        format!("(response_status = 202 AND {body} = '{{\"status\": \"processing\"}}'::jsonb)");
    InFlight::Predicate {
        done: format!("{holds} IS NOT TRUE"),
        in_flight: holds,
        released: None,
    }
}

/// `col = 'v'` for one value, `col IN ('a', 'b')` for several.
fn in_values(column: &str, values: &[String]) -> String {
    match values {
        [one] => format!("{column} = {}", literal(one)),
        many => format!(
            "{column} IN ({})",
            many.iter()
                .map(|v| literal(v))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A predicate written over bare column names, qualified with an alias when one is asked for.
/// Bare words of the predicate that the alias-aware quoting would change are left alone when there
/// is no alias; with one, every identifier-looking word not in a string and not a keyword or a
/// function call is qualified.
fn qualify(pred: &str, q: &dyn Fn(&str) -> String) -> String {
    let probe = q("x");
    let Some(prefix) = probe.strip_suffix("\"x\"").filter(|p| !p.is_empty()) else {
        return pred.to_owned();
    };
    const KEYWORDS: &[&str] = &[
        "and",
        "or",
        "not",
        "is",
        "null",
        "true",
        "false",
        "in",
        "like",
        "ilike",
        "between",
        "jsonb",
        "json",
        "text",
        "int",
        "integer",
        "bigint",
        "timestamptz",
        "interval",
        "case",
        "when",
        "then",
        "else",
        "end",
        "distinct",
        "from",
        "any",
        "all",
    ];
    let mut out = String::new();
    let chars: Vec<char> = pred.chars().collect();
    let mut i = 0;
    let mut in_string = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            in_string = !in_string;
            out.push(c);
            i += 1;
            continue;
        }
        let starts_word = (c.is_ascii_alphabetic() || c == '_')
            && (i == 0 || !(chars[i - 1].is_ascii_alphanumeric() || chars[i - 1] == '_'));
        if in_string || !starts_word {
            out.push(c);
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let after_cast = start >= 2 && chars[start - 1] == ':' && chars[start - 2] == ':';
        let is_call = chars.get(i) == Some(&'(');
        if after_cast || is_call || KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
            out.push_str(&word);
        } else {
            out.push_str(prefix);
            out.push_str(&word);
        }
    }
    out
}

/// The outcome of matching the built-in profiles against a table's columns.
pub(crate) enum Detected {
    Found(Box<Profile>),
    /// No profile fits: what each missed.
    None(Vec<ProfileMiss>),
}

/// Pick the built-in profile whose columns the table has (the most specific first).
pub(crate) fn detect(columns: &[Column]) -> Detected {
    let has = |c: &str| columns.iter().any(|k| k.name == c);
    let mut misses = Vec::new();
    for p in [
        Profile::storage(),
        Profile::rocket_rides(),
        Profile::explainer(),
    ] {
        let sig = p.signature();
        let missing: Vec<Missing> = sig
            .iter()
            .filter(|(c, _)| !has(c))
            .map(|(c, role)| Missing::Column {
                role,
                column: c.clone(),
            })
            .collect();
        // The explainer's table is a subset of storage's columns minus state and expiry: it must
        // not be taken for a storage table missing those (the storage check comes first).
        let problems = p.column_problems(columns);
        if missing.is_empty() && problems.is_empty() {
            let mut p = p;
            let names: Vec<&str> = sig.iter().map(|(c, _)| c.as_str()).collect();
            p.matched_because = Some(MatchReason::Columns(
                names.iter().map(|n| (*n).to_owned()).collect(),
            ));
            return Detected::Found(Box::new(p));
        }
        let mut missing = missing;
        if missing.is_empty() {
            // Every column is there, some with a type the profile cannot use.
            missing = problems
                .iter()
                .filter_map(|problem| {
                    Some(Missing::Type {
                        column: problem.column.clone(),
                        expected: problem.expected,
                        found: problem.found.clone()?,
                    })
                })
                .collect();
        }
        misses.push(ProfileMiss {
            profile: p.name.clone(),
            missing,
        });
    }
    Detected::None(misses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(names: &[(&str, &str)]) -> Vec<Column> {
        names.iter().map(|(n, t)| Column::new(n, t)).collect()
    }

    #[test]
    fn a_scope_value_reads_back_as_written() {
        for values in [
            vec!["payment", "client-1"],
            vec!["a b", "c,d", "e\"f\\g", "", "NULL", "{x}"],
        ] {
            let text = scope_text(&values);
            assert_eq!(scope_values(&text, values.len()).unwrap(), values, "{text}");
        }
        assert_eq!(scope_text(&["payment", "client-1"]), "{payment,client-1}");
        assert_eq!(scope_text(&["a b", ""]), "{\"a b\",\"\"}");
        assert_eq!(scope_values("payment", 1).unwrap(), vec!["payment"]);
        assert!(scope_values("{payment}", 2).is_none());
        assert!(scope_values("{a,NULL}", 2).is_none());
        // Read back from the table: an unquoted NULL is a NULL column, a quoted one the word.
        assert_eq!(
            scope_elements("{a,NULL,\"NULL\"}", 3).unwrap(),
            [Some("a".to_owned()), None, Some("NULL".to_owned())]
        );
        assert!(scope_values("payment,client-1", 2).is_none());
    }

    #[test]
    fn a_null_scope_value_is_written_apart_from_the_text_null() {
        assert_eq!(
            scope_text_of(&[Some("a"), None, Some("NULL")]).as_deref(),
            Some("{a,NULL,\"NULL\"}")
        );
        assert_eq!(scope_text_of(&[None]), None);
        assert_eq!(scope_text_of(&[Some("NULL")]).as_deref(), Some("NULL"));
        let scope = scope_from(&[s("scope")], None).unwrap();
        assert_eq!(scope.0, [(s("scope"), None)]);
        assert!(scope_from(&[], None).is_none());
    }

    #[test]
    fn a_scope_column_given_as_null_is_selected_with_is_null() {
        let mut p = Profile::storage();
        p.tenant = vec![s("endpoint"), s("scope")];
        p.scope_nulls = vec![false, true];
        assert_eq!(
            p.render("{tenant_is_p1}", "t"),
            "(\"endpoint\" = ($1::text::text[])[1]::text AND \"scope\" IS NULL AND ($1::text::text[])[2] IS NULL)"
        );
        assert_eq!(
            p.render("{scope_within_p4}", "t"),
            "(($4::text[])[1] IS NULL OR \"endpoint\" = ($4::text[])[1]::text) AND (\"scope\" IS NULL AND ($4::text[])[2] IS NULL)"
        );
        p.tenant = vec![s("scope")];
        p.scope_nulls = vec![true];
        assert_eq!(
            p.render("{t.tenant_is_plan}", "t"),
            "(t.\"scope\" IS NULL AND p.api_key_id::text IS NULL)"
        );
    }

    #[test]
    fn a_scope_of_several_columns_is_compared_column_by_column() {
        let mut p = Profile::storage();
        p.tenant = vec![s("request_type"), s("client_id")];
        p.tenant_types = vec![s("text"), s("bigint")];
        assert_eq!(
            p.render("{t.tenant_is_p6}", "x"),
            "(t.\"request_type\" = ($6::text::text[])[1]::text AND t.\"client_id\" = ($6::text::text[])[2]::bigint)"
        );
        assert_eq!(
            p.render("{tenant}::text", "x"),
            "ARRAY[\"request_type\"::text, \"client_id\"::text]::text"
        );
        assert_eq!(
            p.render("{scope_within_p4}", "x"),
            "(($4::text[])[1] IS NULL OR \"request_type\" = ($4::text[])[1]::text) AND (($4::text[])[2] IS NULL OR \"client_id\" = ($4::text[])[2]::bigint)"
        );
        p.tenant.truncate(1);
        assert_eq!(
            p.render("{tenant_is_p1}", "x"),
            "\"request_type\" = $1::text::text"
        );
    }

    #[test]
    fn storage_renders_the_statements_as_written_before_profiles() {
        let p = Profile::storage();
        assert_eq!(
            p.render(
                "DELETE FROM {table} WHERE {expiry} < {cutoff} AND {done}",
                "\"t\""
            ),
            "DELETE FROM \"t\" WHERE \"expires_at\" < now() AND \"state\" = 'completed'"
        );
        assert_eq!(
            p.render("{t.held_since} '{}' {nope}", "x"),
            "coalesce(t.\"locked_at\", t.\"created_at\") '{}' {nope}"
        );
    }

    #[test]
    fn a_ttl_table_without_a_ttl_cannot_render_its_cutoff() {
        let p = Profile::explainer();
        assert!(p.render("{cutoff}", "t").contains("{cutoff}"));
        let p = p.with_ttl(Some(Duration::from_secs(3600)));
        assert_eq!(
            p.render("{expiry} < {cutoff}", "t"),
            "\"created_at\" < (now() - make_interval(secs => 3600))"
        );
    }

    #[test]
    fn predicates_are_qualified_with_an_alias() {
        let p = Profile::rocket_rides();
        assert_eq!(
            p.render("{t.in_flight}", "t"),
            "(t.recovery_point <> 'finished' AND t.locked_at IS NOT NULL)"
        );
        let e = Profile::explainer();
        assert_eq!(
            e.render("{r.in_flight}", "t"),
            "(r.response_status = 202 AND r.response_body = '{\"status\": \"processing\"}'::jsonb)"
        );
    }

    #[test]
    fn a_state_column_may_be_an_enum_holding_every_mapped_value() {
        let mut columns = cols(&[
            ("key", "text"),
            ("api_key_id", "text"),
            ("state", "idempotency_state"),
            ("created_at", "timestamp with time zone"),
            ("expires_at", "timestamp with time zone"),
            ("locked_at", "timestamp with time zone"),
            ("request_method", "text"),
            ("request_path", "text"),
            ("request_fingerprint", "bytea"),
            ("response_status", "integer"),
            ("response_body", "jsonb"),
        ]);
        assert_eq!(Profile::storage().column_problems(&columns).len(), 1);
        columns[2].enum_labels = Some(vec![s("in_progress"), s("completed"), s("failed")]);
        assert!(Profile::storage().column_problems(&columns).is_empty());
        columns[2].enum_labels = Some(vec![s("in_progress"), s("done")]);
        assert_eq!(
            Profile::storage().column_problems(&columns)[0].found,
            Some(FoundType::EnumLacking {
                sql_type: s("idempotency_state"),
                labels: vec![s("in_progress"), s("done")],
                missing: vec![s("completed")],
            })
        );
    }

    #[test]
    fn a_type_modifier_is_accepted_wherever_its_base_type_is() {
        let mut columns = cols(&[
            ("key", "character varying"),
            ("request_hash", "character varying"),
            ("response_status", "integer"),
            ("response_body", "jsonb"),
            ("created_at", "timestamp with time zone"),
            ("locked_at", "timestamp with time zone"),
        ]);
        columns[0].sql_type = "character varying(255)".into();
        columns[4].sql_type = "timestamp(6) with time zone".into();
        assert!(Profile::explainer().column_problems(&columns).is_empty());
        columns[0].base_type = "integer".into();
        assert_eq!(
            Profile::explainer().column_problems(&columns)[0].found,
            Some(FoundType::Type(s("character varying(255)")))
        );
    }

    #[test]
    fn detection_names_each_profile_and_what_it_missed() {
        let explainer = cols(&[
            ("key", "text"),
            ("request_hash", "text"),
            ("response_status", "integer"),
            ("response_body", "jsonb"),
            ("created_at", "timestamp with time zone"),
            ("locked_at", "timestamp with time zone"),
        ]);
        match detect(&explainer) {
            Detected::Found(p) => assert_eq!(p.name, "explainer"),
            Detected::None(_) => panic!("explainer not detected"),
        }
        match detect(&cols(&[("key", "text"), ("created_at", "text")])) {
            Detected::Found(p) => panic!("matched {}", p.name),
            Detected::None(misses) => {
                assert_eq!(misses.len(), 3);
                assert!(misses[0].missing.contains(&Missing::Column {
                    role: "expiry",
                    column: s("expires_at"),
                }));
            }
        }
    }
}

//! The key table as found in the catalog: which relation `--table` names, its columns, the indexes
//! idemctl can use, and what the current role may do with it.

use crate::db::column::Column;
use crate::db::session::{Session, p};
use crate::ident::{quote_ident, quote_ident_if_needed};
use anyhow::{Context as _, Result};

use crate::db::profile::{self, Action, Detected, Profile};
use crate::domain::TableName;
use crate::exit::{Exit, refuse};
use crate::report::db::{ColumnProblem, MatchReason, Refusal, Step};
pub(crate) use crate::report::rows::Partitioning;

/// One index as the catalog describes it.
#[derive(Clone, Debug)]
pub struct Index {
    pub name: String,
    pub is_unique: bool,
    pub is_primary: bool,
    pub is_valid: bool,
    pub predicate: Option<String>,
    /// Declared NULLS NOT DISTINCT (PostgreSQL 15+): a NULL in a key column equals another NULL
    /// there, so the index holds one row per combination of values, NULLs included.
    pub nulls_not_distinct: bool,
    /// The key columns as PostgreSQL prints them (quoted where needed; expressions as text).
    pub columns: Vec<String>,
    /// The table column each key column is, by attribute number, named as the catalog spells it
    /// (unquoted); None for an expression. Roles are matched against these, never against the
    /// printed text, so a column whose name needs quoting is recognised.
    pub attnames: Vec<Option<String>>,
}

impl Index {
    /// The key columns that are plain table columns, in order, stopping at the first expression.
    fn plain_columns(&self) -> Option<Vec<&str>> {
        self.attnames.iter().map(Option::as_deref).collect()
    }

    /// Whether the `n`th key column is the table column `column`.
    fn column_is(&self, n: usize, column: &str) -> bool {
        self.attnames
            .get(n)
            .is_some_and(|c| c.as_deref() == Some(column))
    }

    fn leads_with(&self, column: &str) -> bool {
        self.is_valid && self.predicate.is_none() && self.column_is(0, column)
    }

    /// A unique index that makes the identity (the scope's columns and the key) name one row: its
    /// columns are among the identity's, the key included (the identity itself in any order, or
    /// fewer columns, which make it the more unique); on a partitioned table also one that adds the
    /// partition key's columns, in any position (PostgreSQL requires a unique index of a
    /// partitioned table to include them).
    fn identifies_rows(&self, partition_key: &[String], identity: &[&str]) -> bool {
        if !(self.is_unique && self.is_valid && self.predicate.is_none()) {
            return false;
        }
        let Some(mut rest) = self.plain_columns() else {
            return false;
        };
        for column in partition_key {
            if !identity.contains(&column.as_str()) {
                match rest.iter().position(|c| c == column) {
                    Some(at) => {
                        rest.remove(at);
                    }
                    None => return false,
                }
            }
        }
        let key = identity.last().copied().unwrap_or_default();
        rest.contains(&key) && rest.iter().all(|c| identity.contains(c))
    }

    /// Whether the index's leading columns are the identity's, in any order, or it leads with the
    /// key (`key` last in `identity`): a lookup of one scope's key reads a bounded part of it.
    fn looks_up(&self, identity: &[&str]) -> bool {
        let key = identity.last().copied().unwrap_or_default();
        if !(self.is_valid && self.predicate.is_none()) {
            return false;
        }
        if self.column_is(0, key) {
            return true;
        }
        let n = identity.len();
        let lead: Vec<&str> = self
            .attnames
            .iter()
            .take(n)
            .map_while(Option::as_deref)
            .collect();
        lead.len() == n && identity.iter().all(|c| lead.contains(c))
    }

    /// The optional partial index that makes stuck in-flight keys cheap to find: on the time the
    /// owner took the key, restricted to in-flight rows (compared as the catalog prints them).
    fn serves_stuck_lookup(&self, held_since: &str, in_flight: &str) -> bool {
        let pred = self.predicate.as_deref().unwrap_or("");
        self.is_valid
            && normalise(pred) == normalise(in_flight)
            && self
                .columns
                .first()
                .is_some_and(|c| normalise(c) == normalise(held_since))
    }
}

/// An expression without what the catalog adds or drops when it prints one back: case, blanks,
/// quotes, parentheses and `::text` casts.
fn normalise(expr: &str) -> String {
    expr.to_lowercase()
        .replace("::text", "")
        .chars()
        .filter(|c| !c.is_whitespace() && !matches!(c, '"' | '(' | ')'))
        .collect()
}

/// How `inspect` can find a key when no tenant is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyLookup {
    /// An index led by `key` (the reference table's primary key).
    ByKey,
    /// Only an index led by (api_key_id, key): walk the tenants through it.
    SkipScan,
    /// Neither: the key cannot be found without a scan.
    Unindexed,
}

/// What idemctl does with the table, for the privileges each job needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    /// inspect, stats, check, and every dry run.
    Read,
    Evict,
    Reclaim(Action),
}

/// The statement that turns autovacuum back on for `relation` (as the catalog names it), for
/// `check` to show.
pub(crate) fn autovacuum_on_fix(relation: &str) -> String {
    format!("ALTER TABLE {relation} SET (autovacuum_enabled = on);")
}

/// The statement that makes autovacuum take `relation` on after `threshold` dead rows plus
/// `scale` of its rows, for `check` to show.
pub(crate) fn autovacuum_scale_fix(relation: &str, scale: f64, threshold: f64) -> String {
    format!(
        "ALTER TABLE {relation} SET (autovacuum_vacuum_scale_factor = {scale}, autovacuum_vacuum_threshold = {threshold});"
    )
}

/// The function evict's durable points call, as a GRANT names it where the catalog does not say
/// (its arguments as of PostgreSQL 15).
pub(crate) const CONFIRM_FUNCTION: &str = "pg_catalog.pg_logical_emit_message(boolean, text, text)";

/// What the current role may do with the table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Privileges {
    pub role: String,
    pub select: bool,
    pub delete: bool,
    pub update: bool,
    pub lock_rows: bool,
    /// UPDATE on each column reclaim writes (--action fail, then --action release), in order.
    pub columns: Vec<(String, bool)>,
    /// Owns the table (or is a member of its owner): needed to detach partitions.
    pub owner: bool,
    /// May write the WAL record evict's durable points commit (`pg_logical_emit_message`).
    pub confirm: bool,
    /// That function as a GRANT names it (its arguments differ between versions).
    pub confirm_function: Option<String>,
}

/// The timestamp a table is range-partitioned on, when it is one idemctl can reason about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeKey {
    ExpiresAt,
    CreatedAt,
}

impl RangeKey {
    pub fn column(self) -> &'static str {
        match self {
            RangeKey::ExpiresAt => "expires_at",
            RangeKey::CreatedAt => "created_at",
        }
    }
}

/// The resolved key table.
#[derive(Clone, Debug)]
pub struct KeyTable {
    pub oid: i64,
    pub schema: String,
    pub name: String,
    /// `"schema"."name"`, safe to splice into a statement.
    pub quoted: String,
    pub partitioned: bool,
    /// How the table is partitioned (None for a plain table).
    pub partitioning: Option<Partitioning>,
    pub columns: Vec<Column>,
    pub indexes: Vec<Index>,
    /// Which column plays which role.
    pub profile: Profile,
    /// Some foreign key references the table (as the catalog said when it was resolved).
    pub referenced: bool,
}

/// How to pick the table's profile: forced by name or mapping, else detected; and the TTL for a
/// table whose keys expire at created_at + TTL.
#[derive(Clone, Debug, Default)]
pub struct ProfileChoice {
    /// `--profile NAME` (or IDEMCTL_PROFILE, or the config file's `profile`).
    pub forced: Option<String>,
    /// Where `forced` was named, for messages (`--profile` when empty).
    pub forced_by: String,
    /// A mapping from the config file, used when `--profile` names it or nothing else matches.
    pub mapping: Option<Profile>,
    pub ttl: Option<std::time::Duration>,
    /// The zone of `timestamp without time zone` columns and where it was named (`--time-zone`,
    /// IDEMCTL_TIME_ZONE or the config file's time_zone); wins over a mapping's own.
    pub time_zone: Option<(String, String)>,
}

/// The shortest TTL evict and stats accept without --force: a unit typo (24m for 24h) stays far
/// below it, and no API keeps keys for a retry window shorter than an hour.
pub(crate) const MIN_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

impl KeyTable {
    /// Find the table `--table` names (following search_path when unqualified) and read its
    /// columns and indexes. A missing table is a one-line error with exit code "not found".
    pub async fn resolve(
        client: &Session,
        name: &TableName,
        choice: &ProfileChoice,
    ) -> Result<KeyTable> {
        let row = client
            .query_opt(
                include_str!("../../sql/resolve_table.sql"),
                &[p(&name.schema), p(&name.name)],
            )
            .await
            .context(Step::LookUpTable)?;
        let Some(row) = row else {
            return Err(refuse(
                Exit::NotFound,
                Refusal::NoTable {
                    table: name.to_string(),
                },
            ));
        };
        let oid: i64 = row.get("oid");
        let schema: String = row.get("schema");
        let relname: String = row.get("name");
        let kind: String = row.get("kind");
        let referenced: bool = row.get("referenced");
        let columns = read_columns(client, oid).await?;
        let indexes = read_indexes(client, oid).await?;
        let partitioning = if kind == "p" {
            read_partitioning(client, oid).await?
        } else {
            None
        };
        let display = format!("{schema}.{relname}");
        let mut profile = choose_profile(&display, &columns, choice)?.with_ttl(choice.ttl);
        let body_type = profile
            .response_body
            .as_ref()
            .and_then(|b| columns.iter().find(|c| &c.name == b))
            .map(|c| c.base_type.clone());
        if let Some(t) = body_type {
            profile.fit_body_type(&t);
            profile.body_type = t;
        }
        let type_of = |c: &Option<String>| {
            c.as_ref()
                .and_then(|c| columns.iter().find(|k| &k.name == c))
                .map_or_else(|| "text".to_owned(), Column::cast_type)
        };
        if let Some((zone, _)) = &choice.time_zone {
            profile.time_zone = Some(zone.clone());
        }
        profile.naive_times = columns
            .iter()
            .any(|c| c.name == profile.created_at && c.base_type == "timestamp without time zone");
        if profile.naive_times
            && let Some(zone) = &profile.time_zone
        {
            let from = match &choice.time_zone {
                Some((_, from)) if !from.is_empty() => from.clone(),
                Some(_) => "--time-zone".to_owned(),
                None => profile
                    .origin
                    .as_ref()
                    .map_or_else(|| "time_zone".to_owned(), |o| format!("time_zone in {o}")),
            };
            check_time_zone(client, zone, &from).await?;
        }
        profile.tenant_types = profile
            .tenant
            .iter()
            .map(|c| type_of(&Some(c.clone())))
            .collect();
        profile.key_type = type_of(&Some(profile.key.clone()));
        if let Some((column, kind)) = &mut profile.fingerprint {
            *kind = if type_of(&Some(column.clone())) == "bytea" {
                profile::FingerprintKind::Bytea
            } else {
                profile::FingerprintKind::Hex
            };
        }
        let mut table = KeyTable {
            profile,
            oid,
            quoted: format!("{}.{}", quote_ident(&schema), quote_ident(&relname)),
            schema,
            name: relname,
            partitioned: kind == "p",
            partitioning,
            columns,
            indexes,
            referenced,
        };
        table.profile.row_identity = table.row_identity();
        table.profile.scope_walk = table.scope_walk().unwrap_or_default();
        Ok(table)
    }

    /// The partition key's columns (empty for a plain table).
    pub fn partition_key(&self) -> &[String] {
        self.partitioning
            .as_ref()
            .map_or(&[], |p| p.columns.as_slice())
    }

    /// `expires_at` or `created_at` when the table is RANGE-partitioned on that one column (with the
    /// expected timestamptz type), the layouts `evict --drop-partitions` and the per-partition bounds
    /// of `stats` understand.
    pub fn range_key(&self) -> Option<RangeKey> {
        let p = self.partitioning.as_ref()?;
        if p.strategy != "range" {
            return None;
        }
        let key = match p.columns.as_slice() {
            [c] if c == "expires_at" => RangeKey::ExpiresAt,
            [c] if c == "created_at" => RangeKey::CreatedAt,
            _ => return None,
        };
        let typed = self
            .columns
            .iter()
            .any(|c| c.name == key.column() && c.base_type == "timestamp with time zone");
        typed.then_some(key)
    }

    /// How far past a partition's upper bound its keys can expire, which proves they all expired
    /// without reading them (where there is no expiry index to find the latest expiry through):
    /// nothing where the table is partitioned on its expiry column, the TTL where keys expire a
    /// TTL after the creation time it is partitioned on. None where the bound proves nothing
    /// (partitioned on the creation time, with an expiry column of its own) or the table is not
    /// range-partitioned on a time.
    pub fn expiry_past_bound(&self) -> Option<std::time::Duration> {
        let key = self.range_key()?;
        (key.column() == self.profile.expiry_column())
            .then(|| self.profile.ttl().unwrap_or(std::time::Duration::ZERO))
    }

    /// Whether the identity index makes the identity (scope and key) unique across the whole
    /// table. On a partitioned table whose key is another column, the unique index includes that
    /// column, so PostgreSQL enforces uniqueness only per partition-key value.
    pub fn identity_is_global(&self) -> bool {
        let identity = self.identity_columns();
        self.identity_index().is_some_and(|i| {
            i.attnames
                .iter()
                .all(|c| c.as_deref().is_some_and(|c| identity.contains(&c)))
        })
    }

    /// `CREATE INDEX CONCURRENTLY` is refused on a partitioned table: the fixes then use a plain
    /// CREATE INDEX (which blocks writes while it builds) and say how to avoid that.
    fn create_index(&self, unique: bool, name: &str, rest: &str) -> String {
        let unique = if unique { "UNIQUE " } else { "" };
        let name = quote_ident(&format!("{}_{name}", self.name));
        if self.partitioned {
            format!(
                "CREATE {unique}INDEX {name} ON {} {rest}; -- blocks writes while it builds; to avoid that, CREATE INDEX ... ON ONLY the table, CREATE INDEX CONCURRENTLY on each partition, then ALTER INDEX ... ATTACH PARTITION each",
                self.quoted
            )
        } else {
            format!(
                "CREATE {unique}INDEX CONCURRENTLY {name} ON {} {rest};",
                self.quoted
            )
        }
    }

    /// `schema.name` as written in messages, unescaped: the renderer escapes what it prints
    /// ([`KeyTable::display`] for reports).
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// Columns the profile names that are missing or of an unexpected type.
    pub(crate) fn column_problems(&self) -> Vec<ColumnProblem> {
        self.profile.column_problems(&self.columns)
    }

    /// Fail with a one-line, actionable error when a column the profile names is missing or
    /// mistyped.
    pub fn require_columns(&self) -> Result<()> {
        let Some(problem) = self.column_problems().into_iter().next() else {
            return self.require_readable_times();
        };
        let other_case = self.other_case(&problem.column).map(str::to_owned);
        Err(refuse(
            Exit::Usage,
            Refusal::Column {
                table: self.qualified_name(),
                profile: self.profile.name.clone(),
                problem,
                other_case,
                origin: self.profile.origin.clone(),
            },
        ))
    }

    /// The table's column spelled as `name` but for case (`statusCode` for `statuscode`), which a
    /// mapping most likely meant.
    pub fn other_case(&self, name: &str) -> Option<&str> {
        self.columns
            .iter()
            .find(|c| c.name != name && c.name.to_lowercase() == name.to_lowercase())
            .map(|c| c.name.as_str())
    }

    /// Fail when the table's times are `timestamp without time zone` and no zone says how to read
    /// them (or they mix both kinds).
    pub fn require_readable_times(&self) -> Result<()> {
        match self.profile.time_problem(&self.columns) {
            None => Ok(()),
            Some(problem) => Err(refuse(
                Exit::Usage,
                Refusal::Times {
                    table: self.qualified_name(),
                    problem,
                },
            )),
        }
    }

    /// Fail when keys expire at created_at + TTL and no TTL was given.
    pub fn require_ttl(&self, command: &str) -> Result<()> {
        if !self.profile.lacks_ttl() {
            return Ok(());
        }
        Err(refuse(
            Exit::Usage,
            Refusal::NoTtl {
                table: self.qualified_name(),
                profile: self.profile.name.clone(),
                created_at: self.profile.created_at.clone(),
                command: command.to_owned(),
            },
        ))
    }

    /// Fail when keys expire at created_at + TTL and the TTL is under [`MIN_TTL`] unless
    /// `allowed` (--force, or allow_short_ttl in the config file): a unit typo (24m for 24h) would
    /// make nearly every answered key expired. `from` says where the TTL came from.
    pub fn require_ttl_floor(&self, command: &str, allowed: bool, from: &str) -> Result<()> {
        match self.profile.ttl() {
            Some(ttl) if ttl < MIN_TTL && !allowed => Err(refuse(
                Exit::Usage,
                Refusal::ShortTtl {
                    ttl,
                    from: from.to_owned(),
                    table: self.qualified_name(),
                    command: command.to_owned(),
                },
            )),
            _ => Ok(()),
        }
    }

    /// The index that orders rows by the expiry column (`expires_at`, or `created_at` on a TTL
    /// table), if any.
    pub fn expiry_index(&self) -> Option<&Index> {
        let column = self.profile.expiry_column();
        self.indexes.iter().find(|i| i.leads_with(column))
    }

    /// The index evict walks when there is no expiry index: the primary key, else another unique
    /// index, of plain NOT NULL columns only. Keyset pagination compares the cursor as a row,
    /// `(a, b) > ($1, $2)`, which is NULL, not true, when either side holds a NULL: rows with a
    /// NULL would be skipped or end the walk early. That holds for an index made NULLS NOT
    /// DISTINCT too (it makes the index unique, not the row comparison NULL-safe), so such an index
    /// over a nullable column is not walked either.
    pub fn walk_index(&self) -> Option<&Index> {
        let not_null = |c: &Option<String>| {
            c.as_ref()
                .is_some_and(|c| self.columns.iter().any(|k| &k.name == c && k.not_null))
        };
        let usable = |i: &&Index| {
            i.is_unique
                && i.is_valid
                && i.predicate.is_none()
                && i.plain_columns().is_some()
                && i.attnames.iter().all(not_null)
        };
        self.indexes
            .iter()
            .filter(usable)
            .find(|i| i.is_primary)
            .or_else(|| self.indexes.iter().find(usable))
    }

    /// The walk index's columns with the type a text cursor value is cast back to.
    pub fn walk_columns(&self, index: &Index) -> Vec<(String, String)> {
        index
            .attnames
            .iter()
            .flatten()
            .map(|c| {
                let ty = self
                    .columns
                    .iter()
                    .find(|k| &k.name == c)
                    .map_or_else(|| "text".to_owned(), Column::cast_type);
                (c.clone(), ty)
            })
            .collect()
    }

    /// Whether walking `index` visits rows in the order they were written (one column filled from
    /// a sequence), so a page of keys none of which has expired means the rest has not either.
    pub fn walk_follows_age(&self, index: &Index) -> bool {
        match index.attnames.as_slice() {
            [Some(c)] => self.columns.iter().any(|k| &k.name == c && k.serial),
            _ => false,
        }
    }

    /// The statement that creates the expiry index.
    pub fn expiry_index_fix(&self) -> String {
        let column = quote_ident_if_needed(self.profile.expiry_column());
        self.create_index(false, "expiry", &format!("({column})"))
    }

    /// The unique index that identifies a row, if any. An index over a column that allows NULL
    /// does not, unless it is made NULLS NOT DISTINCT: by default NULLs are distinct in it, so it
    /// holds any number of rows with the same key and a NULL scope. One over NOT NULL columns is
    /// preferred (statements that compare its columns with `=` find every row through it).
    pub fn identity_index(&self) -> Option<&Index> {
        let part = self.partition_key();
        let identity = self.identity_columns();
        let identifies =
            |i: &&Index| self.unique_with_nulls(i) && i.identifies_rows(part, &identity);
        let mut found = self.indexes.iter().filter(identifies);
        let first = found.clone().find(|i| self.all_not_null(i));
        first.or_else(|| found.next())
    }

    /// Whether the index holds one row per combination of its columns' values: its columns are
    /// NOT NULL, or it is made NULLS NOT DISTINCT.
    fn unique_with_nulls(&self, index: &Index) -> bool {
        index.nulls_not_distinct || self.all_not_null(index)
    }

    /// Whether each of the index's columns is a plain NOT NULL column.
    fn all_not_null(&self, index: &Index) -> bool {
        index.attnames.iter().all(|c| {
            c.as_ref()
                .is_some_and(|c| self.columns.iter().any(|k| &k.name == c && k.not_null))
        })
    }

    /// The scope columns that allow NULL (the key is always NOT NULL in an identity).
    pub fn nullable_scope_columns(&self) -> Vec<String> {
        self.profile
            .tenant
            .iter()
            .filter(|t| !self.columns.iter().any(|k| &k.name == *t && k.not_null))
            .cloned()
            .collect()
    }

    /// A unique index over the key, the scope and more columns: the table's identity is wider than
    /// the mapping's, and an index on the mapping's columns alone would refuse the table's rows.
    pub fn wider_identity_index(&self) -> Option<&Index> {
        let identity = self.identity_columns();
        self.indexes.iter().find(|i| {
            i.is_unique
                && i.is_valid
                && i.predicate.is_none()
                && self.unique_with_nulls(i)
                && i.plain_columns()
                    .is_some_and(|cols| identity.iter().all(|c| cols.contains(c)))
        })
    }

    /// The statement that creates the identity index (with the partition key's columns added on a
    /// partitioned table, which PostgreSQL requires of a unique index there).
    pub fn identity_index_fix(&self) -> String {
        let identity = self.identity_columns();
        let mut columns: Vec<String> = identity.iter().map(|c| quote_ident_if_needed(c)).collect();
        for c in self.partition_key() {
            if !identity.contains(&c.as_str()) {
                columns.push(quote_ident(c));
            }
        }
        self.create_index(true, "scope", &format!("({})", columns.join(", ")))
    }

    /// The statement that creates an index looking a key up by its scope and key: a plain one,
    /// never unique, since a unique index the table does not already have could refuse rows the
    /// application wrote or would write (its own identity may be wider than the mapping's).
    pub fn lookup_index_fix(&self) -> String {
        let columns: Vec<String> = self
            .identity_columns()
            .iter()
            .map(|c| quote_ident_if_needed(c))
            .collect();
        self.create_index(false, "scope", &format!("({})", columns.join(", ")))
    }

    /// The statement that creates an index led by the key, which finds a key under every scope.
    pub fn key_index_fix(&self) -> String {
        let key = quote_ident_if_needed(&self.profile.key);
        self.create_index(false, "key", &format!("({key})"))
    }

    /// The table as messages name it (the output layer words and escapes it).
    pub(crate) fn shown(&self) -> crate::report::table::Table {
        let p = &self.profile;
        crate::report::table::Table {
            name: self.qualified_name(),
            quoted: self.quoted.clone(),
            profile: crate::report::table::Profile {
                name: p.name.clone(),
                actions: p.actions.clone(),
                created_at: p.created_at.clone(),
                expiry_column: p.expiry_column().to_owned(),
                tenant: p.tenant.clone(),
            },
            stuck_index_fix: self.stuck_index_fix(),
            identity_index_fix: self.identity_index_fix(),
            lookup_index_fix: self.lookup_index_fix(),
            key_index_fix: self.key_index_fix(),
            identity_columns: self.identity_columns_text(),
        }
    }

    /// The columns that identify a key, as `(tenant, key)`, `(type, client, key)` or `(key)`,
    /// unescaped.
    pub fn identity_columns_text(&self) -> String {
        format!("({})", self.identity_columns().join(", "))
    }

    /// The scope's columns, in the mapping's order, then the key column.
    pub(crate) fn identity_columns(&self) -> Vec<&str> {
        self.profile
            .tenant
            .iter()
            .map(String::as_str)
            .chain([self.profile.key.as_str()])
            .collect()
    }

    /// The columns that name one row for statements that find rows again by identity: the identity
    /// index's, else the walk index's (the primary key or another unique index), else the
    /// identity's (whose uniqueness is then not enforced; what runs by identity requires an index).
    /// An identity index over a nullable column (NULLS NOT DISTINCT) comes after the walk index:
    /// those statements match rows with `IN`, which never matches a NULL.
    fn row_identity(&self) -> Vec<String> {
        let not_null = self.identity_index().filter(|i| self.all_not_null(i));
        match not_null
            .or_else(|| self.walk_index())
            .or_else(|| self.identity_index())
        {
            Some(i) => i.attnames.iter().flatten().cloned().collect(),
            None => self
                .identity_columns()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        }
    }

    /// An index that serves a lookup of one scope's key (the identity's columns leading it, in any
    /// order, or the key).
    pub fn has_tenant_key_index(&self) -> bool {
        let identity = self.identity_columns();
        self.indexes.iter().any(|i| i.looks_up(&identity))
    }

    /// How a key can be found without its scope.
    pub fn key_lookup(&self) -> KeyLookup {
        let key = self.profile.key.as_str();
        if self.indexes.iter().any(|i| i.leads_with(key)) {
            KeyLookup::ByKey
        } else if self.scope_walk().is_some() {
            KeyLookup::SkipScan
        } else {
            KeyLookup::Unindexed
        }
    }

    /// The scope columns an index lists before the key, in its order (the fewest of any index):
    /// walking their distinct values through it and probing the key under each finds a key
    /// without its scope. None when no index has only scope columns before the key.
    pub(crate) fn scope_walk(&self) -> Option<Vec<String>> {
        let p = &self.profile;
        self.indexes
            .iter()
            .filter(|i| i.is_valid && i.predicate.is_none())
            .filter_map(|i| {
                let at = i
                    .attnames
                    .iter()
                    .position(|c| c.as_deref() == Some(p.key.as_str()))?;
                let lead: Vec<String> = i.attnames[..at].iter().cloned().collect::<Option<_>>()?;
                let scope_only = lead.iter().all(|c| p.tenant.contains(c));
                (at > 0 && scope_only).then_some(lead)
            })
            .min_by_key(Vec::len)
    }

    /// The optional partial index on in_progress rows, if present (never on a table without an
    /// in-flight marker, which needs none).
    pub fn stuck_index(&self) -> Option<&Index> {
        if !self.profile.has_in_flight_marker() {
            return None;
        }
        let held = self.sql("{held_since}");
        let in_flight = self.sql("{in_flight}");
        self.indexes
            .iter()
            .find(|i| i.serves_stuck_lookup(&held, &in_flight))
    }

    /// The statement that creates the optional in_progress index.
    pub fn stuck_index_fix(&self) -> String {
        let rest = self
            .profile
            .render_readable("(({held_since})) WHERE {in_flight}", &self.quoted);
        self.create_index(false, "in_progress", &rest)
    }

    /// Fill a statement from `sql/` with the quoted table name and the profile's columns.
    pub fn sql(&self, template: &str) -> String {
        self.profile.render(template, &self.quoted)
    }

    /// [`KeyTable::sql`] for values of the scope that are NULL where `nulls` is set (by scope
    /// column): one statement per pattern of NULLs, each selecting those columns with `IS NULL`.
    pub fn sql_with_nulls(&self, template: &str, nulls: &[bool]) -> String {
        if !nulls.contains(&true) {
            return self.sql(template);
        }
        let mut profile = self.profile.clone();
        profile.scope_nulls = nulls.to_vec();
        profile.render(template, &self.quoted)
    }

    /// Every pattern of NULLs the scope's values can have (by scope column; only columns that
    /// allow NULL are ever NULL), the pattern without NULLs first.
    pub fn scope_null_patterns(&self) -> Vec<Vec<bool>> {
        let nullable: Vec<bool> = self
            .profile
            .tenant
            .iter()
            .map(|t| !self.columns.iter().any(|k| &k.name == t && k.not_null))
            .collect();
        let mut patterns = vec![vec![false; nullable.len()]];
        for (i, can) in nullable.iter().enumerate() {
            if *can {
                let more: Vec<Vec<bool>> = patterns
                    .iter()
                    .map(|p| {
                        let mut p = p.clone();
                        p[i] = true;
                        p
                    })
                    .collect();
                patterns.extend(more);
            }
        }
        patterns
    }

    /// What the current role may do with this table.
    pub async fn privileges(&self, client: &Session) -> Result<Privileges> {
        let row = client
            .query_one(
                include_str!("../../sql/table_privileges.sql"),
                &[p(&self.oid)],
            )
            .await
            .context(Step::ReadPrivileges)?;
        let mut names = self.fail_columns();
        for c in self.release_columns() {
            if !names.contains(&c) {
                names.push(c);
            }
        }
        let granted: Vec<bool> = client
            .query_one(
                include_str!("../../sql/reclaim_privileges.sql"),
                &[p(&self.oid), p(&names)],
            )
            .await
            .context(Step::ReadColumnPrivileges)?
            .try_get("granted")?;
        Ok(Privileges {
            role: row.get("role"),
            select: row.get("can_select"),
            delete: row.get("can_delete"),
            update: row.get("can_update"),
            lock_rows: row.get("can_lock_rows"),
            columns: names.into_iter().zip(granted).collect(),
            owner: row.get("is_owner"),
            confirm: row.get("can_confirm"),
            confirm_function: row.get("confirm_function"),
        })
    }

    /// The grants `job` needs on this table, as written in a GRANT, with whether the role has
    /// each: the one table of privilege needs that the commands enforce and `check` reports.
    /// Row locks (FOR UPDATE) need UPDATE on any column; the grant named is
    /// [`KeyTable::row_lock_column`]'s.
    pub fn privilege_needs(&self, p: &Privileges, job: Job) -> Vec<(String, bool)> {
        let update = |c: &str| format!("UPDATE ({})", quote_ident_if_needed(c));
        let column = |c: &str| (update(c), p.columns.iter().any(|(n, g)| n == c && *g));
        let mut needs = vec![("SELECT".to_owned(), p.select)];
        match job {
            Job::Read => {}
            Job::Evict | Job::Reclaim(Action::Delete) => {
                needs.push(("DELETE".to_owned(), p.delete));
                needs.push((self.row_lock_grant(job), p.lock_rows));
            }
            Job::Reclaim(Action::Fail) => {
                needs.extend(self.fail_columns().iter().map(|c| column(c)));
            }
            Job::Reclaim(Action::Release) => {
                needs.extend(self.release_columns().iter().map(|c| column(c)));
            }
        }
        needs
    }

    /// The columns reclaim --action fail writes (the expiry column too: --keep-failed-for).
    pub fn fail_columns(&self) -> Vec<String> {
        let p = &self.profile;
        let state = match &p.in_flight {
            profile::InFlight::State { column, .. } => Some(column.clone()),
            profile::InFlight::Predicate { .. }
            | profile::InFlight::Mapped { .. }
            | profile::InFlight::None => None,
        };
        let expiry = match &p.expiry {
            profile::Expiry::Column { column } => Some(column.clone()),
            profile::Expiry::CreatedPlusTtl { .. } => None,
        };
        state
            .into_iter()
            .chain(p.response_status.clone())
            .chain(p.response_body.clone())
            .chain(expiry)
            .collect()
    }

    /// The column whose UPDATE grant gives `job`'s role the row locks it takes (`FOR UPDATE SKIP
    /// LOCKED`), as `sql/roles.sql` grants it: the expiry column for evict (`idemctl_evictor`
    /// gets `UPDATE (expires_at)`, a column it would never write), the in-flight column for
    /// reclaim (`idemctl_reclaimer`'s `UPDATE (state, ...)`, the columns --action fail writes).
    /// Without an expiry column, evict names the same column as reclaim.
    pub fn row_lock_column(&self, job: Job) -> &str {
        match (job, &self.profile.expiry) {
            (Job::Evict, profile::Expiry::Column { column }) => column,
            _ => self.lock_column(),
        }
    }

    /// The grant that lets the role take `job`'s row locks, as written in a GRANT:
    /// `UPDATE (column)` on [`KeyTable::row_lock_column`].
    pub(crate) fn row_lock_grant(&self, job: Job) -> String {
        format!(
            "UPDATE ({})",
            quote_ident_if_needed(self.row_lock_column(job))
        )
    }

    /// A column on which UPDATE lets the role take row locks (what `FOR UPDATE` needs), named in
    /// the grant idemctl suggests: the state column, else the lock time, else the key.
    fn lock_column(&self) -> &str {
        let p = &self.profile;
        match &p.in_flight {
            profile::InFlight::State { column, .. } => column,
            profile::InFlight::Predicate { .. }
            | profile::InFlight::Mapped { .. }
            | profile::InFlight::None => p.locked_at.as_deref().unwrap_or(&p.key),
        }
    }

    /// The columns reclaim --action release writes.
    pub fn release_columns(&self) -> Vec<String> {
        self.profile.locked_at.clone().into_iter().collect()
    }
}

/// The profile `--profile` forces, else the config file's mapping, else the built-in one the
/// columns match; none is a usage error naming what each profile missed.
fn choose_profile(display: &str, columns: &[Column], choice: &ProfileChoice) -> Result<Profile> {
    if let Some(name) = &choice.forced {
        let by = if choice.forced_by.is_empty() {
            "--profile"
        } else {
            &choice.forced_by
        };
        if let Some(m) = choice.mapping.as_ref().filter(|m| &m.name == name) {
            // The config file said why it chose its mapping.
            return Ok(m.clone());
        }
        let mut p = Profile::builtin(name).ok_or_else(|| {
            refuse(
                Exit::Usage,
                Refusal::UnknownProfile {
                    name: name.clone(),
                    by: by.to_owned(),
                    builtin: profile::BUILTIN,
                },
            )
        })?;
        // A forced profile whose columns the table lacks would have every later finding and fix
        // name columns that do not exist: refuse, naming them all.
        let missing: Vec<String> = p
            .column_problems(columns)
            .into_iter()
            .filter(|problem| problem.found.is_none())
            .map(|problem| problem.column)
            .collect();
        if !missing.is_empty() {
            return Err(refuse(
                Exit::Usage,
                Refusal::ForcedProfileLacks {
                    table: display.to_owned(),
                    missing,
                    profile: name.clone(),
                    by: by.to_owned(),
                },
            ));
        }
        p.matched_because = Some(MatchReason::ChosenBy(by.to_owned()));
        return Ok(p);
    }
    if let Some(m) = &choice.mapping {
        return Ok(m.clone());
    }
    match profile::detect(columns) {
        Detected::Found(p) => Ok(*p),
        Detected::None(misses) => Err(refuse(
            Exit::Usage,
            Refusal::NoProfile {
                table: display.to_owned(),
                misses,
            },
        )),
    }
}

/// Ask the server whether it knows `zone` (cheaply: converting its clock to it), before anything
/// reads or changes a row; an unknown zone is a usage error naming where it was given.
async fn check_time_zone(client: &Session, zone: &str, from: &str) -> Result<()> {
    match client
        .query_one(include_str!("../../sql/time_zone_check.sql"), &[p(&zone)])
        .await
    {
        Ok(_) => Ok(()),
        Err(e)
            if e.chain()
                .filter_map(|c| c.downcast_ref::<tokio_postgres::Error>())
                .any(|pg| {
                    pg.code() == Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE)
                }) =>
        {
            Err(refuse(
                Exit::Usage,
                Refusal::UnknownZone {
                    zone: zone.to_owned(),
                    from: from.to_owned(),
                },
            ))
        }
        Err(e) => Err(e.context(Step::CheckTimeZone)),
    }
}

async fn read_partitioning(client: &Session, oid: i64) -> Result<Option<Partitioning>> {
    let row = client
        .query_opt(include_str!("../../sql/table_partitioning.sql"), &[p(&oid)])
        .await
        .context(Step::ReadPartitioning)?;
    Ok(row.map(|r| {
        let strategy = match r.get::<_, String>("strategy").as_str() {
            "r" => "range",
            "l" => "list",
            "h" => "hash",
            _ => "unknown",
        };
        let columns: Vec<Option<String>> = r.get("columns");
        Partitioning {
            strategy: strategy.to_owned(),
            columns: columns
                .into_iter()
                .map(|c| c.unwrap_or_else(|| "(expression)".to_owned()))
                .collect(),
            definition: r.get("definition"),
        }
    }))
}

async fn read_columns(client: &Session, oid: i64) -> Result<Vec<Column>> {
    let rows = client
        .query(include_str!("../../sql/table_columns.sql"), &[p(&oid)])
        .await
        .context(Step::ReadColumns)?;
    Ok(rows
        .iter()
        .map(|r| Column {
            name: r.get("name"),
            sql_type: r.get("type"),
            base_type: r.get("base_type"),
            serial: r.get("serial"),
            enum_labels: r.get("enum_labels"),
            not_null: r.get("not_null"),
        })
        .collect())
}

async fn read_indexes(client: &Session, oid: i64) -> Result<Vec<Index>> {
    let rows = client
        .query(include_str!("../../sql/table_indexes.sql"), &[p(&oid)])
        .await
        .context(Step::ReadIndexes)?;
    Ok(rows
        .iter()
        .map(|r| Index {
            name: r.get("name"),
            is_unique: r.get("is_unique"),
            is_primary: r.get("is_primary"),
            is_valid: r.get("is_valid"),
            predicate: r.get("predicate"),
            nulls_not_distinct: r.get("nulls_not_distinct"),
            columns: r.get("columns"),
            attnames: r.get("attnames"),
        })
        .collect())
}

impl Privileges {
    /// The function evict's durable points call, as a GRANT names it.
    pub fn confirm_function_name(&self) -> String {
        self.confirm_function
            .clone()
            .unwrap_or_else(|| CONFIRM_FUNCTION.into())
    }

    /// Fail before any change when the role may not write the WAL record that confirms deletes
    /// durable (evict's durable points, and the flush before --vacuum).
    pub fn require_durable_points(&self, command: &str) -> Result<()> {
        if self.confirm {
            return Ok(());
        }
        Err(refuse(
            Exit::PermissionDenied,
            Refusal::DurablePoint {
                role: self.role.clone(),
                function: self.confirm_function_name(),
                command: command.to_owned(),
            },
        ))
    }

    /// [`Privileges::require`] with the grants `job` needs on this table.
    pub fn require_for(&self, table: &KeyTable, command: &str, job: Job) -> Result<()> {
        let needs = table.privilege_needs(self, job);
        let needs: Vec<(&str, bool)> = needs.iter().map(|(g, h)| (g.as_str(), *h)).collect();
        self.require(table, command, &needs)
    }

    /// Fail before any change, with the permission-denied exit code, when the role lacks a grant
    /// `command` needs; the message names the grant and the statement that gives it.
    /// `needs` lists (privilege as written in a GRANT, whether the role has it).
    fn require(&self, table: &KeyTable, command: &str, needs: &[(&str, bool)]) -> Result<()> {
        let missing: Vec<&str> = needs
            .iter()
            .filter(|(_, has)| !has)
            .map(|(p, _)| *p)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(refuse(
            Exit::PermissionDenied,
            Refusal::Grant {
                role: self.role.clone(),
                missing: missing.iter().map(|m| (*m).to_owned()).collect(),
                table: table.qualified_name(),
                quoted: table.quoted.clone(),
                command: command.to_owned(),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_ident_writes_controls_and_overrides_as_unicode_escapes() {
        assert_eq!(quote_ident("keys"), "\"keys\"");
        assert_eq!(quote_ident("a\"b\\c"), "\"a\"\"b\\c\"");
        assert_eq!(
            quote_ident("k\"\\\n\u{1b}\u{202e}x"),
            "U&\"k\"\"\\\\\\000A\\001B\\202Ex\""
        );
    }

    fn index(cols: &[&str], unique: bool, pred: Option<&str>) -> Index {
        Index {
            name: "i".into(),
            is_unique: unique,
            is_primary: false,
            nulls_not_distinct: false,
            is_valid: true,
            predicate: pred.map(str::to_owned),
            columns: cols.iter().map(|c| (*c).to_owned()).collect(),
            attnames: cols
                .iter()
                .map(|c| (!c.contains('(')).then(|| (*c).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn quoting_doubles_quotes() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn recognises_the_optional_stuck_index() {
        let i = index(
            &["COALESCE(locked_at, created_at)"],
            false,
            Some("state = 'in_progress'::text"),
        );
        let p = Profile::storage();
        let (held, fl) = (p.render("{held_since}", "t"), p.render("{in_flight}", "t"));
        assert!(i.serves_stuck_lookup(&held, &fl));
        assert!(!index(&["locked_at"], false, None).serves_stuck_lookup(&held, &fl));
    }

    #[test]
    fn identity_accepts_both_table_shapes() {
        assert!(
            index(&["api_key_id", "key"], true, None).identifies_rows(&[], &["api_key_id", "key"])
        );
        assert!(index(&["key"], true, None).identifies_rows(&[], &["api_key_id", "key"]));
        assert!(
            !index(&["api_key_id", "key"], false, None)
                .identifies_rows(&[], &["api_key_id", "key"])
        );
        assert!(
            !index(&["api_key_id", "key", "expires_at"], true, None)
                .identifies_rows(&[], &["api_key_id", "key"])
        );
    }

    #[test]
    fn identity_of_several_scope_columns_is_any_unique_index_within_it() {
        let identity = ["request_type", "client_id", "idempotency_key"];
        let pk = index(
            &["idempotency_key", "request_type", "client_id"],
            true,
            None,
        );
        assert!(pk.identifies_rows(&[], &identity));
        assert!(pk.looks_up(&identity));
        // Narrower than the identity, the key included: the identity is unique too.
        assert!(
            index(&["client_id", "idempotency_key"], true, None).identifies_rows(&[], &identity)
        );
        // Without the key, or with a column outside the identity: not.
        assert!(!index(&["request_type", "client_id"], true, None).identifies_rows(&[], &identity));
        assert!(
            !index(&["idempotency_key", "client_id", "created_at"], true, None)
                .identifies_rows(&[], &identity)
        );
        // A lookup index leads with the identity's columns in any order, or with the key.
        assert!(
            index(
                &["client_id", "request_type", "idempotency_key"],
                false,
                None
            )
            .looks_up(&identity)
        );
        assert!(!index(&["client_id", "idempotency_key"], false, None).looks_up(&identity));
    }

    #[test]
    fn identity_on_a_partitioned_table_includes_the_partition_key() {
        let by = |c: &str| vec![c.to_owned()];
        let pk = index(&["api_key_id", "key", "expires_at"], true, None);
        assert!(pk.identifies_rows(&by("expires_at"), &["api_key_id", "key"]));
        assert!(!pk.identifies_rows(&by("created_at"), &["api_key_id", "key"]));
        assert!(
            index(&["api_key_id", "key", "created_at"], true, None)
                .identifies_rows(&by("created_at"), &["api_key_id", "key"])
        );
        assert!(
            index(&["key", "created_at"], true, None)
                .identifies_rows(&by("created_at"), &["api_key_id", "key"])
        );
        assert!(
            !index(&["api_key_id", "created_at"], true, None)
                .identifies_rows(&by("created_at"), &["api_key_id", "key"])
        );
        // Partitioned by the tenant (as a Citus-style layout would be): the plain identity suffices.
        assert!(
            index(&["api_key_id", "key"], true, None)
                .identifies_rows(&by("api_key_id"), &["api_key_id", "key"])
        );
        assert!(
            !index(
                &["api_key_id", "key", "expires_at", "created_at"],
                true,
                None
            )
            .identifies_rows(&by("expires_at"), &["api_key_id", "key"])
        );
    }
}

//! The key table as found in the catalog: which relation `--table` names, its columns, the indexes
//! idemctl can use, and what the current role may do with it.

use crate::db::{Session, p};
use anyhow::{Context as _, Result};

use crate::cli::TableName;
use crate::exit::{Exit, fail};

/// A column idemctl reads, with the type the reference table gives it.
pub struct ExpectedColumn {
    pub name: &'static str,
    pub sql_type: &'static str,
    /// Types that work as well (e.g. `json` for the body, `varchar` for text).
    pub also: &'static [&'static str],
}

/// Every column idemctl touches. Only this module and the SQL files know column names.
pub const EXPECTED_COLUMNS: &[ExpectedColumn] = &[
    col("key", "text", &["character varying", "uuid"]),
    col(
        "api_key_id",
        "text",
        &["character varying", "uuid", "bigint", "integer"],
    ),
    col("request_method", "text", &["character varying"]),
    col("request_path", "text", &["character varying"]),
    col(
        "request_fingerprint",
        "bytea",
        &["text", "character varying"],
    ),
    col("state", "text", &["character varying"]),
    col("response_status", "integer", &["smallint"]),
    col("response_body", "jsonb", &["json"]),
    col("locked_at", "timestamp with time zone", &[]),
    col("created_at", "timestamp with time zone", &[]),
    col("expires_at", "timestamp with time zone", &[]),
];

const fn col(
    name: &'static str,
    sql_type: &'static str,
    also: &'static [&'static str],
) -> ExpectedColumn {
    ExpectedColumn {
        name,
        sql_type,
        also,
    }
}

/// One column as the catalog describes it.
#[derive(Clone, Debug)]
pub struct Column {
    pub name: String,
    pub sql_type: String,
}

/// One index as the catalog describes it.
#[derive(Clone, Debug)]
pub struct Index {
    pub name: String,
    pub is_unique: bool,
    pub is_valid: bool,
    pub predicate: Option<String>,
    pub columns: Vec<String>,
}

impl Index {
    fn leads_with(&self, column: &str) -> bool {
        self.is_valid
            && self.predicate.is_none()
            && self.columns.first().is_some_and(|c| c == column)
    }

    /// A unique index over exactly (api_key_id, key), in either order, or over `key` alone; on a
    /// partitioned table also one that adds the partition key's columns, in any position (PostgreSQL
    /// requires a unique index of a partitioned table to include them).
    fn identifies_rows(&self, partition_key: &[String]) -> bool {
        if !(self.is_unique && self.is_valid && self.predicate.is_none()) {
            return false;
        }
        let mut rest: Vec<&str> = self.columns.iter().map(String::as_str).collect();
        for column in partition_key {
            if !["api_key_id", "key"].contains(&column.as_str()) {
                match rest.iter().position(|c| c == column) {
                    Some(at) => {
                        rest.remove(at);
                    }
                    None => return false,
                }
            }
        }
        matches!(
            rest.as_slice(),
            ["api_key_id", "key"] | ["key", "api_key_id"] | ["key"]
        )
    }

    /// The optional partial index that makes stuck in_progress keys cheap to find.
    fn serves_stuck_lookup(&self) -> bool {
        let pred = self.predicate.as_deref().unwrap_or("");
        self.is_valid
            && pred.contains("state")
            && pred.contains("'in_progress'")
            && self
                .columns
                .first()
                .is_some_and(|c| c.replace(' ', "") == "COALESCE(locked_at,created_at)")
    }
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

/// What the current role may do with the table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Privileges {
    pub role: String,
    pub select: bool,
    pub delete: bool,
    pub update: bool,
    pub lock_rows: bool,
    /// May UPDATE state, response_status and response_body (what reclaim --action fail writes).
    pub update_response: bool,
    /// Owns the table (or is a member of its owner): needed to detach partitions.
    pub owner: bool,
}

/// How a partitioned key table is partitioned.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Partitioning {
    /// `range`, `list` or `hash`.
    pub strategy: String,
    /// The key's columns in order; an expression in the key shows as `(expression)`.
    pub columns: Vec<String>,
    /// The key as PostgreSQL prints it, e.g. `RANGE (expires_at)`.
    pub definition: String,
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
}

/// Quote an identifier the way PostgreSQL's `quote_ident` always would.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

impl KeyTable {
    /// Find the table `--table` names (following search_path when unqualified) and read its
    /// columns and indexes. A missing table is a one-line error with exit code "not found".
    pub async fn resolve(client: &Session, name: &TableName) -> Result<KeyTable> {
        let row = client
            .query_opt(
                include_str!("../../sql/resolve_table.sql"),
                &[p(&name.schema), p(&name.name)],
            )
            .await
            .context("failed to look up the key table in the catalog")?;
        let Some(row) = row else {
            return Err(fail(
                Exit::NotFound,
                format!(
                    "table {} does not exist (or is not visible on search_path); check --table, or create it from sql/schema.sql",
                    crate::output::sanitize(&name.to_string())
                ),
            ));
        };
        let oid: i64 = row.get("oid");
        let schema: String = row.get("schema");
        let relname: String = row.get("name");
        let kind: String = row.get("kind");
        let columns = read_columns(client, oid).await?;
        let indexes = read_indexes(client, oid).await?;
        let partitioning = if kind == "p" {
            read_partitioning(client, oid).await?
        } else {
            None
        };
        Ok(KeyTable {
            oid,
            quoted: format!("{}.{}", quote_ident(&schema), quote_ident(&relname)),
            schema,
            name: relname,
            partitioned: kind == "p",
            partitioning,
            columns,
            indexes,
        })
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
            .any(|c| c.name == key.column() && c.sql_type == "timestamp with time zone");
        typed.then_some(key)
    }

    /// Whether the identity index makes (api_key_id, key) unique across the whole table. On a
    /// partitioned table whose key is another column, the unique index includes that column, so
    /// PostgreSQL enforces uniqueness only per partition-key value.
    pub fn identity_is_global(&self) -> bool {
        self.identity_index()
            .is_some_and(|i| i.columns.iter().all(|c| c == "api_key_id" || c == "key"))
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

    /// The table's name for messages: `schema.name`, control characters escaped.
    pub fn display(&self) -> String {
        crate::output::sanitize(&format!("{}.{}", self.schema, self.name))
    }

    /// Columns that are missing or of an unexpected type, as (expected, found type) pairs.
    pub fn column_problems(&self) -> Vec<(&'static ExpectedColumn, Option<String>)> {
        EXPECTED_COLUMNS
            .iter()
            .filter_map(
                |exp| match self.columns.iter().find(|c| c.name == exp.name) {
                    None => Some((exp, None)),
                    Some(c)
                        if c.sql_type == exp.sql_type
                            || exp.also.contains(&c.sql_type.as_str()) =>
                    {
                        None
                    }
                    Some(c) => Some((exp, Some(c.sql_type.clone()))),
                },
            )
            .collect()
    }

    /// Fail with a one-line, actionable error when a column idemctl needs is missing or mistyped.
    pub fn require_columns(&self) -> Result<()> {
        let problems = self.column_problems();
        let Some((exp, found)) = problems.first() else {
            return Ok(());
        };
        let what = match found {
            None => format!("has no column {}", exp.name),
            Some(t) => format!(
                "column {} is {}, expected {}",
                exp.name,
                crate::output::sanitize(t),
                exp.sql_type
            ),
        };
        Err(fail(
            Exit::Usage,
            format!(
                "table {} {what}; it does not look like an idempotency-key table (run `idemctl check` for the full list)",
                self.display()
            ),
        ))
    }

    /// The index that orders rows by `expires_at`, if any.
    pub fn expiry_index(&self) -> Option<&Index> {
        self.indexes.iter().find(|i| i.leads_with("expires_at"))
    }

    /// Fail unless the expiry index exists: without it nothing idemctl does with expiry is bounded.
    pub fn require_expiry_index(&self) -> Result<&Index> {
        self.expiry_index().ok_or_else(|| {
            fail(
                Exit::Usage,
                format!(
                    "table {} has no valid index on expires_at, so expired keys cannot be found without reading the whole table; create it with: {}",
                    self.display(),
                    self.expiry_index_fix()
                ),
            )
        })
    }

    /// The statement that creates the expiry index.
    pub fn expiry_index_fix(&self) -> String {
        self.create_index(false, "expiry", "(expires_at)")
    }

    /// The unique index that identifies a row, if any.
    pub fn identity_index(&self) -> Option<&Index> {
        let key = self.partition_key();
        self.indexes.iter().find(|i| i.identifies_rows(key))
    }

    /// The statement that creates the identity index (with the partition key's columns added on a
    /// partitioned table, which PostgreSQL requires of a unique index there).
    pub fn identity_index_fix(&self) -> String {
        let mut columns = vec!["api_key_id".to_owned(), "key".to_owned()];
        for c in self.partition_key() {
            if !columns.contains(c) {
                columns.push(quote_ident(c));
            }
        }
        self.create_index(true, "scope", &format!("({})", columns.join(", ")))
    }

    /// An index on (api_key_id, key) usable to look up one tenant's key.
    pub fn has_tenant_key_index(&self) -> bool {
        self.indexes.iter().any(|i| {
            i.is_valid
                && i.predicate.is_none()
                && i.columns.len() >= 2
                && i.columns[0] == "api_key_id"
                && i.columns[1] == "key"
        }) || self.indexes.iter().any(|i| i.leads_with("key"))
    }

    /// How a key can be found without its tenant.
    pub fn key_lookup(&self) -> KeyLookup {
        if self.indexes.iter().any(|i| i.leads_with("key")) {
            KeyLookup::ByKey
        } else if self.indexes.iter().any(|i| i.leads_with("api_key_id"))
            && self.has_tenant_key_index()
        {
            KeyLookup::SkipScan
        } else {
            KeyLookup::Unindexed
        }
    }

    /// The optional partial index on in_progress rows, if present.
    pub fn stuck_index(&self) -> Option<&Index> {
        self.indexes.iter().find(|i| i.serves_stuck_lookup())
    }

    /// The statement that creates the optional in_progress index.
    pub fn stuck_index_fix(&self) -> String {
        self.create_index(
            false,
            "in_progress",
            "((coalesce(locked_at, created_at))) WHERE state = 'in_progress'",
        )
    }

    /// Substitute the quoted table name into a statement from `sql/`.
    pub fn sql(&self, template: &str) -> String {
        template.replace("{table}", &self.quoted)
    }

    /// What the current role may do with this table.
    pub async fn privileges(&self, client: &Session) -> Result<Privileges> {
        let row = client
            .query_one(
                include_str!("../../sql/table_privileges.sql"),
                &[p(&self.oid)],
            )
            .await
            .context("failed to read the role's privileges")?;
        Ok(Privileges {
            role: row.get("role"),
            select: row.get("can_select"),
            delete: row.get("can_delete"),
            update: row.get("can_update"),
            lock_rows: row.get("can_lock_rows"),
            update_response: row.get("can_update_response"),
            owner: row.get("is_owner"),
        })
    }
}

async fn read_partitioning(client: &Session, oid: i64) -> Result<Option<Partitioning>> {
    let row = client
        .query_opt(include_str!("../../sql/table_partitioning.sql"), &[p(&oid)])
        .await
        .context("failed to read how the key table is partitioned")?;
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
        .context("failed to read the key table's columns")?;
    Ok(rows
        .iter()
        .map(|r| Column {
            name: r.get("name"),
            sql_type: r.get("type"),
        })
        .collect())
}

async fn read_indexes(client: &Session, oid: i64) -> Result<Vec<Index>> {
    let rows = client
        .query(include_str!("../../sql/table_indexes.sql"), &[p(&oid)])
        .await
        .context("failed to read the key table's indexes")?;
    Ok(rows
        .iter()
        .map(|r| Index {
            name: r.get("name"),
            is_unique: r.get("is_unique"),
            is_valid: r.get("is_valid"),
            predicate: r.get("predicate"),
            columns: r.get("columns"),
        })
        .collect())
}

impl Privileges {
    /// Fail before any change, with the permission-denied exit code, when the role lacks a grant
    /// `command` needs; the message names the grant and the statement that gives it.
    /// `needs` lists (privilege as written in a GRANT, whether the role has it).
    pub fn require(&self, table: &KeyTable, command: &str, needs: &[(&str, bool)]) -> Result<()> {
        let missing: Vec<&str> = needs
            .iter()
            .filter(|(_, has)| !has)
            .map(|(p, _)| *p)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(fail(
            Exit::PermissionDenied,
            format!(
                "permission denied: role {} lacks {} on {}, which {command} needs; grant it with: GRANT {} ON {} TO {};",
                crate::output::sanitize(&self.role),
                missing.join(", "),
                table.display(),
                missing.join(", "),
                table.quoted,
                quote_ident(&self.role)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(cols: &[&str], unique: bool, pred: Option<&str>) -> Index {
        Index {
            name: "i".into(),
            is_unique: unique,
            is_valid: true,
            predicate: pred.map(str::to_owned),
            columns: cols.iter().map(|c| (*c).to_owned()).collect(),
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
        assert!(i.serves_stuck_lookup());
        assert!(!index(&["locked_at"], false, None).serves_stuck_lookup());
    }

    #[test]
    fn identity_accepts_both_table_shapes() {
        assert!(index(&["api_key_id", "key"], true, None).identifies_rows(&[]));
        assert!(index(&["key"], true, None).identifies_rows(&[]));
        assert!(!index(&["api_key_id", "key"], false, None).identifies_rows(&[]));
        assert!(!index(&["api_key_id", "key", "expires_at"], true, None).identifies_rows(&[]));
    }

    #[test]
    fn identity_on_a_partitioned_table_includes_the_partition_key() {
        let by = |c: &str| vec![c.to_owned()];
        let pk = index(&["api_key_id", "key", "expires_at"], true, None);
        assert!(pk.identifies_rows(&by("expires_at")));
        assert!(!pk.identifies_rows(&by("created_at")));
        assert!(
            index(&["api_key_id", "key", "created_at"], true, None)
                .identifies_rows(&by("created_at"))
        );
        assert!(index(&["key", "created_at"], true, None).identifies_rows(&by("created_at")));
        assert!(
            !index(&["api_key_id", "created_at"], true, None).identifies_rows(&by("created_at"))
        );
        // Partitioned by the tenant (as a Citus-style layout would be): the plain identity suffices.
        assert!(index(&["api_key_id", "key"], true, None).identifies_rows(&by("api_key_id")));
        assert!(
            !index(
                &["api_key_id", "key", "expires_at", "created_at"],
                true,
                None
            )
            .identifies_rows(&by("expires_at"))
        );
    }
}

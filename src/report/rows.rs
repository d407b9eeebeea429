//! The rows the database layer reads that reports carry as they are: counts that may stop at a
//! cap, keys and their records, foreign keys, the Citus layout, replicas, reclaim's filter and the
//! recent TTL. What the database layer does with them stays in `src/db/`; the output layer words
//! them from here.

use crate::report::timestamp::Timestamp;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// A count that stops at a cap.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Capped {
    /// The count, or the cap when `at_least` is set.
    pub count: i64,
    /// True when there are more than `count` rows.
    pub at_least: bool,
}

impl std::fmt::Display for Capped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.at_least {
            write!(f, "at least {}", self.count)
        } else {
            write!(f, "{}", self.count)
        }
    }
}

impl Capped {
    /// Nothing counted.
    pub(crate) const ZERO: Capped = Capped {
        count: 0,
        at_least: false,
    };

    /// Two counts of one figure over different rows (placements, shards, batches) added up: "at
    /// least" when either is.
    pub(crate) fn plus(self, other: Capped) -> Capped {
        Capped {
            count: self.count.saturating_add(other.count),
            at_least: self.at_least || other.at_least,
        }
    }
}

/// A key's scope: each scope column with its value (None for NULL), in the mapping's order. In
/// JSON an object of the columns' values (`{"request_type": "payment", "client_id": "c-42"}`),
/// beside `api_key_id`, which keeps the scope as one text (a text array for several columns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scope(pub Vec<(String, Option<String>)>);

impl Serialize for Scope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (column, value) in &self.0 {
            map.serialize_entry(column, value)?;
        }
        map.end()
    }
}

/// A key picked out by a stats query.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KeyRef {
    /// None on a table without a tenant column (null in JSON).
    pub api_key_id: Option<String>,
    /// Each scope column's value, by column (null in JSON on a table without a scope).
    pub scope: Option<Scope>,
    /// None where the key column allows NULL and holds it (null in JSON).
    pub key: Option<String>,
    pub expires_at: Timestamp,
    /// Age (oldest live key) or wait since expiry (eviction lag), in seconds.
    pub seconds: f64,
}

/// A foreign key that references the key table: deleting a key runs its ON DELETE action.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReferencingKey {
    pub name: String,
    pub referencing_table: String,
    /// The referencing table, schema-qualified and quoted (for the statements evict generates and
    /// the fixes check prints).
    #[serde(skip)]
    pub referencing_quoted: String,
    pub columns: Vec<String>,
    /// The key table's columns they reference, in the same order.
    #[serde(skip)]
    pub referenced: Vec<String>,
    /// `NO ACTION`, `RESTRICT`, `CASCADE`, `SET NULL` or `SET DEFAULT`.
    pub on_delete: String,
    /// An index on the referencing table leads with the referencing columns (a partial one only
    /// when `col IS NOT NULL` implies its predicate).
    pub indexed: bool,
    /// This role may read the referencing table, and lock its rows.
    #[serde(skip)]
    pub may_read: bool,
    #[serde(skip)]
    pub may_lock: bool,
}

/// The cluster (its system identifier) and database a session is connected to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DatabaseIdentity {
    pub system_identifier: String,
    pub name: String,
}

/// How Citus manages the key table (the output layer describes it for people:
/// `Layout::describe`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub(crate) enum Layout {
    /// Hash-distributed by `column` over `shards` shards.
    Distributed { column: String, shards: i64 },
    /// A reference table: one shard with a copy on every node.
    Reference,
    /// A table of a distributed schema (schema-based sharding): one shard on one node.
    SingleShard,
    /// A Citus local table: on the coordinator, known to Citus.
    CitusLocal,
}

/// One shard and the node that holds it.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    pub shard_id: i64,
    pub node: String,
    pub port: u16,
}

/// A foreign key with ON DELETE NO ACTION / RESTRICT from a distributed table to a reference key
/// table (sql/citus_distributed_referencing.sql).
#[derive(Clone, Debug)]
pub(crate) struct DistributedReference {
    pub name: String,
    pub referencing_table: String,
    pub on_delete: String,
}

/// A key the dry run lists.
#[derive(Debug, Serialize)]
pub(crate) struct SampleKey {
    /// None on a table without a tenant column (null in JSON).
    pub api_key_id: Option<String>,
    /// Each scope column's value, by column (null in JSON on a table without a scope).
    pub scope: Option<Scope>,
    /// None where the key column allows NULL and holds it (null in JSON).
    pub key: Option<String>,
    pub expires_at: Timestamp,
    /// None where the column allows NULL and holds it (Laravel's `timestamps()`).
    pub created_at: Option<Timestamp>,
}

/// One physical standby's replay position, as last reported to the primary.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Replica {
    #[serde(skip)]
    pub pid: i32,
    /// application_name, else the client address, else the walsender's pid.
    pub name: String,
    pub state: String,
    /// The replay LSN as a byte offset (compared between readings to see whether replay moves).
    #[serde(skip)]
    pub replay_position: i64,
    /// WAL flushed on the primary that the standby has not replayed yet.
    pub behind_bytes: i64,
    /// PostgreSQL's replay_lag: NULL after an idle spell, frozen while replay is stuck.
    pub replay_lag_seconds: Option<f64>,
}

/// A stored response body, as its column holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredBody {
    /// A json or jsonb column: JSON text as the server prints it (numbers never parsed).
    Json(String),
    /// A text or varchar column.
    Text(String),
    /// A bytea column: the bytes exactly.
    Bytes(Vec<u8>),
}

impl StoredBody {
    /// The body as text when it is text, JSON, or bytes that are valid UTF-8.
    pub(crate) fn as_text(&self) -> Option<&str> {
        match self {
            StoredBody::Json(t) | StoredBody::Text(t) => Some(t),
            StoredBody::Bytes(b) => std::str::from_utf8(b).ok(),
        }
    }

    /// Whether the body's text parses as JSON.
    pub(crate) fn is_json(&self) -> bool {
        match self {
            StoredBody::Json(_) => true,
            _ => self
                .as_text()
                .is_some_and(|t| serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok()),
        }
    }

    /// How `-o json` carries it: `json` (spliced as is), `text` (a string), `utf8` (bytea that is
    /// valid UTF-8, as a string) or `hex` (other bytea, as lowercase hex).
    pub(crate) fn encoding(&self) -> &'static str {
        match self {
            StoredBody::Json(_) => "json",
            StoredBody::Text(_) => "text",
            StoredBody::Bytes(b) if std::str::from_utf8(b).is_ok() => "utf8",
            StoredBody::Bytes(_) => "hex",
        }
    }

    /// The column's SQL type, in words.
    pub(crate) fn column_kind(&self) -> &'static str {
        match self {
            StoredBody::Json(_) => "json",
            StoredBody::Text(_) => "text",
            StoredBody::Bytes(_) => "bytea",
        }
    }
}

/// One column of the stored row (its value None for NULL).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RowColumn {
    pub column: String,
    /// The role the profile gives it (None: a column the profile does not map).
    pub role: Option<&'static str>,
    pub value: Option<RowValue>,
}

/// A value of the stored row: an instant (a `timestamptz` column, kept in UTC like every other
/// time of a record, whatever the session's zone), or any other value as the server prints it.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum RowValue {
    Instant(#[serde(with = "crate::report::timestamp")] OffsetDateTime),
    Text(String),
}

/// A key's stored record.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KeyRecord {
    /// None on a table without a tenant column (null in JSON).
    pub api_key_id: Option<String>,
    /// Each scope column's value, by column (null in JSON on a table without a scope).
    pub scope: Option<Scope>,
    pub key: String,
    /// None on a table that does not store the request method.
    pub request_method: Option<String>,
    pub request_path: Option<String>,
    /// The request fingerprint (lowercase hex for a bytea column; None when the table stores none).
    pub request_fingerprint: Option<StoredFingerprint>,
    pub state: String,
    pub response_status: Option<i32>,
    /// The stored body, exact (JSON text as the server prints it; bytes as stored).
    #[serde(skip)]
    pub response_body: Option<StoredBody>,
    /// The column the body is stored in; None (null in JSON) on a table with no response column,
    /// where a missing body says nothing about the request.
    pub response_column: Option<String>,
    pub locked_at: Option<Timestamp>,
    /// None where the column allows NULL and holds it (Laravel's `timestamps()`).
    pub created_at: Option<Timestamp>,
    /// None on a table whose keys expire a TTL after creation when no TTL was given, or when the
    /// expiry column (created_at on such a table) holds NULL.
    pub expires_at: Option<Timestamp>,
    /// The column whose NULL leaves the key without an expiry (evict never removes it), when the
    /// expiry is unknown for that reason rather than for want of a TTL.
    #[serde(skip)]
    pub null_expiry: Option<String>,
    /// The zone the table's `timestamp without time zone` columns were read in (None for
    /// timestamptz columns); every time above is that local time turned into an instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Every column of the row, in the table's order, mapped ones labelled by role.
    pub row: Vec<RowColumn>,
    /// The database clock when the record was read; every age is relative to it.
    #[serde(with = "crate::report::timestamp")]
    pub db_now: OffsetDateTime,
    /// in_progress for longer than the stuck-after cutoff.
    pub stuck: bool,
    /// A transaction that is still running holds the row (locked it, or is changing it): a live
    /// request owns the key, and reclaim skips it.
    pub held: bool,
    /// The row's xmax and the snapshot's xmax, from which `held` is decided.
    #[serde(skip)]
    pub xmax: i64,
    #[serde(skip)]
    pub snapshot_xmax: i64,
}

/// The stored request fingerprint: a raw digest (bytea) or text (a hex digest, as a Python
/// handler's `hexdigest()` writes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredFingerprint {
    Bytes(Vec<u8>),
    Text(String),
}

impl Serialize for StoredFingerprint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // In JSON: lowercase hex for bytes, the text as stored.
        match self {
            StoredFingerprint::Bytes(b) => s.serialize_str(&crate::fingerprint::hex(b)),
            StoredFingerprint::Text(t) => s.serialize_str(t),
        }
    }
}

/// Which stuck keys a run may take besides their age: one tenant, one route (path, method). Every
/// reclaim statement binds all three as its last parameters, NULL for a filter not given, so a
/// filter only narrows the rows the statement walks through the in_progress index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Filter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// How long recent keys live (expires_at − created_at).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RecentTtl {
    /// "sample": measured on the keys sampled; "ttl": every key lives --ttl (a table without an
    /// expiry column).
    pub source: &'static str,
    /// Keys sampled (0 for "ttl").
    pub keys: i64,
    pub min_seconds: f64,
    pub p10_seconds: f64,
    pub p50_seconds: f64,
    pub p90_seconds: f64,
    pub max_seconds: f64,
    pub newest_created_at: Option<Timestamp>,
    /// Keys that live less than the limit asked about (check --min-ttl; 0 without it).
    pub keys_below: i64,
    /// The sampled keys counted by TTL, one bucket per bound of the histogram and one past the
    /// last (empty for "ttl").
    pub histogram: Vec<TtlBucket>,
}

/// Keys sampled whose TTL is under `under_seconds` (and at least the bucket before's bound); the
/// last bucket has no upper bound.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TtlBucket {
    pub under_seconds: Option<f64>,
    pub keys: i64,
}

/// Catalog sizes and estimates.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sizes {
    pub estimated_rows: i64,
    pub heap_bytes: i64,
    pub toast_bytes: i64,
    pub index_bytes: i64,
    pub total_bytes: i64,
    pub never_analyzed: bool,
}

/// Vacuum and analyze bookkeeping.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Vacuum {
    pub live_tuples: i64,
    pub dead_tuples: i64,
    /// Rows inserted into the table (every leaf partition) since the server's statistics were
    /// reset: a counter, whose change between two reads is the insert rate.
    pub inserted_rows: i64,
    /// Rows deleted from it since then (evict's deletions among them): the eviction rate's counter.
    pub deleted_rows: i64,
    #[serde(with = "crate::report::timestamp::option")]
    pub last_vacuum: Option<OffsetDateTime>,
    #[serde(with = "crate::report::timestamp::option")]
    pub last_analyze: Option<OffsetDateTime>,
}

/// in_progress keys held longer than the cutoff.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stuck {
    pub count: Capped,
    pub oldest_since: Option<Timestamp>,
}

/// One leaf partition as the catalog describes it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Partition {
    /// `schema.name` as the catalog holds it (renderers escape it).
    pub name: String,
    /// `"schema"."name"`, safe to splice into a statement.
    #[serde(skip)]
    pub quoted: String,
    /// The partition's bound as PostgreSQL prints it (`FOR VALUES FROM (...) TO (...)`, `DEFAULT`).
    pub bound: String,
    pub is_default: bool,
    /// Attached to the key table itself rather than to a sub-partitioned child.
    #[serde(skip)]
    pub direct: bool,
    /// `pg_class.reltuples` (0 when never analyzed).
    pub estimated_rows: i64,
    pub never_analyzed: bool,
    pub total_bytes: i64,
    /// The current role may drop it.
    #[serde(skip)]
    pub owned: bool,
    /// Lower bound (inclusive) on a timestamptz range key; None for MINVALUE, other keys, DEFAULT.
    pub range_from: Option<Timestamp>,
    /// Upper bound (exclusive) on a timestamptz range key; None for MAXVALUE, other keys, DEFAULT.
    pub range_to: Option<Timestamp>,
    /// The database clock when the list was read.
    #[serde(skip)]
    pub db_now: OffsetDateTime,
}

/// How a partitioned key table is partitioned.
#[derive(Clone, Debug, Serialize)]
pub struct Partitioning {
    /// `range`, `list` or `hash`.
    pub strategy: String,
    /// The key's columns in order; an expression in the key shows as `(expression)`.
    pub columns: Vec<String>,
    /// The key as PostgreSQL prints it, e.g. `RANGE (expires_at)`.
    pub definition: String,
}

/// Autovacuum's view of one relation (the table, or one leaf partition).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AutovacuumRel {
    /// Schema-qualified, quoted as in SQL.
    pub relation: String,
    pub reltuples: f64,
    pub live_tuples: i64,
    pub dead_tuples: i64,
    /// autovacuum_vacuum_threshold and autovacuum_vacuum_scale_factor in effect.
    pub base_threshold: i64,
    pub scale_factor: f64,
    /// Whether the table sets either itself (storage parameters).
    pub own_settings: bool,
    /// autovacuum is on for the server and not off for the table.
    pub enabled: bool,
    #[serde(with = "crate::report::timestamp::option")]
    pub last_vacuum: Option<OffsetDateTime>,
}

impl AutovacuumRel {
    /// Dead tuples above which autovacuum vacuums the relation.
    pub(crate) fn threshold(&self) -> f64 {
        self.base_threshold as f64 + self.scale_factor * self.reltuples
    }
}

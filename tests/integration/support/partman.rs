//! Key tables partitioned the way pg_partman lays them out: native declarative RANGE partitioning on
//! expires_at or created_at, one child per day named `<parent>_pYYYYMMDD` (pg_partman 5's default
//! suffix for daily partitions), and a `<parent>_default` partition for keys outside every range.
//!
//! Built with plain DDL rather than the extension: pg_partman's create_parent() and
//! run_maintenance() issue exactly this kind of DDL, and what idemctl sees (the catalog, the bounds,
//! the partitioned indexes) is the same, without a package the test machine may not have.

use crate::support::TestDb;

/// The column the table is partitioned on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PartitionBy {
    ExpiresAt,
    CreatedAt,
}

impl PartitionBy {
    pub(crate) fn column(self) -> &'static str {
        match self {
            PartitionBy::ExpiresAt => "expires_at",
            PartitionBy::CreatedAt => "created_at",
        }
    }
}

/// sql/schema.sql turned into a partitioned table: the primary key gains the partition key (which
/// PostgreSQL requires of a unique index on a partitioned table), the expiry index is created on the
/// parent (so every partition gets its copy), and daily partitions cover `days_back` days before
/// today to `days_ahead` days after it (pg_partman's "premake"), plus the default partition.
pub(crate) fn ddl(by: PartitionBy, days_back: i32, days_ahead: i32) -> String {
    let schema = include_str!("../../../sql/schema.sql");
    let column = by.column();
    let plain_end = "CONSTRAINT idempotency_keys_pkey PRIMARY KEY (api_key_id, key)\n);";
    assert!(schema.contains(plain_end), "sql/schema.sql changed shape");
    let table = schema.replace(
        plain_end,
        &format!(
            "CONSTRAINT idempotency_keys_pkey PRIMARY KEY (api_key_id, key, {column})\n) PARTITION BY RANGE ({column});"
        ),
    );
    format!(
        "{table}
DO $$
DECLARE d date;
BEGIN
    FOR d IN SELECT generate_series(current_date - {days_back}, current_date + {days_ahead}, interval '1 day')::date LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF idempotency_keys FOR VALUES FROM (%L) TO (%L)',
                       'idempotency_keys_p' || to_char(d, 'YYYYMMDD'), d::timestamptz, (d + 1)::timestamptz);
    END LOOP;
END $$;
CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT;
"
    )
}

/// The optional in_progress index of sql/maintenance_indexes.sql, built on the parent: a partitioned
/// table refuses CREATE INDEX CONCURRENTLY.
pub(crate) fn stuck_index_ddl() -> String {
    include_str!("../../../sql/maintenance_indexes.sql").replace("CONCURRENTLY ", "")
}

/// Create the partitioned table, with or without the optional in_progress index.
pub(crate) async fn create(db: &TestDb, by: PartitionBy, with_stuck_index: bool) {
    db.exec(&ddl(by, 9, 3)).await;
    if with_stuck_index {
        db.exec(&stuck_index_ddl()).await;
    }
}

/// Leaf partitions of the key table, by name.
pub(crate) async fn partition_names(db: &TestDb) -> Vec<String> {
    let rows = db
        .client()
        .await
        .query(
            "SELECT relid::regclass::text FROM pg_partition_tree('idempotency_keys') WHERE isleaf ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// The partitions `evict --drop-partitions` should drop, computed independently of idemctl: not the
/// default, upper bound passed, no in_progress key, no unexpired key.
pub(crate) async fn droppable(db: &TestDb) -> Vec<String> {
    let client = db.client().await;
    let mut out = Vec::new();
    for name in partition_names(db).await {
        let sql = format!(
            "SELECT pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT' \
                AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''(.*)''\\)'))[1]::timestamptz <= now() \
                AND NOT EXISTS (SELECT 1 FROM {name} WHERE state = 'in_progress' OR expires_at >= now()) \
               FROM pg_class c WHERE c.oid = '{name}'::regclass"
        );
        let row = client.query_one(&sql, &[]).await.unwrap();
        if row.get::<_, Option<bool>>(0).unwrap_or(false) {
            out.push(name);
        }
    }
    out
}

-- stats (per-partition view) and evict --drop-partitions: every leaf partition of the key table, from
-- the catalog only (no row of any partition is read). $1 = table oid, $2 = whether the table is
-- RANGE-partitioned on one timestamptz column, in which case each partition's bounds are returned as
-- timestamps (NULL for MINVALUE / MAXVALUE and for the default partition).
--
-- PostgreSQL exposes a partition's bounds only as text (pg_get_expr of relpartbound, e.g.
-- FOR VALUES FROM ('2026-01-01 00:00:00+00') TO ('2026-01-02 00:00:00+00')); the literals are printed
-- with this session's DateStyle and TimeZone and cast back in the same statement, so they round-trip.
-- direct = attached to the key table itself (not to a sub-partitioned child); owned = the current role
-- may DROP it (it owns it or is a member of its owner); db_now = the clock the bounds are compared with.
WITH leaves AS (
    SELECT t.relid, t.parentrelid
      FROM pg_catalog.pg_partition_tree($1::bigint::oid) t
     WHERE t.isleaf AND t.relid <> $1::bigint::oid
), described AS (
    SELECT l.relid, l.parentrelid, n.nspname, c.relname, c.reltuples, c.relowner,
           pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS bound
      FROM leaves l
      JOIN pg_catalog.pg_class c ON c.oid = l.relid
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
), parsed AS (
    SELECT d.*, regexp_match(d.bound, '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS r
      FROM described d
)
SELECT nspname::text AS schema,
       relname::text AS name,
       parentrelid = $1::bigint::oid AS direct,
       bound = 'DEFAULT' AS is_default,
       bound,
       greatest(reltuples, 0)::bigint AS estimated_rows,
       reltuples < 0 AS never_analyzed,
       pg_catalog.pg_total_relation_size(relid)::bigint AS total_bytes,
       pg_catalog.pg_has_role(relowner, 'USAGE') AS owned,
       CASE WHEN $2::bool AND r[1] LIKE '''%''' THEN btrim(r[1], '''')::timestamptz END AS range_from,
       CASE WHEN $2::bool AND r[2] LIKE '''%''' THEN btrim(r[2], '''')::timestamptz END AS range_to,
       now() AS db_now
  FROM parsed
 ORDER BY bound = 'DEFAULT', range_from NULLS FIRST, relname

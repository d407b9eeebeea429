-- Indexes of the key table: key columns (expressions as text), the column each key column is (its
-- name as the catalog spells it, unquoted; NULL for an expression), uniqueness, primary key,
-- validity, predicate, and whether NULLs are not distinct in it (NULLS NOT DISTINCT, PostgreSQL 15+:
-- pg_index.indnullsnotdistinct, read through the row as JSON so the statement also parses on a
-- server without the column, and only where the server has it).
-- $1 = table oid. Catalog lookup only.
SELECT i.indexrelid::regclass::text AS name,
       i.indisunique AS is_unique,
       i.indisprimary AS is_primary,
       i.indisvalid AND i.indisready AS is_valid,
       pg_catalog.pg_get_expr(i.indpred, i.indrelid) AS predicate,
       CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 150000
            THEN coalesce((pg_catalog.to_jsonb(i) ->> 'indnullsnotdistinct')::boolean, false)
            ELSE false END AS nulls_not_distinct,
       ARRAY(SELECT pg_catalog.pg_get_indexdef(i.indexrelid, k, true)
               FROM generate_series(1, i.indnkeyatts) AS k ORDER BY k) AS columns,
       ARRAY(SELECT a.attname::text
               FROM generate_series(1, i.indnkeyatts) AS k
               LEFT JOIN pg_catalog.pg_attribute a
                 ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k - 1] AND a.attnum > 0
              ORDER BY k) AS attnames
  FROM pg_catalog.pg_index i
 WHERE i.indrelid = $1::bigint::oid
 ORDER BY 1

-- Resolve --table to one relation, following search_path for an unqualified name.
-- $1 = schema or NULL, $2 = table name. Catalog lookup only. `referenced`: some foreign key
-- references the table (sql/referencing_keys.sql then says which; without one it is not run).
SELECT c.oid::bigint AS oid, n.nspname::text AS schema, c.relname::text AS name, c.relkind::text AS kind,
       EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                WHERE k.confrelid = c.oid AND k.contype = 'f') AS referenced
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relname = $2
   AND c.relkind IN ('r', 'p')
   AND CASE WHEN $1::text IS NULL
            THEN n.nspname = ANY (pg_catalog.current_schemas(false))
            ELSE n.nspname = $1::text END
 ORDER BY coalesce(array_position(pg_catalog.current_schemas(false), n.nspname), 0)
 LIMIT 1

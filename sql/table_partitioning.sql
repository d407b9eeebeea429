-- How a partitioned key table is partitioned: the strategy ('r' range, 'l' list, 'h' hash), the key
-- columns in order (an expression in the key shows as NULL) and the key as PostgreSQL prints it.
-- $1 = table oid. Catalog lookup only; no row for a plain table.
SELECT p.partstrat::text AS strategy,
       pg_catalog.pg_get_partkeydef(p.partrelid) AS definition,
       ARRAY(SELECT a.attname::text
               FROM unnest(p.partattrs::int2[]) WITH ORDINALITY AS k(attnum, ord)
               LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = k.attnum
              ORDER BY k.ord) AS columns
  FROM pg_catalog.pg_partitioned_table p
 WHERE p.partrelid = $1::bigint::oid

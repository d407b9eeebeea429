-- check and evict: the foreign keys that reference the key table, what each does when a key is
-- deleted, and whether an index on the referencing table leads with the referencing columns
-- (without one, every evicted key scans the referencing table). A partial index counts when its
-- predicate is `col IS NOT NULL` on the referencing columns: the ON DELETE action looks rows up by
-- `col = $1`, which implies it. Also whether this role may read the referencing table (evict then
-- leaves keys still referenced by a NO ACTION / RESTRICT key instead of failing on them) and lock
-- its rows (evict's SKIP LOCKED fallback then skips a key whose referencing row a live transaction
-- holds). $1 = key table oid. Catalog lookup only.
SELECT c.conname::text AS name,
       c.conrelid::regclass::text AS referencing_table,
       n.nspname::text AS referencing_schema,
       r.relname::text AS referencing_name,
       cols.columns,
       cols.referenced,
       CASE c.confdeltype WHEN 'a' THEN 'NO ACTION' WHEN 'r' THEN 'RESTRICT' WHEN 'c' THEN 'CASCADE'
                          WHEN 'n' THEN 'SET NULL' WHEN 'd' THEN 'SET DEFAULT' END AS on_delete,
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                WHERE i.indrelid = c.conrelid AND i.indisvalid
                  AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] @> c.conkey
                  AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] <@ c.conkey
                  AND (i.indpred IS NULL
                       OR pg_catalog.pg_get_expr(i.indpred, i.indrelid) = ANY (cols.not_null))) AS indexed,
       has_table_privilege(c.conrelid, 'SELECT') AS may_read,
       has_table_privilege(c.conrelid, 'SELECT')
         AND has_any_column_privilege(c.conrelid, 'UPDATE') AS may_lock
  FROM pg_catalog.pg_constraint c
  JOIN pg_catalog.pg_class r ON r.oid = c.conrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace
  CROSS JOIN LATERAL (
        SELECT array_agg(a.attname::text ORDER BY k.ord) AS columns,
               array_agg(f.attname::text ORDER BY k.ord) AS referenced,
               -- the predicates `col IS NOT NULL` implies: each column's, and all of them ANDed
               array_agg('(' || quote_ident(a.attname) || ' IS NOT NULL)' ORDER BY k.ord)
                 || CASE WHEN count(*) > 1
                         THEN ARRAY['(' || string_agg('(' || quote_ident(a.attname) || ' IS NOT NULL)',
                                                      ' AND ' ORDER BY k.ord) || ')']
                         ELSE ARRAY[]::text[] END AS not_null
          FROM unnest(c.conkey, c.confkey) WITH ORDINALITY AS k(attnum, fattnum, ord)
          JOIN pg_catalog.pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
          JOIN pg_catalog.pg_attribute f ON f.attrelid = c.confrelid AND f.attnum = k.fattnum) AS cols
 WHERE c.contype = 'f' AND c.confrelid = $1::bigint::oid
   -- on a partitioned key table, the constraint on the parent (its clones on the partitions have
   -- conparentid set)
   AND c.conparentid = 0
 ORDER BY 2, 1

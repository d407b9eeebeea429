-- check: the foreign keys that reference the key table, what each does when a key is deleted, and
-- whether an index on the referencing table leads with the referencing columns (without one, every
-- evicted key scans the referencing table). $1 = key table oid. Catalog lookup only.
SELECT c.conname::text AS name,
       c.conrelid::regclass::text AS referencing_table,
       (SELECT array_agg(a.attname::text ORDER BY k.ord)
          FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
          JOIN pg_catalog.pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum) AS columns,
       CASE c.confdeltype WHEN 'a' THEN 'NO ACTION' WHEN 'r' THEN 'RESTRICT' WHEN 'c' THEN 'CASCADE'
                          WHEN 'n' THEN 'SET NULL' WHEN 'd' THEN 'SET DEFAULT' END AS on_delete,
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                WHERE i.indrelid = c.conrelid AND i.indisvalid AND i.indpred IS NULL
                  AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] @> c.conkey
                  AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] <@ c.conkey) AS indexed
  FROM pg_catalog.pg_constraint c
 WHERE c.contype = 'f' AND c.confrelid = $1::bigint::oid
 ORDER BY 2, 1

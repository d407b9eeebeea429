-- evict on a Citus reference table: the foreign keys with ON DELETE NO ACTION / RESTRICT that
-- reference it from a distributed table (hash-distributed, or a single-shard table of a distributed
-- schema). evict leaves out the keys such a key still references with a probe of the referencing
-- table inside its DELETE, which Citus cannot plan on a reference table when the referencing table
-- is distributed. $1 = key table oid. Catalog lookup only, on the coordinator.
SELECT c.conname::text AS name,
       c.conrelid::regclass::text AS referencing_table,
       CASE c.confdeltype WHEN 'a' THEN 'NO ACTION' ELSE 'RESTRICT' END AS on_delete
  FROM pg_catalog.pg_constraint c
  JOIN pg_catalog.pg_dist_partition p ON p.logicalrelid = c.conrelid
 WHERE c.contype = 'f' AND c.confrelid = $1::bigint::oid AND c.confdeltype IN ('a', 'r')
   AND (p.partmethod = 'h' OR (p.repmodel <> 't' AND p.colocationid > 0))
 ORDER BY 2, 1

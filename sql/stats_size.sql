-- stats: estimated rows and sizes from the catalog, never a count(*). $1 = table oid.
-- For a partitioned table the figures add up its leaf partitions. The parent itself holds no rows,
-- but ANALYZE records the whole tree's row count in its reltuples, so it is left out (pg_partition_tree
-- lists nothing for a plain table, hence the UNION).
WITH rels AS (
    SELECT c.oid, c.reltuples, c.reltoastrelid
      FROM pg_catalog.pg_class c
     WHERE c.oid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::bigint::oid) WHERE isleaf
                      UNION SELECT $1::bigint::oid)
       AND c.relkind <> 'p'
)
SELECT coalesce(sum(greatest(reltuples, 0)), 0)::bigint AS estimated_rows,
       coalesce(sum(pg_catalog.pg_relation_size(oid)), 0)::bigint AS heap_bytes,
       coalesce(sum(CASE WHEN reltoastrelid <> 0 THEN pg_catalog.pg_total_relation_size(reltoastrelid) ELSE 0 END), 0)::bigint AS toast_bytes,
       coalesce(sum(pg_catalog.pg_indexes_size(oid)), 0)::bigint AS index_bytes,
       coalesce(sum(pg_catalog.pg_total_relation_size(oid)), 0)::bigint AS total_bytes,
       bool_or(reltuples < 0) AS never_analyzed
  FROM rels

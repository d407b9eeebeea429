-- Citus: how the key table is distributed, from the coordinator's metadata (one row, or none for a
-- table Citus does not manage). $1 = table oid. method 'h' = hash-distributed by `column`;
-- 'n' = one shard: a reference table (replication 't'), a table of a distributed schema
-- (colocation_id > 0) or a Citus local table.
SELECT p.partmethod::text AS method,
       p.repmodel::text AS replication,
       p.colocationid::bigint AS colocation_id,
       CASE WHEN p.partkey IS NOT NULL
            THEN pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) END AS column,
       (SELECT count(*) FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid)::bigint AS shards
  FROM pg_catalog.pg_dist_partition p
 WHERE p.logicalrelid = $1::bigint::oid

-- Citus: the key table's shards and the active primary node holding each, from the coordinator's
-- metadata (a hash-distributed table has one placement per shard). $1 = table oid.
SELECT s.shardid::bigint AS shard_id, n.nodename::text AS node, n.nodeport::int AS port
  FROM pg_catalog.pg_dist_shard s
  JOIN pg_catalog.pg_dist_placement p ON p.shardid = s.shardid
  JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid
 WHERE s.logicalrelid = $1::bigint::oid
   AND n.noderole = 'primary'
   AND n.isactive
 ORDER BY n.nodename, n.nodeport, s.shardid

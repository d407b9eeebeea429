-- Citus: the shard of a hash-distributed key table that holds each of a list of
-- distribution-column values, in the list's order (the coordinator's metadata and the values'
-- hashes, no table is read). $1 = table oid, $2 = the values as text.
SELECT pg_catalog.get_shard_id_for_distribution_column($1::bigint::oid::regclass, v.value)::bigint AS shard_id
  FROM unnest($2::text[]) WITH ORDINALITY AS v(value, n)
 ORDER BY v.n

-- Citus: the shard of a hash-distributed key table that holds a distribution-column value (the
-- coordinator's metadata and the value's hash, no table is read). $1 = table oid, $2 = the value as
-- text (converted to the column's type by Citus).
SELECT pg_catalog.get_shard_id_for_distribution_column($1::bigint::oid::regclass, $2::text)::bigint AS shard_id

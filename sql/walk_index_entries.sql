-- check on a table without an index on its expiry column: how many entries the unique index evict
-- walks instead holds, as the planner last counted them (pg_class.reltuples: never a count), and
-- its size. A full walk reads every entry once per run. $1 = table oid, $2 = the index's name.
-- entries is NULL when the index has never been counted (not yet vacuumed or analyzed).
SELECT CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END AS entries,
       pg_catalog.pg_relation_size(c.oid)::bigint AS bytes
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = $1::bigint::oid
   AND c.relname = $2::text

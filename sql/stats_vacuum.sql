-- stats: dead tuples and the last (auto)vacuum / (auto)analyze; the rows inserted and deleted since
-- the statistics were reset (top's insert and eviction rates are their changes between two reads).
-- $1 = table oid.
SELECT coalesce(sum(s.n_live_tup), 0)::bigint AS live_tuples,
       coalesce(sum(s.n_dead_tup), 0)::bigint AS dead_tuples,
       coalesce(sum(s.n_tup_ins), 0)::bigint AS inserted_rows,
       coalesce(sum(s.n_tup_del), 0)::bigint AS deleted_rows,
       max(greatest(s.last_vacuum, s.last_autovacuum)) AS last_vacuum,
       max(greatest(s.last_analyze, s.last_autoanalyze)) AS last_analyze
  FROM pg_catalog.pg_stat_all_tables s
 WHERE s.relid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::bigint::oid) WHERE isleaf
                      UNION SELECT $1::bigint::oid)

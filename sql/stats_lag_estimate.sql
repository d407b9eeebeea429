-- stats on a table without an index on its expiry column: the eviction lag estimated from the
-- planner's statistics instead of the rows. The lowest value ANALYZE sampled of the expiry column
-- ($2; the creation time where keys expire a TTL after it), over the table and each of its
-- partitions (the first histogram bound, or a most common value below it), stands for the oldest
-- expiry; its wait past the cut-off is the estimate, 0 when it has not expired. NULL when no
-- statistics hold the column (never analyzed). Reads pg_stats only, one row per partition at most,
-- whatever the table's size: the estimate is as of the last analyze, and the statistics know no
-- state, so an expired key still in flight counts too.
WITH sampled AS (
    SELECT (s.histogram_bounds::text)::{time_type}[] AS bounds,
           (s.most_common_vals::text)::{time_type}[] AS common
      FROM pg_catalog.pg_stats s
      JOIN pg_catalog.pg_namespace n ON n.nspname = s.schemaname
      JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = s.tablename
     WHERE c.oid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::bigint::oid)
                      UNION SELECT $1::bigint::oid)
       AND s.attname = $2::text
), lowest AS (
    SELECT min(v) AS expiry
      FROM sampled, LATERAL unnest(sampled.bounds[1:1] || sampled.common) AS v
)
-- greatest() would turn a NULL (no statistics) into 0: a lag that reads as "nothing waits".
SELECT CASE WHEN expiry IS NOT NULL
            THEN greatest(0, (extract(epoch FROM {cutoff}) - extract(epoch FROM expiry))::float8) END AS lag_seconds
  FROM lowest

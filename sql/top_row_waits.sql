-- top: sessions waiting for a row of the key table, each with the session it waits for. A session
-- that waits for a row holds or waits for a tuple lock on the table (or a leaf partition), which
-- pg_locks lists with the row's address; pg_blocking_pids names who is in its way, preferring one
-- that is not itself waiting for the row (the holder, not the queue ahead). Reads pg_locks and
-- pg_stat_activity only, for at most $2 waiting sessions. $1 = the table's oid.
WITH rels AS (
    SELECT relid FROM pg_catalog.pg_partition_tree($1::bigint::oid) WHERE isleaf
    UNION SELECT $1::bigint::oid
), tuple_locks AS (
    SELECT l.pid, l.relation, l.page, l.tuple
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'tuple'
       AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
       AND l.relation IN (SELECT relid FROM rels)
), waiting AS (
    SELECT DISTINCT ON (t.pid) t.pid, t.relation, t.page, t.tuple,
           (SELECT b FROM unnest(pg_catalog.pg_blocking_pids(t.pid)) AS b
             ORDER BY b IN (SELECT pid FROM tuple_locks), b LIMIT 1) AS holder
      FROM tuple_locks t
     ORDER BY t.pid
     LIMIT $2
)
SELECT w.pid,
       w.relation::regclass::text AS relation,
       format('(%s,%s)', w.page, w.tuple) AS row_address,
       a.application_name::text AS application_name,
       extract(epoch FROM pg_catalog.clock_timestamp() - a.state_change)::float8 AS waiting_seconds,
       w.holder AS holder_pid,
       h.application_name::text AS holder_application_name,
       h.state::text AS holder_state,
       extract(epoch FROM pg_catalog.clock_timestamp() - h.xact_start)::float8 AS holder_transaction_seconds
  FROM waiting w
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = w.pid
  LEFT JOIN pg_catalog.pg_stat_activity h ON h.pid = w.holder
 WHERE w.holder IS NOT NULL
 ORDER BY w.pid

-- evict's adaptive pace: what every other client session on the server is doing, sampled at most
-- every 200 ms between batches (never inside a batch's transaction). One pass over
-- pg_stat_activity, which holds one row per connection (at most max_connections); no table is read.
-- $1 is the server time of the previous sample; for the first sample (NULL) the window reaches
-- back $2 milliseconds instead, so that evict learns at once whether the foreground was idle.
--
-- evict's own sessions share this session's application_name and are left out (through a pooler a
-- batch may run on any server connection, so backend pids would not identify them). On a Citus
-- worker, the live requests the coordinator routes there arrive on Citus's own connections
-- (application_name `citus_internal gpid=N`, `citus_rebalancer gpid=N` or `citus_run_command
-- gpid=N`, N the global pid of the session that sent the query): they are the foreground, except
-- those whose N is in $4 (an int8[]: Citus's background processes and idemctl's own sessions on
-- every node, sql/citus_not_foreground.sql), which are left out; NULL on a single server.
--   recent   sessions that ran anything since the previous sample (running now, or changed state
--            since then): 0 twice in a row means the foreground is idle; a session left idle in a
--            transaction does nothing and is not counted
--   active   sessions running a statement now
--   waiting  of those, how many wait on a lightweight lock, I/O or a heavyweight lock (WAL
--            insertion and flushes, buffer contention, row locks): contention evict adds to
--   age_ms   the mean time the running statements have been running so far, of those started
--            within the last second (a report running for minutes is not a request slowing down)
--   inserted rows inserted into the key table's relations ($3, an int8[] of oids: the table on a
--            single server, or the shards of a distributed table on the worker sampled; each
--            leaf partition of a partitioned one, each relation counted once) since the
--            statistics were reset, from the statistics system (no table read; bounded by the
--            number of relations); NULL when $3 is NULL or empty. The pace keeps its removal rate
--            at a multiple of this counter's rate.
SELECT pg_catalog.clock_timestamp() AS sampled_at,
       count(*) FILTER (WHERE a.state = 'active'
                           OR a.state_change >= coalesce($1::timestamptz,
                                                  pg_catalog.clock_timestamp()
                                                  - make_interval(secs => $2::float8 / 1000)))::int4
             AS recent,
       count(*) FILTER (WHERE a.state = 'active')::int4 AS active,
       count(*) FILTER (WHERE a.state = 'active'
                          AND a.wait_event_type IN ('LWLock', 'IO', 'Lock'))::int4 AS waiting,
       coalesce(avg(extract(epoch FROM pg_catalog.clock_timestamp() - a.query_start) * 1000)
                    FILTER (WHERE a.state = 'active'
                              AND a.query_start > pg_catalog.clock_timestamp() - interval '1 second'),
                0)::float8 AS age_ms,
       (SELECT sum(pg_catalog.pg_stat_get_tuples_inserted(r.relid))::int8
          FROM (SELECT u.relid::oid AS relid
                  FROM unnest($3::int8[]) AS u(relid)
                 UNION
                SELECT t.relid
                  FROM unnest($3::int8[]) AS u(relid),
                       pg_catalog.pg_partition_tree(u.relid::oid::regclass) AS t
                 WHERE t.isleaf) AS r) AS inserted
  FROM pg_catalog.pg_stat_activity a
 WHERE a.backend_type = 'client backend'
   AND a.pid <> pg_catalog.pg_backend_pid()
   AND a.application_name IS DISTINCT FROM pg_catalog.current_setting('application_name')
   AND NOT coalesce(substring(a.application_name
                              FROM '^citus_(?:internal|rebalancer|run_command) gpid=([0-9]{1,18})$'
                             )::int8 = ANY ($4::int8[]),
                    false)

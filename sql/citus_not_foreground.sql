-- Citus: the global pids (gpids) of this node's sessions whose distributed queries are not the
-- foreground, for evict's adaptive pace on the workers. A query a session runs through a node
-- reaches the workers on Citus's own connections, named `citus_internal gpid=<its gpid>` (or
-- `citus_rebalancer`, `citus_run_command`); on a worker those connections carry the live requests
-- the coordinator routes there, so they are the foreground, except when they come from:
--   - Citus's background processes of this database (the maintenance daemon's distributed
--     deadlock detection every deadlock_timeout x citus.distributed_deadlock_detection_factor, its
--     2PC recovery, the background task queue): any backend_type but 'client backend';
--   - idemctl's own sessions, which share this session's application_name (as in
--     sql/pace_foreground.sql).
-- One pass over pg_stat_activity and Citus's per-backend data (both one row per connection, at most
-- max_connections); no table is read. Run once per node at the start of evict.
SELECT coalesce(pg_catalog.array_agg(DISTINCT t.global_pid::int8), '{}') AS gpids
  FROM pg_catalog.pg_stat_activity a
  JOIN pg_catalog.get_all_active_transactions() t ON t.process_id = a.pid
 WHERE a.datname = pg_catalog.current_database()
   AND t.global_pid IS NOT NULL
   AND t.global_pid <> 0
   AND (a.backend_type <> 'client backend'
        OR a.application_name = pg_catalog.current_setting('application_name'))

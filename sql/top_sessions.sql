-- top: the other sessions of idemctl on this database, known by sharing this session's
-- application_name (as evict's pace knows its own; `idemctl` unless the conninfo or PGAPPNAME says
-- otherwise), with the first word of its statement after any comment lines, and the maintenance lock it holds on the key table, if any: which command runs
-- there (db/lock.rs: $1 = evict's lock class, $2 = reclaim's, $3 = the table's folded oid).
-- One pass over pg_stat_activity (at most max_connections rows), an index probe of pg_locks' view
-- per session listed, and at most $4 rows. No table is read.
SELECT a.pid,
       coalesce(a.state, 'hidden')::text AS state,
       extract(epoch FROM pg_catalog.clock_timestamp() - a.backend_start)::float8 AS connected_seconds,
       extract(epoch FROM pg_catalog.clock_timestamp() - a.xact_start)::float8 AS transaction_seconds,
       a.wait_event::text AS wait_event,
       upper(substring(a.query FROM '^(?:\s*--[^\n]*\n)*\s*([A-Za-z]+)'))::text AS statement,
       (SELECT CASE WHEN l.classid = ($1::int)::bigint::oid THEN 'evict' ELSE 'reclaim' END
          FROM pg_catalog.pg_locks l
         WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted
           AND l.classid IN (($1::int)::bigint::oid, ($2::int)::bigint::oid)
           AND l.objid = (($3::int)::bigint & 4294967295)::oid AND l.objsubid = 2
         LIMIT 1) AS holds_lock
  FROM pg_catalog.pg_stat_activity a
 WHERE a.backend_type = 'client backend'
   AND a.datname = pg_catalog.current_database()
   AND a.pid <> pg_catalog.pg_backend_pid()
   AND a.application_name = pg_catalog.current_setting('application_name')
 ORDER BY a.backend_start
 LIMIT $4

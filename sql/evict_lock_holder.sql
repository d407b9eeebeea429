-- evict / reclaim: who holds the maintenance lock, when pg_stat_activity lets this role see it.
-- $1 = lock class, $2 = folded table oid. Reads pg_locks and pg_stat_activity only.
SELECT a.pid, a.application_name::text AS application_name, host(a.client_addr) AS client_addr,
       a.usename::text AS usename, a.backend_start
  FROM pg_catalog.pg_locks l
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted
   AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
   AND l.classid = ($1::int)::bigint::oid AND l.objid = (($2::int)::bigint & 4294967295)::oid
   AND l.objsubid = 2
 LIMIT 1

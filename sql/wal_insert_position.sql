-- The server's WAL insert position, in bytes from 0/0: evict --max-wal-rate reads it before and
-- after each batch. The insert position (not pg_current_wal_lsn(), the write position) counts a
-- batch's WAL at once, before the WAL writer flushes it (evict commits asynchronously).
-- Fails on a standby (recovery is in progress), where evict does not run.
SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS position

-- evict / reclaim: take the table's maintenance lock for this session, without waiting.
-- Session-level advisory lock, released when the session ends (also when idemctl is killed).
-- $1 = lock class (one per command), $2 = the table's oid folded into an int4.
SELECT pg_catalog.pg_try_advisory_lock($1::int, $2::int) AS acquired

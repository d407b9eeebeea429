-- Whether this session may write, read before evict or reclaim changes anything: a hot standby (in
-- recovery) never can, and default_transaction_read_only (set for the role, the database or the
-- server) makes every transaction of the session read-only.
SELECT pg_catalog.pg_is_in_recovery() AS in_recovery,
       pg_catalog.current_setting('transaction_read_only')::bool AS read_only

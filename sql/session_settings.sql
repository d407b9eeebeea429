-- Session limits idemctl sets on every new connection; $1..$3 are durations such as '30000ms'
-- ('0ms' = no limit). Set after login rather than as startup options, which PgBouncer rejects.
SELECT set_config('statement_timeout', $1, false),
       set_config('lock_timeout', $2, false),
       set_config('idle_in_transaction_session_timeout', $3, false)

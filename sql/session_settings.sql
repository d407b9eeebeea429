-- Session limits idemctl sets on every new connection whose server session it owns; $1..$3 are
-- durations such as '30000ms' ('0ms' = no limit). Set after login rather than as startup options,
-- which PgBouncer rejects. $4..$8 ask the server to notice a dead client quickly: TCP keepalives
-- ($4 idle s, $5 interval s, $6 count; '0' = the system's default), tcp_user_timeout ($7, ms) and,
-- where the server has it (PostgreSQL 14 and later), client_connection_check_interval ($8).
-- $9: --statement-timeout was not given, so a shorter statement_timeout the session already has
-- (set for the role or the database, in the server's configuration or the startup options) is
-- kept instead of $1. Returns the statement_timeout chosen, in ms, and what set it ('idemctl', else
-- pg_settings.source), as statement_timeout_choice.sql (in place of the placeholder) decides.
SELECT set_config('statement_timeout', t.chosen, false),
       set_config('lock_timeout', $2, false),
       set_config('idle_in_transaction_session_timeout', $3, false),
       set_config('tcp_keepalives_idle', $4, false),
       set_config('tcp_keepalives_interval', $5, false),
       set_config('tcp_keepalives_count', $6, false),
       set_config('tcp_user_timeout', $7, false),
       CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 140000
            THEN pg_catalog.set_config('client_connection_check_interval', $8, false) END
            AS client_connection_check_interval,
       (extract(epoch FROM t.chosen::interval) * 1000)::int8 AS statement_timeout_ms,
       t.set_by AS statement_timeout_set_by
  FROM {statement_timeout_choice} AS t

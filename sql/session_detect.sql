-- First statement on every new connection under --pool-mode auto (one round trip): which server
-- process answers, and, only when it is the process whose cancel key the login announced ($10;
-- NULL when unknown), the settings of session_settings.sql ($1..$9, as there). A pooler answers
-- the login with a cancel key of its own making, so behind one nothing is set on the shared server
-- session. CASE evaluates set_config only in the branch taken. The last two columns are
-- session_settings.sql's statement_timeout chosen (behind a pooler, what idemctl sets in each of
-- its transactions), by the same subquery.
SELECT s.pid,
       CASE WHEN s.pid = $10::int4
            THEN pg_catalog.set_config('statement_timeout', t.chosen, false) END
            AS statement_timeout,
       CASE WHEN s.pid = $10::int4
            THEN pg_catalog.set_config('lock_timeout', $2, false) END AS lock_timeout,
       CASE WHEN s.pid = $10::int4
            THEN pg_catalog.set_config('idle_in_transaction_session_timeout', $3, false) END
            AS idle_in_transaction_session_timeout,
       CASE WHEN s.pid = $10::int4
            THEN pg_catalog.set_config('tcp_keepalives_idle', $4, false) END
            AS tcp_keepalives_idle,
       CASE WHEN s.pid = $10::int4
            THEN pg_catalog.set_config('tcp_keepalives_interval', $5, false) END
            AS tcp_keepalives_interval,
       CASE WHEN s.pid = $10::int4
            THEN pg_catalog.set_config('tcp_keepalives_count', $6, false) END
            AS tcp_keepalives_count,
       CASE WHEN s.pid = $10::int4
            THEN pg_catalog.set_config('tcp_user_timeout', $7, false) END AS tcp_user_timeout,
       CASE WHEN s.pid = $10::int4
             AND pg_catalog.current_setting('server_version_num')::int >= 140000
            THEN pg_catalog.set_config('client_connection_check_interval', $8, false) END
            AS client_connection_check_interval,
       (extract(epoch FROM t.chosen::interval) * 1000)::int8 AS statement_timeout_ms,
       t.set_by AS statement_timeout_set_by
  FROM (SELECT pg_catalog.pg_backend_pid() AS pid) AS s,
       {statement_timeout_choice} AS t

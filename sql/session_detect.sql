-- First statement on every new connection under --pool-mode auto (one round trip): which server
-- process answers, and, only when it is the process whose cancel key the login announced ($4;
-- NULL when unknown), the session limits, as in session_settings.sql. A pooler answers the login
-- with a cancel key of its own making, so behind one nothing is set on the shared server session.
-- $1..$3 are durations such as '30000ms' ('0ms' = no limit). CASE evaluates set_config only in
-- the branch taken.
SELECT s.pid,
       CASE WHEN s.pid = $4::int4
            THEN pg_catalog.set_config('statement_timeout', $1, false) END AS statement_timeout,
       CASE WHEN s.pid = $4::int4
            THEN pg_catalog.set_config('lock_timeout', $2, false) END AS lock_timeout,
       CASE WHEN s.pid = $4::int4
            THEN pg_catalog.set_config('idle_in_transaction_session_timeout', $3, false) END
            AS idle_in_transaction_session_timeout
  FROM (SELECT pg_catalog.pg_backend_pid() AS pid) AS s

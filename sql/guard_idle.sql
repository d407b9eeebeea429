-- On the session that holds the per-table maintenance lock (a session idemctl owns): have the
-- server end the session, and so free the lock, once it has been idle for $1 (a duration such as
-- '60000ms'), where the server has idle_session_timeout (PostgreSQL 14 and later). While the run
-- lives, idemctl pings the session well within that; a run whose path to the server died goes
-- silent, and the server frees its lock even when the dead client's TCP connection stays open.
SELECT CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 140000
            THEN pg_catalog.set_config('idle_session_timeout', $1, false) END
            AS idle_session_timeout

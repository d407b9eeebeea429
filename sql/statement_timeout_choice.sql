-- The statement_timeout a new session gets, for session_settings.sql and session_detect.sql (which
-- hold it in place of {statement_timeout_choice}): idemctl's $1 (a duration such as '30000ms'),
-- or, when $9 says --statement-timeout was not given, a shorter one the session already has (set
-- for the role or the database, in the server's configuration or the startup options). `chosen` is
-- the value, `set_by` what set it ('idemctl', else pg_settings.source). OFFSET 0 keeps the choice
-- evaluated once, before anything is set.
(SELECT CASE WHEN k.shorter THEN k.own ELSE $1 END AS chosen,
        CASE WHEN k.shorter THEN k.source ELSE 'idemctl' END AS set_by
   FROM (SELECT $9::bool
                AND g.setting::int8 > 0
                AND g.setting::int8 < extract(epoch FROM $1::interval) * 1000 AS shorter,
                g.setting || 'ms' AS own,
                g.source
           FROM pg_catalog.pg_settings AS g
          WHERE g.name = 'statement_timeout'
         OFFSET 0) AS k)
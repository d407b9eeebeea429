-- evict's adaptive pace: may this role see what other sessions are doing? Without the privileges of
-- pg_read_all_stats (granted by pg_monitor; superusers have them) pg_stat_activity shows other
-- roles' sessions with a NULL state and wait event, so the API's sessions would look idle and evict
-- would speed up exactly when it should not. Such a role keeps the fixed duty cycle.
SELECT current_user::text AS role,
       pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE') AS can_see

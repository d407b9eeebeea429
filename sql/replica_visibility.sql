-- evict --max-replica-lag: may this role read the replay positions in pg_stat_replication? Without
-- the privileges of pg_read_all_stats (granted by pg_monitor; superusers have them) every column but
-- pid reads NULL there, and throttling on it would silently never pause.
SELECT current_user::text AS role,
       pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE') AS can_see

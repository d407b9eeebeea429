-- stats: when autovacuum next vacuums the key table (each leaf partition of a partitioned table,
-- which autovacuum handles one by one), from the catalog only. $1 = table oid.
-- Autovacuum vacuums a table once its dead tuples exceed
--   autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor * reltuples
-- with the table's own storage parameters (reloptions) overriding the server's settings, unless
-- autovacuum is off for the server or the table (autovacuum_enabled = off).
WITH rels AS (
    SELECT c.oid, n.nspname, c.relname, greatest(c.reltuples, 0)::float8 AS reltuples, c.reloptions
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::bigint::oid) WHERE isleaf
                      UNION SELECT $1::bigint::oid)
       AND c.relkind <> 'p'
), opts AS (
    SELECT r.*,
           (SELECT o.option_value FROM pg_catalog.pg_options_to_table(r.reloptions) o
             WHERE o.option_name = 'autovacuum_vacuum_threshold') AS own_threshold,
           (SELECT o.option_value FROM pg_catalog.pg_options_to_table(r.reloptions) o
             WHERE o.option_name = 'autovacuum_vacuum_scale_factor') AS own_scale_factor,
           (SELECT o.option_value FROM pg_catalog.pg_options_to_table(r.reloptions) o
             WHERE o.option_name = 'autovacuum_enabled') AS own_enabled
      FROM rels r
)
SELECT o.nspname::text AS schema_name,
       o.relname::text AS relation,
       o.reltuples,
       coalesce(s.n_live_tup, 0)::bigint AS live_tuples,
       coalesce(s.n_dead_tup, 0)::bigint AS dead_tuples,
       coalesce(o.own_threshold::bigint,
                pg_catalog.current_setting('autovacuum_vacuum_threshold')::bigint) AS base_threshold,
       coalesce(o.own_scale_factor::float8,
                pg_catalog.current_setting('autovacuum_vacuum_scale_factor')::float8) AS scale_factor,
       (o.own_threshold IS NOT NULL OR o.own_scale_factor IS NOT NULL) AS own_settings,
       pg_catalog.current_setting('autovacuum')::bool AS server_enabled,
       coalesce(o.own_enabled::bool, true) AS table_enabled,
       greatest(s.last_vacuum, s.last_autovacuum) AS last_vacuum
  FROM opts o
  LEFT JOIN pg_catalog.pg_stat_all_tables s ON s.relid = o.oid
 ORDER BY o.nspname, o.relname

-- Citus, on a worker: what the current role may do on each of the key table's shards there, in one
-- catalog lookup (evict checks them all before its first batch). $1 = the shards' oids on this
-- worker; one row each, in their order. Row locks (FOR UPDATE SKIP LOCKED) need UPDATE on at least
-- one column. can_confirm: the role may call pg_logical_emit_message on this worker (named by
-- confirm_function), which evict's durable points there call; function grants are per database,
-- and Citus does not pass them on for pg_catalog's functions.
SELECT current_user::text AS role,
       u.id AS oid,
       pg_catalog.has_table_privilege(u.id::oid, 'SELECT') AS can_select,
       pg_catalog.has_table_privilege(u.id::oid, 'DELETE') AS can_delete,
       pg_catalog.has_any_column_privilege(u.id::oid, 'UPDATE') AS can_lock_rows,
       coalesce(e.can_confirm, false) AS can_confirm,
       e.confirm_function
  FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord)
  LEFT JOIN LATERAL (
        SELECT pg_catalog.has_function_privilege(f.oid, 'EXECUTE') AS can_confirm,
               'pg_catalog.' || pg_catalog.format('%s(%s)', f.proname,
                   pg_catalog.pg_get_function_identity_arguments(f.oid)) AS confirm_function
          FROM pg_catalog.pg_proc f
         WHERE f.proname = 'pg_logical_emit_message'
           AND f.pronamespace = 'pg_catalog'::regnamespace
           AND f.proargtypes[2] = 'text'::regtype
         LIMIT 1) AS e ON true
 ORDER BY u.ord

-- What the current role may do on the key table. $1 = table oid. Catalog lookup only.
-- The column grants reclaim's actions need come from reclaim_privileges.sql.
-- is_owner: the role owns the table or is a member of its owner, which DETACH PARTITION requires.
-- can_confirm: the role may call pg_logical_emit_message (its text form, whose arguments
-- confirm_function names: PostgreSQL 17 adds a fourth), which evict's durable points call
-- (sql/vacuum_flush_commits.sql).
SELECT current_user::text AS role,
       pg_catalog.has_table_privilege($1::bigint::oid, 'SELECT') AS can_select,
       pg_catalog.has_table_privilege($1::bigint::oid, 'DELETE') AS can_delete,
       pg_catalog.has_table_privilege($1::bigint::oid, 'UPDATE') AS can_update,
       pg_catalog.has_any_column_privilege($1::bigint::oid, 'UPDATE') AS can_lock_rows,
       pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = $1::bigint::oid), 'USAGE') AS is_owner,
       coalesce(e.can_confirm, false) AS can_confirm,
       e.confirm_function
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (
        SELECT pg_catalog.has_function_privilege(f.oid, 'EXECUTE') AS can_confirm,
               'pg_catalog.' || pg_catalog.format('%s(%s)', f.proname,
                   pg_catalog.pg_get_function_identity_arguments(f.oid)) AS confirm_function
          FROM pg_catalog.pg_proc f
         WHERE f.proname = 'pg_logical_emit_message'
           AND f.pronamespace = 'pg_catalog'::regnamespace
           AND f.proargtypes[2] = 'text'::regtype
         LIMIT 1) AS e ON true

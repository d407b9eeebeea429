-- What the current role may do on the key table. $1 = table oid. Catalog lookup only.
-- The column grants reclaim's actions need come from reclaim_privileges.sql.
-- is_owner: the role owns the table or is a member of its owner, which DETACH PARTITION requires.
SELECT current_user::text AS role,
       pg_catalog.has_table_privilege($1::bigint::oid, 'SELECT') AS can_select,
       pg_catalog.has_table_privilege($1::bigint::oid, 'DELETE') AS can_delete,
       pg_catalog.has_table_privilege($1::bigint::oid, 'UPDATE') AS can_update,
       pg_catalog.has_any_column_privilege($1::bigint::oid, 'UPDATE') AS can_lock_rows,
       pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = $1::bigint::oid), 'USAGE') AS is_owner

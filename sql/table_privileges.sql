-- What the current role may do on the key table. $1 = table oid. Catalog lookup only.
-- can_update_response: UPDATE on the columns reclaim --action fail writes (with expires_at) (false when one is missing).
-- is_owner: the role owns the table or is a member of its owner, which DETACH PARTITION requires.
SELECT current_user::text AS role,
       pg_catalog.has_table_privilege($1::bigint::oid, 'SELECT') AS can_select,
       pg_catalog.has_table_privilege($1::bigint::oid, 'DELETE') AS can_delete,
       pg_catalog.has_table_privilege($1::bigint::oid, 'UPDATE') AS can_update,
       pg_catalog.has_any_column_privilege($1::bigint::oid, 'UPDATE') AS can_lock_rows,
       coalesce((SELECT bool_and(pg_catalog.has_column_privilege($1::bigint::oid, a.attnum, 'UPDATE'))
                   FROM pg_catalog.pg_attribute a
                  WHERE a.attrelid = $1::bigint::oid AND NOT a.attisdropped
                    AND a.attname IN ('state', 'response_status', 'response_body', 'expires_at')
                 HAVING count(*) = 4), false) AS can_update_response,
       pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = $1::bigint::oid), 'USAGE') AS is_owner

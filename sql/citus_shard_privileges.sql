-- Citus, on a worker: what the current role may do on each of the key table's shards there, in one
-- catalog lookup (evict checks them all before its first batch). $1 = the shards' oids on this
-- worker; one row each, in their order. Row locks (FOR UPDATE SKIP LOCKED) need UPDATE on at least
-- one column.
SELECT current_user::text AS role,
       u.id AS oid,
       pg_catalog.has_table_privilege(u.id::oid, 'SELECT') AS can_select,
       pg_catalog.has_table_privilege(u.id::oid, 'DELETE') AS can_delete,
       pg_catalog.has_any_column_privilege(u.id::oid, 'UPDATE') AS can_lock_rows
  FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord)
 ORDER BY u.ord

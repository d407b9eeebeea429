-- reclaim: whether the current role may UPDATE each column --action fail writes, so a missing
-- column grant is named before anything changes (the table-wide grants come from
-- table_privileges.sql). $1 = table oid. Catalog lookup only.
SELECT pg_catalog.has_column_privilege($1::bigint::oid, 'state', 'UPDATE') AS state,
       pg_catalog.has_column_privilege($1::bigint::oid, 'response_status', 'UPDATE') AS response_status,
       pg_catalog.has_column_privilege($1::bigint::oid, 'response_body', 'UPDATE') AS response_body,
       pg_catalog.has_column_privilege($1::bigint::oid, 'expires_at', 'UPDATE') AS expires_at

-- reclaim: whether the current role may UPDATE each column the chosen action writes (--action fail:
-- the state, response status and body columns, and the expiry column where the table has one;
-- --action release: the lock time column, as the table's profile names them), so a missing column
-- grant is named before anything changes (the table-wide grants come from table_privileges.sql).
-- $1 = table oid, $2 = column names, answered in order (false for a column the table lacks).
-- Catalog lookup only.
SELECT coalesce(array_agg(coalesce((SELECT pg_catalog.has_column_privilege($1::bigint::oid, a.attnum, 'UPDATE')
                                      FROM pg_catalog.pg_attribute a
                                     WHERE a.attrelid = $1::bigint::oid AND a.attname = c.name
                                       AND NOT a.attisdropped), false) ORDER BY c.ord), '{}') AS granted
  FROM unnest($2::text[]) WITH ORDINALITY AS c(name, ord)

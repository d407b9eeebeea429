-- Columns of the key table and their types. $1 = table oid. Catalog lookup only.
SELECT a.attname::text AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null
  FROM pg_catalog.pg_attribute a
 WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum

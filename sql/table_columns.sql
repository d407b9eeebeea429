-- Columns of the key table and their types. $1 = table oid. Catalog lookup only. `type` is the
-- type as declared (with its modifier: character varying(255), timestamp(6) without time zone);
-- `base_type` is the type without modifier, a domain's base type, which is what idemctl compares.
SELECT a.attname::text AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type,
       pg_catalog.format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END, NULL) AS base_type,
       a.attnotnull AS not_null
  FROM pg_catalog.pg_attribute a
  JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
 WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum

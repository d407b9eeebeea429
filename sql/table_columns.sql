-- Columns of the key table and their types. $1 = table oid. Catalog lookup only. `type` is the
-- type as declared (with its modifier: character varying(255), timestamp(6) without time zone);
-- `base_type` is the type without modifier, a domain's base type, which is what idemctl compares;
-- `serial`: its values come from a sequence (serial, bigserial, identity), so they follow insertion;
-- `enum_labels`: the values an enum type (or a domain over one) can hold, in order; NULL otherwise.
SELECT a.attname::text AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type,
       pg_catalog.format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END, NULL) AS base_type,
       a.attnotnull AS not_null,
       (SELECT pg_catalog.array_agg(e.enumlabel::text ORDER BY e.enumsortorder) FROM pg_catalog.pg_enum e
         WHERE e.enumtypid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END) AS enum_labels,
       a.attidentity <> '' OR coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%', false) AS serial
  FROM pg_catalog.pg_attribute a
  JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum

-- Whether the citus extension's metadata exists in this database (the other citus_*.sql statements
-- run only then). Catalog lookup only.
SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL AS installed

-- evict --vacuum: the relations VACUUM processes (the table, or each leaf partition of a partitioned
-- table) and whether the current role may vacuum each. PostgreSQL 15 and 16 let the relation's
-- owner, a superuser or the database's owner vacuum it (membership in the owning role counts);
-- PostgreSQL 17 adds the MAINTAIN privilege (and pg_maintain). $1 = table oid.
SELECT n.nspname::text AS schema_name,
       c.relname::text AS relation,
       pg_catalog.pg_get_userbyid(c.relowner) AS owner,
       (pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE')
        OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
        OR pg_catalog.pg_has_role(current_user,
                                  (SELECT d.datdba FROM pg_catalog.pg_database d
                                    WHERE d.datname = pg_catalog.current_database()), 'USAGE')
        OR CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 170000
                THEN pg_catalog.has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
       ) AS may_vacuum
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::bigint::oid) WHERE isleaf
                  UNION SELECT $1::bigint::oid)
   AND c.relkind <> 'p'
 ORDER BY n.nspname, c.relname

-- check: of the oldest $1 expired completed keys, how many a foreign key with ON DELETE NO ACTION
-- or RESTRICT still references (evict leaves those behind). The marker referenced is filled in with the
-- key's `OR EXISTS (...)`, an index probe of the referencing table per key (see
-- src/db/references.rs); run only when the referencing column is indexed. At most $1 rows of the
-- expiry index.
SELECT count(*) FILTER (WHERE referenced)::bigint AS referenced,
       count(*)::bigint AS examined
  FROM (SELECT (false/*{referenced}*/) AS referenced
          FROM {table}
         WHERE {expiry} < {cutoff}
           AND {done}
         ORDER BY {expiry}
         LIMIT $1::bigint) AS expired

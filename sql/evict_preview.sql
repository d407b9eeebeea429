-- evict --dry-run: what a run would delete, counted up to a cap, with the oldest and newest
-- candidates. Two short walks of the expiry index; changes nothing. $1 = cap, $2 = min-age seconds
-- or NULL.
--
-- When foreign keys with ON DELETE NO ACTION / RESTRICT reference the table, the markers are
-- filled in as in evict's batches (see src/db/references.rs): referenced flags each counted key a
-- referencing row still points to (an index probe per key), which the run would leave behind and
-- which `n` then does not count, and not_referenced leaves them out of the oldest and newest
-- candidates. Without such a key, `referenced` is a constant false and the statement is the plain
-- count.
SELECT walked.n - walked.referenced AS n,
       walked.referenced,
       walked.n AS walked,
       (SELECT {expires_at} FROM {table}
         WHERE {expiry} < {cutoff} AND {done}
           AND ($2::float8 IS NULL OR {created_at} < now() - make_interval(secs => $2::float8))/*{not_referenced}*/
         ORDER BY {expiry} LIMIT 1) AS oldest,
       (SELECT {expires_at} FROM {table}
         WHERE {expiry} < {cutoff} AND {done}
           AND ($2::float8 IS NULL OR {created_at} < now() - make_interval(secs => $2::float8))/*{not_referenced}*/
         ORDER BY {expiry} DESC LIMIT 1) AS newest
  FROM (SELECT count(*)::bigint AS n,
               count(*) FILTER (WHERE referenced)::bigint AS referenced
          FROM (SELECT (false/*{referenced}*/) AS referenced
                  FROM {table}
                 WHERE {expiry} < {cutoff} AND {done}
                   AND ($2::float8 IS NULL OR {created_at} < now() - make_interval(secs => $2::float8))
                 ORDER BY {expiry}
                 LIMIT $1::bigint + 1) AS capped) AS walked

-- evict --dry-run: what a run would delete, counted up to a cap, with the oldest and newest
-- candidates. Short walks of the expiry index, each of at most $1 + 1 rows; changes nothing.
-- $1 = cap, $2 = min-age seconds or NULL.
--
-- When foreign keys with ON DELETE NO ACTION / RESTRICT reference the table, the marker referenced
-- is filled in as in evict's batches (see src/db/references.rs): it flags each walked key a
-- referencing row still points to (an index probe per key), which the run would leave behind and
-- which `n` then does not count, and which the oldest and newest candidates pass over. The oldest
-- candidate is sought within the count's walk (only when that walk found one) and the newest within
-- a walk of as many rows from the newest expired end: each stops at the first key not referenced,
-- so neither reads more than the cap however many expired keys are referenced (the newest is NULL
-- when the newest $1 + 1 are all referenced). Without such a key, `referenced` is a constant false
-- and each candidate is the first row of its walk.
SELECT walked.n - walked.referenced AS n,
       walked.referenced,
       walked.n AS walked,
       CASE WHEN walked.n > walked.referenced THEN
         (SELECT w.expires_at
            FROM (SELECT {expires_at}{zone} AS expires_at, {expiry} AS expiry,
                         (false/*{referenced}*/) AS referenced
                    FROM {table}
                   WHERE {expiry} < {cutoff} AND {done}
                     AND ($2::float8 IS NULL OR {created_at} < (now() - make_interval(secs => $2::float8)){zone})
                   ORDER BY {table}.{expiry}
                   LIMIT $1::bigint + 1) AS w
           WHERE NOT w.referenced
           ORDER BY w.expiry LIMIT 1)
       END AS oldest,
       CASE WHEN walked.n > walked.referenced OR walked.n > $1::bigint THEN
         (SELECT w.expires_at
            FROM (SELECT {expires_at}{zone} AS expires_at, {expiry} AS expiry,
                         (false/*{referenced}*/) AS referenced
                    FROM {table}
                   WHERE {expiry} < {cutoff} AND {done}
                     AND ($2::float8 IS NULL OR {created_at} < (now() - make_interval(secs => $2::float8)){zone})
                   ORDER BY {table}.{expiry} DESC
                   LIMIT $1::bigint + 1) AS w
           WHERE NOT w.referenced
           ORDER BY w.expiry DESC LIMIT 1)
       END AS newest
  FROM (SELECT count(*)::bigint AS n,
               count(*) FILTER (WHERE referenced)::bigint AS referenced
          FROM (SELECT (false/*{referenced}*/) AS referenced
                  FROM {table}
                 WHERE {expiry} < {cutoff} AND {done}
                   AND ($2::float8 IS NULL OR {created_at} < (now() - make_interval(secs => $2::float8)){zone})
                 ORDER BY {table}.{expiry}
                 LIMIT $1::bigint + 1) AS capped) AS walked

-- evict --dry-run: what a run would delete, counted up to a cap, with the oldest and newest
-- candidates. Two short walks of the expiry index; changes nothing. $1 = cap, $2 = min-age seconds
-- or NULL.
SELECT (SELECT count(*)
          FROM (SELECT 1 FROM {table}
                 WHERE {expiry} < {cutoff} AND {done}
                   AND ($2::float8 IS NULL OR {created_at} < now() - make_interval(secs => $2::float8))
                 ORDER BY {expiry}
                 LIMIT $1::bigint + 1) AS capped)::bigint AS n,
       (SELECT {expires_at} FROM {table}
         WHERE {expiry} < {cutoff} AND {done}
           AND ($2::float8 IS NULL OR {created_at} < now() - make_interval(secs => $2::float8))
         ORDER BY {expiry} LIMIT 1) AS oldest,
       (SELECT {expires_at} FROM {table}
         WHERE {expiry} < {cutoff} AND {done}
           AND ($2::float8 IS NULL OR {created_at} < now() - make_interval(secs => $2::float8))
         ORDER BY {expiry} DESC LIMIT 1) AS newest

-- evict --dry-run: a sample of the keys a run would delete and of those --min-age holds back
-- (oldest first, up to $3 of each), and how many it holds back among the first $1 expired completed
-- keys. One walk of the expiry index, bounded by $1; changes nothing.
-- $1 = cap, $2 = min-age seconds or NULL, $3 = sample size.
-- When foreign keys with ON DELETE NO ACTION / RESTRICT reference the table, the marker referenced is
-- filled in as in evict's batches (an index probe per key, see src/db/references.rs): a key still
-- referenced, which the run would leave behind, is not in the sample of keys it would delete.
WITH walked AS MATERIALIZED (
    SELECT {tenant}::text AS api_key_id, {key}::text AS key, {expired_at}{zone} AS expires_at,
           {created_at}{zone} AS created_at,
           $2::float8 IS NOT NULL
             AND {created_at} >= (now() - make_interval(secs => $2::float8)){zone} AS held_back,
           (false/*{referenced}*/) AS referenced
      FROM {table}
     WHERE {expiry} < {cutoff} AND {done}
     ORDER BY {table}.{expiry}
     LIMIT $1::bigint
), numbered AS (
    SELECT *, row_number() OVER (PARTITION BY held_back ORDER BY expires_at) AS n
      FROM walked
     WHERE held_back OR NOT referenced
)
SELECT api_key_id, key, expires_at, created_at, held_back,
       (SELECT count(*) FROM walked WHERE held_back)::bigint AS held_back_count,
       (SELECT count(*) FROM walked)::bigint AS walked
  FROM numbered
 WHERE n <= $3::bigint
 ORDER BY held_back, expires_at

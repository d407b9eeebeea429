-- evict --min-age: the expired completed rows of a batch's range [$1, $2) that the guard kept
-- back because they were created less than $3 seconds ago. Only run with --min-age; one index range
-- of at most a batch.
SELECT count(*)::bigint AS too_young
  FROM {table}
 WHERE {expiry} >= coalesce($1::timestamptz, '-infinity'::timestamptz){zone}
   AND {expiry} < coalesce($2::timestamptz, 'infinity'::timestamptz){zone}
   AND {expiry} < {cutoff}
   AND {done}
   AND {created_at} >= (now() - make_interval(secs => $3::float8)){zone}

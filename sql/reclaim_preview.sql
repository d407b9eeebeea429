-- reclaim --dry-run / --plan: the in_progress keys a run would reclaim, oldest first, up to a cap.
-- A row without a key (in a key column that allows NULL) is never taken: no client can retry it.
-- A key counts when its owner took it (locked_at, or created_at where locked_at is NULL) longer
-- ago than the cutoff, by the database clock. Served by the optional partial index in
-- maintenance_indexes.sql (the ORDER BY walks it); without it, run only with --allow-scan.
-- Changes nothing and takes no row locks, so keys a live owner still holds are listed too.
-- $1 = --older-than in seconds, $2 = row cap; $3, $4, $5 = --api-key-id, --path, --method (NULL
-- when not given: each filter only narrows the walk of the in_progress index).
SELECT {tenant}::text AS api_key_id, {key}::text AS key,
       {request_method}::text AS request_method, {request_path}::text AS request_path,
       {locked_at}{zone} AS locked_at, {created_at}{zone} AS created_at,
       (extract(epoch FROM now()) - extract(epoch FROM {held_since}{zone}))::float8 AS age_seconds,
       now() AS db_now
  FROM {table} k
 WHERE {in_flight}
   AND {held_since} < (now() - make_interval(secs => $1::float8)){zone}
   AND {key} IS NOT NULL
   AND ($3::text IS NULL OR {tenant_is_p3})
   AND ($4::text IS NULL OR {request_path} = $4::text)
   AND ($5::text IS NULL OR {request_method} = $5::text)
 ORDER BY {k.held_since}
 LIMIT $2::bigint

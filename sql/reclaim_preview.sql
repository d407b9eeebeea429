-- reclaim --dry-run / --plan: the in_progress keys a run would reclaim, oldest first, up to a cap.
-- A key counts when its owner took it (locked_at, or created_at where locked_at is NULL) longer
-- ago than the cutoff, by the database clock. Served by the optional partial index in
-- maintenance_indexes.sql (the ORDER BY walks it); without it, run only with --allow-scan.
-- Changes nothing and takes no row locks, so keys a live owner still holds are listed too.
-- $1 = --older-than in seconds, $2 = row cap.
SELECT api_key_id::text AS api_key_id, key::text AS key,
       request_method::text AS request_method, request_path::text AS request_path,
       locked_at, created_at,
       extract(epoch FROM now() - coalesce(locked_at, created_at))::float8 AS age_seconds,
       now() AS db_now
  FROM {table}
 WHERE state = 'in_progress'
   AND coalesce(locked_at, created_at) < now() - make_interval(secs => $1::float8)
 ORDER BY coalesce(locked_at, created_at)
 LIMIT $2::bigint

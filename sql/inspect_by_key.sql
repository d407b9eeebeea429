-- inspect without --api-key-id, on a table with an index led by `key` (the reference table's
-- primary key): every tenant's row for the key. $1 = key, $2 = stuck-after seconds, $3 = row cap.
SELECT api_key_id, key, request_method, request_path, request_fingerprint, state,
       response_status, response_body::text AS response_body, locked_at, created_at, expires_at,
       now() AS db_now, xmax::text::bigint AS row_xmax,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS snapshot_xmax,
       state = 'in_progress'
         AND coalesce(locked_at, created_at) < now() - make_interval(secs => $2::float8) AS stuck
  FROM {table}
 WHERE key = $1
 ORDER BY api_key_id
 LIMIT $3

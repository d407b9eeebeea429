-- inspect: one key of one tenant, through the unique (api_key_id, key) index.
-- $1 = api_key_id, $2 = key, $3 = stuck-after in seconds.
SELECT api_key_id, key, request_method, request_path, request_fingerprint, state,
       response_status, response_body::text AS response_body, locked_at, created_at, expires_at,
       now() AS db_now, xmax::text::bigint AS row_xmax,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS snapshot_xmax,
       state = 'in_progress'
         AND coalesce(locked_at, created_at) < now() - make_interval(secs => $3::float8) AS stuck
  FROM {table}
 WHERE api_key_id = $1 AND key = $2

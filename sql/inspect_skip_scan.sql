-- inspect without --api-key-id, on a table whose only key index is (api_key_id, key): walk the
-- distinct tenants through that index (one probe per tenant, a "loose index scan") and look the key
-- up under each. Cost grows with the number of tenants, never with the number of rows; $3 caps the
-- tenants visited. $1 = key, $2 = stuck-after seconds, $3 = tenant cap.
WITH RECURSIVE tenants(id, n) AS (
    (SELECT api_key_id, 1 FROM {table} ORDER BY api_key_id LIMIT 1)
    UNION ALL
    SELECT (SELECT t.api_key_id FROM {table} t WHERE t.api_key_id > tenants.id
             ORDER BY t.api_key_id LIMIT 1), tenants.n + 1
      FROM tenants
     WHERE tenants.id IS NOT NULL AND tenants.n <= $3::int
)
SELECT r.api_key_id, r.key, r.request_method, r.request_path, r.request_fingerprint, r.state,
       r.response_status, r.response_body::text AS response_body, r.locked_at, r.created_at,
       r.expires_at, now() AS db_now, r.row_xmax,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS snapshot_xmax,
       r.state = 'in_progress'
         AND coalesce(r.locked_at, r.created_at) < now() - make_interval(secs => $2::float8) AS stuck,
       (SELECT max(n) FROM tenants) > $3::int AS truncated
  FROM tenants
  CROSS JOIN LATERAL (SELECT k.*, k.xmax::text::bigint AS row_xmax FROM {table} k WHERE k.api_key_id = tenants.id AND k.key = $1) r
 WHERE tenants.id IS NOT NULL
 ORDER BY r.api_key_id

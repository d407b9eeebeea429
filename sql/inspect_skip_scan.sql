-- inspect without --api-key-id, on a table whose only key index is (api_key_id, key): walk the
-- distinct tenants through that index (one probe per tenant, a "loose index scan") and look the key
-- up under each. Cost grows with the number of tenants, never with the number of rows; $3 caps the
-- tenants visited. $1 = key, $2 = stuck-after seconds, $3 = tenant cap.
WITH RECURSIVE tenants(id, n) AS (
    (SELECT {tenant}, 1 FROM {table} ORDER BY {tenant} LIMIT 1)
    UNION ALL
    SELECT (SELECT {t.tenant} FROM {table} t WHERE {t.tenant} > tenants.id
             ORDER BY {t.tenant} LIMIT 1), tenants.n + 1
      FROM tenants
     WHERE tenants.id IS NOT NULL AND tenants.n <= $3::int
)
SELECT {r.tenant}::text AS api_key_id, {r.key}::text AS key, {r.request_method} AS request_method,
       {r.request_path} AS request_path, {r.fingerprint} AS request_fingerprint, {r.state} AS state,
       {r.response_status} AS response_status, {r.response_body} AS response_body,
       {r.locked_at}{zone} AS locked_at, {r.created_at}{zone} AS created_at, {r.expires_at}{zone} AS expires_at,
       (SELECT array_agg(e.key ORDER BY e.n) FROM json_each_text(r.row_json) WITH ORDINALITY AS e(key, value, n)) AS row_columns,
       (SELECT array_agg(e.value ORDER BY e.n) FROM json_each_text(r.row_json) WITH ORDINALITY AS e(key, value, n)) AS row_values,
       now() AS db_now, r.row_xmax,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS snapshot_xmax,
       {r.in_flight}
         AND {r.held_since} < (now() - make_interval(secs => $2::float8)){zone} AS stuck,
       (SELECT max(n) FROM tenants) > $3::int AS truncated
  FROM tenants
  CROSS JOIN LATERAL (SELECT k.*, k.xmax::text::bigint AS row_xmax, row_to_json(k) AS row_json FROM {table} k WHERE {k.tenant} = tenants.id AND {k.key} = $1::text::{key_type}) r
 WHERE tenants.id IS NOT NULL
 ORDER BY 1

-- Every column of the row comes too (row_columns, row_values: names and values as text, in
-- column order), for inspect to show the whole row.
-- inspect: one key of one tenant, through the unique (api_key_id, key) index.
-- $1 = api_key_id, $2 = key, $3 = stuck-after in seconds.
SELECT {tenant}::text AS api_key_id, {key}::text AS key, {request_method} AS request_method,
       {request_path} AS request_path, {fingerprint} AS request_fingerprint, {state} AS state,
       {response_status} AS response_status, {response_body} AS response_body,
       {locked_at}{zone} AS locked_at, {created_at}{zone} AS created_at, {expires_at}{zone} AS expires_at,
       (SELECT array_agg(e.key ORDER BY e.n) FROM json_each_text(row_to_json(idemctl_row)) WITH ORDINALITY AS e(key, value, n)) AS row_columns,
       (SELECT array_agg(e.value ORDER BY e.n) FROM json_each_text(row_to_json(idemctl_row)) WITH ORDINALITY AS e(key, value, n)) AS row_values,
       now() AS db_now, xmax::text::bigint AS row_xmax,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS snapshot_xmax,
       {in_flight}
         AND {held_since} < (now() - make_interval(secs => $3::float8)){zone} AS stuck
  FROM {table} idemctl_row
 WHERE {tenant_is_p1} AND {key} = $2::text::{key_type}

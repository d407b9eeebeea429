-- Every column of the row comes too (row_columns, row_values: names and values as text, in
-- column order), for inspect to show the whole row.
-- inspect without the whole scope (--api-key-id, or --scope for each of its columns), on a table
-- with an index led by `key` (the reference table's primary key): every scope's row for the key,
-- narrowed to the scope columns given. $1 = key, $2 = stuck-after seconds, $3 = row cap, $4 = the
-- scope's values in its columns' order, NULL for a column not given (NULL: none given).
SELECT {tenant}::text AS api_key_id, {key}::text AS key, {request_method} AS request_method,
       {request_path} AS request_path, {fingerprint} AS request_fingerprint, {state} AS state,
       {response_status} AS response_status, {response_body} AS response_body,
       {locked_at}{zone} AS locked_at, {created_at}{zone} AS created_at, {expires_at}{zone} AS expires_at,
       (SELECT array_agg(e.key ORDER BY e.n) FROM json_each_text(row_to_json(idemctl_row)) WITH ORDINALITY AS e(key, value, n)) AS row_columns,
       (SELECT array_agg(e.value ORDER BY e.n) FROM json_each_text(row_to_json(idemctl_row)) WITH ORDINALITY AS e(key, value, n)) AS row_values,
       now() AS db_now, xmax::text::bigint AS row_xmax,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS snapshot_xmax,
       {in_flight}
         AND {held_since} < (now() - make_interval(secs => $2::float8)){zone} AS stuck
  FROM {table} idemctl_row
 WHERE {key} = $1::text::{key_type}
   AND {scope_within_p4}
 ORDER BY {tenant}
 LIMIT $3

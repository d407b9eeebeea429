-- inspect without the whole scope, on a table with no index led by `key` but one that lists only
-- scope columns before it (the identity index (tenant, key), or (request_type, client_id, key)):
-- walk the distinct values of those leading columns through that index (one probe each, a "loose
-- index scan"; several columns are compared as a row, which the index serves), and look the key
-- up under each, narrowed to the scope columns given. Cost grows with the number of distinct
-- leading values, never with the number of rows: $3 caps the values visited, $5 the rows listed.
-- $1 = key, $2 = stuck-after seconds, $3 = cap on values walked, $4 = the scope's values in its
-- columns' order, NULL for a column not given (NULL: none given), $5 = row cap.
WITH RECURSIVE scopes AS (
    (SELECT {walk_as}, 1 AS n FROM {table} ORDER BY {walk_list} LIMIT 1)
    UNION ALL
    SELECT next_scope.*, scopes.n + 1
      FROM scopes
      CROSS JOIN LATERAL (SELECT {t.walk_as} FROM {table} t WHERE {t.walk_row} > {scopes.walk_ids}
                           ORDER BY {t.walk_list} LIMIT 1) next_scope
     WHERE scopes.n <= $3::int
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
       (SELECT max(n) FROM scopes) > $3::int AS truncated
  FROM scopes
  CROSS JOIN LATERAL (SELECT k.*, k.xmax::text::bigint AS row_xmax, row_to_json(k) AS row_json
                        FROM {table} k
                       WHERE {k.walk_match} AND {k.key} = $1::text::{key_type}
                         AND {k.scope_within_p4}) r
 ORDER BY 1
 LIMIT $5

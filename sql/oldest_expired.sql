-- stats: eviction lag, i.e. how long the oldest expired completed key has waited for eviction.
-- Walks the expiry index from its start; expired in_progress rows (reclaim's business) are passed over.
-- Each figure in seconds is the difference of two epochs, never of two times: an infinite time
-- (`'-infinity'`) gives an infinite figure instead of an error, and an expanded year no overflow.
SELECT {tenant}::text AS api_key_id, {key}::text AS key, {expires_at}{zone} AS expires_at,
       (extract(epoch FROM now()) - extract(epoch FROM {expires_at}{zone}))::float8 AS lag_seconds
  FROM {table}
 WHERE {expiry} < {cutoff} AND {done}
 ORDER BY {table}.{expiry}
 LIMIT 1

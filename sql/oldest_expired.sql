-- stats: eviction lag, i.e. how long the oldest expired completed key has waited for eviction.
-- Walks the expiry index from its start; expired in_progress rows (reclaim's business) are passed over.
SELECT {tenant}::text AS api_key_id, {key}::text AS key, {expires_at}{zone} AS expires_at,
       extract(epoch FROM {cutoff} - {expiry})::float8 AS lag_seconds
  FROM {table}
 WHERE {expiry} < {cutoff} AND {done}
 ORDER BY {table}.{expiry}
 LIMIT 1

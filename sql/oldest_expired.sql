-- stats: eviction lag, i.e. how long the oldest expired completed key has waited for eviction.
-- Walks the expiry index from its start; expired in_progress rows (reclaim's business) are passed over.
SELECT api_key_id, key, expires_at,
       extract(epoch FROM now() - expires_at)::float8 AS lag_seconds
  FROM {table}
 WHERE expires_at < now() AND state = 'completed'
 ORDER BY expires_at
 LIMIT 1

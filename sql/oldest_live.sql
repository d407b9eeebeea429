-- stats: the live key that expires next (with one TTL for every key, also the oldest live key),
-- first entry of the expiry index at or after now().
SELECT api_key_id, key, created_at, expires_at,
       extract(epoch FROM now() - created_at)::float8 AS age_seconds
  FROM {table}
 WHERE expires_at >= now()
 ORDER BY expires_at
 LIMIT 1

-- stats: the live key that expires next (with one TTL for every key, also the oldest live key),
-- first entry of the expiry index at or after now().
SELECT {tenant}::text AS api_key_id, {key}::text AS key, {created_at}{zone} AS created_at,
       {expires_at}{zone} AS expires_at,
       (extract(epoch FROM now()) - extract(epoch FROM {created_at}{zone}))::float8 AS age_seconds
  FROM {table}
 WHERE {expiry} >= {cutoff}
 ORDER BY {table}.{expiry}
 LIMIT 1

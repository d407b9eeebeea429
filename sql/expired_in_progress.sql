-- evict / stats: expired rows still in_progress, which evict never deletes (reclaim's job).
-- Walks the expired range of the expiry index, counting up to a cap. $1 = cap.
SELECT count(*)::bigint AS n
  FROM (SELECT 1 FROM {table}
         WHERE expires_at < now() AND state = 'in_progress'
         ORDER BY expires_at
         LIMIT $1::bigint + 1) AS capped

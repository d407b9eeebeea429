-- evict / stats: expired rows still in_progress, which evict never deletes (reclaim's job).
-- Examines at most $1 expired rows, oldest first, along the expiry index: the count is exact when
-- fewer than $1 rows have expired (the usual case after an evict run drained the table) and a
-- lower bound otherwise.
SELECT count(*) FILTER (WHERE in_flight)::bigint AS n,
       count(*)::bigint AS examined
  FROM (SELECT {in_flight} AS in_flight
          FROM {table}
         WHERE {expiry} < {cutoff}
         ORDER BY {expiry}
         LIMIT $1::bigint) AS oldest_expired

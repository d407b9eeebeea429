-- stats / evict: expired completed keys still present, counted exactly up to a cap.
-- $1 = cap; a result above the cap means "at least cap".
SELECT count(*)::bigint AS n
  FROM (SELECT 1 FROM {table}
         WHERE {expiry} < {cutoff} AND {done}
         ORDER BY {expiry}
         LIMIT $1::bigint + 1) AS capped

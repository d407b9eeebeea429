-- evict's progress bar: the planner's estimate of the expired completed keys. Only planned, never
-- executed (EXPLAIN without ANALYZE), so it reads no row whatever plan the planner picks; the
-- figure is the top node's "Plan Rows".
EXPLAIN (FORMAT JSON)
SELECT 1
  FROM {table}
 WHERE {expiry} < {cutoff}
   AND {done}

-- evict's progress bar, and stats beyond its counting cap: the planner's estimate of the expired
-- completed keys. Only planned, never executed (EXPLAIN without ANALYZE), so it reads no row
-- whatever plan the planner picks; the figure is the top node's "Plan Rows". Run with
-- SET LOCAL jit = off: the plan is costly enough for JIT, which EXPLAIN would otherwise compile.
EXPLAIN (FORMAT JSON)
SELECT 1
  FROM {table}
 WHERE {expiry} < {cutoff}
   AND {done}

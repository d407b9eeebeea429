-- Inside a transaction of idemctl's own, before a statement planned as a scan of the whole table
-- (evict_estimate.sql): JIT off for that transaction only, since EXPLAIN would otherwise compile
-- the plan (tens to hundreds of ms on a large table) for nothing.
SET LOCAL jit = off

-- Optional index for `idemctl reclaim` and the stuck-key figures of `idemctl stats` / `check`.
--
-- What it buys: finding in_progress rows older than a cutoff becomes an index range scan
-- (milliseconds) instead of a scan of the whole table (about half a second per 2 M cached rows,
-- far more when the heap is not cached).
--
-- What it costs the API, on every request: the API's completion UPDATE changes `state`, which is
-- this index's predicate column. PostgreSQL can then no longer apply it as a HOT update, so each
-- completion writes a new entry into every index of the table. Measured on a 2 M-row table, HOT
-- completions went from 85 % to 0 % and writer latency rose by about 9 % (median; 8-26 % range).
--
-- Create it when reclaim runs regularly (or stuck-key alerts matter more than write cost); skip it
-- when reclaim is a rare manual action, and pass `--allow-scan` to reclaim on those occasions.
-- CONCURRENTLY keeps the table writable while the index builds; it cannot run inside a transaction.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_in_progress
    ON idempotency_keys ((coalesce(locked_at, created_at)))
    WHERE state = 'in_progress';

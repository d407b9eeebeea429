-- evict --vacuum, before VACUUM: one small transaction committed synchronously, which flushes the
-- WAL of the batches' asynchronous commits written before it (VACUUM cannot mark a page
-- all-visible while a commit on it may still be lost). Sent as one script, outside the pooler's
-- transaction handling.
BEGIN;
SET LOCAL synchronous_commit = on;
SELECT pg_catalog.pg_current_xact_id();
COMMIT

-- evict's durable points, and evict --vacuum before VACUUM: one small transaction committed
-- synchronously, which flushes the WAL of the batches' asynchronous commits written before it
-- (with synchronous standbys, it waits for them too; VACUUM cannot mark a page all-visible while a
-- commit on it may still be lost). Sent as one script, outside the pooler's transaction handling.
--
-- The transaction must write WAL of its own: PostgreSQL commits a transaction that wrote none
-- asynchronously whatever synchronous_commit says (taking a transaction id writes none). A
-- transactional logical decoding message with prefix 'idemctl' and no content is the smallest
-- record any role may write, and it changes no table; logical decoding passes it on only to
-- consumers that ask for messages.
BEGIN;
SET LOCAL synchronous_commit = on;
SELECT pg_catalog.pg_logical_emit_message(true, 'idemctl', '');
COMMIT

-- evict's durable points, and evict --vacuum before VACUUM: one small transaction committed
-- synchronously, which flushes the WAL of the batches' asynchronous commits written before it
-- (with synchronous standbys, it waits for them too; VACUUM cannot mark a page all-visible while a
-- commit on it may still be lost). Sent as two scripts (the COMMIT last), outside the pooler's
-- transaction handling.
--
-- The transaction must write WAL of its own: PostgreSQL commits a transaction that wrote none
-- asynchronously whatever synchronous_commit says (taking a transaction id writes none). A
-- transactional logical decoding message with prefix 'idemctl' and no content is the smallest
-- record any role may write, and it changes no table; logical decoding passes it on only to
-- consumers that ask for messages.
--
-- idemctl sends the COMMIT on its own, after the rest: a wait for synchronous standbys that is
-- cancelled commits with a plain WARNING, which idemctl must tell from the warnings of the
-- statements before it (a database nearing transaction id wraparound warns at every new xid).
-- client_min_messages = warning makes sure that warning reaches idemctl whatever the role sets.
BEGIN;
SET LOCAL synchronous_commit = on;
SET LOCAL client_min_messages = warning;
SELECT pg_catalog.pg_logical_emit_message(true, 'idemctl', '');
COMMIT

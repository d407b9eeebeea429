-- inspect: is the transaction that last locked or changed the key's row still running? Reads the
-- commit log only: no lock is taken, nothing waits. $1 = the row's xmax as a 64-bit transaction id.
SELECT pg_xact_status($1::bigint::text::xid8)::text AS status

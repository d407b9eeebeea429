-- Citus, in the transaction of a batch that writes through the coordinator (a reference table's
-- rows are written on every placement, on the workers' connections of this transaction): the
-- SET LOCALs that follow in this transaction (evict's lock_timeout) are passed on to those
-- connections, so a row wait on a worker is bounded as on one server. Local to the transaction:
-- no other session, and no later transaction of this one, is affected.
SET LOCAL citus.propagate_set_commands = 'local'

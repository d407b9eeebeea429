-- Citus worker: make this transaction's catalog queries see the shards (Citus hides them from
-- pg_class for client sessions). Transaction-scoped, so nothing outlives idemctl's transaction.
SET LOCAL citus.override_table_visibility = off

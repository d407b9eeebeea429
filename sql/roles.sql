-- Least-privilege roles for idemctl: one group role per job, each granted only what that job's
-- statements need on the key table. Give people and cron jobs their own LOGIN roles and make them
-- members of a group (examples at the end); `idemctl check` shows what the connected role may do.
--
--   idemctl_reader     inspect, stats, check, and reclaim's preview (--dry-run, --plan)
--   idemctl_evictor    evict
--   idemctl_reclaimer  reclaim, with --action delete or --action fail
--
-- Apply after sql/schema.sql, as a role that may create roles (CREATEROLE, or a superuser) and
-- grant on the table (its owner, or a superuser):
--
--   psql -v ON_ERROR_STOP=1 -d yourdb -f sql/roles.sql
--
-- Re-running it is safe, also at the same time as another run: a group role that exists (roles
-- belong to the whole cluster, so it may come from another database) is left as it is, and the
-- grants are re-applied. It uses no psql meta-commands, so any SQL client can run it.
--
-- Adapting it: it is written for the default table, public.idempotency_keys. For another table
-- (idemctl --table), replace `public.idempotency_keys` throughout, and `public` in the schema
-- grant with the table's schema, e.g.
--   sed 's/public\.idempotency_keys/billing.idem_keys/g; s/ON SCHEMA public/ON SCHEMA billing/' sql/roles.sql
-- For several key tables, run it once per table: the group roles are shared, the grants add up.
-- On a partitioned table, grant on the parent (as here): queries through it are checked against
-- the parent's privileges only.
--
-- What no grant is needed for: reading the catalog (table, columns, indexes, sizes, vacuum
-- statistics), advisory locks (evict and reclaim take one so that two runs never overlap), and
-- setting the session timeouts idemctl sets on every connection.

-- ---- The group roles ---------------------------------------------------------------------------
-- NOLOGIN: nobody connects as a group; members inherit its privileges (INHERIT is the default).
DO $$
DECLARE
    wanted constant text[][] := ARRAY[
        ['idemctl_reader',    'idemctl: inspect, stats, check (read-only). See sql/roles.sql.'],
        ['idemctl_evictor',   'idemctl: evict expired completed keys. See sql/roles.sql.'],
        ['idemctl_reclaimer', 'idemctl: reclaim stuck in_progress keys. See sql/roles.sql.']
    ];
    i int;
BEGIN
    FOR i IN 1 .. array_length(wanted, 1) LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = wanted[i][1]) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', wanted[i][1]);
                EXECUTE format('COMMENT ON ROLE %I IS %L', wanted[i][1], wanted[i][2]);
            EXCEPTION
                -- Another session created it between the check and here: theirs will do.
                WHEN duplicate_object OR unique_violation THEN NULL;
            END;
        END IF;
    END LOOP;
END
$$;

-- Every group must be able to look up names in the table's schema.
GRANT USAGE ON SCHEMA public TO idemctl_reader, idemctl_evictor, idemctl_reclaimer;

-- ---- idemctl_reader: inspect, stats, check -----------------------------------------------------
-- SELECT: inspect reads one key's row; stats reads the oldest live and expired keys and counts
-- the expired backlog and stuck keys; check runs the same figures for its alert thresholds;
-- reclaim --dry-run and --plan list stuck keys. Nothing here can change a row.
GRANT SELECT ON public.idempotency_keys TO idemctl_reader;

-- ---- idemctl_evictor: evict ----------------------------------------------------------------------
-- SELECT: evict's DELETE reads the columns of its WHERE clause (expires_at, state, created_at),
-- which PostgreSQL checks as SELECT; evict also sizes its batches and counts what is left.
GRANT SELECT ON public.idempotency_keys TO idemctl_evictor;
-- DELETE: removing expired completed keys is the job.
GRANT DELETE ON public.idempotency_keys TO idemctl_evictor;
-- UPDATE (expires_at): evict never updates a row, but when a live request holds a row, evict
-- redoes that batch with SELECT ... FOR UPDATE SKIP LOCKED so it never waits on the request, and
-- PostgreSQL grants row locks only to roles with UPDATE on at least one column. One column is
-- enough; a role that may DELETE any row gains nothing destructive from changing its expiry.
GRANT UPDATE (expires_at) ON public.idempotency_keys TO idemctl_evictor;

-- ---- idemctl_reclaimer: reclaim ------------------------------------------------------------------
-- SELECT: reclaim lists the stuck keys it would take (--dry-run, --plan), and its statements read
-- state, locked_at, created_at, api_key_id and key in their WHERE and RETURNING clauses.
GRANT SELECT ON public.idempotency_keys TO idemctl_reclaimer;
-- DELETE: --action delete (the default) removes a stuck key, so the client's retry runs afresh.
GRANT DELETE ON public.idempotency_keys TO idemctl_reclaimer;
-- UPDATE of exactly the columns --action fail writes: it marks a stuck key completed with a
-- stored error response. The same grant covers the FOR UPDATE SKIP LOCKED row locks both actions
-- take, so a key whose owner is still alive (and holds its row) is skipped, never waited on.
-- expires_at: --action fail keeps the stored error at least --keep-failed-for (24h) from now, so
-- the client's retries get it instead of running again after the next evict.
-- The key, tenant, request and the other timestamps stay read-only.
GRANT UPDATE (state, response_status, response_body, expires_at) ON public.idempotency_keys TO idemctl_reclaimer;

-- ---- Optional ------------------------------------------------------------------------------------
-- When another run holds the maintenance lock, idemctl names the holding session from
-- pg_stat_activity. A role sees the details (query, client address) of other roles' sessions
-- only as a member of pg_read_all_stats (or pg_monitor, which includes it); without it, idemctl
-- still reports that the lock is busy. evict's default pace adapts to what the other sessions
-- are doing, which it can see only with the same membership; without it evict paces itself at a
-- fixed 20 % duty cycle and says so on every run (--duty-cycle 20 keeps that pace without the
-- warning). evict --max-replica-lag needs it too.
--   GRANT pg_read_all_stats TO idemctl_evictor, idemctl_reclaimer;

-- ---- Login roles: examples ---------------------------------------------------------------------
-- One login per use, so pg_stat_activity and the logs say who ran what. Role settings apply to
-- every session of the role, also to one that bypasses idemctl's own timeouts (defence in depth).
--
--   CREATE ROLE idemctl_cron LOGIN PASSWORD 'change me' IN ROLE idemctl_evictor;
--   ALTER ROLE idemctl_cron SET statement_timeout = '30s';
--   ALTER ROLE idemctl_cron SET lock_timeout = '2s';
--   ALTER ROLE idemctl_cron SET idle_in_transaction_session_timeout = '60s';
--
--   CREATE ROLE idemctl_oncall LOGIN PASSWORD 'change me' IN ROLE idemctl_reader, idemctl_reclaimer;
--   ALTER ROLE idemctl_oncall SET statement_timeout = '30s';
--   ALTER ROLE idemctl_oncall SET lock_timeout = '2s';
--
--   CREATE ROLE idemctl_monitor LOGIN PASSWORD 'change me' IN ROLE idemctl_reader;
--   ALTER ROLE idemctl_monitor SET default_transaction_read_only = on;
--
-- With password_encryption = scram-sha-256 the server stores only a SCRAM verifier; better
-- still, set the password with psql's \password so it never appears in a statement or a log.

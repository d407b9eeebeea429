-- evict --max-replica-lag: every physical standby streaming from this primary, with how far its replay
-- is behind. Read between batches, when the session has no transaction open.
--
-- behind_bytes compares the standby's replay position with the WAL flushed here; replay_position lets
-- the caller notice a position that stopped moving. replay_lag_seconds is PostgreSQL's own
-- measurement, which is NULL after an idle spell and stops changing while replay is stuck, so it is
-- only a lower bound; the caller combines both (see the evict module). Logical replication senders
-- (their slot is logical) and WAL receivers that do not replay (pg_receivewal, pg_basebackup: no
-- replay position) are left out.
SELECT r.pid,
       coalesce(nullif(r.application_name, ''), host(r.client_addr), 'pid ' || r.pid)::text AS name,
       r.state::text AS state,
       pg_catalog.pg_wal_lsn_diff(r.replay_lsn, '0/0')::bigint AS replay_position,
       greatest(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_flush_lsn(), r.replay_lsn), 0)::bigint AS behind_bytes,
       extract(epoch FROM r.replay_lag)::float8 AS replay_lag_seconds
  FROM pg_catalog.pg_stat_replication r
 WHERE r.replay_lsn IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s
                    WHERE s.active_pid = r.pid AND s.slot_type = 'logical')
 ORDER BY r.pid

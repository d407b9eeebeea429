-- stats, when a foreign key with ON DELETE NO ACTION / RESTRICT references the key table through an
-- indexed column: the eviction lag of the oldest expired completed key that evict can delete, and
-- the expired keys it leaves behind because a referencing row still points to them (their count
-- and the oldest). The marker referenced is filled in with one `OR EXISTS (...)` per such key, an
-- index probe of the referencing table per key (see src/db/references.rs). At most $1 + 1 rows of
-- the expiry index, from its start: the oldest $1 are examined, and one more tells whether the walk
-- stopped at its cap (capped) or saw every expired key; expired in_progress rows (reclaim's
-- business) are passed over. Returns at most two rows, the oldest key of each kind, each with the
-- walk's counts (none when nothing expired waits).
WITH walked_all AS MATERIALIZED (
    SELECT {tenant}::text AS api_key_id, {key}::text AS key, {expires_at}{zone} AS expires_at,
           (extract(epoch FROM now()) - extract(epoch FROM {expires_at}{zone}))::float8 AS lag_seconds,
           (false/*{referenced}*/) AS referenced
      FROM {table}
     WHERE {expiry} < {cutoff} AND {done}
     ORDER BY {table}.{expiry}
     LIMIT $1::bigint + 1
), walked AS MATERIALIZED (
    SELECT * FROM walked_all ORDER BY lag_seconds DESC LIMIT $1::bigint
), oldest AS (
    SELECT DISTINCT ON (referenced) api_key_id, key, expires_at, lag_seconds, referenced
      FROM walked
     ORDER BY referenced, lag_seconds DESC
)
SELECT api_key_id, key, expires_at, lag_seconds, referenced,
       (SELECT count(*) FROM walked WHERE referenced)::bigint AS referenced_count,
       (SELECT count(*) FROM walked)::bigint AS examined,
       (SELECT count(*) FROM walked_all)::bigint > $1::bigint AS capped,
       (SELECT min(lag_seconds) FROM walked)::float8 AS newest_examined_seconds
  FROM oldest

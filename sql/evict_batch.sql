-- evict: one batch, one short transaction, run under a lock_timeout of a few milliseconds.
--
-- Walks the expiry index forward from where the previous batch ended ($1, NULL = the start), so
-- no batch re-walks the index entries earlier batches left behind. The range ends before the
-- expires_at of the ($2 + 1)-th expired row from there (an index-only probe), so it holds at most
-- $2 rows. The DELETE is a plain index-range scan; it re-checks expiry by the database clock, the
-- state, and the --min-age guard ($3 seconds, NULL = none) on every row it removes. It would wait
-- on a row a live request has locked, which is why it runs under a very short lock_timeout; when
-- that fires, the same range is done again with evict_batch_skip_locked.sql.
--
-- Returns the rows deleted, the range's end (where the next batch starts; NULL = nothing expired
-- lies past it), and the expired completed rows of the range kept back by --min-age.
WITH bound AS (
    SELECT expires_at
      FROM {table}
     WHERE expires_at >= coalesce($1::timestamptz, '-infinity'::timestamptz)
       AND expires_at < now()
     ORDER BY expires_at
    OFFSET $2::bigint
     LIMIT 1
), deleted AS (
    DELETE FROM {table}
     WHERE expires_at >= coalesce($1::timestamptz, '-infinity'::timestamptz)
       AND expires_at < coalesce((SELECT expires_at FROM bound), 'infinity'::timestamptz)
       AND expires_at < now()
       AND state = 'completed'
       AND ($3::float8 IS NULL OR created_at < now() - make_interval(secs => $3::float8))
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted)::bigint AS deleted,
       (SELECT expires_at FROM bound) AS range_end,
       (SELECT count(*)
          FROM {table}
         WHERE $3::float8 IS NOT NULL
           AND expires_at >= coalesce($1::timestamptz, '-infinity'::timestamptz)
           AND expires_at < coalesce((SELECT expires_at FROM bound), 'infinity'::timestamptz)
           AND expires_at < now()
           AND state = 'completed'
           AND created_at >= now() - make_interval(secs => $3::float8))::bigint AS too_young

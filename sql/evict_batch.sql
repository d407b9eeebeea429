-- evict: one batch, one short statement in its own transaction, under a lock_timeout of a few
-- milliseconds.
--
-- Deletes the expired completed rows of one claimed range of the expiry index, [$1, $2) (NULL = from
-- the start / up to now()), which evict_range_end.sql sized to hold at most one batch. Successive
-- ranges walk the index forward, so no batch re-walks the entries earlier batches left behind. The
-- DELETE is a single pass over an index range; it re-checks expiry by the database clock, the
-- state, and the --min-age guard ($3 seconds, NULL = none) on every row it removes. It would wait
-- on a row a live request has locked, which is why it runs under a very short lock_timeout; when
-- that fires, the range is done again with evict_batch_skip_locked.sql.
--
-- The marker not_referenced is filled in when foreign keys with ON DELETE NO ACTION / RESTRICT reference
-- the table: it leaves out the keys a referencing row still points to (an index probe of each
-- referencing table per key, see src/db/references.rs), which evict counts instead of failing on.
--
-- No RETURNING: the command tag carries the count, and RETURNING would read every deleted row a
-- second time (it doubled the statement's buffer accesses).
DELETE FROM {table}
 WHERE {expiry} >= coalesce($1::timestamptz, '-infinity'::timestamptz){zone}
   AND {expiry} < coalesce($2::timestamptz, 'infinity'::timestamptz){zone}
   AND {expiry} < {cutoff}
   AND {done}
   AND ($3::float8 IS NULL OR {created_at} < (now() - make_interval(secs => $3::float8)){zone})/*{not_referenced}*/

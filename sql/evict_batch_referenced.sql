-- evict: the expired completed rows of a batch's range [$1, $2) (NULL = from the start / up to the
-- cutoff) that a foreign key with ON DELETE NO ACTION / RESTRICT still references, which the batch
-- left. The marker referenced is filled in with one `OR EXISTS (...)` per such key, an index probe of the
-- referencing table (see src/db/references.rs); run only when the table has one, for a range the
-- batch did not empty. One index range of at most a batch.
SELECT count(*)::bigint AS referenced
  FROM {table}
 WHERE {expiry} >= coalesce($1::timestamptz, '-infinity'::timestamptz){zone}
   AND {expiry} < coalesce($2::timestamptz, 'infinity'::timestamptz){zone}
   AND {expiry} < {cutoff}
   AND {done}
   AND (false/*{referenced}*/)

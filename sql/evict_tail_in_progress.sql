-- evict: in the last range of a run, [$1, now()) (NULL = from the start), the expired rows that are
-- not completed (in_progress: reclaim's business), which the run passes over. The range held fewer
-- than one batch of rows when it was claimed, so this walk is bounded.
SELECT count(*)::bigint AS passed_over
  FROM {table}
 WHERE {expiry} >= coalesce($1::timestamptz, '-infinity'::timestamptz)
   AND {expiry} < {cutoff}
   AND NOT ({done})

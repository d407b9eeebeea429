-- evict: the expired rows of a range [$1, $2) (NULL = from the start / up to the cutoff) left in
-- the table: completed ones (held by live requests, or kept back by --min-age) and those not
-- completed (in_progress: reclaim's business), which the run passes over. Run for a batch's range
-- that the batch did not empty, or a run of ties at one instant ([$1, $1 + 1 us)), and again after
-- the run for each such range behind where it stopped, so the walk is bounded by one batch.
SELECT count(*) FILTER (WHERE done)::bigint AS completed,
       count(*) FILTER (WHERE NOT done)::bigint AS passed_over
  FROM (SELECT ({done}) AS done
          FROM {table}
         WHERE {expiry} >= coalesce($1::timestamptz, '-infinity'::timestamptz){zone}
           AND {expiry} < coalesce($2::timestamptz, 'infinity'::timestamptz){zone}
           AND {expiry} < {cutoff}) AS range_rows

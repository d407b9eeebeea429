-- evict: expired keys not completed (in_progress: reclaim's business) left after a run, counted
-- from where the run stopped ($2, NULL = the start of the expiry index), examining at most $1
-- expired rows, so the count neither walks the index entries the run has just made dead nor more
-- than the cap. Those the run passed over behind that point are added by the caller.
SELECT count(*) FILTER (WHERE NOT done)::bigint AS n,
       count(*)::bigint AS examined
  FROM (SELECT ({done}) AS done
          FROM {table}
         WHERE {expiry} >= coalesce($2::timestamptz, '-infinity'::timestamptz){zone}
           AND {expiry} < {cutoff}
         ORDER BY {expiry}
         LIMIT $1::bigint) AS ahead

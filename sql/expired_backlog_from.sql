-- evict: expired completed keys left after a run, counted from where the run stopped ($2, NULL =
-- the start of the expiry index) up to a cap ($1), so the count does not walk the index entries the
-- run has just made dead. Rows the run skipped behind that point (held by live requests) are added
-- by the caller.
SELECT count(*)::bigint AS n
  FROM (SELECT 1
          FROM {table}
         WHERE {expiry} >= coalesce($2::timestamptz, '-infinity'::timestamptz){zone}
           AND {expiry} < {cutoff}
           AND {done}
         ORDER BY {expiry}
         LIMIT $1::bigint + 1) AS capped

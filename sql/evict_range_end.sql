-- evict: claim the next batch range. From $1 (NULL = the start of the expiry index), returns the
-- first expired row's expires_at and the expires_at of the ($2 + 1)-th one (NULL when fewer rows
-- are left). The range [$1, range_end) then holds at most $2 rows; when first = range_end, more
-- than $2 rows share that one instant and are taken with evict_batch_skip_locked.sql instead.
-- Two index-only probes of the expiry index; no row is locked or changed.
SELECT (SELECT {expiry}{zone}
          FROM {table}
         WHERE {expiry} >= coalesce($1::timestamptz, '-infinity'::timestamptz){zone}
           AND {expiry} < {cutoff}
         ORDER BY {expiry}
         LIMIT 1) AS first,
       (SELECT {expiry}{zone}
          FROM {table}
         WHERE {expiry} >= coalesce($1::timestamptz, '-infinity'::timestamptz){zone}
           AND {expiry} < {cutoff}
         ORDER BY {expiry}
        OFFSET $2::bigint
         LIMIT 1) AS range_end

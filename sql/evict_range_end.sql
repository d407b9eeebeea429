-- evict: where a batch starting at $1 (NULL = the start) ends: the expires_at of the ($2 + 1)-th
-- expired row from there, or NULL when fewer rows are left. An index-only probe of the expiry index.
SELECT (SELECT expires_at
          FROM {table}
         WHERE expires_at >= coalesce($1::timestamptz, '-infinity'::timestamptz)
           AND expires_at < now()
         ORDER BY expires_at
        OFFSET $2::bigint
         LIMIT 1) AS range_end

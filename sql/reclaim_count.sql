-- reclaim: the stuck keys a run would take, counted up to a cap (the preview's count, and the
-- A row without a key (in a key column that allows NULL) is never taken: no client can retry it.
-- sweep's before and after): in_progress keys whose owner took them longer ago than the cutoff and
-- that match the run's filters. Served by the optional partial index in maintenance_indexes.sql;
-- without it, only run when the operator passes --allow-scan.
-- $1 = --older-than in seconds, $2 = cap, $3, $4, $5 = --api-key-id, --path, --method (NULL when
-- not given).
SELECT count(*)::bigint AS n, min(since) AS oldest
  FROM (SELECT {held_since}{zone} AS since
          FROM {table}
         WHERE {in_flight}
           AND {held_since} < (now() - make_interval(secs => $1::float8)){zone}
           AND {key} IS NOT NULL
           AND ($3::text IS NULL OR {tenant_is_p3})
           AND ($4::text IS NULL OR {request_path} = $4::text)
           AND ($5::text IS NULL OR {request_method} = $5::text)
         ORDER BY {held_since}
         LIMIT $2::bigint + 1) AS capped

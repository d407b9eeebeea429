-- stats / check: in_progress keys whose owner took them longer ago than the cutoff, counted up to a
-- cap, with the oldest: the keys reclaim would take, so a row without a key (which reclaim leaves
-- alone: no client can retry it) is not counted. Served by the optional partial index in
-- maintenance_indexes.sql; without it, only run when the operator passes --allow-scan.
-- $1 = stuck-after seconds, $2 = cap.
SELECT count(*)::bigint AS n, min(since) AS oldest
  FROM (SELECT {held_since}{zone} AS since
          FROM {table}
         WHERE {in_flight}
           AND {held_since} < (now() - make_interval(secs => $1::float8)){zone}
           AND {key} IS NOT NULL
         ORDER BY {held_since}
         LIMIT $2::bigint + 1) AS capped

-- top: the in_progress key held longest, when held longer than the cutoff (the oldest stuck key),
-- with how long it has been held: the first entry of the optional in_progress index that has a key
-- (reclaim leaves a row without one alone, and stuck_count.sql does not count it). Runs only
-- where stuck_count.sql does (that index, or --allow-scan). $1 = stuck-after seconds.
SELECT {tenant}::text AS api_key_id, {key}::text AS key, {expires_at}{zone} AS expires_at,
       (extract(epoch FROM now()) - extract(epoch FROM {held_since}{zone}))::float8 AS held_seconds
  FROM {table}
 WHERE {in_flight}
   AND {held_since} < (now() - make_interval(secs => $1::float8)){zone}
   AND {key} IS NOT NULL
 ORDER BY {held_since}
 LIMIT 1

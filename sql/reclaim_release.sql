-- reclaim --action release: one batch. Clears the lock time of stuck in-flight keys, oldest first,
-- A row without a key (in a key column that allows NULL) is never taken: no client can retry it.
-- and leaves the row, so the client's retry takes the key again and resumes from the recovery
-- point the dead owner reached (the rocket-rides table's protocol). Rows a live owner holds are
-- skipped (SKIP LOCKED); the in-flight test and the cutoff are re-checked on each row.
-- $1 = --older-than in seconds, $2 = row cap; $3, $4, $5 = --api-key-id, --path, --method (NULL
-- when not given).
WITH candidates AS (
    SELECT tableoid, ctid
      FROM {table}
     WHERE {in_flight}
       AND {held_since} < (now() - make_interval(secs => $1::float8)){zone}
       AND {key} IS NOT NULL
       AND ($3::text IS NULL OR {tenant_is_p3})
       AND ($4::text IS NULL OR {request_path} = $4::text)
       AND ($5::text IS NULL OR {request_method} = $5::text)
     ORDER BY {held_since}
     LIMIT $2::bigint
       FOR UPDATE SKIP LOCKED
), reclaimed AS (
    UPDATE {table}
       SET {locked_at_col} = NULL
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM candidates))
       AND (tableoid, ctid) IN (SELECT tableoid, ctid FROM candidates)
       AND {in_flight}
       AND {held_since} < (now() - make_interval(secs => $1::float8)){zone}
    RETURNING {tenant}::text AS api_key_id, {key}::text AS key
)
SELECT count(*)::bigint AS reclaimed,
       coalesce(array_agg(api_key_id), '{}') AS api_key_ids,
       coalesce(array_agg(key), '{}') AS keys
  FROM reclaimed

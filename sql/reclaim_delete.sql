-- reclaim --action delete: one batch, one statement, one short transaction.
-- A row without a key (in a key column that allows NULL) is never taken: no client can retry it.
--
-- Takes up to $2 of the oldest stuck in_progress keys (held longer than $1 seconds, from locked_at
-- or else created_at, by the database clock) through the optional partial index, locking them with
-- FOR UPDATE SKIP LOCKED: a key whose owner still holds its row lock is alive and is skipped, never
-- waited on. The DELETE re-checks state and cutoff on every row it removes, so a key that completed
-- or was taken again meanwhile is left alone.
-- Rows are matched by physical address (ctid) and, because a ctid is only unique within one
-- partition, by partition (tableoid) too. The key becomes absent and the client's retry runs
-- afresh. $1 = --older-than in seconds, $2 = batch size, $3, $4, $5 = --api-key-id, --path,
-- --method (NULL when not given: each filter only narrows the walk of the in_progress index).
-- Returns how many keys were deleted, and which (as text arrays, in the same order).
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
    DELETE FROM {table}
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

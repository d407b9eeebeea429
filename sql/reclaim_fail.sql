-- reclaim --action fail: one batch, one statement, one short transaction.
-- A row without a key (in a key column that allows NULL) is never taken: no client can retry it.
--
-- Takes up to $2 of the oldest stuck in_progress keys (held longer than $1 seconds, from locked_at
-- or else created_at, by the database clock) through the optional partial index, locking them with
-- FOR UPDATE SKIP LOCKED: a key whose owner still holds its row lock is alive and is skipped, never
-- waited on. The UPDATE re-checks state and cutoff on every row it changes, so a key that completed
-- or was taken again meanwhile is left alone.
-- Rows are matched by physical address (ctid) and, because a ctid is only unique within one
-- partition, by partition (tableoid) too. Each key becomes completed with the stored error
-- response, which the API replays to a retry instead of running the request again; expires_at is
-- moved to at least now + $5 seconds (--keep-failed-for; 0 keeps it), so the stored error outlives
-- the client's retries instead of going at the next evict. $1 = --older-than in seconds, $2 = batch
-- size, $3 = response status, $4 = response body (a JSON object), $5 = keep-failed-for seconds, $6, $7, $8 = --api-key-id, --path, --method (NULL when not given).
-- Returns how many keys were failed, and which (as text arrays, in the same order).
WITH candidates AS (
    SELECT tableoid, ctid
      FROM {table}
     WHERE {in_flight}
       AND {held_since} < (now() - make_interval(secs => $1::float8)){zone}
       AND {key} IS NOT NULL
       AND ($6::text IS NULL OR {tenant_is_p6})
       AND ($7::text IS NULL OR {request_path} = $7::text)
       AND ($8::text IS NULL OR {request_method} = $8::text)
     ORDER BY {held_since}
     LIMIT $2::bigint
       FOR UPDATE SKIP LOCKED
), reclaimed AS (
    UPDATE {table}
       SET {fail_state}
           {response_status_col} = $3::int,
           {response_body_col} = {fail_body_p4_k5}{keep_failed_p5}
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

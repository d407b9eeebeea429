-- reclaim --apply with --action fail: one batch of a reviewed plan, one statement, one short
-- transaction.
--
-- The plan's rows arrive as parallel arrays and are joined to the table through its unique
-- (api_key_id, key) index. A row is changed only if it is exactly as the plan saw it (still
-- in_progress, same locked_at, same created_at), still held longer than the cutoff, and not locked
-- by a live owner (FOR UPDATE SKIP LOCKED: never waited on); the UPDATE re-checks state and cutoff.
-- Rows are matched by physical address (ctid) and, because a ctid is only unique within one
-- partition, by partition (tableoid) too.
-- It becomes completed with the stored error response; expires_at is moved to at least now + $8
-- seconds (0 keeps it). Every plan row comes
-- back with its outcome, judged on the statement's snapshot: reclaimed, gone, completed,
-- other_state, changed (taken again since the plan), too_young, or held (unchanged but locked: its
-- owner is alive).
-- $1 = api_key_id[], $2 = key[], $3 = locked_at[] (NULL where the plan had none),
-- $4 = created_at[], $5 = --older-than in seconds (the plan's), $6 = response status,
-- $7 = response body (a JSON object), $8 = keep-failed-for seconds.
WITH planned AS (
    SELECT *
      FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[])
           WITH ORDINALITY AS p(api_key_id, key, locked_at, created_at, ord)
), candidates AS (
    SELECT t.tableoid, t.ctid
      FROM planned p
      JOIN {table} t ON t.api_key_id = p.api_key_id AND t.key = p.key
     WHERE t.state = 'in_progress'
       AND t.locked_at IS NOT DISTINCT FROM p.locked_at
       AND t.created_at = p.created_at
       AND coalesce(t.locked_at, t.created_at) < now() - make_interval(secs => $5::float8)
       FOR UPDATE OF t SKIP LOCKED
), reclaimed AS (
    UPDATE {table}
       SET state = 'completed',
           response_status = $6::int,
           response_body = $7::jsonb,
           expires_at = CASE WHEN $8::float8 > 0
                             THEN greatest(expires_at, now() + make_interval(secs => $8::float8))
                             ELSE expires_at END
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM candidates))
       AND (tableoid, ctid) IN (SELECT tableoid, ctid FROM candidates)
       AND state = 'in_progress'
       AND coalesce(locked_at, created_at) < now() - make_interval(secs => $5::float8)
    RETURNING api_key_id::text AS api_key_id, key::text AS key
)
SELECT p.ord,
       CASE WHEN r.key IS NOT NULL THEN 'reclaimed'
            WHEN t.key IS NULL THEN 'gone'
            WHEN t.state = 'completed' THEN 'completed'
            WHEN t.state <> 'in_progress' THEN 'other_state'
            WHEN t.locked_at IS DISTINCT FROM p.locked_at OR t.created_at <> p.created_at THEN 'changed'
            WHEN coalesce(t.locked_at, t.created_at) >= now() - make_interval(secs => $5::float8) THEN 'too_young'
            ELSE 'held'
       END AS outcome,
       t.state::text AS state
  FROM planned p
  LEFT JOIN reclaimed r ON r.api_key_id = p.api_key_id AND r.key = p.key
  LEFT JOIN {table} t ON t.api_key_id = p.api_key_id AND t.key = p.key
 ORDER BY p.ord

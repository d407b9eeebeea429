-- reclaim --apply with --action delete: one batch of a reviewed plan, one statement, one short
-- transaction.
--
-- The plan's rows arrive as parallel arrays and are joined to the table through its unique
-- (api_key_id, key) index. A row is deleted only if it is exactly as the plan saw it (still
-- in_progress, same locked_at, same created_at), still held longer than the cutoff, and not locked
-- by a live owner (FOR UPDATE SKIP LOCKED: never waited on); the DELETE re-checks state and cutoff.
-- Rows are matched by physical address (ctid) and, because a ctid is only unique within one
-- partition, by partition (tableoid) too.
-- Every plan row comes back with its outcome, judged on the statement's snapshot: reclaimed, gone,
-- filtered (not matching the filters), completed, other_state, changed (taken again since the
-- plan), too_young, or held (unchanged but locked: its owner is alive).
-- $1 = api_key_id[], $2 = key[], $3 = locked_at[] (NULL where the plan had none),
-- $4 = created_at[] (NULL where the row holds none; matched as a filter
-- after the identity, like locked_at), $5 = --older-than in seconds (the plan's), $6, $7, $8 = --api-key-id, --path,
-- --method (NULL when not given); a plan row whose key does not match them is left alone as filtered.
WITH planned AS (
    SELECT *
      FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[])
           WITH ORDINALITY AS p(api_key_id, key, locked_at, created_at, ord)
), candidates AS (
    SELECT t.tableoid, t.ctid
      FROM planned p
      JOIN {table} t ON {t.tenant_is_plan} AND {t.key} = p.key::{key_type}
     WHERE {t.in_flight}
       AND {t.locked_at}{zone} IS NOT DISTINCT FROM p.locked_at
       AND {t.created_at}{zone} IS NOT DISTINCT FROM p.created_at
       AND {t.held_since} < (now() - make_interval(secs => $5::float8)){zone}
       AND ($6::text IS NULL OR {t.tenant_is_p6})
       AND ($7::text IS NULL OR {t.request_path} = $7::text)
       AND ($8::text IS NULL OR {t.request_method} = $8::text)
       FOR UPDATE OF t SKIP LOCKED
), reclaimed AS (
    DELETE FROM {table}
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM candidates))
       AND (tableoid, ctid) IN (SELECT tableoid, ctid FROM candidates)
       AND {in_flight}
       AND {held_since} < (now() - make_interval(secs => $5::float8)){zone}
    RETURNING {tenant}::text AS api_key_id, {key}::text AS key
)
SELECT p.ord,
       CASE WHEN r.key IS NOT NULL THEN 'reclaimed'
            WHEN t.ctid IS NULL THEN 'gone'
            WHEN (($6::text IS NULL OR {t.tenant_is_p6})
                  AND ($7::text IS NULL OR {t.request_path} = $7::text)
                  AND ($8::text IS NULL OR {t.request_method} = $8::text)) IS NOT TRUE THEN 'filtered'
            WHEN {t.done} AND NOT {t.in_flight} THEN 'completed'
            WHEN NOT {t.in_flight} THEN 'other_state'
            WHEN {t.locked_at}{zone} IS DISTINCT FROM p.locked_at OR {t.created_at}{zone} IS DISTINCT FROM p.created_at THEN 'changed'
            WHEN {t.held_since} >= (now() - make_interval(secs => $5::float8)){zone} THEN 'too_young'
            ELSE 'held'
       END AS outcome,
       {t.state} AS state
  FROM planned p
  LEFT JOIN reclaimed r ON r.api_key_id IS NOT DISTINCT FROM p.api_key_id AND r.key = p.key
  LEFT JOIN {table} t ON {t.tenant_is_plan} AND {t.key} = p.key::{key_type}
 ORDER BY p.ord

-- reclaim --apply with action release: one batch of plan rows. Clears the lock time of each planned
-- key that is still in flight, unchanged since the preview (same lock and creation time) and older
-- than the cutoff; answers every plan row's outcome in plan order, like reclaim_apply_delete.sql.
-- $1 = tenants, $2 = keys, $3 = lock times, $4 = creation times, $5 = --older-than seconds, $6, $7,
-- $8 = --api-key-id, --path, --method (NULL when not given; a plan row not matching them: filtered).
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
    UPDATE {table}
       SET {locked_at_col} = NULL
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

-- reclaim --apply --archive: the first statement of an archived batch of plan rows, in the batch's
-- transaction. Locks the plan's rows the apply statement that follows (same transaction, same
-- now()) will take, on the same conditions (unchanged since the plan, still in_progress, held
-- longer than the plan's cutoff, matching the filters, FOR UPDATE SKIP LOCKED), and returns each
-- whole record as JSON before the change, for the archive. idemctl writes and fsyncs the archive
-- lines before it commits, and rolls the batch back if it took a key this statement did not return.
-- $1 = api_key_id[], $2 = key[], $3 = locked_at[], $4 = created_at[] (NULL where the row holds none; matched as a filter
-- after the identity, like locked_at), $5 = --older-than seconds,
-- $6, $7, $8 = --api-key-id, --path, --method (NULL when not given).
WITH planned AS (
    SELECT *
      FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[])
           AS p(api_key_id, key, locked_at, created_at)
)
SELECT {t.tenant}::text AS api_key_id, {t.key}::text AS key, to_jsonb(t) AS record, now() AS at
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

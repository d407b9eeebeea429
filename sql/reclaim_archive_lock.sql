-- reclaim --archive: the first statement of an archived sweep batch's transaction. Locks the keys
-- A row without a key (in a key column that allows NULL) is never taken: no client can retry it.
-- the batch statement that follows (in the same transaction, with the same now()) will take: up to
-- $2 of the oldest stuck in_progress keys held longer than $1 seconds, FOR UPDATE SKIP LOCKED as
-- the batch does, and returns each whole record as JSON before the change, for the archive. idemctl
-- writes and fsyncs the archive lines before it commits, and rolls the batch back if it took a key
-- this statement did not return. $1 = --older-than in seconds, $2 = batch size, $3, $4, $5 =
-- --api-key-id, --path, --method (NULL when not given), as the batch statement binds them.
SELECT {t.tenant}::text AS api_key_id, {t.key}::text AS key, to_jsonb(t) AS record, now() AS at
  FROM {table} t
 WHERE {t.in_flight}
   AND {t.held_since} < (now() - make_interval(secs => $1::float8)){zone}
   AND {t.key} IS NOT NULL
   AND ($3::text IS NULL OR {t.tenant_is_p3})
   AND ($4::text IS NULL OR {t.request_path} = $4::text)
   AND ($5::text IS NULL OR {t.request_method} = $5::text)
 ORDER BY {t.held_since}
 LIMIT $2::bigint
   FOR UPDATE OF t SKIP LOCKED

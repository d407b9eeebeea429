-- evict: a range of the expiry index in which a live request holds a row lock, or a run of more
-- than one batch of rows sharing a single expires_at.
--
-- Locks the candidates with FOR UPDATE SKIP LOCKED, so it never waits on a live request, deletes
-- them by physical address in the same statement, and re-checks expiry, state and --min-age on
-- each row it removes. A ctid is an address within one partition, so the partition (tableoid) is
-- matched too on a partitioned table. $1 = range start, $2 = range end, both inclusive (NULL = open), $3 = row
-- limit, $4 = min-age seconds or NULL. Returns the rows deleted and the expired completed rows of
-- the range (up to the limit) that were there, so the caller can tell how many were left because
-- another session holds them.
--
-- The markers in comments are filled in for the foreign keys that reference the table (left as they
-- are, the statement is whole): not_referenced leaves out keys a NO ACTION / RESTRICT row still
-- references, and for each ON DELETE SET NULL / SET DEFAULT / CASCADE key, referencing_locks locks
-- the candidates' referencing rows FOR UPDATE SKIP LOCKED and keeps as ready only the candidates
-- whose referencing rows it could all lock, so the ON DELETE action never waits on a live
-- transaction's row either (see src/db/references.rs).
WITH candidates AS (
    SELECT tableoid, ctid/*{candidate_keys}*/
      FROM {table}
     WHERE {expiry} >= coalesce($1::timestamptz, '-infinity'::timestamptz){zone}
       AND {expiry} <= coalesce($2::timestamptz, 'infinity'::timestamptz){zone}
       AND {expiry} < {cutoff}
       AND {done}
       AND ($4::float8 IS NULL OR {created_at} < (now() - make_interval(secs => $4::float8)){zone})/*{not_referenced}*/
     ORDER BY {expiry}
     LIMIT $3::bigint
       FOR UPDATE SKIP LOCKED
)/*{referencing_locks}*/, deleted AS (
    DELETE FROM {table}
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM /*{ready}*/candidates))
       AND (tableoid, ctid) IN (SELECT tableoid, ctid FROM /*{ready}*/candidates)
       AND {expiry} < {cutoff}
       AND {done}
       AND ($4::float8 IS NULL OR {created_at} < (now() - make_interval(secs => $4::float8)){zone})
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted)::bigint AS deleted,
       (SELECT count(*)
          FROM (SELECT 1
                  FROM {table}
                 WHERE {expiry} >= coalesce($1::timestamptz, '-infinity'::timestamptz){zone}
                   AND {expiry} <= coalesce($2::timestamptz, 'infinity'::timestamptz){zone}
                   AND {expiry} < {cutoff}
                   AND {done}
                   AND ($4::float8 IS NULL OR {created_at} < (now() - make_interval(secs => $4::float8)){zone})/*{not_referenced}*/
                 ORDER BY {expiry}
                 LIMIT $3::bigint) AS present)::bigint AS present

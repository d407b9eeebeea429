-- evict on a table without an index on its expiry column: one page of a unique index (the primary
-- key, or another), walked in order by keyset pagination, and the expired finished rows among the
-- page deleted. Each page reads at most $1 index entries after the previous page's last key
-- (the walk_after marker: `(c1, c2) > ($3, $4)` cast back from text, `true` on the first page), however
-- large the table, and no row is read twice in a run. $2 = --min-age in seconds (NULL = none): a
-- row created less than that ago is kept even if expired, and counted. Rows a live transaction
-- holds are skipped (FOR UPDATE SKIP LOCKED), deleted by physical address in the same statement,
-- expiry, state and age re-checked on each. Returns the entries examined, the expired finished rows
-- old enough among them, those --min-age kept, the rows deleted, the page's last key (as text, for
-- the next page) and whether no row of the page had expired at all (where the walk follows age, the
-- walk stops there).
WITH page AS MATERIALIZED (
    SELECT tableoid, ctid, {walk_columns},
           ({expiry} < {cutoff} AND {done}) AS idemctl_expired,
           ({expiry} < {cutoff}) AS idemctl_past,
           ($2::float8 IS NOT NULL
             AND {created_at} >= (now() - make_interval(secs => $2::float8)){zone}) AS idemctl_young
      FROM {table}
     WHERE {walk_after}
     ORDER BY {walk_columns}
     LIMIT $1::bigint
), candidates AS (
    SELECT tableoid, ctid
      FROM {table}
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM page WHERE idemctl_expired AND NOT idemctl_young))
       AND (tableoid, ctid) IN (SELECT tableoid, ctid FROM page
                                 WHERE idemctl_expired AND NOT idemctl_young)
       AND {expiry} < {cutoff}
       AND {done}
       AND ($2::float8 IS NULL OR {created_at} < (now() - make_interval(secs => $2::float8)){zone})
       FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM {table}
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM candidates))
       AND (tableoid, ctid) IN (SELECT tableoid, ctid FROM candidates)
       AND {expiry} < {cutoff}
       AND {done}
       AND ($2::float8 IS NULL OR {created_at} < (now() - make_interval(secs => $2::float8)){zone})
    RETURNING 1
)
SELECT (SELECT count(*) FROM page)::bigint AS examined,
       (SELECT count(*) FROM page WHERE idemctl_expired AND NOT idemctl_young)::bigint AS expired,
       (SELECT count(*) FROM page WHERE idemctl_expired AND idemctl_young)::bigint AS too_young,
       (SELECT count(*) FROM deleted)::bigint AS deleted,
       (SELECT ARRAY[{walk_text}] FROM page ORDER BY {walk_desc} LIMIT 1) AS last_key,
       NOT coalesce((SELECT bool_or(idemctl_past) FROM page), false) AS none_past

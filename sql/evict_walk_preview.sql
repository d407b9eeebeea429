-- evict --dry-run on a table without an index on its expiry column: one page of the unique index
-- the run walks, the same keyset page under the same bound as evict_walk.sql ($1 index entries
-- after the previous page's last key, the walk_after marker: `(c1, c2) > ($4, $5)` cast back from text,
-- `true` on the first page), read without locking or deleting anything. $2 = --min-age in seconds
-- (NULL = none); $3 = how many keys of each kind to list. Returns the entries examined, the expired
-- finished rows a run would delete, those --min-age would keep, the oldest and newest expiry among
-- the rows it would delete, the first $3 keys of each kind, the page's last key (as text, for the
-- next page) and whether no row of the page had expired at all (where the walk follows age, the run
-- stops there).
WITH page AS MATERIALIZED (
    SELECT {walk_columns},
           {tenant}::text AS idemctl_scope, {key}::text AS idemctl_key,
           {expires_at}{zone} AS idemctl_expires_at, {created_at}{zone} AS idemctl_created_at,
           ({expiry} < {cutoff} AND {done}) AS idemctl_expired,
           ({expiry} < {cutoff}) AS idemctl_past,
           ($2::float8 IS NOT NULL
             AND {created_at} >= (now() - make_interval(secs => $2::float8)){zone}) AS idemctl_young
      FROM {table}
     WHERE {walk_after}
     ORDER BY {walk_columns}
     LIMIT $1::bigint
), listed AS (
    SELECT idemctl_young, idemctl_scope, idemctl_key, idemctl_expires_at, idemctl_created_at,
           row_number() OVER (PARTITION BY idemctl_young) AS n
      FROM page
     WHERE idemctl_expired
)
SELECT (SELECT count(*) FROM page)::bigint AS examined,
       (SELECT count(*) FROM page WHERE idemctl_expired AND NOT idemctl_young)::bigint AS expired,
       (SELECT count(*) FROM page WHERE idemctl_expired AND idemctl_young)::bigint AS too_young,
       (SELECT min(idemctl_expires_at) FROM page WHERE idemctl_expired AND NOT idemctl_young) AS oldest,
       (SELECT max(idemctl_expires_at) FROM page WHERE idemctl_expired AND NOT idemctl_young) AS newest,
       ARRAY(SELECT idemctl_young FROM listed WHERE n <= $3::bigint ORDER BY idemctl_young, n) AS sample_young,
       ARRAY(SELECT idemctl_scope FROM listed WHERE n <= $3::bigint ORDER BY idemctl_young, n) AS sample_scope,
       ARRAY(SELECT idemctl_key FROM listed WHERE n <= $3::bigint ORDER BY idemctl_young, n) AS sample_key,
       ARRAY(SELECT idemctl_expires_at FROM listed WHERE n <= $3::bigint ORDER BY idemctl_young, n) AS sample_expires_at,
       ARRAY(SELECT idemctl_created_at FROM listed WHERE n <= $3::bigint ORDER BY idemctl_young, n) AS sample_created_at,
       (SELECT ARRAY[{walk_text}] FROM page ORDER BY {walk_desc} LIMIT 1) AS last_key,
       NOT coalesce((SELECT bool_or(idemctl_past) FROM page), false) AS none_past

-- stats: the TTL (expires_at - created_at) of recent keys, bounded and index-backed: the $1 keys
-- that expire next (the expiry index from now on) and the $1 that expire last (the index from its
-- end), each row once. The last to expire are the newest keys of the longest TTL; the next to
-- expire hold, beside older long-lived keys, the newest keys of any shorter TTL (a key created now
-- with a short TTL expires before the others): in a steady state each TTL is represented by its
-- rate of new keys, whatever its length. A key in both lists is counted once, known by its identity
-- (tenant, key): not by its physical address, which on Citus is the address within one shard, shared
-- by rows of different shards. A key whose created_at is NULL (a nullable column, as Laravel's
-- timestamps() writes it) has no TTL and is left out of the figures.
WITH next AS (
    SELECT {tenant} AS id_tenant, {key} AS id_key, {created_at}{zone} AS created_at, {expires_at}{zone} AS expires_at
      FROM {table}
     WHERE {expiry} >= now(){zone}
     ORDER BY {table}.{expiry}
     LIMIT $1
), last AS (
    SELECT {tenant} AS id_tenant, {key} AS id_key, {created_at}{zone} AS created_at, {expires_at}{zone} AS expires_at
      FROM {table}
     WHERE {expiry} IS NOT NULL
     ORDER BY {table}.{expiry} DESC
     LIMIT $1
), sample AS (
    SELECT id_tenant, id_key, created_at, expires_at FROM next
    UNION
    SELECT id_tenant, id_key, created_at, expires_at FROM last
), ttl AS (
    -- Two epochs' difference: an infinite time gives an infinite TTL (NaN for two equal
    -- infinities, an unknown TTL left out like NULL), never an interval out of range.
    SELECT (extract(epoch FROM expires_at) - extract(epoch FROM created_at))::float8 AS seconds, created_at FROM sample
)
-- A percentile between two infinite TTLs interpolates to NaN: it is the infinity itself.
SELECT count(*)::bigint AS keys,
       min(seconds) AS min_seconds,
       coalesce(nullif(percentile_cont(0.1) WITHIN GROUP (ORDER BY seconds), 'NaN'::float8),
                percentile_disc(0.1) WITHIN GROUP (ORDER BY seconds)) AS p10_seconds,
       coalesce(nullif(percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds), 'NaN'::float8),
                percentile_disc(0.5) WITHIN GROUP (ORDER BY seconds)) AS p50_seconds,
       coalesce(nullif(percentile_cont(0.9) WITHIN GROUP (ORDER BY seconds), 'NaN'::float8),
                percentile_disc(0.9) WITHIN GROUP (ORDER BY seconds)) AS p90_seconds,
       max(seconds) AS max_seconds,
       max(created_at) AS newest_created_at,
       count(*) FILTER (WHERE seconds < $2::float8)::bigint AS keys_below,
       -- The sample's TTLs counted in the buckets of src/db/maintenance.rs TTL_BUCKETS (under 1m,
       -- 10m, 1h, 6h, 1d, 7d, and 7d or more), for top's histogram.
       ARRAY[count(*) FILTER (WHERE seconds < 60),
             count(*) FILTER (WHERE seconds >= 60 AND seconds < 600),
             count(*) FILTER (WHERE seconds >= 600 AND seconds < 3600),
             count(*) FILTER (WHERE seconds >= 3600 AND seconds < 21600),
             count(*) FILTER (WHERE seconds >= 21600 AND seconds < 86400),
             count(*) FILTER (WHERE seconds >= 86400 AND seconds < 604800),
             count(*) FILTER (WHERE seconds >= 604800)]::int8[] AS buckets
  FROM ttl
 WHERE seconds IS NOT NULL AND seconds <> 'NaN'::float8

-- bench/template_facts.sql: what a loaded template holds (bench/run records it in the results, and
-- BENCHMARKS.md shows it next to the figures): row mix, tenants, body sizes, table and index sizes,
-- and how closely expires_at follows the physical row order.
SELECT count(*) AS rows,
       count(*) FILTER (WHERE expires_at < now() AND state = 'completed') AS expired_completed,
       count(*) FILTER (WHERE expires_at < now()) AS expired,
       count(*) FILTER (WHERE state = 'in_progress') AS in_progress,
       count(*) FILTER (WHERE expires_at - created_at > interval '2 days') AS long_ttl,
       count(DISTINCT api_key_id) AS tenants,
       round(avg(pg_column_size(response_body)) FILTER (WHERE response_body IS NOT NULL)) AS avg_body_bytes,
       min(length(response_body::text)) AS min_body_chars,
       max(length(response_body::text)) AS max_body_chars,
       round(extract(epoch FROM max(created_at) - min(created_at)) / 86400, 2) AS created_spread_days,
       pg_relation_size('idempotency_keys') AS heap_bytes,
       pg_indexes_size('idempotency_keys') AS index_bytes,
       pg_total_relation_size('idempotency_keys') AS total_bytes,
       (SELECT round(correlation::numeric, 3) FROM pg_stats
         WHERE tablename = 'idempotency_keys' AND attname = 'expires_at') AS expires_at_correlation,
       (SELECT count(*) FROM bench_keys) AS bench_keys
  FROM idempotency_keys

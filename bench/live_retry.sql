-- bench/live_retry.sql: pgbench script for the live workload's retry (bench/run's live phase): a
-- client resends a request whose key exists, so the API locks the stored row and replays its
-- response. The key is picked from bench_keys, a side table of sampled (api_key_id, key) pairs that
-- bench/run loads into the template (half random, half expiring around load time, so some have just
-- expired and are being evicted). Needs -D nsample=N (rows in bench_keys) and -M prepared.
\set id random(1, :nsample)
SELECT api_key_id AS retry_tenant, key AS retry_key FROM bench_keys WHERE id = :id \gset
BEGIN;
SELECT state, response_status, response_body
  FROM idempotency_keys
 WHERE api_key_id = :retry_tenant::text AND key = :retry_key::text
   FOR UPDATE;
COMMIT;

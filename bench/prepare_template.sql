-- bench/prepare_template.sql: run by bench/run on each template database right after
-- `seed CONNINFO ROWS reference` filled it. Adds what the benchmark itself needs and nothing idemctl
-- sees as schema: pg_prewarm (to warm each trial copy), autovacuum off on the key table for the
-- length of a trial (as in perf.md: autovacuum must not join in halfway through one contender),
-- and bench_keys, the sampled (api_key_id, key) pairs the live workload's retries pick from: half
-- taken at random, half expiring within an hour of load time (so some have just expired).
-- {random} and {recent} are filled in by bench/run.
CREATE EXTENSION IF NOT EXISTS pg_prewarm;
ALTER TABLE idempotency_keys SET (autovacuum_enabled = off);
DROP TABLE IF EXISTS bench_keys;
CREATE TABLE bench_keys AS
SELECT (row_number() OVER ())::int AS id, api_key_id, key
  FROM ((SELECT api_key_id, key FROM idempotency_keys ORDER BY random() LIMIT {random})
        UNION ALL
        (SELECT api_key_id, key
           FROM idempotency_keys
          WHERE expires_at BETWEEN now() - interval '1 hour' AND now() + interval '1 hour'
          ORDER BY random()
          LIMIT {recent})) AS picked;
ALTER TABLE bench_keys ADD PRIMARY KEY (id);

-- bench/live_new_request.sql: pgbench script for the live workload's new request (bench/run's live
-- phase): the API inserts the key as in_progress in its own transaction, then records the response
-- (~1 kB JSON) with an UPDATE in a second transaction, as an idempotent endpoint does around its work.
-- Tenants are skewed like the sample data (low numbers busier). Run with -M prepared.
\set r random(0, 999999)
\set tenant (200 * :r * :r) / 1000000000000
INSERT INTO idempotency_keys
    (key, api_key_id, request_method, request_path, request_fingerprint, state, locked_at,
     created_at, expires_at)
VALUES (gen_random_uuid()::text, 'tenant_' || lpad(:tenant::text, 4, '0'), 'POST', '/v1/payments',
        sha256(convert_to(random()::text, 'UTF8')), 'in_progress', now(), now(),
        now() + interval '24 hours')
RETURNING key AS new_key, api_key_id AS new_tenant \gset
UPDATE idempotency_keys
   SET state = 'completed',
       response_status = 201,
       locked_at = NULL,
       response_body = jsonb_build_object(
           'id', 'pay_' || substr(md5(:new_key::text), 1, 16),
           'object', 'payment',
           'amount', (random() * 100000)::int,
           'currency', 'eur',
           'status', 'succeeded',
           'metadata', jsonb_build_object('order_ref', md5(random()::text),
                                          'note', repeat(md5(:new_key::text), 28)))
 WHERE api_key_id = :new_tenant::text AND key = :new_key::text;

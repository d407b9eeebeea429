-- bench/live_new_request_citus.sql: bench/live_new_request.sql for the Citus phase of bench/run (run
-- on the coordinator, and on the single server it is compared with). The same two transactions;
-- the random amount and order reference come from pgbench instead of random() in the UPDATE,
-- because Citus refuses volatile functions in an UPDATE of a distributed table ("functions used in
-- UPDATE queries on distributed tables must not be VOLATILE"). Run with -M prepared.
\set r random(0, 999999)
\set tenant (200 * :r * :r) / 1000000000000
\set amount random(0, 100000)
\set ref random(0, 2000000000)
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
           'amount', :amount::int,
           'currency', 'eur',
           'status', 'succeeded',
           'metadata', jsonb_build_object('order_ref', md5(:ref::text),
                                          'note', repeat(md5(:new_key::text), 28)))
 WHERE api_key_id = :new_tenant::text AND key = :new_key::text;

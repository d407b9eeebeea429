-- Sample data for the demo, the tests and the benchmark (never run by the idemctl binary).
-- Inserts rows $1 .. $2 of a table of $3 rows, in created_at order as an append-only API table
-- would be written. Parameters:
--   $1, $2  first and last row number of this chunk      $3  total rows
--   $4  tenants (skewed: low-numbered tenants are busier) $5  created_at spread in seconds
--   $6  fraction of rows in_progress                      $7  fraction of in_progress rows that
--       are fresh (held for under a minute), the rest being stuck for as long as their age
--   $8  fraction of rows with the long TTL                $9  short TTL seconds  $10 long TTL seconds
-- Response bodies are JSON objects of roughly 0.5-1.5 kB.
INSERT INTO {table}
    (key, api_key_id, request_method, request_path, request_fingerprint, state,
     response_status, response_body, locked_at, created_at, expires_at)
SELECT gen_random_uuid()::text,
       'tenant_' || lpad(floor($4::int * power(random(), 2))::int::text, 4, '0'),
       CASE WHEN random() < 0.9 THEN 'POST' ELSE 'PUT' END,
       (ARRAY['/v1/payments', '/v1/refunds', '/v1/transfers', '/v1/orders'])[1 + floor(random() * 4)::int],
       sha256(convert_to(g::text || ':' || random()::text, 'UTF8')),
       CASE WHEN ip THEN 'in_progress' ELSE 'completed' END,
       CASE WHEN ip THEN NULL WHEN random() < 0.93 THEN 201 ELSE 422 END,
       CASE WHEN ip THEN NULL ELSE jsonb_build_object(
           'id', 'pay_' || substr(md5(g::text), 1, 16),
           'object', 'payment',
           'amount', (random() * 100000)::int,
           'currency', (ARRAY['eur', 'usd', 'gbp'])[1 + floor(random() * 3)::int],
           'status', 'succeeded',
           'metadata', jsonb_build_object('order_ref', md5(random()::text),
                                          'note', repeat(md5(g::text), 12 + floor(random() * 28)::int)))
       END,
       CASE WHEN ip AND random() < 0.5 THEN created ELSE NULL END,
       created,
       created + make_interval(secs => CASE WHEN random() < $8::float8 THEN $10::float8 ELSE $9::float8 END)
  FROM (SELECT g,
               ip,
               CASE WHEN ip AND fresh
                    THEN now() - make_interval(secs => random() * 50)
                    ELSE now() - make_interval(secs => $5::float8 * (1 - g::float8 / $3::bigint) + random())
               END AS created
          FROM (SELECT g, random() < $6::float8 AS ip, random() < $7::float8 AS fresh
                  FROM generate_series($1::bigint, $2::bigint) AS g) AS s) AS r

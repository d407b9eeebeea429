-- The idempotency-key table idemctl maintains, with the indexes it relies on.
--
-- This follows the storage design described in the project's reference material, with its
-- mistakes corrected:
--
-- * Identity. The reference declares `key text PRIMARY KEY` *and* a unique index on
--   (api_key_id, key) "so that one tenant's key cannot collide with another's". The primary key on
--   `key` alone defeats that scoping: a second tenant that happens to send the same key gets a
--   unique violation (or, worse, is told its request is a duplicate of someone else's). Here the
--   primary key is (api_key_id, key), which also serves every lookup the API does, so the separate
--   scope index is no longer needed. idemctl treats (api_key_id, key) as a row's identity on this
--   table and on the reference table alike.
--
-- * State. The reference stores `state` as free text and its reclaim statement writes 'absent',
--   a value nothing else reads (absent means "no row"). The CHECK constraint keeps the column to
--   the two states a row can be in.
--
-- * Eviction. The reference's batch delete matches rows by `key` alone and ignores `state`. With
--   tenant-scoped keys, `key IN (...)` also deletes another tenant's row that shares the key but has
--   not expired, and an expired `in_progress` row may still belong to a live request. idemctl's
--   statements identify rows physically inside one statement and re-check expiry and state there.
--
-- Apply with: psql -v ON_ERROR_STOP=1 -f sql/schema.sql
CREATE TABLE idempotency_keys (
    key                 text        NOT NULL,
    api_key_id          text        NOT NULL,
    request_method      text        NOT NULL,
    request_path        text        NOT NULL,
    request_fingerprint bytea       NOT NULL,   -- sha256 of the canonical request body
    state               text        NOT NULL
        CONSTRAINT idempotency_keys_state_check CHECK (state IN ('in_progress', 'completed')),
    response_status     int,
    response_body       jsonb,
    locked_at           timestamptz,            -- when the owning request took the key
    created_at          timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz NOT NULL,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (api_key_id, key)
);

-- Drives eviction, "oldest key" and eviction lag. Every idemctl statement that walks expired rows
-- uses it; without it eviction cannot be index-backed and idemctl refuses to evict.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

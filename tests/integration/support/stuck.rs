//! Stuck keys for reclaim's tests: a key table with a mix of rows (and reclaim's optional index),
//! the stuck keys as the fixtures build them (in_progress, taken over a minute ago: not by the
//! expression reclaim uses), a live owner holding one key's row, the keys a JSON list names, and
//! the changes a key goes through between a plan and its apply.

use std::collections::BTreeSet;

use crate::fixtures::{self, Mix, Schema};
use crate::support::TestDb;

/// A key by (api_key_id, key).
pub(crate) type Key = (String, String);

/// A fresh database with the key table of `schema` holding `mix`, with the maintenance indexes
/// (reclaim's in_progress index among them) when `indexed`.
pub(crate) async fn db_with(schema: Schema, mix: Mix, indexed: bool) -> TestDb {
    let db = TestDb::new().await;
    fixtures::table_with(&db, schema, mix).await;
    if indexed {
        db.exec(include_str!("../../../sql/maintenance_indexes.sql"))
            .await;
    }
    db
}

/// The storage table with the maintenance indexes, `stuck` stuck keys and a few rows of every
/// other kind (`others` expired and live ones each, half as many fresh ones).
pub(crate) async fn db_with_stuck(stuck: i64, others: i64) -> TestDb {
    let mix = Mix {
        expired: others,
        live: others,
        fresh: others / 2,
        stuck,
        expired_in_progress: 0,
    };
    db_with(Schema::Corrected, mix, true).await
}

/// Every stuck key.
pub(crate) async fn stuck_keys(db: &TestDb) -> BTreeSet<Key> {
    stuck_keys_of(&db.client().await).await
}

/// Every stuck key, read through `client` (a Citus coordinator's, say).
pub(crate) async fn stuck_keys_of(client: &tokio_postgres::Client) -> BTreeSet<Key> {
    client
        .query(
            "SELECT api_key_id, key FROM idempotency_keys \
              WHERE state = 'in_progress' AND created_at < now() - interval '1 minute'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The `nth` stuck key by key order; with `locked_at_null`, only among those with (true) or
/// without (false) a NULL locked_at.
pub(crate) async fn stuck_key(db: &TestDb, locked_at_null: Option<bool>, nth: i64) -> Key {
    let row = db
        .client()
        .await
        .query_one(
            "SELECT api_key_id, key FROM idempotency_keys \
              WHERE state = 'in_progress' AND created_at < now() - interval '1 minute' \
                AND ($1::bool IS NULL OR (locked_at IS NULL) = $1) \
              ORDER BY key OFFSET $2 LIMIT 1",
            &[&locked_at_null, &nth],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Open a transaction that holds one row's lock, as the API's SELECT ... FOR UPDATE does; the row
/// stays held while the returned client lives (or until it rolls back).
pub(crate) async fn hold_row(db: &TestDb, (tenant, key): &Key) -> tokio_postgres::Client {
    let owner = db.client().await;
    owner.batch_execute("BEGIN").await.unwrap();
    let n = owner
        .execute(
            "SELECT 1 FROM idempotency_keys WHERE api_key_id = $1 AND key = $2 FOR UPDATE",
            &[tenant, key],
        )
        .await
        .unwrap();
    assert_eq!(n, 1, "the held row exists");
    owner
}

/// The keys of JSON objects that carry `api_key_id` and `key` (a report's list, archive lines).
pub(crate) fn keys_in<'a>(items: impl IntoIterator<Item = &'a serde_json::Value>) -> BTreeSet<Key> {
    items
        .into_iter()
        .map(|k| {
            (
                k["api_key_id"].as_str().unwrap().to_owned(),
                k["key"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The keys of a JSON array of such objects.
pub(crate) fn keys_of(list: &serde_json::Value) -> BTreeSet<Key> {
    keys_in(list.as_array().unwrap())
}

/// The key's owner finished after all: completed with status 201 (and `body`, when given).
pub(crate) async fn complete(
    client: &tokio_postgres::Client,
    (tenant, key): &Key,
    body: Option<&str>,
) {
    let n = client
        .execute(
            "UPDATE idempotency_keys SET state = 'completed', response_status = 201, \
                    response_body = coalesce($3::text::jsonb, response_body) \
              WHERE api_key_id = $1 AND key = $2",
            &[tenant, key, &body],
        )
        .await
        .unwrap();
    assert_eq!(n, 1, "the completed row exists");
}

/// The key is gone (deleted by someone else).
pub(crate) async fn delete(client: &tokio_postgres::Client, (tenant, key): &Key) {
    let n = client
        .execute(
            "DELETE FROM idempotency_keys WHERE api_key_id = $1 AND key = $2",
            &[tenant, key],
        )
        .await
        .unwrap();
    assert_eq!(n, 1, "the deleted row existed");
}

//! Test data: the key table in both shapes idemctl supports, controlled mixes of rows, and
//! snapshots to compare a table before and after a command.

use std::collections::BTreeMap;

use crate::support::TestDb;

/// Which table definition to create.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Schema {
    /// sql/schema.sql: primary key (api_key_id, key).
    Corrected,
    /// The storage reference's table exactly as printed: primary key on key alone.
    Reference,
}

impl Schema {
    pub(crate) fn ddl(self) -> &'static str {
        match self {
            Schema::Corrected => include_str!("../../sql/schema.sql"),
            Schema::Reference => include_str!("../fixtures/reference_schema.sql"),
        }
    }
}

/// How many rows of each kind to load.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Mix {
    /// completed, expired between 1 minute and 6 days ago
    pub expired: i64,
    /// completed, expiring between 1 hour and 6 days from now
    pub live: i64,
    /// in_progress, taken 10 s ago, not expired
    pub fresh: i64,
    /// in_progress, taken 1 h ago (half with locked_at NULL), not expired
    pub stuck: i64,
    /// in_progress and already expired (reclaim's business, never evict's)
    pub expired_in_progress: i64,
}

/// Create the table.
pub(crate) async fn create(db: &TestDb, schema: Schema) {
    db.exec(schema.ddl()).await;
}

/// Create the table and load a mix.
pub(crate) async fn table_with(db: &TestDb, schema: Schema, mix: Mix) {
    create(db, schema).await;
    load(db, mix).await;
}

const INSERT: &str = "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
    request_fingerprint, state, response_status, response_body, locked_at, created_at, expires_at) ";

fn rows_sql(n: i64, state: &str, locked: &str, created: &str, expires: &str) -> String {
    let body = if state == "completed" {
        "201, jsonb_build_object('id', 'pay_' || g, 'amount', g * 7, 'note', repeat('x', 600))"
    } else {
        "NULL, NULL"
    };
    format!(
        "{INSERT} SELECT gen_random_uuid()::text, 'tenant_' || (g % 7), 'POST', '/v1/payments', \
         sha256(g::text::bytea), '{state}', {body}, {locked}, {created}, {expires} \
         FROM generate_series(1, {n}) AS g;"
    )
}

/// SQL inserting `n` expired completed rows (for a server other than the harness's).
pub(crate) fn expired_rows_sql(n: i64) -> String {
    rows_sql(
        n,
        "completed",
        "now() - interval '2 days'",
        "now() - interval '7 days'",
        "now() - make_interval(secs => 60 + random() * 518000)",
    )
}

/// Load a mix of rows (random keys, 7 tenants).
pub(crate) async fn load(db: &TestDb, mix: Mix) {
    db.exec(&load_sql(mix)).await;
}

/// The statements that load a mix of rows (random keys, 7 tenants) and analyze the table.
pub(crate) fn load_sql(mix: Mix) -> String {
    let mut sql = String::new();
    let secs = "make_interval(secs => ";
    sql.push_str(&rows_sql(
        mix.expired,
        "completed",
        "now() - interval '2 days'",
        "now() - interval '7 days'",
        &format!("now() - {secs}60 + random() * 518000)"),
    ));
    sql.push_str(&rows_sql(
        mix.live,
        "completed",
        "now() - interval '1 hour'",
        "now() - interval '1 hour'",
        &format!("now() + {secs}3600 + random() * 518000)"),
    ));
    sql.push_str(&rows_sql(
        mix.fresh,
        "in_progress",
        "now() - interval '10 seconds'",
        "now() - interval '10 seconds'",
        "now() + interval '1 day'",
    ));
    sql.push_str(&rows_sql(
        mix.stuck,
        "in_progress",
        "CASE WHEN g % 2 = 0 THEN now() - interval '1 hour' END",
        "now() - interval '1 hour'",
        "now() + interval '23 hours'",
    ));
    sql.push_str(&rows_sql(
        mix.expired_in_progress,
        "in_progress",
        "now() - interval '2 days'",
        "now() - interval '2 days'",
        "now() - interval '1 day'",
    ));
    sql.push_str("ANALYZE idempotency_keys;");
    sql
}

/// One row as a snapshot sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub state: String,
    pub expired: bool,
    /// md5 of the whole row, to prove a row was not changed.
    pub digest: String,
}

/// Every row keyed by (api_key_id, key).
pub(crate) async fn snapshot(db: &TestDb) -> BTreeMap<(String, String), Seen> {
    snapshot_of(&db.client().await).await
}

/// Every row keyed by (api_key_id, key), read on `client`.
pub(crate) async fn snapshot_of(
    client: &tokio_postgres::Client,
) -> BTreeMap<(String, String), Seen> {
    let rows = client
        .query(
            "SELECT api_key_id, key, state, expires_at < now() AS expired, md5(t::text) AS digest \
             FROM idempotency_keys t",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            (
                (r.get(0), r.get(1)),
                Seen {
                    state: r.get(2),
                    expired: r.get(3),
                    digest: r.get(4),
                },
            )
        })
        .collect()
}

/// Rows evict may delete: completed and expired.
pub(crate) fn evictable(s: &Seen) -> bool {
    s.state == "completed" && s.expired
}

/// A single number from a query.
pub(crate) async fn scalar_i64(db: &TestDb, sql: &str) -> i64 {
    db.client().await.query_one(sql, &[]).await.unwrap().get(0)
}

/// A single text value from a query.
pub(crate) async fn scalar_text(db: &TestDb, sql: &str) -> String {
    db.client().await.query_one(sql, &[]).await.unwrap().get(0)
}

/// The finding named `check` in `check -o json`'s output; panics showing the output when absent.
pub(crate) fn finding<'a>(json: &'a serde_json::Value, check: &str) -> &'a serde_json::Value {
    json["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings in {json:#}"))
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding in {json:#}"))
}

/// A fresh database holding `ddl` and `rows`, with `indexes` when given, analyzed.
pub(crate) async fn loaded(ddl: &str, rows: &str, indexes: Option<&str>) -> TestDb {
    let db = TestDb::new().await;
    db.exec(ddl).await;
    db.exec(rows).await;
    if let Some(indexes) = indexes {
        db.exec(indexes).await;
    }
    db.exec("ANALYZE").await;
    db
}

/// A BEFORE DELETE trigger on the key table that holds every DELETE until the table `go` has a
/// row: a test changes the world while a batch's DELETE runs (its privileges already checked),
/// before the statement evict sends after it. See [`while_a_delete_is_held`].
pub(crate) async fn hold_deletes(db: &TestDb) {
    db.exec(
        "CREATE TABLE go (); \
         CREATE FUNCTION hold_delete() RETURNS trigger LANGUAGE plpgsql \
           SECURITY DEFINER SET search_path = public AS $$ \
         BEGIN \
           WHILE NOT EXISTS (SELECT FROM go) LOOP PERFORM pg_sleep(0.01); END LOOP; \
           RETURN OLD; \
         END $$; \
         CREATE TRIGGER hold_delete BEFORE DELETE ON idempotency_keys \
           FOR EACH ROW EXECUTE FUNCTION hold_delete();",
    )
    .await;
}

/// Wait until a DELETE of `role` is held by [`hold_deletes`]' trigger, run `sql`, then let every
/// DELETE through.
pub(crate) async fn while_a_delete_is_held(db: &TestDb, role: &str, sql: &str) {
    let admin = db.client().await;
    let mut polls = 0;
    while admin
        .query_opt(
            "SELECT FROM pg_stat_activity \
              WHERE usename = $1 AND datname = current_database() \
                AND wait_event = 'PgSleep' AND query ILIKE '%delete%'",
            &[&role],
        )
        .await
        .unwrap()
        .is_none()
    {
        polls += 1;
        assert!(polls < 3000, "no DELETE of {role} reached the trigger");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    db.exec(&format!("{sql}; INSERT INTO go DEFAULT VALUES"))
        .await;
}

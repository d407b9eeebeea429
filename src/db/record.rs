//! One stored key as `inspect` reads it, with its state judged by the database clock.

use serde::Serialize;
use time::OffsetDateTime;
use tokio_postgres::Row;

/// A key's stored record.
#[derive(Debug, Clone, Serialize)]
pub struct KeyRecord {
    pub api_key_id: String,
    pub key: String,
    pub request_method: String,
    pub request_path: String,
    /// The request fingerprint in lowercase hex.
    pub request_fingerprint: String,
    pub state: String,
    pub response_status: Option<i32>,
    /// The stored body as JSON (null when none was stored).
    pub response_body: Option<serde_json::Value>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub locked_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    /// The database clock when the record was read; every age is relative to it.
    #[serde(with = "time::serde::rfc3339")]
    pub db_now: OffsetDateTime,
    /// in_progress for longer than the stuck-after cutoff: reclaim would take it.
    pub stuck: bool,
}

impl KeyRecord {
    /// Build a record from a row of the inspect statements.
    pub fn from_row(row: &Row) -> anyhow::Result<KeyRecord> {
        let fingerprint: Vec<u8> = row.try_get("request_fingerprint")?;
        let body: Option<String> = row.try_get("response_body")?;
        Ok(KeyRecord {
            api_key_id: row.try_get("api_key_id")?,
            key: row.try_get("key")?,
            request_method: row.try_get("request_method")?,
            request_path: row.try_get("request_path")?,
            request_fingerprint: hex(&fingerprint),
            state: row.try_get("state")?,
            response_status: row.try_get("response_status")?,
            // The column is json/jsonb, so it always parses; keep the text if it somehow does not.
            response_body: body
                .map(|b| serde_json::from_str(&b).unwrap_or(serde_json::Value::String(b))),
            locked_at: row.try_get("locked_at")?,
            created_at: row.try_get("created_at")?,
            expires_at: row.try_get("expires_at")?,
            db_now: row.try_get("db_now")?,
            stuck: row.try_get::<_, Option<bool>>("stuck")?.unwrap_or(false),
        })
    }

    /// Seconds from `ts` to the database's now (positive = in the past).
    pub fn secs_since(&self, ts: OffsetDateTime) -> f64 {
        (self.db_now - ts).as_seconds_f64()
    }

    /// Whether the key has expired by the database clock.
    pub fn expired(&self) -> bool {
        self.expires_at <= self.db_now
    }

    /// When the owner took the key: `locked_at`, or `created_at` where it was never set.
    pub fn held_since(&self) -> OffsetDateTime {
        self.locked_at.unwrap_or(self.created_at)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

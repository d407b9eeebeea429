//! Realistic sample keys (tenants, fingerprints, JSON bodies, live / expired / in_progress / stuck
//! mixes) for the demo, the tests and the benchmark. Never used by idemctl's own commands.

use anyhow::{Context as _, Result};

/// What to generate. The defaults give the benchmark's shape: ~80% expired (8-day spread with a
/// 24 h TTL, 10% of keys kept 7 days), ~5% in_progress, ~200 tenants.
#[derive(Debug, Clone)]
pub struct Spec {
    pub rows: i64,
    pub tenants: i32,
    pub spread_secs: f64,
    pub in_progress: f64,
    pub fresh_in_progress: f64,
    pub long_ttl: f64,
    pub short_ttl_secs: f64,
    pub long_ttl_secs: f64,
    /// Rows per INSERT statement.
    pub chunk: i64,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            rows: 10_000,
            tenants: 200,
            spread_secs: 8.0 * 86_400.0,
            in_progress: 0.05,
            fresh_in_progress: 0.5,
            long_ttl: 0.10,
            short_ttl_secs: 86_400.0,
            long_ttl_secs: 7.0 * 86_400.0,
            chunk: 50_000,
        }
    }
}

/// Insert `spec.rows` rows into `table` (an already quoted name), calling `progress` after each chunk.
pub async fn generate(
    client: &tokio_postgres::Client,
    table_quoted: &str,
    spec: &Spec,
    mut progress: impl FnMut(i64),
) -> Result<()> {
    let sql = include_str!("../sql/sample_data.sql").replace("{table}", table_quoted);
    let stmt = client
        .prepare(&sql)
        .await
        .context("failed to prepare the sample-data insert")?;
    let mut first = 1;
    while first <= spec.rows {
        let last = (first + spec.chunk - 1).min(spec.rows);
        client
            .execute(
                &stmt,
                &[
                    &first,
                    &last,
                    &spec.rows,
                    &spec.tenants,
                    &spec.spread_secs,
                    &spec.in_progress,
                    &spec.fresh_in_progress,
                    &spec.long_ttl,
                    &spec.short_ttl_secs,
                    &spec.long_ttl_secs,
                ],
            )
            .await
            .context("failed to insert sample keys")?;
        progress(last);
        first = last + 1;
    }
    Ok(())
}

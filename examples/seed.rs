//! Fill a database with realistic sample idempotency keys for the demo and the benchmark:
//! `cargo run --example seed -- "host=/tmp/x user=postgres dbname=postgres" 200000 [corrected|reference]`.
//! Creates the table (from sql/schema.sql, or the storage reference's exact table) when missing.

use std::time::Instant;

use anyhow::{Context as _, Result, bail};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [conninfo, rows, rest @ ..] = args.as_slice() else {
        bail!("usage: seed CONNINFO ROWS [corrected|reference]");
    };
    let rows: i64 = rows.parse().context("ROWS must be a number")?;
    let schema = match rest.first().map(String::as_str) {
        None | Some("corrected") => include_str!("../sql/schema.sql"),
        Some("reference") => include_str!("../tests/fixtures/reference_schema.sql"),
        Some(other) => bail!("unknown schema {other:?}; use corrected or reference"),
    };
    let (client, conn) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls)
        .await
        .context("failed to connect")?;
    tokio::spawn(conn);
    let exists: bool = client
        .query_one("SELECT to_regclass('idempotency_keys') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        client
            .batch_execute(schema)
            .await
            .context("failed to create the table")?;
    }
    let spec = idemctl::sample::Spec {
        rows,
        ..Default::default()
    };
    let t0 = Instant::now();
    idemctl::sample::generate(&client, "\"idempotency_keys\"", &spec, |n| {
        eprint!("\rinserted {n} of {rows} sample keys");
    })
    .await?;
    eprintln!();
    client
        .batch_execute("VACUUM ANALYZE idempotency_keys")
        .await?;
    eprintln!("loaded {rows} keys in {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}

//! A steady stream of new keys, as an API adds them: `sql` (one INSERT of `rows` keys) every
//! 100 ms on `client` until the returned flag is set; the task's result is the rate it inserted at
//! (rows/s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(crate) fn insert_steadily(
    client: tokio_postgres::Client,
    sql: &'static str,
    rows: u64,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<f64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let inserting = tokio::spawn(async move {
        let started = Instant::now();
        let mut inserted = 0u64;
        while !stopping.load(Ordering::Relaxed) {
            client.batch_execute(sql).await.unwrap();
            inserted += rows;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        inserted as f64 / started.elapsed().as_secs_f64()
    });
    (stop, inserting)
}

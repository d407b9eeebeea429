//! evict --vacuum's statements: who may vacuum which relation, and VACUUM (ANALYZE) itself, sent
//! alone in autocommit on the raw connection (VACUUM cannot run inside a transaction block, which
//! the session runner opens behind a transaction pooler).

use anyhow::{Context as _, Result};

use crate::db::{KeyTable, Session, p};

/// The relations and the role's right to vacuum each.
pub const PRIVILEGES_SQL: &str = include_str!("../../sql/vacuum_privileges.sql");

/// A relation VACUUM processes.
#[derive(Debug, Clone)]
pub struct Target {
    /// Quoted as in SQL.
    pub relation: String,
    pub owner: String,
    pub may_vacuum: bool,
}

/// The relations VACUUM processes for `table` (the table, or each leaf partition) and whether this
/// role may vacuum each.
pub async fn targets(client: &Session, table: &KeyTable) -> Result<Vec<Target>> {
    let rows = client
        .query(PRIVILEGES_SQL, &[p(&table.oid)])
        .await
        .context("failed to read who may vacuum the table")?;
    Ok(rows
        .iter()
        .map(|r| {
            let schema: String = r.get("schema_name");
            let name: String = r.get("relation");
            Target {
                relation: format!(
                    "{}.{}",
                    crate::db::table::quote_ident_if_needed(&schema),
                    crate::db::table::quote_ident_if_needed(&name)
                ),
                owner: r.get("owner"),
                may_vacuum: r.get("may_vacuum"),
            }
        })
        .collect())
}

/// Get a session ready for VACUUM. On a session idemctl owns: no statement_timeout (a large table
/// takes longer than a batch) and `lock_timeout` rather than a batch's millisecond. Then flush the
/// batches' asynchronous commits (one small transaction committed synchronously flushes the WAL
/// written before it): VACUUM cannot mark a page all-visible while a commit on it may be lost.
pub async fn prepare(session: &Session, lock_timeout: std::time::Duration) {
    if !session.pooled() {
        let _ = session.set("statement_timeout", "0").await;
        let _ = session
            .set("lock_timeout", &format!("{}ms", lock_timeout.as_millis()))
            .await;
    }
    let _ = session
        .client()
        .batch_execute(include_str!("../../sql/vacuum_flush_commits.sql"))
        .await;
}

/// `VACUUM (ANALYZE) relation`, alone and in autocommit; the server's message when it fails.
pub async fn vacuum_analyze(session: &Session, relation: &str) -> Result<(), String> {
    session
        .client()
        .batch_execute(&format!("VACUUM (ANALYZE) {relation}"))
        .await
        .map_err(|e| match e.as_db_error() {
            Some(db) => db.message().to_owned(),
            None => e.to_string(),
        })
}

//! evict --vacuum's statements: who may vacuum which relation, and VACUUM (ANALYZE) itself, sent
//! alone in autocommit on the raw connection (VACUUM cannot run inside a transaction block, which
//! the session runner opens behind a transaction pooler).

use anyhow::{Context as _, Result};

use crate::db::{KeyTable, Session, p};
use crate::report::db::{Step, WarnedAtDurablePoint};

/// The relations and the role's right to vacuum each.
pub(crate) const PRIVILEGES_SQL: &str = include_str!("../../sql/vacuum_privileges.sql");

/// A relation VACUUM processes.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// Quoted as in SQL.
    pub relation: String,
    pub owner: String,
    pub may_vacuum: bool,
}

/// The relations VACUUM processes for `table` (the table, or each leaf partition) and whether this
/// role may vacuum each.
pub(crate) async fn targets(client: &Session, table: &KeyTable) -> Result<Vec<Target>> {
    let rows = client
        .query(PRIVILEGES_SQL, &[p(&table.oid)])
        .await
        .context(Step::ReadVacuumRights)?;
    Ok(rows
        .iter()
        .map(|r| {
            let schema: String = r.get("schema_name");
            let name: String = r.get("relation");
            Target {
                relation: format!(
                    "{}.{}",
                    crate::ident::quote_ident_if_needed(&schema),
                    crate::ident::quote_ident_if_needed(&name)
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
pub(crate) async fn prepare(session: &Session, lock_timeout: std::time::Duration) {
    if !session.pooled() {
        let _ = session.set("statement_timeout", "0").await;
        let _ = session
            .set("lock_timeout", &format!("{}ms", lock_timeout.as_millis()))
            .await;
    }
    let _ = flush_commits(session).await;
}

/// Make every asynchronous commit written before now durable (one small transaction that writes a
/// WAL record, committed synchronously, flushes the WAL written before it; with synchronous
/// standbys, it waits for them).
///
/// A plain WARNING (SQLSTATE 01000) in the COMMIT's answer fails it ([`WarnedAtDurablePoint`]): a
/// wait for synchronous standbys that was cancelled commits all the same, with a warning, and
/// confirms nothing beyond this server. The COMMIT goes on its own, so the warnings of the
/// statements before it (a database nearing xid wraparound warns at every new xid) do not count.
pub(crate) async fn flush_commits(session: &Session) -> anyhow::Result<()> {
    let sql = include_str!("../../sql/vacuum_flush_commits.sql");
    let (body, commit) = sql.rsplit_once(';').unwrap_or((sql, "COMMIT"));
    if let Err(e) = session.script_within(session.deadline(), body).await {
        // Never leave the transaction open on a session the run goes on using (a pooler's).
        let _ = session.script_within(session.deadline(), "ROLLBACK").await;
        return Err(e);
    }
    let seen = session.warnings();
    session.script_within(session.deadline(), commit).await?;
    match session.warning_after(seen) {
        None => Ok(()),
        Some((message, code)) => Err(anyhow::Error::new(WarnedAtDurablePoint { message, code })),
    }
}

/// How long idemctl waits for one VACUUM, which runs without statement_timeout: the one round
/// trip whose deadline is not the session's (a dead path is still noticed by the TCP keepalives,
/// unless a proxy keeps it open).
pub(crate) const VACUUM_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// `VACUUM (ANALYZE) relation`, alone and in autocommit; the server's message when it fails.
pub(crate) async fn vacuum_analyze(session: &Session, relation: &str) -> Result<(), String> {
    session
        .script_within(VACUUM_DEADLINE, &format!("VACUUM (ANALYZE) {relation}"))
        .await
        .map_err(|e| {
            let db = e
                .chain()
                .find_map(|c| c.downcast_ref::<tokio_postgres::Error>())
                .and_then(tokio_postgres::Error::as_db_error);
            match db {
                Some(db) => db.message().to_owned(),
                None => format!("{e:#}"),
            }
        })
}

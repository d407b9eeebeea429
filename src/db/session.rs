//! The statement runner: every statement idemctl sends goes through a [`Session`], which keeps
//! idemctl's settings and statements from outliving its own transactions on a server session it
//! does not own (a transaction-mode pooler), and keeps today's fast path where it does own one.
//!
//! * Statements are sent with their parameter types (the unnamed statement, one round trip), so no
//!   named prepared statement is left where another client could collide with it. Only the hot
//!   batch statements of evict and reclaim ([`Session::query_reused`]) are prepared once and
//!   reused, and only on a session idemctl owns.
//! * Settings ([`Session::set`]): on an owned session, `SET` once for the session (as at login);
//!   behind a transaction pooler, `SET LOCAL` at the start of every transaction. A statement run
//!   outside [`Session::begin`] is then wrapped in `BEGIN; SET LOCAL ...; <statement>; COMMIT`,
//!   pipelined, so it still costs one round trip.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;

use time::OffsetDateTime;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error, Row, SimpleQueryMessage};

use crate::conn::Line;
use crate::ident::literal;
use crate::report::failure::EndReason;

/// A parameter and its PostgreSQL type; make one with [`p`].
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// A parameter typed from its Rust type: `session.query(SQL, &[p(&start), p(&limit)])`.
pub(crate) fn p<T: Typed>(value: &T) -> Param<'_> {
    (value, T::pg_type())
}

/// Rust types idemctl binds, with the PostgreSQL type each is sent as.
pub(crate) trait Typed: ToSql + Sync {
    fn pg_type() -> Type;
}

macro_rules! typed {
    ($($rust:ty => $pg:ident),* $(,)?) => {
        $(impl Typed for $rust {
            fn pg_type() -> Type {
                Type::$pg
            }
        })*
    };
}

typed!(
    bool => BOOL,
    i32 => INT4,
    i64 => INT8,
    f64 => FLOAT8,
    u32 => OID,
    String => TEXT,
    &str => TEXT,
    OffsetDateTime => TIMESTAMPTZ,
    crate::report::timestamp::Timestamp => TIMESTAMPTZ,
    Vec<Option<crate::report::timestamp::Timestamp>> => TIMESTAMPTZ_ARRAY,
    serde_json::Value => JSONB,
    Vec<String> => TEXT_ARRAY,
    Vec<&str> => TEXT_ARRAY,
    Vec<i64> => INT8_ARRAY,
    Vec<OffsetDateTime> => TIMESTAMPTZ_ARRAY,
    Vec<Option<OffsetDateTime>> => TIMESTAMPTZ_ARRAY,
    Vec<Option<String>> => TEXT_ARRAY,
    Vec<Option<&str>> => TEXT_ARRAY,
    Vec<u8> => BYTEA,
);

impl<T: Typed> Typed for Option<T> {
    fn pg_type() -> Type {
        T::pg_type()
    }
}

/// One connection of idemctl's, with the rules above. Every round trip has a deadline (see
/// [`crate::conn::Line`]): a connection that gives no answer in time is given up, and every later
/// statement on it fails at once. Clones share the connection (a lock's keeper pings it).
#[derive(Clone)]
pub struct Session(Arc<Inner>);

struct Inner {
    client: deadpool_postgres::Object,
    /// Behind a transaction pooler: nothing session-level, ever.
    pooled: bool,
    /// Behind a transaction pooler: the settings each transaction starts with.
    local: Mutex<Vec<(&'static str, String)>>,
    /// Inside [`Session::begin`] .. [`Session::commit`].
    in_transaction: AtomicBool,
    line: Line,
    /// Set when a round trip passed its deadline: the connection is given up.
    given_up: AtomicBool,
}

/// The connection under a session was lost (worded by the output layer).
pub(crate) use crate::report::db::Lost;
/// Whether a session can write at all (see [`crate::report::db::Writability`]).
pub(crate) use crate::report::db::Writability;

impl Session {
    /// `pooled`: the server session is shared between transactions; `settings` are then applied
    /// in each transaction (on an owned session they were set at login). `line`: the deadline of a
    /// round trip and where the connection's end is recorded.
    pub fn new(
        client: deadpool_postgres::Object,
        pooled: bool,
        settings: Vec<(&'static str, String)>,
        line: Line,
    ) -> Session {
        Session(Arc::new(Inner {
            client,
            pooled,
            local: Mutex::new(if pooled { settings } else { Vec::new() }),
            in_transaction: AtomicBool::new(false),
            line,
            given_up: AtomicBool::new(false),
        }))
    }

    /// Whether the server session is shared between transactions (a transaction pooler).
    pub fn pooled(&self) -> bool {
        self.0.pooled
    }

    /// The deadline of one round trip on this session.
    pub fn deadline(&self) -> Duration {
        self.0.line.deadline
    }

    /// How long the server may keep this session when idemctl has gone silent (the
    /// idle_in_transaction_session_timeout idemctl sets; see `db::lock`).
    pub fn idle_limit(&self) -> Duration {
        self.0.line.idle
    }

    /// Whether no other copy of this session is left (the run has let it go).
    pub fn only_holder(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }

    /// How many plain warnings (SQLSTATE 01000) the server has sent on this session's connection;
    /// call it right before the statement whose warnings [`Session::warning_after`] then gives.
    pub fn warnings(&self) -> usize {
        self.0.line.ended.warnings()
    }

    /// The first plain warning the server sent since [`Session::warnings`] returned `seen`, as its
    /// message and SQLSTATE: a warning comes before the answer of the statement it belongs to, so
    /// it is here once that answer is.
    pub fn warning_after(&self, seen: usize) -> Option<(String, String)> {
        self.0.line.ended.warning_after(seen)
    }

    /// Whether the connection was given up or has ended.
    pub fn lost(&self) -> bool {
        self.0.given_up.load(Ordering::SeqCst) || self.0.client.is_closed()
    }

    fn client(&self) -> &deadpool_postgres::ClientWrapper {
        &self.0.client
    }

    /// Await one round trip within the session's deadline; see [`Session::answered_within`].
    async fn answered<T>(&self, work: impl Future<Output = Result<T, Error>>) -> Result<T> {
        self.answered_within(self.deadline(), work).await
    }

    /// Await one round trip within `deadline`. A connection given up before fails at once; one
    /// that gives no answer in time is given up ([`Lost::NoAnswer`]); one that ended carries the
    /// server's reason and SQLSTATE ([`Lost::Ended`]) when the server gave one.
    async fn answered_within<T>(
        &self,
        deadline: Duration,
        work: impl Future<Output = Result<T, Error>>,
    ) -> Result<T> {
        let mut silent = self.0.line.silent.subscribe();
        if self.0.given_up.load(Ordering::SeqCst) || *silent.borrow() {
            self.0.given_up.store(true, Ordering::SeqCst);
            return Err(anyhow::Error::new(Lost::NoAnswer {
                deadline: self.deadline(),
                margin: crate::conn::ANSWER_MARGIN,
            }));
        }
        // On the heap: the statements' futures nest deeply (a batch in a retry in a worker).
        let answered = tokio::select! {
            answered = tokio::time::timeout(deadline, Box::pin(work)) => answered.map_err(drop),
            _ = silent.wait_for(|dead| *dead) => Err(()),
        };
        match answered {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(e)) => Err(self.explained(e)),
            Err(_) => {
                self.0.given_up.store(true, Ordering::SeqCst);
                self.0.line.silent.send_replace(true);
                Err(anyhow::Error::new(Lost::NoAnswer {
                    deadline,
                    margin: crate::conn::ANSWER_MARGIN,
                }))
            }
        }
    }

    /// A driver error, with the connection's end when that is what it means.
    fn explained(&self, e: Error) -> anyhow::Error {
        if let Some(db) = e.as_db_error() {
            // A FATAL error ends the connection (pg_terminate_backend, a shutdown): say so.
            if matches!(db.severity(), "FATAL" | "PANIC") {
                return anyhow::Error::new(Lost::Ended(Some(EndReason::Server {
                    message: db.message().to_owned(),
                    code: db.code().code().to_owned(),
                })));
            }
            return anyhow::Error::new(e);
        }
        if !(e.is_closed() || self.client().is_closed()) {
            return anyhow::Error::new(e);
        }
        // The driver's own words ("connection closed") would only repeat the end; an end the
        // server explained reads the same whether a statement was waiting for it or not.
        match self.0.line.ended.reason() {
            reason if e.is_closed() => anyhow::Error::new(Lost::Ended(reason)),
            reason => anyhow::Error::new(e).context(Lost::Ended(reason)),
        }
    }

    /// Take the connection out of the pool and close it: a session that stopped answering is
    /// never handed out again (a recycling check would wait on it first).
    pub fn discard(self) {
        self.0.given_up.store(true, Ordering::SeqCst);
        if let Ok(inner) = Arc::try_unwrap(self.0) {
            drop(deadpool_postgres::Object::take(inner.client));
        }
    }

    /// Set a GUC for the rest of this session's work: `SET` on an owned session, `SET LOCAL` in
    /// each later transaction behind a pooler. `value` is idemctl's own (a duration, a keyword).
    pub async fn set(&self, name: &'static str, value: &str) -> Result<()> {
        if !self.0.pooled {
            return self
                .answered(
                    self.client()
                        .batch_execute(&format!("SET {name} = {}", literal(value))),
                )
                .await;
        }
        let mut local = self
            .0
            .local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        local.retain(|(n, _)| *n != name);
        local.push((name, value.to_owned()));
        Ok(())
    }

    /// Set a GUC for the transaction in progress only (`SET LOCAL`), owned session or pooled.
    pub async fn set_local(&self, name: &'static str, value: &str) -> Result<()> {
        self.answered(
            self.client()
                .batch_execute(&format!("SET LOCAL {name} = {}", literal(value))),
        )
        .await
    }

    /// `BEGIN ...` (e.g. `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`) followed, behind a
    /// pooler, by the session's `SET LOCAL`s. Statements up to [`Session::commit`] run in it.
    pub async fn begin(&self, begin: &str) -> Result<()> {
        let script = self.prelude(begin);
        self.answered(self.client().batch_execute(&script)).await?;
        self.0.in_transaction.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// End the transaction [`Session::begin`] started.
    pub async fn commit(&self) -> Result<()> {
        self.0.in_transaction.store(false, Ordering::SeqCst);
        self.answered(self.client().batch_execute("COMMIT")).await
    }

    /// Roll back the transaction [`Session::begin`] started.
    pub async fn rollback(&self) -> Result<()> {
        self.0.in_transaction.store(false, Ordering::SeqCst);
        self.answered(self.client().batch_execute("ROLLBACK")).await
    }

    /// Roll back a transaction that failed and, in the same message (so on the same server
    /// session behind a pooler), run `cleanup` (e.g. a DEALLOCATE); its errors are ignored.
    pub async fn rollback_then(&self, cleanup: &str) {
        self.0.in_transaction.store(false, Ordering::SeqCst);
        let script = format!("ROLLBACK; {cleanup}");
        let _ = self.answered(self.client().batch_execute(&script)).await;
    }

    /// All rows of one statement.
    pub async fn query(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        self.scoped(self.client().query_typed(sql, params)).await
    }

    /// The one row of a statement that returns exactly one.
    pub async fn query_one(&self, sql: &str, params: &[Param<'_>]) -> Result<Row> {
        self.scoped(self.client().query_typed_one(sql, params))
            .await
    }

    /// The row of a statement that returns at most one.
    pub async fn query_opt(&self, sql: &str, params: &[Param<'_>]) -> Result<Option<Row>> {
        self.scoped(self.client().query_typed_opt(sql, params))
            .await
    }

    /// Rows a statement changed.
    pub async fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        self.scoped(self.client().execute_typed(sql, params)).await
    }

    /// A hot statement (a batch): on a session idemctl owns, prepared once and reused (its generic
    /// plan, no parse per batch); behind a pooler, like [`Session::query`].
    pub async fn query_reused(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        if self.0.pooled {
            return self.query(sql, params).await;
        }
        let (types, values) = split(params);
        let client = self.client();
        self.answered(async {
            let statement = client.prepare_typed_cached(sql, &types).await?;
            client.query(&statement, &values).await
        })
        .await
    }

    /// Like [`Session::query_reused`], for a statement without rows: how many it changed.
    pub async fn execute_reused(&self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        if self.0.pooled {
            return self.execute(sql, params).await;
        }
        let (types, values) = split(params);
        let client = self.client();
        self.answered(async {
            let statement = client.prepare_typed_cached(sql, &types).await?;
            client.execute(&statement, &values).await
        })
        .await
    }

    /// Statements without parameters (DDL, utility commands), through the simple protocol.
    pub async fn batch_execute(&self, script: &str) -> Result<()> {
        if self.wraps() {
            let script = format!("{}; {script}; COMMIT", self.prelude("BEGIN"));
            return self.answered(self.client().batch_execute(&script)).await;
        }
        self.answered(self.client().batch_execute(script)).await
    }

    /// A script sent as it is, never wrapped in a transaction behind a pooler (a script that is a
    /// transaction of its own, or VACUUM, which cannot run in one), within `deadline` (not shorter
    /// than the session's).
    pub async fn script_within(&self, deadline: Duration, script: &str) -> Result<()> {
        let deadline = deadline.max(self.deadline());
        self.answered_within(deadline, self.client().batch_execute(script))
            .await
    }

    /// Like [`Session::batch_execute`], returning the rows as text (EXPLAIN).
    pub async fn simple_query(&self, script: &str) -> Result<Vec<SimpleQueryMessage>> {
        if self.wraps() {
            let script = format!("{}; {script}; COMMIT", self.prelude("BEGIN"));
            return self.answered(self.client().simple_query(&script)).await;
        }
        self.answered(self.client().simple_query(script)).await
    }

    fn wraps(&self) -> bool {
        self.0.pooled && !self.0.in_transaction.load(Ordering::SeqCst)
    }

    /// `BEGIN ...; SET LOCAL a = 'x'; ...` (just `begin` on an owned session).
    fn prelude(&self, begin: &str) -> String {
        let local = self
            .0
            .local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut script = begin.to_owned();
        for (name, value) in local.iter() {
            script.push_str(&format!("; SET LOCAL {name} = {}", literal(value)));
        }
        script
    }

    /// Run `work` as it is on an owned session or inside [`Session::begin`]; otherwise in a
    /// transaction of its own that starts with the session's settings. The three messages are
    /// sent at once (`biased`: in this order), so the wrapper adds no round trip (and they share
    /// one deadline). A failed statement makes the COMMIT a rollback.
    async fn scoped<T>(&self, work: impl Future<Output = Result<T, Error>>) -> Result<T> {
        if !self.wraps() {
            return self.answered(work).await;
        }
        let begin = self.prelude("BEGIN");
        let client = self.client();
        self.answered(async {
            let (begun, result, committed) = tokio::join!(
                biased;
                client.batch_execute(&begin),
                work,
                client.batch_execute("COMMIT"),
            );
            begun?;
            let value = result?;
            committed?;
            Ok(value)
        })
        .await
    }
}

fn split<'a>(params: &'a [Param<'a>]) -> (Vec<Type>, Vec<&'a (dyn ToSql + Sync)>) {
    params.iter().map(|(v, t)| (t.clone(), *v)).unzip()
}

impl Session {
    /// Whether this session can write (one short statement, no table touched).
    pub(crate) async fn writability(&self) -> anyhow::Result<Writability> {
        use anyhow::Context as _;
        let row = self
            .query_one(include_str!("../../sql/session_read_only.sql"), &[])
            .await
            .context(crate::report::db::Step::CheckWritable)?;
        Ok(match (row.get("in_recovery"), row.get("read_only")) {
            (true, _) => Writability::HotStandby,
            (false, true) => Writability::ReadOnly,
            (false, false) => Writability::Writable,
        })
    }

    /// Refuse `command` (exit 6, before any work) when this session cannot write.
    pub async fn require_writable(&self, command: &str) -> anyhow::Result<()> {
        match self.writability().await? {
            Writability::Writable => Ok(()),
            writability => Err(crate::exit::refuse(
                crate::exit::Exit::PermissionDenied,
                crate::report::db::Refusal::CannotWrite {
                    command: command.to_owned(),
                    writability,
                },
            )),
        }
    }
}

//! Connections for a resolved [`Target`]: the deadpool pool (TLS connector; on every new
//! connection, whether a pooler stands in between and, on a session idemctl owns, the session
//! timeouts), the connect loop that retries transient failures with backoff until the connect
//! timeout, then fails with one line saying where, as whom, and why, and the clean close that lets
//! every connection say goodbye (Terminate) before the process exits.

use super::attrs::{Mismatch, SessionAttrs};
use super::auth;
use super::tls_stream::MakeTls;
use super::{SessionTimeouts, Target};
use crate::domain::{PoolMode, SetBy, StatementTimeout};
use crate::report::failure::{ConnFailure, EndReason, Reason};
use deadpool_postgres::{
    Connect, Hook, HookError, Manager, ManagerConfig, Object, PoolError, RecyclingMethod, Runtime,
};
use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::task::JoinHandle;
use tokio_postgres::NoTls;
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};
use tokio_postgres::types::{ToSql, Type};

/// The session limits, on a session idemctl owns.
static SESSION_SQL: LazyLock<String> =
    LazyLock::new(|| with_timeout_choice(include_str!("../../sql/session_settings.sql")));
/// Which server process answers, and the session limits when it is the one idemctl logged in to.
static DETECT_SQL: LazyLock<String> =
    LazyLock::new(|| with_timeout_choice(include_str!("../../sql/session_detect.sql")));

/// `template` with the statement_timeout choice both session statements share in place of
/// `{statement_timeout_choice}` (its leading comment left out).
fn with_timeout_choice(template: &str) -> String {
    let choice: String = include_str!("../../sql/statement_timeout_choice.sql")
        .lines()
        .skip_while(|l| l.starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    template.replace("{statement_timeout_choice}", &choice)
}
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);
/// How long [`Pool::close`] waits for the connections to finish saying goodbye.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

pub(crate) use crate::domain::Route;

/// What the pool's connections share: the mode asked for, what was found, and the connection
/// tasks to wait for on close.
struct Shared {
    mode: PoolMode,
    /// `target_session_attrs` (prefer-standby: two passes per connection, a standby first).
    attrs: SessionAttrs,
    /// `sslmode=allow`: a login without TLS first.
    allow: bool,
    timeouts: SessionTimeouts,
    /// The statement_timeout in force, as the last connection made chose it (idemctl's until
    /// one has connected).
    statement: Mutex<StatementTimeout>,
    /// The least owning route any connection has shown (a pooler seen once is assumed throughout).
    route: Mutex<Option<Route>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// How each connection ended, by the process id its login announced (see [`Line`]).
    ended: Mutex<HashMap<i32, Arc<Ended>>>,
    /// Set when a round trip on any of the pool's connections went unanswered (see [`Line`]).
    silent: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    /// The statement_timeout a new connection chose: `ms`, set by `set_by` (`idemctl`, else
    /// `pg_settings.source`).
    fn keep_statement_timeout(&self, ms: i64, set_by: &str) {
        let chosen = StatementTimeout {
            value: Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
            set_by: match set_by {
                "idemctl" => SetBy::Flag,
                source => SetBy::of_source(source),
            },
        };
        *self
            .statement
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = chosen;
    }

    fn statement_timeout(&self) -> StatementTimeout {
        *self
            .statement
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, route: Route) {
        let mut seen = self.route.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.is_none_or(Route::owns_session) {
            *seen = Some(route);
        }
    }
}

/// idemctl's connection pool: deadpool's, plus what its connections showed about the route to the
/// server, and the connection tasks to let finish on [`Pool::close`].
pub(crate) struct Pool {
    inner: deadpool_postgres::Pool,
    shared: Arc<Shared>,
}

impl Pool {
    /// How the connections made so far reach the server (`None` before the first one).
    pub(crate) fn route(&self) -> Option<Route> {
        *self
            .shared
            .route
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The deadline of one round trip on this pool's connections (see
    /// [`super::answer_deadline`]).
    pub(crate) fn answer_deadline(&self) -> Duration {
        super::answer_deadline(self.shared.statement_timeout().value)
    }

    /// The statement_timeout in force on this pool's sessions, and what set it.
    pub(crate) fn statement_timeout(&self) -> StatementTimeout {
        self.shared.statement_timeout()
    }

    /// What a session on `client` needs to know about its connection: the deadline of a round
    /// trip and, once the connection has ended, why.
    pub(crate) async fn line(&self, client: &tokio_postgres::Client) -> Line {
        let ended = match announced_pid(client).await {
            Some(pid) => self
                .shared
                .ended
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&pid)
                .cloned(),
            None => None,
        };
        Line {
            deadline: self.answer_deadline(),
            idle: self.shared.timeouts.idle_in_transaction,
            silent: self.shared.silent.clone(),
            ended: ended.unwrap_or_default(),
        }
    }

    /// The settings a session behind a transaction pooler applies with `SET LOCAL` in each of its
    /// transactions (on a session idemctl owns they were set once, at login).
    pub(crate) fn session_settings(&self) -> Vec<(&'static str, String)> {
        let t = self.shared.timeouts;
        vec![
            (
                "statement_timeout",
                setting_millis(self.shared.statement_timeout().value),
            ),
            ("lock_timeout", setting_millis(t.lock)),
            (
                "idle_in_transaction_session_timeout",
                setting_millis(t.idle_in_transaction),
            ),
        ]
    }

    /// Close every idle connection and wait (up to 2 s) until each connection has sent its
    /// Terminate and closed its socket. Sessions still checked out close when they are dropped.
    pub(crate) async fn close(&self) {
        self.inner.close();
        let tasks = std::mem::take(
            &mut *self
                .shared
                .tasks
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            for task in tasks {
                let _ = task.await;
            }
        })
        .await;
    }
}

impl Target {
    /// A pool of at most `max_size` connections (at least 1), detecting a pooler (`--pool-mode
    /// auto`). See [`Target::pool_with`].
    #[cfg(test)]
    pub(crate) fn pool(&self, max_size: usize) -> anyhow::Result<Pool> {
        self.pool_with(max_size, PoolMode::Auto)
    }

    /// A pool of at most `max_size` connections (at least 1). Every new connection is examined
    /// for a pooler (unless `mode` says what to assume) and, when idemctl owns its session, gets
    /// the session timeouts; reused ones are checked with a round trip (`Verified`) so a
    /// connection dropped by a proxy is replaced rather than failing the next query.
    pub(crate) fn pool_with(&self, max_size: usize, mode: PoolMode) -> anyhow::Result<Pool> {
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Verified,
        };
        let shared = Arc::new(Shared {
            mode,
            attrs: self.attrs,
            allow: self.tls_plan.mode == super::tls::SslMode::Allow,
            timeouts: self.session,
            statement: Mutex::new(StatementTimeout {
                value: self.session.statement,
                set_by: SetBy::Flag,
            }),
            route: Mutex::new(None),
            tasks: Mutex::new(Vec::new()),
            ended: Mutex::new(HashMap::new()),
            silent: tokio::sync::watch::Sender::new(false),
        });
        let config = self.config.clone();
        // idemctl's own host loop (`auth::connect`) for every connection: it judges
        // target_session_attrs, falls back from TLS as libpq does, stops at a refused login,
        // never uses TLS on a Unix socket, and watches require_auth (every method allowed when
        // it is not set).
        let rule = self
            .require_auth
            .clone()
            .unwrap_or_else(|| Arc::new(auth::AuthRule::any()));
        let manager = Manager::from_connect(
            config,
            Watched {
                tls: self.tls.clone(),
                rule,
                shared: shared.clone(),
            },
            manager_config,
        );
        let inner = deadpool_postgres::Pool::builder(manager)
            .max_size(max_size.max(1))
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(self.connect_timeout))
            .recycle_timeout(Some(self.connect_timeout))
            .post_create(session_hook(shared.clone()))
            .build()
            .map_err(|e| {
                anyhow::Error::new(ConnFailure::PoolUnbuilt {
                    error: e.to_string(),
                })
            })?;
        Ok(Pool { inner, shared })
    }

    /// A connection from `pool`, retrying refused/missing/starting-up/overloaded servers with
    /// exponential backoff (100 ms doubling to 2 s) until the connect timeout has elapsed overall.
    /// Errors carry [`Exit::CannotConnect`] and never contain the password.
    pub(crate) async fn connect(&self, pool: &Pool) -> anyhow::Result<Object> {
        let started = Instant::now();
        let deadline = started + self.connect_timeout;
        let mut delay = FIRST_RETRY_DELAY;
        let mut attempts = 0u32;
        let mut previous: Option<Failure> = None;
        loop {
            attempts += 1;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let failure = match tokio::time::timeout(remaining, pool.inner.get()).await {
                Ok(Ok(client)) => return Ok(client),
                // The budget ran out mid-attempt (the pool's own create timeout is the same
                // budget, and may fire first): the previous attempt's reason (say, "connection
                // refused") tells the operator more than "timed out".
                Ok(Err(PoolError::Timeout(_))) | Err(_) => previous
                    .take()
                    .unwrap_or_else(|| Failure::timed_out(self.connect_timeout)),
                Ok(Err(e)) => Failure::from_pool(&e),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            // An attempt's TCP connect is given the whole budget too: when its own timer fires,
            // the budget has run out as well, and the words must not depend on which timer fired
            // first.
            let failure = match failure.reason {
                Reason::TimedOut if left.is_zero() => previous
                    .take()
                    .unwrap_or_else(|| Failure::timed_out(self.connect_timeout)),
                _ => failure,
            };
            if !failure.transient || left.is_zero() {
                return Err(self.connect_error(failure, attempts, started.elapsed()));
            }
            tokio::time::sleep(delay.min(left)).await;
            delay = (delay * 2).min(MAX_RETRY_DELAY);
            previous = Some(failure);
        }
    }

    fn connect_error(&self, failure: Failure, attempts: u32, elapsed: Duration) -> anyhow::Error {
        anyhow::Error::new(ConnFailure::CannotConnect {
            target: self.name(),
            reason: failure.reason,
            retried: (attempts > 1).then_some(elapsed),
        })
    }
}

type Connected = Result<(tokio_postgres::Client, JoinHandle<()>), tokio_postgres::Error>;

/// Connects with idemctl's host loop ([`auth::connect`]) and keeps the connection task for
/// [`Pool::close`]: deadpool aborts the task handle it is given as soon as the client is dropped,
/// which cuts the socket before the connection has written its Terminate message; it gets a
/// finished task instead.
struct Watched {
    tls: Option<MakeTls>,
    rule: Arc<auth::AuthRule>,
    shared: Arc<Shared>,
}

impl Watched {
    async fn connect_once(
        &self,
        config: &tokio_postgres::Config,
        attrs: SessionAttrs,
    ) -> Result<(tokio_postgres::Client, JoinHandle<()>), tokio_postgres::Error> {
        let rule = self.rule.clone();
        let ended = Arc::new(Ended::default());
        let (client, task) = match &self.tls {
            Some(tls) => {
                let (client, connection) =
                    auth::connect(config, tls.clone(), rule, attrs, self.shared.allow).await?;
                (client, watch_end(connection, ended.clone()))
            }
            None => {
                let (client, connection) =
                    auth::connect(config, NoTls, rule, attrs, self.shared.allow).await?;
                (client, watch_end(connection, ended.clone()))
            }
        };
        if let Some(pid) = announced_pid(&client).await {
            self.shared
                .ended
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(pid, ended);
        }
        Ok((client, task))
    }
}

/// Drive a connection to its end and keep why it ended (a server's FATAL error that came when no
/// statement was waiting, such as `pg_terminate_backend`'s, reaches no statement otherwise: the
/// driver then says only "connection closed"). The reason is recorded before the connection is
/// dropped, so a statement that learns of the end finds it. The server's warnings are kept too:
/// each is read, and recorded, before the answer of the statement it came with reaches the session.
fn watch_end<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    ended: Arc<Ended>,
) -> JoinHandle<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notice(notice))) => ended.notice(&notice),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    ended.record(&e);
                    return;
                }
                None => return,
            }
        }
    })
}

/// Why a connection ended, when the server or the socket said; and the server's plain warnings
/// on it (how many, and the first not yet taken).
#[derive(Debug, Default)]
pub struct Ended(Mutex<Option<EndReason>>, Mutex<Warnings>);

/// The plain warnings (SQLSTATE 01000, as a cancelled wait for synchronous standbys gives) a
/// connection has had: a count, and the first one since the count was last read, so a long run on
/// a server that warns often keeps one warning, not all of them.
#[derive(Debug, Default)]
struct Warnings {
    count: usize,
    first_unread: Option<(String, String)>,
}

impl Ended {
    /// Keep a notice of WARNING severity with the plain warning SQLSTATE (01000); the others are
    /// informational, or name a condition of their own.
    fn notice(&self, notice: &tokio_postgres::error::DbError) {
        let warning = match notice.parsed_severity() {
            Some(s) => s == tokio_postgres::error::Severity::Warning,
            None => notice.severity() == "WARNING",
        };
        if warning && notice.code().code() == "01000" {
            let mut w = self.1.lock().unwrap_or_else(PoisonError::into_inner);
            w.count += 1;
            if w.first_unread.is_none() {
                w.first_unread =
                    Some((notice.message().to_owned(), notice.code().code().to_owned()));
            }
        }
    }

    /// How many plain warnings the server has sent on this connection; forgets the one kept, so
    /// [`Ended::warning_after`] gives the first after this call.
    pub(crate) fn warnings(&self) -> usize {
        let mut w = self.1.lock().unwrap_or_else(PoisonError::into_inner);
        w.first_unread = None;
        w.count
    }

    /// The first plain warning since [`Ended::warnings`] returned `seen`, if any came: its message
    /// and SQLSTATE.
    pub(crate) fn warning_after(&self, seen: usize) -> Option<(String, String)> {
        let w = self.1.lock().unwrap_or_else(PoisonError::into_inner);
        (w.count > seen).then(|| w.first_unread.clone()).flatten()
    }

    fn record(&self, e: &tokio_postgres::Error) {
        let reason = match e.as_db_error() {
            Some(db) => EndReason::Server {
                message: db.message().to_owned(),
                code: db.code().code().to_owned(),
            },
            None => {
                let text = chain_text(e);
                if text.is_empty() || e.is_closed() {
                    return;
                }
                EndReason::Socket(text)
            }
        };
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
    }

    /// The server's reason (with its SQLSTATE), or the socket's, once the connection has ended.
    pub(crate) fn reason(&self) -> Option<EndReason> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// One connection as a session sees it: how long to wait for an answer, and why the connection
/// ended (once it has).
#[derive(Debug, Clone)]
pub struct Line {
    /// See [`super::answer_deadline`].
    pub deadline: Duration,
    /// The idle_in_transaction_session_timeout idemctl sets (also the guard's idle limit).
    pub idle: Duration,
    /// Shared by the pool's connections: once one round trip went unanswered, the path to the
    /// server is taken for dead and every connection's round trips give up at once, so a run ends
    /// one deadline after its network died, not one deadline per session in turn.
    pub silent: tokio::sync::watch::Sender<bool>,
    pub ended: Arc<Ended>,
}

impl Connect for Watched {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> Pin<Box<dyn Future<Output = Connected> + Send + '_>> {
        let config = pg_config.clone();
        Box::pin(async move {
            let (client, task) = match self.shared.attrs {
                // libpq's prefer-standby: every host is tried for a standby first; when none is
                // found (or none answers), every host again for any server.
                SessionAttrs::PreferStandby => {
                    match self.connect_once(&config, SessionAttrs::Standby).await {
                        Ok(found) => found,
                        Err(e) if auth::is_final(&e) => return Err(e),
                        Err(_) => self.connect_once(&config, SessionAttrs::Any).await?,
                    }
                }
                attrs => self.connect_once(&config, attrs).await?,
            };
            self.shared
                .tasks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(task);
            Ok((client, tokio::spawn(async {})))
        })
    }
}

/// Right after login: find out whether idemctl owns this server session and, if it does, set the
/// session timeouts (kept out of startup `options` because PgBouncer refuses unknown startup
/// parameters). Behind a transaction pooler nothing is set here: each transaction sets its own.
fn session_hook(shared: Arc<Shared>) -> Hook {
    Hook::async_fn(move |client, _metrics| {
        let shared = shared.clone();
        Box::pin(async move {
            let values = owned_session_settings(&shared.timeouts);
            let shorter_own = shared.timeouts.shorter_own_statement;
            let mut params: Vec<(&(dyn ToSql + Sync), Type)> = values
                .iter()
                .map(|v| (v as &(dyn ToSql + Sync), Type::TEXT))
                .collect();
            let (route, announced) = match shared.mode {
                PoolMode::Session => (Some(Route::DeclaredSession), None),
                // No server process is named, so the detection sets nothing.
                PoolMode::Transaction => (Some(Route::DeclaredTransaction), None),
                PoolMode::Auto => (None, announced_pid(client).await),
            };
            params.push((&shorter_own, Type::BOOL));
            let sql = if route == Some(Route::DeclaredSession) {
                &SESSION_SQL
            } else {
                // Detection and, on a session idemctl owns, the settings: one round trip.
                params.push((&announced, Type::INT4));
                &DETECT_SQL
            };
            let rows = client
                .query_typed(sql.as_str(), &params)
                .await
                .map_err(HookError::Backend)?;
            if let Some(row) = rows.first() {
                shared.keep_statement_timeout(
                    row.get("statement_timeout_ms"),
                    row.get("statement_timeout_set_by"),
                );
            }
            shared.record(
                route.unwrap_or_else(|| route_of(announced, rows.first().map(|r| r.get("pid")))),
            );
            Ok(())
        })
    })
}

/// The values of `session_settings.sql`'s `$1..$8`: the session limits, then what asks the
/// server to notice a dead client (`'0'`: the system's default, with `keepalives=0`).
fn owned_session_settings(t: &SessionTimeouts) -> [String; 8] {
    let live = t.liveness;
    let (idle, interval, count) = match live.keepalives {
        true => (
            live.idle.as_secs().to_string(),
            live.interval.as_secs().to_string(),
            live.count.to_string(),
        ),
        false => ("0".to_owned(), "0".to_owned(), "0".to_owned()),
    };
    [
        setting_millis(t.statement),
        setting_millis(t.lock),
        setting_millis(t.idle_in_transaction),
        idle,
        interval,
        count,
        live.user_timeout
            .as_millis()
            .min(i32::MAX as u128)
            .to_string(),
        setting_millis(live.check_interval),
    ]
}

/// A pooler answers the login itself, with a cancel key of its own making (PgBouncer's is random),
/// while a server announces its own process id: compare that with `pg_backend_pid()`.
fn route_of(announced: Option<i32>, server_pid: Option<i32>) -> Route {
    match (announced, server_pid) {
        (Some(a), Some(s)) if a == s => Route::Direct,
        _ => Route::DetectedPooler,
    }
}

/// The process id of the login's BackendKeyData. The driver keeps it private to its cancel token,
/// which writes it into the CancelRequest it sends: have it send one into an in-memory pipe, read
/// the id back, and send nothing anywhere.
async fn announced_pid(client: &tokio_postgres::Client) -> Option<i32> {
    let token = client.cancel_token();
    let (ours, theirs) = tokio::io::duplex(64);
    let (_, pid) = tokio::join!(
        token.cancel_query_raw(Loopback(ours), NoEncryption),
        read_cancel_request(theirs)
    );
    pid.ok().flatten()
}

const SSL_REQUEST: i32 = 80_877_103;
const CANCEL_REQUEST: i32 = 80_877_102;

/// The far end of [`announced_pid`]'s pipe: accept a TLS request (the pipe's "TLS" is a no-op),
/// then read the CancelRequest (length 16, code, process id, secret).
async fn read_cancel_request(mut peer: DuplexStream) -> io::Result<Option<i32>> {
    let int = |b: &[u8]| i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let mut head = [0u8; 8];
    peer.read_exact(&mut head).await?;
    if int(&head[4..]) == SSL_REQUEST {
        peer.write_all(b"S").await?;
        peer.read_exact(&mut head).await?;
    }
    if int(&head[..4]) != 16 || int(&head[4..]) != CANCEL_REQUEST {
        return Ok(None);
    }
    let mut body = [0u8; 8];
    peer.read_exact(&mut body).await?;
    Ok(Some(int(&body[..4])))
}

/// An in-memory stream that is its own "TLS" (nothing is encrypted: nothing leaves the process).
struct Loopback(DuplexStream);

impl AsyncRead for Loopback {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Loopback {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl TlsStream for Loopback {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

/// The "TLS" of [`Loopback`]: hands the stream back as it is.
struct NoEncryption;

impl TlsConnect<Loopback> for NoEncryption {
    type Stream = Loopback;
    type Error = io::Error;
    type Future = std::future::Ready<io::Result<Loopback>>;

    fn connect(self, stream: Loopback) -> Self::Future {
        std::future::ready(Ok(stream))
    }
}

/// A GUC value in milliseconds. Sub-millisecond durations round up so they do not turn into 0
/// (which means "no limit"), and huge ones are capped at the server's maximum (about 24 days).
pub(crate) fn setting_millis(duration: Duration) -> String {
    let millis = duration.as_millis();
    let millis = if millis == 0 && !duration.is_zero() {
        1
    } else {
        millis
    };
    format!("{}ms", millis.min(i32::MAX as u128))
}

/// Why an attempt failed, and whether trying again may help.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) reason: Reason,
    pub(crate) transient: bool,
}

impl Failure {
    fn timed_out(after: Duration) -> Failure {
        Failure {
            reason: Reason::TimedOutAfter(after),
            transient: true,
        }
    }

    fn from_pool(e: &PoolError) -> Failure {
        match e {
            PoolError::Backend(e) => Failure::from_pg(e),
            PoolError::PostCreateHook(HookError::Backend(e)) => Failure {
                reason: Reason::SessionSetup(Box::new(Failure::from_pg(e).reason)),
                transient: false,
            },
            PoolError::Timeout(_) => Failure {
                reason: Reason::TimedOut,
                transient: true,
            },
            other => Failure {
                reason: Reason::Other(other.to_string().trim().to_string()),
                transient: false,
            },
        }
    }

    /// Server errors give their message (the driver's `Display` says only "db error"); socket
    /// errors are named by kind; anything else is the error chain.
    pub(crate) fn from_pg(e: &tokio_postgres::Error) -> Failure {
        if let Some(db) = e.as_db_error() {
            // 57P03: starting up or shutting down; 53300: too many connections.
            let transient = matches!(db.code().code(), "57P03" | "53300");
            let message = db.message().to_string();
            // PgBouncer's refusal of a startup parameter it does not pass on.
            let reason = if message.starts_with("unsupported startup parameter") {
                Reason::PoolerParameter(message)
            } else {
                Reason::Server(message)
            };
            return Failure { reason, transient };
        }
        if let Some(mismatch) = sources(e)
            .filter_map(|s| s.downcast_ref::<io::Error>())
            .find_map(|io| io.get_ref()?.downcast_ref::<Mismatch>())
        {
            return Failure {
                reason: Reason::Other(mismatch.to_string()),
                transient: false,
            };
        }
        let chain = chain_text(e);
        if let Some(at) = chain.find(auth::REFUSAL) {
            return Failure {
                reason: Reason::AuthRefused(chain[at..].to_owned()),
                transient: false,
            };
        }
        if let Some(failure) = closed_at_ssl_request(e) {
            return failure;
        }
        if let Some(failure) = io_failure(e) {
            return failure;
        }
        if chain.ends_with("password missing") {
            return Failure {
                reason: Reason::PasswordMissing,
                transient: false,
            };
        }
        Failure {
            reason: Reason::Other(chain),
            transient: false,
        }
    }
}

/// The connection ended before the one-byte answer to the SSLRequest (the only place the driver
/// reads with `read_exact`, hence an "early eof"). A PostgreSQL server always answers it; what
/// closes instead is a listener that expects TLS from the first byte: a server or TLS-terminating
/// proxy for `sslnegotiation=direct`. Said in libpq's words, with what to change.
fn closed_at_ssl_request(e: &tokio_postgres::Error) -> Option<Failure> {
    let io = sources(e).find_map(|s| s.downcast_ref::<io::Error>())?;
    if io.kind() != io::ErrorKind::UnexpectedEof {
        return None;
    }
    Some(Failure {
        reason: Reason::ClosedAtSslRequest,
        transient: false,
    })
}

/// Socket-level failures that mean "nobody is listening (yet)" or "no answer".
fn io_failure(e: &tokio_postgres::Error) -> Option<Failure> {
    let io = sources(e).find_map(|s| s.downcast_ref::<io::Error>())?;
    let reason = match io.kind() {
        io::ErrorKind::ConnectionRefused => Reason::Refused,
        io::ErrorKind::NotFound => Reason::NoSocket,
        io::ErrorKind::TimedOut => Reason::TimedOut,
        io::ErrorKind::ConnectionReset => Reason::Reset,
        _ => return None,
    };
    Some(Failure {
        reason,
        transient: true,
    })
}

/// The error and its causes joined with ": ", minus the driver's generic top line.
fn chain_text(e: &tokio_postgres::Error) -> String {
    let mut parts: Vec<String> = std::iter::once(e as &dyn StdError)
        .chain(sources(e))
        .map(ToString::to_string)
        .collect();
    parts.dedup();
    if parts.len() > 1 && parts[0] == "error connecting to server" {
        parts.remove(0);
    }
    parts.join(": ")
}

fn sources<'a>(
    e: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(e.source(), |&s| s.source())
}

#[cfg(test)]
mod tests {
    /// Both session statements hold the one statement_timeout choice, with nothing left to fill.
    #[test]
    fn the_session_statements_share_the_statement_timeout_choice() {
        for sql in [super::SESSION_SQL.as_str(), super::DETECT_SQL.as_str()] {
            assert!(!sql.contains('{'), "{sql}");
            assert!(sql.contains("AS t\n") || sql.ends_with("AS t"), "{sql}");
            assert_eq!(
                sql.matches("FROM pg_catalog.pg_settings AS g").count(),
                1,
                "{sql}"
            );
            assert_eq!(sql.matches("$9::bool").count(), 1, "{sql}");
        }
    }
}

//! `require_auth` (libpq 16): which authentication methods the server may ask for. The driver has
//! no hook into its authentication exchange, so connections with a requirement read the server's
//! messages on their way in ([`Watching`]): a request for a method not allowed ends the connection
//! before the driver answers it (no password is sent), and an AuthenticationOk the client did not
//! earn is refused unless `none` is allowed. The words are libpq's.
//!
//! The watcher sits on the socket and, once TLS is up, on the TLS session (the socket then carries
//! ciphertext); [`connect`] is the driver's own host loop with the watched socket, used only for
//! connections with a requirement.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use super::attrs::{Mismatch, Observed, SessionAttrs};
use crate::report::failure::{AttemptEnded, AttrsMismatch, AuthAsked, AuthRefusal, AuthRuleError};
use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::{Host, LoadBalanceHosts, SslMode, SslNegotiation};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::{Client, Config, Connection, SimpleQueryMessage};

/// An authentication method `require_auth` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Password,
    Md5,
    Gss,
    Sspi,
    Scram,
    None,
}

const METHODS: [(&str, Method); 6] = [
    ("password", Method::Password),
    ("md5", Method::Md5),
    ("gss", Method::Gss),
    ("sspi", Method::Sspi),
    ("scram-sha-256", Method::Scram),
    ("none", Method::None),
];

/// A parsed `require_auth`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AuthRule {
    /// The value as given, for messages (libpq quotes it).
    text: String,
    allowed: Vec<Method>,
}

impl AuthRule {
    /// libpq's parsing: a comma-separated list of methods, all plain (the only ones allowed) or all
    /// negated with `!` (every other one allowed). The error is libpq's message.
    pub(crate) fn parse(value: &str) -> Result<AuthRule, AuthRuleError> {
        let mut listed: Vec<Method> = Vec::new();
        let mut negated: Option<bool> = None;
        for item in value.split(',') {
            let (neg, name) = match item.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, item),
            };
            let Some(&(_, method)) = METHODS.iter().find(|(n, _)| *n == name) else {
                return Err(AuthRuleError::UnknownMethod(name.to_owned()));
            };
            match negated {
                Some(false) if neg => {
                    return Err(AuthRuleError::NegatedAmongPlain(item.to_owned()));
                }
                Some(true) if !neg => {
                    return Err(AuthRuleError::PlainAmongNegated(item.to_owned()));
                }
                _ => negated = Some(neg),
            }
            if listed.contains(&method) {
                // libpq names the item as written, `!` included.
                return Err(AuthRuleError::Repeated(item.to_owned()));
            }
            listed.push(method);
        }
        let allowed = if negated == Some(true) {
            METHODS
                .iter()
                .map(|(_, m)| *m)
                .filter(|m| !listed.contains(m))
                .collect()
        } else {
            listed
        };
        Ok(AuthRule {
            text: value.to_string(),
            allowed,
        })
    }

    /// No restriction: every method, and no exchange at all (`none`), as without require_auth.
    pub(crate) fn any() -> AuthRule {
        AuthRule {
            text: String::new(),
            allowed: METHODS.iter().map(|(_, m)| *m).collect(),
        }
    }

    fn allows(&self, m: Method) -> bool {
        self.allowed.contains(&m)
    }

    fn refuse(&self, asked: AuthAsked) -> io::Error {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            AuthRefusal {
                rule: self.text.clone(),
                asked,
            },
        )
    }
}

/// The start of the error text [`AuthRule`] refusals carry (for the connect error's wording).
pub(crate) const REFUSAL: &str = "authentication method requirement";

const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing sent yet: the client's first bytes say whether TLS is requested.
    Start,
    /// The client asked for TLS; the server's next byte answers.
    SslAnswer,
    /// Reading the server's messages until authentication ends.
    Messages,
    /// Authentication is over, or TLS carries it: nothing more to watch here.
    Off,
}

/// How far one login got, for libpq's sslmode retries: whether TLS carried it, and whether the
/// server accepted the authentication (AuthenticationOk) before any error.
#[derive(Debug, Default)]
struct Progress {
    tls: AtomicBool,
    authenticated: AtomicBool,
}

impl Progress {
    /// libpq retries (prefer without TLS, allow with TLS) when the server answered the startup or
    /// authentication with an ErrorResponse, not on an error after AuthenticationOk.
    fn refused_before_login(&self, e: &tokio_postgres::Error) -> bool {
        e.as_db_error().is_some() && !self.authenticated.load(Ordering::Relaxed)
    }
}

/// The server's side of the authentication exchange, parsed incrementally.
struct Parser {
    rule: Arc<AuthRule>,
    progress: Arc<Progress>,
    stage: Stage,
    /// The current message's first bytes: type, length, and for 'R' the request code.
    head: Vec<u8>,
    /// Bytes of the current message still to skip.
    skip: usize,
    /// Whether the client completed an exchange the server asked for.
    finished: bool,
    refused: Option<String>,
}

impl Parser {
    fn new(rule: Arc<AuthRule>, stage: Stage, progress: Arc<Progress>) -> Parser {
        Parser {
            rule,
            progress,
            stage,
            head: Vec::with_capacity(9),
            skip: 0,
            finished: false,
            refused: None,
        }
    }

    fn client_wrote(&mut self, bytes: &[u8]) {
        if self.stage != Stage::Start || bytes.is_empty() {
            return;
        }
        self.stage = if bytes.starts_with(&SSL_REQUEST) {
            Stage::SslAnswer
        } else if bytes[0] == 0x16 {
            // A TLS ClientHello first (sslnegotiation=direct): the TLS layer watches.
            Stage::Off
        } else {
            Stage::Messages
        };
    }

    /// Feed bytes from the server; `Err` when the exchange breaks the rule.
    fn server_sent(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.stage {
                Stage::Off => return Ok(()),
                Stage::Start | Stage::Messages => self.stage = Stage::Messages,
                Stage::SslAnswer => {
                    self.stage = if bytes[0] == b'N' {
                        Stage::Messages
                    } else {
                        Stage::Off
                    };
                    bytes = &bytes[1..];
                    continue;
                }
            }
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let want = if self.head.first() == Some(&b'R') {
                9
            } else {
                5
            };
            let n = (want - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.head.len() < want {
                continue;
            }
            if want == 5 && self.head[0] == b'R' {
                continue; // read the request code too
            }
            let len = u32::from_be_bytes([self.head[1], self.head[2], self.head[3], self.head[4]])
                as usize;
            let read_body = self.head.len() - 1;
            let kind = self.head[0];
            let code = (kind == b'R').then(|| {
                i32::from_be_bytes([self.head[5], self.head[6], self.head[7], self.head[8]])
            });
            self.head.clear();
            self.skip = (len + 1).saturating_sub(read_body + 1);
            match (kind, code) {
                (b'R', Some(code)) => self.request(code)?,
                // NegotiateProtocolVersion: skip; anything else (an error) ends the exchange.
                (b'v', _) => {}
                _ => self.stage = Stage::Off,
            }
        }
        Ok(())
    }

    fn request(&mut self, code: i32) -> io::Result<()> {
        let rule = &self.rule;
        let refusal = match code {
            0 => {
                self.progress.authenticated.store(true, Ordering::Relaxed);
                if rule.allows(Method::None) || self.finished {
                    self.stage = Stage::Off;
                    None
                } else {
                    Some(AuthAsked::Incomplete)
                }
            }
            3 if !rule.allows(Method::Password) => Some(AuthAsked::Cleartext),
            5 if !rule.allows(Method::Md5) => Some(AuthAsked::Md5),
            3 | 5 => {
                self.finished = true;
                None
            }
            7 | 8 if !rule.allows(Method::Gss) => Some(AuthAsked::Gss),
            9 if !rule.allows(Method::Sspi) => Some(AuthAsked::Sspi),
            10 | 11 if !rule.allows(Method::Scram) => Some(AuthAsked::Sasl),
            12 => {
                self.finished = true;
                None
            }
            7..=11 => None,
            _ => Some(AuthAsked::Unknown),
        };
        match refusal {
            Some(reason) => {
                let e = rule.refuse(reason);
                self.refused = Some(e.to_string());
                self.stage = Stage::Off;
                Err(e)
            }
            None => Ok(()),
        }
    }
}

/// A stream whose incoming authentication messages are checked against the rule.
pub(crate) struct Watching<S> {
    inner: S,
    parser: Parser,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watching<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(refused) = &self.parser.refused {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                refused.clone(),
            )));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                // On a refusal the bytes read are dropped with the error: the driver never sees
                // the request it must not answer.
                this.parser.server_sent(&buf.filled()[before..])?;
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watching<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.parser.client_wrote(&buf[..n]);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Watching<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A TCP or Unix-domain socket.
///
/// A write the peer no longer reads (it closed the socket: `pg_terminate_backend`, a shutdown)
/// is taken as written and its error kept: the server's last message, its reason and SQLSTATE,
/// is usually still waiting to be read, and the driver reads it only if the write did not fail
/// first. The kept error is the stream's end when no such message comes.
pub(crate) struct Raw {
    socket: Socket,
    write_failed: Option<io::Error>,
}

enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Raw {
    fn new(socket: Socket) -> Raw {
        Raw {
            socket,
            write_failed: None,
        }
    }

    /// The peer has closed: keep the first such error and let the driver read what is left.
    fn closed_by_peer(&mut self, result: io::Result<usize>, len: usize) -> io::Result<usize> {
        match result {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                self.write_failed.get_or_insert(e);
                Ok(len)
            }
            other => other,
        }
    }
}

impl AsyncRead for Raw {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = match &mut this.socket {
            Socket::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_read(cx, buf),
        };
        match read {
            Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {
                match this.write_failed.take() {
                    Some(e) => Poll::Ready(Err(e)),
                    None => Poll::Ready(Ok(())),
                }
            }
            other => other,
        }
    }
}

impl AsyncWrite for Raw {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.write_failed.is_some() {
            return Poll::Ready(Ok(buf.len()));
        }
        let written = match &mut this.socket {
            Socket::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_write(cx, buf),
        };
        written.map(|result| this.closed_by_peer(result, buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().socket {
            Socket::Tcp(s) => Pin::new(s).poll_flush(cx),
            Socket::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().socket {
            Socket::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The driver's TLS hook, with the TLS session's plaintext watched.
pub(crate) struct WatchTls<C> {
    inner: C,
    rule: Arc<AuthRule>,
    progress: Arc<Progress>,
}

impl<S, C> TlsConnect<S> for WatchTls<C>
where
    C: TlsConnect<S>,
    C::Future: Send + 'static,
    C::Stream: Unpin,
{
    type Stream = Watching<C::Stream>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, C::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let rule = self.rule;
        let progress = self.progress;
        let handshake = self.inner.connect(stream);
        Box::pin(async move {
            let inner = handshake.await?;
            progress.tls.store(true, Ordering::Relaxed);
            Ok(Watching {
                inner,
                parser: Parser::new(rule, Stage::Messages, progress),
            })
        })
    }
}

/// The socket and TLS types of a watched connection.
pub(crate) type WatchedConnection<T> = Connection<
    Watching<Raw>,
    Watching<
        <<T as MakeTlsConnect<Watching<Raw>>>::TlsConnect as TlsConnect<Watching<Raw>>>::Stream,
    >,
>;

/// Connect as the driver does (every host in order, or shuffled with `load_balance_hosts=random`),
/// with the authentication exchange watched, and what libpq does beyond the driver:
/// `target_session_attrs` judged after login as libpq 14+ does ([`SessionAttrs`]); under
/// `sslmode=prefer` a failed TLS handshake, or a startup or authentication over TLS the server
/// answers with an error, tried once more on a new connection without TLS, and under `allow`
/// (`allow` true; the driver's `Prefer` stands for both) a login without TLS first, then once with
/// TLS if the server answers its startup or authentication with an error; and once a server has
/// answered the login with an error (authentication failed, no such database), the remaining
/// hosts are not tried. The socket errors come back as the driver's own
/// (it reads them from a stream that fails at once).
pub(crate) async fn connect<T>(
    config: &Config,
    mut tls: T,
    rule: Arc<AuthRule>,
    attrs: SessionAttrs,
    allow: bool,
) -> Result<(Client, WatchedConnection<T>), tokio_postgres::Error>
where
    T: MakeTlsConnect<Watching<Raw>>,
    <T::TlsConnect as TlsConnect<Watching<Raw>>>::Future: Send + 'static,
    <T::TlsConnect as TlsConnect<Watching<Raw>>>::Stream: Unpin,
{
    let count = config.get_hosts().len().max(config.get_hostaddrs().len());
    let mut order: Vec<usize> = (0..count).collect();
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        shuffle(&mut order);
    }
    // libpq never uses TLS on a Unix socket, whatever sslmode and sslnegotiation say.
    let mut plain = config.clone();
    plain.ssl_mode(SslMode::Disable);
    plain.ssl_negotiation(SslNegotiation::Postgres);
    let mut last = None;
    for i in order {
        let targets = match targets(config, i).await {
            Some(Ok(targets)) => targets,
            Some(Err(e)) => {
                last = Some(failed(e).await);
                continue;
            }
            None => continue,
        };
        // The name TLS checks: a socket directory where only a hostaddr was given, as libpq.
        let host = match config.get_hosts().get(i) {
            Some(Host::Tcp(h)) => h.clone(),
            Some(Host::Unix(dir)) => dir.display().to_string(),
            None => String::new(),
        };
        for target in targets {
            let ways = Ways {
                config,
                plain: &plain,
                rule: &rule,
                allow,
            };
            match ways.login(&target, &mut tls, &host).await {
                Ok((client, mut connection)) => {
                    match session_fits(&client, &mut connection, attrs).await {
                        Ok(Ok(())) => return Ok((client, connection)),
                        Ok(Err(mismatch)) => {
                            // Say goodbye (Terminate) before trying the next host.
                            drop(client);
                            let _ =
                                tokio::time::timeout(std::time::Duration::from_secs(2), connection)
                                    .await;
                            last = Some(
                                failed(io::Error::new(io::ErrorKind::PermissionDenied, mismatch))
                                    .await,
                            );
                        }
                        Err(e) => last = Some(e),
                    }
                }
                Err(e) if is_final(&e) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
    }
    match last {
        Some(e) => Err(e),
        None => Err(failed(io::Error::new(
            io::ErrorKind::InvalidInput,
            AttemptEnded::NoHost,
        ))
        .await),
    }
}

/// The addresses to try for the host entry `i`: its `hostaddr`, else every address its name
/// resolves to (shuffled under `load_balance_hosts=random`), else its Unix socket; None when the
/// entry names nothing.
async fn targets(config: &Config, i: usize) -> Option<io::Result<Vec<Target>>> {
    let ports = config.get_ports();
    let port = ports
        .get(i)
        .or_else(|| ports.first())
        .copied()
        .unwrap_or(5432);
    match (config.get_hostaddrs().get(i), config.get_hosts().get(i)) {
        (Some(ip), _) => Some(Ok(vec![Target::Tcp(std::net::SocketAddr::new(*ip, port))])),
        (None, Some(Host::Tcp(h))) => Some(tokio::net::lookup_host((h.as_str(), port)).await.map(
            |found| {
                let mut found: Vec<_> = found.map(Target::Tcp).collect();
                if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
                    shuffle(&mut found);
                }
                found
            },
        )),
        (None, Some(Host::Unix(dir))) => {
            Some(Ok(vec![Target::Unix(dir.join(format!(".s.PGSQL.{port}")))]))
        }
        (None, None) => None,
    }
}

/// How one address is logged in to: the configuration as given, the same without TLS, the
/// authentication rule, and whether `sslmode=allow` was asked for.
struct Ways<'a> {
    config: &'a Config,
    plain: &'a Config,
    rule: &'a Arc<AuthRule>,
    allow: bool,
}

impl Ways<'_> {
    /// One login to `target`, with libpq's TLS fallbacks under `prefer` and `allow` (a Unix
    /// socket never uses TLS).
    async fn login<T>(
        &self,
        target: &Target,
        tls: &mut T,
        host: &str,
    ) -> Result<(Client, WatchedConnection<T>), tokio_postgres::Error>
    where
        T: MakeTlsConnect<Watching<Raw>>,
        <T::TlsConnect as TlsConnect<Watching<Raw>>>::Future: Send + 'static,
        <T::TlsConnect as TlsConnect<Watching<Raw>>>::Stream: Unpin,
    {
        let (config, plain, rule) = (self.config, self.plain, self.rule);
        let tcp = matches!(target, Target::Tcp(_));
        let first = if tcp { config } else { plain };
        let fallback = tcp && config.get_ssl_mode() == SslMode::Prefer;
        let progress = Arc::new(Progress::default());
        if fallback && self.allow {
            // sslmode=allow: without TLS first; a server that answers that startup or
            // authentication with an error (only hostssl lines match, a wrong password) is
            // asked once more, with TLS.
            return match login(target, plain, tls, rule, host, &progress).await {
                Err(e) if progress.refused_before_login(&e) => {
                    let progress = Arc::new(Progress::default());
                    login(target, config, tls, rule, host, &progress).await
                }
                other => other,
            };
        }
        let attempt = login(target, first, tls, rule, host, &progress).await;
        // libpq under prefer: "if sslmode is prefer then do a non-SSL retry", once, after a
        // failed TLS handshake (a certificate the root file does not verify) or when the server
        // answered the startup or authentication over TLS with an error (only hostnossl lines
        // match, a wrong password). The plaintext attempt's outcome is the one reported.
        if fallback
            && matches!(&attempt, Err(e) if tls_failed(e)
                || (progress.tls.load(Ordering::Relaxed) && progress.refused_before_login(e)))
        {
            let progress = Arc::new(Progress::default());
            return login(target, plain, tls, rule, host, &progress).await;
        }
        attempt
    }
}

/// Whether an attempt's failure ends the host loop, as in libpq: a `require_auth` refusal, or any
/// error the server sent in answer to the login (wrong password, unknown database or role).
pub(crate) fn is_final(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some() || e.to_string().contains(REFUSAL) || chain(e).contains(REFUSAL)
}

/// Whether the TLS handshake itself failed (certificate refused, protocol mismatch).
fn tls_failed(e: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.downcast_ref::<super::tls_stream::TlsError>().is_some() {
            return true;
        }
        source = s.source();
    }
    false
}

/// One login on one address, with the authentication exchange watched.
async fn login<T>(
    target: &Target,
    config: &Config,
    tls: &mut T,
    rule: &Arc<AuthRule>,
    hostname: &str,
    progress: &Arc<Progress>,
) -> Result<(Client, WatchedConnection<T>), tokio_postgres::Error>
where
    T: MakeTlsConnect<Watching<Raw>>,
    <T::TlsConnect as TlsConnect<Watching<Raw>>>::Future: Send + 'static,
    <T::TlsConnect as TlsConnect<Watching<Raw>>>::Stream: Unpin,
{
    let raw = match open(target, config).await {
        Ok(raw) => raw,
        Err(e) => return Err(failed(e).await),
    };
    let stream = Watching {
        inner: raw,
        parser: Parser::new(rule.clone(), Stage::Start, progress.clone()),
    };
    let tls_connect = match tls.make_tls_connect(hostname) {
        Ok(c) => c,
        Err(e) => return Err(failed(io::Error::other(e.into().to_string())).await),
    };
    let watched = WatchTls {
        inner: tls_connect,
        rule: rule.clone(),
        progress: progress.clone(),
    };
    config.connect_raw(stream, watched).await
}

enum Target {
    Tcp(std::net::SocketAddr),
    Unix(std::path::PathBuf),
}

/// The socket, with the connect timeout, TCP_NODELAY, keepalives and TCP_USER_TIMEOUT the
/// driver would set.
async fn open(target: &Target, config: &Config) -> io::Result<Raw> {
    let timeout = config.get_connect_timeout().copied();
    match target {
        Target::Tcp(addr) => {
            let stream = within(timeout, TcpStream::connect(*addr)).await?;
            stream.set_nodelay(true)?;
            let sock = SockRef::from(&stream);
            if let Some(t) = config.get_tcp_user_timeout() {
                sock.set_tcp_user_timeout(Some(*t))?;
            }
            if config.get_keepalives() {
                let mut ka = TcpKeepalive::new().with_time(config.get_keepalives_idle());
                if let Some(i) = config.get_keepalives_interval() {
                    ka = ka.with_interval(i);
                }
                if let Some(r) = config.get_keepalives_retries() {
                    ka = ka.with_retries(r);
                }
                sock.set_tcp_keepalive(&ka)?;
            }
            Ok(Raw::new(Socket::Tcp(stream)))
        }
        Target::Unix(path) => Ok(Raw::new(Socket::Unix(
            within(timeout, UnixStream::connect(path)).await?,
        ))),
    }
}

async fn within<T>(
    timeout: Option<std::time::Duration>,
    fut: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match timeout {
        Some(t) => tokio::time::timeout(t, fut).await.unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                AttemptEnded::TimedOut,
            ))
        }),
        None => fut.await,
    }
}

/// `target_session_attrs` judged on the logged-in session, with the connection driven meanwhile.
async fn session_fits<S, T>(
    client: &Client,
    connection: &mut Connection<S, T>,
    attrs: SessionAttrs,
) -> Result<Result<(), Mismatch>, tokio_postgres::Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    if !attrs.needs_check() {
        return Ok(Ok(()));
    }
    let query = client.simple_query(super::attrs::QUERY);
    tokio::pin!(query);
    let messages = tokio::select! {
        done = &mut query => done?,
        ended = &mut *connection => {
            ended?;
            return Err(failed(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                AttemptEnded::Closed,
            ))
            .await);
        }
    };
    let seen = messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(r) => Some(Observed {
            in_hot_standby: r.get(0) == Some("t"),
            read_only: r.get(1) == Some("on"),
        }),
        _ => None,
    });
    Ok(match seen {
        Some(seen) => attrs.judge(seen),
        None => Err(Mismatch(AttrsMismatch::Unknown)),
    })
}

/// The driver's error for an I/O failure outside it: a connection attempt over a stream that
/// fails with `e` at once.
async fn failed(e: io::Error) -> tokio_postgres::Error {
    let stream = Failing(Some(e));
    match Config::new()
        .user("idemctl")
        .connect_raw(stream, tokio_postgres::NoTls)
        .await
    {
        Err(err) => err,
        Ok(_) => unreachable!("a stream that fails cannot log in"),
    }
}

struct Failing(Option<io::Error>);

impl Failing {
    fn error(&mut self) -> io::Error {
        self.0
            .take()
            .unwrap_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "closed"))
    }
}

impl AsyncRead for Failing {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Err(self.error()))
    }
}

impl AsyncWrite for Failing {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(self.error()))
    }
    fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Err(self.error()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn chain(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Fisher-Yates with a clock-seeded xorshift (the order only spreads load; nothing depends on it).
fn shuffle<T>(items: &mut [T]) {
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
        | 1;
    for i in (1..items.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        items.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that said its last words and closed: the write that fails is taken, the words are
    /// read, and the stream then ends with the write's error rather than a bare end of file.
    #[tokio::test]
    async fn a_closed_peers_last_words_are_read_after_a_write_fails() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(b"last words").await.unwrap();
        drop(theirs);
        let mut raw = Raw::new(Socket::Unix(ours));
        raw.write_all(b"a statement").await.unwrap();
        raw.write_all(b"another").await.unwrap();
        let mut got = vec![0; 10];
        raw.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"last words");
        let end = raw.read(&mut got).await.unwrap_err();
        assert_eq!(end.kind(), io::ErrorKind::BrokenPipe);
        // Once told, the end is a plain end of file.
        assert_eq!(raw.read(&mut got).await.unwrap(), 0);
    }

    fn rule(v: &str) -> Arc<AuthRule> {
        Arc::new(AuthRule::parse(v).unwrap())
    }

    fn auth(code: i32) -> Vec<u8> {
        let mut m = vec![b'R', 0, 0, 0, 8];
        m.extend_from_slice(&code.to_be_bytes());
        m
    }

    fn run(rule_text: &str, codes: &[i32]) -> Result<(), String> {
        let mut p = Parser::new(rule(rule_text), Stage::Start, Arc::default());
        p.client_wrote(&[0, 0, 0, 40, 0, 3, 0, 0]);
        for c in codes {
            let mut m = auth(*c);
            if *c == 10 {
                // SASL: the mechanism list follows, and the length says so.
                m[4] = 8 + 14;
                m.extend_from_slice(b"SCRAM-SHA-256\0");
            }
            // Fed one byte at a time: the parser must not care how reads split messages.
            for b in m {
                p.server_sent(&[b]).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    #[test]
    fn parsing_follows_libpq() {
        assert!(AuthRule::parse("scram-sha-256").is_ok());
        assert!(AuthRule::parse("!password,!md5").is_ok());
        assert_eq!(
            AuthRule::parse("kerberos").unwrap_err().to_string(),
            "invalid require_auth value: \"kerberos\""
        );
        assert_eq!(
            AuthRule::parse("md5,!password").unwrap_err().to_string(),
            "negative require_auth method \"!password\" cannot be mixed with non-negative methods"
        );
        assert_eq!(
            AuthRule::parse("!md5,password").unwrap_err().to_string(),
            "require_auth method \"password\" cannot be mixed with negative methods"
        );
        assert_eq!(
            AuthRule::parse("md5,md5").unwrap_err().to_string(),
            "require_auth method \"md5\" is specified more than once"
        );
        assert_eq!(
            AuthRule::parse("!md5,!md5").unwrap_err().to_string(),
            "require_auth method \"!md5\" is specified more than once"
        );
        assert_eq!(
            AuthRule::parse("!oauth").unwrap_err().to_string(),
            "invalid require_auth value: \"oauth\"",
            "libpq 17 knows no oauth"
        );
        for ok in [
            "password",
            "md5",
            "gss",
            "sspi",
            "none",
            "!none",
            "scram-sha-256,none",
        ] {
            assert!(AuthRule::parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn requests_are_judged_as_libpq_does() {
        let refused = |r: &str, codes: &[i32], why: &str| {
            let e = run(r, codes).unwrap_err();
            assert_eq!(
                e,
                format!("authentication method requirement \"{r}\" failed: {why}")
            );
        };
        assert_eq!(run("scram-sha-256", &[10, 11, 12, 0]), Ok(()));
        refused(
            "scram-sha-256",
            &[3],
            "server requested a cleartext password",
        );
        refused("scram-sha-256", &[5], "server requested a hashed password");
        refused(
            "scram-sha-256",
            &[0],
            "server did not complete authentication",
        );
        refused(
            "scram-sha-256",
            &[10, 11, 0],
            "server did not complete authentication",
        );
        refused("password", &[10], "server requested SASL authentication");
        assert_eq!(run("password", &[3, 0]), Ok(()));
        assert_eq!(run("md5,none", &[0]), Ok(()));
        refused("none", &[5], "server requested a hashed password");
        assert_eq!(run("!password", &[5, 0]), Ok(()));
        assert_eq!(run("!password", &[0]), Ok(()));
        refused("!none", &[0], "server did not complete authentication");
        refused("!password", &[3], "server requested a cleartext password");
        refused(
            "scram-sha-256",
            &[7],
            "server requested GSSAPI authentication",
        );
    }

    #[test]
    fn tls_hands_the_watch_to_the_session() {
        let mut p = Parser::new(rule("scram-sha-256"), Stage::Start, Arc::default());
        p.client_wrote(&SSL_REQUEST);
        // 'S', then TLS records that must not be parsed as messages.
        assert!(
            p.server_sent(b"S\x16\x03\x03\x00\x05R\x00\x00\x00\x08")
                .is_ok()
        );
        assert_eq!(p.stage, Stage::Off);
        let mut p = Parser::new(rule("scram-sha-256"), Stage::Start, Arc::default());
        p.client_wrote(&SSL_REQUEST);
        let mut bytes = vec![b'N'];
        bytes.extend(auth(3));
        assert!(p.server_sent(&bytes).is_err());
    }
}

//! The driver's TLS hook on OpenSSL, the library libpq uses, so that a server certificate is
//! accepted or refused exactly as psql would: the chain (X.509 version 1 certificates included, as
//! made by `openssl x509 -req` or Citus) is checked by OpenSSL under the verifying sslmodes only,
//! the host name afterwards by libpq's rules (`verify`), and a refusal is told in libpq's words
//! plus OpenSSL's reason ("certificate verify failed: self-signed certificate").

use super::verify;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::ssl::{Ssl, SslContext, SslRef};
use openssl::x509::X509VerifyResult;
use std::fmt;

use crate::report::failure::{HostMismatch, TlsFailure};
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_openssl::SslStream;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// What every connection of a target shares: the OpenSSL context (roots, CRLs, client
/// certificate, protocol versions, verify mode) and the per-connection choices.
#[derive(Clone)]
pub(super) struct MakeTls {
    inner: Arc<Shared>,
}

struct Shared {
    context: SslContext,
    /// `sslsni`: send the host name (never an IP address, as libpq) in the handshake.
    sni: bool,
    /// `verify-full`: check the host name against the certificate after the handshake.
    check_host: bool,
    /// `sslnegotiation=direct`: the server must have selected the ALPN protocol "postgresql".
    direct: bool,
}

impl fmt::Debug for MakeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MakeTls")
            .field("sni", &self.inner.sni)
            .field("check_host", &self.inner.check_host)
            .field("direct", &self.inner.direct)
            .finish_non_exhaustive()
    }
}

impl MakeTls {
    pub(crate) fn new(context: SslContext, sni: bool, check_host: bool, direct: bool) -> MakeTls {
        MakeTls {
            inner: Arc::new(Shared {
                context,
                sni,
                check_host,
                direct,
            }),
        }
    }
}

/// Why the TLS handshake failed, in words; never contains anything secret.
#[derive(Debug)]
pub(super) struct TlsError(TlsFailure);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for TlsError {}

/// One connection's handshake.
pub(super) struct Connect {
    shared: Arc<Shared>,
    host: String,
}

impl<S> MakeTlsConnect<S> for MakeTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = TlsError;

    fn make_tls_connect(&mut self, host: &str) -> Result<Connect, TlsError> {
        Ok(Connect {
            shared: self.inner.clone(),
            host: host.to_string(),
        })
    }
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = TlsError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream<S>, TlsError>> + Send>>;

    fn connect(self, socket: S) -> Self::Future {
        Box::pin(async move {
            let ssl = self.ssl()?;
            let mut stream = SslStream::new(ssl, socket).map_err(|e| openssl_error(&e))?;
            if let Err(e) = Pin::new(&mut stream).connect().await {
                return Err(handshake_error(&e, stream.ssl()));
            }
            let verdict = self.after_handshake(stream.ssl());
            if let Err(e) = verdict {
                // Refused after a completed handshake: end the TLS session properly
                // (close_notify, then the socket), as libpq does, rather than cutting it.
                // The server's unread bytes (TLS 1.3 session tickets) are drained until it closes
                // too, or the kernel would answer them with a reset.
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
                    stream.shutdown().await?;
                    let mut sink = [0u8; 1024];
                    while stream.get_mut().read(&mut sink).await? > 0 {}
                    Ok::<(), io::Error>(())
                })
                .await;
                return Err(e);
            }
            Ok(Stream(stream))
        })
    }
}

impl Connect {
    /// The checks libpq makes once the handshake is done: the ALPN protocol for direct TLS, the
    /// host name for verify-full.
    fn after_handshake(&self, ssl: &SslRef) -> Result<(), TlsError> {
        if self.shared.direct {
            check_alpn(ssl.selected_alpn_protocol())?;
        }
        if self.shared.check_host {
            // With peer verification on, OpenSSL completes no handshake without a certificate
            // (idemctl offers no anonymous or PSK suites); had it, no name could match.
            let cert = ssl
                .peer_certificate()
                .ok_or(TlsError(TlsFailure::HostMismatch(HostMismatch::NoName)))?;
            verify::host_matches(&cert, &self.host)
                .map_err(|e| TlsError(TlsFailure::HostMismatch(e)))?;
        }
        Ok(())
    }

    fn ssl(&self) -> Result<Ssl, TlsError> {
        let mut ssl = Ssl::new(&self.shared.context).map_err(|e| openssl_error(&e))?;
        // Never an address, and never the socket directory libpq names an endpoint given only a
        // hostaddr by (hosts::Endpoint::tls_name).
        if self.shared.sni
            && !self.host.is_empty()
            && !self.host.starts_with('/')
            && self.host.parse::<IpAddr>().is_err()
        {
            ssl.set_hostname(&self.host)
                .map_err(|e| openssl_error(&e))?;
        }
        Ok(ssl)
    }
}

/// The ALPN protocol PostgreSQL registered, the one idemctl offers.
pub(crate) const ALPN_PROTOCOL: &[u8] = b"postgresql";

/// libpq 17's rule for direct TLS: without SSLRequest, ALPN is what tells a PostgreSQL server from
/// anything else listening there, so the server must have selected "postgresql".
pub(crate) fn check_alpn(selected: Option<&[u8]>) -> Result<(), TlsError> {
    match selected {
        Some(protocol) if protocol == ALPN_PROTOCOL => Ok(()),
        None => Err(TlsError(TlsFailure::NoAlpn)),
        Some(_) => Err(TlsError(TlsFailure::UnexpectedAlpn)),
    }
}

/// libpq says "SSL error: certificate verify failed"; OpenSSL's verify result says why.
fn handshake_error(e: &openssl::ssl::Error, ssl: &SslRef) -> TlsError {
    let verdict = ssl.verify_result();
    if verdict != X509VerifyResult::OK {
        let reason = verdict.error_string().to_owned();
        // A certificate from an issuer the roots do not hold: say which file must hold it.
        let issuer_hint = reason.contains("issuer") || reason.contains("self-signed");
        return TlsError(TlsFailure::VerifyFailed {
            reason,
            issuer_hint,
        });
    }
    if let Some(io) = e.io_error() {
        return TlsError(TlsFailure::Handshake { io: io.to_string() });
    }
    match e.ssl_error() {
        Some(stack) => openssl_error(stack),
        None => TlsError(TlsFailure::ClosedInHandshake),
    }
}

/// The reasons in an OpenSSL error stack ("tlsv1 alert unknown ca"), without library codes.
pub(crate) fn openssl_error(stack: &openssl::error::ErrorStack) -> TlsError {
    TlsError(TlsFailure::OpenSsl(openssl_reasons(stack)))
}

/// The reasons of an OpenSSL error stack joined with ": ", or the whole stack when none has one.
pub(crate) fn openssl_reasons(stack: &openssl::error::ErrorStack) -> String {
    let reasons: Vec<&str> = stack.errors().iter().filter_map(|e| e.reason()).collect();
    if reasons.is_empty() {
        stack.to_string()
    } else {
        reasons.join(": ")
    }
}

/// An established TLS session.
pub(super) struct Stream<S>(SslStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        match server_end_point(self.0.ssl()) {
            Some(hash) => ChannelBinding::tls_server_end_point(hash),
            None => ChannelBinding::none(),
        }
    }
}

/// RFC 5929 `tls-server-end-point`: the server certificate hashed with its signature's digest,
/// SHA-256 in place of MD5 and SHA-1 (what SCRAM-SHA-256-PLUS binds to, as libpq computes it).
fn server_end_point(ssl: &SslRef) -> Option<Vec<u8>> {
    let cert = ssl.peer_certificate()?;
    let algorithms = cert
        .signature_algorithm()
        .object()
        .nid()
        .signature_algorithms()?;
    let digest = match algorithms.digest {
        Nid::MD5 | Nid::SHA1 => MessageDigest::sha256(),
        nid => MessageDigest::from_nid(nid)?,
    };
    cert.digest(digest).ok().map(|d| d.to_vec())
}

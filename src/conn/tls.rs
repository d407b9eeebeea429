//! libpq's TLS parameters (`sslmode`, `sslrootcert`, `sslcert`/`sslkey`, `sslcrl`/`sslcrldir`,
//! `sslsni`, protocol versions) turned into a driver `SslMode` plus an OpenSSL context configured as
//! libpq configures its own: under `allow`, `prefer` and `require` (without a root file) no
//! certificate check at all; under `verify-ca` (and `require` with a root file) OpenSSL's chain
//! check, which accepts X.509 version 1 certificates; under `verify-full` also libpq's host check.
//!
//! Accepted but without effect here: `sslcompression` (obsolete, servers refuse compression),
//! `sslpassword` (only decrypts encrypted keys, which are rejected with a clear error when loaded),
//! `sslkeylogfile` (a debugging aid). `gssencmode=disable|prefer` behave as libpq does when no
//! Kerberos credentials exist: no GSS encryption.

use super::env::Env;
use super::params::Params;
use super::tls_stream::{MakeTls, openssl_reasons};
use crate::report::failure::{ConnFailure, Expected, Unsupported};
use openssl::error::ErrorStack;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{
    SslContext, SslContextBuilder, SslFiletype, SslMethod, SslOptions, SslVerifyMode, SslVersion,
};
use openssl::x509::X509;
use openssl::x509::store::X509Lookup;
use openssl::x509::verify::X509VerifyFlags;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use tokio_postgres::config::SslMode as DriverSslMode;

/// libpq's six sslmode values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

const SSLMODES: &[(&str, SslMode)] = &[
    ("disable", SslMode::Disable),
    ("allow", SslMode::Allow),
    ("prefer", SslMode::Prefer),
    ("require", SslMode::Require),
    ("verify-ca", SslMode::VerifyCa),
    ("verify-full", SslMode::VerifyFull),
];

/// How much of the server's certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verification {
    /// No TLS at all (sslmode=disable, or only Unix sockets).
    NoTls,
    /// Encrypted, identity not checked (allow, prefer, require without a root file).
    Unverified,
    /// Chain checked against the roots, host name not (verify-ca; allow, prefer and require with a
    /// root file, as libpq).
    ChainOnly,
    /// Chain and host name checked (verify-full).
    Full,
}

/// Where trusted roots come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Roots {
    /// `sslrootcert=system`: OpenSSL's default store (honours `SSL_CERT_FILE` and `SSL_CERT_DIR`).
    System,
    /// A PEM file: `sslrootcert`, or `~/.postgresql/root.crt` when that exists.
    File(PathBuf),
}

/// Everything decided from the parameters, before any file is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsPlan {
    pub(crate) mode: SslMode,
    pub(crate) driver_mode: DriverSslMode,
    pub(crate) verification: Verification,
    pub(crate) roots: Option<Roots>,
    /// Client certificate and key files, when the certificate file exists.
    pub(crate) client_cert: Option<(PathBuf, PathBuf)>,
    pub(crate) crl_file: Option<PathBuf>,
    pub(crate) crl_dir: Option<PathBuf>,
    pub(crate) sni: bool,
    /// Minimum and maximum TLS version as 12 or 13.
    pub(crate) versions: (u8, u8),
    /// `sslnegotiation=direct`: a TLS ClientHello first, no SSLRequest; the server must then
    /// select the ALPN protocol "postgresql", as libpq 17 demands.
    pub(crate) direct: bool,
}

/// Decide the TLS behaviour. `all_unix`: every endpoint is a Unix socket, where libpq never
/// uses TLS.
pub(crate) fn plan(params: &Params, env: &dyn Env, all_unix: bool) -> anyhow::Result<TlsPlan> {
    reject_unsupported(params)?;
    let pg_dir = env.home().map(|h| h.join(".postgresql"));
    let roots = roots(params, pg_dir.as_deref());
    let mode = sslmode(params, roots.as_ref())?;
    // libpq checks sslnegotiation before the system-roots rule.
    let direct = negotiation(params, mode)?;
    system_roots_need_verify_full(params, mode, roots.as_ref())?;
    let versions = versions(params)?;
    // libpq verifies the chain whenever a root file exists, whatever the sslmode (only
    // verify-full adds the host check); without one, the weaker modes check nothing.
    let usable = match &roots {
        Some(Roots::System) => true,
        Some(Roots::File(path)) => path.exists(),
        None => false,
    };
    let verification = match (all_unix, mode) {
        (true, _) | (_, SslMode::Disable) => Verification::NoTls,
        (_, SslMode::VerifyFull) => Verification::Full,
        (_, SslMode::VerifyCa) => Verification::ChainOnly,
        _ if usable => Verification::ChainOnly,
        _ => Verification::Unverified,
    };
    let roots = roots.filter(|_| verification != Verification::Unverified);
    if matches!(verification, Verification::ChainOnly | Verification::Full) {
        check_roots_exist(roots.as_ref(), pg_dir.as_deref())?;
    }
    let driver_mode = match (verification, mode) {
        (Verification::NoTls, _) => DriverSslMode::Disable,
        // The driver has no "allow": idemctl's host loop logs in without TLS first under allow.
        (_, SslMode::Allow | SslMode::Prefer) => DriverSslMode::Prefer,
        _ => DriverSslMode::Require,
    };
    let file = |key: &str, default: &str| {
        params
            .get(key)
            .map(PathBuf::from)
            .or_else(|| pg_dir.as_ref().map(|d| d.join(default)))
    };
    Ok(TlsPlan {
        mode,
        driver_mode,
        verification,
        roots,
        client_cert: client_cert(
            params,
            file("sslcert", "postgresql.crt"),
            file("sslkey", "postgresql.key"),
        )?,
        crl_file: file("sslcrl", "root.crl"),
        crl_dir: params.get("sslcrldir").map(PathBuf::from),
        sni: params.flag("sslsni")?.unwrap_or(true),
        versions,
        direct,
    })
}

/// Keywords whose meaning idemctl cannot provide and must not silently drop.
fn reject_unsupported(params: &Params) -> anyhow::Result<()> {
    if params.get("gssencmode") == Some("require") {
        return Err(params.unsupported("gssencmode", Unsupported::GssEncryption));
    }
    params.choice(
        "gssencmode",
        &[("disable", ()), ("prefer", ()), ("require", ())],
    )?;
    if params.get("sslcertmode") == Some("require") {
        return Err(params.unsupported("sslcertmode", Unsupported::SslCertModeRequire));
    }
    params.choice(
        "sslcertmode",
        &[("disable", ()), ("allow", ()), ("require", ())],
    )?;
    Ok(())
}

/// libpq's error for a verifying sslmode without a root file, before anything is attempted.
fn check_roots_exist(roots: Option<&Roots>, pg_dir: Option<&Path>) -> anyhow::Result<()> {
    let missing = match roots {
        Some(Roots::System) => return Ok(()),
        Some(Roots::File(path)) if path.exists() => return Ok(()),
        Some(Roots::File(path)) => path.clone(),
        None => pg_dir.map_or_else(
            || PathBuf::from("~/.postgresql/root.crt"),
            |d| d.join("root.crt"),
        ),
    };
    Err(failed(ConnFailure::RootFileMissing { file: missing }))
}

fn roots(params: &Params, pg_dir: Option<&Path>) -> Option<Roots> {
    match params.get("sslrootcert") {
        Some("system") => Some(Roots::System),
        Some(path) => Some(Roots::File(PathBuf::from(path))),
        None => pg_dir
            .map(|d| d.join("root.crt"))
            .filter(|p| p.exists())
            .map(Roots::File),
    }
}

/// The sslmode in force: explicit value (or deprecated `requiressl=1`), else `verify-full` with
/// `sslrootcert=system` and `prefer` otherwise.
fn sslmode(params: &Params, roots: Option<&Roots>) -> anyhow::Result<SslMode> {
    let explicit = match params.choice("sslmode", SSLMODES)? {
        Some(mode) => Some(mode),
        None if params.flag("requiressl")? == Some(true) => Some(SslMode::Require),
        None => None,
    };
    Ok(match (explicit, roots) {
        (Some(mode), _) => mode,
        (None, Some(Roots::System)) => SslMode::VerifyFull,
        (None, _) => SslMode::Prefer,
    })
}

fn mode_name(mode: SslMode) -> &'static str {
    SSLMODES
        .iter()
        .find(|(_, m)| *m == mode)
        .map_or("?", |(n, _)| *n)
}

/// System roots demand verify-full (PostgreSQL 16+): trusting every public CA without checking the
/// name would accept any certificate bought online.
fn system_roots_need_verify_full(
    params: &Params,
    mode: SslMode,
    roots: Option<&Roots>,
) -> anyhow::Result<()> {
    if roots == Some(&Roots::System) && mode != SslMode::VerifyFull {
        return Err(params.unsupported(
            "sslmode",
            Unsupported::SystemRootsNeedVerifyFull(mode_name(mode)),
        ));
    }
    Ok(())
}

/// `sslnegotiation` (libpq 17): `postgres` (the default) asks with an SSLRequest first, `direct`
/// starts with the TLS handshake. Direct is refused, in libpq's words, with any sslmode that could
/// fall back to plaintext (the default `prefer` included), also for Unix sockets.
fn negotiation(params: &Params, mode: SslMode) -> anyhow::Result<bool> {
    let choices = [("postgres", false), ("direct", true)];
    let direct = params.choice("sslnegotiation", &choices)?.unwrap_or(false);
    if direct && matches!(mode, SslMode::Disable | SslMode::Allow | SslMode::Prefer) {
        return Err(params.unsupported(
            "sslnegotiation",
            Unsupported::DirectNeedsStrongMode(mode_name(mode)),
        ));
    }
    Ok(direct)
}

/// libpq sends a client certificate only when its file exists; then the key must exist too.
fn client_cert(
    params: &Params,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> anyhow::Result<Option<(PathBuf, PathBuf)>> {
    if params.get("sslcertmode") == Some("disable") {
        return Ok(None);
    }
    match (cert.filter(|c| c.exists()), key) {
        (Some(cert), Some(key)) => Ok(Some((cert, key))),
        (Some(_), None) => Err(failed(ConnFailure::CertificateWithoutKey)),
        (None, _) => Ok(None),
    }
}

/// `ssl_min_protocol_version`/`ssl_max_protocol_version` (default TLSv1.2 .. newest). idemctl
/// speaks only TLS 1.2 and 1.3, so older minimums are satisfied and older maximums are errors.
fn versions(params: &Params) -> anyhow::Result<(u8, u8)> {
    let names = [
        ("TLSv1", 10),
        ("TLSv1.1", 11),
        ("TLSv1.2", 12),
        ("TLSv1.3", 13),
    ];
    let min = params
        .choice("ssl_min_protocol_version", &names)?
        .unwrap_or(12)
        .max(12);
    let max = params
        .choice("ssl_max_protocol_version", &names)?
        .unwrap_or(13);
    if max < 12 {
        return Err(params.unsupported("ssl_max_protocol_version", Unsupported::OldTlsVersions));
    }
    if min > max {
        return Err(params.invalid("ssl_min_protocol_version", Expected::VersionNotAboveMax));
    }
    Ok((min, max))
}

/// Build the connector for a plan; `None` when no TLS will be attempted.
pub(crate) fn connector(plan: &TlsPlan) -> anyhow::Result<Option<MakeTls>> {
    if plan.verification == Verification::NoTls {
        return Ok(None);
    }
    let context = context(plan)?;
    let check_host = plan.verification == Verification::Full;
    Ok(Some(MakeTls::new(
        context,
        plan.sni,
        check_host,
        plan.direct,
    )))
}

/// The OpenSSL context libpq would build: no certificate check at all without verification,
/// otherwise the roots (and CRLs, which then apply to the whole chain) with peer verification.
pub(crate) fn context(plan: &TlsPlan) -> anyhow::Result<SslContext> {
    let setup = |e: ErrorStack| {
        failed(ConnFailure::TlsSetup {
            error: openssl_reasons(&e),
        })
    };
    let mut builder = SslContext::builder(SslMethod::tls_client()).map_err(setup)?;
    builder.set_options(SslOptions::NO_COMPRESSION);
    let version = |v: u8| match v {
        10 => SslVersion::TLS1,
        11 => SslVersion::TLS1_1,
        12 => SslVersion::TLS1_2,
        _ => SslVersion::TLS1_3,
    };
    builder
        .set_min_proto_version(Some(version(plan.versions.0)))
        .map_err(setup)?;
    builder
        .set_max_proto_version(Some(version(plan.versions.1)))
        .map_err(setup)?;
    // What libpq 17+ sends; required by servers for direct TLS, harmless for older ones.
    builder.set_alpn_protos(b"\x0apostgresql").map_err(setup)?;
    if plan.verification == Verification::Unverified {
        builder.set_verify(SslVerifyMode::NONE);
    } else {
        load_roots(plan, &mut builder)?;
        load_crls(plan, &mut builder)?;
        builder.set_verify(SslVerifyMode::PEER);
    }
    if let Some((cert, key)) = &plan.client_cert {
        builder.set_certificate_chain_file(cert).map_err(|e| {
            failed(ConnFailure::CertificateUnreadable {
                file: cert.clone(),
                error: openssl_reasons(&e),
            })
        })?;
        let private = load_key(key)?;
        let mismatch = || {
            failed(ConnFailure::CertificateKeyMismatch {
                cert: cert.clone(),
                key: key.clone(),
            })
        };
        // OpenSSL refuses a key of the certificate's type that does not match it while setting
        // it; libpq's words name the pair either way.
        if !certificate_holds(cert, &private) {
            return Err(mismatch());
        }
        builder.set_private_key(private.as_ref()).map_err(|e| {
            failed(ConnFailure::KeyUnloadable {
                file: key.clone(),
                error: openssl_reasons(&e),
            })
        })?;
        builder.check_private_key().map_err(|_| mismatch())?;
    }
    Ok(builder.build())
}

/// `sslrootcert=system`: OpenSSL's default paths (honouring `SSL_CERT_FILE` and `SSL_CERT_DIR`),
/// as libpq; otherwise the PEM file.
fn load_roots(plan: &TlsPlan, builder: &mut SslContextBuilder) -> anyhow::Result<()> {
    match &plan.roots {
        // OpenSSL ignores default paths it cannot read (then nothing verifies): this fails
        // only when it cannot allocate.
        Some(Roots::System) => builder.set_default_verify_paths().map_err(|e| {
            failed(ConnFailure::TlsSetup {
                error: openssl_reasons(&e),
            })
        }),
        Some(Roots::File(path)) => builder.set_ca_file(path).map_err(|e| {
            failed(ConnFailure::RootFileUnreadable {
                file: path.clone(),
                error: openssl_reasons(&e),
            })
        }),
        // `plan` only asks for verification when roots exist; without any, no chain verifies.
        None => Ok(()),
    }
}

/// The client key, refused when others can read it (libpq's rule: 0600, or 0640 if owned by root).
fn load_key(path: &Path) -> anyhow::Result<PKey<Private>> {
    let unreadable = |e: std::io::Error| {
        failed(ConnFailure::KeyUnreadable {
            file: path.to_owned(),
            error: e.to_string(),
        })
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    let loose = if meta.uid() == 0 { 0o037 } else { 0o077 };
    if meta.mode() & loose != 0 {
        return Err(failed(ConnFailure::KeyLoose {
            file: path.to_owned(),
        }));
    }
    let pem = std::fs::read(path).map_err(unreadable)?;
    // An empty passphrase: an encrypted key fails here instead of prompting on a terminal.
    PKey::private_key_from_pem_passphrase(&pem, b"").map_err(|e| {
        let encrypted = [
            &b"-----BEGIN ENCRYPTED PRIVATE KEY-----"[..],
            b"Proc-Type: 4,ENCRYPTED",
        ]
        .iter()
        .any(|mark| pem.windows(mark.len()).any(|w| w == *mark));
        failed(if encrypted {
            ConnFailure::KeyEncrypted {
                file: path.to_owned(),
            }
        } else {
            ConnFailure::KeyUnloadable {
                file: path.to_owned(),
                error: openssl_reasons(&e),
            }
        })
    })
}

/// Whether the first certificate of the PEM file `cert` is for `key` (false when it cannot be
/// read again).
fn certificate_holds(cert: &Path, key: &PKey<Private>) -> bool {
    std::fs::read(cert)
        .ok()
        .and_then(|pem| X509::from_pem(&pem).ok())
        .and_then(|x509| x509.public_key().ok())
        .is_some_and(|public| public.public_eq(key))
}

/// libpq's CRLs: the `sslcrl` file (default `~/.postgresql/root.crl`) and the hashed directory
/// `sslcrldir` (`openssl rehash` names), each used when it exists; with any of them, every
/// certificate of the chain must have its issuer's CRL.
fn load_crls(plan: &TlsPlan, builder: &mut SslContextBuilder) -> anyhow::Result<()> {
    let file = plan.crl_file.as_ref().filter(|p| p.is_file());
    let dir = plan.crl_dir.as_ref().filter(|d| d.is_dir());
    // libpq reads CRLs only next to a root certificate file, not with the system's roots.
    let with_file = matches!(plan.roots, Some(Roots::File(_)));
    if !with_file || (file.is_none() && dir.is_none()) {
        return Ok(());
    }
    let store = builder.cert_store_mut();
    // Fails only when OpenSSL cannot allocate: worded as any other set-up failure.
    let crl_setup = |e: ErrorStack| {
        failed(ConnFailure::TlsSetup {
            error: openssl_reasons(&e),
        })
    };
    if let Some(file) = file {
        let lookup = store.add_lookup(X509Lookup::file()).map_err(crl_setup)?;
        lookup.load_crl_file(file, SslFiletype::PEM).map_err(|e| {
            failed(ConnFailure::CrlFileUnloadable {
                file: file.clone(),
                error: openssl_reasons(&e),
            })
        })?;
    }
    if let Some(dir) = dir {
        let unusable = |e: ErrorStack| {
            failed(ConnFailure::CrlDirUnusable {
                dir: dir.clone(),
                error: openssl_reasons(&e),
            })
        };
        let lookup = store.add_lookup(X509Lookup::hash_dir()).map_err(unusable)?;
        // The path came from a connection string: always UTF-8.
        lookup
            .add_dir(&dir.to_string_lossy(), SslFiletype::PEM)
            .map_err(unusable)?;
    }
    store
        .set_flags(X509VerifyFlags::CRL_CHECK | X509VerifyFlags::CRL_CHECK_ALL)
        .map_err(crl_setup)?;
    Ok(())
}

fn failed(failure: ConnFailure) -> anyhow::Error {
    anyhow::Error::new(failure)
}

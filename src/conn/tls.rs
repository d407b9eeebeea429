//! libpq's TLS parameters (`sslmode`, `sslrootcert`, `sslcert`/`sslkey`, `sslcrl`/`sslcrldir`,
//! `sslsni`, protocol versions) turned into a driver `SslMode` plus a rustls `ClientConfig` whose
//! verifier gives each sslmode its libpq meaning.
//!
//! Accepted but without effect here: `sslcompression` (obsolete, servers refuse compression),
//! `sslpassword` (only decrypts encrypted keys, which are rejected with a clear error when loaded),
//! `sslkeylogfile` (a debugging aid). `gssencmode=disable|prefer` behave as libpq does when no
//! Kerberos credentials exist: no GSS encryption.

use super::env::Env;
use super::params::Params;
use super::verify::{ChainOnly, NoIdentityCheck};
use crate::exit::{Exit, fail};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, SupportedProtocolVersion};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres::config::SslMode as DriverSslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

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
    /// Chain checked against the roots, host name not (verify-ca; require with a root file).
    ChainOnly,
    /// Chain and host name checked (verify-full).
    Full,
}

/// Where trusted roots come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Roots {
    /// `sslrootcert=system`: the platform store via rustls-native-certs (honours `SSL_CERT_FILE`).
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
}

/// Decide the TLS behaviour. `all_unix`: every endpoint is a Unix socket, where libpq never
/// uses TLS.
pub(crate) fn plan(params: &Params, env: &dyn Env, all_unix: bool) -> anyhow::Result<TlsPlan> {
    reject_unsupported(params)?;
    let pg_dir = env.home().map(|h| h.join(".postgresql"));
    let roots = roots(params, pg_dir.as_deref());
    let mode = sslmode(params, roots.as_ref())?;
    let versions = versions(params)?;
    let verification = match (all_unix, mode) {
        (true, _) | (_, SslMode::Disable) => Verification::NoTls,
        (_, SslMode::Allow | SslMode::Prefer) => Verification::Unverified,
        // libpq back-compat: require with a root file behaves as verify-ca.
        (_, SslMode::Require) if roots.is_some() => Verification::ChainOnly,
        (_, SslMode::Require) => Verification::Unverified,
        (_, SslMode::VerifyCa) => Verification::ChainOnly,
        (_, SslMode::VerifyFull) => Verification::Full,
    };
    if matches!(verification, Verification::ChainOnly | Verification::Full) {
        check_roots_exist(roots.as_ref(), pg_dir.as_deref())?;
    }
    let driver_mode = match (verification, mode) {
        (Verification::NoTls, _) => DriverSslMode::Disable,
        // The driver has no "allow"; trying TLS first is equally safe against eavesdroppers.
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
    })
}

/// Keywords whose meaning idemctl cannot provide and must not silently drop.
fn reject_unsupported(params: &Params) -> anyhow::Result<()> {
    if params.get("gssencmode") == Some("require") {
        return Err(params.unsupported(
            "gssencmode",
            "GSSAPI encryption is not supported; use sslmode for encryption",
        ));
    }
    params.choice(
        "gssencmode",
        &[("disable", ()), ("prefer", ()), ("require", ())],
    )?;
    if params.get("sslcertmode") == Some("require") {
        return Err(params.unsupported(
            "sslcertmode",
            "\"require\" is not supported; use allow (the default) or disable",
        ));
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
    Err(usage(format!(
        "root certificate file \"{}\" does not exist; either provide the file, use the system's \
         trusted roots (sslrootcert=system), or change sslmode",
        missing.display()
    )))
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
/// `sslrootcert=system` and `prefer` otherwise. System roots demand verify-full (PostgreSQL 16+):
/// trusting every public CA without checking the name would accept any certificate bought online.
fn sslmode(params: &Params, roots: Option<&Roots>) -> anyhow::Result<SslMode> {
    let explicit = match params.choice("sslmode", SSLMODES)? {
        Some(mode) => Some(mode),
        None if params.flag("requiressl")? == Some(true) => Some(SslMode::Require),
        None => None,
    };
    match (explicit, roots) {
        (None, Some(Roots::System)) => Ok(SslMode::VerifyFull),
        (Some(mode), Some(Roots::System)) if mode != SslMode::VerifyFull => {
            let name = SSLMODES
                .iter()
                .find(|(_, m)| *m == mode)
                .map_or("?", |(n, _)| *n);
            Err(params.unsupported(
                "sslmode",
                &format!("weak sslmode \"{name}\" may not be used with sslrootcert=system (use \"verify-full\")"),
            ))
        }
        (mode, _) => Ok(mode.unwrap_or(SslMode::Prefer)),
    }
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
        (Some(_), None) => Err(usage(
            "certificate present, but no private key file (set sslkey)",
        )),
        (None, _) => Ok(None),
    }
}

/// `ssl_min_protocol_version`/`ssl_max_protocol_version` (default TLSv1.2 .. newest). rustls
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
        return Err(params.unsupported(
            "ssl_max_protocol_version",
            "TLS versions below TLSv1.2 are not supported",
        ));
    }
    if min > max {
        return Err(params.invalid(
            "ssl_min_protocol_version",
            "a version not above ssl_max_protocol_version",
        ));
    }
    Ok((min, max))
}

/// Build the connector for a plan; `None` when no TLS will be attempted.
pub(crate) fn connector(plan: &TlsPlan) -> anyhow::Result<Option<MakeRustlsConnect>> {
    if plan.verification == Verification::NoTls {
        return Ok(None);
    }
    let config = client_config(plan)?;
    Ok(Some(MakeRustlsConnect::new(config)))
}

pub(crate) fn client_config(plan: &TlsPlan) -> anyhow::Result<ClientConfig> {
    // An explicit provider: no dependence on (or panic from) a process-wide default.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = protocol_versions(plan.versions);
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| usage(format!("cannot set up TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier(plan, provider)?);
    let mut config = match &plan.client_cert {
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|e| {
                usage(format!(
                    "cannot use client certificate \"{}\": {e}",
                    cert.display()
                ))
            })?,
        None => builder.with_no_client_auth(),
    };
    config.enable_sni = plan.sni;
    // What libpq 17+ sends; required by servers for direct TLS, harmless for older ones.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

fn protocol_versions((min, max): (u8, u8)) -> Vec<&'static SupportedProtocolVersion> {
    let mut versions = Vec::new();
    if min <= 12 && max >= 12 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        versions.push(&rustls::version::TLS13);
    }
    versions
}

pub(super) fn verifier(
    plan: &TlsPlan,
    provider: Arc<CryptoProvider>,
) -> anyhow::Result<Arc<dyn ServerCertVerifier>> {
    if plan.verification == Verification::Unverified {
        return Ok(Arc::new(NoIdentityCheck::new(provider)));
    }
    let roots = Arc::new(load_roots(plan)?);
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
        .with_crls(load_crls(plan)?)
        .build()
        .map_err(|e| usage(format!("cannot set up TLS certificate verification: {e}")))?;
    Ok(match plan.verification {
        Verification::ChainOnly => Arc::new(ChainOnly::new(webpki)),
        _ => webpki,
    })
}

fn load_roots(plan: &TlsPlan) -> anyhow::Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match &plan.roots {
        Some(Roots::System) => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(usage(
                    "sslrootcert=system: no usable system root certificates found",
                ));
            }
        }
        Some(Roots::File(path)) => {
            for cert in load_certs(path)? {
                store.add(cert).map_err(|e| {
                    usage(format!(
                        "invalid certificate in root certificate file \"{}\": {e}",
                        path.display()
                    ))
                })?;
            }
        }
        // `plan` only asks for verification when roots exist.
        None => return Err(usage("no root certificates to verify the server against")),
    }
    Ok(store)
}

fn load_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            usage(format!(
                "cannot read certificate file \"{shown}\": {}",
                pem_problem(&e)
            ))
        })?;
    if certs.is_empty() {
        return Err(usage(format!("no PEM certificate in \"{shown}\"")));
    }
    Ok(certs)
}

/// The client key, refused when others can read it (libpq's rule: 0600, or 0640 if owned by root).
fn load_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| usage(format!("cannot read private key file \"{shown}\": {e}")))?;
    let loose = if meta.uid() == 0 { 0o037 } else { 0o077 };
    if meta.mode() & loose != 0 {
        return Err(usage(format!(
            "private key file \"{shown}\" has group or world access; permissions should be u=rw (0600) \
             or less if owned by the current user, or u=rw,g=r (0640) or less if owned by root"
        )));
    }
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        usage(format!(
            "cannot load private key file \"{shown}\": {} (encrypted keys and sslpassword are not supported)",
            pem_problem(&e)
        ))
    })
}

/// CRLs from `sslcrl` and every file in `sslcrldir`; missing ones are skipped, as in libpq.
fn load_crls(plan: &TlsPlan) -> anyhow::Result<Vec<CertificateRevocationListDer<'static>>> {
    let mut files: Vec<PathBuf> = plan
        .crl_file
        .iter()
        .filter(|p| p.is_file())
        .cloned()
        .collect();
    if let Some(dir) = plan.crl_dir.as_ref().filter(|d| d.is_dir()) {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| usage(format!("cannot read sslcrldir \"{}\": {e}", dir.display())))?;
        files.extend(
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file()),
        );
    }
    let mut crls = Vec::new();
    for file in files {
        let found = CertificateRevocationListDer::pem_file_iter(&file)
            .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                usage(format!(
                    "cannot read CRL file \"{}\": {}",
                    file.display(),
                    pem_problem(&e)
                ))
            })?;
        crls.extend(found);
    }
    Ok(crls)
}

/// A PEM error without any file content (its "illegal section start" variant quotes a line).
fn pem_problem(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as Pem;
    match e {
        Pem::Io(io) => io.to_string(),
        Pem::NoItemsFound => "no matching PEM section found".to_string(),
        Pem::MissingSectionEnd { .. } | Pem::IllegalSectionStart { .. } => {
            "malformed PEM".to_string()
        }
        Pem::Base64Decode(_) => "invalid base64 in PEM".to_string(),
        _ => "unreadable PEM".to_string(),
    }
}

fn usage(message: impl Into<String>) -> anyhow::Error {
    fail(Exit::Usage, message)
}

//! Pushing a run's metrics to a Prometheus Pushgateway over http or https (ureq on OpenSSL): one
//! request per run, grouped by job, database, table and each `--label` (values base64url-encoded
//! in the path, so any character is safe), under one deadline that covers connecting, the TLS
//! handshake, sending and the answer. https trusts the system's roots, or only `--pushgateway-ca`;
//! credentials in the URL never go over plain http unless `--pushgateway-allow-http-auth` says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use ureq::tls::{PemItem, RootCerts, TlsConfig, TlsProvider};

/// How long one push may take: connecting, the TLS handshake, the request and its answer.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of a refusal's body is kept for the warning.
const DETAIL_CHARS: usize = 300;

/// A validated Pushgateway URL: `http[s]://[user:password@]host[:port][/path-prefix]`.
#[derive(Clone)]
pub(crate) struct PushUrl {
    tls: bool,
    host: String,
    port: u16,
    prefix: String,
    /// `Basic ...` from the URL's user information.
    authorization: Option<String>,
}

impl std::fmt::Debug for PushUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

impl PushUrl {
    /// The URL as it may be printed (never with the credentials).
    pub(crate) fn shown(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{host}:{}{}", self.port, self.prefix)
    }
}

/// Parse `--pushgateway URL`.
pub(crate) fn parse_push_url(s: &str) -> std::result::Result<PushUrl, String> {
    let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = s.strip_prefix("http://") {
        (false, r)
    } else {
        return Err("expected an http:// or https:// URL such as https://pushgateway:9091".into());
    };
    let (authority, path) = match rest.find('/') {
        Some(n) => (&rest[..n], rest[n..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if path.contains(['?', '#']) {
        return Err("the URL may not have a query or fragment".into());
    }
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (host, port) = split_host_port(hostport, if tls { 443 } else { 80 })?;
    if host.is_empty() {
        return Err("the URL has no host".into());
    }
    Ok(PushUrl {
        tls,
        host,
        port,
        prefix: path.to_owned(),
        authorization: userinfo.map(|u| format!("Basic {}", STANDARD.encode(u))),
    })
}

fn split_host_port(s: &str, default_port: u16) -> std::result::Result<(String, u16), String> {
    let bad_port = |p: &str| format!("{p:?} is not a port number");
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "unclosed [ in the host".to_owned())?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad_port(p))?,
            None if after.is_empty() => default_port,
            None => return Err("unexpected text after the host".into()),
        };
        return Ok((host.to_owned(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Ok((h.to_owned(), p.parse().map_err(|_| bad_port(p))?)),
        None => Ok((s.to_owned(), default_port)),
    }
}

/// The Pushgateway options as given: the URL, a CA file for https, and the opt-in to send the
/// URL's credentials over plain http.
#[derive(Debug, Clone, Default)]
pub(crate) struct GatewayArgs {
    pub url: Option<PushUrl>,
    pub ca_file: Option<PathBuf>,
    pub allow_http_auth: bool,
}

/// A Pushgateway checked and ready to push to: its URL and a client set up for it.
#[derive(Clone)]
pub(crate) struct Gateway {
    url: PushUrl,
    agent: ureq::Agent,
}

impl Gateway {
    /// Check the options (before any change): credentials over plain http need the opt-in, a CA
    /// file needs an https URL and must hold a certificate. `None` when no URL is given.
    pub(crate) fn new(args: &GatewayArgs) -> std::result::Result<Option<Gateway>, String> {
        let Some(url) = &args.url else {
            return Ok(None);
        };
        if !url.tls && url.authorization.is_some() && !args.allow_http_auth {
            return Err(format!(
                "the Pushgateway URL {} carries credentials, which plain http would send in \
                 clear; use https://, or pass --pushgateway-allow-http-auth to send them anyway",
                url.shown()
            ));
        }
        let roots = match &args.ca_file {
            Some(_) if !url.tls => {
                return Err(format!(
                    "--pushgateway-ca applies to an https:// Pushgateway, and {} is plain http",
                    url.shown()
                ));
            }
            Some(path) => read_roots(path)?,
            None => RootCerts::PlatformVerifier,
        };
        let tls = TlsConfig::builder()
            .provider(TlsProvider::NativeTls)
            .root_certs(roots)
            .build();
        let agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_global(Some(PUSH_TIMEOUT))
            // The gateway is reached directly, as configured: no proxy from the environment, no
            // redirect that could carry the credentials elsewhere.
            .proxy(None)
            .max_redirects(0)
            .http_status_as_error(false)
            .user_agent(concat!("idemctl/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Ok(Some(Gateway {
            url: url.clone(),
            agent,
        }))
    }

    /// Push `body` (exposition text) to the group. `replace` (PUT) replaces the whole group;
    /// otherwise (POST) only the metrics pushed are replaced, and the group's others are kept.
    pub(crate) async fn push(
        &self,
        job: &str,
        grouping: &[(String, String)],
        body: String,
        replace: bool,
    ) -> Result<()> {
        let target = format!("{}{}", self.url.shown(), group_path(job, grouping));
        let gateway = self.clone();
        tokio::task::spawn_blocking(move || gateway.request(&target, body, replace))
            .await
            .map_err(|e| anyhow!("the push stopped: {e}"))
            .and_then(|r| r)
            .with_context(|| {
                format!(
                    "failed to push metrics to the Pushgateway at {}",
                    self.url.shown()
                )
            })
    }

    fn request(&self, target: &str, body: String, replace: bool) -> Result<()> {
        let request = if replace {
            self.agent.put(target)
        } else {
            self.agent.post(target)
        };
        let request = request.content_type("text/plain; version=0.0.4; charset=utf-8");
        let request = match &self.url.authorization {
            Some(auth) => request.header("Authorization", auth),
            None => request,
        };
        let mut response = request.send(body).map_err(failure)?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .lossy_utf8(true)
            .read_to_string()
            .unwrap_or_default();
        // As the gateway said it: the warning that prints it escapes it.
        let detail: String = text.trim().chars().take(DETAIL_CHARS).collect();
        bail!("HTTP {}: {detail}", status.as_u16())
    }
}

/// The certificates of `--pushgateway-ca`, the only roots an https push then trusts.
fn read_roots(path: &Path) -> std::result::Result<RootCerts, String> {
    let shown = path.display();
    let pem =
        std::fs::read(path).map_err(|e| format!("cannot read --pushgateway-ca {shown}: {e}"))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(format!("--pushgateway-ca {shown} is not valid PEM: {e}")),
        }
    }
    if certs.is_empty() {
        return Err(format!(
            "--pushgateway-ca {shown} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(RootCerts::new_with_certs(&certs))
}

/// A failed request in words: the socket's or TLS library's own, the deadline said as such.
fn failure(e: ureq::Error) -> anyhow::Error {
    match e {
        ureq::Error::Io(io) => anyhow!(io),
        ureq::Error::Timeout(_) => anyhow!("no answer within {}s", PUSH_TIMEOUT.as_secs()),
        ureq::Error::HostNotFound => anyhow!("the host name does not resolve"),
        ureq::Error::NativeTls(tls) => anyhow!("TLS handshake failed: {}", tls_words(&tls)),
        other => anyhow!(other),
    }
}

/// OpenSSL's verdict without its library codes: the certificate check's reason ("unable to get
/// local issuer certificate", with where the CA must be), else the error stack's reasons.
fn tls_words(e: &(dyn std::error::Error + 'static)) -> String {
    let text = e.to_string();
    // native-tls appends the certificate check's verdict in parentheses.
    let verdict = text
        .strip_suffix(')')
        .and_then(|t| t.rsplit_once(" ("))
        .map(|(_, v)| v);
    if let Some(verdict) = verdict.filter(|_| text.contains("certificate verify failed")) {
        let hint = if verdict.contains("issuer") || verdict.contains("self-signed") {
            "; the CA that signed the Pushgateway's certificate must be among the system's root \
             certificates, or in --pushgateway-ca"
        } else {
            ""
        };
        return format!("certificate verify failed: {verdict}{hint}");
    }
    let reasons: Vec<&str> = e
        .source()
        .and_then(|s| s.downcast_ref::<openssl::error::ErrorStack>())
        .map(|stack| stack.errors().iter().filter_map(|e| e.reason()).collect())
        .unwrap_or_default();
    if reasons.is_empty() {
        text
    } else {
        reasons.join(": ")
    }
}

/// The request path: `/metrics/job@base64/JOB/NAME@base64/VALUE...`.
fn group_path(job: &str, grouping: &[(String, String)]) -> String {
    let mut path = format!("/metrics/job@base64/{}", URL_SAFE.encode(job));
    for (k, v) in grouping {
        path.push_str(&format!("/{k}@base64/{}", URL_SAFE.encode(v)));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_without_showing_the_password() {
        let u = parse_push_url("http://user:secret@pgw.example:9091/prefix/").unwrap();
        assert_eq!(u.shown(), "http://pgw.example:9091/prefix");
        assert!(u.authorization.is_some());
        assert!(!format!("{u:?}").contains("secret"));
        assert_eq!(parse_push_url("http://[::1]:9091").unwrap().port, 9091);
        assert_eq!(parse_push_url("http://pgw").unwrap().port, 80);
        let https = parse_push_url("https://u:p@pgw").unwrap();
        assert_eq!(
            (https.shown().as_str(), https.port),
            ("https://pgw:443", 443)
        );
        assert!(parse_push_url("pgw:9091").is_err());
        assert!(parse_push_url("ftp://pgw:9091").is_err());
        assert!(parse_push_url("http://pgw:x").is_err());
        assert!(parse_push_url("http://:9091").is_err());
    }

    #[test]
    fn credentials_over_plain_http_need_the_opt_in() {
        let args = |url: &str, allow| GatewayArgs {
            url: Some(parse_push_url(url).unwrap()),
            ca_file: None,
            allow_http_auth: allow,
        };
        let refused = Gateway::new(&args("http://u:secret@pgw:9091", false))
            .err()
            .unwrap();
        assert_eq!(
            refused,
            "the Pushgateway URL http://pgw:9091 carries credentials, which plain http would send \
             in clear; use https://, or pass --pushgateway-allow-http-auth to send them anyway"
        );
        assert!(Gateway::new(&args("http://u:secret@pgw:9091", true)).is_ok());
        assert!(Gateway::new(&args("https://u:secret@pgw:9091", false)).is_ok());
        assert!(Gateway::new(&args("http://pgw:9091", false)).is_ok());
    }

    #[test]
    fn grouping_values_are_base64url_in_the_path() {
        let p = group_path("idemctl_evict", &[("table".into(), "public.a/b".into())]);
        assert_eq!(
            p,
            format!(
                "/metrics/job@base64/{}/table@base64/{}",
                URL_SAFE.encode("idemctl_evict"),
                URL_SAFE.encode("public.a/b")
            )
        );
    }
}

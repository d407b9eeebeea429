//! Pushing a run's metrics to a Prometheus Pushgateway over plain HTTP/1.1: one request per run,
//! grouped by job, database, table and each `--label` (values base64url-encoded in the path, so
//! any character is safe), with a short overall timeout.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How long one push may take, connecting included.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// A validated Pushgateway URL: `http://[user:password@]host[:port][/path-prefix]`.
#[derive(Clone)]
pub struct PushUrl {
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
    /// The URL as it may be printed (never with the password).
    pub fn shown(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("http://{host}:{}{}", self.port, self.prefix)
    }
}

/// Parse `--pushgateway URL`.
pub fn parse_push_url(s: &str) -> std::result::Result<PushUrl, String> {
    let rest = if let Some(r) = s.strip_prefix("http://") {
        r
    } else if s.starts_with("https://") {
        return Err(
            "https Pushgateway URLs are not supported; use http:// (a Pushgateway inside the cluster, or a TLS-terminating proxy beside idemctl)"
                .into(),
        );
    } else {
        return Err("expected an http:// URL such as http://pushgateway:9091".into());
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
    let (host, port) = split_host_port(hostport)?;
    if host.is_empty() {
        return Err("the URL has no host".into());
    }
    Ok(PushUrl {
        host,
        port,
        prefix: path.to_owned(),
        authorization: userinfo.map(|u| format!("Basic {}", STANDARD.encode(u))),
    })
}

fn split_host_port(s: &str) -> std::result::Result<(String, u16), String> {
    let bad_port = |p: &str| format!("{p:?} is not a port number");
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "unclosed [ in the host".to_owned())?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad_port(p))?,
            None if after.is_empty() => 80,
            None => return Err("unexpected text after the host".into()),
        };
        return Ok((host.to_owned(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Ok((h.to_owned(), p.parse().map_err(|_| bad_port(p))?)),
        None => Ok((s.to_owned(), 80)),
    }
}

/// The request path: `/metrics/job/JOB/NAME@base64/VALUE...`.
fn group_path(url: &PushUrl, job: &str, grouping: &[(String, String)]) -> String {
    let mut path = format!("{}/metrics/job@base64/{}", url.prefix, URL_SAFE.encode(job));
    for (k, v) in grouping {
        path.push_str(&format!("/{k}@base64/{}", URL_SAFE.encode(v)));
    }
    path
}

/// Push `body` (exposition text) to the group. `replace` (PUT) replaces the whole group; otherwise
/// (POST) only the metrics pushed are replaced, and the group's others are kept.
pub async fn push(
    url: &PushUrl,
    job: &str,
    grouping: &[(String, String)],
    body: &str,
    replace: bool,
) -> Result<()> {
    let path = group_path(url, job, grouping);
    tokio::time::timeout(PUSH_TIMEOUT, request(url, &path, body, replace))
        .await
        .map_err(|_| anyhow!("no answer within {}s", PUSH_TIMEOUT.as_secs()))
        .and_then(|r| r)
        .with_context(|| {
            format!(
                "failed to push metrics to the Pushgateway at {}",
                url.shown()
            )
        })
}

async fn request(url: &PushUrl, path: &str, body: &str, replace: bool) -> Result<()> {
    let mut stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port)).await?;
    let method = if replace { "PUT" } else { "POST" };
    let host = if url.host.contains(':') {
        format!("[{}]:{}", url.host, url.port)
    } else {
        format!("{}:{}", url.host, url.port)
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: idemctl/{}\r\n\
         Content-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    if let Some(auth) = &url.authorization {
        head.push_str(&format!("Authorization: {auth}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.flush().await?;
    let mut response = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    let status_line = text.lines().next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("not an HTTP answer"))?;
    if (200..300).contains(&status) {
        return Ok(());
    }
    let detail = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.trim())
        .unwrap_or_default();
    let detail: String = crate::output::sanitize(detail).chars().take(300).collect();
    bail!("HTTP {status}: {detail}")
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
        assert!(parse_push_url("https://pgw:9091").is_err());
        assert!(parse_push_url("pgw:9091").is_err());
        assert!(parse_push_url("http://pgw:x").is_err());
        assert!(parse_push_url("http://:9091").is_err());
    }

    #[test]
    fn grouping_values_are_base64url_in_the_path() {
        let u = parse_push_url("http://pgw:9091").unwrap();
        let p = group_path(
            &u,
            "idemctl_evict",
            &[("table".into(), "public.a/b".into())],
        );
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

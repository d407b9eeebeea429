//! A real Prometheus Pushgateway (Debian package `prometheus-pushgateway`) for the metrics tests:
//! one per test, on a free 127.0.0.1 port, in memory only (no persistence file), stopped when the
//! `Pushgateway` is dropped; optionally behind TLS (a test CA made with the openssl command) and
//! basic auth, through its `--web.config.file`. It runs under `timeout`, so a test process killed
//! before dropping it cannot leave it running for more than ten minutes. A missing binary fails the
//! test loudly.

use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use ureq::tls::{PemItem, RootCerts, TlsConfig, TlsProvider};

const BINARY: &str = "/usr/bin/prometheus-pushgateway";

/// The user and password the gateway accepts under `Web::basic_auth`.
pub(crate) const USER: &str = "idemctl";
pub(crate) const PASSWORD: &str = "push-secret";
/// bcrypt of `PASSWORD` (cost 4), as the gateway's web config takes it.
const PASSWORD_BCRYPT: &str = "$2b$04$GeTRHMWvK19.US7xBzegme4lSc/w3pKndn5vIbKEcOBc0FBZE5jXG";

/// How the gateway listens: plain http by default.
#[derive(Default, Clone, Copy)]
pub(crate) struct Web {
    /// https, with a certificate for 127.0.0.1 signed by the test CA (`Pushgateway::ca_cert`).
    pub tls: bool,
    /// Only requests with `USER` and `PASSWORD` (basic auth) are answered.
    pub basic_auth: bool,
}

/// A running Pushgateway.
pub(crate) struct Pushgateway {
    child: Child,
    port: u16,
    web: Web,
    /// The web config and certificates (removed on drop).
    dir: std::sync::Arc<tempfile::TempDir>,
}

/// A free port on 127.0.0.1 (nothing listens there once this returns).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot find a free TCP port on 127.0.0.1")
}

impl Pushgateway {
    /// Start one on plain http and wait until it answers.
    pub(crate) fn start() -> Pushgateway {
        Pushgateway::start_with(Web::default())
    }

    /// Start one as `web` says and wait until it answers.
    pub(crate) fn start_with(web: Web) -> Pushgateway {
        assert!(
            Path::new(BINARY).exists(),
            "{BINARY} is not installed: apt-get install prometheus-pushgateway, or run scripts/test, which installs it (the metrics tests need it)"
        );
        let dir = std::sync::Arc::new(tempfile::tempdir().expect("tempdir for the Pushgateway"));
        let config = web_config(dir.path(), web);
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new("timeout")
                .args(["-s", "TERM", "600", BINARY])
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg(format!("--web.config.file={}", config.display()))
                .arg("--persistence.file=")
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("failed to start the Pushgateway under timeout(1)");
            let mut gw = Pushgateway {
                child,
                port,
                web,
                dir: dir.clone(),
            };
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if let Ok(Some(status)) = gw.child.try_wait() {
                    let mut err = String::new();
                    if let Some(mut e) = gw.child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    last = format!("exited with {status}: {err}");
                    break;
                }
                if gw.try_metrics().is_ok() {
                    return gw;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if last.is_empty() {
                last = "did not answer within 15 s".into();
            }
        }
        panic!("the Pushgateway did not start: {last}");
    }

    /// Its URL, for --pushgateway (no credentials).
    pub(crate) fn url(&self) -> String {
        let scheme = if self.web.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Its URL with `user:password@`.
    pub(crate) fn url_with(&self, user: &str, password: &str) -> String {
        self.url()
            .replacen("://", &format!("://{user}:{password}@"), 1)
    }

    /// The test CA that signed its certificate (under `Web::tls`).
    pub(crate) fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("certs/ca.crt")
    }

    /// A CA that did not sign it.
    pub(crate) fn other_ca_cert(&self) -> PathBuf {
        self.dir.path().join("certs/other-ca.crt")
    }

    /// The exposition text of GET /metrics.
    pub(crate) fn metrics(&self) -> String {
        self.try_metrics()
            .unwrap_or_else(|e| panic!("GET {}/metrics failed: {e}", self.url()))
    }

    fn try_metrics(&self) -> Result<String, String> {
        let mut tls = TlsConfig::builder().provider(TlsProvider::NativeTls);
        if self.web.tls {
            let pem = std::fs::read(self.ca_cert()).map_err(|e| e.to_string())?;
            let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                .filter_map(|i| match i {
                    Ok(PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            tls = tls.root_certs(RootCerts::new_with_certs(&certs));
        }
        let agent = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .timeout_global(Some(Duration::from_secs(10)))
            .proxy(None)
            .http_status_as_error(false)
            .build()
            .new_agent();
        let mut request = agent.get(format!("{}/metrics", self.url()));
        if self.web.basic_auth {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
            request = request.header("Authorization", format!("Basic {token}"));
        }
        let mut response = request.call().map_err(|e| e.to_string())?;
        let body = response
            .body_mut()
            .read_to_string()
            .map_err(|e| e.to_string())?;
        if response.status() != 200 {
            return Err(format!("answered {}\n{body}", response.status()));
        }
        Ok(body)
    }
}

/// The gateway's `--web.config.file` for `web` (certificates made in `dir/certs` under TLS).
fn web_config(dir: &Path, web: Web) -> PathBuf {
    let mut text = String::new();
    if web.tls {
        let certs = dir.join("certs");
        super::tcp::make_certificates(&certs).expect("test certificates for the Pushgateway");
        text.push_str(&format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
            certs.join("server.crt").display(),
            certs.join("server.key").display()
        ));
    }
    if web.basic_auth {
        text.push_str(&format!(
            "basic_auth_users:\n  {USER}: '{PASSWORD_BCRYPT}'\n"
        ));
    }
    let path = dir.join("web.yml");
    std::fs::write(&path, text).expect("write the Pushgateway's web config");
    path
}

impl Drop for Pushgateway {
    fn drop(&mut self) {
        // SIGTERM to timeout(1), which passes it on to the Pushgateway and exits with it.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One sample of exposition text: name, labels (sorted), value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: f64,
}

/// Parse the sample lines of exposition text (label values unescaped).
pub(crate) fn parse_samples(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (name, rest) = match line.find(['{', ' ']) {
            Some(n) => (&line[..n], &line[n..]),
            None => continue,
        };
        let mut labels = std::collections::BTreeMap::new();
        let mut rest = rest;
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            let mut key = String::new();
            let mut end = r.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '}' => {
                        end = i + 1;
                        break;
                    }
                    ',' => {}
                    '=' => {
                        chars.next(); // opening quote
                        let mut value = String::new();
                        while let Some((_, c)) = chars.next() {
                            match c {
                                '\\' => match chars.next().map(|x| x.1) {
                                    Some('n') => value.push('\n'),
                                    Some(o) => value.push(o),
                                    None => {}
                                },
                                '"' => break,
                                o => value.push(o),
                            }
                        }
                        labels.insert(std::mem::take(&mut key), value);
                    }
                    o => key.push(o),
                }
            }
            rest = &r[end..];
        }
        let value = rest.split_whitespace().next().unwrap_or("NaN");
        out.push(Sample {
            name: name.to_owned(),
            labels,
            value: value.parse().unwrap_or(f64::NAN),
        });
    }
    out
}

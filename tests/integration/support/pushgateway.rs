//! A real Prometheus Pushgateway (Debian package `prometheus-pushgateway`) for the metrics tests:
//! one per test, on a free 127.0.0.1 port, in memory only (no persistence file), stopped when the
//! `Pushgateway` is dropped. It runs under `timeout`, so a test process killed before dropping it
//! cannot leave it running for more than ten minutes. A missing binary fails the test loudly.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BINARY: &str = "/usr/bin/prometheus-pushgateway";

/// A running Pushgateway.
pub struct Pushgateway {
    child: Child,
    port: u16,
}

/// A free port on 127.0.0.1 (nothing listens there once this returns).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot find a free TCP port on 127.0.0.1")
}

impl Pushgateway {
    /// Start one and wait until it answers.
    pub fn start() -> Pushgateway {
        assert!(
            std::path::Path::new(BINARY).exists(),
            "{BINARY} is not installed: apt-get install prometheus-pushgateway, or run scripts/test, which installs it (the metrics tests need it)"
        );
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new("timeout")
                .args(["-s", "TERM", "600", BINARY])
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--persistence.file=")
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("failed to start the Pushgateway under timeout(1)");
            let mut gw = Pushgateway { child, port };
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

    /// Its URL, for --pushgateway.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The exposition text of GET /metrics.
    pub fn metrics(&self) -> String {
        self.try_metrics()
            .unwrap_or_else(|e| panic!("GET {}/metrics failed: {e}", self.url()))
    }

    fn try_metrics(&self) -> Result<String, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        s.read_to_end(&mut response).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("not an HTTP answer: {text}"))?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("answered {head}\n{body}"));
        }
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            return Ok(dechunk(body));
        }
        Ok(body.to_owned())
    }
}

/// Undo HTTP/1.1 chunked transfer encoding.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
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
pub struct Sample {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: f64,
}

/// Parse the sample lines of exposition text (label values unescaped).
pub fn parse_samples(text: &str) -> Vec<Sample> {
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

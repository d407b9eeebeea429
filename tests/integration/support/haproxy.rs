//! A real TLS-terminating proxy in front of the plain TCP test server: HAProxy
//! (`/usr/sbin/haproxy`, or `IDEMCTL_TEST_HAPROXY`) in TCP mode, speaking direct TLS (a ClientHello
//! first, no SSLRequest: what `sslnegotiation=direct` sends) with the test CA's certificate for
//! `localhost`, 127.0.0.1 and ::1 (made by `tcp::make_certificates`), and forwarding the decrypted
//! PostgreSQL protocol to the server. This is the deployment PostgreSQL 17's direct negotiation
//! exists for; the server behind it needs no TLS of its own.
//!
//! Two listeners: [`HaProxy::port`] selects the ALPN protocol "postgresql" (as PostgreSQL 17
//! does), [`HaProxy::port_without_alpn`] acknowledges no ALPN at all (a proxy configured without
//! `alpn postgresql`), which libpq 17 refuses for direct TLS.
//!
//! One per test, in its own private directory on free ports, in the foreground (`-db`: no daemon,
//! no master-worker), under a shell that stops it when its stdin closes: when the value is dropped,
//! or when the test process exits however it exits. A missing haproxy makes the test panic with
//! instructions: tests never skip.

use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::tcp::make_certificates;

/// A running HAProxy terminating direct TLS for one upstream port on 127.0.0.1.
pub(crate) struct HaProxy {
    pub dir: PathBuf,
    /// Direct TLS with ALPN "postgresql".
    pub port: u16,
    /// Direct TLS without ALPN.
    pub port_without_alpn: u16,
    shell: Child,
    stdin: Option<ChildStdin>,
}

impl HaProxy {
    /// Start HAProxy in front of the server listening on 127.0.0.1:`upstream` and wait until both
    /// listeners accept connections.
    pub(crate) fn start(upstream: u16) -> HaProxy {
        let binary = std::env::var_os("IDEMCTL_TEST_HAPROXY")
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("/usr/sbin/haproxy"), PathBuf::from);
        assert!(
            binary.exists(),
            "HAProxy is missing: {} does not exist; install it (Debian/Ubuntu: apt-get install \
             haproxy; scripts/test installs it) or set IDEMCTL_TEST_HAPROXY to its path",
            binary.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("idemctl-haproxy.")
            .tempdir()
            .expect("cannot create HAProxy's directory")
            .keep();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        make_certificates(&dir.join("tls")).unwrap_or_else(|e| panic!("{e}"));
        // HAProxy wants the certificate and its key in one PEM file.
        let mut pem = std::fs::read(dir.join("tls/server.crt")).unwrap();
        pem.extend(std::fs::read(dir.join("tls/server.key")).unwrap());
        let pem_path = dir.join("tls/server.pem");
        std::fs::write(&pem_path, pem).unwrap();
        std::fs::set_permissions(&pem_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ipv6 = TcpListener::bind("[::1]:0").is_ok();
        let mut last_log = String::new();
        // A free port may be taken before HAProxy binds it: try again on new ones.
        for _ in 0..5 {
            let (port, port_without_alpn) = (free_port(ipv6), free_port(ipv6));
            if port == port_without_alpn {
                continue;
            }
            let config = config(&pem_path, upstream, port, port_without_alpn, ipv6);
            std::fs::write(dir.join("haproxy.cfg"), config).unwrap();
            let (shell, stdin) = spawn(&binary, &dir);
            let mut proxy = HaProxy {
                dir: dir.clone(),
                port,
                port_without_alpn,
                shell,
                stdin: Some(stdin),
            };
            if proxy.wait_ready() {
                return proxy;
            }
            last_log = proxy.log();
            drop(proxy.stdin.take());
            let _ = proxy.shell.wait();
            // Keep the directory for the next try: `Drop` must not remove it yet.
            std::mem::forget(proxy);
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("HAProxy did not start in 5 tries; its last output:\n{last_log}");
    }

    /// The CA that signed the proxy's certificate.
    pub(crate) fn ca_cert(&self) -> PathBuf {
        self.dir.join("tls/ca.crt")
    }

    /// A CA unrelated to the proxy's certificate.
    pub(crate) fn other_ca_cert(&self) -> PathBuf {
        self.dir.join("tls/other-ca.crt")
    }

    /// HAProxy's output so far (its warnings and alerts).
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("haproxy.log")).unwrap_or_default()
    }

    /// Whether both listeners accept TCP connections within 20 s; `false` when HAProxy gave up
    /// (a port taken meanwhile: it says so as an ALERT and exits).
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.log().contains("[ALERT]") {
                return false;
            }
            let up = |port: u16| TcpStream::connect(("127.0.0.1", port)).is_ok();
            if up(self.port) && up(self.port_without_alpn) {
                return true;
            }
            assert!(
                Instant::now() < deadline,
                "HAProxy did not listen within 20 s; its output:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.shell.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// TCP mode: HAProxy terminates TLS and passes the bytes on, knowing nothing of PostgreSQL.
fn config(pem: &Path, upstream: u16, port: u16, port_without_alpn: u16, ipv6: bool) -> String {
    let pem = pem.display();
    let binds = |port: u16, alpn: &str| {
        let mut lines = format!("    bind 127.0.0.1:{port} ssl crt {pem}{alpn}\n");
        if ipv6 {
            lines.push_str(&format!("    bind [::1]:{port} ssl crt {pem}{alpn}\n"));
        }
        lines
    };
    format!(
        "global\n\
         \x20   maxconn 200\n\
         defaults\n\
         \x20   mode tcp\n\
         \x20   timeout connect 5s\n\
         \x20   timeout client 2m\n\
         \x20   timeout server 2m\n\
         frontend direct_tls\n\
         {with_alpn}\
         \x20   default_backend postgres\n\
         frontend direct_tls_without_alpn\n\
         {without_alpn}\
         \x20   default_backend postgres\n\
         backend postgres\n\
         \x20   server pg 127.0.0.1:{upstream}\n",
        with_alpn = binds(port, " alpn postgresql"),
        without_alpn = binds(port_without_alpn, ""),
    )
}

/// HAProxy in the foreground under a shell that waits for its stdin to close, then stops it
/// (SIGTERM: at once) and waits for it.
fn spawn(binary: &Path, dir: &Path) -> (Child, ChildStdin) {
    const SCRIPT: &str = r#"
"$1" -db -f "$2" >"$3" 2>&1 &
p=$!
cat >/dev/null
kill -TERM "$p" 2>/dev/null
wait "$p"
"#;
    let mut shell = Command::new("/bin/sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("idemctl-haproxy")
        .arg(binary)
        .arg(dir.join("haproxy.cfg"))
        .arg(dir.join("haproxy.log"))
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let stdin = shell.stdin.take().expect("piped stdin");
    (shell, stdin)
}

/// A port free on 127.0.0.1 (and on ::1 when `ipv6`) a moment ago.
fn free_port(ipv6: bool) -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("cannot bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        if !ipv6 || TcpListener::bind(("::1", port)).is_ok() {
            return port;
        }
    }
}

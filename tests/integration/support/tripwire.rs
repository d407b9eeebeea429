//! A TCP proxy that breaks a connection at a chosen statement: it forwards a local TCP port to a
//! server (a TCP port, or the test cluster's Unix socket) until the client sends bytes holding a
//! pattern for the `nth` time over all its connections, then closes both sides of that connection
//! without passing those bytes on. The server never sees the statement; the client sees its
//! connection closed with no reason. So any one step of a run (a statement of `sql/`, a SET, a
//! BEGIN) can be made to fail for real, after the steps before it have run.
//!
//! [`Tripwire::silent_at`] makes the same cut silent instead: from that statement on, every byte
//! the client sends is read and dropped and nothing is closed, as a network path that swallows
//! everything looks from the client.
//!
//! Plain threads; they end when the value is dropped. Use plain TCP (`sslmode=disable`): the
//! pattern is looked for in the bytes as sent.

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Where the proxy forwards to.
#[derive(Clone)]
pub(crate) enum Upstream {
    Tcp(u16),
    Unix(PathBuf),
}

/// A running proxy; see the module documentation.
pub(crate) struct Tripwire {
    port: u16,
    stopped: Arc<AtomicBool>,
    tripped: Arc<AtomicUsize>,
}

/// One end of a forwarded connection.
trait Pipe: std::io::Read + std::io::Write + Send + 'static {
    fn set_timeout(&self, d: Duration);
    fn close(&self);
    fn twin(&self) -> Box<dyn Pipe>;
}

impl Pipe for TcpStream {
    fn set_timeout(&self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
    }
    fn close(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
    fn twin(&self) -> Box<dyn Pipe> {
        Box::new(self.try_clone().expect("clone a socket"))
    }
}

impl Pipe for UnixStream {
    fn set_timeout(&self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
    }
    fn close(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
    fn twin(&self) -> Box<dyn Pipe> {
        Box::new(self.try_clone().expect("clone a socket"))
    }
}

/// What the client-to-server half watches for.
struct Watch {
    pattern: &'static [u8],
    nth: usize,
    seen: Arc<AtomicUsize>,
    /// Swallow the client's bytes from the trip on rather than close the connection.
    silent: bool,
}

impl Tripwire {
    /// Break the connection whose client sends `pattern` for the `nth` time (1 = the first).
    pub(crate) fn start(upstream: Upstream, pattern: &'static [u8], nth: usize) -> Tripwire {
        Tripwire::spawn(upstream, pattern, nth, false)
    }

    /// Go silent on the connection whose client sends `pattern` for the `nth` time: that
    /// statement and everything after it is dropped, and the connection stays open.
    pub(crate) fn silent_at(upstream: Upstream, pattern: &'static [u8], nth: usize) -> Tripwire {
        Tripwire::spawn(upstream, pattern, nth, true)
    }

    fn spawn(upstream: Upstream, pattern: &'static [u8], nth: usize, silent: bool) -> Tripwire {
        assert!(nth >= 1, "nth counts from 1");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy's port");
        let port = listener.local_addr().expect("the proxy's address").port();
        let stopped = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicUsize::new(0));
        let (stop, count) = (stopped.clone(), seen.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let server: Box<dyn Pipe> = match &upstream {
                    Upstream::Tcp(p) => match TcpStream::connect(("127.0.0.1", *p)) {
                        Ok(s) => Box::new(s),
                        Err(_) => continue,
                    },
                    Upstream::Unix(path) => match UnixStream::connect(path) {
                        Ok(s) => Box::new(s),
                        Err(_) => continue,
                    },
                };
                let watch = Watch {
                    pattern,
                    nth,
                    seen: count.clone(),
                    silent,
                };
                let (c, s) = (client.twin(), server.twin());
                let up = stop.clone();
                std::thread::spawn(move || pass(c, s, &up, Some(&watch)));
                let down = stop.clone();
                std::thread::spawn(move || pass(server, Box::new(client), &down, None));
            }
        });
        Tripwire {
            port,
            stopped,
            tripped: seen,
        }
    }

    /// The test cluster's Unix socket in `dir` on `port`.
    pub(crate) fn to_socket_dir(
        dir: &Path,
        port: u16,
        pattern: &'static [u8],
        nth: usize,
    ) -> Tripwire {
        Tripwire::start(
            Upstream::Unix(dir.join(format!(".s.PGSQL.{port}"))),
            pattern,
            nth,
        )
    }

    /// The local port to connect to (host 127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// How many times the pattern has been sent so far (the connection broke when this reached
    /// `nth`).
    pub(crate) fn seen(&self) -> usize {
        self.tripped.load(Ordering::SeqCst)
    }
}

/// Copy `from` to `to` until either ends, the proxy stops, or `from` sends the watched pattern
/// for the watched time; then close both, or (a silent watch) read and drop what `from` sends
/// until the proxy stops.
fn pass(mut from: Box<dyn Pipe>, mut to: Box<dyn Pipe>, stop: &AtomicBool, watch: Option<&Watch>) {
    from.set_timeout(Duration::from_millis(200));
    let mut buf = [0u8; 64 * 1024];
    let mut swallowing = false;
    while !stop.load(Ordering::SeqCst) {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => break,
        };
        if swallowing {
            continue;
        }
        if let Some(w) = watch {
            let hits = buf[..n]
                .windows(w.pattern.len())
                .filter(|win| *win == w.pattern)
                .count();
            if hits > 0 {
                let before = w.seen.fetch_add(hits, Ordering::SeqCst);
                if before < w.nth && before + hits >= w.nth {
                    if w.silent {
                        swallowing = true;
                        continue;
                    }
                    break;
                }
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    from.close();
    to.close();
}

impl Drop for Tripwire {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

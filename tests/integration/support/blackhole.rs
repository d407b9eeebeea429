//! A TCP proxy that can turn into a black hole: it forwards a local TCP port to a server's Unix
//! socket (the test cluster's, or PgBouncer's) until [`BlackHole::cut`], after which it forwards
//! nothing in either direction and closes nothing. Every byte sent to it is then read and dropped
//! (its kernel keeps acknowledging, so neither end's TCP ever sees an error), and connections made
//! after the cut are accepted and never answered: a network path that silently swallows
//! everything, which neither end's keepalives can tell from a quiet one.
//!
//! Plain threads, so the proxy keeps working whatever the test's runtime is doing; they end when
//! the value is dropped (the sockets are shut down then).

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A running proxy; see the module documentation.
pub(crate) struct BlackHole {
    port: u16,
    cut: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
    /// Every socket of every connection, to shut down when the proxy is dropped.
    sockets: Arc<Mutex<Vec<Socket>>>,
}

enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl BlackHole {
    /// Forward `127.0.0.1:<port>` to the Unix socket `upstream`.
    pub(crate) fn to_unix(upstream: impl Into<PathBuf>) -> BlackHole {
        let upstream = upstream.into();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy's port");
        let port = listener.local_addr().expect("the proxy's address").port();
        let proxy = BlackHole {
            port,
            cut: Arc::new(AtomicBool::new(false)),
            stopped: Arc::new(AtomicBool::new(false)),
            sockets: Arc::new(Mutex::new(Vec::new())),
        };
        let (cut, stopped, sockets) = (
            proxy.cut.clone(),
            proxy.stopped.clone(),
            proxy.sockets.clone(),
        );
        std::thread::spawn(move || accept_loop(&listener, &upstream, &cut, &stopped, &sockets));
        proxy
    }

    /// The Unix socket of a server (or PgBouncer) listening in `dir` on `port`.
    pub(crate) fn to_socket_dir(dir: &Path, port: u16) -> BlackHole {
        BlackHole::to_unix(dir.join(format!(".s.PGSQL.{port}")))
    }

    /// The local port to connect to (host 127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// From now on, forward nothing and close nothing.
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Whether [`BlackHole::cut`] was called.
    pub(crate) fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        let sockets = std::mem::take(&mut *self.sockets.lock().unwrap());
        for socket in sockets {
            match socket {
                Socket::Tcp(s) => drop(s.shutdown(Shutdown::Both)),
                Socket::Unix(s) => drop(s.shutdown(Shutdown::Both)),
            }
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    upstream: &Path,
    cut: &Arc<AtomicBool>,
    stopped: &Arc<AtomicBool>,
    sockets: &Arc<Mutex<Vec<Socket>>>,
) {
    for client in listener.incoming() {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        remember(sockets, Socket::Tcp(client.try_clone().expect("clone")));
        if cut.load(Ordering::SeqCst) {
            // Accepted by the kernel, never answered.
            spawn_swallow(client.try_clone().expect("clone"), stopped.clone());
            continue;
        }
        let Ok(server) = UnixStream::connect(upstream) else {
            continue;
        };
        remember(sockets, Socket::Unix(server.try_clone().expect("clone")));
        let (c_read, s_write) = (
            client.try_clone().expect("clone"),
            server.try_clone().expect("clone"),
        );
        let (cut1, stopped1) = (cut.clone(), stopped.clone());
        std::thread::spawn(move || pump(c_read, s_write, &cut1, &stopped1));
        let (cut2, stopped2) = (cut.clone(), stopped.clone());
        std::thread::spawn(move || pump(server, client, &cut2, &stopped2));
    }
}

fn remember(sockets: &Arc<Mutex<Vec<Socket>>>, socket: Socket) {
    sockets.lock().unwrap().push(socket);
}

/// Read and drop everything until the proxy stops.
fn spawn_swallow(mut from: TcpStream, stopped: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let _ = from.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 16 * 1024];
        while !stopped.load(Ordering::SeqCst) {
            match from.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {}
                Err(_) => return,
            }
        }
    });
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Copy `from` to `to` until either ends; once cut, read and drop instead (never closing).
fn pump<R, W>(mut from: R, mut to: W, cut: &AtomicBool, stopped: &AtomicBool)
where
    R: std::io::Read + ReadTimeout,
    W: std::io::Write + Close,
{
    from.read_timeout(Duration::from_millis(200));
    let mut buf = [0u8; 16 * 1024];
    loop {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => {
                if !cut.load(Ordering::SeqCst) {
                    to.close();
                }
                return;
            }
            Ok(n) => n,
            Err(e) if is_timeout(&e) => continue,
            Err(_) => return,
        };
        if cut.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// A socket whose reads can time out (so a pump notices the proxy stopping).
trait ReadTimeout {
    fn read_timeout(&mut self, t: Duration);
}

impl ReadTimeout for TcpStream {
    fn read_timeout(&mut self, t: Duration) {
        let _ = self.set_read_timeout(Some(t));
    }
}

impl ReadTimeout for UnixStream {
    fn read_timeout(&mut self, t: Duration) {
        let _ = self.set_read_timeout(Some(t));
    }
}

/// Half-close: pass an end of stream on.
trait Close {
    fn close(&mut self);
}

impl Close for TcpStream {
    fn close(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl Close for UnixStream {
    fn close(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

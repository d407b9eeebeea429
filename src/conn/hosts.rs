//! Which servers to try: libpq's `host`/`hostaddr`/`port` lists (with the Unix-socket default)
//! turned into endpoints, and those endpoints set on a `tokio_postgres::Config`.

use super::env::{default_socket_dir, is_default_socket_dir};
use super::params::Params;
use crate::report::failure::{Expected, Place, Unsupported};
use std::net::IpAddr;
use std::path::PathBuf;

/// How an endpoint is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HostKind {
    /// A TCP host name (or the literal `hostaddr` text when no name was given, for messages; TLS
    /// checks [`Endpoint::tls_name`] then).
    Tcp(String),
    /// A Unix-socket directory; the socket is `<dir>/.s.PGSQL.<port>`.
    Unix(PathBuf),
}

/// One server to try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) host: HostKind,
    /// A numeric address that replaces the name lookup (libpq `hostaddr`).
    pub(crate) addr: Option<IpAddr>,
    pub(crate) port: u16,
    /// Whether `host` named this endpoint (TCP), rather than only `hostaddr`.
    pub(crate) named: bool,
    /// The name verify-full checks the server's certificate against, as libpq has it: the host
    /// name; for an endpoint given only a `hostaddr`, the `host` socket directory beside it or
    /// else the default one (which no certificate names, so verify-full fails there as in psql).
    pub(crate) tls_name: String,
}

impl Endpoint {
    /// The name pgpass lines are matched against, as psql 15 matches them: the host name if
    /// given; `localhost` with only a `hostaddr` and for a default socket directory.
    pub(crate) fn pgpass_host(&self) -> String {
        match &self.host {
            HostKind::Tcp(_) if !self.named => "localhost".to_string(),
            HostKind::Tcp(name) => name.clone(),
            HostKind::Unix(dir) if is_default_socket_dir(dir) => "localhost".to_string(),
            HostKind::Unix(dir) => dir.display().to_string(),
        }
    }

    /// The endpoint as messages name it (the address only where it differs from the name).
    pub(crate) fn place(&self) -> Place {
        match (&self.host, self.addr) {
            (HostKind::Unix(dir), _) => Place::Socket {
                dir: dir.clone(),
                port: self.port,
            },
            (HostKind::Tcp(name), addr) => Place::Host {
                name: name.clone(),
                addr: addr.filter(|a| *name != a.to_string()),
                port: self.port,
            },
        }
    }
}

/// libpq's host list rules: `host` and `hostaddr` lists pair up by position, an empty host means
/// the default socket directory, and `port` holds one value for all hosts or one per host.
pub(crate) fn endpoints(params: &Params) -> anyhow::Result<Vec<Endpoint>> {
    let hosts = list(params.get("host"));
    let addrs = parse_addrs(params)?;
    if !hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len() {
        return Err(params.invalid("hostaddr", Expected::AddressPerHostName(hosts.len())));
    }
    // The driver pairs addresses with hosts only as whole lists.
    if addrs.iter().any(Option::is_some) && addrs.iter().any(Option::is_none) {
        return Err(params.invalid("hostaddr", Expected::AddressForEveryHost));
    }
    let count = hosts.len().max(addrs.len()).max(1);
    let ports = parse_ports(params, count)?;
    (0..count)
        .map(|i| {
            let name = hosts.get(i).map_or("", String::as_str);
            let addr = addrs.get(i).cloned().flatten();
            let tls_name = match name {
                "" => default_socket_dir().display().to_string(),
                name => name.to_owned(),
            };
            Ok(Endpoint {
                named: !name.is_empty() && !name.starts_with('/'),
                tls_name,
                host: host_kind(params, name, addr.as_ref().map(|(_, raw)| raw.as_str()))?,
                addr: addr.map(|(ip, _)| ip),
                port: ports[i],
            })
        })
        .collect()
}

fn host_kind(params: &Params, name: &str, raw_addr: Option<&str>) -> anyhow::Result<HostKind> {
    if name.starts_with('@') {
        return Err(params.unsupported("host", Unsupported::AbstractSocket));
    }
    Ok(match (name, raw_addr) {
        (n, _) if !n.is_empty() && !n.starts_with('/') => HostKind::Tcp(n.to_string()),
        // A socket path or no name, but an address: TCP to the address, named by it in messages.
        (_, Some(addr)) => HostKind::Tcp(addr.to_string()),
        ("", None) => HostKind::Unix(default_socket_dir()),
        (dir, None) => HostKind::Unix(PathBuf::from(dir)),
    })
}

fn list(value: Option<&str>) -> Vec<String> {
    value.map_or_else(Vec::new, |v| {
        v.split(',').map(|s| s.trim().to_string()).collect()
    })
}

/// Each `hostaddr` entry parsed, with its text kept for pgpass matching and TLS naming.
fn parse_addrs(params: &Params) -> anyhow::Result<Vec<Option<(IpAddr, String)>>> {
    list(params.get("hostaddr"))
        .into_iter()
        .map(|a| match a.as_str() {
            "" => Ok(None),
            text => text
                .parse()
                .map(|ip| Some((ip, a.clone())))
                .map_err(|_| params.invalid("hostaddr", Expected::NumericAddresses)),
        })
        .collect()
}

fn parse_ports(params: &Params, hosts: usize) -> anyhow::Result<Vec<u16>> {
    let ports: Vec<u16> = list(params.get("port"))
        .iter()
        .map(|p| match p.as_str() {
            "" => Ok(5432),
            p => p
                .parse::<u16>()
                .ok()
                .filter(|n| *n != 0)
                .ok_or_else(|| params.invalid("port", Expected::PortNumbers)),
        })
        .collect::<anyhow::Result<_>>()?;
    match ports.len() {
        0 => Ok(vec![5432; hosts]),
        1 => Ok(vec![ports[0]; hosts]),
        n if n == hosts => Ok(ports),
        n => Err(params.invalid("port", Expected::PortPerHost { hosts, ports: n })),
    }
}

/// Set the endpoints on the driver's config through its builder methods.
pub(crate) fn apply(endpoints: &[Endpoint], config: &mut tokio_postgres::Config) {
    for e in endpoints {
        match &e.host {
            HostKind::Tcp(_) => config.host(&e.tls_name),
            HostKind::Unix(dir) => config.host_path(dir),
        };
        if let Some(addr) = e.addr {
            config.hostaddr(addr);
        }
        config.port(e.port);
    }
}

/// libpq never negotiates TLS over a Unix socket; the driver would fail `require` there instead.
/// (With a mix of socket and TCP hosts the driver applies one sslmode to all, so `require` and
/// stricter modes fail on the socket entries; `prefer` works on both.)
pub(crate) fn all_unix(endpoints: &[Endpoint]) -> bool {
    endpoints
        .iter()
        .all(|e| matches!(e.host, HostKind::Unix(_)))
}

//! libpq's `verify-full` host name check, done after OpenSSL has verified the chain: the names in
//! the certificate's subjectAltName of the host's kind (DNS name, or IP address for a numeric
//! host), else its Common Name; a leading `*.` matches one whole label. Messages are libpq's.

use crate::report::failure::HostMismatch;
use openssl::nid::Nid;
use openssl::x509::X509Ref;
use std::net::IpAddr;

/// `Ok` when `host` is a name the certificate carries, else libpq's message. `host` is never
/// empty: an endpoint given only a `hostaddr` is named by a socket directory, as libpq names it
/// (`hosts::Endpoint::tls_name`), and the driver refuses TLS where it has no name (a Unix
/// socket), so libpq's "host name must be specified" has no case here.
pub(crate) fn host_matches(cert: &X509Ref, host: &str) -> Result<(), HostMismatch> {
    let ip = host.parse::<IpAddr>().ok();
    let mut examined: Vec<String> = Vec::new();
    let mut check_cn = true;
    if let Some(sans) = cert.subject_alt_names() {
        for name in &sans {
            let (matched, same_kind, shown) = if let Some(dns) = name.dnsname() {
                (name_matches(dns, host), ip.is_none(), dns.to_string())
            } else if let Some(bytes) = name.ipaddress() {
                let addr = ip_from_bytes(bytes);
                let shown = addr.map_or_else(|| "?".to_string(), |a| a.to_string());
                (addr.is_some() && addr == ip, ip.is_some(), shown)
            } else {
                continue;
            };
            // A name of the host's kind exists: the Common Name no longer counts (RFC 6125).
            check_cn &= !same_kind;
            examined.push(shown);
            if matched {
                return Ok(());
            }
        }
    }
    if check_cn {
        let cn = cert
            .subject_name()
            .entries_by_nid(Nid::COMMONNAME)
            .last()
            .and_then(|e| e.data().to_string().ok());
        if let Some(cn) = cn {
            if name_matches(&cn, host) {
                return Ok(());
            }
            examined.push(cn);
        }
    }
    let host = host.to_owned();
    Err(match examined.as_slice() {
        [] => HostMismatch::NoName,
        [only] => HostMismatch::One {
            name: only.clone(),
            host,
        },
        [first, rest @ ..] => HostMismatch::Several {
            first: first.clone(),
            others: rest.len(),
            host,
        },
    })
}

fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

/// Case-insensitive equality, or `*.rest` matching exactly one leading label of `host`.
pub(crate) fn name_matches(pattern: &str, host: &str) -> bool {
    if pattern.eq_ignore_ascii_case(host) {
        return true;
    }
    let Some(suffix) = pattern.strip_prefix('*') else {
        return false;
    };
    if !suffix.starts_with('.') || suffix.len() < 2 || suffix.len() >= host.len() {
        return false;
    }
    let (label, tail) = host.split_at(host.len() - suffix.len());
    tail.eq_ignore_ascii_case(suffix) && !label.contains('.')
}

#[cfg(test)]
mod tests {
    use super::name_matches;

    #[test]
    fn wildcards_match_one_label() {
        assert!(name_matches("DB.example.com", "db.EXAMPLE.com"));
        assert!(name_matches("*.example.com", "db.example.com"));
        assert!(!name_matches("*.example.com", "a.db.example.com"));
        assert!(!name_matches("*.example.com", "example.com"));
        assert!(!name_matches("*.example.com", ".example.com"));
        assert!(!name_matches("db*.example.com", "db1.example.com"));
        assert!(!name_matches("*", "localhost"));
    }
}

//! Connection strings for the test harness: parse any libpq-style URL or key=value string and render
//! key=value conninfos (and URIs) with one setting changed.

use std::fmt::Write as _;

use tokio_postgres::config::{Config, Host, SslMode, TargetSessionAttrs};

/// An ordered list of libpq settings; rendering keeps the order, and `set` replaces in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ConnInfo {
    params: Vec<(String, String)>,
}

impl ConnInfo {
    /// An empty conninfo.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Parse a URL (`postgresql://...`) or key=value string the way tokio-postgres does, keeping the
    /// settings the harness understands: host, hostaddr, port, user, password, dbname, options,
    /// application_name, sslmode, connect_timeout, target_session_attrs.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let config: Config = s
            .parse()
            .map_err(|e| format!("cannot parse connection string: {e}"))?;
        let mut info = Self::new();
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        if !hosts.is_empty() {
            info.set("host", hosts.join(","));
        }
        let addrs: Vec<String> = config
            .get_hostaddrs()
            .iter()
            .map(|a| a.to_string())
            .collect();
        if !addrs.is_empty() {
            info.set("hostaddr", addrs.join(","));
        }
        let ports: Vec<String> = config.get_ports().iter().map(|p| p.to_string()).collect();
        if !ports.is_empty() {
            info.set("port", ports.join(","));
        }
        if let Some(user) = config.get_user() {
            info.set("user", user);
        }
        if let Some(password) = config.get_password() {
            info.set("password", String::from_utf8_lossy(password));
        }
        if let Some(dbname) = config.get_dbname() {
            info.set("dbname", dbname);
        }
        if let Some(options) = config.get_options() {
            info.set("options", options);
        }
        if let Some(app) = config.get_application_name() {
            info.set("application_name", app);
        }
        match config.get_ssl_mode() {
            SslMode::Disable => info.set("sslmode", "disable"),
            SslMode::Require => info.set("sslmode", "require"),
            _ => {} // prefer is the default on both sides
        }
        if let Some(timeout) = config.get_connect_timeout() {
            info.set("connect_timeout", timeout.as_secs().max(1).to_string());
        }
        match config.get_target_session_attrs() {
            TargetSessionAttrs::ReadWrite => info.set("target_session_attrs", "read-write"),
            TargetSessionAttrs::ReadOnly => info.set("target_session_attrs", "read-only"),
            _ => {}
        }
        Ok(info)
    }

    /// Set (or replace) one setting.
    pub(crate) fn set(&mut self, key: &str, value: impl Into<String>) {
        let value = value.into();
        match self.params.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.params.push((key.to_owned(), value)),
        }
    }

    /// A copy with one setting set (or replaced).
    pub(crate) fn with(&self, key: &str, value: impl Into<String>) -> Self {
        let mut copy = self.clone();
        copy.set(key, value);
        copy
    }

    /// The value of one setting.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `key=value key='quoted value' ...`, quoting only where libpq needs it.
    pub(crate) fn to_key_value(&self) -> String {
        let mut out = String::new();
        for (key, value) in &self.params {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(key);
            out.push('=');
            out.push_str(&quote(value));
        }
        out
    }

    /// `postgresql://?key=value&...` with every setting as a percent-encoded query parameter (this
    /// form carries unix-socket hosts without special syntax).
    pub(crate) fn to_uri(&self) -> String {
        let mut out = String::from("postgresql://");
        for (i, (key, value)) in self.params.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(key);
            out.push('=');
            out.push_str(&percent_encode(value));
        }
        out
    }
}

fn quote(value: &str) -> String {
    let needs_quotes = value.is_empty()
        || value
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '\\');
    if !needs_quotes {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

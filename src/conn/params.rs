//! The libpq keyword table: which connection parameters exist, which `PG*` variable feeds each,
//! and the merge "explicit parameter > service file > environment" (defaults come later, in
//! `resolve.rs`).
//!
//! Every libpq keyword is *understood* here so that a psql-style conninfo never fails with
//! tokio-postgres's bare "unknown option"; what each one does is decided by the code that reads it.

use super::conninfo::Pairs;
use super::env::{Env, non_empty};
use crate::report::failure::{ConnFailure, Expected, Unsupported};
use std::collections::HashMap;

/// Every keyword libpq (up to PostgreSQL 18) accepts, plus tokio-postgres's `keepalives_retries`
/// spelling of `keepalives_count`.
const KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "keepalives_retries",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "requiressl",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslkeylogfile",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "min_protocol_version",
    "max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "servicefile",
    "target_session_attrs",
    "load_balance_hosts",
    "scram_client_key",
    "scram_server_key",
    "oauth_issuer",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_scope",
];

/// libpq's environment variables and the keyword each one supplies when the URL leaves it unset
/// (the man page's ENVIRONMENT lists them from here).
pub(crate) const ENV_VARS: &[(&str, &str)] = &[
    ("PGHOST", "host"),
    ("PGHOSTADDR", "hostaddr"),
    ("PGPORT", "port"),
    ("PGDATABASE", "dbname"),
    ("PGUSER", "user"),
    ("PGPASSWORD", "password"),
    ("PGPASSFILE", "passfile"),
    ("PGREQUIREAUTH", "require_auth"),
    ("PGCHANNELBINDING", "channel_binding"),
    ("PGCONNECT_TIMEOUT", "connect_timeout"),
    ("PGCLIENTENCODING", "client_encoding"),
    ("PGOPTIONS", "options"),
    ("PGAPPNAME", "application_name"),
    ("PGGSSENCMODE", "gssencmode"),
    ("PGSSLMODE", "sslmode"),
    ("PGSSLNEGOTIATION", "sslnegotiation"),
    ("PGSSLCOMPRESSION", "sslcompression"),
    ("PGSSLCERT", "sslcert"),
    ("PGSSLKEY", "sslkey"),
    ("PGSSLCERTMODE", "sslcertmode"),
    ("PGSSLROOTCERT", "sslrootcert"),
    ("PGSSLCRL", "sslcrl"),
    ("PGSSLCRLDIR", "sslcrldir"),
    ("PGSSLSNI", "sslsni"),
    ("PGREQUIREPEER", "requirepeer"),
    ("PGSSLMINPROTOCOLVERSION", "ssl_min_protocol_version"),
    ("PGSSLMAXPROTOCOLVERSION", "ssl_max_protocol_version"),
    ("PGMINPROTOCOLVERSION", "min_protocol_version"),
    ("PGMAXPROTOCOLVERSION", "max_protocol_version"),
    ("PGKRBSRVNAME", "krbsrvname"),
    ("PGGSSLIB", "gsslib"),
    ("PGGSSDELEGATION", "gssdelegation"),
    ("PGSERVICE", "service"),
    ("PGSERVICEFILE", "servicefile"),
    ("PGTARGETSESSIONATTRS", "target_session_attrs"),
    ("PGLOADBALANCEHOSTS", "load_balance_hosts"),
];

/// Enumerated keywords whose empty value libpq refuses rather than taking the default.
const NO_EMPTY_VALUE: &[&str] = &[
    "sslmode",
    "target_session_attrs",
    "load_balance_hosts",
    "sslnegotiation",
    "channel_binding",
    "gssencmode",
];

pub(crate) use crate::report::failure::{Origin, UrlSource};

#[derive(Clone, Debug)]
pub(crate) struct Param {
    pub(crate) value: String,
    pub(crate) origin: Origin,
}

/// The merged parameters. Values may be empty: an explicit `host=''` still hides `PGHOST`, as in
/// libpq, and then means "default".
#[derive(Debug, Default)]
pub(crate) struct Params {
    map: HashMap<&'static str, Param>,
    /// Where the connection string came from.
    url_from: UrlSource,
}

impl Params {
    /// Validate the URL's keywords, then let the service named by `service`/`PGSERVICE` fill what
    /// the URL left unset, then the `PG*` variables (libpq's order).
    pub(crate) fn collect(
        url: Pairs,
        url_from: &UrlSource,
        env: &dyn Env,
    ) -> anyhow::Result<Params> {
        let mut map = HashMap::new();
        for (key, value) in url {
            let origin = Origin::Url(url_from.clone());
            let keyword = known_keyword(&key, &origin)?;
            map.insert(keyword, Param { value, origin });
        }
        let explicit = |key: &str, map: &HashMap<&'static str, Param>| {
            map.get(key)
                .map(|p: &Param| p.value.clone())
                .filter(|v| !v.is_empty())
        };
        let service = explicit("service", &map).or_else(|| non_empty(env, "PGSERVICE"));
        if let Some(name) = service {
            let servicefile = explicit("servicefile", &map);
            let found = super::service::lookup(&name, servicefile.as_deref(), env)?;
            for (key, value) in found {
                let origin = Origin::Service;
                let keyword = known_keyword(&key, &origin)?;
                map.entry(keyword).or_insert(Param { value, origin });
            }
        }
        for &(var, keyword) in ENV_VARS {
            if let Some(value) = env.var(var) {
                let origin = Origin::Env(var);
                map.entry(keyword).or_insert(Param { value, origin });
            }
        }
        Ok(Params {
            map,
            url_from: url_from.clone(),
        })
    }

    /// A non-empty value.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.map
            .get(key)
            .map(|p| p.value.as_str())
            .filter(|v| !v.is_empty())
    }

    /// Where the keyword's value came from (the connection string when unset, for messages).
    pub(crate) fn origin(&self, key: &str) -> Origin {
        self.map
            .get(key)
            .map_or_else(|| Origin::Url(self.url_from.clone()), |p| p.origin.clone())
    }

    /// A usage error about a keyword's value, naming the keyword and its source but not the value.
    pub(crate) fn invalid(&self, key: &str, expected: Expected) -> anyhow::Error {
        anyhow::Error::new(ConnFailure::Invalid {
            key: key.to_owned(),
            origin: self.origin(key),
            expected,
        })
    }

    /// A usage error for a keyword idemctl understands but cannot honour.
    pub(crate) fn unsupported(&self, key: &str, why: Unsupported) -> anyhow::Error {
        anyhow::Error::new(ConnFailure::Unsupported {
            key: key.to_owned(),
            origin: self.origin(key),
            why,
        })
    }

    /// A libpq integer (surrounding whitespace allowed, like libpq's strtol check).
    pub(crate) fn int(&self, key: &str) -> anyhow::Result<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| self.invalid(key, Expected::Integer)),
        }
    }

    /// A libpq boolean-ish integer flag such as `keepalives=0` or `sslsni=1`.
    pub(crate) fn flag(&self, key: &str) -> anyhow::Result<Option<bool>> {
        Ok(self.int(key)?.map(|n| n != 0))
    }

    /// One of a fixed set of values; the error lists them.
    pub(crate) fn choice<T: Copy>(
        &self,
        key: &str,
        choices: &[(&str, T)],
    ) -> anyhow::Result<Option<T>> {
        let names = || choices.iter().map(|(n, _)| (*n).to_owned()).collect();
        let Some(value) = self.get(key) else {
            // libpq refuses an empty value of these (`invalid sslmode value: ""`), from the
            // URL, a service file or an empty PG* variable alike.
            let given_empty = self.map.get(key).is_some_and(|p| p.value.is_empty());
            if given_empty && NO_EMPTY_VALUE.contains(&key) {
                return Err(anyhow::Error::new(ConnFailure::EmptyChoice {
                    key: key.to_owned(),
                    origin: self.origin(key),
                    choices: names(),
                }));
            }
            return Ok(None);
        };
        match choices.iter().find(|(name, _)| *name == value) {
            Some((_, t)) => Ok(Some(*t)),
            None => Err(self.invalid(key, Expected::OneOf(names()))),
        }
    }
}

/// Whether libpq knows `key` as a connection keyword.
pub(crate) fn is_keyword(key: &str) -> bool {
    KEYWORDS.contains(&key)
}

fn known_keyword(key: &str, origin: &Origin) -> anyhow::Result<&'static str> {
    if let Some(k) = KEYWORDS.iter().find(|k| **k == key) {
        return Ok(k);
    }
    // Only echo something that looks like a keyword: a mangled string could put password text here.
    let looks_like_keyword =
        key.len() <= 64 && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    Err(anyhow::Error::new(ConnFailure::UnknownOption {
        key: looks_like_keyword.then(|| key.to_owned()),
        origin: origin.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::Exit;

    fn env(vars: &[(&str, &str)]) -> HashMap<String, String> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_env_var_feeds_a_known_keyword() {
        for (_, keyword) in ENV_VARS {
            assert!(KEYWORDS.contains(keyword), "{keyword}");
        }
    }

    #[test]
    fn url_beats_env_and_empty_hides_env() {
        let url = vec![
            ("host".to_string(), String::new()),
            ("user".to_string(), "u".to_string()),
        ];
        let p = Params::collect(
            url,
            &UrlSource::Option,
            &env(&[("PGHOST", "h"), ("PGUSER", "e"), ("PGPORT", "1")]),
        )
        .expect("valid");
        assert_eq!(p.get("host"), None, "an explicit empty host hides PGHOST");
        assert_eq!(p.get("user"), Some("u"));
        assert_eq!(p.get("port"), Some("1"));
        assert_eq!(p.origin("port"), Origin::Env("PGPORT"));
    }

    #[test]
    fn empty_enumerated_values_are_refused_like_libpq() {
        for key in NO_EMPTY_VALUE {
            let p = Params::collect(
                vec![(key.to_string(), String::new())],
                &UrlSource::Option,
                &env(&[]),
            )
            .expect("collects");
            let err = p.choice(key, &[("a", ()), ("b", ())]).expect_err("refused");
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid {key} value: \"\" in --database-url; use one of a, b, or leave {key} out"
                )
            );
            assert_eq!(crate::exit::classify(&err), Exit::Usage);
        }
        let p = Params::collect(vec![], &UrlSource::Option, &env(&[("PGSSLMODE", "")]))
            .expect("collects");
        let err = p.choice("sslmode", &[("a", ())]).expect_err("refused");
        assert!(
            err.to_string().contains("environment variable PGSSLMODE"),
            "{err}"
        );
        // Others keep libpq's "empty means default" (ssl_min_protocol_version, for one).
        let p = Params::collect(
            vec![("ssl_min_protocol_version".into(), String::new())],
            &UrlSource::Option,
            &env(&[]),
        )
        .expect("collects");
        assert!(
            p.choice("ssl_min_protocol_version", &[("TLSv1.2", ())])
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn unknown_keyword_is_named_only_when_it_looks_like_one() {
        let err = Params::collect(
            vec![("foo".into(), "1".into())],
            &UrlSource::Option,
            &env(&[]),
        )
        .expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown connection option \"foo\" in --database-url; see the libpq connection parameters"
        );
        let err = Params::collect(
            vec![("p@ss word".into(), "1".into())],
            &UrlSource::Option,
            &env(&[]),
        )
        .expect_err("unknown");
        assert!(!err.to_string().contains("p@ss"));
        assert_eq!(crate::exit::classify(&err), Exit::Usage);
    }
}

//! The resolver: URL/conninfo parameters, `PG*` variables and libpq defaults merged into one
//! [`Target`] (driver config, TLS connector, timeouts, warnings), failing early on anything
//! malformed or unsupported.
//!
//! Keywords accepted without effect, because they cannot change what idemctl does:
//! `client_encoding` (the driver always uses UTF8, which idemctl needs), `krbsrvname`, `gsslib`,
//! `gssdelegation` (GSSAPI only; the driver has no GSSAPI, and a server demanding it fails with
//! its own message),
//! `max_protocol_version` (the driver speaks protocol 3.0, which every server accepts).

use super::attrs::{self, SessionAttrs};
use super::conninfo;
use super::env::{self, Env};
use super::hosts::{self, Endpoint};
use super::params::Params;
use super::pgpass;
use super::tls;
use super::{ConnectSettings, Liveness, SessionTimeouts, Target};
use crate::report::failure::{ConnFailure, ConnWarning, Unsupported};
use std::path::PathBuf;
use std::time::Duration;
use tokio_postgres::config::{ChannelBinding, LoadBalanceHosts, SslNegotiation};

/// Used when neither `--connect-timeout`, `connect_timeout` nor `PGCONNECT_TIMEOUT` says otherwise
/// (also for libpq's "0 = wait forever", which would let a cron job hang).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolve without printing; warnings stay in the returned target.
pub(crate) fn resolve_quietly(settings: &ConnectSettings, env: &dyn Env) -> anyhow::Result<Target> {
    resolve_pairs(settings, env, url_pairs(settings)?)
}

/// The same settings aimed at another server of the same cluster (a Citus worker named by the
/// coordinator's metadata): `host` and `port` replace those of the URL and the environment,
/// `hostaddr` is dropped, and the password file is read again for that host. User, database,
/// password given explicitly, TLS settings and timeouts stay as they are.
pub(crate) fn resolve_node_quietly(
    settings: &ConnectSettings,
    env: &dyn Env,
    host: &str,
    port: u16,
) -> anyhow::Result<Target> {
    let mut pairs = url_pairs(settings)?;
    pairs.retain(|(k, _)| !matches!(k.as_str(), "host" | "hostaddr" | "port"));
    pairs.push(("host".to_owned(), host.to_owned()));
    // An explicit empty value hides PGHOSTADDR, as in libpq.
    pairs.push(("hostaddr".to_owned(), String::new()));
    pairs.push(("port".to_owned(), port.to_string()));
    resolve_pairs(settings, env, pairs)
}

fn url_pairs(settings: &ConnectSettings) -> anyhow::Result<conninfo::Pairs> {
    Ok(match &settings.database_url {
        Some(url) => conninfo::tokenize(url).map_err(|error| {
            anyhow::Error::new(ConnFailure::BadUrl {
                from: settings.database_url_from.clone(),
                error,
            })
        })?,
        None => Vec::new(),
    })
}

fn resolve_pairs(
    settings: &ConnectSettings,
    env: &dyn Env,
    pairs: conninfo::Pairs,
) -> anyhow::Result<Target> {
    let params = Params::collect(pairs, &settings.database_url_from, env)?;
    reject_unsupported(&params)?;
    let endpoints = hosts::endpoints(&params)?;
    let user = match params.get("user") {
        Some(user) => user.to_string(),
        None => env::os_user(env).ok_or_else(|| {
            anyhow::Error::new(ConnFailure::NoOsUser {
                from: settings.database_url_from.clone(),
            })
        })?,
    };
    let dbname = params.get("dbname").unwrap_or(&user).to_string();
    let mut warnings = Vec::new();
    let password = password(&params, env, &endpoints, &user, &dbname, &mut warnings);
    let tls_plan = tls::plan(&params, env, hosts::all_unix(&endpoints))?;
    let tls = tls::connector(&tls_plan)?;
    let connect_timeout = connect_timeout(settings, &params)?;

    let mut config = tokio_postgres::Config::new();
    hosts::apply(&endpoints, &mut config);
    config
        .user(&user)
        .dbname(&dbname)
        .application_name(application_name(&params))
        .ssl_mode(tls_plan.driver_mode)
        .connect_timeout(connect_timeout);
    if let Some(password) = password {
        config.password(password);
    }
    if let Some(options) = params.get("options") {
        config.options(options);
    }
    let liveness = apply_tcp_options(&params, &mut config)?;
    let attrs = apply_session_options(&params, &tls_plan, &mut config)?;
    let require_auth = match params.get("require_auth") {
        Some(value) => Some(std::sync::Arc::new(
            super::auth::AuthRule::parse(value)
                .map_err(|why| params.unsupported("require_auth", Unsupported::RequireAuth(why)))?,
        )),
        None => None,
    };
    Ok(Target {
        config,
        endpoints,
        tls_plan,
        tls,
        connect_timeout,
        session: SessionTimeouts {
            statement: settings.statement_timeout,
            shorter_own_statement: !settings.statement_timeout_given,
            lock: settings.lock_timeout,
            idle_in_transaction: settings.idle_in_transaction_timeout,
            liveness,
        },
        attrs,
        require_auth,
        warnings,
    })
}

/// Keywords whose effect idemctl cannot provide; dropping them silently could weaken security or
/// connect somewhere else than intended.
fn reject_unsupported(params: &Params) -> anyhow::Result<()> {
    let refusals: [(&str, Unsupported); 4] = [
        ("requirepeer", Unsupported::RequirePeer),
        ("scram_client_key", Unsupported::ScramKeys),
        ("scram_server_key", Unsupported::ScramKeys),
        ("oauth_issuer", Unsupported::OAuth),
    ];
    for (key, why) in refusals {
        if params.get(key).is_some() {
            return Err(params.unsupported(key, why));
        }
    }
    for key in ["oauth_client_id", "oauth_client_secret", "oauth_scope"] {
        if params.get(key).is_some() {
            return Err(params.unsupported(key, Unsupported::OAuth));
        }
    }
    let off = ["0", "off", "false", "no"];
    if params.get("replication").is_some_and(|v| !off.contains(&v)) {
        return Err(params.unsupported("replication", Unsupported::Replication));
    }
    let versions = [("3.0", true), ("3.2", false), ("latest", false)];
    if params.choice("min_protocol_version", &versions)? == Some(false) {
        return Err(params.unsupported("min_protocol_version", Unsupported::ProtocolVersion));
    }
    params.choice("max_protocol_version", &versions)?;
    Ok(())
}

/// Explicit password (`password=`, URL userinfo, `PGPASSWORD`), else the password file. libpq
/// looks the file up per host; the driver holds one password, so the first host with a matching
/// line decides, and a warning tells when later hosts' lines disagree.
fn password(
    params: &Params,
    env: &dyn Env,
    endpoints: &[Endpoint],
    user: &str,
    dbname: &str,
    warnings: &mut Vec<ConnWarning>,
) -> Option<Vec<u8>> {
    if let Some(password) = params.get("password") {
        return Some(password.as_bytes().to_vec());
    }
    let path = match params.get("passfile") {
        Some(path) => PathBuf::from(path),
        None => env.home()?.join(".pgpass"),
    };
    let contents = pgpass::read(&path, warnings)?;
    let mut found = endpoints.iter().enumerate().map(|(i, e)| {
        let host = e.pgpass_host();
        let lookup = pgpass::Lookup {
            host: &host,
            port: e.port,
            dbname,
            user,
        };
        // Per-line warnings once, not once per host.
        let mut scratch = Vec::new();
        let sink = if i == 0 { &mut *warnings } else { &mut scratch };
        (e, pgpass::find(&contents, &path, lookup, sink))
    });
    let (first_host, chosen) = found.by_ref().find_map(|(e, pw)| pw.map(|pw| (e, pw)))?;
    if found.any(|(_, pw)| pw.is_some_and(|pw| pw != chosen)) {
        warnings.push(ConnWarning::PasswordsDifferPerHost {
            file: path.clone(),
            chosen: first_host.place(),
        });
    }
    Some(chosen)
}

/// The user's name (conninfo or `PGAPPNAME`), else `fallback_application_name`, else `idemctl`.
fn application_name(params: &Params) -> &str {
    params
        .get("application_name")
        .or_else(|| params.get("fallback_application_name"))
        .unwrap_or("idemctl")
}

/// `--connect-timeout`, else `connect_timeout`/`PGCONNECT_TIMEOUT` in seconds (libpq raises 1 to
/// 2), else 10 s.
fn connect_timeout(settings: &ConnectSettings, params: &Params) -> anyhow::Result<Duration> {
    if let Some(timeout) = settings.connect_timeout.filter(|t| !t.is_zero()) {
        return Ok(timeout);
    }
    Ok(match params.int("connect_timeout")? {
        Some(secs) if secs > 0 => Duration::from_secs(u64::try_from(secs.max(2)).unwrap_or(2)),
        _ => DEFAULT_CONNECT_TIMEOUT,
    })
}

/// Keepalive and TCP user timeout settings, with libpq's units (`tcp_user_timeout` is in
/// milliseconds; the driver's own parser would read seconds). What the conninfo leaves unset takes
/// [`Liveness::DEFAULT`] (libpq would leave the system's two hours): a cron job must notice a dead
/// path in seconds. The same values are asked of the server for its end of a direct connection.
fn apply_tcp_options(
    params: &Params,
    config: &mut tokio_postgres::Config,
) -> anyhow::Result<Liveness> {
    let positive = |key: &str| -> anyhow::Result<Option<u64>> {
        Ok(params
            .int(key)?
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0))
    };
    let mut live = Liveness::DEFAULT;
    if let Some(on) = params.flag("keepalives")? {
        live.keepalives = on;
    }
    if let Some(secs) = positive("keepalives_idle")? {
        live.idle = Duration::from_secs(secs);
    }
    if let Some(secs) = positive("keepalives_interval")? {
        live.interval = Duration::from_secs(secs);
    }
    for key in ["keepalives_count", "keepalives_retries"] {
        if let Some(count) = positive(key)? {
            live.count = u32::try_from(count).unwrap_or(u32::MAX);
        }
    }
    if let Some(ms) = positive("tcp_user_timeout")? {
        live.user_timeout = Duration::from_millis(ms);
    }
    config
        .keepalives(live.keepalives)
        .keepalives_idle(live.idle)
        .keepalives_interval(live.interval)
        .keepalives_retries(live.count)
        .tcp_user_timeout(live.user_timeout);
    Ok(live)
}

/// Options the driver has natively, and `target_session_attrs`, which idemctl's host loop judges
/// as libpq 14+ does (returned; see `attrs.rs`).
fn apply_session_options(
    params: &Params,
    tls_plan: &tls::TlsPlan,
    config: &mut tokio_postgres::Config,
) -> anyhow::Result<SessionAttrs> {
    let attrs = params
        .choice("target_session_attrs", attrs::CHOICES)?
        .unwrap_or_default();
    let binding = [
        ("disable", ChannelBinding::Disable),
        ("prefer", ChannelBinding::Prefer),
        ("require", ChannelBinding::Require),
    ];
    if let Some(binding) = params.choice("channel_binding", &binding)? {
        // libpq refuses this before logging in: nothing could bind the channel.
        if binding == ChannelBinding::Require && tls_plan.mode == tls::SslMode::Disable {
            return Err(
                params.unsupported("channel_binding", Unsupported::ChannelBindingWithoutTls)
            );
        }
        config.channel_binding(binding);
    }
    let balance = [
        ("disable", LoadBalanceHosts::Disable),
        ("random", LoadBalanceHosts::Random),
    ];
    if let Some(balance) = params.choice("load_balance_hosts", &balance)? {
        config.load_balance_hosts(balance);
    }
    apply_ssl_negotiation(tls_plan, config);
    Ok(attrs)
}

/// `sslnegotiation=direct` (checked against the sslmode in `tls::plan`): the driver skips the
/// SSLRequest and starts with the TLS handshake.
fn apply_ssl_negotiation(tls_plan: &tls::TlsPlan, config: &mut tokio_postgres::Config) {
    if tls_plan.direct {
        config.ssl_negotiation(SslNegotiation::Direct);
    }
}

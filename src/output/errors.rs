//! The words of the connection's and the config file's failures and warnings: `src/conn/` and
//! `src/config.rs` hand over what they found (a key, a file, where a value came from, the
//! library's own error text), and the line printed is written here. Passwords never reach this
//! module.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::report::failure::{
    ActionProblem, AttemptEnded, AttrsMismatch, AuthAsked, AuthRefusal, AuthRuleError,
    ConfigFailure, ConfigProblem, ConnFailure, ConnWarning, Expected, HostMismatch, Origin, Place,
    Reason, SyntaxError, TargetName, TlsFailure, Unsupported, UrlSource,
};

impl fmt::Display for UrlSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlSource::Option => f.write_str("--database-url"),
            UrlSource::Env(var) => f.write_str(var),
            UrlSource::ConfigFile(path) => f.write_str(&set_in_config_file("database_url", path)),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Url(from) => write!(f, "{from}"),
            Origin::Service => f.write_str("the connection service file"),
            Origin::Env(var) => write!(f, "environment variable {var}"),
        }
    }
}

impl fmt::Display for ConnFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            ConnFailure::BadUrl { .. }
            | ConnFailure::EmptyChoice { .. }
            | ConnFailure::UnknownOption { .. }
            | ConnFailure::NoOsUser { .. } => conninfo_refused(self),
            ConnFailure::Invalid {
                key,
                origin,
                expected,
            } => invalid_value(key, origin, expected),
            ConnFailure::Unsupported { key, origin, why } => unsupported_value(key, origin, why),
            ConnFailure::ServiceFileMissing { .. }
            | ConnFailure::ServiceUndefined { .. }
            | ConnFailure::ServiceFileUnreadable { .. }
            | ConnFailure::ServiceSyntax { .. }
            | ConnFailure::ServiceNested { .. } => service_file_refused(self),
            ConnFailure::KeyUnreadable { .. }
            | ConnFailure::KeyLoose { .. }
            | ConnFailure::KeyUnloadable { .. }
            | ConnFailure::CertificateWithoutKey
            | ConnFailure::CertificateUnreadable { .. }
            | ConnFailure::KeyEncrypted { .. }
            | ConnFailure::CertificateKeyMismatch { .. } => client_key_refused(self),
            ConnFailure::CannotConnect {
                target,
                reason,
                retried,
            } => connect_failed(target, reason, *retried),
            _ => tls_files_refused(self),
        };
        f.write_str(&text)
    }
}

impl fmt::Display for ConnWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&password_file_warning(self))
    }
}

impl fmt::Display for AuthRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&require_auth_refused(self))
    }
}

fn shown(path: &Path) -> std::path::Display<'_> {
    path.display()
}

/// A connection string that does not parse, names no known keyword, or leaves an enumerated one
/// empty.
pub(crate) fn conninfo_refused(failure: &ConnFailure) -> String {
    match failure {
        ConnFailure::BadUrl { from, error } => format!("invalid {from}: {error}"),
        ConnFailure::EmptyChoice {
            key,
            origin,
            choices,
        } => format!(
            "invalid {key} value: \"\" in {origin}; use one of {}, or leave {key} out",
            choices.join(", ")
        ),
        ConnFailure::UnknownOption { key, origin } => {
            let named = match key {
                Some(key) => format!("unknown connection option \"{key}\""),
                None => "unknown connection option (not a valid keyword)".to_owned(),
            };
            format!("{named} in {origin}; see the libpq connection parameters")
        }
        ConnFailure::NoOsUser { from } => no_os_user(from),
        other => other.to_string(),
    }
}

/// No `user` in the connection string, and neither the environment nor the passwd file names the
/// OS user.
pub(crate) fn no_os_user(from: &UrlSource) -> String {
    format!("cannot determine the OS user name; set PGUSER or user= in {from}")
}

/// A keyword's value of the wrong form, naming the keyword and its source but not the value.
pub(crate) fn invalid_value(key: &str, origin: &Origin, expected: &Expected) -> String {
    let expected = match expected {
        Expected::Integer => "an integer".to_owned(),
        Expected::OneOf(names) => format!("one of {}", names.join(", ")),
        Expected::VersionNotAboveMax => "a version not above ssl_max_protocol_version".to_owned(),
        Expected::AddressPerHostName(n) => format!("as many addresses as host names ({n})"),
        Expected::AddressForEveryHost => "an address for every host, or no hostaddr".to_owned(),
        Expected::NumericAddresses => "numeric IP addresses".to_owned(),
        Expected::PortNumbers => "port numbers from 1 to 65535".to_owned(),
        Expected::PortPerHost { hosts, ports } => {
            format!("one port or one per host ({hosts} hosts, {ports} ports)")
        }
    };
    format!("invalid {key} in {origin}: expected {expected}")
}

/// A keyword idemctl understands but cannot honour, and what to use instead.
pub(crate) fn unsupported_value(key: &str, origin: &Origin, why: &Unsupported) -> String {
    let why = match why {
        Unsupported::GssEncryption => {
            "GSSAPI encryption is not supported; use sslmode for encryption".to_owned()
        }
        Unsupported::SslCertModeRequire => {
            "\"require\" is not supported; use allow (the default) or disable".to_owned()
        }
        Unsupported::SystemRootsNeedVerifyFull(mode) => format!(
            "weak sslmode \"{mode}\" may not be used with sslrootcert=system (use \"verify-full\")"
        ),
        Unsupported::DirectNeedsStrongMode(mode) => format!(
            "weak sslmode \"{mode}\" may not be used with sslnegotiation=direct (use \"require\", \"verify-ca\", or \"verify-full\")"
        ),
        Unsupported::OldTlsVersions => "TLS versions below TLSv1.2 are not supported".to_owned(),
        Unsupported::AbstractSocket => {
            "abstract Unix sockets (@name) are not supported; use a socket directory".to_owned()
        }
        Unsupported::RequirePeer => {
            "checking the socket peer's user name is not supported; remove it".to_owned()
        }
        Unsupported::ScramKeys => {
            "SCRAM key pass-through is not supported; use a password".to_owned()
        }
        Unsupported::OAuth => "OAuth authentication is not supported".to_owned(),
        Unsupported::Replication => "replication connections are not supported".to_owned(),
        Unsupported::ProtocolVersion => "only protocol 3.0 is supported".to_owned(),
        Unsupported::ChannelBindingWithoutTls => {
            "channel binding required, but SSL not in use; use sslmode=require (or verify-ca, \
             verify-full), or remove channel_binding=require"
                .to_owned()
        }
        Unsupported::RequireAuth(e) => require_auth_refused(e),
    };
    format!("{key} in {origin}: {why}")
}

/// libpq's refusal of a `require_auth` list, in libpq's words.
pub(crate) fn require_auth_refused(e: &AuthRuleError) -> String {
    match e {
        AuthRuleError::UnknownMethod(name) => format!("invalid require_auth value: \"{name}\""),
        AuthRuleError::NegatedAmongPlain(item) => format!(
            "negative require_auth method \"{item}\" cannot be mixed with non-negative methods"
        ),
        AuthRuleError::PlainAmongNegated(item) => {
            format!("require_auth method \"{item}\" cannot be mixed with negative methods")
        }
        AuthRuleError::Repeated(item) => {
            format!("require_auth method \"{item}\" is specified more than once")
        }
    }
}

/// A connection service file that is missing, unreadable, malformed or lacks the service.
pub(crate) fn service_file_refused(failure: &ConnFailure) -> String {
    match failure {
        ConnFailure::ServiceFileMissing { file } => {
            format!("service file \"{}\" not found", shown(file))
        }
        ConnFailure::ServiceUndefined { name } => {
            format!("definition of service \"{name}\" not found")
        }
        ConnFailure::ServiceFileUnreadable { file, error } => {
            format!("service file \"{}\" not found: {error}", shown(file))
        }
        ConnFailure::ServiceSyntax { file, line } => {
            format!(
                "syntax error in service file \"{}\", line {line}",
                shown(file)
            )
        }
        ConnFailure::ServiceNested { file, line } => format!(
            "nested service specifications not supported in service file \"{}\", line {line}",
            shown(file)
        ),
        other => other.to_string(),
    }
}

/// A client certificate or its private key that cannot be used (libpq's rules and words).
pub(crate) fn client_key_refused(failure: &ConnFailure) -> String {
    match failure {
        ConnFailure::KeyUnreadable { file, error } => {
            format!("cannot read private key file \"{}\": {error}", shown(file))
        }
        ConnFailure::KeyLoose { file } => format!(
            "private key file \"{}\" has group or world access; permissions should be u=rw (0600) \
             or less if owned by the current user, or u=rw,g=r (0640) or less if owned by root",
            shown(file)
        ),
        ConnFailure::KeyUnloadable { file, error } => {
            format!("cannot load private key file \"{}\": {error}", shown(file))
        }
        ConnFailure::KeyEncrypted { file } => format!(
            "private key file \"{}\" is encrypted, and idemctl cannot decrypt it (sslpassword is \
             not supported): use an unencrypted key readable only by you (mode 0600)",
            shown(file)
        ),
        ConnFailure::CertificateWithoutKey => {
            "certificate present, but no private key file (set sslkey)".to_owned()
        }
        ConnFailure::CertificateUnreadable { file, error } => {
            format!(
                "could not read certificate file \"{}\": {error}",
                shown(file)
            )
        }
        ConnFailure::CertificateKeyMismatch { cert, key } => format!(
            "certificate \"{}\" does not match private key file \"{}\"",
            shown(cert),
            shown(key)
        ),
        other => other.to_string(),
    }
}

/// Root certificates and revocation lists that cannot be found or loaded, and OpenSSL or the pool
/// refusing to be set up.
pub(crate) fn tls_files_refused(failure: &ConnFailure) -> String {
    match failure {
        ConnFailure::RootFileMissing { file } => format!(
            "root certificate file \"{}\" does not exist; either provide the file, use the \
             system's trusted roots (sslrootcert=system), or change sslmode",
            shown(file)
        ),
        ConnFailure::RootFileUnreadable { file, error } => {
            format!(
                "could not read root certificate file \"{}\": {error}",
                shown(file)
            )
        }
        ConnFailure::CrlFileUnloadable { file, error } => format!(
            "could not load SSL certificate revocation list file \"{}\": {error}",
            shown(file)
        ),
        ConnFailure::CrlDirUnusable { dir, error } => {
            format!("cannot use sslcrldir \"{}\": {error}", shown(dir))
        }
        // OpenSSL refuses a context when its configuration breaks it (a provider that cannot be
        // loaded leaves no ciphers); otherwise only when it cannot allocate.
        ConnFailure::TlsSetup { error } => format!(
            "cannot set up TLS: {error}; check the OpenSSL configuration (OPENSSL_CONF, or the \
             system's openssl.cnf)"
        ),
        ConnFailure::PoolUnbuilt { error } => format!("cannot build the connection pool: {error}"),
        other => other.to_string(),
    }
}

/// The last attempt's reason, and how long idemctl kept trying when it tried more than once.
pub(crate) fn connect_failed(
    target: &TargetName,
    reason: &Reason,
    retried: Option<Duration>,
) -> String {
    let retried = retried
        .map(|d| format!(" (retried for {})", rounded(d)))
        .unwrap_or_default();
    format!(
        "cannot connect to {}: {}{retried}",
        target_name(target),
        connect_reason(reason)
    )
}

/// `user "app" at host "db1" port 5432, database "app"` (quoted with escapes, so odd names cannot
/// garble a log line).
pub(crate) fn target_name(target: &TargetName) -> String {
    let places: Vec<String> = target.places.iter().map(place).collect();
    format!(
        "user {:?} at {}, database {:?}",
        target.user,
        places.join(" or "),
        target.dbname
    )
}

fn place(place: &Place) -> String {
    match place {
        Place::Socket { dir, port } => {
            format!(
                "socket directory {:?} port {port}",
                dir.display().to_string()
            )
        }
        Place::Host {
            name,
            addr: Some(addr),
            port,
        } => format!("host {name:?} (address {addr}) port {port}"),
        Place::Host { name, port, .. } => format!("host {name:?} port {port}"),
    }
}

/// Why an attempt failed, and what to change where the fix is known.
pub(crate) fn connect_reason(reason: &Reason) -> String {
    match reason {
        Reason::TimedOutAfter(after) => format!("timed out after {}", rounded(*after)),
        Reason::TimedOut => "timed out".to_owned(),
        Reason::SessionSetup(why) => {
            format!("setting session timeouts failed: {}", connect_reason(why))
        }
        Reason::Server(message) | Reason::Other(message) => message.clone(),
        Reason::PoolerParameter(message) => format!(
            "{message}; the connection pooler does not accept it: remove it (options=, \
             PGOPTIONS), or list it in the pooler's ignore_startup_parameters"
        ),
        Reason::AuthRefused(refusal) => format!(
            "{refusal}; allow the server's method in require_auth, or change the method the \
             server's pg_hba.conf asks for"
        ),
        Reason::ClosedAtSslRequest => {
            "server closed the connection unexpectedly before answering the SSLRequest; if it \
             expects TLS from the first byte (a TLS-terminating proxy, or a server set up for \
             direct TLS), connect with sslnegotiation=direct and sslmode=require (or verify-ca, \
             verify-full)"
                .to_owned()
        }
        Reason::Refused => "connection refused".to_owned(),
        Reason::NoSocket => "no server socket found (is the server running?)".to_owned(),
        Reason::Reset => "connection reset by the server".to_owned(),
        Reason::PasswordMissing => "the server asks for a password and none was given (set \
                                    PGPASSWORD, add a ~/.pgpass line, or put it in the URL)"
            .to_owned(),
    }
}

/// `10s` rather than `10s 3ms 120us`.
fn rounded(elapsed: Duration) -> humantime::FormattedDuration {
    let step = if elapsed < Duration::from_secs(1) {
        Duration::from_millis(elapsed.as_millis().try_into().unwrap_or(u64::MAX))
    } else {
        Duration::from_secs(elapsed.as_secs() + u64::from(elapsed.subsec_millis() >= 500))
    };
    humantime::format_duration(step)
}

/// A password file skipped, or a line of it, as the warning says.
pub(crate) fn password_file_warning(warning: &ConnWarning) -> String {
    match warning {
        ConnWarning::PasswordFileUnreadable { file, error } => {
            format!(
                "cannot read password file \"{}\": {error}; ignoring it",
                shown(file)
            )
        }
        ConnWarning::PasswordFileNotPlain { file } => {
            format!(
                "password file \"{}\" is not a plain file; ignoring it",
                shown(file)
            )
        }
        ConnWarning::PasswordFileLoose { file } => format!(
            "password file \"{}\" has group or world access; permissions should be u=rw (0600) or \
             less; ignoring it",
            shown(file)
        ),
        ConnWarning::PasswordFileShortLine { file, line } => format!(
            "password file \"{}\" line {line}: fewer than 5 colon-separated fields; line skipped",
            shown(file)
        ),
        ConnWarning::PasswordsDifferPerHost { file, chosen } => format!(
            "password file \"{}\" has different passwords for different hosts; using the one for {}",
            shown(file),
            place(chosen)
        ),
    }
}

impl fmt::Display for ConfigFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            ConfigFailure::Key { path, key, problem } => config_key_refused(path, key, problem),
            other => config_file_refused(other),
        };
        f.write_str(&text)
    }
}

/// A config file that cannot be read or parsed, or maps several profiles with none chosen.
pub(crate) fn config_file_refused(failure: &ConfigFailure) -> String {
    match failure {
        ConfigFailure::Unreadable { path, error } => {
            format!("cannot read config file {path}: {error}; check --config (or IDEMCTL_CONFIG)")
        }
        ConfigFailure::Syntax {
            path,
            line,
            message,
        } => {
            let at = line.map_or_else(String::new, |l| format!("line {l}: "));
            format!("config file {path}: {at}{message}; docs/profiles.md lists the keys")
        }
        ConfigFailure::SeveralMappings { path, names } => format!(
            "config file {path} maps several profiles ({}); choose one with --profile, \
             IDEMCTL_PROFILE or profile = \"NAME\" in the file",
            names.join(", ")
        ),
        ConfigFailure::Key { path, key, problem } => config_key_refused(path, key, problem),
    }
}

/// A config file's key whose value idemctl refuses, and what to write instead.
pub(crate) fn config_key_refused(path: &str, key: &str, problem: &ConfigProblem) -> String {
    let what = match problem {
        ConfigProblem::UrlAndService => {
            "database_url and service are both set; keep one".to_owned()
        }
        ConfigProblem::ServiceName => {
            "expected the name of a section of the service file, without blanks or quotes"
                .to_owned()
        }
        ConfigProblem::Parser(words) => words.clone(),
        ConfigProblem::Predicate(error) => format!(
            "{error}; write column IS [NOT] NULL, column = 'text' or 42, column [NOT] IN ('a', \
             'b'), joined by AND, OR, NOT and parentheses"
        ),
        ConfigProblem::Ttl { given, error } => format!("{given:?} {error}"),
        ConfigProblem::NoSuchProfile { name, builtin } => format!(
            "no profile {name}: expected {} or a [profiles.NAME] section of the file",
            builtin.join(", ")
        ),
        ConfigProblem::NoScopeColumns => "expected a column name or a list of them (leave tenant \
                                          out for a table without one)"
            .to_owned(),
        ConfigProblem::ColumnTwice(name) => format!("column {name} is listed twice"),
        ConfigProblem::ColumnName => "expected a column name (1 to 63 bytes, no control \
                                      characters), as the catalog spells it"
            .to_owned(),
        ConfigProblem::MappingName { builtin } => format!(
            "a mapping's name is letters, digits, - and _, and not a built-in profile ({})",
            builtin.join(", ")
        ),
        ConfigProblem::NoInFlightValues => {
            "a state column needs values = [...], the states that mean in flight".to_owned()
        }
        ConfigProblem::NoDoneValues => "a state column needs done = [...], the states that mean \
                                        finished (evict removes expired keys in them)"
            .to_owned(),
        ConfigProblem::StateInBoth(state) => format!(
            "state {state:?} is listed both in values (in flight) and in done; a key in it would \
             be evicted while in flight: list it in one of them"
        ),
        ConfigProblem::InFlightMissing => "give predicate = \"...\", or column = \"...\" with \
                                           values = [...] (in flight) and done = [...] (finished)"
            .to_owned(),
        ConfigProblem::InFlightBoth => "give either predicate = \"...\" or column = \"...\" with \
                                        values and done, not both"
            .to_owned(),
        ConfigProblem::ActionTwice => "an action is listed twice".to_owned(),
        ConfigProblem::Action(why) => mapping_action_refused(*why),
    };
    format!("config file {path}: {key}: {what}")
}

/// Why a mapping cannot allow a reclaim action: it needs columns to write, and what it writes must
/// end the key's in-flight state.
pub(crate) fn mapping_action_refused(why: ActionProblem) -> String {
    match why {
        ActionProblem::NoInFlightMarker => {
            "reclaim acts on keys stuck in flight, and the mapping \
            has no in_flight marker (no key is ever in flight): drop actions, or map in_flight"
        }
        ActionProblem::FailWithoutResponse => {
            "fail stores an error response: map response_status and response_body, or drop fail"
        }
        ActionProblem::FailLeavesInFlight => {
            "fail writes the response columns, which the \
            in-flight predicate does not read, so a failed key would stay in flight; make the \
            predicate read response_status or response_body, or drop fail"
        }
        ActionProblem::ReleaseWithoutLock => {
            "release clears the lock time: map locked_at, or drop release"
        }
        ActionProblem::ReleaseLeavesInFlight => {
            "release clears locked_at, which must end the \
            key's in-flight state: use an in-flight predicate that reads locked_at (e.g. ... AND \
            locked_at IS NOT NULL), or drop release"
        }
    }
    .to_owned()
}

/// Where a setting was read from when the config file gave it: `ttl in config file idemctl.toml`.
pub(crate) fn set_in_config_file(key: &str, path: &str) -> String {
    format!("{key} in config file {path}")
}

/// Where a mapping of the config file is defined, for the profile's origin.
pub(crate) fn mapping_origin(path: &str, mapping: &str) -> String {
    format!("config file {path}, [profiles.{mapping}]")
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&tls_failed(self))
    }
}

/// A TLS session refused or failed (libpq's words where it has them).
pub(crate) fn tls_failed(failure: &TlsFailure) -> String {
    match failure {
        TlsFailure::HostMismatch(m) => format!(
            "{}; connect with a host name the certificate names, or use sslmode=verify-ca",
            host_mismatch(m)
        ),
        TlsFailure::NoAlpn => {
            "direct SSL connection was established without ALPN protocol negotiation extension"
                .to_owned()
        }
        TlsFailure::UnexpectedAlpn => {
            "SSL connection was established with unexpected ALPN protocol".to_owned()
        }
        TlsFailure::VerifyFailed {
            reason,
            issuer_hint,
        } => {
            let hint = if *issuer_hint {
                "; sslrootcert (or ~/.postgresql/root.crt) must hold the root certificate that \
                 signed the server's certificate"
            } else {
                ""
            };
            format!("certificate verify failed: {reason}{hint}")
        }
        TlsFailure::Handshake { io } => format!("TLS handshake failed: {io}"),
        TlsFailure::ClosedInHandshake => {
            "the server closed the connection during the TLS handshake".to_owned()
        }
        TlsFailure::OpenSsl(reasons) => format!("TLS error: {reasons}"),
    }
}

/// The server certificate's names against the host (libpq's words).
pub(crate) fn host_mismatch(m: &HostMismatch) -> String {
    match m {
        HostMismatch::NoName => {
            "could not get server's host name from server certificate".to_owned()
        }
        HostMismatch::One { name, host } => {
            format!("server certificate for \"{name}\" does not match host name \"{host}\"")
        }
        HostMismatch::Several {
            first,
            others,
            host,
        } => format!(
            "server certificate for \"{first}\" (and {others} other name{}) does not match host \
             name \"{host}\"",
            if *others == 1 { "" } else { "s" }
        ),
    }
}

impl fmt::Display for AttrsMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&session_attrs_mismatch(*self))
    }
}

/// A server skipped because its session does not fit `target_session_attrs`, and what to change.
pub(crate) fn session_attrs_mismatch(m: AttrsMismatch) -> String {
    let (reason, attrs, fix) = match m {
        AttrsMismatch::ReadOnly(attrs) => (
            "session is read-only",
            attrs,
            "list a writable server, connect as a role without default_transaction_read_only, or \
             change target_session_attrs",
        ),
        AttrsMismatch::NotReadOnly(attrs) => (
            "session is not read-only",
            attrs,
            "list a standby (or a read-only role's server), or change target_session_attrs",
        ),
        AttrsMismatch::HotStandby(attrs) => (
            "server is in hot standby mode",
            attrs,
            "list the primary among the hosts, or change target_session_attrs",
        ),
        AttrsMismatch::NotHotStandby(attrs) => (
            "server is not in hot standby mode",
            attrs,
            "list a standby among the hosts, or use target_session_attrs=prefer-standby",
        ),
        AttrsMismatch::Unknown => {
            return "the server did not say whether it is a standby; check target_session_attrs"
                .to_owned();
        }
    };
    format!("{reason} (target_session_attrs={attrs}): {fix}")
}

impl fmt::Display for AuthRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&auth_refused(self))
    }
}

/// The server asked for a method `require_auth` does not allow (libpq's words).
pub(crate) fn auth_refused(r: &AuthRefusal) -> String {
    let asked = match r.asked {
        AuthAsked::Incomplete => "server did not complete authentication",
        AuthAsked::Cleartext => "server requested a cleartext password",
        AuthAsked::Md5 => "server requested a hashed password",
        AuthAsked::Gss => "server requested GSSAPI authentication",
        AuthAsked::Sspi => "server requested SSPI authentication",
        AuthAsked::Sasl => "server requested SASL authentication",
        AuthAsked::Unknown => "server requested an unknown authentication type",
    };
    format!(
        "authentication method requirement \"{}\" failed: {asked}",
        r.rule
    )
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&url_syntax(*self))
    }
}

/// What is malformed in a connection string, and where (never the text: it may hold a password).
pub(crate) fn url_syntax(e: SyntaxError) -> String {
    match e {
        SyntaxError::MissingEquals { position } => {
            format!("missing \"=\" after a keyword at character {position}")
        }
        SyntaxError::EmptyKeyword { position } => {
            format!("a value without a keyword at character {position}")
        }
        SyntaxError::UnterminatedQuote => "unterminated quoted string".to_owned(),
        SyntaxError::UnsupportedScheme => {
            "unsupported URI scheme (use postgresql:// or postgres://)".to_owned()
        }
        SyntaxError::BadPercentEncoding => "invalid percent-encoding in the URI".to_owned(),
        SyntaxError::PercentEncodedNul => "forbidden %00 in the URI".to_owned(),
        SyntaxError::NotUtf8 => "a percent-encoded part of the URI is not valid UTF-8".to_owned(),
        SyntaxError::UnterminatedIpv6 => "missing \"]\" after an IPv6 host address".to_owned(),
        SyntaxError::EmptyIpv6 => "empty IPv6 host address \"[]\"".to_owned(),
        SyntaxError::UnexpectedAfterIpv6 => {
            "unexpected character after an IPv6 host address".to_owned()
        }
        SyntaxError::QueryParamWithoutValue => {
            "a URI query parameter without \"=\" (use key=value)".to_owned()
        }
    }
}

impl fmt::Display for AttemptEnded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttemptEnded::NoHost => "no host to connect to",
            AttemptEnded::TimedOut => "connection timed out",
            AttemptEnded::Closed => "the server closed the connection",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_named_by_its_user_hosts_and_database_without_the_password() {
        let name = |places| TargetName {
            user: "app".to_owned(),
            places,
            dbname: "app".to_owned(),
        };
        let host = |name: &str, addr: Option<&str>| Place::Host {
            name: name.to_owned(),
            addr: addr.map(|a| a.parse().unwrap()),
            port: 5432,
        };
        assert_eq!(
            target_name(&name(vec![
                host("db1", Some("10.0.0.1")),
                host("10.0.0.2", None)
            ])),
            "user \"app\" at host \"db1\" (address 10.0.0.1) port 5432 or host \"10.0.0.2\" port 5432, database \"app\""
        );
        let socket = Place::Socket {
            dir: "/srv/pg".into(),
            port: 5432,
        };
        assert_eq!(
            target_name(&name(vec![socket])),
            "user \"app\" at socket directory \"/srv/pg\" port 5432, database \"app\""
        );
    }
}

//! What went wrong while resolving a connection or reading the config file, as data: the key, the
//! file, the source of a value, the library's own error text. `src/conn/` and `src/config.rs`
//! build these; `src/output/errors.rs` words them (their `Display`), and each names its exit code.

use std::path::PathBuf;
use std::time::Duration;

use crate::exit::Exit;

/// Where the connection string came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum UrlSource {
    /// `-d/--database-url`.
    #[default]
    Option,
    /// An environment variable (`IDEMCTL_DATABASE_URL`, `DATABASE_URL`).
    Env(&'static str),
    /// `database_url` in the config file at this path.
    ConfigFile(String),
}

/// Where a connection keyword's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The connection string, from where it was given.
    Url(UrlSource),
    /// A connection service file's section.
    Service,
    Env(&'static str),
}

/// What a keyword's value should have been.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expected {
    Integer,
    OneOf(Vec<String>),
    /// `ssl_min_protocol_version` above the maximum.
    VersionNotAboveMax,
    /// `hostaddr` list of another length than `host`'s.
    AddressPerHostName(usize),
    AddressForEveryHost,
    NumericAddresses,
    PortNumbers,
    PortPerHost {
        hosts: usize,
        ports: usize,
    },
}

/// Why a keyword idemctl understands cannot be honoured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unsupported {
    GssEncryption,
    SslCertModeRequire,
    /// A weak sslmode (named) with `sslrootcert=system`.
    SystemRootsNeedVerifyFull(&'static str),
    /// A weak sslmode (named) with `sslnegotiation=direct`.
    DirectNeedsStrongMode(&'static str),
    OldTlsVersions,
    AbstractSocket,
    RequirePeer,
    ScramKeys,
    OAuth,
    Replication,
    ProtocolVersion,
    ChannelBindingWithoutTls,
    RequireAuth(AuthRuleError),
}

/// libpq's refusals of a `require_auth` list, with the item as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AuthRuleError {
    UnknownMethod(String),
    NegatedAmongPlain(String),
    PlainAmongNegated(String),
    Repeated(String),
}

/// A connection that could not be described, built or opened. Passwords are never held here.
#[derive(Debug)]
pub(crate) enum ConnFailure {
    /// The connection string does not parse (the parser's words, which never echo a password).
    BadUrl {
        from: UrlSource,
        error: SyntaxError,
    },
    Invalid {
        key: String,
        origin: Origin,
        expected: Expected,
    },
    Unsupported {
        key: String,
        origin: Origin,
        why: Unsupported,
    },
    /// An enumerated keyword given an empty value.
    EmptyChoice {
        key: String,
        origin: Origin,
        choices: Vec<String>,
    },
    /// An unknown keyword, named only when it looks like one (a mangled string could hold a
    /// password).
    UnknownOption {
        key: Option<String>,
        origin: Origin,
    },
    /// No `user` given and the OS user's name unknown.
    NoOsUser {
        /// Where a connection string would come from.
        from: UrlSource,
    },
    ServiceFileMissing {
        file: PathBuf,
    },
    ServiceUndefined {
        name: String,
    },
    ServiceFileUnreadable {
        file: PathBuf,
        error: String,
    },
    ServiceSyntax {
        file: PathBuf,
        line: usize,
    },
    ServiceNested {
        file: PathBuf,
        line: usize,
    },
    RootFileMissing {
        file: PathBuf,
    },
    CertificateWithoutKey,
    /// OpenSSL refused to set up a context, the system roots or the CRL store (its words): only
    /// when it cannot allocate.
    TlsSetup {
        error: String,
    },
    CertificateUnreadable {
        file: PathBuf,
        error: String,
    },
    CertificateKeyMismatch {
        cert: PathBuf,
        key: PathBuf,
    },
    RootFileUnreadable {
        file: PathBuf,
        error: String,
    },
    KeyUnreadable {
        file: PathBuf,
        error: String,
    },
    KeyLoose {
        file: PathBuf,
    },
    KeyUnloadable {
        file: PathBuf,
        error: String,
    },
    /// An encrypted client key: idemctl never asks for its passphrase.
    KeyEncrypted {
        file: PathBuf,
    },
    CrlFileUnloadable {
        file: PathBuf,
        error: String,
    },
    CrlDirUnusable {
        dir: PathBuf,
        error: String,
    },
    PoolUnbuilt {
        error: String,
    },
    /// The last attempt's reason; `retried` the time spent when there was more than one.
    CannotConnect {
        target: TargetName,
        reason: Reason,
        retried: Option<Duration>,
    },
}

/// Where idemctl connects, without the password: the user, every host tried, the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TargetName {
    pub(crate) user: String,
    pub(crate) places: Vec<Place>,
    pub(crate) dbname: String,
}

/// One host of a connection string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Socket {
        dir: PathBuf,
        port: u16,
    },
    /// A host name, with the address it was given when that differs from the name.
    Host {
        name: String,
        addr: Option<std::net::IpAddr>,
        port: u16,
    },
}

/// Why an attempt to connect failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    TimedOutAfter(Duration),
    TimedOut,
    /// The session's settings could not be applied after the login.
    SessionSetup(Box<Reason>),
    /// The server's own message.
    Server(String),
    /// A pooler's refusal of a startup parameter it does not pass on (its message).
    PoolerParameter(String),
    /// `require_auth` refused the server's method (the refusal as said).
    AuthRefused(String),
    ClosedAtSslRequest,
    Refused,
    NoSocket,
    Reset,
    PasswordMissing,
    /// The driver's or the TLS layer's own text.
    Other(String),
}

impl ConnFailure {
    /// The documented exit code of the failure.
    pub(crate) fn exit(&self) -> Exit {
        match self {
            ConnFailure::PoolUnbuilt { .. } => Exit::Internal,
            ConnFailure::CannotConnect { .. } => Exit::CannotConnect,
            _ => Exit::Usage,
        }
    }
}

impl std::error::Error for ConnFailure {}

/// A password file skipped or a line of it ignored; the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnWarning {
    PasswordFileUnreadable { file: PathBuf, error: String },
    PasswordFileNotPlain { file: PathBuf },
    PasswordFileLoose { file: PathBuf },
    PasswordFileShortLine { file: PathBuf, line: usize },
    PasswordsDifferPerHost { file: PathBuf, chosen: Place },
}

/// A config file that cannot be read or holds a value idemctl refuses; every one is a usage error.
#[derive(Debug)]
pub(crate) enum ConfigFailure {
    Unreadable {
        path: String,
        error: String,
    },
    /// TOML the parser refused (its message, on one line), at a line when it said where.
    Syntax {
        path: String,
        line: Option<usize>,
        message: String,
    },
    /// A key's value refused.
    Key {
        path: String,
        key: String,
        problem: ConfigProblem,
    },
    /// Several `[profiles.NAME]` sections and none chosen.
    SeveralMappings {
        path: String,
        names: Vec<String>,
    },
}

impl std::error::Error for ConfigFailure {}

/// What is wrong with one key of a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConfigProblem {
    UrlAndService,
    ServiceName,
    /// The flag parser's own words for a table name, a duration or a time zone.
    Parser(String),
    Ttl {
        given: String,
        error: String,
    },
    NoSuchProfile {
        name: String,
        builtin: Vec<&'static str>,
    },
    NoScopeColumns,
    ColumnTwice(String),
    ColumnName,
    MappingName {
        builtin: Vec<&'static str>,
    },
    /// The in-flight predicate's parser's words.
    Predicate(String),
    NoInFlightValues,
    NoDoneValues,
    StateInBoth(String),
    InFlightMissing,
    InFlightBoth,
    ActionTwice,
    Action(ActionProblem),
}

/// Why a mapping cannot allow a reclaim action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ActionProblem {
    NoInFlightMarker,
    FailWithoutResponse,
    FailLeavesInFlight,
    ReleaseWithoutLock,
    ReleaseLeavesInFlight,
}

/// What a command was doing when an error came, as the context of the error chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    OpenExtraWorker,
    ReachShards,
    SetUpEvictSession,
    MakeDeletesDurable,
    FindNextRange,
    MeasureRoundTrip,
    CountInProgressInRange,
    CountReferenced,
    CountTooYoung,
    /// A batch whose connection was lost: its end is unknown.
    BatchLost,
    BatchRolledBack,
    EncodePlan,
    SetUpReclaimSession,
    AskConfirmation,
    ReadConfirmation,
    ListenForSigterm,
    ListenForSigint,
    /// Start the runtime every command runs on.
    StartRuntime,
    SetUpTerminal,
    DrawLiveView,
}

impl std::error::Error for Step {}

/// Why a TLS session was refused or failed, in the handshake or just after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TlsFailure {
    HostMismatch(HostMismatch),
    /// Direct TLS without the ALPN protocol, or with another one.
    NoAlpn,
    UnexpectedAlpn,
    /// OpenSSL's verify result; `issuer_hint` when the roots lack the signer.
    VerifyFailed {
        reason: String,
        issuer_hint: bool,
    },
    Handshake {
        io: String,
    },
    ClosedInHandshake,
    /// OpenSSL's reasons (or the whole stack when it gave none).
    OpenSsl(String),
}

/// The names a server certificate holds that do not match the host connected to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostMismatch {
    /// A certificate that names no host at all.
    NoName,
    One {
        name: String,
        host: String,
    },
    Several {
        first: String,
        others: usize,
        host: String,
    },
}

/// A server whose session does not fit `target_session_attrs` (its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttrsMismatch {
    ReadOnly(&'static str),
    NotReadOnly(&'static str),
    HotStandby(&'static str),
    NotHotStandby(&'static str),
    /// The server did not say whether it is a standby.
    Unknown,
}

/// What the server asked for that `require_auth` (its text) does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuthRefusal {
    pub(crate) rule: String,
    pub(crate) asked: AuthAsked,
}

/// An authentication request of the server, as libpq names it in a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthAsked {
    Incomplete,
    Cleartext,
    Md5,
    Gss,
    Sspi,
    Sasl,
    Unknown,
}

impl std::error::Error for AuthRefusal {}

/// What is malformed in a connection string. Deliberately carries no input text (it may hold a
/// password).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyntaxError {
    /// A keyword not followed by `=` (position is 1-based, in characters).
    MissingEquals { position: usize },
    /// `=value` without a keyword.
    EmptyKeyword { position: usize },
    /// A single-quoted value without its closing quote.
    UnterminatedQuote,
    /// `scheme://` other than `postgresql://` or `postgres://`.
    UnsupportedScheme,
    /// `%` not followed by two hex digits.
    BadPercentEncoding,
    /// `%00`, which libpq forbids because C strings cannot hold it.
    PercentEncodedNul,
    /// Percent-decoding produced bytes that are not UTF-8.
    NotUtf8,
    /// `[` of an IPv6 address without `]`.
    UnterminatedIpv6,
    /// `[]`.
    EmptyIpv6,
    /// Something other than `:`, `,`, `/` or `?` right after `[address]`.
    UnexpectedAfterIpv6,
    /// A query parameter without `=`.
    QueryParamWithoutValue,
}

impl std::error::Error for SyntaxError {}

/// A connection attempt that ended before the login, for a reason idemctl's host loop knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptEnded {
    /// The connection string left no host to try.
    NoHost,
    TimedOut,
    /// The server closed the connection before the login finished.
    Closed,
}

impl std::error::Error for AttemptEnded {}

/// Why a connection ended, as the server or the socket said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EndReason {
    /// The server's error (a FATAL that came when no statement was waiting): its message and
    /// SQLSTATE.
    Server { message: String, code: String },
    /// The socket's or the driver's own error text.
    Socket(String),
}

/// The open-file limit leaves no room for the descriptors the runtime makes (the OS error).
#[derive(Debug)]
pub(crate) struct FileLimit(pub(crate) std::io::Error);

impl std::error::Error for FileLimit {}

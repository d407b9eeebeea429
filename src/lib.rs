//! idemctl: maintenance of the PostgreSQL table that stores API idempotency keys.
//!
//! The binary in `main.rs` only parses arguments and reports errors; everything else lives here so
//! that integration tests can reach it.

pub(crate) mod cli;
pub(crate) mod commands;
pub mod config;
pub(crate) mod conn;
pub(crate) mod context;
pub(crate) mod db;
pub(crate) mod exit;
pub(crate) mod fingerprint;
pub(crate) mod metrics;
pub(crate) mod output;
pub(crate) mod progress;
pub mod sample;

/// The man page as `idemctl man` prints it (a test keeps `man/idemctl.1` in step with it).
pub use commands::docs::man_page;
/// A statement template rewritten to find the rows it locked by the key's identity instead of by
/// ctid, as idemctl runs it on a Citus reference or local table (the EXPLAIN test explains it).
pub use db::citus::rows_by_identity;
/// A table profile: which columns play which role (the EXPLAIN test renders statements with it).
pub use db::profile::Profile;
/// evict's statements with the parts generated for foreign keys that reference the key table (the
/// EXPLAIN test plans them).
pub use db::references::statements_for_explain;

/// Entry point used by the binary: parse, run on a small runtime, print the error chain once on
/// stderr as one line, and turn the outcome into a documented exit code.
pub fn main_entry() -> std::process::ExitCode {
    install_panic_hook();
    let parsed = <cli::Cli as clap::CommandFactory>::command()
        .try_get_matches()
        .and_then(|m| {
            let mut cli = <cli::Cli as clap::FromArgMatches>::from_arg_matches(&m)?;
            cli.global.table_given = cli::given(&m, "table");
            let g = &mut cli.global;
            g.database_url_from =
                cli::given_by(&m, "database_url", "--database-url", "IDEMCTL_DATABASE_URL")
                    .unwrap_or_else(|| "DATABASE_URL".to_owned());
            g.profile_from =
                cli::given_by(&m, "profile", "--profile", "IDEMCTL_PROFILE").unwrap_or_default();
            g.ttl_from = cli::given_by(&m, "ttl", "--ttl", "IDEMCTL_TTL").unwrap_or_default();
            g.time_zone_from = cli::given_by(&m, "time_zone", "--time-zone", "IDEMCTL_TIME_ZONE")
                .unwrap_or_default();
            Ok(cli)
        });
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap prints them to stdout.
            let _ = e.print();
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("idemctl: {}", usage_error_line(&e));
            return exit::Exit::Usage.into();
        }
    };

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Room for the deeply nested futures of a batch (a debug build needs more than 2 MiB).
        .thread_stack_size(8 * 1024 * 1024)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return report(&anyhow::Error::new(e).context("failed to start the async runtime"));
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code.into(),
        Err(e) => report(&e),
    }
}

/// Parse a command line as the binary would, without running it: Ok when idemctl accepts it (or
/// it asks for --help or --version), else the one line a usage error prints. The documentation
/// tests hold every example of the README, the guide, --help and the man page to it.
pub fn check_args<I, T>(args: I) -> Result<(), String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let parsed = <cli::Cli as clap::CommandFactory>::command()
        .try_get_matches_from(args)
        .and_then(|m| <cli::Cli as clap::FromArgMatches>::from_arg_matches(&m));
    match parsed {
        Ok(_) => Ok(()),
        Err(e) if !e.use_stderr() => Ok(()),
        Err(e) => Err(usage_error_line(&e)),
    }
}

/// clap's usage error as one line: its message without the blank lines, usage block and "For more
/// information" footer, pointing at `--help` instead.
fn usage_error_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect();
    let message = lines.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    format!("{message} (see --help)")
}

/// Print an error as one line (`idemctl: failed to ...: cause`) and pick its exit code.
fn report(err: &anyhow::Error) -> std::process::ExitCode {
    eprintln!("idemctl: {}", output::error_line(err));
    exit::classify(err).into()
}

/// A character that moves or recolours a terminal's output or reorders it for the reader: a
/// control character or a bidirectional override. The output layer escapes these; SQL that names
/// an identifier holding one writes it in the Unicode-escape form.
pub fn moves_the_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The error chain as one line. A server error is shown by its message, detail and hint instead
/// of the driver's generic "db error" wrapper.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut skip_db_error = false;
    for cause in err.chain() {
        if skip_db_error && cause.is::<tokio_postgres::error::DbError>() {
            continue;
        }
        if let Some(db) = cause
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error)
        {
            let mut text = db.message().to_owned();
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            parts.push(text);
            skip_db_error = true;
            continue;
        }
        parts.push(cause.to_string());
    }
    one_spaced(&parts.join(": "))
}

/// A message's line breaks, with the indentation that follows them (a server's multi-line text:
/// libpq's "Connection refused\n\tIs the server running ...", which Citus passes on), as one
/// space each, so the line reads as one sentence; a tab or space within a line is kept.
fn one_spaced(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' || c == '\r' {
            while out.ends_with([' ', '\t']) {
                out.pop();
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// A panic is a bug: say so in one line, without a backtrace, and exit with the internal-error code.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "idemctl: internal error: {}{at}; please report this",
            msg.replace('\n', " ")
        );
        std::process::exit(i32::from(exit::Exit::Internal.code()));
    }));
}

#[cfg(test)]
mod one_line_tests {
    #[test]
    fn line_breaks_and_their_indentation_become_one_space() {
        assert_eq!(
            super::one_spaced("connection refused\n\tIs the server running?\r\n"),
            "connection refused Is the server running? "
        );
        assert_eq!(super::one_spaced("a\tb"), "a\tb");
        assert_eq!(super::one_spaced("a \n  \n b"), "a b");
    }
}

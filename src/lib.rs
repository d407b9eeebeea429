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
pub(crate) mod domain;
pub(crate) mod exit;
pub(crate) mod fingerprint;
pub(crate) mod ident;
pub(crate) mod metrics;
pub(crate) mod output;
pub(crate) mod progress;
pub(crate) mod report;
pub mod sample;

/// The man page as `idemctl man` prints it (a test keeps `man/idemctl.1` in step with it).
pub use commands::docs::man_page;
/// A statement template rewritten to find the rows it locked by the key's identity instead of by
/// ctid, as idemctl runs it on a Citus reference or local table (the EXPLAIN test explains it).
pub use db::citus::rows_by_identity;
/// A table profile: which columns play which role (the EXPLAIN test renders statements with it).
pub use db::evict::Walk;
pub use db::profile::Profile;
/// evict's statements with the parts generated for foreign keys that reference the key table (the
/// EXPLAIN test plans them).
pub use db::references::statements_for_explain;

/// Entry point used by the binary: parse, run on a small runtime, print the error chain once on
/// stderr as one line, and turn the outcome into a documented exit code.
pub fn main_entry() -> std::process::ExitCode {
    install_panic_hook();
    let parsed = cli::parse(std::env::args_os());
    let (cli, given) = match parsed {
        Ok(parsed) => parsed,
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap prints them to stdout.
            let _ = e.print();
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            output::say(format_args!("idemctl: {}", usage_error_line(&e)));
            return exit::Exit::Usage.into();
        }
    };

    if let Err(e) = room_for_the_runtime() {
        let e = anyhow::Error::new(report::failure::FileLimit(e));
        return report(&e.context(report::failure::Step::StartRuntime));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Room for the deeply nested futures of a batch (a debug build needs more than 2 MiB).
        .thread_stack_size(8 * 1024 * 1024)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return report(&anyhow::Error::new(e).context(report::failure::Step::StartRuntime));
        }
    };
    match runtime.block_on(commands::run(cli, given)) {
        Ok(code) => code.into(),
        Err(e) => report(&e),
    }
}

/// Whether the process may open the files the runtime makes (its poller, its waker, the signal
/// socket pair and its copy): tokio panics when it cannot make the signal pair, so an open-file
/// limit that leaves no room must be an error before it. Eight descriptors are taken and given back.
fn room_for_the_runtime() -> std::io::Result<()> {
    let mut held = Vec::with_capacity(4);
    for _ in 0..4 {
        held.push(std::os::unix::net::UnixStream::pair()?);
    }
    Ok(())
}

/// Parse a command line as the binary would, without running it: Ok when idemctl accepts it (or
/// it asks for --help or --version), else the one line a usage error prints. The documentation
/// tests hold every example of the README, the guide, --help and the man page to it.
pub fn check_args<I, T>(args: I) -> Result<(), String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    match cli::parse(args) {
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
    output::say(format_args!("idemctl: {}", output::error_line(err)));
    exit::classify(err).into()
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
        output::say(format_args!(
            "idemctl: internal error: {}{at}; please report this",
            msg.replace('\n', " ")
        ));
        std::process::exit(i32::from(exit::Exit::Internal.code()));
    }));
}

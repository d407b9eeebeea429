//! Generated documentation: shell completions and the man page, both from the clap definition.

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::Exit;

/// Print completions for `shell` to stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> Result<Exit> {
    let mut cmd = crate::cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "idemctl", &mut buf);
    crate::output::write_stdout(&String::from_utf8_lossy(&buf))?;
    Ok(Exit::Success)
}

/// Print the man page to stdout.
pub(crate) fn man() -> Result<Exit> {
    crate::output::write_stdout(&man_page()?)?;
    Ok(Exit::Success)
}

/// The man page (roff): NAME, a SYNOPSIS with every option's value, DESCRIPTION, the options
/// every command takes, the list of COMMANDS, one section per command (what it does, its
/// synopsis, its options, its notes and examples), then EXIT STATUS, ENVIRONMENT and EXAMPLES.
/// Everything is in this one page: there are no per-command pages to refer to.
pub fn man_page() -> Result<String> {
    let cmd = Cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    let mut text = String::from_utf8(buf)?;
    text.push_str(".SH SYNOPSIS\n");
    text.push_str(&synopsis("idemctl", &cmd));
    text.push_str(" \\fICOMMAND\\fR [\\fICOMMAND OPTIONS\\fR]\n");
    let mut buf = Vec::new();
    man.render_description_section(&mut buf)?;
    man.render_options_section(&mut buf)?;
    text.push_str(&String::from_utf8(buf)?);
    let subs: Vec<&clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    text.push_str(".SH COMMANDS\n");
    for sub in &subs {
        text.push_str(&format!(
            ".TP\n\\fBidemctl {}\\fR\n{}\n",
            sub.get_name(),
            roff_escape(&sub.get_about().map(ToString::to_string).unwrap_or_default())
        ));
    }
    for sub in subs {
        text.push_str(&command_section(sub)?);
    }
    text.push_str(&extra_sections());
    Ok(text)
}

/// One command's section: what it does, its synopsis, its options, its notes.
fn command_section(sub: &clap::Command) -> Result<String> {
    let name = format!("idemctl {}", sub.get_name());
    let about = sub
        .get_long_about()
        .or(sub.get_about())
        .map(ToString::to_string)
        .unwrap_or_default();
    let mut text = format!(
        ".SH \"{}\"\n.PP\n{}\n.PP\n{}\n",
        name.to_uppercase(),
        roff_escape(&about),
        synopsis(&name, sub)
    );
    let mut part = Vec::new();
    clap_mangen::Man::new(sub.clone().name(name)).render_options_section(&mut part)?;
    let part = String::from_utf8(part)?;
    if part.contains(".TP") {
        text.push_str(&part.replacen(".SH OPTIONS", ".SS Options", 1));
    }
    if let Some(notes) = sub.get_after_help() {
        text.push_str(".PP\n");
        for line in notes.to_string().lines() {
            if line.trim().is_empty() {
                text.push_str(".PP\n");
            } else {
                text.push_str(&format!("{}\n.br\n", roff_escape(line.trim_end())));
            }
        }
    }
    Ok(text)
}

/// A synopsis line: the command, then each visible option with its value, then its arguments.
fn synopsis(name: &str, cmd: &clap::Command) -> String {
    let mut parts = vec![format!("\\fB{}\\fR", roff_escape(name))];
    let mut positionals = Vec::new();
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let value = roff_escape(&value_name(a));
        if a.is_positional() {
            positionals.push(if a.is_required_set() {
                format!("\\fI{value}\\fR")
            } else {
                format!("[\\fI{value}\\fR]")
            });
            continue;
        }
        let long = a
            .get_long()
            .map(|l| format!("\\fB\\-\\-{}\\fR", roff_escape(l)));
        let short = a.get_short().map(|c| format!("\\fB\\-{c}\\fR"));
        let flag = match (short, long) {
            (Some(s), Some(l)) => format!("{s}|{l}"),
            (s, l) => s.or(l).unwrap_or_default(),
        };
        if a.get_action().takes_values() {
            parts.push(format!("[{flag} \\fI{value}\\fR]"));
        } else {
            parts.push(format!("[{flag}]"));
        }
    }
    parts.extend(positionals);
    parts.join(" ")
}

/// How an option's value is written in a synopsis: its value name, or its choices.
fn value_name(a: &clap::Arg) -> String {
    let choices: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_owned())
        .collect();
    if !choices.is_empty() {
        return choices.join("|");
    }
    match a.get_value_names() {
        Some(names) => names
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        None => a.get_id().as_str().to_uppercase(),
    }
}

fn roff_escape(s: &str) -> String {
    s.replace('\\', "\\e").replace('-', "\\-")
}

fn extra_sections() -> String {
    let mut s = String::from(".SH \"EXIT STATUS\"\n");
    for e in Exit::ALL {
        s.push_str(&format!(
            ".TP\n{}\n{}\n",
            e.code(),
            roff_escape(e.meaning())
        ));
    }
    s.push_str(".SH ENVIRONMENT\n");
    for (var, meaning) in environment() {
        s.push_str(&format!(".TP\n.B {var}\n{}\n", roff_escape(&meaning)));
    }
    s.push_str(".SH EXAMPLES\n");
    for (what, cmd) in EXAMPLES {
        s.push_str(&format!(
            ".TP\n{}\n.B {}\n",
            roff_escape(what),
            roff_escape(cmd)
        ));
    }
    s
}

/// Every environment variable idemctl reads, with what it does: each option's variable (from the
/// option's own definition), the connection's (libpq's, from the list the connection code reads),
/// then the rest. A test holds the README's list to this one and both to the source.
pub(crate) fn environment() -> Vec<(String, String)> {
    let cmd = Cli::command();
    let mut out: Vec<(String, String)> = Vec::new();
    let args = cmd
        .get_arguments()
        .chain(cmd.get_subcommands().flat_map(clap::Command::get_arguments));
    for a in args {
        let (Some(env), Some(long)) = (a.get_env(), a.get_long()) else {
            continue;
        };
        let name = env.to_string_lossy().into_owned();
        if out.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let help = a.get_help().map(ToString::to_string).unwrap_or_default();
        out.push((name, format!("As --{long}: {}", help.trim_end_matches('.'))));
        if long == "database-url" {
            out.push((
                "DATABASE_URL".to_owned(),
                "Connection string used when neither --database-url nor IDEMCTL_DATABASE_URL is set (nor database_url in the config file)".to_owned(),
            ));
        }
    }
    let mut described = Vec::new();
    for (vars, meaning) in CONNECTION {
        described.extend(vars.split(", "));
        out.push(((*vars).to_owned(), (*meaning).to_owned()));
    }
    let (rest, keywords): (Vec<&str>, Vec<&str>) = crate::conn::LIBPQ_ENV_VARS
        .iter()
        .filter(|(var, _)| !described.contains(var))
        .copied()
        .unzip();
    out.push((
        rest.join(", "),
        format!(
            "The libpq connection keywords {} respectively, for what the connection string leaves out, read as libpq reads them; a keyword idemctl does not support is refused, naming it and the variable",
            keywords.join(", ")
        ),
    ));
    out.extend(
        OTHERS
            .iter()
            .map(|(v, m)| ((*v).to_owned(), (*m).to_owned())),
    );
    out
}

/// The libpq variables described one by one; the others are listed together.
const CONNECTION: &[(&str, &str)] = &[
    (
        "PGHOST, PGHOSTADDR, PGPORT, PGDATABASE, PGUSER",
        "Where and as whom to connect, as in libpq, for anything the connection string leaves out.",
    ),
    (
        "PGPASSWORD, PGPASSFILE",
        "The password, or the password file (default ~/.pgpass, ignored unless mode 0600).",
    ),
    (
        "PGSSLMODE, PGSSLNEGOTIATION, PGSSLROOTCERT",
        "TLS mode (disable, allow, prefer, require, verify-ca, verify-full), negotiation (postgres, \
         or direct: TLS from the first byte with ALPN postgresql, for PostgreSQL 17+ and \
         TLS-terminating proxies; needs require, verify-ca or verify-full) and root certificates.",
    ),
    (
        "PGSERVICE, PGSERVICEFILE",
        "A section of the connection service file, and that file (default ~/.pg_service.conf, then \
         pg_service.conf in PGSYSCONFDIR).",
    ),
    ("PGAPPNAME", "application_name (default idemctl)."),
    (
        "PGCONNECT_TIMEOUT",
        "Seconds to keep retrying a connection when --connect-timeout is not given.",
    ),
    (
        "PGTARGETSESSIONATTRS, PGLOADBALANCEHOSTS",
        "Which of several hosts to use (primary, standby, read-write, read-only, prefer-standby, any), \
         and whether to try them in a random order.",
    ),
    (
        "PGREQUIREAUTH",
        "The authentication methods the server may ask for (password, md5, scram-sha-256, none, ...).",
    ),
];

/// The variables read outside the connection string and the options.
const OTHERS: &[(&str, &str)] = &[
    (
        "PGSYSCONFDIR",
        "The directory of the system-wide pg_service.conf (default /etc/postgresql-common).",
    ),
    (
        "SSL_CERT_FILE, SSL_CERT_DIR",
        "OpenSSL's default certificate store, used with sslrootcert=system, and by an https:// \
         --pushgateway unless --pushgateway-ca is given.",
    ),
    ("NO_COLOR", "Disables colour when set to a non-empty value."),
];

/// Examples shown in the man page.
pub(crate) const EXAMPLES: &[(&str, &str)] = &[
    (
        "Figures for a dashboard or an alert:",
        "idemctl stats -o json",
    ),
    (
        "Write Prometheus metrics for node_exporter's textfile collector:",
        "idemctl stats --textfile /var/lib/node_exporter/textfile/idemctl.prom",
    ),
    (
        "Page when eviction has stopped:",
        "idemctl check --max-eviction-lag 30m",
    ),
    (
        "Look at one key of one tenant:",
        "idemctl inspect 8e0f0c2a-3b7d --api-key-id tenant_42",
    ),
    (
        "Evict from cron every five minutes (silent on success; exit 7 when a previous run still holds the table; cargo install --path . --root /usr/local puts idemctl there):",
        "*/5 * * * * /usr/local/bin/idemctl evict --max-runtime 4m --textfile /var/lib/node_exporter/textfile/idemctl_evict.prom",
    ),
    (
        "Evict from a systemd timer: a Type=oneshot service running the same command, and a timer with OnCalendar=*:0/5:",
        "ExecStart=/usr/local/bin/idemctl evict --max-runtime 4m",
    ),
    (
        "Drain a large backlog in a quiet hour:",
        "idemctl evict --catch-up",
    ),
    (
        "On call, step 1: are keys stuck? (needs the optional index or --allow-scan)",
        "idemctl stats",
    ),
    (
        "Step 2: look at one of them:",
        "idemctl inspect KEY --api-key-id TENANT",
    ),
    (
        "Step 3: exactly which keys would be reclaimed (needs the optional index or --allow-scan):",
        "idemctl reclaim --dry-run",
    ),
    (
        "Step 4: reclaim them, after confirming (or write a plan and apply it):",
        "idemctl reclaim --plan plan.json && idemctl reclaim --apply plan.json",
    ),
    (
        "A client says it sent the same request and got 422: compare its body with the stored fingerprint (exit 4 on a mismatch):",
        "idemctl inspect KEY --api-key-id TENANT --body request.json --method POST --path /v1/payments",
    ),
];

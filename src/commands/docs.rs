//! Generated documentation: shell completions and the man page, both from the clap definition.

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::Exit;

/// Print completions for `shell` to stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<Exit> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "idemctl", &mut buf);
    crate::output::write_stdout(&String::from_utf8_lossy(&buf))?;
    Ok(Exit::Success)
}

/// Print the man page to stdout.
pub fn man() -> Result<Exit> {
    crate::output::write_stdout(&man_page()?)?;
    Ok(Exit::Success)
}

/// The man page (roff), with EXIT STATUS, ENVIRONMENT and EXAMPLES sections after clap's own.
pub fn man_page() -> Result<String> {
    let cmd = Cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    man.render_options_section(&mut buf)?;
    man.render_subcommands_section(&mut buf)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        render_subcommand(&mut buf, sub)?;
    }
    let mut text = String::from_utf8(buf)?;
    text.push_str(&extra_sections());
    man.render_version_section(&mut Vec::new())?;
    Ok(text)
}

fn render_subcommand(buf: &mut Vec<u8>, sub: &clap::Command) -> Result<()> {
    let name = format!("idemctl {}", sub.get_name());
    let page = clap_mangen::Man::new(sub.clone().name(name.clone()));
    let mut part = Vec::new();
    page.render_options_section(&mut part)?;
    let part = String::from_utf8(part)?.replacen(
        ".SH OPTIONS",
        &format!(".SH \"{}\"", name.to_uppercase()),
        1,
    );
    let about = sub
        .get_about()
        .map(|a| format!("{a}\n"))
        .unwrap_or_default();
    let part = part.replacen('\n', &format!("\n{}", roff_escape(&about)), 1);
    buf.extend_from_slice(part.as_bytes());
    Ok(())
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
    for (var, meaning) in ENVIRONMENT {
        s.push_str(&format!(".TP\n.B {var}\n{}\n", roff_escape(meaning)));
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

/// Environment variables idemctl reads.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "IDEMCTL_DATABASE_URL",
        "Connection string, as --database-url.",
    ),
    (
        "DATABASE_URL",
        "Connection string used when neither --database-url nor IDEMCTL_DATABASE_URL is set.",
    ),
    ("IDEMCTL_TABLE", "The key table, as --table."),
    (
        "PGHOST, PGHOSTADDR, PGPORT, PGDATABASE, PGUSER",
        "Where and as whom to connect, as in libpq, for anything the connection string leaves out.",
    ),
    (
        "PGPASSWORD, PGPASSFILE",
        "The password, or the password file (default ~/.pgpass, ignored unless mode 0600).",
    ),
    (
        "PGSSLMODE, PGSSLROOTCERT",
        "TLS mode (disable, allow, prefer, require, verify-ca, verify-full) and root certificates.",
    ),
    ("PGAPPNAME", "application_name (default idemctl)."),
    (
        "PGCONNECT_TIMEOUT",
        "Seconds to keep retrying a connection when --connect-timeout is not given.",
    ),
    ("NO_COLOR", "Disables colour when set to a non-empty value."),
];

/// Examples shown in the man page.
pub const EXAMPLES: &[(&str, &str)] = &[
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
        "Evict from cron every five minutes (silent on success; exit 7 when a previous run still holds the table):",
        "*/5 * * * * idemctl evict --max-runtime 4m --textfile /var/lib/node_exporter/textfile/idemctl_evict.prom",
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
        "Step 3: exactly which keys would be reclaimed:",
        "idemctl reclaim --dry-run",
    ),
    (
        "Step 4: reclaim them, after confirming (or write a plan and apply it):",
        "idemctl reclaim --plan plan.json && idemctl reclaim --apply plan.json",
    ),
];

//! Every clap type: the global connection and output options, and one `Args` struct per subcommand.
//!
//! Values are validated here (durations, sizes, table names) so that bad input fails before any
//! connection is made.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::domain::{ColorChoice, OutputFormat, PoolMode, ReclaimAction, TableName};
use crate::exit::Exit;

/// Maintain the PostgreSQL table in which an API stores its idempotency keys.
#[derive(Debug, Parser)]
#[command(
    name = "idemctl",
    version,
    about = "Maintain the PostgreSQL table in which an API stores its idempotency keys",
    long_about = "Maintain the PostgreSQL table in which an API stores its idempotency keys: evict \
                  expired keys in short lock-safe batches, reclaim keys whose owner died, inspect one \
                  key, and report the figures an alert needs.",
    after_long_help = after_help(),
    after_help = "Run `idemctl help <command>` for a command's options; `--help` also lists the exit codes."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

fn after_help() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "Exit status:\n{}\n\nConnection: like psql, idemctl reads PGHOST, PGHOSTADDR, PGPORT, PGUSER, \
             PGPASSWORD, PGDATABASE, PGSSLMODE, PGSSLROOTCERT, PGAPPNAME, PGCONNECT_TIMEOUT, PGPASSFILE and ~/.pgpass when \
             --database-url does not say otherwise.\n\nExamples:\n  idemctl stats\n  idemctl -d \
             'host=db1 dbname=app user=idemctl_ro' inspect 3f6c0e1a --api-key-id tenant_42\n  idemctl \
             check --max-eviction-lag 30m\n  idemctl inspect KEY --api-key-id TENANT --body request.json",
            Exit::table_text()
        )
    })
}

/// The clap command for generated documentation (completions, man page), with what the derive
/// cannot say: `completions` takes none of the connection and output options (they would do
/// nothing there), so what is generated for it offers only its shell argument.
pub(crate) fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    cmd.mut_subcommand("completions", |sub| {
        let mut own = clap::Command::new("completions").bin_name("idemctl completions");
        if let Some(about) = sub.get_about() {
            own = own.about(about.clone());
        }
        // Its own arguments only; clap adds --help again when it builds the new command.
        for arg in sub
            .get_arguments()
            .filter(|a| !a.is_global_set() && a.get_id() != "help")
        {
            own = own.arg(arg.clone());
        }
        own
    })
}

/// Options shared by every subcommand.
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection and output (every command)")]
pub(crate) struct GlobalArgs {
    /// Connection string: a URI (postgresql://user@host/db) or key=value conninfo as psql accepts.
    /// Falls back to DATABASE_URL, then to PG* variables, ~/.pgpass and libpq's defaults.
    #[arg(
        short = 'd',
        long,
        env = "IDEMCTL_DATABASE_URL",
        hide_env_values = true,
        global = true,
        value_name = "CONNINFO"
    )]
    pub database_url: Option<String>,

    /// The key table, optionally schema-qualified. Quoted as an identifier: `public.idempotency_keys`.
    #[arg(
        short = 't',
        long,
        env = "IDEMCTL_TABLE",
        hide_env_values = true,
        default_value = "idempotency_keys",
        value_parser = parse_table_name,
        global = true,
        value_name = "[SCHEMA.]NAME"
    )]
    pub table: TableName,

    /// A TOML file with connection and table defaults (database_url or service, table, profile,
    /// ttl) and `[profiles.NAME]` mappings of other key tables' columns. Flags win over environment
    /// variables, which win over the file (see docs/profiles.md).
    // An empty value (an unset variable in an environment template) means no file (config::apply).
    #[arg(
        long,
        env = "IDEMCTL_CONFIG",
        global = true,
        hide_env_values = true,
        value_name = "FILE",
        value_parser = clap::builder::TypedValueParser::map(clap::builder::OsStringValueParser::new(), std::path::PathBuf::from)
    )]
    pub config: Option<std::path::PathBuf>,

    /// The table's profile: `storage`, `explainer`, `rocket-rides` or a mapping of the config
    /// file. Detected from the table's columns when absent (`idemctl check` says which and why).
    #[arg(
        long,
        env = "IDEMCTL_PROFILE",
        global = true,
        hide_env_values = true,
        value_name = "NAME"
    )]
    pub profile: Option<String>,

    /// For a table without an expiry column: keys expire this long after created_at
    /// (evict and stats need it there; ignored when the table has an expiry column). Under 1h,
    /// evict and stats refuse it without --force.
    #[arg(long, env = "IDEMCTL_TTL", value_parser = parse_positive_duration, allow_hyphen_values = true, global = true, hide_env_values = true, value_name = "DUR")]
    pub ttl: Option<Duration>,

    /// The zone a table's `timestamp without time zone` columns are written in (an IANA name,
    /// e.g. UTC); wins over the config file's time_zone. Ignored for timestamptz columns.
    #[arg(long, env = "IDEMCTL_TIME_ZONE", value_parser = parse_time_zone, global = true, hide_env_values = true, value_name = "ZONE")]
    pub time_zone: Option<String>,

    /// Output format. `auto` is a table on a terminal and plain text when piped.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Auto, global = true)]
    pub output: OutputFormat,

    /// Print nothing on success (progress, summaries); errors still go to stderr.
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,

    /// When to use colour on a terminal (NO_COLOR is honoured by `auto`).
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    pub color: ColorChoice,

    /// Give up connecting after this long, retrying transient failures with backoff
    /// [default: connect_timeout from the conninfo, else PGCONNECT_TIMEOUT, else 10s].
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, global = true, value_name = "DUR")]
    pub connect_timeout: Option<Duration>,

    /// statement_timeout for every statement idemctl runs; without it, a shorter statement_timeout
    /// of the role or database is kept (docs/reliability.md). idemctl waits for any answer at most
    /// this plus 10s, then gives the connection up (exit 1).
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "30s", global = true, value_name = "DUR")]
    pub statement_timeout: Duration,

    /// lock_timeout for idemctl's sessions (evict and reclaim wait far less on rows: a few ms).
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "2s", global = true, value_name = "DUR")]
    pub lock_timeout: Duration,

    /// idle_in_transaction_session_timeout for idemctl's sessions; also how long the server keeps
    /// the session holding evict's or reclaim's table lock once idemctl has gone silent
    /// (idle_session_timeout, PostgreSQL 14 and later).
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "60s", global = true, value_name = "DUR")]
    pub idle_in_transaction_timeout: Duration,

    /// How the connection's server sessions are shared: auto detects a pooler (PgBouncer and the
    /// like) and then assumes transaction pooling; session keeps session-level settings and the
    /// per-table lock (a direct connection or a session-mode pooler); transaction keeps everything
    /// inside idemctl's own transactions.
    #[arg(long, value_enum, env = "IDEMCTL_POOL_MODE", hide_env_values = true, default_value_t = PoolMode::Auto, global = true)]
    pub pool_mode: PoolMode,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show one key's stored record and response.
    Inspect(InspectArgs),
    /// Report table size, oldest live key, eviction lag, expired backlog and stuck keys.
    Stats(StatsArgs),
    /// Watch the key table live: backlog, eviction lag, insert and eviction rates, stuck keys, waits.
    #[command(long_about = TOP_LONG_ABOUT)]
    Top(TopArgs),
    /// Verify the table, its indexes and the role's privileges; alert on thresholds.
    Check(CheckArgs),
    /// Delete expired completed keys in short, lock-safe batches (for cron or a systemd timer).
    Evict(EvictArgs),
    /// Free in_progress keys whose owner died: preview, plan, then delete them or fail them.
    Reclaim(ReclaimArgs),
    /// Print shell completions for bash, zsh, fish, elvish or powershell.
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout.
    #[command(hide = true)]
    Man,
}

/// `idemctl inspect`.
#[derive(Debug, Args)]
#[command(
    after_help = "Exit status 3 when the key does not exist; with --body, 0 when the fingerprint matches and 4 when it does not.\n\n\
Did the client really send the same request? (it got 422 Unprocessable Content)\n  \
idemctl inspect KEY --api-key-id TENANT --body request.json --method POST --path /v1/payments"
)]
pub(crate) struct InspectArgs {
    /// The idempotency key, as the client sent it.
    pub key: String,

    /// The tenant (api_key_id) the key belongs to; required when several tenants used the same key.
    /// On a table whose scope is several columns, use --scope.
    #[arg(long, value_name = "ID")]
    pub api_key_id: Option<String>,

    /// One column of the key's scope and its value, as COLUMN=VALUE; repeat it for a scope of
    /// several columns (tenant = ["request_type", "client_id"] in a mapping): --scope
    /// request_type=payment --scope client_id=c-42. Without every scope column, inspect lists the
    /// scopes holding the key among those given (through an index led by the key, or by walking
    /// the scopes of an index that lists scope columns before the key). Output names each scope
    /// column; -o json carries them as an object, "scope", beside api_key_id.
    #[arg(long, value_name = "COLUMN=VALUE", conflicts_with = "api_key_id")]
    pub scope: Vec<String>,

    /// A scope column whose value is NULL: selects the key stored with NULL in that column (IS
    /// NULL), where --scope COLUMN=NULL names the text 'NULL'. Repeat it per column; give the other
    /// columns with --scope: --scope endpoint=/orders --scope-null client_id.
    #[arg(long, value_name = "COLUMN", conflicts_with = "api_key_id")]
    pub scope_null: Vec<String>,

    /// Age past which an in_progress key counts as stuck (what reclaim would take by default).
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "5m", value_name = "DUR")]
    pub stuck_after: Duration,

    /// Check a request body (a file, or - for stdin) against the stored fingerprint: computes the
    /// fingerprint as the application does and says match (exit 0) or mismatch (exit 4), showing
    /// both values.
    #[arg(long, value_name = "FILE|-")]
    pub body: Option<PathBuf>,

    /// With --body: how the application made the body canonical before hashing it with SHA-256.
    /// jcs is RFC 8785; sorted-keys is Python's json.dumps(body, sort_keys=True); raw hashes the
    /// bytes as given [default: jcs when the fingerprint column is bytea, sorted-keys when it holds
    /// hex text].
    #[arg(long, value_enum, requires = "body", value_name = "FORM")]
    pub canonical: Option<crate::fingerprint::Canonical>,

    /// With --body: the request's HTTP method, compared with the stored request_method.
    #[arg(long, requires = "body", value_name = "METHOD")]
    pub method: Option<String>,

    /// With --body: the request's path, compared with the stored request_path.
    #[arg(long, requires = "body", value_name = "PATH")]
    pub path: Option<String>,
}

/// `idemctl stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Age past which an in_progress key counts as stuck.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "5m", value_name = "DUR")]
    pub stuck_after: Duration,

    /// Count the expired backlog exactly up to this many rows, then report "at least N" with the
    /// planner's estimate (each counted row is a heap read, so a higher cap costs time).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(i64).range(1..=100_000_000), allow_negative_numbers = true, value_name = "N")]
    pub backlog_cap: i64,

    /// Count stuck keys with a table scan when the optional in_progress index is missing.
    #[arg(long)]
    pub allow_scan: bool,

    /// Allow a --ttl under 1 hour (on a table without an expiry column).
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub metrics: MetricsArgs,

    /// On a partitioned table, list every leaf partition with its bounds, estimated rows and size
    /// (catalog only; JSON output always includes them).
    #[arg(long)]
    pub partitions: bool,
}

/// What `idemctl top --help` and the man page say about top.
const TOP_LONG_ABOUT: &str = "Watch the key table live, for the engineer on call when an eviction alert fires: \
a full-screen view that refreshes every --interval with the expired backlog and the eviction lag \
(each with its trend over the last minutes), the insert and eviction rates in rows/s from the \
server's own counters and whether eviction keeps up (evicted ÷ inserted), the stuck keys and the \
oldest live and oldest stuck key, the TTL of recent keys as a histogram, the table's size, dead \
tuples and last vacuum, the other idemctl sessions on the database (the command holding the \
table's lock among them), and every session waiting for a key's row with the session holding it. \
On a Citus table, one line per worker. Each refresh runs the statements of `idemctl stats` \
(short, bounded and index-backed) and a few reads of pg_stat_activity and pg_locks, each inside \
its own transaction, so it works through a transaction pooler too.\n\n\
Keys: q quits (exit 0), p pauses and resumes, ? shows the help; Ctrl-C exits 130 and SIGTERM 143. \
The terminal is restored on every way out, a panic included. A lost connection shows in the view \
and is retried every interval; no refresh waits longer than its deadline.\n\n\
Off a terminal, top refuses (exit 2) and points to `idemctl stats -o json`; --once prints one \
frame as text (or JSON with -o json) and exits.";

/// `idemctl top`.
#[derive(Debug, Args)]
#[command(
    after_help = "Exit status 0 on q, 130 on Ctrl-C or SIGINT, 143 on SIGTERM, 2 off a terminal without --once.\n\n\
During an eviction-lag alert:\n  idemctl top --stuck-after 2m\n\
One frame for a ticket or a log:\n  idemctl top --once > top.txt"
)]
pub(crate) struct TopArgs {
    /// How often the view refreshes (at least 500ms).
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "2s", value_name = "DUR")]
    pub interval: Duration,

    /// Age past which an in_progress key counts as stuck.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "5m", value_name = "DUR")]
    pub stuck_after: Duration,

    /// Print one frame as plain text (JSON with -o json) and exit: two refreshes --interval apart,
    /// so that the rates are measured. Works off a terminal.
    #[arg(long)]
    pub once: bool,
}

/// `idemctl check`.
#[derive(Debug, Args)]
#[command(
    after_help = "Exit status 4 when a threshold is breached; the breached figures are printed."
)]
pub(crate) struct CheckArgs {
    /// Fail (exit 4) when the oldest expired key has waited longer than this for eviction.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, value_name = "DUR")]
    pub max_eviction_lag: Option<Duration>,

    /// Fail (exit 4) when more than N in_progress keys are older than --stuck-after.
    #[arg(long, value_name = "N")]
    pub max_stuck: Option<u64>,

    /// Age past which an in_progress key counts as stuck.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "5m", value_name = "DUR")]
    pub stuck_after: Duration,

    /// Count stuck keys with a table scan when the optional in_progress index is missing.
    #[arg(long)]
    pub allow_scan: bool,

    /// Fail (exit 4) when recent keys live (expires_at - created_at) shorter than this: set it to
    /// the clients' retry window, since a key evicted before a client stops retrying makes the
    /// retry run the request again.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, value_name = "DUR")]
    pub min_ttl: Option<Duration>,

    /// How often evict runs: check warns, with the ALTER TABLE that fixes it, when autovacuum
    /// would leave eviction's dead rows (more than 1,000 of them) waiting more than 12 times this long.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "5m", value_name = "DUR")]
    pub evict_interval: Duration,
}

/// `idemctl evict`.
#[derive(Debug, Args)]
#[command(
    after_help = "Silent on success when not on a terminal (cron mails any output). \
Exit status 7 when another evict holds the table's lock, 130 when interrupted.\n\n\
Every five minutes from cron, metrics for node_exporter's textfile collector:\n  \
*/5 * * * * /usr/local/bin/idemctl evict --max-runtime 4m --textfile evict.prom"
)]
pub(crate) struct EvictArgs {
    /// Allow a --ttl under 1 hour (on a table without an expiry column): a unit typo (24m for
    /// 24h) would treat nearly every answered key as expired.
    #[arg(long)]
    pub force: bool,

    /// Rows per batch, fixed. Without it, batches are sized to take about --batch-time each.
    /// Each batch is one statement in its own transaction.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50_000), allow_negative_numbers = true, value_name = "N")]
    pub batch_size: Option<u32>,

    /// How long one batch statement should take (and so hold the rows it deletes, which a live
    /// request retrying one of them waits for): each batch is sized from the last one's pace,
    /// between 50 and 10,000 rows, leaving out the network round trip (measured at the start).
    /// Default 2ms, or 15ms with --catch-up.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, conflicts_with = "batch_size", value_name = "DUR")]
    pub batch_time: Option<Duration>,

    /// Stop starting new batches after this long.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, value_name = "DUR")]
    pub max_runtime: Option<Duration>,

    /// Stop after this many batches.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true, value_name = "N")]
    pub max_batches: Option<u64>,

    /// Stop after deleting this many rows (the last batch is shortened to fit).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true, value_name = "N")]
    pub max_rows: Option<u64>,

    /// Rest this long after every batch, on top of the duty cycle's rest (--duty-cycle's, 20% by
    /// default: after a batch that took T, T * 4 + DUR). Fixes the pace: the adaptive pace is off.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DUR")]
    pub pause: Option<Duration>,

    /// Share of wall time each worker may spend running statements, in percent: after a batch that
    /// took T, it rests T * (100 - PCT) / PCT, so a busy server gets longer breaks. 100 = no pacing
    /// (catching up on a backlog in a quiet hour). Without it (and without --catch-up and --pause)
    /// the pace adapts to the other sessions on the server: unpaced while they are idle, between 2
    /// and 20 while they are not, backing off when they slow (needs pg_monitor; without it, 20).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=100), allow_negative_numbers = true, value_name = "PCT")]
    pub duty_cycle: Option<u8>,

    /// Delete at most this many rows per second, all sessions (--jobs) together: `5000` or
    /// `5000/s`. Composes with the pace: whichever is stricter decides.
    #[arg(long, value_parser = parse_rows_rate, allow_hyphen_values = true, value_name = "ROWS/s")]
    pub max_rate: Option<f64>,

    /// Write at most this much WAL per second: `8MB/s`, `512kB` (1 kB = 1024 B). Measured from the
    /// server's WAL insert position before and after each batch (WAL other sessions write during a
    /// batch counts too, so a busy server keeps evict below it); not on a standby.
    #[arg(long, value_parser = parse_bytes_rate, allow_hyphen_values = true, value_name = "BYTES/s")]
    pub max_wal_rate: Option<f64>,

    /// Sessions deleting disjoint ranges in parallel (for catching up; each paced as above).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=8), allow_negative_numbers = true, value_name = "N")]
    pub jobs: u8,

    /// Drain a large backlog as fast as idemctl safely can: no pacing (--duty-cycle 100), at least
    /// two sessions (--jobs 2) and 15 ms batches. Batches stay short and never wait on live
    /// requests, but live traffic slows while it runs: use it in a quiet hour.
    #[arg(long, conflicts_with = "duty_cycle")]
    pub catch_up: bool,

    /// Never evict a key created less than this long ago, whatever its expires_at says
    /// (a guard against a deploy that wrote too-short TTLs).
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, value_name = "DUR")]
    pub min_age: Option<Duration>,

    /// Show what would be deleted (bounded count, oldest and newest, statement and plan); change nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub metrics: MetricsArgs,

    /// On a table range-partitioned on expires_at or created_at: detach and drop, instead of deleting
    /// row by row, each partition whose keys have all expired and none is in_progress (proved under
    /// the detach's lock with two index probes; needs the optional in_progress index). The default
    /// partition is never dropped. A partition whose lock is not granted within
    /// --drop-lock-timeout is evicted in batches instead. Needs ownership of the table.
    #[arg(long)]
    pub drop_partitions: bool,

    /// How long --drop-partitions waits for each lock the detach needs (the table, the partition,
    /// the default partition) before leaving the partition to the batches; live requests queue
    /// behind a waiting detach, so keep it a few milliseconds.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "5ms", requires = "drop_partitions", value_name = "DUR")]
    pub drop_lock_timeout: Duration,

    /// After a run that evicted more than --vacuum-min-rows keys, VACUUM (ANALYZE) the table (each
    /// leaf partition of a partitioned table, one after another), outside any transaction, so the
    /// dead rows are reclaimed now rather than when autovacuum comes. Needs the table's owner, a
    /// superuser or the database's owner (checked before any change).
    #[arg(long)]
    pub vacuum: bool,

    /// The fewest evicted keys that make --vacuum run VACUUM.
    #[arg(long, default_value_t = 10_000, requires = "vacuum", value_name = "N")]
    pub vacuum_min_rows: u64,

    /// Before each batch, pause while a streaming replica's replay is further behind than this
    /// (from pg_stat_replication; the role needs pg_monitor or pg_read_all_stats).
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, value_name = "DUR")]
    pub max_replica_lag: Option<Duration>,

    /// End the run (end reason replica_lag) when replicas stay behind --max-replica-lag for this
    /// long in one stretch, or when --max-runtime runs out while waiting.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, default_value = "5m", requires = "max_replica_lag", value_name = "DUR")]
    pub max_replica_wait: Duration,
}

impl EvictArgs {
    /// The fixed duty cycle, when a flag fixes the pace (`--catch-up` lifts pacing; `--pause`
    /// alone keeps the default 20); None = the adaptive pace.
    pub(crate) fn fixed_duty_cycle(&self) -> Option<u8> {
        if self.catch_up {
            Some(100)
        } else if self.duty_cycle.is_some() || self.pause.is_some() {
            Some(self.duty_cycle.unwrap_or(20))
        } else {
            None
        }
    }

    /// How batches are sized: fixed by --batch-size, else adapted to --batch-time.
    pub(crate) fn batch_sizing(&self) -> BatchSizing {
        if let Some(rows) = self.batch_size {
            return BatchSizing::Fixed(rows);
        }
        let (target, start) = if self.catch_up {
            (crate::domain::CATCH_UP_BATCH_TIME, 1000)
        } else {
            (Duration::from_millis(2), 100)
        };
        BatchSizing::Adaptive {
            target: self.batch_time.unwrap_or(target),
            start,
            min: 50,
            max: 10_000,
        }
    }

    /// --max-rate and --max-wal-rate.
    pub(crate) fn rate_caps(&self) -> crate::domain::Caps {
        crate::domain::Caps {
            rows: self.max_rate,
            wal: self.max_wal_rate,
        }
    }

    /// The number of sessions in effect (`--catch-up` uses at least two).
    pub(crate) fn effective_jobs(&self) -> u8 {
        if self.catch_up {
            self.jobs.max(2)
        } else {
            self.jobs
        }
    }
}

impl ReclaimArgs {
    /// --older-than, or its default. (Under --apply the plan's cutoff is used instead; a flag
    /// given there must agree with it.)
    pub(crate) fn older_than(&self) -> Duration {
        self.older_than.unwrap_or(Duration::from_secs(300))
    }

    /// --action, or its default (the profile's first action decides once the table is known;
    /// `delete` until then).
    pub(crate) fn action(&self) -> ReclaimAction {
        self.action.unwrap_or(ReclaimAction::Delete)
    }

    /// --status, or its default.
    pub(crate) fn status(&self) -> i32 {
        self.status.unwrap_or(500)
    }

    /// --keep-failed-for, or its default (the storage design's 24-hour key lifetime).
    pub(crate) fn keep_failed_for(&self) -> Duration {
        self.keep_failed_for
            .unwrap_or(Duration::from_secs(24 * 3600))
    }
}

/// How evict sizes its batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BatchSizing {
    /// Always this many rows.
    Fixed(u32),
    /// Rows per batch follow the pace of the last batch so that a statement takes about `target`:
    /// the first has `start` rows, each next one at most twice the last, always within min..=max.
    Adaptive {
        target: Duration,
        start: u32,
        min: u32,
        max: u32,
    },
}

impl BatchSizing {
    /// The size of the first batch.
    pub(crate) fn first(&self) -> u32 {
        match *self {
            Self::Fixed(n) => n,
            Self::Adaptive { start, .. } => start,
        }
    }

    /// The size of the batch after one of `current` rows whose statement walked `rows` index
    /// entries in `took`; None when that says nothing (a fixed size, or too few rows to judge).
    pub(crate) fn next(&self, current: u32, rows: u64, took: Duration) -> Option<u32> {
        let Self::Adaptive {
            target, min, max, ..
        } = *self
        else {
            return None;
        };
        // Too few rows (a short last range) say little about the pace.
        if rows < u64::from(min) || took.is_zero() {
            return None;
        }
        let ideal = rows as f64 * target.as_secs_f64() / took.as_secs_f64();
        let grown = f64::from(current) * 2.0;
        // Clamped to min..=max first, so the conversion cannot truncate.
        Some(ideal.min(grown).clamp(f64::from(min), f64::from(max)) as u32)
    }

    /// The same sizing aiming at another statement time (a fixed size stays fixed).
    pub(crate) fn with_target(self, t: Duration) -> BatchSizing {
        match self {
            Self::Adaptive {
                start, min, max, ..
            } => Self::Adaptive {
                target: t,
                start,
                min,
                max,
            },
            fixed => fixed,
        }
    }

    /// How it reads in a dry run.
    pub(crate) fn describe(&self) -> String {
        match *self {
            Self::Fixed(n) => format!("{n} rows"),
            Self::Adaptive {
                target, min, max, ..
            } => format!(
                "adaptive: {min}-{max} rows, about {} ms per statement",
                target.as_secs_f64() * 1000.0
            ),
        }
    }
}

/// `idemctl reclaim`.
#[derive(Debug, Args)]
#[command(
    after_help = "Walkthrough (finding stuck keys needs the optional in_progress index, \
sql/maintenance_indexes.sql, or --allow-scan):\n  \
idemctl stats\n  \
idemctl inspect KEY --api-key-id TENANT\n  \
idemctl reclaim --dry-run\n  \
idemctl reclaim --plan plan.json\n  \
idemctl reclaim --apply plan.json\n\n\
One route's stuck keys:\n  \
idemctl reclaim --dry-run --path /v1/payments --method POST --older-than 15m\n\n\
Exit status 2 when a write is refused (no terminal and no --yes, --older-than under 1m without --force) \
or a filter is invalid or does not fit the table (--path on a table without a request path)."
)]
pub(crate) struct ReclaimArgs {
    /// Reclaim in_progress keys held longer than this (from locked_at, or created_at when locked_at
    /// is NULL), by the database clock. It must exceed the longest a request handler can run,
    /// downstream timeouts included: reclaiming a key whose owner is still working lets the request
    /// execute twice. [default: 5m]
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true, value_name = "DUR")]
    pub older_than: Option<Duration>,

    /// Allow --older-than below 1 minute.
    #[arg(long)]
    pub force: bool,

    /// Append every key reclaimed (by a sweep or by --apply) to FILE as a JSON line (its whole
    /// record before the change, the action, the reason, the time), written and fsynced before its
    /// batch commits; a commit line follows each batch. A key line without its batch's commit line
    /// may describe a key whose batch rolled back. The file is opened before anything changes.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["dry_run", "plan"])]
    pub archive: Option<PathBuf>,

    /// Only keys of this tenant (api_key_id, or the table's tenant column), in every mode. Like
    /// --path and --method, the value is compared exactly and bound as a parameter; the filters
    /// narrow the walk of the in_progress index (or of --allow-scan's scan). With --apply, a
    /// filter the plan was made with holds, and one it lacks narrows it.
    #[arg(long, value_name = "ID")]
    pub api_key_id: Option<String>,

    /// Only keys of requests to this path, as the API stores it (request_path), e.g.
    /// /v1/payments: stuck thresholds differ per route.
    #[arg(long, value_name = "PATH")]
    pub path: Option<String>,

    /// Only keys of requests with this HTTP method, as stored (request_method; POST, not post).
    #[arg(long, value_name = "METHOD")]
    pub method: Option<String>,

    /// What to do with each stuck key. [default: the profile's first action: delete for storage and
    /// explainer, release for rocket-rides]
    #[arg(long, value_enum)]
    pub action: Option<ReclaimAction>,

    /// HTTP status stored by --action fail. [default: 500]
    #[arg(long, value_parser = clap::value_parser!(i32).range(100..=599), allow_negative_numbers = true, value_name = "CODE")]
    pub status: Option<i32>,

    /// With --action fail: keep each failed key at least this long from now (its expires_at is
    /// moved later when it would come sooner), so the stored error outlives the client's retries
    /// and the next evict does not remove it at once (which would let a retry run the request
    /// again); 0s keeps expires_at as it is. No effect on a table without an expiry column, where a
    /// key expires a TTL after created_at whatever reclaim does. [default: 24h]
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DUR")]
    pub keep_failed_for: Option<Duration>,

    /// JSON object stored as the response body by --action fail [default: an RFC 9457 problem
    /// document saying the outcome is unknown].
    #[arg(long, value_name = "PATH")]
    pub body_file: Option<PathBuf>,

    /// List the keys that would be reclaimed, and their count; change nothing.
    #[arg(long, conflicts_with_all = ["apply"])]
    pub dry_run: bool,

    /// Write the preview to FILE as JSON (implies --dry-run), for review and --apply.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["apply"])]
    pub plan: Option<PathBuf>,

    /// Reclaim exactly the keys in a plan file, each only if unchanged since the preview.
    #[arg(long, value_name = "FILE")]
    pub apply: Option<PathBuf>,

    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(short = 'y', long)]
    pub yes: bool,

    /// Find stuck keys with a scan of the whole table when the optional in_progress index is
    /// missing (bounded by --statement-timeout).
    #[arg(long)]
    pub allow_scan: bool,

    /// Keys per batch (one statement, one transaction each).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000), allow_negative_numbers = true, value_name = "N")]
    pub batch_size: u32,

    /// Reclaim at most this many keys in this run.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true, value_name = "N")]
    pub limit: Option<u64>,

    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// Where evict, reclaim and stats write their metrics, and the labels they add.
#[derive(Debug, Args)]
#[command(next_help_heading = "Metrics")]
pub(crate) struct MetricsArgs {
    /// Write Prometheus metrics of the run to PATH atomically (node_exporter's textfile
    /// collector). The directory is checked before anything changes. Every run records itself,
    /// a failed one too (last run, success, end reason, duration; the last success is kept).
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,

    /// Push the same metrics to a Prometheus Pushgateway (http://host:9091 or https://...),
    /// grouped by job (idemctl_COMMAND), database, table and each --label: for a Kubernetes
    /// CronJob, which has no textfile directory. https trusts the system's root certificates.
    /// user:password@ in the URL is sent as basic auth. A failed push is one warning line; the
    /// run's exit code stands.
    #[arg(long, env = "IDEMCTL_PUSHGATEWAY", hide_env_values = true, value_parser = crate::metrics::push::parse_push_url, value_name = "URL")]
    pub pushgateway: Option<crate::metrics::PushUrl>,

    /// Trust only the CA certificates in FILE (PEM) for an https:// Pushgateway, instead of the
    /// system's root certificates.
    #[arg(
        long,
        env = "IDEMCTL_PUSHGATEWAY_CA",
        hide_env_values = true,
        value_name = "FILE"
    )]
    pub pushgateway_ca: Option<PathBuf>,

    /// Send the credentials of an http:// Pushgateway URL although plain http carries them in
    /// clear (refused otherwise, exit 2).
    #[arg(
        long,
        env = "IDEMCTL_PUSHGATEWAY_ALLOW_HTTP_AUTH",
        hide_env_values = true
    )]
    pub pushgateway_allow_http_auth: bool,

    /// Add a label to every series (repeatable), e.g. --label cluster=eu1 to tell apart two
    /// servers whose database and table names are the same. Every series already carries
    /// `database` (the database connected to) and `table`.
    #[arg(long = "label", value_parser = crate::metrics::parse_label, value_name = "KEY=VALUE")]
    pub labels: Vec<(String, String)>,
}

impl MetricsArgs {
    /// The destinations, as the recorder takes them.
    pub(crate) fn destinations(&self) -> crate::metrics::Destinations {
        crate::metrics::Destinations {
            textfile: self.textfile.clone(),
            pushgateway: crate::metrics::GatewayArgs {
                url: self.pushgateway.clone(),
                ca_file: self.pushgateway_ca.clone(),
                allow_http_auth: self.pushgateway_allow_http_auth,
            },
            labels: self.labels.clone(),
        }
    }
}

/// `idemctl completions`. Its help lists only its own argument: the connection and output options
/// every other command takes do nothing here.
#[derive(Debug, Args)]
#[command(
    help_template = "{about-with-newline}\n{usage-heading} idemctl completions <SHELL>\n\nArguments:\n{positionals}\n\nOptions:\n  -h, --help  Print help\n{after-help}",
    after_help = "\nExample: idemctl completions bash > /etc/bash_completion.d/idemctl"
)]
pub(crate) struct CompletionsArgs {
    /// The shell to generate completions for.
    pub shell: clap_complete::Shell,
}

/// PostgreSQL truncates identifiers to 63 bytes (NAMEDATALEN - 1).
const MAX_IDENT_BYTES: usize = 63;

/// Parse `[schema.]name`. Each part is an identifier as written (no SQL quoting syntax): it may
/// contain any printable character except `.`, which separates the schema. Parts are always quoted
/// when used, so nothing here can change the statement's shape.
pub(crate) fn parse_table_name(s: &str) -> Result<TableName, String> {
    let parts: Vec<&str> = s.split('.').collect();
    let (schema, name) = match parts.as_slice() {
        [name] => (None, *name),
        [schema, name] => (Some(*schema), *name),
        _ => {
            return Err(
                "expected [SCHEMA.]NAME with at most one dot, e.g. public.idempotency_keys".into(),
            );
        }
    };
    for part in schema.iter().chain(std::iter::once(&name)) {
        check_identifier(part)?;
    }
    Ok(TableName {
        schema: schema.map(str::to_owned),
        name: name.to_owned(),
    })
}

fn check_identifier(part: &str) -> Result<(), String> {
    if part.is_empty() {
        return Err("empty schema or table name; expected [SCHEMA.]NAME".into());
    }
    if part.len() > MAX_IDENT_BYTES {
        return Err(format!(
            "name is {} bytes long; PostgreSQL identifiers are at most {MAX_IDENT_BYTES} bytes",
            part.len()
        ));
    }
    if part.chars().any(|c| c.is_control()) {
        return Err("name contains a control character".into());
    }
    if part.contains('"') {
        return Err(
            "name contains a double quote; pass the table name unquoted, e.g. -t 'My Schema.keys'"
                .into(),
        );
    }
    Ok(())
}

/// Check the form of a time zone name (`UTC`, `Europe/Paris`, `Etc/GMT+3`): letters first, then
/// letters, digits, `/`, `_`, `+` and `-`. Whether the server knows it is checked once connected.
pub(crate) fn parse_time_zone(s: &str) -> Result<String, String> {
    let formed = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '+' | '-'));
    if formed {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not a time zone name: give an IANA name as pg_timezone_names lists it, e.g. UTC or Europe/Paris"
        ))
    }
}

/// Parse a humantime duration such as `30s`, `5m`, `1h30m`, `7d`; zero is refused.
pub(crate) fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// Parse a humantime duration (zero allowed).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e}; use a duration such as 500ms, 30s, 5m, 1h30m or 7d"))?;
    // Ten years is far past any sensible timeout or TTL; larger values are typing mistakes and would
    // overflow PostgreSQL's interval arithmetic.
    if d > Duration::from_secs(10 * 366 * 24 * 3600) {
        return Err("is longer than 10 years; use a duration such as 5m, 24h or 7d".into());
    }
    Ok(d)
}

/// Parse `--max-rate`: rows per second, `5000` or `5000/s`.
fn parse_rows_rate(s: &str) -> Result<f64, String> {
    let n = s.trim().strip_suffix("/s").unwrap_or(s.trim());
    match n.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "expected rows per second, a positive number such as 5000 or 5000/s, not {s:?}"
        )),
    }
}

/// Parse `--max-wal-rate`: bytes per second, with an optional unit (B, kB, MB, GB; 1 kB = 1024 B,
/// as in PostgreSQL's settings; KiB, MiB, GiB too) and an optional `/s`: `8MB/s`, `512kB`.
fn parse_bytes_rate(s: &str) -> Result<f64, String> {
    let bad = || {
        format!(
            "expected bytes per second, a positive size such as 8MB/s, 512kB or 1048576, not {s:?}"
        )
    };
    let t = s.trim();
    let t = t.strip_suffix("/s").unwrap_or(t).trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let factor: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "kB" | "KB" | "KiB" | "k" => 1024.0,
        "MB" | "MiB" | "M" => 1024.0 * 1024.0,
        "GB" | "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let v = number * factor;
    if v.is_finite() && v >= 1.0 {
        Ok(v)
    } else {
        Err(bad())
    }
}

/// Where the global options that messages name came from, read from clap's matches at parse
/// time: the flag, its environment variable, or neither (a default, or the config file later).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Given {
    /// --table or IDEMCTL_TABLE was given (else the config file's table applies).
    pub table: bool,
    /// `--database-url` or `IDEMCTL_DATABASE_URL`.
    pub database_url: Option<&'static str>,
    /// `--profile` or `IDEMCTL_PROFILE`.
    pub profile: Option<&'static str>,
    /// `--ttl` or `IDEMCTL_TTL`.
    pub ttl: Option<&'static str>,
    /// `--time-zone` or `IDEMCTL_TIME_ZONE`.
    pub time_zone: Option<&'static str>,
    /// --statement-timeout was given (else a shorter setting of the session's own may apply).
    pub statement_timeout: bool,
}

impl Given {
    fn of(m: &clap::ArgMatches) -> Given {
        Given {
            table: given_by(m, "table", "--table", "IDEMCTL_TABLE").is_some(),
            database_url: given_by(m, "database_url", "--database-url", "IDEMCTL_DATABASE_URL"),
            profile: given_by(m, "profile", "--profile", "IDEMCTL_PROFILE"),
            ttl: given_by(m, "ttl", "--ttl", "IDEMCTL_TTL"),
            time_zone: given_by(m, "time_zone", "--time-zone", "IDEMCTL_TIME_ZONE"),
            statement_timeout: given_by(m, "statement_timeout", "--statement-timeout", "")
                .is_some(),
        }
    }
}

/// Parse a command line: the options, and where the global ones came from.
pub(crate) fn parse<I, T>(args: I) -> Result<(Cli, Given), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let m = Cli::command().try_get_matches_from(args)?;
    Ok((Cli::from_arg_matches(&m)?, Given::of(&m)))
}

/// Where an option's value came from: `flag` when given on the command line, else `env` (the
/// variable's name) when set in the environment, else None; at the top level or after the
/// subcommand (global options are accepted at both).
fn given_by(
    matches: &clap::ArgMatches,
    id: &str,
    flag: &'static str,
    env: &'static str,
) -> Option<&'static str> {
    use clap::parser::ValueSource;
    let source = |m: &clap::ArgMatches| match m.value_source(id) {
        Some(ValueSource::CommandLine) => Some(flag),
        Some(ValueSource::EnvVariable) => Some(env),
        _ => None,
    };
    matches
        .subcommand()
        .and_then(|(_, sub)| source(sub))
        .or_else(|| source(matches))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn rates_parse_with_and_without_units() {
        assert_eq!(parse_rows_rate("5000"), Ok(5000.0));
        assert_eq!(parse_rows_rate("2.5/s"), Ok(2.5));
        assert!(parse_rows_rate("0").is_err());
        assert!(parse_rows_rate("-3").is_err());
        assert!(parse_rows_rate("fast").is_err());
        assert_eq!(parse_bytes_rate("1048576"), Ok(1_048_576.0));
        assert_eq!(parse_bytes_rate("8MB/s"), Ok(8.0 * 1024.0 * 1024.0));
        assert_eq!(parse_bytes_rate("512kB"), Ok(512.0 * 1024.0));
        assert_eq!(
            parse_bytes_rate("1.5 GiB/s"),
            Ok(1.5 * 1024.0 * 1024.0 * 1024.0)
        );
        assert!(parse_bytes_rate("8 parsecs").is_err());
        assert!(parse_bytes_rate("0MB").is_err());
        assert!(parse_bytes_rate("").is_err());
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    /// --help never shows a variable's value: it would print `[env: X=]` for an empty one, and a
    /// password for a URL that holds one.
    #[test]
    fn help_shows_no_environment_value() {
        let cmd = Cli::command();
        let args = cmd
            .get_arguments()
            .chain(cmd.get_subcommands().flat_map(clap::Command::get_arguments));
        for a in args.filter(|a| a.get_env().is_some()) {
            assert!(
                a.is_hide_env_values_set(),
                "--{} reads {:?}: give it hide_env_values = true",
                a.get_long().unwrap_or_default(),
                a.get_env().unwrap_or_default()
            );
        }
    }

    #[test]
    fn completions_offer_no_connection_options() {
        let cmd = command();
        let sub = cmd.find_subcommand("completions").unwrap();
        let names: Vec<&str> = sub.get_arguments().map(|a| a.get_id().as_str()).collect();
        assert_eq!(names, ["shell"]);
    }

    #[test]
    fn adaptive_batches_follow_the_statement_time_within_bounds() {
        let s = BatchSizing::Adaptive {
            target: Duration::from_millis(2),
            start: 500,
            min: 50,
            max: 10_000,
        };
        let ms = Duration::from_millis;
        assert_eq!(s.first(), 500);
        // On target: unchanged. Twice too slow: halved. Far too slow: the floor.
        assert_eq!(s.next(500, 500, ms(2)), Some(500));
        assert_eq!(s.next(500, 500, ms(4)), Some(250));
        assert_eq!(s.next(500, 500, ms(1000)), Some(50));
        // At the floor, a batch of 50 rows is still a sample, so the size can recover.
        assert_eq!(s.next(50, 50, Duration::from_micros(100)), Some(100));
        // Ten times too fast: grows, but at most doubles, and never past the ceiling.
        assert_eq!(s.next(500, 500, Duration::from_micros(200)), Some(1000));
        assert_eq!(s.next(8000, 8000, Duration::from_micros(100)), Some(10_000));
        // A batch that walked too few rows, or took no measurable time, says nothing.
        assert_eq!(s.next(500, 10, ms(50)), None);
        assert_eq!(s.next(500, 500, Duration::ZERO), None);
        let fixed = BatchSizing::Fixed(700);
        assert_eq!(fixed.first(), 700);
        assert_eq!(fixed.next(700, 700, ms(500)), None);
    }

    #[test]
    fn catch_up_and_the_flags_choose_the_sizing() {
        let sizing = |args: &[&str]| {
            let cli = Cli::try_parse_from(["idemctl", "evict"].iter().chain(args)).unwrap();
            match cli.command {
                Command::Evict(a) => a.batch_sizing(),
                _ => unreachable!(),
            }
        };
        let target = |s: BatchSizing| match s {
            BatchSizing::Adaptive { target, .. } => target,
            BatchSizing::Fixed(_) => Duration::ZERO,
        };
        assert_eq!(target(sizing(&[])), Duration::from_millis(2));
        assert_eq!(target(sizing(&["--catch-up"])), Duration::from_millis(15));
        assert_eq!(
            target(sizing(&["--catch-up", "--batch-time", "7ms"])),
            Duration::from_millis(7)
        );
        assert_eq!(sizing(&["--batch-size", "300"]), BatchSizing::Fixed(300));
    }

    #[test]
    fn table_names_parse_and_reject_tricks() {
        assert_eq!(
            parse_table_name("app.keys").unwrap(),
            TableName {
                schema: Some("app".into()),
                name: "keys".into()
            }
        );
        assert!(parse_table_name("a.b.c").is_err());
        assert!(parse_table_name("x\"; drop table y; --").is_err());
        assert!(parse_table_name("").is_err());
        assert!(parse_table_name(&"k".repeat(64)).is_err());
        assert!(parse_table_name("keys\n").is_err());
        // Odd but legal names are allowed: they are quoted when used.
        assert!(parse_table_name("keys; drop table x").is_ok());
    }

    #[test]
    fn durations_need_units_and_sane_sizes() {
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("-5m").is_err());
        assert!(parse_duration("99999y").is_err());
        assert!(parse_positive_duration("0s").is_err());
    }
}

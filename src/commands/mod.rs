//! One module per subcommand; `run` dispatches a parsed command line to it.

pub(crate) mod archive;
pub(crate) mod check;
pub(crate) mod docs;
pub(crate) mod evict;
pub(crate) mod inspect;
pub(crate) mod maintenance;
pub(crate) mod reclaim;
pub(crate) mod shards;
pub(crate) mod stats;
pub(crate) mod top;

use anyhow::Result;

use crate::cli::{Cli, Command, Given};
use crate::config::Plan;
use crate::context::Context;
use crate::domain::OutputFormat;
use crate::exit::{Exit, fail};

/// Run one parsed command line.
pub(crate) async fn run(cli: Cli, given: Given) -> Result<Exit> {
    match &cli.command {
        Command::Completions(a) => return docs::completions(a.shell),
        Command::Man => return docs::man(),
        _ => {}
    }
    if cli.global.output == OutputFormat::Prometheus && !matches!(cli.command, Command::Stats(_)) {
        return Err(fail(Exit::Usage, crate::output::PROMETHEUS_ONLY_FOR_STATS));
    }
    let pool_size = match &cli.command {
        Command::Evict(a) => usize::from(a.effective_jobs()) + 1,
        _ => 2,
    };
    // A dry run or a reclaim preview changes nothing: it is not a run to record.
    let metrics = match &cli.command {
        Command::Stats(a) => Some(("stats", a.metrics.destinations())),
        Command::Evict(a) if !a.dry_run => Some(("evict", a.metrics.destinations())),
        Command::Reclaim(a) if !a.dry_run && a.plan.is_none() => {
            Some(("reclaim", a.metrics.destinations()))
        }
        _ => None,
    };
    let plan = Plan::resolve(cli.global, &given, &crate::conn::ProcessEnv)?;
    let ctx = Context::new(plan, pool_size, metrics)?;
    let result = match &cli.command {
        Command::Inspect(a) => inspect::run(&ctx, a).await,
        Command::Stats(a) => stats::run(&ctx, a).await,
        Command::Top(a) => top::run(&ctx, a).await,
        Command::Check(a) => check::run(&ctx, a).await,
        Command::Evict(a) => evict::run(&ctx, a).await,
        Command::Reclaim(a) => reclaim::run(&ctx, a).await,
        Command::Completions(_) | Command::Man => unreachable!("handled before connecting"),
    };
    // A run that failed before recording itself (no connection, no privilege, no table, the lock
    // held) still records that it ran and failed.
    if let Err(e) = &result {
        ctx.metrics.finish_failed(e).await;
    }
    let result = match (result, ctx.metrics.unwritten()) {
        (result, None) => result,
        (result, Some(unwritten)) => {
            crate::output::say(format_args!(
                "idemctl: {}",
                crate::output::metrics_unwritten(&unwritten)
            ));
            match result {
                Ok(Exit::Success) => Ok(Exit::MetricsUnwritten),
                other => other,
            }
        }
    };
    ctx.close().await;
    result
}

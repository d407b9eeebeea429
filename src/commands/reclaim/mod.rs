//! `idemctl reclaim`: free in_progress keys whose owner died, by deleting them or by failing them
//! with a stored error response, after a preview the operator can review.
//!
//! Four modes: `--dry-run` lists the stuck keys; `--plan FILE` writes that list as JSON; `--apply
//! FILE` reclaims exactly the plan's keys that are unchanged since; the default finds and reclaims
//! stuck keys batch by batch. Every write is one statement in its own transaction that locks its
//! rows with SKIP LOCKED (a live owner is never waited on) and re-checks state and cutoff on each
//! row it changes, so a completed key is never touched. `--api-key-id`, `--path` and `--method`
//! narrow every mode to one tenant or route; `--archive` records every key a writing mode takes.
//! Flags, filters, body and plan file are checked before connecting.
//!
//! The sweep and `--apply` run over the table's placements (`placements`): a plain server is one
//! node holding one shard; on Citus each shard is worked on its worker. The reclaim lock stays on
//! the node the run connects to (one run per table); the preview, `--plan` and the counts before
//! and after run there too (a plan is made on, and applies to, that database).

mod apply;
mod placements;
mod plan;
mod preview;
mod report;
mod request;
mod sweep;
mod validation;
mod writing;

use anyhow::Result;

use crate::cli::ReclaimArgs;
use crate::context::Context;
use crate::domain::ReclaimAction;
use crate::exit::{Exit, fail};
use crate::output::reclaim as output;
use apply::apply;
use placements::resolve_layout;
use preview::{nothing_in_flight, preview};
use request::Mode;
use sweep::sweep;
use validation::{profile_action, validate};

/// Run `reclaim`.
pub(crate) async fn run(ctx: &Context, args: &ReclaimArgs) -> Result<Exit> {
    let mut req = validate(ctx, args)?;
    let client = ctx.session().await?;
    let table = ctx.table(&client).await?;
    table.require_columns()?;
    req.filter.check(&table)?;
    if !table.profile.has_in_flight_marker() {
        return nothing_in_flight(ctx, &table, &req);
    }
    match profile_action(&table, &req, args)? {
        Some(action) => req.action = action,
        None => req.no_action = true,
    }
    if req.action != ReclaimAction::Fail {
        req.body = None;
    }
    resolve_layout(ctx, &client, &table, &mut req).await?;
    if req.action == ReclaimAction::Fail && table.profile.expires_by_ttl() {
        // No expiry column to move: a failed key goes with the next evict once created_at + TTL
        // has passed, whatever --keep-failed-for says.
        if args.keep_failed_for.is_some() {
            return Err(fail(
                Exit::Usage,
                output::keep_failed_without_expiry(&table.shown()),
            ));
        }
        req.keep_failed = 0.0;
        crate::output::warn(&output::failed_keys_expire_by_ttl(
            &table.shown(),
            table.profile.ttl(),
        ));
    }
    match &req.mode {
        Mode::Preview(path) => preview(ctx, &client, &table, &req, args, path.as_deref()).await,
        Mode::Sweep => sweep(ctx, &client, &table, &req, args).await,
        Mode::Apply(path, plan) => apply(ctx, &client, &table, &req, args, path, plan).await,
    }
}

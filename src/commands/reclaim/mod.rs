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
//! On a table Citus distributes, the writes lock rows (`FOR UPDATE SKIP LOCKED`), which Citus runs
//! only within one shard, so the sweep and `--apply` run shard by shard on the workers, connected
//! directly like evict: each batch is the single-server statement on one shard, under the same
//! few-millisecond lock_timeout, in its own one-node transaction (with `--archive`, the archived
//! form, all on the worker). The reclaim lock stays on the coordinator (one run per table); the
//! preview, `--plan` and the counts before and after run through the coordinator (a plan is made
//! on, and applies to, the coordinator's database).

mod apply;
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
use crate::db::batch;
use crate::db::reclaim as reclaim_db;
use crate::domain::ReclaimAction;
use crate::exit::{Exit, fail};
use crate::output::reclaim as output;
use apply::apply;
use preview::{nothing_in_flight, preview};
use request::{Mode, ROW_LOCK_WAIT};
use sweep::sweep;
use validation::{profile_action, require_rows_by_identity, validate};

pub(crate) use preview::{Candidate, PreviewReport};
pub(crate) use report::{LeftAlone, ReclaimReport};
pub(crate) use request::action_name;

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
    let layout = crate::db::citus::layout(&client, &table).await?;
    if let Some(layout) = layout.as_ref().filter(|l| l.matches_rows_by_identity()) {
        if !matches!(req.mode, Mode::Preview(_)) {
            require_rows_by_identity(&table, layout)?;
        }
        req.route = reclaim_db::Route {
            by_identity: true,
            bound_waits: layout
                .written_through_coordinator()
                .then(|| batch::ThroughCoordinator {
                    wait: ROW_LOCK_WAIT,
                    patience: batch::HELD_REFERENCE_PATIENCE,
                    cancel: ctx.cancel.clone(),
                }),
        };
    }
    if req.action == ReclaimAction::Fail && table.profile.expires_by_ttl() {
        // No expiry column to move: a failed key goes with the next evict once created_at + TTL
        // has passed, whatever --keep-failed-for says.
        if args.keep_failed_for.is_some() {
            return Err(fail(
                Exit::Usage,
                output::keep_failed_without_expiry(&table),
            ));
        }
        req.keep_failed = 0.0;
        crate::output::warn(&output::failed_keys_expire_by_ttl(
            &table,
            table.profile.ttl(),
        ));
    }
    match &req.mode {
        Mode::Preview(path) => preview(ctx, &client, &table, &req, args, path.as_deref()).await,
        Mode::Sweep => sweep(ctx, &client, &table, &req, args).await,
        Mode::Apply(path, plan) => apply(ctx, &client, &table, &req, args, path, plan).await,
    }
}

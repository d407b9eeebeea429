//! evict on a table without an index on its expiry column (a table as an ORM's migrations ship
//! it): each batch is a page of the primary key (or another unique index), walked in order by
//! keyset pagination, reading a bounded number of index entries and deleting the expired finished
//! rows among them, skipping rows a live transaction holds. Where the walk follows age (a key from
//! a sequence), it stops at the first page in which nothing has expired. A page is one kind of
//! the batches the workers run (see `worker`): budgets, rate caps, replica lag and the pace hold
//! for it as for a range of the expiry index. The report counts the entries examined beside the
//! rows deleted.

use anyhow::Result;

use crate::cli::{BatchSizing, EvictArgs};
use crate::context::Context;
use crate::db::evict::Walk;
use crate::db::{KeyTable, Session};
use crate::exit::{Exit, fail};

/// Index entries a page reads when --batch-size does not say.
const PAGE: u32 = 2_000;

/// The pages' size: --batch-size, else [`PAGE`] (a page's cost is its entries, not its deletions,
/// so its size does not follow the statement time).
pub(super) fn sizing(args: &EvictArgs) -> BatchSizing {
    BatchSizing::Fixed(args.batch_size.unwrap_or(PAGE))
}

/// The walk of `table`, checked before any change: a unique index to walk, no flag the walk cannot
/// honour, no NO ACTION / RESTRICT foreign key referencing the table (a referenced key would fail
/// the page's DELETE: the batches through the expiry index leave such keys out; a page does not).
pub(super) async fn require(args: &EvictArgs, client: &Session, table: &KeyTable) -> Result<Walk> {
    let Some(index) = table.walk_index() else {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::nothing_to_walk(&table.shown(), &table.expiry_index_fix()),
        ));
    };
    // --min-age needs the rows' creation time on every row of a page, which the walk's statement
    // does not read yet.
    if args.min_age.is_some() {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::walk_refuses(
                &table.shown(),
                "--min-age",
                &table.expiry_index_fix(),
            ),
        ));
    }
    let keys = crate::db::queries::referencing_keys(client, table).await?;
    if keys.iter().any(|k| k.blocks()) {
        return Err(fail(
            Exit::Usage,
            crate::output::evict::walk_refuses_blocking_key(
                &table.shown(),
                &table.expiry_index_fix(),
            ),
        ));
    }
    Ok(Walk::new(table, index))
}

/// Say once per run that it walks, and what the expiry index would save.
pub(super) fn say(ctx: &Context, args: &EvictArgs, table: &KeyTable, walk: &Walk) {
    ctx.output.note(&crate::output::evict::walking(
        &table.shown(),
        &walk.index,
        args.batch_size.unwrap_or(PAGE),
        walk.follows_age,
        &table.expiry_index_fix(),
    ));
}

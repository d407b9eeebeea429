//! The steps reclaim's writing runs share: the table's reclaim lock, the confirmation, the batch
//! statements and the archive.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};

use super::request::{ROW_LOCK_WAIT, Request, action_name};
use crate::cli::ReclaimArgs;
use crate::commands::archive::Archive;
use crate::context::Context;
use crate::db::batch;
use crate::db::lock::{self, LockClass};
use crate::db::reclaim as reclaim_db;
use crate::db::{KeyTable, Session};
use crate::domain::ReclaimAction;
use crate::exit::{Exit, fail};
use crate::output::reclaim as output;
use crate::report::reclaim::ReclaimReport;

/// Take the table's reclaim lock and keep every row wait to a few milliseconds for the session
/// (behind a transaction pooler: no lock, and the wait set in each batch's transaction).
pub(super) async fn begin_writes(ctx: &Context, client: &Session, table: &KeyTable) -> Result<()> {
    let scope = lock::acquire(client, table, LockClass::Reclaim).await?;
    if scope.pooler_note(ctx.route()) {
        ctx.output
            .note(&crate::output::db::pooler_note(LockClass::Reclaim.name()));
    }
    batch::limit_row_waits(client, ROW_LOCK_WAIT)
        .await
        .context(crate::report::failure::Step::SetUpReclaimSession)
}

/// Ask on the terminal unless --yes. `validate` has already refused a run without a terminal.
pub(super) fn confirm(args: &ReclaimArgs, question: &str) -> Result<()> {
    if args.yes {
        return Ok(());
    }
    let mut err = std::io::stderr().lock();
    write!(err, "{question} [y/N] ")
        .and_then(|()| err.flush())
        .context(crate::report::failure::Step::AskConfirmation)?;
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .context(crate::report::failure::Step::ReadConfirmation)?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        return Ok(());
    }
    Err(fail(Exit::Usage, output::NOT_CONFIRMED))
}

/// The confirmation question, worded by the output layer.
pub(super) fn question(table: &KeyTable, req: &Request, count: output::AskedCount) -> String {
    output::question(&output::Asked {
        table: &table.shown(),
        action: req.action,
        status: req.status,
        filter: &req.filter,
        older_than: req.older_than,
        count,
    })
}

/// The action's statements for this table and filters, and the client-side deadline of each
/// answer.
pub(super) fn statements(
    ctx: &Context,
    table: &KeyTable,
    req: &Request,
) -> Result<reclaim_db::Statements> {
    let deadline = ctx.answer_deadline();
    reclaim_db::Statements::new(table, req.action, &req.filter, deadline, req.route.clone())
}

/// `--archive`: the file opened for appending before any change (exit 2 when it cannot be), for a
/// sweep (`plan` None) or an apply.
pub(super) fn open_archive(args: &ReclaimArgs, plan: Option<&Path>) -> Result<Option<Archive>> {
    args.archive
        .as_deref()
        .map(|path| Archive::open(path, plan))
        .transpose()
}

/// What `--action fail` stores, for the batch statements (None for the other actions).
pub(super) fn fail_with(req: &Request) -> Option<reclaim_db::FailWith<'_>> {
    match &req.body {
        Some(body) if req.action == ReclaimAction::Fail => Some(reclaim_db::FailWith {
            status: req.status,
            body,
            keep_failed: req.keep_failed,
        }),
        _ => None,
    }
}

/// What the archive says about each key the run takes.
pub(super) fn archive_why(req: &Request) -> crate::commands::archive::Why<'_> {
    crate::commands::archive::Why {
        action: action_name(req.action),
        older_than: req.older_than,
        filter: &req.filter,
    }
}

/// What a failed batch of `want` keys means for the run: it was interrupted by a signal (rolled
/// back whole), or it exceeded statement_timeout and is done again at the size returned; any
/// other failure ends the run with [`failed`]'s error.
pub(super) fn after_failure(
    ctx: &Context,
    report: &ReclaimReport,
    e: anyhow::Error,
    want: u64,
) -> Result<Option<u64>> {
    if ctx.cancel.requested() {
        return Ok(None);
    }
    match batch::smaller_after_timeout(&e, want, false) {
        Some(smaller) => Ok(Some(smaller)),
        None => Err(failed(ctx, report, e, want)),
    }
}

/// The error that ends the run after a batch of `want` keys failed (not on a signal, and not a
/// timeout a smaller batch can avoid).
pub(super) fn failed(
    ctx: &Context,
    report: &ReclaimReport,
    e: anyhow::Error,
    want: u64,
) -> anyhow::Error {
    if batch::timed_out(&e, ctx.cancel.requested()) {
        let timeout = ctx
            .answer_deadline()
            .saturating_sub(crate::conn::ANSWER_MARGIN);
        return report.smallest_timed_out(e, timeout);
    }
    report.batch_error(e, want)
}

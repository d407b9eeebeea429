//! `idemctl reclaim`: free in_progress keys whose owner died.

use anyhow::Result;

use crate::cli::ReclaimArgs;
use crate::context::Context;
use crate::exit::{Exit, fail};

/// Run `reclaim`.
pub async fn run(_ctx: &Context, _args: &ReclaimArgs) -> Result<Exit> {
    Err(fail(Exit::Internal, "reclaim is not available in this build"))
}

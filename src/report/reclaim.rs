//! What reclaim hands the output layer to word: how a batch of a writing run ended the run.

use std::time::Duration;

/// Why a batch ended a writing run (the batches before it are committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchEnd {
    /// It met a row a live transaction holds on a table written through the Citus coordinator,
    /// past its patience, and was rolled back.
    HeldReference,
    /// It could not get a lock in `tries` tries, and was rolled back.
    LockTimeout { tries: u32 },
    /// Any other failure the server reported; it was rolled back.
    Failed,
    /// Its connection was lost: the batch in flight (`in_flight` keys at most) may or may not
    /// have committed.
    Lost { in_flight: u64 },
    /// A batch of one key still exceeded statement_timeout (`statement_timeout`) after the
    /// batches were made smaller; it was rolled back.
    SmallestTimedOut { statement_timeout: Duration },
}

/// A writing run ended by a batch: which batch, and what the earlier ones reclaimed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchFailed {
    /// The failed batch's number, from 1.
    pub(crate) batch: u64,
    /// Keys reclaimed by the committed batches before it.
    pub(crate) reclaimed: u64,
    pub(crate) end: BatchEnd,
}

//! Why idemctl did or left something, in words: the context of an error chain (what a command was
//! doing), why --drop-partitions kept a partition, why a key was archived and why evict could not
//! pace itself. The values come from the commands; the words are written here, once.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::report::evict::{KeptBecause, PaceSignal};
use crate::report::failure::{FileLimit, Step};

impl fmt::Display for FileLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; raise the open-file limit (ulimit -n)", self.0)
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&step_failed(*self))
    }
}

/// The context an error gets from the step that met it: `failed to ...`.
pub(crate) fn step_failed(step: Step) -> String {
    match step {
        Step::OpenExtraWorker => "failed to open a session for an extra --jobs worker",
        Step::ReachShards => "failed to reach the key table's shards on the Citus workers",
        Step::SetUpEvictSession => "failed to set up the evict session",
        Step::MakeDeletesDurable => "failed to make the deleted rows durable",
        Step::FindNextRange => "failed to find the next batch's range",
        Step::MeasureRoundTrip => "failed to measure the round trip to the server",
        Step::CountInProgressInRange => {
            "failed to count the expired in_progress keys of a batch's range"
        }
        Step::CountReferenced => {
            "failed to count the keys a batch left because they are still referenced"
        }
        Step::CountTooYoung => "failed to count rows kept back by --min-age",
        Step::BatchLost => "a batch lost its connection",
        Step::BatchRolledBack => "a batch failed and was rolled back",
        Step::EncodePlan => "failed to encode the plan",
        Step::SetUpReclaimSession => "failed to set up the reclaim session",
        Step::AskConfirmation => "failed to ask for confirmation",
        Step::ReadConfirmation => "failed to read the confirmation",
        Step::ListenForSigterm => "failed to listen for SIGTERM",
        Step::ListenForSigint => "failed to listen for SIGINT",
        Step::StartRuntime => "failed to start the async runtime",
        Step::SetUpTerminal => "failed to set up the terminal for the live view",
        Step::DrawLiveView => "failed to draw the live view",
    }
    .to_owned()
}

impl Serialize for KeptBecause {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&kept_because(*self))
    }
}

/// Why --drop-partitions left a partition to the batches (the summary's and the JSON's words).
pub(crate) fn kept_because(why: KeptBecause) -> String {
    match why {
        KeptBecause::NotOwner => "the role does not own it, so it cannot drop it".to_owned(),
        KeptBecause::HoldsInProgress => "it holds an in_progress key".to_owned(),
        KeptBecause::HoldsUnexpired => "it holds a key that has not expired".to_owned(),
        KeptBecause::LocksNotGranted { ms } => {
            format!("its locks were not granted within {ms}ms (a live request was using the table)")
        }
        KeptBecause::Dependents => "other objects depend on it".to_owned(),
        KeptBecause::RunStopped => "not tried: the run stopped first".to_owned(),
        KeptBecause::EarlierLocksNotGranted => "not tried: the locks of the partitions before it \
                                               were not granted (the table is busy)"
            .to_owned(),
    }
}

/// Why reclaim archived a key, as its archive line says: held in flight past --older-than, and,
/// when a plan was applied, listed in it and unchanged since.
pub(crate) fn archived_because(older_than_secs: impl fmt::Display, plan: Option<&str>) -> String {
    match plan {
        None => format!("in_progress, held longer than --older-than ({older_than_secs}s)"),
        Some(plan) => format!(
            "in the plan {plan}, unchanged since, in_progress and held longer than its \
             --older-than ({older_than_secs}s)"
        ),
    }
}

/// Why evict cannot pace itself by the other sessions' activity.
pub(crate) fn activity_hidden_from(role: &str) -> String {
    format!("role {role} cannot see other sessions' activity (grant it pg_monitor)")
}

impl Serialize for PaceSignal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&pace_signal(*self))
    }
}

/// A signal the adaptive pace watches, as the report lists it.
pub(crate) fn pace_signal(signal: PaceSignal) -> String {
    match signal {
        PaceSignal::Activity => {
            "pg_stat_activity: other sessions' activity, waits and statement age"
        }
        PaceSignal::OwnBatchTime => "evict's own batch time per row",
        PaceSignal::Interval => "every 200 ms",
        PaceSignal::InsertedRows => {
            "the table's inserted-row counter: removal kept at >= 10x its rate, <= 20x while \
             others are active"
        }
    }
    .to_owned()
}

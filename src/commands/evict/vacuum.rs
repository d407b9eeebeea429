//! `evict --vacuum`: after a run that evicted more than `--vacuum-min-rows` keys, `VACUUM (ANALYZE)`
//! the table, or each leaf partition of a partitioned table in turn, so the dead rows the run left
//! are reclaimed now rather than when autovacuum gets round to it.
//!
//! VACUUM cannot run inside a transaction block: each one is sent alone, in autocommit, on the raw
//! connection (behind a transaction pooler too, where it is its own transaction on whichever server
//! session the pooler lends; idemctl's SET LOCAL settings do not apply to it there). On a session
//! idemctl owns, statement_timeout is lifted for it (a large table takes longer than a batch) and
//! lock_timeout stays: a VACUUM that cannot lock its relation within it (DDL, another VACUUM) is
//! reported and the next relation is tried. The privilege VACUUM needs (owner, superuser, database
//! owner; MAINTAIN from PostgreSQL 17) is checked for every relation before the run changes anything.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::db::{KeyTable, Session};
use crate::exit::{Exit, fail};
use crate::metrics::Series;
use crate::output::prometheus::Metrics;

pub(crate) use crate::db::vacuum::Target;
pub(crate) use crate::report::evict::Vacuumed;
pub(crate) use crate::report::evict::{Skipped, VacuumReport};

/// The relations of `table` to vacuum; refuses (exit 6) when the role may not vacuum any of them.
pub(crate) async fn require_privilege(client: &Session, table: &KeyTable) -> Result<Vec<Target>> {
    let targets = crate::db::vacuum::targets(client, table).await?;
    let denied: Vec<&Target> = targets.iter().filter(|t| !t.may_vacuum).collect();
    if let Some(first) = denied.first() {
        let names: Vec<&str> = denied.iter().map(|t| t.relation.as_str()).collect();
        return Err(fail(
            Exit::PermissionDenied,
            crate::output::evict::vacuum_denied(&names, &first.owner),
        ));
    }
    Ok(targets)
}

impl Serialize for Skipped {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&crate::output::evict::vacuum_skipped(self))
    }
}

impl VacuumReport {
    pub(crate) fn skipped(min_rows: u64, why: Skipped) -> VacuumReport {
        VacuumReport {
            min_rows,
            ran: false,
            skipped: Some(why),
            relations: Vec::new(),
            seconds: 0.0,
        }
    }

    pub(crate) fn failed(&self) -> usize {
        self.relations.iter().filter(|r| r.error.is_some()).count()
    }

    /// Add the VACUUM's figures to `m`.
    pub(crate) fn metrics(&self, m: &mut Metrics) {
        m.set(Series::EvictVacuumRan, self.ran);
        m.set(Series::EvictVacuumSeconds, self.seconds);
        let vacuumed = self.relations.len() - self.failed();
        m.set(Series::EvictVacuumRelations, vacuumed);
        m.set(Series::EvictVacuumFailedRelations, self.failed());
    }
}

/// VACUUM (ANALYZE) each target in turn on `session`, outside any transaction.
pub(crate) async fn run(
    session: &Session,
    targets: &[Target],
    min_rows: u64,
    lock_timeout: std::time::Duration,
) -> VacuumReport {
    let started = Instant::now();
    crate::db::vacuum::prepare(session, lock_timeout).await;
    let mut relations = Vec::new();
    for t in targets {
        let t0 = Instant::now();
        let result = crate::db::vacuum::vacuum_analyze(session, &t.relation).await;
        relations.push(Vacuumed {
            relation: t.relation.clone(),
            seconds: t0.elapsed().as_secs_f64(),
            error: result.err(),
        });
    }
    VacuumReport {
        min_rows,
        ran: true,
        skipped: None,
        relations,
        seconds: started.elapsed().as_secs_f64(),
    }
}

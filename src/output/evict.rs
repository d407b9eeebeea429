//! evict's reports for people: the dry run (candidates, sample, statement and plan) and the run's
//! summary, with the partition tables both share.
//! Names from the catalog are escaped here, where they are printed.

use crate::domain::ttl_text;
use crate::ident::{quote_ident, quote_ident_if_needed};
use crate::output::{
    Doc, escape_controls, escape_lines, human_bytes, human_secs, key_cells, key_columns, sanitize,
};
use crate::report::evict::Expiry;
use crate::report::evict::{Dropped, Kept};
use crate::report::evict::{DryRunReport, EvictReport, WalkPreview};
use crate::report::evict::{GaveUp, Lagging};
use crate::report::evict::{
    INSERT_MULTIPLE, PRESENT_MULTIPLE, PaceReport, PaceStatus, Reason, State,
};
use crate::report::evict::{RateProgress, RateReport};
use crate::report::evict::{Skipped, VacuumReport};
use crate::report::rows::Capped;
use crate::report::rows::Layout;
use crate::report::rows::SampleKey;
use crate::report::run::EndReason;
use crate::report::table::Table;

/// The summary of a run: what it evicted and left, its batches, pace and limits, the Citus
/// workers' table and the partitions it dropped.
pub(crate) fn summary(r: &EvictReport) -> Doc {
    let mut d = Doc::default();
    let capped = |c: &Option<Capped>| c.map_or_else(|| "-".to_owned(), |c| c.to_string());
    let mut fields: Vec<(String, String)> = vec![
        ("table".into(), sanitize(&r.table)),
        ("expiry".into(), expiry_text(&r.expiry)),
        ("end reason".into(), r.end_reason.as_str().into()),
        ("rows evicted".into(), r.rows_evicted.to_string()),
        ("batches".into(), r.batches.to_string()),
        ("elapsed".into(), format!("{:.2}s", r.elapsed_seconds)),
        ("rate".into(), format!("{:.0} rows/s", r.rows_per_second)),
        (
            "skipped (locked by live requests)".into(),
            r.skipped_locked.to_string(),
        ),
        (
            "skipped (younger than --min-age)".into(),
            r.skipped_min_age.to_string(),
        ),
        (
            "expired in_progress left (see reclaim)".into(),
            capped(&r.expired_in_progress_left),
        ),
        ("expired backlog left".into(), capped(&r.backlog_left)),
    ];
    if r.skipped_referenced > 0 {
        fields.insert(
            8,
            (
                "skipped (still referenced)".into(),
                r.skipped_referenced.to_string(),
            ),
        );
    }
    // Batch figures describe batches that deleted something; a run that evicted nothing has none.
    if r.rows_evicted > 0 {
        fields.extend([
            (
                "batch latency p50 / p99 / max".into(),
                format!(
                    "{:.1} / {:.1} / {:.1} ms",
                    r.batch_ms_p50, r.batch_ms_p99, r.batch_ms_max
                ),
            ),
            (
                "rows per batch p50 / max".into(),
                format!("{} / {}", r.batch_rows_p50, r.batch_rows_max),
            ),
        ]);
    }
    d.fields(None, fields);
    d.fields(None, extra_fields(r));
    if let Some(c) = &r.citus {
        crate::output::citus::evict_workers(&mut d, c);
    }
    partition_blocks(
        &mut d,
        &r.dropped_partitions,
        &r.partitions_kept,
        "partitions dropped",
    );
    d
}

/// The summary's second block: partitions, replica lag, the walk or the pace, rate limit, vacuum.
fn extra_fields(r: &EvictReport) -> Vec<(String, String)> {
    let mut extra = Vec::new();
    if !r.dropped_partitions.is_empty() || !r.partitions_kept.is_empty() {
        extra.push((
            "partitions dropped".into(),
            format!(
                "{} (about {} rows)",
                r.dropped_partitions.len(),
                r.rows_dropped_estimate
            ),
        ));
    }
    if let Some(limit) = r.replica_lag_limit_seconds {
        extra.push((
            "paused for replica lag".into(),
            format!(
                "{} times, {} in all (limit {}, worst lag seen {})",
                r.replica_lag_waits,
                human_secs(r.replica_lag_wait_seconds),
                human_secs(limit),
                human_secs(r.replica_lag_max_seconds)
            ),
        ));
    }
    match &r.walk {
        Some(w) => extra.push((
            "walked (no expiry index)".into(),
            format!(
                "{}: {} rows examined for {} evicted ({:.1} index entries per evicted row){}",
                sanitize(&w.index),
                w.rows_examined,
                r.rows_evicted,
                w.rows_examined as f64 / r.rows_evicted.max(1) as f64,
                if w.stopped_early {
                    "; stopped at a page in which nothing had expired (the key follows age)"
                } else {
                    ""
                }
            ),
        )),
        None => extra.push(("pace".into(), pace_summary(&r.pace))),
    }
    if let Some(rate) = &r.rate_limit {
        extra.push(("rate limit".into(), rate_summary(rate)));
    }
    if let Some(v) = &r.vacuum {
        extra.push(("vacuum".into(), vacuum_summary(v)));
    }
    extra
}

/// How keys expire: `created_at + 24h (TTL from --ttl)`, or `expires_at (the table's expiry
/// column)`, naming a TTL that was given but does not apply.
pub(crate) fn expiry_text(e: &Expiry) -> String {
    let ttl = |secs: f64| ttl_text(std::time::Duration::from_secs_f64(secs));
    let from = e
        .ttl_from
        .as_deref()
        .map(|f| format!(" from {}", sanitize(f)))
        .unwrap_or_default();
    let column = sanitize(&e.column);
    match (e.ttl_seconds, e.ttl_ignored_seconds) {
        (Some(t), _) => format!("{column} + {} (TTL{from})", ttl(t)),
        (None, Some(t)) => format!(
            "{column} (the table's expiry column; the TTL {}{from} does not apply)",
            ttl(t)
        ),
        (None, None) => format!("{column} (the table's expiry column)"),
    }
}

/// The note a walk prints once: which index it walks, and what the expiry index would save.
pub(crate) fn walking(
    table: &Table,
    index: &str,
    page: u32,
    follows_age: bool,
    fix: &str,
) -> String {
    format!(
        "table {} has no index on {}: evict walks {} in pages of {page} entries, reading every key to find the expired ones{}; the index would let each batch read only expired keys: {fix}",
        table.display(),
        sanitize(&table.profile.expiry_column),
        sanitize(index),
        if follows_age {
            " (it stops at the first page in which nothing has expired: the key follows age)"
        } else {
            ""
        }
    )
}

/// What the walk (no expiry index) does not handle.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WalkRefusal {
    /// A NO ACTION / RESTRICT foreign key referencing the table (a referenced key would fail the
    /// page's DELETE).
    BlockingKey,
}

/// Something the walk (no expiry index) does not handle.
pub(crate) fn walk_refuses(table: &Table, what: WalkRefusal, fix: &str) -> String {
    let what = match what {
        WalkRefusal::BlockingKey => "a NO ACTION / RESTRICT foreign key referencing the table",
    };
    format!(
        "table {} has no index on {}, so evict would walk its unique index, which does not handle {what} yet; nothing was changed; create the index with: {fix}",
        table.display(),
        sanitize(&table.profile.expiry_column)
    )
}

/// --drop-partitions on a table partitioned on a column that does not bound its expiry (its creation
/// time, with an expiry column of its own), without an index on the expiry column.
pub(crate) fn drop_partitions_unproven(table: &Table, key: &str, fix: &str) -> String {
    let expiry = sanitize(&table.profile.expiry_column);
    format!(
        "table {} is partitioned on {}, which does not bound {expiry}, and has no index on {expiry}, so --drop-partitions cannot prove a partition's keys have all expired without reading the partition while it holds the table's lock; nothing was changed: run evict without --drop-partitions (it walks the table's unique index), or create the index with: {fix}",
        table.display(),
        sanitize(key)
    )
}

/// Neither an expiry index nor a unique index to walk.
pub(crate) fn nothing_to_walk(table: &Table, fix: &str) -> String {
    format!(
        "table {} has no index on {} and no unique index of plain NOT NULL columns to walk, so expired keys cannot be found in bounded batches; create the index with: {fix}",
        table.display(),
        sanitize(&table.profile.expiry_column)
    )
}

/// Tables of dropped (or droppable) partitions and of those left to the batches.
pub(crate) fn partition_blocks(doc: &mut Doc, dropped: &[Dropped], kept: &[Kept], title: &str) {
    if !dropped.is_empty() {
        let rows = dropped
            .iter()
            .map(|d| {
                vec![
                    sanitize(&d.name),
                    bound_text(d),
                    d.estimated_rows.to_string(),
                    human_bytes(d.total_bytes),
                ]
            })
            .collect();
        doc.rows(
            Some(title),
            &["partition", "bounds", "estimated rows", "size"],
            rows,
        );
    }
    if !kept.is_empty() {
        let rows = kept
            .iter()
            .map(|k| vec![sanitize(&k.name), super::reasons::kept_because(k.reason)])
            .collect();
        doc.rows(
            Some("partitions left to the batches"),
            &["partition", "why"],
            rows,
        );
    }
}

/// A partition's bound for the human summary: its range when known, else as PostgreSQL prints it
/// (escaped for a terminal).
fn bound_text(d: &Dropped) -> String {
    sanitize(d.bound.strip_prefix("FOR VALUES ").unwrap_or(&d.bound))
}

/// The dry run: what would go, a sample of it, the partitions and replicas when asked, and the
/// batch statement with the plan of its first batch.
/// In place of the plan, for a role that may not delete.
pub(crate) fn plan_needs_delete() -> &'static str {
    "(not shown: explaining the DELETE needs the DELETE privilege, which this role lacks)"
}

/// In place of the walk's page plan, for a role that may not delete or lock rows.
pub(crate) fn page_plan_needs_delete() -> &'static str {
    "(not shown: explaining the page's DELETE needs the DELETE privilege and the right to lock rows (UPDATE on a column), which this role lacks)"
}

/// In place of the walk's page plan on a table Citus distributes: a run walks each shard on its
/// worker, and the coordinator cannot plan the page over the whole table.
pub(crate) fn page_plan_on_shards() -> &'static str {
    "(not shown: a run walks each shard's copy of the index on its worker, one page at a time; the coordinator cannot plan the page over the distributed table)"
}

pub(crate) fn dry_run(r: &DryRunReport) -> Doc {
    let mut fields: Vec<(String, String)> = vec![
        ("table".into(), sanitize(&r.table)),
        ("expiry".into(), expiry_text(&r.expiry)),
        ("would evict".into(), r.would_evict.to_string()),
        (
            "oldest candidate".into(),
            candidate(r.oldest_candidate, r, "oldest"),
        ),
        (
            "newest candidate".into(),
            candidate(r.newest_candidate, r, "newest"),
        ),
        ("batch size".into(), r.batch_sizing.clone()),
    ];
    if let Some(n) = r.would_skip_referenced {
        fields.insert(
            2,
            (
                "would skip (still referenced)".into(),
                format!(
                    "{n} (a NO ACTION / RESTRICT foreign key still references them; they go once nothing does)"
                ),
            ),
        );
    }
    if r.min_age {
        fields.push((
            "held back by --min-age".into(),
            if r.walked_all {
                format!(
                    "{} (among the first {} expired keys)",
                    r.held_back_by_min_age, r.walked
                )
            } else {
                r.held_back_by_min_age.to_string()
            },
        ));
    }
    if let (Some(dropped), Some(rows)) = (&r.would_drop_partitions, r.rows_dropped_estimate) {
        fields.push((
            "would drop partitions".into(),
            format!(
                "{} (about {rows} rows, if their locks are granted at once; those rows are included above)",
                dropped.len(),
            ),
        ));
    }
    if let Some(replicas) = &r.replicas {
        fields.push(("streaming replicas".into(), replicas_text(replicas)));
    }
    if let Some(w) = &r.walk {
        walk_fields(&mut fields, w);
    }
    let mut doc = Doc::default();
    doc.fields(None, fields);
    let walked = r.walk.as_ref().map(|w| sanitize(&w.index));
    sample_blocks(&mut doc, &r.sample, &r.held_back_sample, walked.as_deref());
    if let (Some(dropped), Some(kept)) = (&r.would_drop_partitions, &r.partitions_kept) {
        partition_blocks(&mut doc, dropped, kept, "partitions that would be dropped");
    }
    for n in &r.notes {
        doc.text(format!("note: {}", escape_controls(n)));
    }
    let statement = match r.walk {
        Some(_) => {
            "statement (per page: $1 = the index entries a page reads, $2 = min-age seconds, $3... = the previous page's last key; plan of the first page)"
        }
        None => {
            "statement (per batch: $1, $2 = the range evict_range_end.sql claims, $3 = min-age seconds; plan of the first batch)"
        }
    };
    doc.text(format!("{statement}:\n{}", escape_lines(&r.statement)));
    doc.text(format!("plan:\n{}", escape_lines(&r.plan.join("\n"))));
    doc
}

/// The oldest or newest candidate (`end`). The dry run seeks each among at most its cap of expired
/// keys from that end: when every one of them is still referenced, none is found there, though the
/// run may delete keys beyond them.
fn candidate(
    t: Option<crate::report::timestamp::Timestamp>,
    r: &DryRunReport,
    end: &str,
) -> String {
    match (t, r.would_skip_referenced) {
        (Some(t), _) => crate::output::at(t),
        (None, Some(skip)) if skip.at_least => format!(
            "not found: the {end} expired keys the dry run reads (up to its cap) are all still referenced"
        ),
        (None, _) => "-".into(),
    }
}

/// The dry run's walk (no expiry index): the index, the pages it would read and why it would stop.
fn walk_fields(fields: &mut Vec<(String, String)>, w: &WalkPreview) {
    if let Some(f) = fields.iter_mut().find(|(k, _)| k == "batch size") {
        f.1 = format!("pages of {} index entries", w.page_size);
    }
    let end = match w.end_reason {
        EndReason::Drained if w.stopped_early => {
            "then stop at a page in which nothing has expired (the key follows age)".to_owned()
        }
        EndReason::Drained => "to the end of the index".to_owned(),
        EndReason::RowBudget => "then stop at --max-rows".to_owned(),
        EndReason::BatchBudget => "then stop at --max-batches".to_owned(),
        EndReason::TimeBudget => "then stop at --max-runtime".to_owned(),
        other => format!("then stop ({})", other.as_str()),
    };
    fields.push((
        "would walk".into(),
        format!(
            "{} ({} index entries in {} page{}, {end}; no index on the expiry column)",
            sanitize(&w.index),
            w.rows_examined,
            w.pages,
            if w.pages == 1 { "" } else { "s" }
        ),
    ));
}

/// Tables of the sampled keys: oldest expiry first, or in the order of the index `walked`.
fn sample_blocks(doc: &mut Doc, evict: &[SampleKey], kept: &[SampleKey], walked: Option<&str>) {
    // Keys of a table without a tenant column have none to show.
    let scope = evict.iter().chain(kept).find_map(|k| k.scope.as_ref());
    let cells = |k: &SampleKey| {
        let mut cells = key_cells(scope, k.scope.as_ref(), k.key.as_deref());
        cells.extend([
            crate::output::at(k.expires_at),
            k.created_at
                .map_or_else(|| "-".to_owned(), crate::output::at),
        ]);
        cells
    };
    let header = key_columns(scope, &["expires_at", "created_at"]);
    if !evict.is_empty() {
        doc.rows(
            Some(&match walked {
                Some(index) => format!("The first keys it would evict (in the order of {index}):"),
                None => "The first keys it would evict (oldest expiry first):".to_owned(),
            }),
            &header,
            evict.iter().map(cells).collect(),
        );
    }
    if !kept.is_empty() {
        doc.rows(
            Some(&match walked {
                Some(index) => format!(
                    "The first keys --min-age holds back (created too recently; in the order of {index}):"
                ),
                None => "The first keys --min-age holds back (created too recently):".to_owned(),
            }),
            &header,
            kept.iter().map(cells).collect(),
        );
    }
}

/// The replicas as the dry run shows them.
fn replicas_text(replicas: &[crate::report::rows::Replica]) -> String {
    if replicas.is_empty() {
        return "none visible (nothing would pause)".into();
    }
    replicas
        .iter()
        .map(|r| {
            let lag = r
                .replay_lag_seconds
                .map_or_else(|| "idle".to_owned(), human_secs);
            format!(
                "{} ({}, {} behind, replay_lag {lag})",
                sanitize(&r.name),
                r.state,
                human_bytes(r.behind_bytes)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// "5000 rows/s"-style text.
fn rows_rate(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0} rows/s")
    } else {
        format!("{r} rows/s")
    }
}

/// "1.0 MiB/s"-style text.
fn bytes_rate(b: f64) -> String {
    format!("{}/s", human_bytes(b.round() as i64))
}

/// The progress bar's line for --max-rate and --max-wal-rate: the caps and the WAL rate so far.
pub(crate) fn rate_status(p: &RateProgress) -> String {
    let mut parts = Vec::new();
    if let Some(r) = p.max_rows_per_second {
        parts.push(format!("max {}", rows_rate(r)));
    }
    if let Some(w) = p.max_wal_bytes_per_second {
        parts.push(format!(
            "WAL {} of max {}",
            bytes_rate(p.wal_bytes_per_second),
            bytes_rate(w)
        ));
    }
    parts.join(", ")
}

/// The summary's line for the rate caps: each cap and what the run achieved, and the waits.
pub(crate) fn rate_summary(r: &RateReport) -> String {
    let mut parts = Vec::new();
    if let Some(max) = r.max_rows_per_second {
        parts.push(format!(
            "max {} (achieved {})",
            rows_rate(max),
            rows_rate(r.rows_per_second)
        ));
    }
    if let (Some(w), Some(bytes), Some(rate)) = (
        r.max_wal_bytes_per_second,
        r.wal_bytes,
        r.wal_bytes_per_second,
    ) {
        parts.push(format!(
            "max {} WAL (wrote {}, {})",
            bytes_rate(w),
            human_bytes(i64::try_from(bytes).unwrap_or(i64::MAX)),
            bytes_rate(rate)
        ));
    }
    parts.push(format!(
        "over {} of batches; waited {} times, {} in all",
        human_secs(r.seconds),
        r.waits,
        human_secs(r.wait_seconds)
    ));
    parts.join("; ")
}

/// Why --vacuum did not run, in words (the summary's line and the JSON's `skipped`).
pub(crate) fn vacuum_skipped(s: &Skipped) -> String {
    match s {
        Skipped::RunEnded(reason) => format!("the run ended with {}", reason.as_str()),
        Skipped::TooFew { evicted, min_rows } => {
            format!("{evicted} keys evicted, not more than --vacuum-min-rows {min_rows}")
        }
        Skipped::NoSession => "no session to run it on".to_owned(),
    }
}

/// The summary's line for --vacuum: what it vacuumed, and each relation whose VACUUM failed (its
/// name as the catalog holds it and the server's message, both escaped for a terminal here).
pub(crate) fn vacuum_summary(v: &VacuumReport) -> String {
    if let Some(why) = &v.skipped {
        return format!("not run: {}", vacuum_skipped(why));
    }
    let ok = v.relations.len() - v.failed();
    let mut text = format!(
        "VACUUM (ANALYZE) of {ok} of {} relation{} in {}",
        v.relations.len(),
        if v.relations.len() == 1 { "" } else { "s" },
        human_secs(v.seconds)
    );
    for r in v.relations.iter().filter(|r| r.error.is_some()) {
        text.push_str(&format!(
            "; {} failed: {}",
            escape_controls(&r.relation),
            sanitize(r.error.as_deref().unwrap_or(""))
        ));
    }
    text
}

/// The warning after a run whose --vacuum failed on some relation.
pub(crate) fn vacuum_warning(v: &VacuumReport) -> String {
    format!("evict --vacuum: {}", vacuum_summary(v))
}

/// The worst replica as the pause and the warning name it.
fn lagging(r: &Lagging) -> String {
    format!(
        "replica {} is {} behind ({} of WAL not replayed)",
        sanitize(&r.name),
        human_secs(r.lag_seconds),
        human_bytes(r.behind_bytes)
    )
}

/// The progress bar's line while --max-replica-lag pauses the run.
pub(crate) fn replica_pause(worst: &Lagging, limit_seconds: f64) -> String {
    format!(
        "paused: {} (limit {})",
        lagging(worst),
        human_secs(limit_seconds)
    )
}

/// The warning after a run --max-replica-wait ended.
pub(crate) fn replica_gave_up(g: &GaveUp) -> String {
    format!(
        "stopped before the backlog was drained: {} after waiting {}; the next run continues",
        lagging(&g.worst),
        human_secs(g.waited_seconds)
    )
}

/// Why the adaptive pace backed off, in words.
fn backoff_reason(r: Reason) -> &'static str {
    match r {
        Reason::ForegroundWaiting => "other sessions waiting on WAL, I/O or locks",
        Reason::ForegroundSlower => "other sessions' statements slower",
        Reason::BatchesSlower => "evict's batches slower",
    }
}

/// The warning when the adaptive pace cannot see the foreground and falls back to the fixed one.
pub(crate) fn pace_fallback(why: &str) -> String {
    format!(
        "evict paces itself at the fixed 20% duty cycle: {why}; --duty-cycle 20 keeps this pace \
         without the warning"
    )
}

/// The progress bar's line for the adaptive pace.
pub(crate) fn pace_status(p: &PaceStatus) -> String {
    let d = p.decision;
    let mut text = match d.state {
        State::Full => "unpaced (foreground idle)".to_owned(),
        State::Paced => format!("paced at {:.0}%", d.duty),
        State::BackingOff(r) => format!("backed off to {:.0}%: {}", d.duty, backoff_reason(r)),
    };
    if let Some(rate) = p.floor_rows_per_second {
        text.push_str(&format!(
            ", at least {rate:.0} rows/s ({INSERT_MULTIPLE:.0}x the inserts)"
        ));
    }
    text
}

/// The summary's line for the pace: fixed, or the adaptive pace's time in each state, its
/// back-offs by reason and the insert-rate floor.
pub(crate) fn pace_summary(r: &PaceReport) -> String {
    if r.mode != "adaptive" {
        let duty = r.duty_cycle.unwrap_or(20);
        let pause = r
            .pause_seconds
            .map(|p| {
                format!(
                    " + a {} pause after each batch",
                    ttl_text(std::time::Duration::from_secs_f64(p))
                )
            })
            .unwrap_or_default();
        return match &r.fallback {
            // The reason names the role as the server has it.
            Some(why) => format!("fixed {duty}% duty cycle ({})", escape_controls(why)),
            None => format!("fixed {duty}% duty cycle{pause}"),
        };
    }
    let mut text = format!(
        "adaptive: {} unpaced (foreground idle), {} paced, {} backed off",
        human_secs(r.full_seconds),
        human_secs(r.paced_seconds),
        human_secs(r.backoff_seconds)
    );
    let why: Vec<String> = Reason::ALL
        .iter()
        .filter_map(|reason| {
            let n = r.backoffs_by_reason.get(reason).copied().unwrap_or(0);
            (n > 0).then(|| format!("{n}x {}", backoff_reason(*reason)))
        })
        .collect();
    if !why.is_empty() {
        text.push_str(&format!(" ({})", why.join(", ")));
    }
    if let Some(rate) = r.insert_rate {
        text.push_str(&format!(
            "; table gaining {rate:.0} rows/s, removal kept at >= {INSERT_MULTIPLE:.0}x that \
             and <= {PRESENT_MULTIPLE:.0}x while others are active"
        ));
        let mut adjusted = Vec::new();
        if r.floor_cut_seconds > 0.0 {
            adjusted.push(format!("{} of rests cut", human_secs(r.floor_cut_seconds)));
        }
        if r.ceiling_added_seconds > 0.0 {
            adjusted.push(format!(
                "{} of rests added",
                human_secs(r.ceiling_added_seconds)
            ));
        }
        if !adjusted.is_empty() {
            text.push_str(&format!(" ({})", adjusted.join(", ")));
        }
    }
    text
}

// evict's refusals: the reasons it stops before any change (and its one internal failure), worded
// here from what the command found. The command attaches the exit code (`crate::exit::fail`), and
// `error_line` prints the line; names are escaped here like everywhere else in this layer.

/// A flag a table that Citus manages does not support.
pub(crate) fn refused_on_citus(flag: &str, table: &Table, layout: &Layout) -> String {
    format!(
        "{flag} is not supported on table {}, which Citus manages ({}); evict it without {flag}",
        table.display(),
        layout.describe()
    )
}

/// What evict tells the operator on stderr, beside its summary.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// A run a signal interrupted, under cron (no summary printed): what it did before it stopped.
    Interrupted { rows_evicted: u64, batches: u64 },
}

/// Say `event` on stderr, in one line.
pub(crate) fn tell(event: Event) {
    match event {
        Event::Interrupted {
            rows_evicted,
            batches,
        } => super::say(format_args!(
            "idemctl: evict interrupted by a signal after {rows_evicted} rows in {batches} batches; the next run continues"
        )),
    }
}

/// The pace could not be set up (on a Citus worker, when `worker` names it).
pub(crate) fn pace_setup_failed(worker: Option<&str>) -> String {
    match worker {
        Some(w) => format!("failed to set up evict's pace on worker {w}"),
        None => "failed to set up evict's pace".to_owned(),
    }
}

/// A reference key table that a distributed table references with ON DELETE NO ACTION / RESTRICT:
/// evict cannot leave the keys still referenced out of its batches there.
pub(crate) fn reference_table_referenced_by_distributed(
    table: &Table,
    key: &crate::report::rows::DistributedReference,
) -> String {
    format!(
        "foreign key {} of distributed table {} references {} (a Citus reference table) with ON DELETE {}: evict would have to leave out the keys it still references, and Citus cannot plan a DELETE on a reference table that reads a distributed table; nothing was changed: distribute {} by the tenant, colocated with {} (evict then leaves those keys on each shard), or make the foreign key ON DELETE CASCADE",
        sanitize(&key.name),
        sanitize(&key.referencing_table),
        table.display(),
        key.on_delete,
        table.display(),
        sanitize(&key.referencing_table),
    )
}

/// A shard of a Citus table that lost the expiry index evict's batches walk (dropped on `worker`).
pub(crate) fn shard_without_expiry_index(shard: i64, table: &Table, worker: &str) -> String {
    format!(
        "shard {shard} of {} on worker {worker} has no expiry index (it was dropped on the worker), so every evict batch there would scan the shard whole; nothing was changed: recreate the index on the coordinator, which Citus creates on every shard (`idemctl check` prints the statements)",
        table.display()
    )
}

/// A shard of a Citus table without an expiry index (on `worker`) that lost its copy of the
/// unique index evict walks instead.
pub(crate) fn shard_without_walk_index(shard: i64, table: &Table, worker: &str) -> String {
    format!(
        "shard {shard} of {} on worker {worker} has neither an expiry index nor a unique index of plain NOT NULL columns to walk (dropped on the worker), so every evict batch there would scan the shard whole; nothing was changed: drop and create that index again on the coordinator, which Citus then creates on every shard",
        table.display()
    )
}

/// A role that lacks on a shard of a Citus table (on `worker`) grants evict needs, which it has
/// on the coordinator's table.
pub(crate) fn shard_grants_missing(
    role: &str,
    lacks: &[&str],
    shard: i64,
    table: &Table,
    worker: &str,
) -> String {
    format!(
        "permission denied: role {} lacks {} on shard {shard} of {} on worker {worker}, which evict needs; nothing was changed: grant it on the coordinator, which Citus passes on to every shard: GRANT {} ON {} TO {};",
        sanitize(role),
        lacks.join(", "),
        table.display(),
        lacks.join(", "),
        table.quoted,
        sanitize(&quote_ident(role))
    )
}

/// A Citus worker where the role may not call `function`, which evict's durable points call there.
pub(crate) fn worker_durable_point_refused(role: &str, function: &str, worker: &str) -> String {
    format!(
        "permission denied: role {} may not execute {function} on worker {worker}, which evict calls there once a second to make its deletes durable; nothing was changed: grant it on that worker (function grants stay in the database where they are made): GRANT EXECUTE ON FUNCTION {function} TO {};",
        sanitize(role),
        sanitize(&quote_ident(role))
    )
}

/// --vacuum for a role that may not vacuum `relations` (the first one owned by `owner`).
pub(crate) fn vacuum_denied(relations: &[&str], owner: &str) -> String {
    let relations: Vec<String> = relations.iter().map(|r| sanitize(r)).collect();
    format!(
        "evict --vacuum: this role may not VACUUM {} (only the owner, a superuser or the \
         database's owner may), nothing was changed; run without --vacuum, or as the \
         owner: GRANT {} TO <this role>",
        relations.join(", "),
        sanitize(&quote_ident_if_needed(owner))
    )
}

/// --max-wal-rate on a server that does not give its WAL position (`error`: why reading it failed).
pub(crate) fn no_wal_position(error: &anyhow::Error) -> String {
    format!(
        "--max-wal-rate needs the server's WAL position (pg_current_wal_insert_lsn()), which this \
         server does not give ({error:#}); run without --max-wal-rate, or cap rows with --max-rate"
    )
}

/// --max-replica-lag for a role that cannot see the replicas' replay positions.
pub(crate) fn replica_positions_hidden(role: &str) -> String {
    format!(
        "permission denied: --max-replica-lag reads the replicas' replay positions from \
         pg_stat_replication, which role {} cannot see (it needs the privileges of \
         pg_read_all_stats); grant them with: GRANT pg_monitor TO {};",
        sanitize(role),
        sanitize(&quote_ident(role))
    )
}

/// A partition --drop-partitions failed to drop (the name as the catalog holds it).
pub(crate) fn partition_not_dropped(name: &str) -> String {
    format!("failed to drop partition {name}")
}

/// The context of a partition's drop whose COMMIT met a lost connection: the server may have
/// committed it before the connection went, so the partition may be gone.
pub(crate) fn partition_drop_unknown(name: &str) -> String {
    format!("the drop of partition {name} may or may not have committed")
}

/// --drop-partitions on a table not range-partitioned on its expiry (`how`: how it is partitioned,
/// if at all).
pub(crate) fn drop_partitions_layout(table: &Table, how: Option<&str>) -> String {
    let how = how.map_or_else(
        || "is not partitioned".to_owned(),
        |definition| format!("is partitioned by {}", sanitize(definition)),
    );
    format!(
        "table {} {how}; --drop-partitions needs a table range-partitioned on expires_at or created_at",
        table.display()
    )
}

/// --drop-partitions on a table without the optional in_progress index its proof needs.
pub(crate) fn drop_partitions_without_stuck_index(table: &Table) -> String {
    format!(
        "--drop-partitions proves a partition holds no in_progress key with the optional \
         in_progress index, which table {} lacks (without it the proof would scan the partition \
         while the whole table is locked); create it with: {}",
        table.display(),
        table.stuck_index_fix
    )
}

/// --drop-partitions for a role that does not own the table.
pub(crate) fn drop_partitions_not_owner(role: &str, table: &Table) -> String {
    format!(
        "permission denied: role {} does not own table {} (nor belong to its owner role), which \
         DETACH PARTITION needs; run --drop-partitions as the owner, or evict without it",
        sanitize(role),
        table.display()
    )
}

/// The head of the line of a run that lost its connection: what is durable, what is not, and,
/// when a batch statement was under way (`in_flight`), that its end is unknown.
pub(crate) fn lost_connection(confirmed: u64, unconfirmed: u64, in_flight: bool) -> String {
    let mut text =
        format!("evict lost its connection: {confirmed} keys deleted and confirmed durable");
    if unconfirmed > 0 {
        text.push_str(&format!(
            ", {unconfirmed} more deleted since the last durable point (a crash or failover may \
             bring them back; the next run deletes them again)"
        ));
    }
    if in_flight {
        text.push_str("; the batch in flight may or may not have committed");
    }
    text
}

/// The line of a run whose smallest batch (one row) still exceeded statement_timeout.
pub(crate) fn smallest_batch_timed_out(t: crate::domain::StatementTimeout) -> String {
    format!(
        "a batch of one row exceeded statement_timeout ({}, set by {}) after the batches were \
         made smaller; nothing of it was deleted: raise --statement-timeout",
        humantime::format_duration(t.value),
        statement_timeout_set_by(t.set_by)
    )
}

/// What set the statement_timeout in force, as a message names it.
pub(crate) fn statement_timeout_set_by(set_by: crate::domain::SetBy) -> &'static str {
    use crate::domain::SetBy;
    match set_by {
        SetBy::Flag => "--statement-timeout",
        SetBy::Role => "ALTER ROLE ... SET statement_timeout",
        SetBy::Database => "ALTER DATABASE ... SET statement_timeout",
        SetBy::RoleInDatabase => "ALTER ROLE ... IN DATABASE ... SET statement_timeout",
        SetBy::Client => "the connection's options (PGOPTIONS or options=-c)",
        SetBy::Server => "the server's configuration",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::evict::Vacuumed;

    #[test]
    fn the_vacuum_line_escapes_relation_names_and_server_messages() {
        let v = VacuumReport {
            min_rows: 1,
            ran: true,
            skipped: None,
            relations: vec![Vacuumed {
                relation: "public.\"a\nb\u{1b}[2J\"".into(),
                seconds: 0.0,
                error: Some("relation \"a\nb\u{1b}[2J\" is gone".into()),
            }],
            seconds: 0.0,
        };
        let line = vacuum_summary(&v);
        assert_eq!(
            line,
            "VACUUM (ANALYZE) of 0 of 1 relation in 0s; public.\"a\\nb\\x1b[2J\" failed: \
             relation \"a\\nb\\x1b[2J\" is gone"
        );
        assert_eq!(vacuum_warning(&v), format!("evict --vacuum: {line}"));
    }

    #[test]
    fn the_replica_lines_escape_the_replica_name() {
        let worst = Lagging {
            name: "r\u{1b}[2J\nx".into(),
            lag_seconds: 90.0,
            behind_bytes: 2048,
        };
        let lagging = "replica r\\x1b[2J\\nx is 1m 30s behind (2.0 KiB of WAL not replayed)";
        assert_eq!(
            replica_pause(&worst, 60.0),
            format!("paused: {lagging} (limit 1m)")
        );
        let gave_up = GaveUp {
            worst,
            waited_seconds: 300.0,
        };
        assert_eq!(
            replica_gave_up(&gave_up),
            format!(
                "stopped before the backlog was drained: {lagging} after waiting 5m; the next run \
                 continues"
            )
        );
    }
}

//! reclaim's reports for people: the preview (`--dry-run`, `--plan`) with its listing and notes,
//! the summary of a writing run with the plan rows it left alone, and the filters as a summary
//! names them. Every value from the table is escaped here, where it is printed.

use std::path::Path;

use crate::domain::ReclaimAction;
use crate::output::{Doc, escape_controls, human_secs, key_cells, key_columns, sanitize};
use crate::report::reclaim::{
    BatchEnd, BatchFailed, Candidate, LeftAlone, PlanProblem, PreviewReport, ReclaimReport,
    action_name,
};
use crate::report::rows::Layout;
use crate::report::rows::{Capped, DatabaseIdentity};
use crate::report::rows::{Filter, Scope};
use crate::report::table::Table;

/// The reclaim session on a Citus worker (`host:port`) could not be set up.
pub(crate) fn worker_session_unset(worker: &str) -> String {
    format!("failed to set up the reclaim session on worker {worker}")
}

/// The preview: what would be reclaimed, the keys listed, and what the listing leaves out.
pub(crate) fn preview(r: &PreviewReport) -> Doc {
    let mut doc = Doc::default();
    doc.fields(None, preview_fields(r));
    if !r.rows.is_empty() {
        // Keys of a table without a tenant column have none to show.
        let scope = r.rows.iter().find_map(|c| c.scope.as_ref());
        let cells = r.rows.iter().map(|c| candidate_cells(scope, c)).collect();
        doc.rows(None, &key_columns(scope, &CANDIDATE_COLUMNS), cells);
        preview_notes(&mut doc, r);
    }
    if let Some(p) = &r.plan_file {
        let p = sanitize(p);
        doc.text(format!(
            "plan written to {p} ({} keys); review it, then run: idemctl reclaim --apply {p}",
            r.rows.len()
        ));
    }
    doc
}

fn preview_notes(doc: &mut Doc, r: &PreviewReport) {
    let listed = r.rows.len();
    let at_limit = r
        .limit
        .is_some_and(|l| u64::try_from(listed).is_ok_and(|n| n == l));
    if r.listing_truncated && at_limit {
        doc.text(format!(
            "listed the oldest {listed}: as many as --limit {listed} lets a run take"
        ));
    } else if r.listing_truncated && r.plan_file.is_some() {
        doc.text(format!(
            "the plan holds the oldest {listed} keys only; apply it, then make a new plan for the rest"
        ));
    } else if r.listing_truncated {
        doc.text(format!(
            "listed the oldest {listed} keys only; a run reclaims more, batch by batch"
        ));
    }
    doc.text("a key whose owner is still alive (its row locked) is listed but skipped at run time");
}

fn preview_fields(r: &PreviewReport) -> Vec<(String, String)> {
    let would = match r.limit {
        Some(l) => format!("{} (a run with --limit {l} stops at {l})", r.would_reclaim),
        None => r.would_reclaim.to_string(),
    };
    let mut rows = vec![
        ("table".to_owned(), sanitize(&r.table)),
        (
            "held longer than".to_owned(),
            format!("{} (database clock)", human_secs(r.older_than_seconds)),
        ),
    ];
    if let Some(only) = filter_text(&r.filter) {
        rows.push(("only".to_owned(), only));
    }
    rows.extend([
        ("action".to_owned(), preview_action(r)),
        ("would reclaim".to_owned(), would),
    ]);
    if let Some(body) = &r.response_body {
        // Several lines, as inspect shows a body; escaped once, for the terminal.
        let text = crate::output::json_text::pretty(
            &body.to_string(),
            crate::output::json_text::Escape::Terminal,
        );
        rows.push(("stored body".to_owned(), text));
    }
    rows
}

/// The filters for a summary (None without any): `api_key_id t42, path /v1/payments, method POST`.
pub(crate) fn filter_text(f: &Filter) -> Option<String> {
    let parts: Vec<String> = [
        ("api_key_id", &f.api_key_id),
        ("path", &f.path),
        ("method", &f.method),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.as_deref().map(|v| format!("{name} {}", sanitize(v))))
    .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// The preview's columns after the key's.
const CANDIDATE_COLUMNS: [&str; 5] = ["method", "path", "held since", "from", "age"];

fn candidate_cells(header: Option<&Scope>, c: &Candidate) -> Vec<String> {
    let mut cells = key_cells(header, c.scope.as_ref(), Some(&c.key));
    cells.extend([
        c.request_method
            .as_deref()
            .map_or_else(|| "-".to_owned(), sanitize),
        c.request_path
            .as_deref()
            .map_or_else(|| "-".to_owned(), sanitize),
        crate::output::at(c.held_since),
        c.held_since_column.to_owned(),
        human_secs(c.age_seconds),
    ]);
    cells
}

fn preview_action(r: &PreviewReport) -> String {
    match r.action {
        None => "none allowed: the profile lists no reclaim action (set actions in the mapping); this preview only lists the keys".to_owned(),
        Some(ReclaimAction::Delete) => "delete (the retry runs afresh)".to_owned(),
        Some(ReclaimAction::Release) => {
            "release (lock cleared; the retry resumes from its recovery point)".to_owned()
        }
        Some(ReclaimAction::Fail) => format!(
            "fail (completed with status {}; the retry gets it replayed)",
            r.status
        ),
    }
}

/// The summary of a sweep or an apply.
pub(crate) fn summary(r: &ReclaimReport) -> Doc {
    let capped = |c: &Option<Capped>| c.map_or_else(|| "-".to_owned(), |c| c.to_string());
    let action = match (r.action, r.response_status) {
        (ReclaimAction::Fail, Some(s)) => match r.keep_failed_for_seconds {
            Some(k) if k > 0.0 => format!(
                "fail (completed with status {s}, kept at least {} from now)",
                human_secs(k)
            ),
            Some(_) => format!("fail (completed with status {s}, expires_at kept)"),
            None => format!("fail (completed with status {s}, kept until created_at + TTL)"),
        },
        (ReclaimAction::Release, _) => "release".to_owned(),
        _ => "delete".to_owned(),
    };
    let mut fields = vec![
        ("table".to_owned(), sanitize(&r.table)),
        ("action".to_owned(), action),
    ];
    if let Some(only) = filter_text(&r.filter) {
        fields.push(("only".to_owned(), only));
    }
    fields.extend([
        ("end reason".to_owned(), r.end_reason.as_str().to_owned()),
        ("keys reclaimed".to_owned(), r.rows_reclaimed.to_string()),
        (
            "skipped (held by a live owner)".to_owned(),
            capped(&r.skipped_live_owner),
        ),
    ]);
    if let Some(p) = &r.plan_file {
        fields.push(("plan".to_owned(), sanitize(p)));
        fields.push((
            "plan rows left alone".to_owned(),
            r.left_alone.len().to_string(),
        ));
    } else {
        fields.push(("stuck keys left".to_owned(), capped(&r.stuck_left)));
    }
    fields.push(("batches".to_owned(), r.batches.to_string()));
    fields.push(("elapsed".to_owned(), format!("{:.2}s", r.elapsed_seconds)));
    let mut d = Doc::default();
    d.fields(None, fields);
    if !r.left_alone.is_empty() {
        let scope = r.left_alone.iter().find_map(|l| l.scope.as_ref());
        let rows = r
            .left_alone
            .iter()
            .map(|l| left_alone_cells(scope, l))
            .collect();
        d.rows(
            Some("Plan rows left alone:"),
            &key_columns(scope, &["why"]),
            rows,
        );
    }
    d
}

fn left_alone_cells(header: Option<&Scope>, l: &LeftAlone) -> Vec<String> {
    let why = match l.reason.as_str() {
        "gone" => "gone: deleted since the plan".to_owned(),
        "filtered" => "does not match --api-key-id, --path or --method".to_owned(),
        "completed" => "completed since the plan".to_owned(),
        "changed" => "taken again since the plan (locked_at or created_at changed)".to_owned(),
        "too_young" => "no longer past the plan's cutoff".to_owned(),
        "held" => "held by a live owner (row locked)".to_owned(),
        other => format!(
            "{} (state {})",
            sanitize(other),
            sanitize(l.state.as_deref().unwrap_or("-"))
        ),
    };
    let mut cells = key_cells(header, l.scope.as_ref(), Some(&l.key));
    cells.push(why);
    cells
}

// reclaim's refusals, worded here from what the command found (the command attaches the exit
// code): the action, the flags against the plan, the files it reads and writes, the indexes it
// needs. Paths, names and values are escaped here.

/// A writing run with neither --yes nor a terminal to ask on.
pub(crate) const NO_TERMINAL_TO_CONFIRM: &str = "refusing to reclaim without confirmation: there \
     is no terminal to ask on; review `idemctl reclaim --dry-run`, then pass --yes";

/// The operator answered no.
pub(crate) const NOT_CONFIRMED: &str = "reclaim not confirmed; nothing was changed";

/// What a writing run asks before it changes anything.
pub(crate) struct Asked<'a> {
    pub(crate) table: &'a Table,
    pub(crate) action: ReclaimAction,
    pub(crate) status: i32,
    pub(crate) filter: &'a Filter,
    pub(crate) older_than: f64,
    /// How many keys the run would take.
    pub(crate) count: AskedCount,
}

/// How many keys a confirmation question names.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AskedCount {
    /// Every stuck key its filters match (counted up to a cap).
    Stuck(crate::report::rows::Capped),
    /// `--limit` of them.
    UpTo {
        limit: u64,
        of: crate::report::rows::Capped,
    },
    /// The rows of an applied plan.
    Planned(usize),
}

/// `42`, `up to 10 of 42`, `the plan's 5`.
fn asked_count(count: AskedCount) -> String {
    match count {
        AskedCount::Stuck(n) => n.to_string(),
        AskedCount::UpTo { limit, of } => format!("up to {limit} of {of}"),
        AskedCount::Planned(n) => format!("the plan's {n}"),
    }
}

/// The confirmation question of a writing run.
pub(crate) fn question(a: &Asked<'_>) -> String {
    let what = match a.action {
        ReclaimAction::Delete => "delete".to_owned(),
        ReclaimAction::Release => "release".to_owned(),
        ReclaimAction::Fail => format!("mark completed with status {}", a.status),
    };
    let only = filter_text(a.filter).map_or_else(String::new, |f| format!(" ({f})"));
    let one = match a.count {
        AskedCount::Stuck(c) => c.count == 1 && !c.at_least,
        AskedCount::Planned(n) => n == 1,
        AskedCount::UpTo { .. } => false,
    };
    format!(
        "reclaim: {what} {} in_progress key{} of {}{only} held longer than {}?",
        asked_count(a.count),
        if one { "" } else { "s" },
        a.table.display(),
        human_secs(a.older_than)
    )
}

/// The context of a plan file that could not be written.
pub(crate) fn plan_unwritten(path: &Path) -> String {
    format!("failed to write plan {}", shown_path(path))
}

/// A filter value for an error line, cut after 80 characters, its control characters shown as
/// escapes (the error line would turn a newline into a blank, hiding what is wrong).
fn shown_value(v: &str) -> String {
    let cut: String = v.chars().take(80).collect();
    let more = if cut.len() < v.len() { "..." } else { "" };
    format!("\"{}{more}\"", escape_controls(&cut))
}

fn shown_path(path: &Path) -> String {
    sanitize(&path.display().to_string())
}

/// A table without an in-flight marker: reclaim refuses to run.
pub(crate) fn no_in_flight_marker(table: &Table) -> String {
    format!(
        "table {} has no in-flight marker (profile {} maps no in_flight): no key is ever in flight, so there is nothing to reclaim; nothing was changed",
        table.display(),
        table.profile.name
    )
}

/// A dry run on a table without an in-flight marker.
pub(crate) fn nothing_in_flight(table: &Table) -> Doc {
    let mut doc = Doc::default();
    doc.text(format!(
        "nothing to reclaim: table {} has no in-flight marker (profile {} maps no in_flight), so no key is ever in flight",
        table.display(),
        table.profile.name
    ));
    doc
}

/// A profile whose mapping lists no reclaim action.
pub(crate) fn no_safe_action(table: &Table) -> String {
    format!(
        "profile {} has no safe reclaim action for table {}: its mapping lists none (set actions in the config file)",
        table.profile.name,
        table.display()
    )
}

/// An --action the table's profile does not allow.
pub(crate) fn action_unfit(chosen: ReclaimAction, table: &Table) -> String {
    let allowed: Vec<&str> = table
        .profile
        .actions
        .iter()
        .map(|a| action_name(*a))
        .collect();
    format!(
        "--action {} does not fit table {} (profile {}): it allows {}",
        action_name(chosen),
        table.display(),
        table.profile.name,
        allowed.join(", ")
    )
}

/// What is wrong with a filter value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BadFilter {
    Empty,
    TooLong { max: usize },
    Control,
}

/// A filter flag's value refused before any change.
pub(crate) fn bad_filter(flag: &str, value: &str, bad: BadFilter) -> String {
    let why = match bad {
        BadFilter::Empty => {
            "is empty: give the value as the API stores it, or drop the flag".to_owned()
        }
        BadFilter::TooLong { max } => format!(
            "is {} bytes long: at most {max} are accepted (no server takes a longer request line)",
            value.len()
        ),
        BadFilter::Control => format!(
            "{} holds a control character (a newline, tab or the like), which no stored value has",
            shown_value(value)
        ),
    };
    format!("{flag} {why}; nothing was changed")
}

/// A --method that is not an HTTP token.
pub(crate) fn not_a_method(method: &str) -> String {
    format!(
        "--method {} is not an HTTP method: a method is a token of letters, digits and !#$%&'*+-.^_`|~ (RFC 9110), compared exactly with the stored one (POST, not post)",
        shown_value(method)
    )
}

/// --older-than under the floor, without --force.
pub(crate) fn older_than_under_floor(older_than: f64) -> String {
    format!(
        "--older-than {} is under 1m: a key held that briefly may belong to a request still \
         running, which would then execute twice; use a value above the longest handler \
         duration including downstream timeouts, or pass --force to override",
        human_secs(older_than)
    )
}

/// A flag only --action fail takes.
pub(crate) fn only_for_fail(flag: &str) -> String {
    format!("{flag} only applies to --action fail; drop it or pass --action fail")
}

/// --keep-failed-for on a table without an expiry column, where it cannot apply.
pub(crate) fn keep_failed_without_expiry(table: &Table) -> String {
    format!(
        "--keep-failed-for does not apply to table {} (profile {}): it has no expiry column to move, so a failed key goes with the first evict after {} + TTL; drop --keep-failed-for",
        table.display(),
        table.profile.name,
        sanitize(&table.profile.created_at)
    )
}

/// The warning of --action fail on a table whose keys expire a TTL after creation: a stored error
/// lives only until then, so a key stuck longer than the TTL loses it at the next evict.
pub(crate) fn failed_keys_expire_by_ttl(table: &Table, ttl: Option<std::time::Duration>) -> String {
    let created = sanitize(&table.profile.created_at);
    let ttl = ttl.map_or_else(
        || "the TTL".to_owned(),
        |t| format!("the TTL ({})", human_secs(t.as_secs_f64())),
    );
    format!(
        "table {} has no expiry column: a failed key is kept only until {created} + {ttl}, so a key created longer ago than that goes with the next evict, and a retry after it runs as a new request",
        table.display()
    )
}

/// Without --action, a flag only --action fail takes, on a table whose default action is another.
pub(crate) fn only_for_fail_by_default(
    flag: &str,
    table: &Table,
    default: ReclaimAction,
) -> String {
    format!(
        "{flag} only applies to --action fail, and the default action on table {} (profile {}) is {}; drop it or pass --action fail",
        table.display(),
        table.profile.name,
        action_name(default)
    )
}

pub(crate) fn body_file_unreadable(path: &Path, error: &std::io::Error) -> String {
    format!("cannot read --body-file {}: {error}", shown_path(path))
}

pub(crate) fn body_file_not_json(path: &Path, error: &serde_json::Error) -> String {
    format!(
        "--body-file {} is not valid JSON ({error}); the stored body must be a JSON object",
        shown_path(path)
    )
}

pub(crate) fn body_file_not_object(path: &Path, kind: &str) -> String {
    format!(
        "--body-file {} holds a JSON {kind}, but the stored response body must be a JSON object",
        shown_path(path)
    )
}

pub(crate) fn plan_unreadable(path: &Path, error: &std::io::Error) -> String {
    format!("cannot read plan {}: {error}", shown_path(path))
}

/// A plan file idemctl cannot use (`why`: what is wrong with it).
pub(crate) fn plan_invalid(path: &Path, why: &PlanProblem) -> String {
    let why = plan_problem(why);
    format!(
        "plan {} is not a valid reclaim plan ({why}); nothing was changed, make a new one with --plan",
        shown_path(path)
    )
}

/// Why a plan file is refused, in words.
fn plan_problem(why: &PlanProblem) -> String {
    match why {
        PlanProblem::Unparsed(e) => e.clone(),
        PlanProblem::Version { found, read } => format!(
            "schema_version {}, this idemctl reads {}",
            found.map_or_else(|| "missing".to_owned(), |v| v.to_string()),
            read.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        PlanProblem::OlderThan => "older_than_seconds must be a positive number".to_owned(),
        PlanProblem::Status(s) => format!("status {s} is not an HTTP status"),
        PlanProblem::FailWithoutBody => "action fail needs a JSON object as body".to_owned(),
        PlanProblem::BodyWithoutFail => "actions delete and release take no body".to_owned(),
        PlanProblem::KeyTwice {
            key,
            api_key_id: Some(t),
        } => format!(
            "key {} of api_key_id {} is listed twice",
            sanitize(key),
            sanitize(t)
        ),
        PlanProblem::KeyTwice {
            key,
            api_key_id: None,
        } => format!("key {} is listed twice", sanitize(key)),
        PlanProblem::RowTenantUnfit {
            table,
            key,
            api_key_id,
        } => plan_row_tenant_unfit(table, key, api_key_id.as_deref()),
    }
}

/// A plan row whose tenant does not fit the table: one (`api_key_id` Some) on a table without a
/// tenant column, none on a table with one, or one that is not a scope of the table (or not the
/// row's `scope` as one text).
pub(crate) fn plan_row_tenant_unfit(table: &Table, key: &str, api_key_id: Option<&str>) -> String {
    match (api_key_id, &table.profile.tenant) {
        (Some(t), columns) if !columns.is_empty() => format!(
            "the row of key {} has api_key_id {}, which is not a scope of table {} ({}) written as its scope field holds it",
            sanitize(key),
            shown_value(t),
            table.display(),
            sanitize(&columns.join(", "))
        ),
        (Some(t), _) => format!(
            "the row of key {} has api_key_id {}, but table {} (profile {}) has no tenant column",
            sanitize(key),
            shown_value(t),
            table.display(),
            table.profile.name
        ),
        (None, column) => format!(
            "the row of key {} has no api_key_id, but table {} has a tenant column ({})",
            sanitize(key),
            table.display(),
            sanitize(&column.join(", "))
        ),
    }
}

/// Under --apply, a filter flag that contradicts the plan's own filter.
pub(crate) fn filter_differs(flag: &str, given: &str, planned: &str) -> String {
    format!(
        "{flag} {} differs from the plan's filter {}: its rows were chosen by that one; drop {flag}, or make a new plan with it; nothing was changed",
        shown_value(given),
        shown_value(planned)
    )
}

/// Under --apply, a flag that says otherwise than the plan.
pub(crate) fn flag_differs_from_plan(flag: &str) -> String {
    format!(
        "{flag} differs from the plan: --apply takes action, status, body, cutoff and \
         --keep-failed-for from the plan file; drop {flag}, or make a new plan with it"
    )
}

/// The warning of --allow-scan on a table without the in_progress index.
pub(crate) fn scanning_for_stuck_keys(table: &Table) -> String {
    format!(
        "table {} has no index on in_progress keys: reading the whole table (each statement bounded by --statement-timeout)",
        table.display()
    )
}

/// A table without the in_progress index, without --allow-scan.
pub(crate) fn no_stuck_index(table: &Table) -> String {
    format!(
        "table {} has no index on in_progress keys, so finding stuck keys means reading the \
         whole table; create it with: {} (its cost to the API: sql/maintenance_indexes.sql), \
         or pass --allow-scan",
        table.display(),
        table.stuck_index_fix
    )
}

/// --plan or --apply on a table whose scope columns allow NULL and no unique index keeps a key
/// unique under a NULL scope.
pub(crate) fn nullable_scope(table: &Table, columns: &[String]) -> String {
    let columns: Vec<String> = columns.iter().map(|c| sanitize(c)).collect();
    format!(
        "table {} has scope columns that allow NULL ({}) and no unique index that keeps a key unique under a NULL scope, so a plan row could name several rows: --plan and --apply refuse; reclaim without a plan (--dry-run, then --yes) takes such keys where they are, or make the unique index NULLS NOT DISTINCT (PostgreSQL 15+) or the columns NOT NULL",
        table.display(),
        columns.join(", ")
    )
}

/// --apply on a table without the index that finds plan rows.
pub(crate) fn no_identity_index(table: &Table) -> String {
    format!(
        "table {} has no index on {}, so plan rows cannot be found without a scan; create it with: {}",
        table.display(),
        table.identity_label(),
        table.lookup_index_fix
    )
}

/// A Citus reference or local table whose rows the batches cannot name by their identity (no
/// unique index on exactly the identity columns, or a partitioned table).
pub(crate) fn no_identity_on_citus(table: &Table, layout: &Layout) -> String {
    format!(
        "table {} is {}: Citus changes its rows only when they are named by their identity {}, which needs a unique index on exactly those columns on a table that is not partitioned; nothing was changed: create it with: {}",
        table.display(),
        layout.describe(),
        table.identity_label(),
        table.identity_index_fix
    )
}

/// A plan made for another table.
pub(crate) fn plan_for_another_table(path: &Path, planned: &str, table: &Table) -> String {
    let planned = sanitize(planned);
    format!(
        "plan {} was made for table {planned}, not {}; pass --table {planned} or make a new plan; nothing was changed",
        shown_path(path),
        table.display()
    )
}

/// A plan that does not say which database it was made on.
pub(crate) fn plan_without_database(path: &Path) -> String {
    format!(
        "plan {} does not record which database it was made on; make a new one with --plan; nothing was changed",
        shown_path(path)
    )
}

/// A plan made on another database.
pub(crate) fn plan_for_another_database(
    path: &Path,
    made_on: &DatabaseIdentity,
    here: &DatabaseIdentity,
) -> String {
    format!(
        "plan {} was made on database {} of cluster {}, not on {} of cluster {}; connect to that database or make a new plan; nothing was changed",
        shown_path(path),
        sanitize(&made_on.name),
        sanitize(&made_on.system_identifier),
        sanitize(&here.name),
        sanitize(&here.system_identifier)
    )
}

pub(crate) fn archive_unopened(path: &Path, error: &std::io::Error) -> String {
    format!(
        "--archive {}: cannot open it for appending ({error}); nothing was changed",
        shown_path(path)
    )
}

pub(crate) fn archive_unwritten(path: &Path, error: &std::io::Error) -> String {
    format!(
        "--archive {}: cannot write it ({error}); the batch was rolled back",
        shown_path(path)
    )
}

pub(crate) fn archive_commit_unwritten(
    path: &Path,
    error: &std::io::Error,
    keys: usize,
    total: u64,
) -> String {
    format!(
        "--archive {}: cannot write it ({error}); the batch of {keys} key{} committed, and its key \
         lines are in the archive without their commit line; {total} key{} reclaimed in all",
        shown_path(path),
        if keys == 1 { "" } else { "s" },
        if total == 1 { "" } else { "s" }
    )
}

/// The warning when the archive ended in a torn line (a write cut short by a crash).
pub(crate) fn archive_tail_set_aside(path: &Path, aside: &Path, bytes: u64) -> String {
    format!(
        "--archive {} ended in an incomplete line ({bytes} bytes, a write cut short); moved it to \
         {} and continued after the last complete line",
        shown_path(path),
        shown_path(aside)
    )
}

/// --apply on a Citus table not distributed by its tenant column.
pub(crate) fn apply_not_by_tenant(table: &Table, layout: &Layout) -> String {
    if matches!(layout, Layout::SingleShard) {
        return format!(
            "reclaim --apply sends each plan row to the shard that holds its tenant by the table's distribution column, but {} is {}, which has none; nothing was changed: run the sweep (reclaim without --apply), which works on its one shard",
            table.display(),
            layout.describe()
        );
    }
    format!(
        "reclaim --apply sends each plan row to the shard that holds its tenant, but {} is {}, not by its tenant column; nothing was changed: run the sweep (reclaim without --apply), which works shard by shard whatever the column",
        table.display(),
        layout.describe()
    )
}

/// A plan row's shard with no active placement (a shard move may be under way).
pub(crate) fn shard_unplaced(shard: i64, table: &Table) -> String {
    format!(
        "shard {shard} of {} has no active placement in the coordinator's metadata (a shard move may be under way); nothing was changed, try again",
        table.display()
    )
}

/// The line of a writing run that a batch ended: what failed, what the earlier batches did, and
/// what to do.
pub(crate) fn batch_failed(f: &BatchFailed) -> String {
    let batch = f.batch;
    let (reclaimed, were) = match f.reclaimed {
        1 => ("1 key".to_owned(), "was"),
        n => (format!("{n} keys"), "were"),
    };
    match f.end {
        BatchEnd::HeldReference => format!(
            "batch {batch} was rolled back ({reclaimed} {were} reclaimed by earlier batches)"
        ),
        BatchEnd::LockTimeout { tries } => format!(
            "batch {batch} could not get a lock another session holds in {tries} tries (a live transaction holds a row it needs, or DDL holds the table) and was rolled back ({reclaimed} {were} reclaimed by earlier batches); run reclaim again"
        ),
        BatchEnd::Failed => format!(
            "batch {batch} failed and was rolled back ({reclaimed} {were} reclaimed by earlier batches); run reclaim again"
        ),
        BatchEnd::Lost { in_flight } => {
            let at_most = if in_flight == 1 {
                "1 key".to_owned()
            } else {
                format!("{in_flight} keys")
            };
            format!(
                "reclaim lost its connection: {reclaimed} reclaimed by batches whose commit the server confirmed; the batch in flight ({at_most} at most) may or may not have committed: run reclaim again, which takes what is still stuck"
            )
        }
        BatchEnd::CommittedUnread => format!(
            "batch {batch} committed, but the keys it took could not be read ({reclaimed} {were} reclaimed by earlier batches); see what is left with reclaim --dry-run"
        ),
        BatchEnd::LostBeforeCommit => format!(
            "reclaim lost its connection: {reclaimed} reclaimed by batches whose commit the server confirmed; the batch in flight never committed (its COMMIT was not sent, so the server rolls it back): run reclaim again, which takes what is still stuck"
        ),
        BatchEnd::SmallestTimedOut { statement_timeout } => format!(
            "a batch of one key exceeded statement_timeout ({}, set by --statement-timeout) after the batches were made smaller; nothing of it was reclaimed ({reclaimed} {were} reclaimed by earlier batches): raise --statement-timeout",
            humantime::format_duration(statement_timeout)
        ),
    }
}
